"""The metadata quorum's shell: RaftCore (actors/controller/quorum) running for real between brokers.

KRaft's "combined mode": a voter of `controller.quorum.voters` runs inside each voting broker's
process. This first shell step is behind `kray.metadata.quorum.enable` (false by default): the
controller's decisions still go to its own metadata log (actors/controller/metadata_log.py), and
main keeps its current shape while the quorum lands.

node.py is the shell (timer, Output carried out in order, requests in and out); transport.py the
connections to the peer voters; settings.py the switch and the voter set; wire.py maps the core's messages to and from Kafka's Vote / BeginQuorumEpoch / EndQuorumEpoch /
Fetch(__cluster_metadata-0) messages; store.py keeps the quorum-state file and the quorum log.
"""
