"""The log cleaner's pure core for compacted topics (``cleanup.policy=compact``): what Kafka's
LogCleaner decides, as functions of batches in and batches out. No Ray, no asyncio, no files, no
clock: the shell (actors/partition/log.py `Log.clean_*`, the shard's cleaner timer) reads the
closed segments, passes ``now_ms`` and writes what comes out.

One cleaning round, as Kafka's:

* The *dirty section* is [first dirty offset, first uncleanable offset): the first dirty offset is
  where the previous round stopped (the cleaner checkpoint); the first uncleanable offset is the
  lowest of the active segment's base (never cleaned), the last stable offset (an open
  transaction is never cleaned past) and the base of the first segment holding a record younger
  than ``min.compaction.lag.ms``.
* `build_offset_map` reads the dirty section: the latest offset of every key (aborted
  transactional records and control batches count for nothing).
* `clean_batches` rewrites every batch of the closed segments below the round's end, keeping a
  record when its offset is the latest of its key (or lies past what the map covers), dropping
  records without a key, aborted transactional data, and markers once the transaction's data is
  gone and the marker's delete horizon has passed. Offsets never change: a batch keeps its base
  offset and its last offset delta even when records go (consumers see gaps).
* Tombstones (a key with a null value) and markers of transactions that left no data are kept
  ``delete.retention.ms`` after the round that first met them: that round writes the delete
  horizon into the batch (attribute bit 6, the base timestamp holds it, KIP-534); a later round
  drops them once ``now_ms`` reaches it.
* The batch holding the last data offset of a still-known producer is kept, empty if need be
  (its sequence and epoch are what idempotence checks against after a restart), and so is the
  last batch of the round (its last offset keeps the log's offsets), as Kafka keeps them.
* A batch whose records all survive and needs no horizon is copied byte for byte; otherwise it is
  re-encoded with its own codec (recompressed) and a new CRC.
"""
from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from protocol.record_batch import (
    BATCH_OVERHEAD_BYTES, COMPRESSION_MASK, COMPRESSION_NONE, CONTROL_MASK, LOG_OVERHEAD_BYTES,
    MAGIC_V2, RECORDS_POS, TIMESTAMP_TYPE_LOG_APPEND_TIME, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
    BatchHeader, _encode_record, compress, decode_records, rewrite_crc,
)

from .control_records import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from .txn_index import AbortedTxn

DELETE_HORIZON_MASK = 0x40        # batch attribute bit 6: the base timestamp is the delete horizon
INT32_MAX = 2**31 - 1

# Kafka's shipped defaults (topic config / broker config)
DEFAULT_MIN_CLEANABLE_DIRTY_RATIO = 0.5          # min.cleanable.dirty.ratio / log.cleaner.min.cleanable.ratio
DEFAULT_MIN_COMPACTION_LAG_MS = 0                # min.compaction.lag.ms / log.cleaner.min.compaction.lag.ms
DEFAULT_MAX_COMPACTION_LAG_MS = 2**63 - 1        # max.compaction.lag.ms / log.cleaner.max.compaction.lag.ms
DEFAULT_DELETE_RETENTION_MS = 86_400_000         # delete.retention.ms / log.cleaner.delete.retention.ms

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")


def has_delete_horizon(header: BatchHeader) -> bool:
    return bool(header.attributes & DELETE_HORIZON_MASK)


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The delete horizon a previous round wrote into the batch; None when there is none."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None


def is_compacted(cleanup_policy: str) -> bool:
    """``cleanup.policy`` names compact (``compact`` or ``compact,delete`` in either order)."""
    return "compact" in {p.strip() for p in str(cleanup_policy or "").split(",")}


# --- which partition, which range -----------------------------------------------------------

@dataclass(frozen=True)
class SegmentInfo:
    """What the choice of a round needs of one segment (the shell reads it from the Segment)."""
    base_offset: int
    next_offset: int               # one past its last batch
    size_bytes: int
    first_batch_timestamp_ms: int  # max timestamp of its first batch (-1: none)
    largest_timestamp_ms: int      # largest record timestamp (or the file's mtime, Kafka's rule)


def first_uncleanable_offset(segments: list[SegmentInfo], *, active_base_offset: int, last_stable_offset: int,
                             now_ms: int, min_compaction_lag_ms: int) -> int:
    """Kafka's firstUncleanableDirtyOffset: the lowest of the active segment's base, the last
    stable offset and the base of the first closed segment holding a record newer than
    ``min.compaction.lag.ms`` (none of those may be cleaned yet)."""
    bound = min(active_base_offset, last_stable_offset)
    if min_compaction_lag_ms > 0:
        for segment in segments:
            if segment.base_offset >= bound:
                break
            if segment.largest_timestamp_ms > now_ms - min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    return bound


@dataclass(frozen=True)
class Cleanable:
    """A partition's dirt as the cleaner manager sees it."""
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int               # bytes of the closed segments in [first dirty, first uncleanable)
    max_lag_due: bool              # a dirty record is older than max.compaction.lag.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, min_cleanable_dirty_ratio: float) -> bool:
        """Whether a round should run: dirty enough, or a record waited max.compaction.lag.ms."""
        if self.dirty_bytes <= 0 or self.first_uncleanable_offset <= self.first_dirty_offset:
            return False
        return self.max_lag_due or self.dirty_ratio >= min_cleanable_dirty_ratio


def cleanable(segments: list[SegmentInfo], *, checkpoint_offset: int, log_start_offset: int, active_base_offset: int,
              last_stable_offset: int, now_ms: int, min_compaction_lag_ms: int,
              max_compaction_lag_ms: int) -> Cleanable:
    """Kafka's LogCleanerManager.cleanableOffsets + the dirty ratio: a checkpoint below the log
    start (retention moved it) or past the log restarts at the log start."""
    closed = [s for s in segments if s.base_offset < active_base_offset]
    first_dirty = checkpoint_offset
    if first_dirty < log_start_offset or first_dirty > active_base_offset:
        first_dirty = log_start_offset
    bound = first_uncleanable_offset(closed, active_base_offset=active_base_offset,
                                     last_stable_offset=last_stable_offset, now_ms=now_ms,
                                     min_compaction_lag_ms=min_compaction_lag_ms)
    clean = dirty = 0
    max_lag_due = False
    for i, s in enumerate(closed):
        upper = closed[i + 1].base_offset if i + 1 < len(closed) else active_base_offset
        if upper <= first_dirty:
            clean += s.size_bytes
        elif upper <= bound:   # only whole segments below the bound are cleanable
            dirty += s.size_bytes
            if (max_compaction_lag_ms < DEFAULT_MAX_COMPACTION_LAG_MS and s.first_batch_timestamp_ms >= 0
                    and now_ms - s.first_batch_timestamp_ms > max_compaction_lag_ms):
                max_lag_due = True
    return Cleanable(first_dirty, bound, clean, dirty, max_lag_due)


def group_segments(segments: list[SegmentInfo], *, segment_bytes: int) -> list[list[SegmentInfo]]:
    """Consecutive segments merged into groups of at most ``segment.bytes`` (and at most INT32
    offsets apart): each group becomes one cleaned segment (Kafka's groupSegmentsBySize)."""
    groups: list[list[SegmentInfo]] = []
    for segment in segments:
        if groups:
            group = groups[-1]
            size = sum(s.size_bytes for s in group)
            if size + segment.size_bytes <= segment_bytes and segment.next_offset - 1 - group[0].base_offset <= INT32_MAX:
                group.append(segment)
                continue
        groups.append([segment])
    return groups


# --- transactions met while cleaning ---------------------------------------------------------

class TxnTracker:
    """Kafka's CleanedTransactionMetadata: walking the log in offset order, which transactional
    batches belong to an aborted transaction (dropped), and which markers may go: a COMMIT
    marker whose transaction left no batch in what was read, an ABORT marker once none of its
    transaction's batches is left. Aborts whose marker stays are collected in ``retained_aborts``
    (the cleaned segment's transaction index)."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()):
        self._pending: list[tuple[int, int, AbortedTxn]] = []   # heap by first offset
        self._seq = 0
        self._ongoing_aborted: dict[int, list] = {}   # producer id -> [AbortedTxn, last batch offset or None]
        self._ongoing_committed: set[int] = set()
        self.retained_aborts: list[AbortedTxn] = []
        self.add_aborted(aborted)

    def add_aborted(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._pending, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            _, _, txn = heapq.heappop(self._pending)
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_data_batch(self, header: BatchHeader) -> bool:
        """True: the batch belongs to an aborted transaction (may be dropped)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, control_type: int | None) -> bool:
        """True: the marker may be dropped (once its delete horizon passed). ``control_type``:
        the control record's type, None for an empty (already cleaned) control batch."""
        self._consume_up_to(header.last_offset)
        if control_type is None:
            return True
        producer_id = header.producer_id
        if control_type == CONTROL_TYPE_ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing[1] is not None:
                self.retained_aborts.append(ongoing[0])
                return False
            return True
        if control_type == CONTROL_TYPE_COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False


def control_type_of(header: BatchHeader) -> int | None:
    """The type of a control batch's record (ABORT 0, COMMIT 1, others), None when empty."""
    if header.records_count <= 0:
        return None
    records = decode_records(header)
    if not records or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        return -1
    return _CONTROL_KEY.unpack_from(records[0].key, 0)[1]


# --- the offset map --------------------------------------------------------------------------

@dataclass
class OffsetMap:
    """key -> latest offset over the dirty section; ``latest_offset``: the last offset read (the
    round cleans up to it and its successor is the next checkpoint)."""
    offsets: dict[bytes, int] = field(default_factory=dict)
    latest_offset: int = -1

    def get(self, key: bytes) -> int:
        return self.offsets.get(key, -1)

    def __len__(self) -> int:
        return len(self.offsets)


def build_offset_map(batches: Iterable[BatchHeader], *, start_offset: int, end_offset: int,
                     aborted: Iterable[AbortedTxn] = (), max_keys: int | None = None) -> OffsetMap:
    """The latest offset of every key in [start_offset, end_offset), from whole batches in
    offset order (each ``header.buf`` holding the whole batch). Aborted transactional batches and
    control batches put nothing in the map. With ``max_keys`` the map stops growing where it is
    full (the round then covers what it holds, as Kafka's bounded dedupe buffer)."""
    tracker = TxnTracker(aborted)
    result = OffsetMap()
    offsets = result.offsets
    for header in batches:
        if header.base_offset >= end_offset:
            break
        if header.last_offset < start_offset:
            continue
        if header.is_control:
            tracker.on_control_batch(header, control_type_of(header))
            result.latest_offset = max(result.latest_offset, min(header.last_offset, end_offset - 1))
            continue
        if tracker.on_data_batch(header):
            result.latest_offset = max(result.latest_offset, min(header.last_offset, end_offset - 1))
            continue
        for record in decode_records(header):
            if record.offset < start_offset or record.offset >= end_offset:
                continue
            if record.key is not None:
                if max_keys is not None and record.key not in offsets and len(offsets) >= max_keys:
                    return result
                offsets[record.key] = record.offset
            result.latest_offset = max(result.latest_offset, record.offset)
        result.latest_offset = max(result.latest_offset, min(header.last_offset, end_offset - 1))
    return result


# --- cleaning --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProducerLast:
    """What the producer-state table knows of a producer: the last offset of its last data batch
    (None when its last entry is a marker) and its epoch."""
    last_data_offset: int | None
    producer_epoch: int


@dataclass
class CleanStats:
    batches_read: int = 0
    bytes_read: int = 0
    records_read: int = 0
    batches_written: int = 0
    bytes_written: int = 0
    records_written: int = 0


def clean_batches(batches: Iterable[BatchHeader], offset_map: OffsetMap, tracker: TxnTracker, *, now_ms: int,
                  delete_retention_ms: int, active_producers: dict[int, ProducerLast], round_end_offset: int,
                  stats: CleanStats | None = None) -> Iterator[bytes]:
    """The retained form of each batch (whole batches in offset order, each ``header.buf``
    holding the whole batch), as bytes; batches that go yield nothing. ``round_end_offset``: one
    past the last offset this round covers (its last batch is kept, empty if need be)."""
    stats = stats if stats is not None else CleanStats()
    for header in batches:
        stats.batches_read += 1
        stats.bytes_read += header.size_bytes
        stats.records_read += max(header.records_count, 0)
        out = _clean_batch(header, offset_map, tracker, now_ms, delete_retention_ms, active_producers,
                           round_end_offset)
        if out is not None:
            stats.batches_written += 1
            stats.bytes_written += len(out)
            stats.records_written += struct.unpack_from(">i", out, BATCH_OVERHEAD_BYTES - 4)[0]
            yield out


def _is_last_of_producer(header: BatchHeader, active_producers: dict[int, ProducerLast]) -> bool:
    last = active_producers.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def _clean_batch(header: BatchHeader, offset_map: OffsetMap, tracker: TxnTracker, now_ms: int,
                 delete_retention_ms: int, active_producers: dict[int, ProducerLast],
                 round_end_offset: int) -> bytes | None:
    horizon = delete_horizon_ms(header)
    if header.is_control:
        control_type = control_type_of(header)
        can_discard = tracker.on_control_batch(header, control_type)
        discard_records = can_discard and horizon is not None and horizon <= now_ms
    else:
        control_type = None
        can_discard = tracker.on_data_batch(header)
        discard_records = can_discard
    if header.producer_id >= 0 and _is_last_of_producer(header, active_producers):
        retention = "retain_empty"
    elif header.next_offset == round_end_offset:
        retention = "retain_empty"
    elif discard_records:
        return None
    else:
        retention = "delete_empty"

    if discard_records:
        records, kept_all = [], False
    else:
        records = decode_records(header) if header.records_count > 0 else []
        if header.is_control:
            kept = records
        else:
            kept = [r for r in records if _retain_record(r, offset_map, horizon, now_ms)]
        kept_all = len(kept) == len(records)
        records = kept
    # KIP-534: the first round to meet a tombstone, or a marker that may go, stamps the horizon
    needs_horizon = horizon is None and (
        (header.is_control and can_discard and control_type is not None)
        or any(r.value is None for r in records if not header.is_control))
    if kept_all and not needs_horizon:
        return bytes(header.buf[header.offset_in_buf:header.offset_in_buf + header.size_bytes])
    if not records:
        if retention == "delete_empty":
            return None
        return _encode(header, [], horizon)
    if needs_horizon:
        horizon = now_ms + delete_retention_ms
    return _encode(header, records, horizon)


def _retain_record(record, offset_map: OffsetMap, horizon: int | None, now_ms: int) -> bool:
    if record.offset > offset_map.latest_offset:
        return True                      # past what this round's map covers
    if record.key is None:
        return False                     # a compacted topic keeps no record without a key
    if record.offset < offset_map.get(record.key):
        return False                     # a later record of the key exists
    return record.value is not None or horizon is None or now_ms < horizon


def _encode(header: BatchHeader, records: list, horizon: int | None) -> bytes:
    """A v2 batch with the header's base offset, last offset delta, producer fields, leader epoch
    and codec, holding ``records`` (offset deltas kept), CRC recomputed. Empty: header only."""
    base = header.base_offset
    log_append_time = header.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    if horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    if records:
        timestamps = [r.timestamp_ms for r in records]
        max_timestamp = header.max_timestamp if log_append_time else max(timestamps)
        base_timestamp = horizon if horizon is not None else (header.base_timestamp if log_append_time
                                                               else timestamps[0])
        body = bytearray()
        for r in records:
            delta = 0 if log_append_time else r.timestamp_ms - base_timestamp
            body += _encode_record(r.offset - base, delta, r.key, r.value, r.headers or ())
        codec = header.compression
        payload = compress(codec, bytes(body)) if codec != COMPRESSION_NONE else bytes(body)
        attributes |= codec & COMPRESSION_MASK
    else:
        max_timestamp = header.max_timestamp
        base_timestamp = horizon if horizon is not None else header.base_timestamp
        payload = b""
    batch = bytearray(BATCH_OVERHEAD_BYTES + len(payload))
    _HEADER.pack_into(batch, 0, base, len(batch) - LOG_OVERHEAD_BYTES, header.partition_leader_epoch, MAGIC_V2, 0,
                      attributes, header.last_offset_delta, base_timestamp, max_timestamp, header.producer_id,
                      header.producer_epoch, header.base_sequence, len(records))
    batch[RECORDS_POS:] = payload
    rewrite_crc(batch, 0)
    return bytes(batch)
