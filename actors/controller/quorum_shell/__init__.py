"""The metadata quorum's shell: RaftCore (actors/controller/quorum) running for real between brokers.

KRaft's "combined mode": a voter of `controller.quorum.voters` runs inside each voting broker's
process, and the controller's metadata log is the quorum's (actors/controller/quorum_metadata.py).
`kray start` on one machine runs a single voter.

node.py is the shell (timer, Output carried out in order, requests in and out); transport.py the
connections to the peer voters; settings.py the voter set and the timings; wire.py maps the core's messages to and from Kafka's Vote / BeginQuorumEpoch / EndQuorumEpoch /
Fetch(__cluster_metadata-0) messages; store.py keeps the quorum-state file and the quorum log.
"""
