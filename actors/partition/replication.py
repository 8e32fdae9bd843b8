"""One partition replica's replication state: leader side and follower side, Ray-free and clock-free.

Kafka's Partition/Replica/ReplicaFetcher logic for one replica, as a state machine. The shell owns
the log bytes; this core owns the numbers that decide what happens to them: the leader epoch, the
partition epoch, the ISR, the high watermark, each follower's log end offset, the leader-epoch
cache and the acks=all waiters. Every method that depends on time takes `now_ms`. Methods return
what the shell must do (send an AlterPartition, release waiters, truncate, append) and never do it.

Leader side (Kafka semantics, Kafka 4 trunk):
* high watermark = the smallest log end offset over the *maximal* ISR (KIP-497/KIP-841: the
  committed ISR plus a replica whose addition is pending; a pending shrink still counts the
  replicas it would remove), also waiting for followers that are caught up and could join; the
  leader's own LEO counts. It never moves backwards on a leader, and does not advance while the
  committed ISR is smaller than min.insync.replicas (capped by the replication factor);
* a follower is caught up if its LEO equals the leader's, or it last read up to the leader's LEO
  within `replica.lag.time.max.ms` (Kafka's lastCaughtUpTimeMs rule); ISR members that are not
  are proposed for removal on `tick`; a follower whose LEO reaches the high watermark and the
  start offset of the leader's epoch is proposed for addition on fetch;
* ISR changes are proposals (AlterPartition carrying leader epoch, partition epoch and a proposal
  id the controller decides once); the ISR that
  `check_produce` and min.insync.replicas use changes only when the controller's answer or new
  metadata arrives; one proposal in flight at a time; after an error that leaves it unknown
  whether the change was made, the maximal ISR stays until metadata arrives (see
  `on_alter_partition_response`);
* acks=all: `check_produce` answers NOT_ENOUGH_REPLICAS before the append when the committed ISR
  is below min.insync.replicas; a waiter registered after the append is released with NONE when
  the high watermark reaches its offset; with NOT_ENOUGH_REPLICAS_AFTER_APPEND as soon as the
  committed ISR falls below min.insync.replicas (Kafka 4 stops the HW there, so the write could
  only time out; answering at once is what Kafka 3 producers saw); with NOT_LEADER_OR_FOLLOWER when
  leadership is lost; and is timed out by the shell (`cancel_waiter` -> REQUEST_TIMED_OUT);
* a follower fetch carries the follower's current leader epoch (FENCED_LEADER_EPOCH if older,
  UNKNOWN_LEADER_EPOCH if newer), its fetch offset and its last fetched epoch; when its log
  diverges from the leader's the answer is a diverging epoch (epoch, end offset), as Fetch v12+
  does (KIP-320/KIP-595), and the follower's state on the leader is left alone.

Follower side: `next_fetch` builds the request from the log end offset and the latest epoch of the
epoch cache; `on_fetch_response` decides whether to truncate (diverging epoch, as
AbstractFetcherThread does), reset (below the leader's log start), append (batches contiguous at
the log end), or ignore a stale answer; the leader's log start moves the follower's. Becoming a
follower truncates nothing by itself: the first fetch finds the divergence (KIP-279).

Calls the shell makes, in order of a replica's life: `ReplicaCore(broker_id, log_end_offset=,
log_start_offset=, high_watermark=, epochs=, config=)` at open; `apply_registration` for every
partition state in the metadata; as leader `check_produce` -> append -> `on_leader_append` ->
`register_waiter` (acks=all), `handle_follower_fetch`, `offsets_for_leader_epoch`, `tick` and
`on_alter_partition_response`; as follower `next_fetch` and `on_fetch_response`; on retention
`advance_log_start_offset`. Every call returning `Effects` may move the HW (set the log's), release
waiters (answer their produce requests) and ask for an AlterPartition (send it, with the broker id
and broker epoch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable

from protocol.errors import ErrorCode

from .epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEndOffset, LeaderEpochCache

NO_LEADER = -1
NO_EPOCH_GIVEN = -1
UNKNOWN_OFFSET = -1
ACKS_ALL = -1
ALTER_PARTITION_RETRY_MS = 1000  # resend an unanswered AlterPartition after this long


class Role(Enum):
    NONE = "none"          # no metadata yet, or not a replica any more
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True)
class ReplicationConfig:
    replica_lag_time_max_ms: int = 30_000   # replica.lag.time.max.ms
    min_insync_replicas: int = 1            # min.insync.replicas


@dataclass(frozen=True)
class PartitionRegistration:
    """What the controller published for a partition (KRaft's PartitionRegistration)."""
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class AlterPartitionRequest:
    """A leader's proposal of a new ISR (one partition of Kafka's AlterPartition request).
    `proposal_id` grows with every new proposal of this replica (a resend keeps it): the
    controller answers each proposal once and repeats that answer to duplicates, so that a late
    copy of a refused proposal can never be applied after the leader gave up on it."""
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    proposal_id: int = -1

    def same_change(self, other: "AlterPartitionRequest") -> bool:
        return (self.leader_epoch, self.partition_epoch, self.new_isr) == \
            (other.leader_epoch, other.partition_epoch, other.new_isr)


@dataclass(frozen=True)
class AlterPartitionResponse:
    """The controller's answer: on success the partition's new state (leader, epochs, ISR)."""
    error_code: int
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


@dataclass(frozen=True)
class FetchRequest:
    """A follower's fetch for one partition (Fetch v12+: current leader epoch + last fetched epoch)."""
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int  # UNDEFINED_EPOCH when the follower's log has no epochs yet


@dataclass(frozen=True)
class FetchAnswer:
    """The leader's decision for one follower fetch. With `read_from` set the shell sends the
    batches from that offset up to the log end (size-bounded); otherwise no records."""
    error_code: int
    high_watermark: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    diverging_epoch: EpochEndOffset | None = None
    read_from: int | None = None


@dataclass(frozen=True)
class BatchSpan:
    """The header facts of one fetched batch the core needs: its offsets and leader epoch."""
    base_offset: int
    last_offset: int
    leader_epoch: int


@dataclass
class Effects:
    """What the shell must do after a leader-side call."""
    high_watermark: int | None = None                                # the HW moved to this
    released: list[tuple[int, int]] = field(default_factory=list)    # (waiter_id, error_code)
    alter_partition: AlterPartitionRequest | None = None             # send this to the controller

    def merge(self, other: "Effects") -> "Effects":
        if other.high_watermark is not None:
            self.high_watermark = other.high_watermark
        self.released.extend(other.released)
        if other.alter_partition is not None:
            self.alter_partition = other.alter_partition
        return self


class FollowerAction(Enum):
    IGNORE = "ignore"        # stale or duplicate answer, or an error: wait for metadata / retry
    TRUNCATE = "truncate"    # cut the log at `truncate_to`, then fetch again
    RESET = "reset"          # delete the whole log; it starts again, empty, at `truncate_to`
    APPEND = "append"        # append the fetched batches (already reflected in the core)
    NONE = "none"            # nothing to append; the high watermark may have moved


@dataclass(frozen=True)
class FollowerStep:
    action: FollowerAction
    truncate_to: int | None = None
    high_watermark: int | None = None
    error_code: int = ErrorCode.NONE
    log_start_offset: int | None = None   # the leader's log start moved ours up to here: delete below


@dataclass
class FollowerState:
    """The leader's view of one follower (Kafka's ReplicaState)."""
    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int | None = None   # None: never caught up in this leader epoch
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int | None = None

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_max_ms: int) -> bool:
        return (self.log_end_offset == leader_log_end_offset
                or (self.last_caught_up_time_ms is not None
                    and now_ms - self.last_caught_up_time_ms <= lag_max_ms))


@dataclass
class _Pending:
    request: AlterPartitionRequest
    maximal_isr: frozenset[int]
    sent_ms: int
    awaiting_metadata: bool = False  # answered with an error that leaves the outcome unknown


class ReplicaCore:
    """One replica of one partition on broker `broker_id`."""

    def __init__(self, broker_id: int, *, log_end_offset: int = 0, log_start_offset: int = 0,
                 high_watermark: int = 0, epochs: LeaderEpochCache | None = None,
                 config: ReplicationConfig = ReplicationConfig()):
        self.broker_id = broker_id
        self.config = config
        self.epochs = epochs if epochs is not None else LeaderEpochCache()
        self.log_end_offset = log_end_offset
        self.log_start_offset = log_start_offset
        self.high_watermark = min(high_watermark, log_end_offset)
        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()        # committed ISR (the controller's)
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.followers: dict[int, FollowerState] = {}
        self._pending: _Pending | None = None
        self._refused: tuple[AlterPartitionRequest, int] | None = None
        self._next_proposal_id = 0
        self._waiters: dict[int, int] = {}            # waiter id -> required offset
        self._waiters_in_order = True                 # offsets non-decreasing in insertion order
        self.ineligible: frozenset[int] = frozenset()  # replicas on fenced brokers (the controller's view)
        self._next_waiter_id = 1

    # ---- views -----------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self._pending.maximal_isr if self._pending else self.isr

    @property
    def pending_alter_partition(self) -> AlterPartitionRequest | None:
        return self._pending.request if self._pending else None

    @property
    def effective_min_isr(self) -> int:
        return max(1, min(self.config.min_insync_replicas, len(self.replicas) or 1))

    @property
    def waiter_count(self) -> int:
        return len(self._waiters)

    # ---- metadata from the controller ------------------------------------------------------
    def apply_registration(self, reg: PartitionRegistration, now_ms: int) -> Effects:
        """New partition state from the controller's metadata. Older states are ignored, and so is a
        state whose leader epoch is older than the newest epoch in this replica's own log (after a
        restart the replica forgets which metadata it saw, but its log remembers)."""
        if (reg.leader_epoch, reg.partition_epoch) <= (self.leader_epoch, self.partition_epoch):
            return Effects()
        if reg.leader_epoch < self.epochs.latest_epoch:
            return Effects()
        if self.broker_id not in reg.replicas:
            return self._stop(reg)
        if reg.leader == self.broker_id:
            if self.role is Role.LEADER and reg.leader_epoch == self.leader_epoch:
                return self._update_isr(reg, now_ms)
            return self._become_leader(reg, now_ms)
        return self._become_follower(reg)

    def _become_leader(self, reg: PartitionRegistration, now_ms: int) -> Effects:
        self._set_registration(reg)
        self.role = Role.LEADER
        self.leader_id = self.broker_id
        self.leader_epoch_start_offset = self.log_end_offset
        self.epochs.assign(reg.leader_epoch, self.log_end_offset)
        self._pending = None
        # Kafka resets follower state on a new leader epoch; ISR members count as caught up now
        self.followers = {
            r: FollowerState(r, UNKNOWN_OFFSET, now_ms if r in self.isr else None)
            for r in reg.replicas if r != self.broker_id}
        return self._after_change(now_ms)

    def release_waiters(self, error: int) -> Effects:
        """Answer every acks=all produce waiting here with `error` now: this replica stops
        leading, or its broker's session with the controller ran out (another replica may lead
        already, so waiting could only end at the produce's timeout). Nothing of theirs is
        committed by this; the producer retries at the current leader (the idempotent one
        without duplicates)."""
        released = [(w, error) for w in self._waiters]
        self._waiters.clear()
        self._waiters_in_order = True
        return Effects(released=released)

    def _step_down(self, role: Role, leader_id: int) -> Effects:
        """No longer lead: the acks=all produces waiting here are answered NOT_LEADER_OR_FOLLOWER."""
        effects = self.release_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.role, self.leader_id = role, leader_id
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.followers = {}
        self._pending = None
        return effects

    def _become_follower(self, reg: PartitionRegistration) -> Effects:
        self._set_registration(reg)
        return self._step_down(Role.FOLLOWER, reg.leader)

    def resign(self) -> Effects:
        """This replica stops (a reassignment moved it off its broker, its topic was deleted, or its
        host closes): from now on it neither leads nor follows. The acks=all produces waiting here
        are answered NOT_LEADER_OR_FOLLOWER, and so is anything that comes in later, at once: a
        produce appended here now would wait for a high watermark no follower moves any more, until
        its request timeout (Kafka's old leader answers NOT_LEADER_OR_FOLLOWER once it learns it is
        not a replica)."""
        return self._step_down(Role.NONE, NO_LEADER)

    def _stop(self, reg: PartitionRegistration) -> Effects:
        self._set_registration(reg)
        return self._step_down(Role.NONE, NO_LEADER)

    def _set_registration(self, reg: PartitionRegistration) -> None:
        self.leader_epoch = reg.leader_epoch
        self.partition_epoch = reg.partition_epoch
        self.replicas = tuple(reg.replicas)
        self.isr = frozenset(reg.isr)

    def _update_isr(self, reg: PartitionRegistration, now_ms: int) -> Effects:
        """Same leader epoch, newer partition epoch: the controller changed the ISR (our proposal or
        its own shrink of a fenced broker). The committed ISR replaces any pending proposal."""
        self._set_registration(reg)
        self._pending = None
        for r in reg.replicas:
            if r != self.broker_id and r not in self.followers:
                self.followers[r] = FollowerState(r)
        return self._after_change(now_ms)

    def set_ineligible_replicas(self, broker_ids: Iterable[int], now_ms: int) -> Effects:
        """The replicas whose brokers the controller has fenced. The high watermark does not wait
        for them to join the ISR (Kafka's isReplicaIsrEligible): a follower that was caught up a
        moment before its broker died would otherwise hold it for replica.lag.time.max.ms."""
        ineligible = frozenset(broker_ids)
        if ineligible == self.ineligible:
            return Effects()
        self.ineligible = ineligible
        return self._after_change(now_ms)

    def advance_log_start_offset(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start up (never past the high watermark)."""
        if log_start_offset > self.log_start_offset:
            self.log_start_offset = log_start_offset
            self.epochs.truncate_from_start(log_start_offset)

    # ---- leader: produce -------------------------------------------------------------------
    def validate_leader_epoch(self, current_leader_epoch: int = NO_EPOCH_GIVEN) -> int:
        """Every leader-side call: NOT_LEADER_OR_FOLLOWER unless this replica leads; a caller's
        current leader epoch older than ours is FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH
        (-1: the caller sent none, as old clients do; Kafka skips the check then)."""
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch == NO_EPOCH_GIVEN:
            return ErrorCode.NONE
        return self._check_leader_epoch(current_leader_epoch)

    def check_list_offsets(self, current_leader_epoch: int = NO_EPOCH_GIVEN) -> int:
        """Before a client's ListOffsets: as validate_leader_epoch, and OFFSET_NOT_AVAILABLE (retriable)
        while this leader's high watermark is below the offset its leader epoch began at. A new leader's
        high watermark lags until its followers fetch in the new epoch, and an answer from it then would
        name an end older than records already acknowledged (Kafka's Partition.fetchOffsetForTimestamp
        refuses the same way, KIP-207)."""
        error = self.validate_leader_epoch(current_leader_epoch)
        if error:
            return error
        if self.leader_epoch_start_offset > self.high_watermark:
            return ErrorCode.OFFSET_NOT_AVAILABLE
        return ErrorCode.NONE

    def check_produce(self, acks: int, current_leader_epoch: int = NO_EPOCH_GIVEN) -> int:
        """Before appending a producer's (or an internal writer's) batch: may this replica take it?"""
        error = self.validate_leader_epoch(current_leader_epoch)
        if error:
            return error
        if acks == ACKS_ALL and len(self.isr) < self.effective_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def on_leader_append(self, log_end_offset: int, now_ms: int) -> Effects:
        """The shell appended (in this leader epoch) up to `log_end_offset`."""
        if self.role is not Role.LEADER:
            raise RuntimeError("on_leader_append on a replica that is not the leader")
        if log_end_offset < self.log_end_offset:
            raise ValueError(f"log end offset went back from {self.log_end_offset} to {log_end_offset}")
        self.log_end_offset = log_end_offset
        return self._after_change(now_ms)

    def register_waiter(self, required_offset: int) -> tuple[int, int | None]:
        """An acks=all produce waits until the HW reaches `required_offset` (last offset + 1).
        Returns (waiter_id, error_code or None if it must wait)."""
        waiter_id = self._next_waiter_id
        self._next_waiter_id += 1
        if self.role is not Role.LEADER:
            return waiter_id, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset or len(self.isr) < self.effective_min_isr:
            return waiter_id, self._ack_error()
        if self._waiters and required_offset < next(reversed(self._waiters.values())):
            self._waiters_in_order = False  # e.g. an idempotent duplicate answered with its old offset
        self._waiters[waiter_id] = required_offset
        return waiter_id, None

    def cancel_waiter(self, waiter_id: int) -> bool:
        """The shell's timeout (request.timeout.ms) fired: answer REQUEST_TIMED_OUT if still waiting."""
        return self._waiters.pop(waiter_id, None) is not None

    def _ack_error(self) -> int:
        if len(self.maximal_isr) < self.effective_min_isr or len(self.isr) < self.effective_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    # ---- leader: follower fetches ----------------------------------------------------------
    def offsets_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int) -> tuple[int, EpochEndOffset]:
        """OffsetsForLeaderEpoch, as a leader answers it (followers use Fetch's diverging epoch)."""
        error = self._check_leader_epoch(current_leader_epoch)
        if error:
            return error, EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        return ErrorCode.NONE, self.epochs.end_offset_for(leader_epoch, self.log_end_offset)

    def _check_leader_epoch(self, current_leader_epoch: int) -> int:
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    def handle_follower_fetch(self, request: FetchRequest, now_ms: int) -> tuple[FetchAnswer, Effects]:
        error = self._check_leader_epoch(request.current_leader_epoch)
        if not error and request.replica_id not in self.followers:
            # the epoch matches but the replica is not (yet) in the assignment: Kafka answers
            # UNKNOWN_LEADER_EPOCH so that the follower retries
            error = ErrorCode.UNKNOWN_LEADER_EPOCH
        if error:
            return FetchAnswer(error), Effects()
        leo, hw, lso = self.log_end_offset, self.high_watermark, self.log_start_offset
        if request.last_fetched_epoch != UNDEFINED_EPOCH:
            earliest = self.epochs.earliest_entry
            if earliest is not None and request.last_fetched_epoch < earliest.epoch:
                # the follower's last records are of an epoch this log no longer holds (deleted
                # below the log start): nothing can tell whether they were ever committed, so
                # the follower starts over at the log start instead of joining with them (found
                # by the simulation: such a follower entered the ISR, was elected, and served an
                # uncommitted record at an offset the partition had deleted)
                return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, hw, lso, leo), Effects()
            end = self.epochs.end_offset_for(request.last_fetched_epoch, leo)
            if end.undefined or request.fetch_offset < lso:
                return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, hw, lso, leo), Effects()
            if end.leader_epoch < request.last_fetched_epoch or end.end_offset < request.fetch_offset:
                return FetchAnswer(ErrorCode.NONE, hw, lso, leo, diverging_epoch=end), Effects()
        if not lso <= request.fetch_offset <= leo:
            return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, hw, lso, leo), Effects()
        self._update_follower(self.followers[request.replica_id], request.fetch_offset, now_ms)
        effects = self._maybe_expand_isr(request.replica_id, now_ms)
        effects.merge(self._after_change(now_ms))
        return FetchAnswer(ErrorCode.NONE, self.high_watermark, lso, leo, read_from=request.fetch_offset), effects

    def _update_follower(self, state: FollowerState, fetch_offset: int, now_ms: int) -> None:
        """Kafka's Replica.updateFetchStateOrThrow: caught up to the leader's LEO now, or to the
        leader's LEO as of the previous fetch."""
        caught_up_at = state.last_caught_up_time_ms
        if fetch_offset >= self.log_end_offset:
            caught_up_at = now_ms
        elif fetch_offset >= state.last_fetch_leader_log_end_offset and state.last_fetch_time_ms is not None:
            caught_up_at = state.last_fetch_time_ms
        if caught_up_at is not None and (state.last_caught_up_time_ms is None
                                         or caught_up_at > state.last_caught_up_time_ms):
            state.last_caught_up_time_ms = caught_up_at
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_log_end_offset = self.log_end_offset
        state.last_fetch_time_ms = now_ms

    def _maybe_expand_isr(self, replica_id: int, now_ms: int) -> Effects:
        if self._pending is not None or replica_id in self.isr:
            return Effects()
        follower_end = self.followers[replica_id].log_end_offset
        if follower_end >= self.high_watermark and follower_end >= self.leader_epoch_start_offset:
            new_isr = self.isr | {replica_id}
            return self._propose(new_isr, maximal=new_isr, now_ms=now_ms)
        return Effects()

    # ---- leader: time ----------------------------------------------------------------------
    def tick(self, now_ms: int) -> Effects:
        """Periodic: propose removing lagging followers from the ISR; resend an unanswered proposal."""
        if self.role is not Role.LEADER:
            return Effects()
        if self._pending is not None:
            if self._pending.awaiting_metadata:
                return Effects()
            if now_ms - self._pending.sent_ms >= ALTER_PARTITION_RETRY_MS:
                self._pending.sent_ms = now_ms
                return Effects(alter_partition=self._pending.request)
            return Effects()
        lag = self.config.replica_lag_time_max_ms
        out_of_sync = {r for r in self.isr if r != self.broker_id
                       and not self.followers.setdefault(r, FollowerState(r)).is_caught_up(self.log_end_offset, now_ms, lag)}
        if not out_of_sync:
            return Effects()
        # a pending shrink keeps the larger (current) ISR as the maximal ISR until it is committed
        return self._propose(self.isr - out_of_sync, maximal=self.isr, now_ms=now_ms)

    def _propose(self, new_isr: frozenset[int], *, maximal: frozenset[int], now_ms: int) -> Effects:
        request = AlterPartitionRequest(self.leader_epoch, self.partition_epoch, tuple(sorted(new_isr)),
                                        self._next_proposal_id)
        if (self._refused is not None and self._refused[0].same_change(request)
                and now_ms - self._refused[1] < ALTER_PARTITION_RETRY_MS):
            return Effects()  # refused a moment ago (e.g. INELIGIBLE_REPLICA): no request storm
        self._next_proposal_id += 1
        self._pending = _Pending(request, frozenset(maximal), now_ms)
        return Effects(alter_partition=request)

    def on_alter_partition_response(self, request: AlterPartitionRequest, response: AlterPartitionResponse,
                                    now_ms: int) -> Effects:
        """The controller answered `request`. Answers to anything but the pending proposal are
        ignored (duplicates, answers overtaken by metadata).

        Only INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED say for certain that the change was
        not made (and, the controller answering each proposal id once, never will be): then the
        proposal is dropped (Kafka resets to the last committed state). Any other error
        (INVALID_UPDATE_VERSION may answer a retry of a request that *was* applied;
        FENCED_LEADER_EPOCH, NOT_CONTROLLER, ...) leaves the outcome unknown, so the maximal ISR
        stays in force until the controller's metadata says what the ISR is."""
        pending = self._pending
        if self.role is not Role.LEADER or pending is None or pending.request != request:
            return Effects()
        if response.error_code in (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED):
            self._refused = (request, now_ms)  # the same proposal not before ALTER_PARTITION_RETRY_MS
            self._pending = None
            return self._after_change(now_ms)
        if (response.error_code != ErrorCode.NONE or response.leader != self.broker_id
                or response.leader_epoch != self.leader_epoch or response.partition_epoch <= self.partition_epoch):
            pending.awaiting_metadata = True
            return Effects()
        return self._update_isr(PartitionRegistration(response.leader, response.leader_epoch,
                                                      response.partition_epoch, self.replicas,
                                                      tuple(response.isr)), now_ms)

    # ---- leader: high watermark and waiters ------------------------------------------------
    def _after_change(self, now_ms: int) -> Effects:
        effects = Effects()
        if self.role is not Role.LEADER:
            return effects
        if self._maybe_increment_high_watermark(now_ms):
            effects.high_watermark = self.high_watermark
        if self._waiters and len(self.isr) < self.effective_min_isr:
            # the high watermark cannot advance under min.insync.replicas (Kafka 4): answer the
            # waiters now rather than letting them time out
            effects.released.extend((w, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND) for w in self._waiters)
            self._waiters.clear()
        if self._waiters and effects.high_watermark is not None:
            # waiters are usually registered in append order, offsets growing: then stop at the
            # first that must still wait (O(released), not O(waiting))
            hw = self.high_watermark
            done = []
            for w, off in self._waiters.items():
                if off > hw:
                    if self._waiters_in_order:
                        break
                    continue
                done.append(w)
            if done:
                error = self._ack_error()
                for w in done:
                    del self._waiters[w]
                    effects.released.append((w, error))
        if not self._waiters:
            self._waiters_in_order = True
        return effects

    def _maybe_increment_high_watermark(self, now_ms: int) -> bool:
        if len(self.isr) < self.effective_min_isr:
            return False
        leo = self.log_end_offset
        new_hw = leo
        maximal = self.maximal_isr
        lag = self.config.replica_lag_time_max_ms
        for r, state in self.followers.items():
            if r in maximal:
                # a member whose LEO is not known yet (new leader epoch) holds the HW where it is
                end = state.log_end_offset if state.log_end_offset >= 0 else self.high_watermark
            elif r not in self.ineligible and state.log_end_offset >= 0 and state.is_caught_up(leo, now_ms, lag):
                end = state.log_end_offset  # caught up and about to join: wait for it (Kafka does)
            else:
                continue
            new_hw = min(new_hw, end)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    # ---- follower --------------------------------------------------------------------------
    def next_fetch(self) -> FetchRequest | None:
        """The fetch a follower sends its leader now (the shell keeps one in flight)."""
        if self.role is not Role.FOLLOWER or self.leader_id == NO_LEADER:
            return None
        return FetchRequest(self.broker_id, self.leader_epoch, self.log_end_offset, self.epochs.latest_epoch)

    def on_fetch_response(self, request: FetchRequest, answer: FetchAnswer,
                          batches: Iterable[BatchSpan] = ()) -> FollowerStep:
        """Apply the leader's answer to `request`. Answers that no longer match this replica's
        state (another epoch, another log end) are ignored: the next fetch asks again."""
        if (self.role is not Role.FOLLOWER or request.current_leader_epoch != self.leader_epoch
                or request.fetch_offset != self.log_end_offset
                or request.last_fetched_epoch != self.epochs.latest_epoch):
            return FollowerStep(FollowerAction.IGNORE)
        if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return self._out_of_range(answer)
        if answer.error_code != ErrorCode.NONE:
            return FollowerStep(FollowerAction.IGNORE, error_code=answer.error_code)
        if answer.diverging_epoch is not None:
            target = self._truncation_offset(answer.diverging_epoch)
            self._truncate_to(target)
            moved = self._follow_log_start(answer.log_start_offset)
            return FollowerStep(FollowerAction.TRUNCATE, truncate_to=target, high_watermark=self.high_watermark,
                                log_start_offset=self.log_start_offset if moved else None)
        spans = list(batches)
        if spans and spans[0].base_offset != self.log_end_offset:
            return FollowerStep(FollowerAction.IGNORE)
        for span in spans:
            if span.leader_epoch < 0 or span.last_offset < span.base_offset:
                raise ValueError(f"invalid batch span {span}")
            self.epochs.assign(span.leader_epoch, span.base_offset)
            self.log_end_offset = span.last_offset + 1
        new_hw = min(answer.high_watermark, self.log_end_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
        moved = self._follow_log_start(answer.log_start_offset)
        return FollowerStep(FollowerAction.APPEND if spans else FollowerAction.NONE,
                            high_watermark=self.high_watermark,
                            log_start_offset=self.log_start_offset if moved else None)

    def _follow_log_start(self, leader_log_start_offset: int) -> bool:
        """The leader's log start (retention, DeleteRecords) moves ours: what lies below it is gone
        from the partition. That includes records this replica never had confirmed (a diverging
        epoch older than the leader's first one ends at the leader's log start, vouching for
        nothing below it), which must not survive to be served if this replica leads. The high
        watermark comes up with it (log start <= HW). Beyond our log end, the next fetch is out of
        range and resets the log instead."""
        if not self.log_start_offset < leader_log_start_offset <= self.log_end_offset:
            return False
        self.advance_log_start_offset(leader_log_start_offset)
        self.high_watermark = max(self.high_watermark, leader_log_start_offset)
        return True

    def _truncation_offset(self, diverging: EpochEndOffset) -> int:
        """Kafka's AbstractFetcherThread.getOffsetTruncationState, from the follower's epoch cache."""
        leo = self.log_end_offset
        if diverging.end_offset == UNDEFINED_EPOCH_OFFSET:
            return min(self.high_watermark, leo)
        if diverging.leader_epoch == UNDEFINED_EPOCH:
            return min(diverging.end_offset, leo)
        local = self.epochs.end_offset_for(diverging.leader_epoch, leo)
        if local.undefined:
            return min(diverging.end_offset, leo)
        if local.leader_epoch != diverging.leader_epoch:
            # we never saw the leader's epoch: cut to the end of our own largest epoch below it;
            # the next fetch (with that epoch as last fetched) narrows it down further
            return min(local.end_offset, leo)
        return min(diverging.end_offset, local.end_offset, leo)

    def _out_of_range(self, answer: FetchAnswer) -> FollowerStep:
        """Kafka's follower on OFFSET_OUT_OF_RANGE: if the leader's log ends before ours, cut to
        its end (only reachable after an unclean election); else start over at its log start."""
        if 0 <= answer.log_end_offset < self.log_end_offset:
            target = answer.log_end_offset
            self._truncate_to(target)
            return FollowerStep(FollowerAction.TRUNCATE, truncate_to=target, high_watermark=self.high_watermark)
        target = max(answer.log_start_offset, 0)
        self.epochs.clear()
        self.log_end_offset = self.log_start_offset = target
        self.high_watermark = target
        return FollowerStep(FollowerAction.RESET, truncate_to=target, high_watermark=self.high_watermark)

    def _truncate_to(self, offset: int) -> None:
        self.epochs.truncate_from_end(offset)
        self.log_end_offset = offset
        self.high_watermark = min(self.high_watermark, offset)
