"""What the quorum core hands its shell: the Output of every step, the persisted election state,
the answer to a proposal, and a DescribeQuorum-like status.

The Output contract (the shell's half of the safety argument), in this order, before the next
call into the core:

1. `persist_state`: if not None, write it durably (Kafka's quorum-state file; fsync, rename);
2. `truncate_to`: if not None, durably cut the log at that offset (a batch boundary);
3. `append`: durably append these batches (fsync);
4. only then send `messages`, each (destination node id, message);
5. apply `committed` (batches now below the high watermark, in offset order) to the state
   machine; control batches carry a LeaderChange and are not the state machine's.

A vote must not leave before the vote is on disk, nor a fetch at a new offset before the records
below it are (the leader counts that offset toward the high watermark), nor a leader's records
before its own copy is (it counts itself). A crash between steps is safe: nothing that depended
on an unwritten step has left. Restart = RaftCore(election=<last persisted state>, log=<the
durable log>); the high watermark starts at 0 (or at a snapshot's offset), so `committed` replays
the log from there as it becomes known again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import ErrorCode

from .log import Batch
from .messages import Message


@dataclass(frozen=True)
class ElectionState:
    """The durable part of the quorum state (Kafka's QuorumStateData): the epoch, the leader known
    in it and the vote cast in it. One vote per epoch holds because this is written before the
    vote leaves."""
    epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None


@dataclass(frozen=True)
class LeaderAndEpoch:
    leader_id: int | None
    epoch: int


@dataclass
class Output:
    persist_state: ElectionState | None = None
    truncate_to: int | None = None
    append: list[Batch] = field(default_factory=list)
    messages: list[tuple[int, Message]] = field(default_factory=list)
    committed: list[Batch] = field(default_factory=list)
    leader: LeaderAndEpoch | None = None   # the leader (or epoch) this node knows changed to this

    def __bool__(self) -> bool:
        return bool(self.persist_state or self.truncate_to is not None or self.append or self.messages
                    or self.committed or self.leader)


@dataclass(frozen=True)
class Accepted:
    """A proposal the leader appended: it is committed when `committed` brings a batch with this
    base offset *and* this epoch; a batch of another epoch at that offset means it was lost (the
    leader was deposed before a majority had it), as Kafka's controller sees it."""
    epoch: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True)
class NotLeader:
    """Proposals go to the leader: leader_id is this node's best knowledge (None: unknown)."""
    leader_id: int | None
    epoch: int


@dataclass(frozen=True)
class Refused:
    """A voter change (add_voter / remove_voter) the leader did not take: Kafka's error for it
    (AddRaftVoter / RemoveRaftVoter), why, and the leader as this node knows it."""
    error: ErrorCode
    reason: str
    leader_id: int | None
    epoch: int


@dataclass(frozen=True)
class ReplicaStatus:
    replica_id: int
    log_end_offset: int          # -1: not fetched in this epoch
    last_fetch_ms: int | None
    last_caught_up_ms: int | None


@dataclass(frozen=True)
class QuorumStatus:
    """DescribeQuorum, as one node sees it; voters/observers are filled on the leader only."""
    node_id: int
    role: str
    epoch: int
    leader_id: int | None
    voted_id: int | None
    high_watermark: int
    log_end_offset: int
    voters: tuple[ReplicaStatus, ...] = ()
    observers: tuple[ReplicaStatus, ...] = ()
    # (a leader, the time in ms this node last had a fetch answered by it, by the clock its calls
    # carry), None if it never had: a new leader's predecessor, and how long it has been silent
    leader_heard: tuple[int, int] | None = None

    def majority_contact_ms(self, now_ms: int) -> int | None:
        """On a leader: the latest time by which a majority of the voters, this leader (at `now_ms`)
        included, had been in touch (its followers' last fetches); None elsewhere or if no majority
        has fetched in this epoch. Times by the clock the node's calls carry."""
        if self.role != "leader" or not self.voters:
            return None
        times = sorted((now_ms if v.replica_id == self.node_id else v.last_fetch_ms for v in self.voters
                        if v.replica_id == self.node_id or v.last_fetch_ms is not None), reverse=True)
        majority = len(self.voters) // 2 + 1
        return times[majority - 1] if len(times) >= majority else None
