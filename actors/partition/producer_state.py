"""Producer state for one partition (Kafka's ProducerStateManager): idempotence and transactions.

Per producer id: the current epoch and metadata of the last 5 appended batches, which is what
``max.in.flight.requests.per.connection <= 5`` needs for duplicate detection. Rules (Kafka 4,
``ProducerAppendInfo`` / ``ProducerStateEntry``), checked in this order:

* a batch whose (epoch, first seq, last seq) matches a cached batch is a duplicate: answered with
  success and the original offsets, nothing appended;
* epoch older than the current one -> INVALID_PRODUCER_EPOCH (47) (since 2.7 / KIP-588 produce
  answers 47, not PRODUCER_FENCED (90));
* unknown producer id (new, expired, or evicted), or one known without an epoch -> accepted
  whatever its sequence (KIP-360: Kafka 4 no longer answers UNKNOWN_PRODUCER_ID;
  ``checkSequence`` skips the check when the current epoch is NO_PRODUCER_EPOCH);
* newer epoch (KIP-360 bump) -> must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* same epoch -> first seq must be last seq + 1 (wrapping INT32_MAX -> 0), else 45;
* batches a follower replicates are recorded unchecked (their leader checked them).

Transactions (KIP-98): a producer's first transactional batch opens its transaction at that
batch's offset (``current_txn_first_offset``); a COMMIT or ABORT marker (control batch) ends it,
takes the marker's producer epoch and remembers the coordinator epoch. While a transaction is open
a non-transactional batch of that producer gets INVALID_TXN_STATE (48); a marker from an older
producer epoch gets INVALID_PRODUCER_EPOCH (47), one from an older coordinator epoch than the last
marker's TRANSACTION_COORDINATOR_FENCED (52). The first unstable offset is the first offset of the
earliest transaction still open, or of one whose marker is not yet below the high watermark
(Kafka's unreplicated transactions): the last stable offset never passes it. Producers with an
open transaction are never expired or evicted (Kafka keeps them too).

Producers stay known when the records they wrote are deleted (retention, DeleteRecords) until
``producer.id.expiration.ms`` after their last batch's timestamp, as in Kafka; Kray also caps a
partition at ``max_producer_ids`` (least recently written forgotten first).

Persistence is Kafka-style: ``<offset>.snapshot`` files (msgpack, CRC-32C) hold the table as of
``offset``; the partition rebuilds by loading the newest snapshot between the log start and end
offsets and replaying batch headers from there. Unlike Kafka's snapshots, which keep only each
producer's last batch, ours keep all 5, so retries are still recognised after a restart.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import NamedTuple

import msgpack
from crc32c import crc32c

from protocol.errors import ErrorCode

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1

OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER   # 45
INVALID_PRODUCER_EPOCH = ErrorCode.INVALID_PRODUCER_EPOCH               # 47
INVALID_TXN_STATE = ErrorCode.INVALID_TXN_STATE                         # 48
TRANSACTION_COORDINATOR_FENCED = ErrorCode.TRANSACTION_COORDINATOR_FENCED  # 52
NO_OFFSET = -1

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000   # producer.id.expiration.ms
DEFAULT_MAX_PRODUCER_IDS = 200_000               # per partition; least recently written evicted
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2   # 2: + coordinator epoch and open transaction's first offset per producer
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024
SNAPSHOTS_TO_KEEP = 2


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp_ms: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET   # the open transaction's first offset, -1: none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (Kafka's CompletedTxn): its offsets and outcome."""
    producer_id: int
    first_offset: int
    last_offset: int        # the marker's offset
    aborted: bool


class ActiveProducer(NamedTuple):
    """One producer as DescribeProducers shows it (Kafka's ``UnifiedLog.activeProducers``): its epoch, the last
    sequence of its newest cached batch (-1 when none: e.g. a marker bumped its epoch), the timestamp of its last
    batch or marker, the coordinator epoch of its last marker (-1: none yet) and the first offset of its open
    transaction (-1: none)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int


class Action(IntEnum):
    APPEND = 0
    DUPLICATE = 1
    REJECT = 2


class Verdict(NamedTuple):
    action: Action
    error_code: int = 0
    duplicate: BatchMetadata | None = None
    message: str = ""


APPEND = Verdict(Action.APPEND)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateTable:
    def __init__(self, *, max_producer_ids: int = DEFAULT_MAX_PRODUCER_IDS):
        self.max_producer_ids = max_producer_ids
        self._entries: dict[int, ProducerEntry] = {}   # insertion order == least recently written first
        self._ongoing: dict[int, int] = {}              # producer id -> open transaction's first offset
        self._unreplicated: dict[int, int] = {}         # first offset -> marker offset, marker not yet below HW

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check(self, producer_id: int, producer_epoch: int, base_sequence: int,
              last_sequence: int, transactional: bool = False) -> Verdict:
        """What a client's batch gets, in Kafka's order: a duplicate of a cached batch first,
        then the epoch, then the sequence, then (non-transactional batch) no open transaction.
        Pure: ``record`` changes the table."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return APPEND
        verdict = self._check_sequence(entry, producer_id, producer_epoch, base_sequence, last_sequence)
        if verdict.action == Action.APPEND and not transactional and entry.current_txn_first_offset >= 0:
            return Verdict(Action.REJECT, INVALID_TXN_STATE, None,
                           f"expected a transactional write from producer {producer_id}: its transaction "
                           f"from offset {entry.current_txn_first_offset} is open")
        return verdict

    def _check_sequence(self, entry: ProducerEntry, producer_id: int, producer_epoch: int,
                        base_sequence: int, last_sequence: int) -> Verdict:
        duplicate = entry.find_duplicate(producer_epoch, base_sequence, last_sequence)
        if duplicate is not None:
            return Verdict(Action.DUPLICATE, 0, duplicate)
        if producer_epoch < entry.producer_epoch:
            return Verdict(Action.REJECT, INVALID_PRODUCER_EPOCH, None,
                           f"epoch {producer_epoch} of producer {producer_id} is older than "
                           f"the current epoch {entry.producer_epoch}")
        if entry.producer_epoch == NO_PRODUCER_EPOCH:
            return APPEND
        if producer_epoch > entry.producer_epoch:
            if base_sequence != 0:
                return Verdict(Action.REJECT, OUT_OF_ORDER_SEQUENCE_NUMBER, None,
                               f"new epoch {producer_epoch} of producer {producer_id} must start "
                               f"at sequence 0, got {base_sequence}")
            return APPEND
        if not in_sequence(entry.last_seq, base_sequence):
            return Verdict(Action.REJECT, OUT_OF_ORDER_SEQUENCE_NUMBER, None,
                           f"out of order sequence {base_sequence} for producer {producer_id}, "
                           f"expected {(entry.last_seq + 1) % (INT32_MAX + 1)}")
        return APPEND

    def record(self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int,
               first_offset: int, last_offset: int, timestamp_ms: int, transactional: bool = False) -> None:
        """Remember an appended batch (after ``check`` said APPEND, or when replaying the log); a
        transactional one opens the producer's transaction unless one is open."""
        entry = self._entries.pop(producer_id, None)
        if entry is None:
            entry = ProducerEntry(producer_id)
        if producer_epoch != entry.producer_epoch:
            entry.producer_epoch = producer_epoch
            entry.batches.clear()
        entry.batches.append(BatchMetadata(base_sequence, last_sequence, first_offset, last_offset,
                                           timestamp_ms))
        entry.last_timestamp_ms = timestamp_ms
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[producer_id] = first_offset
        self._put(entry)

    def _put(self, entry: ProducerEntry) -> None:
        self._entries[entry.producer_id] = entry
        while len(self._entries) > self.max_producer_ids:
            # the least recently written go first, never one with an open transaction
            victim = next((pid for pid, e in self._entries.items() if e.current_txn_first_offset < 0), None)
            if victim is None:
                break
            del self._entries[victim]

    # --- transactions -----------------------------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> Verdict:
        """What a COMMIT/ABORT marker from the transaction coordinator gets: an older producer
        epoch than the producer's -> INVALID_PRODUCER_EPOCH; an older coordinator epoch than the
        last marker's -> TRANSACTION_COORDINATOR_FENCED."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return APPEND
        if producer_epoch < entry.producer_epoch:
            return Verdict(Action.REJECT, INVALID_PRODUCER_EPOCH, None,
                           f"marker epoch {producer_epoch} of producer {producer_id} is older than "
                           f"the current epoch {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            return Verdict(Action.REJECT, TRANSACTION_COORDINATOR_FENCED, None,
                           f"marker from coordinator epoch {coordinator_epoch}, producer {producer_id} "
                           f"has seen coordinator epoch {entry.coordinator_epoch}")
        return APPEND

    def record_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, aborted: bool,
                      offset: int, timestamp_ms: int) -> CompletedTxn | None:
        """Apply an appended marker at ``offset``: the producer's open transaction (if any) ends
        and is returned; the marker's epochs become the producer's."""
        entry = self._entries.pop(producer_id, None)
        if entry is None:
            entry = ProducerEntry(producer_id)
        if producer_epoch != entry.producer_epoch:
            entry.producer_epoch = producer_epoch
            entry.batches.clear()
        completed = None
        if entry.current_txn_first_offset >= 0:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, offset, aborted)
            self._ongoing.pop(producer_id, None)
            self._unreplicated[completed.first_offset] = offset
        entry.current_txn_first_offset = NO_OFFSET
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp_ms = timestamp_ms
        self._put(entry)
        return completed

    def last_stable_offset_at_abort(self, completed: CompletedTxn) -> int:
        """What an aborted transaction's index entry records as the last stable offset once it
        ended: the first offset of the earliest transaction still open, else past the marker."""
        return min(self._ongoing.values(), default=completed.last_offset + 1)

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer the table knows (not expired or evicted), least recently written first."""
        return [ActiveProducer(e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp_ms, e.coordinator_epoch,
                               e.current_txn_first_offset) for e in self._entries.values()]

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is open, or ended by a marker not
        yet below ``high_watermark``; None when every transaction is complete and replicated."""
        unreplicated = self._unreplicated
        if unreplicated:
            for first_offset in [f for f, marker in unreplicated.items() if marker < high_watermark]:
                del unreplicated[first_offset]
        if not self._ongoing:
            return min(unreplicated) if unreplicated else None
        first = min(self._ongoing.values())
        return min(first, min(unreplicated)) if unreplicated else first

    def expire(self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers whose last batch timestamp is expiration_ms or more before now_ms."""
        stale = [pid for pid, e in self._entries.items()
                 if now_ms - e.last_timestamp_ms >= expiration_ms and e.current_txn_first_offset < 0]
        for pid in stale:
            del self._entries[pid]
        return len(stale)

    # --- (de)serialisation ------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        producers = [[e.producer_id, e.producer_epoch, e.last_timestamp_ms,
                      [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
                       for b in e.batches], e.coordinator_epoch, e.current_txn_first_offset]
                     for e in self._entries.values()]
        body = msgpack.packb([SNAPSHOT_VERSION, producers])
        return crc32c(body).to_bytes(4, "big") + body

    @classmethod
    def from_bytes(cls, data: bytes, *, max_producer_ids: int = DEFAULT_MAX_PRODUCER_IDS) -> "ProducerStateTable":
        """Raise ValueError on a corrupt or unknown snapshot."""
        if len(data) < 4 or int.from_bytes(data[:4], "big") != crc32c(data[4:]):
            raise ValueError("producer snapshot CRC mismatch")
        try:
            version, producers = msgpack.unpackb(data[4:])
            if version not in (1, SNAPSHOT_VERSION):
                raise ValueError(f"unknown producer snapshot version {version}")
            table = cls(max_producer_ids=max_producer_ids)
            for producer_id, epoch, last_timestamp_ms, batches, *txn in producers:
                entry = ProducerEntry(producer_id, epoch, last_timestamp_ms=last_timestamp_ms)
                entry.batches.extend(BatchMetadata(*b) for b in batches)
                if version >= 2:
                    entry.coordinator_epoch, entry.current_txn_first_offset = txn
                    if entry.current_txn_first_offset >= 0:
                        table._ongoing[producer_id] = entry.current_txn_first_offset
                table._entries[producer_id] = entry
        except (TypeError, ValueError, msgpack.UnpackException) as exc:
            raise ValueError(f"corrupt producer snapshot: {exc}") from None
        return table


# --- snapshot files -------------------------------------------------------------------------

def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in Path(directory).glob("*" + SNAPSHOT_SUFFIX) if p.stem.isdigit())


def write_snapshot(directory: Path, offset: int, table: ProducerStateTable,
                   *, keep: int = SNAPSHOTS_TO_KEEP) -> Path:
    """Atomically write the table as of ``offset`` and prune all but the newest ``keep``."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(table.to_bytes())
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)
    for old in list_snapshots(directory)[:-keep]:
        snapshot_path(directory, old).unlink(missing_ok=True)
    return path


def delete_snapshots_above(directory: Path, offset: int) -> None:
    """Drop snapshots taken beyond ``offset`` (after a truncation or a lost tail)."""
    for snap in list_snapshots(directory):
        if snap > offset:
            snapshot_path(directory, snap).unlink(missing_ok=True)


def delete_snapshots_below(directory: Path, offset: int) -> None:
    """Drop snapshots taken before ``offset`` (the log start moved past them)."""
    for snap in list_snapshots(directory):
        if snap < offset:
            snapshot_path(directory, snap).unlink(missing_ok=True)


def load_latest_snapshot(directory: Path, max_offset: int, *,
                         max_producer_ids: int = DEFAULT_MAX_PRODUCER_IDS
                         ) -> tuple[int, ProducerStateTable] | None:
    """Newest readable snapshot at or below ``max_offset``; corrupt ones are deleted."""
    for offset in reversed(list_snapshots(directory)):
        if offset > max_offset:
            continue
        path = snapshot_path(directory, offset)
        try:
            if path.stat().st_size > MAX_SNAPSHOT_BYTES:
                raise ValueError("producer snapshot too large")
            return offset, ProducerStateTable.from_bytes(path.read_bytes(),
                                                         max_producer_ids=max_producer_ids)
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
    return None
