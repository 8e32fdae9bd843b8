"""The metadata quorum's shell: RaftCore (actors/controller/quorum) running for real between brokers.

KRaft's "combined mode": a voter of `controller.quorum.voters` runs inside each voting broker's
process. With `kray.metadata.quorum.enable` (configs/multinode.toml sets it) the controller's
metadata log is the quorum's (actors/controller/quorum_metadata.py); without it the controller
keeps its own file log (actors/controller/metadata_log.py), the shape the quorum replaces.

node.py is the shell (timer, Output carried out in order, requests in and out); transport.py the
connections to the peer voters; settings.py the switch and the voter set; wire.py maps the core's messages to and from Kafka's Vote / BeginQuorumEpoch / EndQuorumEpoch /
Fetch(__cluster_metadata-0) messages; store.py keeps the quorum-state file and the quorum log.
"""
