"""The metadata quorum's shell: RaftCore (actors/controller/quorum) running for real.

The controller's metadata log is the quorum's (actors/controller/quorum_metadata.py). Its voters
run (settings.py) either as one dedicated controller voter inside the controller actor (the
default: Kafka's process.roles=controller, without peers), or KRaft's "combined mode": a voter of
`controller.quorum.voters` inside each voting broker's process (configs/multinode.toml).

node.py is the shell (timer, Output carried out in order, requests in and out); transport.py the
connections to the peer voters; settings.py where the voters run and the timings; voter.py builds
a voter and the calls a controller makes of it; wire.py maps the core's messages to and from
Kafka's Vote / BeginQuorumEpoch / EndQuorumEpoch / Fetch(__cluster_metadata-0) messages; store.py
keeps the quorum-state file and the quorum log.
"""
