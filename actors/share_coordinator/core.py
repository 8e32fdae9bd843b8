"""ShareCoordinatorShard: the share-group state of one `__share_group_state` partition, Ray-free.

Every operation validates, builds the record(s) Kafka would write, applies them to the in-memory
state with the same function replay uses, and returns a `CoordinatorResult` (actors/coordinator_result.py):
the records as ``(key_bytes, value_bytes|None)`` ready to append, and the response (`StateResponse`, or
`ReadResponse` for a read) to give once they are appended. The shell appends them, then reports their log
offsets with ``on_appended``. If an append fails, the shell reverts exactly the changes made since its
``changes_mark`` (``revert``), as Kafka reverts through its snapshot registry; when other operations'
changes rest on them it rebuilds the shard from the log instead.

Kafka behaviour followed (ShareCoordinatorShard, ShareGroupOffset, PersisterStateBatchCombiner,
ShareCoordinatorOffsetsManager, ShareCoordinatorConfig; Kafka 4.1-4.2 and trunk):

* records: Initialize writes a ShareSnapshot (snapshot epoch 0, or previous + 1; leader epoch 0,
  or the recorded one on a re-initialize so the fence survives a reload from a pruned log - Kafka
  writes 0 and keeps the fence only in memory; no batches; delivery complete count -1 when the start offset is -1, else 0). Write and a read
  that raises the leader epoch write a ShareUpdate holding only the new batches, or a ShareSnapshot
  of the merged state (snapshot epoch + 1) once ``snapshot_update_records_max`` updates
  (`share.coordinator.snapshot.update.records.per.snapshot`, default 500, range 0..500) followed the
  last snapshot. Delete writes a tombstone of the ShareSnapshot key. Timestamps: a snapshot from
  initialize/write gets ``now_ms`` as create and write timestamp; updates carry none.
* fencing: a leader epoch below the recorded one -> FENCED_LEADER_EPOCH (write, read); a state
  epoch below the recorded one -> FENCED_STATE_EPOCH (write, initialize); -1 means "not supplied"
  and skips the check. Recorded epochs only grow (Kafka's leaderEpochMap/stateEpochMap). A read
  with a higher leader epoch records it (one record); -1 or the same epoch writes nothing.
  ReadShareGroupStateSummary does not fence (Kafka does not either). Reading or writing a
  share-partition that was never initialized -> INVALID_REQUEST; a negative partition ->
  INVALID_REQUEST. Kafka also answers UNKNOWN_TOPIC_OR_PARTITION for topics missing from its
  metadata image: the shell checks that, the shard has no metadata.
* batch merge: per offset, the batch with the highest (delivery count, delivery state) wins,
  whether old or new (so an out-of-order write cannot undo a later one); batches wholly below the
  start offset are dropped and a straddling one is clipped; contiguous batches with the same state
  and count coalesce. Output is sorted, disjoint, maximal.
* start offset (trunk): never moves backwards on write; -1 means "unchanged". The delivery
  complete count goes with it: a higher start offset takes the request's count, the same start
  offset the larger count, a stale (lower) start offset keeps the stored count.
  Only initialize sets any start offset (alter offsets bumps the state epoch) and changes the state
  epoch: a write with a higher state epoch is accepted and leaves it as recorded.
  An initialize repeating the stored state epoch and start offset is a no-op (trunk).
* pruning: the records before the latest ShareSnapshot of every live share-partition are
  redundant (KIP-932; ShareCoordinatorOffsetsManager tracks the snapshot offsets; a tombstone
  releases its key). Idle share-partitions are re-snapshotted after
  `share.coordinator.cold.partition.snapshot.interval.ms` (default 300000) so they stop holding
  the prune point back; ours only rewrites the idle ones at the front of the log, and only when
  that frees more records than it writes, so idle partitions are not snapshotted forever.
"""

from __future__ import annotations

import base64
import heapq
import uuid
from dataclasses import dataclass, replace
from typing import Iterable, NamedTuple

from actors.coordinator_result import CoordinatorResult
from actors.internal_topics import java_string_hash, partition_for
from protocol.coordinator_records import ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue
from protocol.errors import ErrorCode

from .records import decode_record, encode_record

__all__ = [
    "DEFAULT_SNAPSHOT_UPDATE_RECORDS_MAX", "DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS",
    "UNINITIALIZED_START_OFFSET", "UNINITIALIZED_DELIVERY_COMPLETE_COUNT", "NOT_SUPPLIED",
    "StateBatch", "SharePartitionState", "StateResponse", "ReadResponse", "SummaryResponse",
    "ShareCoordinatorShard", "combine_state_batches",
    "share_coordinator_key", "state_partition_for", "state_partition_for_key", "java_string_hash",
]

DEFAULT_SNAPSHOT_UPDATE_RECORDS_MAX = 500                 # share.coordinator.snapshot.update.records.per.snapshot
SNAPSHOT_UPDATE_RECORDS_MAX_LIMIT = 500                   # Kafka's range: between(0, 500)
DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS = 300_000     # share.coordinator.cold.partition.snapshot.interval.ms
UNINITIALIZED_START_OFFSET = -1
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1
NOT_SUPPLIED = -1                                         # epoch / start offset "not being written"
DEFAULT_STATE_EPOCH = 0
DEFAULT_LEADER_EPOCH = 0
UNKNOWN_OFFSET = -1                                       # snapshot replayed without its log offset

MSG_NEGATIVE_PARTITION = "The partition id cannot be a negative number."
MSG_WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
MSG_READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
MSG_FENCED_LEADER_EPOCH = "The leader epoch is older than the one recorded for the share-partition."
MSG_FENCED_STATE_EPOCH = "The state epoch is older than the one recorded for the share-partition."

_INT16_MAX, _INT32_MAX, _INT64_MAX = 2**15 - 1, 2**31 - 1, 2**63 - 1

Key = tuple[str, uuid.UUID, int]            # (group_id, topic_id, partition)
Record = tuple[bytes, "bytes | None"]


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True)
class SharePartitionState:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp_ms: int
    write_timestamp_ms: int            # of the latest snapshot (updates carry no time)
    updates_since_snapshot: int


class StateResponse(NamedTuple):
    """The answer to Initialize, Write and Delete (Kafka's per-partition result of their responses)."""
    error_code: int
    error_message: str | None


class ReadResponse(NamedTuple):
    """The answer to ReadShareGroupState (its records, if any, record a higher leader epoch)."""
    error_code: int
    error_message: str | None
    state_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]


class SummaryResponse(NamedTuple):
    """The answer to ReadShareGroupStateSummary, which writes nothing (so no CoordinatorResult)."""
    error_code: int
    error_message: str | None
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


def _answer(error_code: int, error_message: str | None,
            records: list[Record] | None = None) -> CoordinatorResult[StateResponse]:
    return CoordinatorResult(records if records is not None else [], StateResponse(error_code, error_message))


# ---- key -> __share_group_state partition ------------------------------------------------------------------------

def _kafka_uuid_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The FindCoordinator key of a share-partition (key type SHARE): "groupId:topicId:partition"."""
    return f"{group_id}:{_kafka_uuid_string(topic_id)}:{partition}"


def state_partition_for_key(coordinator_key: str, num_partitions: int) -> int:
    return partition_for(coordinator_key, num_partitions)


def state_partition_for(group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    return state_partition_for_key(share_coordinator_key(group_id, topic_id, partition), num_partitions)


# ---- state batches -----------------------------------------------------------------------------------------------

def combine_state_batches(batches_so_far: Iterable, new_batches: Iterable, start_offset: int) -> tuple[StateBatch, ...]:
    """Kafka's PersisterStateBatchCombiner: per offset the highest (delivery count, delivery state) wins;
    offsets below ``start_offset`` (unless -1) are dropped; equal contiguous batches coalesce."""
    clipped = []
    for b in (*batches_so_far, *new_batches):
        first, last, state, count = b
        if start_offset != NOT_SUPPLIED:
            if last < start_offset:
                continue
            first = max(first, start_offset)
        clipped.append((first, last, state, count))
    if len(clipped) < 2:
        return tuple(StateBatch(*b) for b in clipped)
    clipped.sort()
    points = sorted({p for first, last, _, _ in clipped for p in (first, last + 1)})
    out: list[StateBatch] = []
    active: list[tuple[int, int, int]] = []     # (-count, -state, last): best batch on top
    i = 0
    for p, next_p in zip(points, points[1:]):
        while i < len(clipped) and clipped[i][0] == p:
            first, last, state, count = clipped[i]
            heapq.heappush(active, (-count, -state, last))
            i += 1
        while active and active[0][2] < p:
            heapq.heappop(active)
        if not active:
            continue
        neg_count, neg_state, _ = active[0]
        state, count = -neg_state, -neg_count
        prev = out[-1] if out else None
        if prev and prev.last_offset + 1 == p and prev.delivery_state == state and prev.delivery_count == count:
            out[-1] = prev._replace(last_offset=next_p - 1)
        else:
            out.append(StateBatch(p, next_p - 1, state, count))
    return tuple(out)


def _batches_valid(batches) -> bool:
    return all(0 <= b[0] <= b[1] <= _INT64_MAX and -128 <= b[2] <= 127 and 0 <= b[3] <= _INT16_MAX
               for b in batches)


def _as_tuples(batches) -> list[tuple[int, int, int, int]]:
    """Accept 4-tuples / StateBatch or objects with the four attributes (generated message structs)."""
    out = []
    for b in batches:
        if isinstance(b, tuple):
            out.append(tuple(b))
        else:
            out.append((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count))
    return out


# ---- the shard ---------------------------------------------------------------------------------------------------

class ShareCoordinatorShard:
    def __init__(self, *, snapshot_update_records_max: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_MAX):
        if not 0 <= snapshot_update_records_max <= SNAPSHOT_UPDATE_RECORDS_MAX_LIMIT:
            raise ValueError(f"snapshot_update_records_max must be in 0..{SNAPSHOT_UPDATE_RECORDS_MAX_LIMIT}")
        self.snapshot_update_records_max = snapshot_update_records_max
        self._states: dict[Key, SharePartitionState] = {}
        self._snapshot_offsets: dict[Key, int] = {}      # latest appended snapshot per live key
        self._last_offset: int | None = None             # highest log offset seen
        # each change an operation made, with the state it replaced, until the shell settles them (its
        # appends done): a failed append reverts its own changes instead of reloading the whole shard
        self._changes: list[tuple[Key, SharePartitionState | None]] = []

    # -- inspection --
    def state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SharePartitionState | None:
        return self._states.get((group_id, topic_id, partition))

    def states(self) -> dict[Key, SharePartitionState]:
        return dict(self._states)

    # -- replay --
    def replay(self, key_bytes, value_bytes, offset: int | None = None) -> None:
        """Apply one record of the partition, in log order. Give ``offset`` while loading so pruning works;
        a snapshot replayed without it pins the prune point at 0 until that key snapshots again."""
        key, value = decode_record(key_bytes, value_bytes)
        self._apply(key, value)
        self._track(key, value is None, UNKNOWN_OFFSET if offset is None else offset)

    def _apply(self, key, value) -> None:
        k = (key.group_id, key.topic_id, key.partition)
        prev = self._states.get(k)
        if value is None:                               # tombstone
            self._states.pop(k, None)
        elif isinstance(value, ShareSnapshotValue):
            batches = combine_state_batches((), _as_tuples(value.state_batches), value.start_offset)
            self._states[k] = SharePartitionState(
                snapshot_epoch=value.snapshot_epoch,
                state_epoch=max(value.state_epoch, prev.state_epoch) if prev else value.state_epoch,
                leader_epoch=max(value.leader_epoch, prev.leader_epoch) if prev else value.leader_epoch,
                start_offset=value.start_offset,
                delivery_complete_count=value.delivery_complete_count,
                state_batches=batches,
                create_timestamp_ms=value.create_timestamp,
                write_timestamp_ms=value.write_timestamp,
                updates_since_snapshot=0,
            )
        elif prev is None:                              # update without its snapshot (pruned log prefix)
            self._states[k] = SharePartitionState(
                snapshot_epoch=value.snapshot_epoch, state_epoch=DEFAULT_STATE_EPOCH,
                leader_epoch=value.leader_epoch, start_offset=value.start_offset,
                delivery_complete_count=value.delivery_complete_count,
                state_batches=combine_state_batches((), _as_tuples(value.state_batches), value.start_offset),
                create_timestamp_ms=0, write_timestamp_ms=0, updates_since_snapshot=1,
            )
        else:
            start = prev.start_offset if value.start_offset == NOT_SUPPLIED else max(prev.start_offset, value.start_offset)
            self._states[k] = replace(
                prev,
                leader_epoch=max(prev.leader_epoch, value.leader_epoch),
                start_offset=start,
                delivery_complete_count=value.delivery_complete_count,
                state_batches=combine_state_batches(prev.state_batches, _as_tuples(value.state_batches), start),
                updates_since_snapshot=prev.updates_since_snapshot + 1,
            )

    def _emit(self, key, value) -> list[Record]:
        """An operation's record: applied at once, as replay applies it (one path), and revertible until settled."""
        k = (key.group_id, key.topic_id, key.partition)
        self._changes.append((k, self._states.get(k)))
        self._apply(key, value)
        return [encode_record(key, value)]

    # -- changes not appended yet --
    def changes_mark(self) -> int:
        """Where the next operation's changes start (see `revert`)."""
        return len(self._changes)

    def revert(self, mark: int) -> None:
        """Undo every change made since `mark`, newest first: the state is as it was before the operations whose
        records could not be appended. Only right when no later change was appended or is being appended."""
        while len(self._changes) > mark:
            k, before = self._changes.pop()
            if before is None:
                self._states.pop(k, None)
            else:
                self._states[k] = before

    def settle(self) -> None:
        """Every change made so far is in the log (or was reverted): forget how to undo them."""
        self._changes.clear()

    # -- offsets and pruning --
    def on_appended(self, records: list[Record], offsets: list[int]) -> None:
        """The shell appended ``records`` (as returned by an operation) at ``offsets``."""
        if len(records) != len(offsets):
            raise ValueError("one offset per record")
        for (key_bytes, value_bytes), offset in zip(records, offsets):
            key, _ = decode_record(key_bytes, None)
            self._track(key, value_bytes is None, offset)

    def _track(self, key, is_tombstone: bool, offset: int) -> None:
        k = (key.group_id, key.topic_id, key.partition)
        if offset != UNKNOWN_OFFSET:
            self._last_offset = offset if self._last_offset is None else max(self._last_offset, offset)
        if is_tombstone:
            self._snapshot_offsets.pop(k, None)
        elif isinstance(key, ShareSnapshotKey):
            self._snapshot_offsets[k] = offset

    def last_snapshot_offsets(self) -> dict[Key, int]:
        """Log offset of the latest snapshot of each live share-partition (-1: replayed without offset)."""
        return dict(self._snapshot_offsets)

    def prunable_before_offset(self) -> int:
        """Every record below this offset is redundant: replaying from here rebuilds the same state."""
        if self._snapshot_offsets:
            return max(0, min(self._snapshot_offsets.values()))
        return 0 if self._last_offset is None else self._last_offset + 1

    def snapshot_cold_partitions(self, *, now_ms: int,
                                 cold_partition_snapshot_interval_ms: int = DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS
                                 ) -> list[Record]:
        """Re-snapshot the idle share-partitions that hold the prune point back: the run of keys with the
        oldest snapshot offsets whose latest snapshot is older than the interval, when that frees more
        records than it writes. Call it with no append in flight (after the last ``on_appended``)."""
        if self._last_offset is None:
            return []
        ordered = sorted(self._snapshot_offsets.items(), key=lambda item: item[1])
        cold: list[Key] = []
        next_offset = self._last_offset + 1
        for k, offset in ordered:
            st = self._states.get(k)
            if st is None or now_ms - st.write_timestamp_ms < cold_partition_snapshot_interval_ms:
                next_offset = offset
                break
            cold.append(k)
        if not cold or next_offset - ordered[0][1] <= len(cold):
            return []
        records: list[Record] = []
        for group_id, topic_id, partition in cold:
            st = self._states[(group_id, topic_id, partition)]
            records += self._emit(ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition),
                                  self._snapshot_value(st, snapshot_epoch=st.snapshot_epoch + 1,
                                                       create_timestamp_ms=st.create_timestamp_ms,
                                                       write_timestamp_ms=now_ms))
        return records

    # -- RPCs --
    def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int,
                   start_offset: int, now_ms: int) -> CoordinatorResult[StateResponse]:
        if partition < 0:
            return _answer(ErrorCode.INVALID_REQUEST, MSG_NEGATIVE_PARTITION)
        if state_epoch < 0 or start_offset < UNINITIALIZED_START_OFFSET:
            return _answer(ErrorCode.INVALID_REQUEST, "The state epoch and start offset must not be negative.")
        st = self._states.get((group_id, topic_id, partition))
        if st is not None:
            if st.state_epoch > state_epoch:
                return _answer(ErrorCode.FENCED_STATE_EPOCH, MSG_FENCED_STATE_EPOCH)
            if st.state_epoch == state_epoch and st.start_offset == start_offset:
                return _answer(ErrorCode.NONE, None)              # a retried initialize
        value = ShareSnapshotValue(
            snapshot_epoch=0 if st is None else st.snapshot_epoch + 1,
            state_epoch=state_epoch, leader_epoch=DEFAULT_LEADER_EPOCH if st is None else st.leader_epoch,
            start_offset=start_offset,
            delivery_complete_count=UNINITIALIZED_DELIVERY_COMPLETE_COUNT if start_offset == UNINITIALIZED_START_OFFSET else 0,
            create_timestamp=now_ms, write_timestamp=now_ms, state_batches=[],
        )
        key = ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition)
        return _answer(ErrorCode.NONE, None, self._emit(key, value))

    def read(self, group_id: str, topic_id: uuid.UUID, partition: int, *, leader_epoch: int,
             now_ms: int | None = None) -> CoordinatorResult[ReadResponse]:
        """ReadShareGroupState. A higher leader epoch is recorded (one record, a snapshot if due: pass
        ``now_ms`` for its timestamps, else the previous snapshot's are kept)."""
        def error(code, message):
            return CoordinatorResult([], ReadResponse(code, message, DEFAULT_STATE_EPOCH,
                                                      UNINITIALIZED_START_OFFSET, ()))
        if partition < 0:
            return error(ErrorCode.INVALID_REQUEST, MSG_NEGATIVE_PARTITION)
        if leader_epoch < NOT_SUPPLIED:
            return error(ErrorCode.INVALID_REQUEST, "The leader epoch must not be negative.")
        st = self._states.get((group_id, topic_id, partition))
        if st is None:
            return error(ErrorCode.INVALID_REQUEST, MSG_READ_UNINITIALIZED)
        if leader_epoch != NOT_SUPPLIED and st.leader_epoch > leader_epoch:
            return error(ErrorCode.FENCED_LEADER_EPOCH, MSG_FENCED_LEADER_EPOCH)
        records = []
        if leader_epoch != NOT_SUPPLIED and leader_epoch != st.leader_epoch:
            records = self._state_record((group_id, topic_id, partition), st, leader_epoch=leader_epoch,
                                         start_offset=st.start_offset,
                                         delivery_complete_count=st.delivery_complete_count, batches=(),
                                         now_ms=st.write_timestamp_ms if now_ms is None else now_ms)
        return CoordinatorResult(records, ReadResponse(ErrorCode.NONE, None, st.state_epoch, st.start_offset,
                                                       st.state_batches))

    def write(self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int, leader_epoch: int,
              start_offset: int, state_batches, delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT,
              now_ms: int) -> CoordinatorResult[StateResponse]:
        if partition < 0:
            return _answer(ErrorCode.INVALID_REQUEST, MSG_NEGATIVE_PARTITION)
        batches = _as_tuples(state_batches)
        if (state_epoch < NOT_SUPPLIED or leader_epoch < NOT_SUPPLIED or start_offset < NOT_SUPPLIED
                or not -1 <= delivery_complete_count <= _INT32_MAX or not _batches_valid(batches)):
            return _answer(ErrorCode.INVALID_REQUEST, "Invalid epoch, start offset, count or state batch.")
        key = (group_id, topic_id, partition)
        st = self._states.get(key)
        if st is None:
            return _answer(ErrorCode.INVALID_REQUEST, MSG_WRITE_UNINITIALIZED)
        if leader_epoch != NOT_SUPPLIED and st.leader_epoch > leader_epoch:
            return _answer(ErrorCode.FENCED_LEADER_EPOCH, MSG_FENCED_LEADER_EPOCH)
        if state_epoch != NOT_SUPPLIED and st.state_epoch > state_epoch:
            return _answer(ErrorCode.FENCED_STATE_EPOCH, MSG_FENCED_STATE_EPOCH)
        return _answer(ErrorCode.NONE, None, self._state_record(
            key, st, leader_epoch=leader_epoch, start_offset=start_offset,
            delivery_complete_count=delivery_complete_count, batches=batches, now_ms=now_ms))

    def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> CoordinatorResult[StateResponse]:
        if partition < 0:
            return _answer(ErrorCode.INVALID_REQUEST, MSG_NEGATIVE_PARTITION)
        if (group_id, topic_id, partition) not in self._states:
            return _answer(ErrorCode.NONE, None)
        key = ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition)
        return _answer(ErrorCode.NONE, None, self._emit(key, None))          # a tombstone

    def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int, *,
                     leader_epoch: int = NOT_SUPPLIED) -> SummaryResponse:
        """ReadShareGroupStateSummary (start offset and delivery complete count for lag). Writes nothing and,
        as in Kafka, does not fence on ``leader_epoch``. An uninitialized share-partition answers NONE with
        start offset -1."""
        if partition < 0:
            return SummaryResponse(ErrorCode.INVALID_REQUEST, MSG_NEGATIVE_PARTITION, DEFAULT_STATE_EPOCH,
                                 DEFAULT_LEADER_EPOCH, UNINITIALIZED_START_OFFSET, UNINITIALIZED_DELIVERY_COMPLETE_COUNT)
        st = self._states.get((group_id, topic_id, partition))
        if st is None:
            return SummaryResponse(ErrorCode.NONE, None, DEFAULT_STATE_EPOCH, DEFAULT_LEADER_EPOCH,
                                 UNINITIALIZED_START_OFFSET, UNINITIALIZED_DELIVERY_COMPLETE_COUNT)
        return SummaryResponse(ErrorCode.NONE, None, st.state_epoch, st.leader_epoch, st.start_offset,
                             st.delivery_complete_count)

    # -- record building --
    def _state_record(self, key: Key, st: SharePartitionState, *, leader_epoch: int, start_offset: int,
                      delivery_complete_count: int, batches, now_ms: int) -> list[Record]:
        """Kafka's generateShareStateRecord, with trunk's start offset / delivery complete count rules."""
        new_leader_epoch = st.leader_epoch if leader_epoch == NOT_SUPPLIED else max(st.leader_epoch, leader_epoch)
        new_start = max(start_offset, st.start_offset)              # never backwards; -1 = unchanged
        if start_offset > st.start_offset:
            count = delivery_complete_count
        elif start_offset == st.start_offset or start_offset == NOT_SUPPLIED:
            count = max(delivery_complete_count, st.delivery_complete_count)
        else:                                                      # stale write: keep what we have
            count = st.delivery_complete_count
        group_id, topic_id, partition = key
        if st.updates_since_snapshot >= self.snapshot_update_records_max:
            merged = replace(st, leader_epoch=new_leader_epoch, start_offset=new_start, delivery_complete_count=count,
                             state_batches=combine_state_batches(st.state_batches, batches, new_start))
            return self._emit(ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition),
                              self._snapshot_value(merged, snapshot_epoch=st.snapshot_epoch + 1,
                                                   create_timestamp_ms=now_ms, write_timestamp_ms=now_ms))
        value = ShareUpdateValue(
            snapshot_epoch=st.snapshot_epoch, leader_epoch=new_leader_epoch, start_offset=new_start,
            delivery_complete_count=count,
            state_batches=[ShareUpdateValue.StateBatch(first_offset=b[0], last_offset=b[1], delivery_state=b[2],
                                                       delivery_count=b[3])
                           for b in combine_state_batches((), batches, new_start)],
        )
        return self._emit(ShareUpdateKey(group_id=group_id, topic_id=topic_id, partition=partition), value)

    @staticmethod
    def _snapshot_value(st: SharePartitionState, *, snapshot_epoch: int, create_timestamp_ms: int,
                        write_timestamp_ms: int) -> ShareSnapshotValue:
        return ShareSnapshotValue(
            snapshot_epoch=snapshot_epoch, state_epoch=st.state_epoch, leader_epoch=st.leader_epoch,
            start_offset=st.start_offset, delivery_complete_count=st.delivery_complete_count,
            create_timestamp=create_timestamp_ms, write_timestamp=write_timestamp_ms,
            state_batches=[ShareSnapshotValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                         delivery_state=b.delivery_state,
                                                         delivery_count=b.delivery_count)
                           for b in st.state_batches],
        )
