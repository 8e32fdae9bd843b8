"""The metadata quorum: KRaft's Raft (KIP-595, KIP-996) as a pure core, for a quorum of controllers.

    from actors.controller.quorum import RaftCore, QuorumConfig, ElectionState

    core = RaftCore(node_id, QuorumConfig(voters=(1, 2, 3)), now_ms=now, rng=random.Random(),
                    election=persisted_state, log=durable_batches)
    out = core.handle(message, now) | core.tick(now) | core.propose(records, now)[1]
    # then, in this order: persist out.persist_state, truncate to out.truncate_to, append out.append,
    # send out.messages, apply out.committed (see output.py)

raft.py is the state machine, messages.py the RPCs, log.py the batches and the epoch index,
output.py what a step returns, config.py the settings.
"""
from .config import CHECK_QUORUM_TIMEOUT_FACTOR, QuorumConfig
from .log import Batch, LeaderChange, LogError, QuorumLog, VotersRecord
from .messages import (
    NO_LEADER, BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest, EndQuorumEpochResponse,
    EpochEndOffset, FetchRequest, FetchResponse, Message, VoteRequest, VoteResponse,
)
from .output import Accepted, ElectionState, LeaderAndEpoch, NotLeader, Output, QuorumStatus, Refused, ReplicaStatus
from .raft import QuorumStateError, RaftCore, Role

__all__ = [
    "CHECK_QUORUM_TIMEOUT_FACTOR", "QuorumConfig", "Batch", "LeaderChange", "LogError", "QuorumLog", "VotersRecord", "NO_LEADER",
    "BeginQuorumEpochRequest", "BeginQuorumEpochResponse", "EndQuorumEpochRequest", "EndQuorumEpochResponse",
    "EpochEndOffset", "FetchRequest", "FetchResponse", "Message", "VoteRequest", "VoteResponse", "Accepted",
    "ElectionState", "LeaderAndEpoch", "NotLeader", "Output", "QuorumStatus", "Refused", "ReplicaStatus", "QuorumStateError",
    "RaftCore", "Role",
]
