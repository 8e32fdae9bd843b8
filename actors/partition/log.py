"""A partition's segmented on-disk log (Kafka's UnifiedLog/LocalLog without replication or tiers).

Directory layout::

    00000000000000000000.log / .index / .timeindex    one Segment per base offset
    log-start-offset-checkpoint                       survives retention / DeleteRecords
    recovery-point-offset-checkpoint                  every segment below it is fsynced
    .kray_cleanshutdown                               present only between close() and open()

Functional core: no clock reads (``now_ms`` is passed in), no threads. Appends are not fsynced
(Kafka relies on replication + the page cache). A rolled segment is fsynced soon after, off the
event loop, as Kafka's log flushes it in the background: :meth:`Log.take_rolled` hands it (as
duplicated file descriptors) to whoever runs :func:`flush_rolled`, which then moves the recovery
point past it. An fsync of a 1 GiB segment takes ~0.5 s here: done in line, it would hold up every
partition its process hosts. :meth:`Log.flush` / :meth:`Log.close` fsync what is not yet flushed.
After an unclean shutdown every segment from the recovery point on is checked, not only the last.
"""

from __future__ import annotations

import os
import shutil
import threading
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from protocol.record_batch import (
    BATCH_OVERHEAD_BYTES, INT32_MAX, LOG_OVERHEAD_BYTES, NO_TIMESTAMP, BatchHeader, CorruptRecord, iter_batches,
    parse_header, patch_base_offset, patch_leader_epoch, set_log_append_time,
)

from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from .segment import (
    DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, MAX_SEGMENT_BYTES, TIME_INDEX_SUFFIX, Segment, parse_segment_stem,
    segment_file_name,
)

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kray_cleanshutdown"   # written by close(), consumed by open()
OFFSET_GAPS_MARKER = "offset-gaps"  # present once the log has gaps (cleaned, or a follower's copy of a cleaned log)

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024        # segment.bytes
DEFAULT_INDEX_INTERVAL_BYTES = 4096               # index.interval.bytes
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024    # segment.index.bytes
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000         # segment.ms


class FileSlice(NamedTuple):
    """Bytes of a segment file: what a fetch sends, named rather than copied."""
    path: str
    position: int
    size_bytes: int


class OffsetOutOfRange(Exception):
    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(f"offset {offset} outside [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True, slots=True)
class AppendInfo:
    base_offset: int
    last_offset: int
    log_append_time_ms: int      # -1 unless LogAppendTime stamped the batches
    max_timestamp_ms: int
    rolled: bool = False         # a new segment was started for this append


def _write_text_atomically(path: Path, text: str, *, fsync: bool = True) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_offset(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def unlink_files(paths: list[Path]) -> None:
    """Unlink what `Log.take_deleted` handed over (for a thread of its own: freeing the page
    cache of a deleted segment takes time)."""
    for path in paths:
        path.unlink(missing_ok=True)


def flush_rolled(log: "Log", rolled: list[tuple[list[int], int]], generation: int) -> None:
    """fsync what `Log.take_rolled` handed over (when the log's recovery generation was
    `generation`), in order, then checkpoint the recovery point, unless a truncation lowered it
    meanwhile (for a thread of its own: it blocks on the disk)."""
    recovery_point = None
    try:
        for fds, point in rolled:
            for fd in fds:
                os.fsync(fd)
            recovery_point = point
    finally:
        for fds, _ in rolled:
            for fd in fds:
                os.close(fd)
        with log.recovery_lock:
            if recovery_point is not None and log.recovery_generation == generation and log.directory.is_dir():
                _write_text_atomically(log.directory / RECOVERY_POINT_CHECKPOINT, f"{recovery_point}\n")


SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
CLEANING_DIR = "cleaner.tmp"     # the cleaner writes a round's new segments here: dropped if found at open
SWAP_DIR = "cleaner.swap"        # the same, renamed once complete (the commit point): finished at open
SWAP_MANIFEST = "replaces"       # in SWAP_DIR: the segments (base offset, generation) the new ones replace


def _unlink_segment_files(directory: Path, base_offset: int, generation: int) -> None:
    for suffix in SEGMENT_SUFFIXES:
        (directory / segment_file_name(base_offset, suffix, generation)).unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def finish_cleaner_swap(directory: Path, *, check_replaced: bool = True) -> list[tuple[int, int]]:
    """Kafka's .cleaned/.swap protocol, one directory per round: a round's files in CLEANING_DIR
    were never committed (the old segments stand; they go); a SWAP_DIR was committed: its files
    move into the log directory (names no old file had) and the segments its manifest names are
    deleted, then it goes. Idempotent: a crash in the middle is finished by the next open.
    Returns the (base offset, generation) of the segments moved in."""
    cleaning = directory / CLEANING_DIR
    if cleaning.is_dir():
        shutil.rmtree(cleaning, ignore_errors=True)
    swap = directory / SWAP_DIR
    if not swap.is_dir():
        return []
    manifest = swap / SWAP_MANIFEST
    replaced = [tuple(int(v) for v in line.split()) for line in manifest.read_text().splitlines() if line.strip()]
    present = set(directory_segments(directory))
    if check_replaced and not any(parse_segment_stem(p.stem) in present for p in swap.iterdir() if p.suffix == LOG_SUFFIX) and not all(
            tuple(r) in present for r in replaced):
        # nothing moved in yet and a replaced segment is gone (retention deleted it, or a
        # truncation, after the round was planned): the round is void
        shutil.rmtree(swap, ignore_errors=True)
        return []
    moved = set()
    for path in swap.iterdir():
        if path.name == SWAP_MANIFEST:
            continue
        parsed = parse_segment_stem(path.stem)
        if parsed is not None:
            moved.add(parsed)
        os.replace(path, directory / path.name)
    for base, generation in replaced:
        _unlink_segment_files(directory, base, generation)
    _fsync_dir(directory)
    manifest.unlink()
    swap.rmdir()
    return sorted(moved)


def directory_segments(directory: Path) -> list[tuple[int, int]]:
    out = []
    for path in directory.glob("*" + LOG_SUFFIX):
        parsed = parse_segment_stem(path.stem)
        if parsed is not None:
            out.append(parsed)
    return sorted(out)


class Log:
    def __init__(self, directory: Path, segments: list[Segment], log_start_offset: int, *,
                 segment_bytes: int, index_interval_bytes: int, max_index_bytes: int, segment_ms: int):
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        self.segment_ms = segment_ms
        self._segments = segments
        self._base_offsets = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._high_watermark = self.log_end_offset
        self._unflushed: list[Segment] = []  # rolled, not yet handed over to be fsynced
        self._deleted: list[Path] = []  # files of deleted segments, renamed, not yet handed over to be unlinked
        # a truncation lowers the recovery point and starts a new generation: a flush handed over
        # before it (and done on another thread) must not raise the point again
        self.recovery_generation = 0
        self.recovery_lock = threading.Lock()
        self.allow_gaps = False   # see OFFSET_GAPS_MARKER
        self.cleaner_generation = max((s.generation for s in segments), default=0)

    # --- opening / recovery -----------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path | str, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
             index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
             max_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES,
             segment_ms: int = DEFAULT_SEGMENT_MS, now_ms: int = NO_TIMESTAMP) -> "Log":
        """Open (or create) the log in ``directory``.

        Recovery: older segments are trusted (indexes rebuilt only if missing/inconsistent); the
        active (last) segment is CRC-checked from its last index entry after a clean shutdown, or
        entirely (indexes rebuilt) after an unclean one, like Kafka's recovery past the recovery
        point; a torn/corrupt tail is truncated at the last good batch boundary. The high
        watermark starts at the log end offset (single replica); replication can lower it."""
        if not 0 < segment_bytes <= MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be in (0, {MAX_SEGMENT_BYTES}]")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        finish_cleaner_swap(directory)
        found: dict[int, int] = {}   # base offset -> generation of its data file
        for path in directory.glob("*" + LOG_SUFFIX):
            parsed = parse_segment_stem(path.stem)
            if parsed is not None:
                base, generation = parsed
                if base in found:   # never left by a finished swap; keep the newer rewrite
                    _unlink_segment_files(directory, base, min(generation, found[base]))
                found[base] = max(generation, found.get(base, 0))
        bases = sorted(found)
        for path in directory.iterdir():
            parsed = parse_segment_stem(path.stem) if path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX,
                                                                      TXN_INDEX_SUFFIX) else None
            stale = path.suffix in (".tmp", DELETED_SUFFIX) or (
                parsed is not None and found.get(parsed[0], -1) != parsed[1])
            if stale:
                path.unlink()
        allow_gaps = (directory / OFFSET_GAPS_MARKER).exists()
        marker = directory / CLEAN_SHUTDOWN_MARKER
        clean_shutdown = marker.exists()
        marker.unlink(missing_ok=True)
        checkpoint = directory / LOG_START_OFFSET_CHECKPOINT
        try:
            log_start_offset = int(checkpoint.read_text().strip())
        except (OSError, ValueError):  # missing or torn: the first segment's base offset wins
            log_start_offset = 0
        knobs = dict(index_interval_bytes=index_interval_bytes, max_index_bytes=max_index_bytes)
        recovery_point = _read_offset(directory / RECOVERY_POINT_CHECKPOINT)
        if recovery_point is None:  # unknown: every segment is checked (Kafka's rule)
            recovery_point = 0
        segments, recovered = [], False
        for i, base in enumerate(bases):
            if recovered and (segments[-1].recovery_truncated or (
                    not allow_gaps and segments[-1].next_offset < base)):
                # a recovered segment lost its tail: the segments after it go too (as Kafka's
                # recovery truncates the log at the first bad batch). (Offsets may have gaps
                # between segments: the log cleaner's, and a follower's copy of them.)
                for later in bases[i:]:
                    _unlink_segment_files(directory, later, found[later])
                break
            # every segment that holds offsets at or past the recovery point (Kafka's rule), and the last
            recover = recovered = i == len(bases) - 1 or (not clean_shutdown and bases[i + 1] > recovery_point)
            segments.append(Segment.open(directory, base, recover=recover,
                                         full_recovery=recover and not clean_shutdown, generation=found[base],
                                         allow_gaps=allow_gaps, **knobs))
        if not segments:
            segments = [Segment.create(directory, log_start_offset, now_ms=now_ms, **knobs)]
            # not fsynced (creating 1,000 partitions would wait for 1,000 fsyncs): lost in a crash,
            # recovery checks every segment
            _write_text_atomically(directory / RECOVERY_POINT_CHECKPOINT, f"{log_start_offset}\n", fsync=False)
        log_end_offset = segments[-1].next_offset
        log_start_offset = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
        log = cls(directory, segments, log_start_offset, segment_bytes=segment_bytes,
                  index_interval_bytes=index_interval_bytes, max_index_bytes=max_index_bytes,
                  segment_ms=segment_ms)
        if allow_gaps:
            log.note_gaps()
        return log

    # --- offsets ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = max(self._log_start_offset, min(offset, self.log_end_offset))

    @property
    def active_segment_base_offset(self) -> int:
        return self._segments[-1].base_offset

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._base_offsets)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    def _checkpoint_log_start_offset(self) -> None:
        _write_text_atomically(self.directory / LOG_START_OFFSET_CHECKPOINT,
                               f"{self._log_start_offset}\n")

    def _segment_slot(self, offset: int) -> int:
        return max(0, bisect_right(self._base_offsets, offset) - 1)

    # --- append -----------------------------------------------------------------------------

    def append(self, records, *, leader_epoch: int | None, now_ms: int,
               log_append_time: bool = False, assign_offsets: bool = True) -> AppendInfo:
        """Append ≥1 whole batches with one write.

        Offsets are assigned by patching each batch's baseOffset (and partitionLeaderEpoch unless
        ``leader_epoch`` is None) in one writable copy of the blob; ``log_append_time`` stamps
        maxTimestamp (CRC recomputed). With ``assign_offsets=False`` (replication) the batches keep
        their offsets, which must continue exactly at the log end offset. Caller validates
        CRC/limits."""
        buf = bytearray(records)
        view = memoryview(buf)
        next_offset = self.log_end_offset
        batches: list[tuple[int, int, int, int, int]] = []
        max_timestamp = NO_TIMESTAMP
        for header in iter_batches(view):
            position = header.offset_in_buf
            if header.last_offset_delta < 0:
                raise CorruptRecord(f"negative lastOffsetDelta in batch at position {position}")
            if assign_offsets:
                base_offset = next_offset
                patch_base_offset(view, position, base_offset)
            else:
                base_offset = header.base_offset
                if base_offset < next_offset:  # offsets only grow; gaps are the leader's log cleaner's
                    raise ValueError(f"batch offset {base_offset} is below the next offset {next_offset}")
                if base_offset > next_offset:
                    self.note_gaps()
            if leader_epoch is not None:
                patch_leader_epoch(view, position, leader_epoch)
            batch_max_timestamp = header.max_timestamp
            if log_append_time:
                set_log_append_time(view, position, now_ms)
                batch_max_timestamp = now_ms
            last_offset = base_offset + header.last_offset_delta
            batches.append((position, base_offset, last_offset, batch_max_timestamp, header.size_bytes))
            max_timestamp = max(max_timestamp, batch_max_timestamp)
            next_offset = last_offset + 1
        if not batches:
            raise CorruptRecord("no record batches to append")
        rolled = self._maybe_roll(len(buf), batches[0][1], batches[-1][2], batches[0][3], now_ms)
        self._segments[-1].append(view, batches)
        return AppendInfo(batches[0][1], batches[-1][2], now_ms if log_append_time else NO_TIMESTAMP,
                          max_timestamp, rolled)

    def note_gaps(self) -> None:
        """The log has (or is about to have) offset gaps: remembered on disk, so that recovery
        accepts them (a gap-free log's recovery treats a jump as damage to a base offset)."""
        if not self.allow_gaps:
            _write_text_atomically(self.directory / OFFSET_GAPS_MARKER, "")
            self.allow_gaps = True
            for segment in self._segments:
                segment.allow_gaps = True

    def _maybe_roll(self, size_bytes: int, first_offset: int, last_offset: int,
                    first_max_timestamp_ms: int, now_ms: int) -> bool:
        active = self._segments[-1]
        if active.size_bytes == 0:
            return False
        if active.first_batch_timestamp_ms >= 0:
            waited_ms = first_max_timestamp_ms - active.first_batch_timestamp_ms
        else:
            waited_ms = now_ms - active.created_ms if active.created_ms >= 0 and now_ms >= 0 else 0
        if (active.size_bytes + size_bytes > self.segment_bytes
                or active.offset_index.is_full() or active.time_index.is_full()
                or last_offset - active.base_offset > INT32_MAX
                or (self.segment_ms >= 0 and waited_ms > self.segment_ms)):
            self.roll(max(first_offset, self.log_end_offset), now_ms=now_ms)
            return True
        return False

    def roll(self, base_offset: int | None = None, *, now_ms: int = NO_TIMESTAMP) -> Segment:
        """Start a new active segment at ``base_offset`` (default: the log end offset)."""
        base_offset = self.log_end_offset if base_offset is None else base_offset
        previous = self._segments[-1]
        previous.mark_inactive()
        previous.write_indexes()
        self._unflushed.append(previous)  # fsynced soon, off the event loop (see take_rolled)
        segment = Segment.create(self.directory, base_offset, now_ms=now_ms,
                                 index_interval_bytes=self.index_interval_bytes,
                                 max_index_bytes=self.max_index_bytes, allow_gaps=self.allow_gaps)
        if previous.size_bytes == 0:  # an empty active segment is simply replaced
            self._drop_segments([previous], delete_files=previous.base_offset != base_offset)
        self._segments.append(segment)
        self._base_offsets.append(base_offset)
        return segment

    # --- read -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> bytes:
        """Whole batches starting with the batch containing ``offset`` (it may start before
        ``offset``; clients skip). At most ``max_bytes`` unless the first batch alone is larger
        (KIP-74: one whole batch is returned if there is one; Kafka grants this only to the first
        partition of a fetch response, hence ``min_one_batch``), never batches at or beyond
        ``max_offset`` (the high watermark). Reads stay within one segment, like Kafka's.
        Empty at the end; OffsetOutOfRange outside [log_start_offset, log_end_offset]."""
        found = self._find(offset, max_bytes, max_offset, min_one_batch)
        if found is None:
            return b""
        segment, position, size_bytes = found
        return os.pread(segment.fd, size_bytes, position)

    def slice(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
              min_one_batch: bool = True) -> FileSlice:
        """Where ``read`` would read: the segment file and byte range, for a reader in another
        process of this node to send with sendfile (the zero-copy fetch). The range holds whole
        batches below ``max_offset`` and stays valid while the segment exists: batches are never
        rewritten in place, only truncated above the high watermark or deleted with the segment."""
        found = self._find(offset, max_bytes, max_offset, min_one_batch)
        if found is None:
            return FileSlice("", 0, 0)
        segment, position, size_bytes = found
        return FileSlice(str(segment.log_path), position, size_bytes)

    def slice_spans(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                    min_one_batch: bool = True) -> tuple[FileSlice, list[tuple[int, int, int, int]]]:
        """``slice`` and the batches in it, (position, base offset, last offset, size) each, read
        from their headers only: what a share-partition leader acquires from, without the bytes."""
        found = self._find(offset, max_bytes, max_offset, min_one_batch)
        if found is None:
            return FileSlice("", 0, 0), []
        segment, position, size_bytes = found
        return FileSlice(str(segment.log_path), position, size_bytes), segment.spans(position, size_bytes)

    def _find(self, offset: int, max_bytes: int, max_offset: int | None,
              min_one_batch: bool) -> tuple[Segment, int, int] | None:
        log_end_offset = self.log_end_offset
        if offset < self._log_start_offset or offset > log_end_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, log_end_offset)
        upper = log_end_offset if max_offset is None else min(max_offset, log_end_offset)
        if offset >= upper:
            return None
        for segment in self._segments[self._segment_slot(offset):]:
            if segment.base_offset >= upper:
                break
            where = segment.slice(offset, max_bytes, upper, min_one_batch=min_one_batch)
            if where is not None:
                return (segment, *where) if where[1] else None
        return None

    def iter_batch_headers(self, start_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers (only the 61-byte header is guaranteed readable) from the batch containing
        ``start_offset`` (default: log start) to the end; used for producer-state rebuilds."""
        offset = self._log_start_offset if start_offset is None else start_offset
        for segment in self._segments[self._segment_slot(offset):]:
            found = segment.locate(offset)
            if found is None:
                continue
            for _position, header in segment.scan(found[0], segment.size_bytes, whole=False):
                yield header

    # --- aborted transactions ---------------------------------------------------------------

    def add_aborted_txn(self, entry: AbortedTxn) -> None:
        """Index an abort in the segment holding its marker (``entry.last_offset``)."""
        self._segments[self._segment_slot(entry.last_offset)].txn_index.append(entry)

    def collect_aborted_txns(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_offset), from the segment
        holding ``fetch_offset`` on (markers lie after their data), stopping where an entry shows
        the rest cannot overlap (Kafka's collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_slot(fetch_offset):]:
            if segment.txn_index.collect(fetch_offset, upper_offset, found):
                break
        return found

    def headers_in(self, offset: int, where: FileSlice) -> list[BatchHeader]:
        """The batch headers of ``where`` (a slice of the segment holding ``offset``, as
        ``slice_spans`` answered it), read with one pread."""
        segment = self._segments[self._segment_slot(offset)]
        return [h for _, h in segment.scan(where.position, where.position + where.size_bytes, whole=False)]

    def bytes_in(self, offset: int, position: int, size_bytes: int) -> bytes:
        """``size_bytes`` bytes at ``position`` of the segment holding ``offset`` (a part of a
        slice ``slice_spans`` answered), read with one pread."""
        segment = self._segments[self._segment_slot(offset)]
        return os.pread(segment.fd, size_bytes, position)

    def segment_upper_offset(self, offset: int) -> int:
        """The first offset past the segment holding ``offset`` (a read stays within it)."""
        slot = self._segment_slot(offset)
        return self._base_offsets[slot + 1] if slot + 1 < len(self._base_offsets) else self.log_end_offset

    def take_missing_txn_indexes(self) -> bool:
        """True when a segment holding records was opened without its .txnindex file (the
        caller rebuilds every index from the log); the flags are cleared."""
        missing = any(s.txn_index_missing and s.size_bytes for s in self._segments)
        for segment in self._segments:
            segment.txn_index_missing = False
        return missing

    # --- timestamps -------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record with timestamp >= ``timestamp_ms``.

        Exact: segments are skipped by max timestamp, the time index narrows the start, batch
        headers are walked, and only the first batch whose maxTimestamp qualifies is decoded."""
        for segment in self._segments:
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the log's max timestamp (ListOffsets -3)."""
        best = None
        for segment in self._segments:
            if segment.max_timestamp_ms != NO_TIMESTAMP and (
                    best is None or segment.max_timestamp_ms > best.max_timestamp_ms):
                best = segment
        return None if best is None else best.max_timestamp_record()

    # --- retention / deletion ---------------------------------------------------------------

    def apply_retention(self, now_ms: int, *, retention_ms: int, retention_bytes: int) -> list[int]:
        """Delete whole segments, oldest first, like Kafka's deleteOldSegments: by time (segment's
        largest timestamp older than now - retention_ms), then by size (while the log exceeds
        retention_bytes), then segments wholly below log_start_offset. -1 disables a limit. Only
        segments wholly below the high watermark go; if every segment qualifies the active one is
        rolled first. Returns the deleted segments' base offsets."""
        deleted: list[int] = []
        if retention_ms >= 0:
            deleted += self._delete_prefix(
                lambda segment, _next: now_ms - segment.largest_timestamp_ms() > retention_ms, now_ms)
        if retention_bytes >= 0:
            excess = [self.size_bytes - retention_bytes]

            def over_size(segment: Segment, _next: Segment | None) -> bool:
                if excess[0] - segment.size_bytes >= 0:
                    excess[0] -= segment.size_bytes
                    return True
                return False
            deleted += self._delete_prefix(over_size, now_ms)
        deleted += self._delete_prefix(
            lambda _segment, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset, now_ms)
        return deleted

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance log_start_offset to ``offset`` (<= high watermark) and delete
        segments wholly below it. Returns the new log start offset (the low watermark)."""
        if offset > self._high_watermark or offset < 0:
            raise OffsetOutOfRange(offset, self._log_start_offset, self._high_watermark)
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._checkpoint_log_start_offset()
            self._delete_prefix(
                lambda _segment, nxt: nxt is not None and nxt.base_offset <= offset, NO_TIMESTAMP)
        return self._log_start_offset

    def _delete_prefix(self, predicate: Callable[[Segment, Segment | None], bool], now_ms: int) -> list[int]:
        doomed: list[Segment] = []
        segments = self._segments
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            last_and_empty = nxt is None and segment.size_bytes == 0
            if self._high_watermark >= upper and not last_and_empty and predicate(segment, nxt):
                doomed.append(segment)
            else:
                break
        if not doomed:
            return []
        if len(doomed) == len(segments):
            self.roll(now_ms=now_ms)
        self._drop_segments(doomed, delete_files=True)
        new_start = max(self._log_start_offset, self._segments[0].base_offset)
        if new_start != self._log_start_offset:
            self._log_start_offset = new_start
            self._checkpoint_log_start_offset()
        return [s.base_offset for s in doomed]

    def _drop_segments(self, doomed: list[Segment], *, delete_files: bool) -> None:
        ids = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in ids]
        self._base_offsets = [s.base_offset for s in self._segments]
        for segment in doomed:
            if delete_files:
                self._deleted += segment.mark_deleted()
            else:
                segment.close()

    def take_deleted(self) -> list[Path]:
        """The renamed files of the segments deleted since the last call, for `unlink_files` (on
        another thread). Files never handed over are removed by the next `open`."""
        deleted, self._deleted = self._deleted, []
        return deleted

    def truncate_to(self, offset: int, *, now_ms: int = NO_TIMESTAMP) -> None:
        """Remove every batch whose last offset is >= ``offset`` (replication truncation). Below
        the log start offset the log is emptied and restarts at ``offset``."""
        if offset >= self.log_end_offset:
            return
        if offset < self._log_start_offset or offset <= self._segments[0].base_offset:
            self.reset_to(offset, now_ms=now_ms)
            return
        self._drop_segments([s for s in self._segments if s.base_offset >= offset], delete_files=True)
        self._segments[-1].truncate_to(offset)
        self._high_watermark = min(self._high_watermark, self.log_end_offset)
        self._lower_recovery_point(offset)

    def reset_to(self, offset: int, *, now_ms: int = NO_TIMESTAMP) -> None:
        """Delete the whole log and start again, empty, at ``offset``: below the log start, or
        for a follower whose log ends below its leader's log start (the offset may be past ours)."""
        fresh = Segment.create(self.directory, offset, now_ms=now_ms,
                               index_interval_bytes=self.index_interval_bytes,
                               max_index_bytes=self.max_index_bytes, allow_gaps=self.allow_gaps)
        self._drop_segments([s for s in self._segments if s.base_offset != offset], delete_files=True)
        for segment in self._segments:  # a segment at the same base offset: its files are reused
            segment.close()
        self._segments, self._base_offsets = [fresh], [offset]
        self._log_start_offset = offset
        self._checkpoint_log_start_offset()
        self._high_watermark = offset
        self._lower_recovery_point(offset)

    def _lower_recovery_point(self, offset: int) -> None:
        """After a truncation (as Kafka's truncateTo): what lies at or past `offset` may be
        rewritten and not flushed yet, so recovery must check it again. A cleaning round
        committed but not swapped in is void (its segments may hold what was truncated)."""
        shutil.rmtree(self.directory / SWAP_DIR, ignore_errors=True)
        with self.recovery_lock:
            self.recovery_generation += 1
            path = self.directory / RECOVERY_POINT_CHECKPOINT
            current = _read_offset(path)
            if current is None or current > offset:
                _write_text_atomically(path, f"{offset}\n")
        cleaned_to = read_cleaner_checkpoint(self.directory)
        if cleaned_to > offset:   # what comes again past the truncation is dirty (Kafka's maybeTruncateCheckpoint)
            _write_text_atomically(self.directory / CLEANER_OFFSET_CHECKPOINT, f"{offset}\n")

    # --- the log cleaner (compacted topics) --------------------------------------------------

    def segment_infos(self) -> list:
        """cleaner.SegmentInfo of every segment, oldest first."""
        from .cleaner import SegmentInfo
        segments = self._segments
        return [SegmentInfo(s.base_offset, s.next_offset, s.size_bytes, s.first_batch_timestamp_ms,
                            s.largest_timestamp_ms()) for s in segments]

    def cleanable(self, *, last_stable_offset: int, now_ms: int, min_compaction_lag_ms: int,
                  max_compaction_lag_ms: int):
        """cleaner.Cleanable of this log: its dirty section and ratio."""
        from .cleaner import cleanable
        return cleanable(self.segment_infos(), checkpoint_offset=read_cleaner_checkpoint(self.directory),
                         log_start_offset=self._log_start_offset,
                         active_base_offset=self._segments[-1].base_offset,
                         last_stable_offset=min(last_stable_offset, self._high_watermark), now_ms=now_ms,
                         min_compaction_lag_ms=min_compaction_lag_ms, max_compaction_lag_ms=max_compaction_lag_ms)

    def plan_cleaning(self, dirt, *, active_producers: dict, now_ms: int, delete_retention_ms: int,
                      io_max_bytes_per_second: float) -> CleaningPlan:
        """A round over the closed segments below ``dirt.first_uncleanable_offset`` (a
        cleaner.Cleanable this log answered), for `build_cleaned` on another thread."""
        closed = []
        segments = self._segments
        for i, segment in enumerate(segments[:-1]):
            upper = segments[i + 1].base_offset
            if upper > dirt.first_uncleanable_offset:
                break
            segment.write_indexes()
            closed.append((segment.base_offset, segment.generation, str(segment.log_path), upper,
                           segment.size_bytes, os.stat(segment.log_path).st_mtime))
        aborted = self.collect_aborted_txns(self._log_start_offset, dirt.first_uncleanable_offset) if closed else []
        self.cleaner_generation += len(closed) + 1
        return CleaningPlan(self.directory, dirt.first_dirty_offset, dirt.first_uncleanable_offset, closed,
                            aborted, active_producers, now_ms, delete_retention_ms, self.segment_bytes,
                            self.index_interval_bytes, self.max_index_bytes,
                            self.cleaner_generation - len(closed), self.recovery_generation,
                            io_max_bytes_per_second)

    def swap_cleaned(self, result: CleaningResult) -> bool:
        """Put a round's segments in place of those it replaced, unless the log changed under
        it (retention deleted one of them, a truncation): then the round is dropped. The old
        files are renamed .deleted (handed to `take_deleted`), so a fetch that named them finds
        them gone and asks again; the new ones have names no file had. False: dropped."""
        swap = self.directory / SWAP_DIR
        slots = {(s.base_offset, s.generation): i for i, s in enumerate(self._segments)}
        positions = [slots.get(key) for key in result.replaced]
        valid = (result.recovery_generation == self.recovery_generation and None not in positions
                 and positions == list(range(positions[0], positions[0] + len(positions)))
                 and positions[-1] < len(self._segments) - 1)
        if not valid:
            shutil.rmtree(swap, ignore_errors=True)
            return False
        self.note_gaps()
        first = positions[0]
        old = self._segments[first:first + len(positions)]
        # the new files first: once one is in, a crash is finished at open whatever else happened
        for path in sorted(swap.iterdir()):
            if path.name != SWAP_MANIFEST:
                os.replace(path, self.directory / path.name)
        for segment in old:
            self._deleted += segment.mark_deleted()
        finish_cleaner_swap(self.directory, check_replaced=False)   # checked above
        knobs = dict(index_interval_bytes=self.index_interval_bytes, max_index_bytes=self.max_index_bytes)
        new = [Segment.open(self.directory, base, recover=False, generation=generation, allow_gaps=True, **knobs)
               for base, generation in result.created]
        self._segments[first:first + len(positions)] = new
        self._base_offsets = [s.base_offset for s in self._segments]
        _write_text_atomically(self.directory / CLEANER_OFFSET_CHECKPOINT, f"{result.end_offset}\n")
        return True

    # --- lifecycle --------------------------------------------------------------------------

    def take_rolled(self) -> list[tuple[list[int], int]]:
        """The segments rolled since the last call, to be fsynced by `flush_rolled` (on another
        thread): per segment, duplicates of its file descriptors (valid even if the segment is
        deleted or closed meanwhile) and the recovery point once it is flushed."""
        rolled = [(segment.dup_fds(), segment.next_offset) for segment in self._unflushed if segment.fd >= 0]
        self._unflushed.clear()
        return rolled

    def flush(self) -> None:
        """fsync the rolled segments not handed over yet, and the active segment and its indexes."""
        for segment in self._unflushed:
            if segment.fd >= 0:
                segment.fsync()
        self._unflushed.clear()
        self._segments[-1].fsync()

    def close(self) -> None:
        """Flush everything and leave the clean-shutdown marker (next open skips full recovery)."""
        active = self._segments[-1]
        if active.fd < 0:
            return
        active.mark_inactive()
        self.flush()
        for segment in self._segments:
            segment.close()
        _write_text_atomically(self.directory / CLEAN_SHUTDOWN_MARKER, "")


# --- the log cleaner's rounds (compacted topics; the decisions are actors/partition/cleaner.py's) ---

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"   # where the next round's dirty section starts
CLEANER_READ_CHUNK_BYTES = 1024 * 1024
CLEANER_WRITE_BUFFER_BYTES = 1024 * 1024
CLEANER_MAX_KEYS = 1_000_000    # keys in one round's offset map (Kafka bounds it by log.cleaner.dedupe.buffer.size)


@dataclass(frozen=True)
class CleaningPlan:
    """One round, planned on the partition's thread: plain data for `build_cleaned` (any thread)."""
    directory: Path
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: list            # [(base offset, generation, path, upper offset, size bytes, mtime s)] from the log start
    aborted: list             # AbortedTxn overlapping the segments
    active_producers: dict    # producer id -> cleaner.ProducerLast
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    max_index_bytes: int
    first_generation: int     # the new segments' generations start here
    recovery_generation: int  # a truncation meanwhile voids the round
    io_max_bytes_per_second: float


@dataclass
class CleaningResult:
    replaced: list            # [(base offset, generation)] of the old segments
    created: list             # [(base offset, generation)] of the new ones, in SWAP_DIR
    end_offset: int           # the next round's first dirty offset
    recovery_generation: int
    stats: object             # cleaner.CleanStats
    elapsed_s: float


class _Throttle:
    """Kafka's cleaner Throttler, roughly: sleep so that bytes read + written stay under the rate."""

    def __init__(self, bytes_per_second: float):
        import time
        self._time = time
        self.rate = bytes_per_second
        self.start = time.monotonic()
        self.done = 0

    def __call__(self, size_bytes: int) -> None:
        self.done += size_bytes
        if self.rate <= 0 or self.rate >= 1e300:
            return
        ahead_s = self.done / self.rate - (self._time.monotonic() - self.start)
        if ahead_s > 0.001:
            self._time.sleep(ahead_s)


def _read_batches(path: str, size_bytes: int, throttle: _Throttle) -> Iterator[BatchHeader]:
    """Every whole batch of a segment file (each header's buf holds the whole batch), read in
    chunks through its own descriptor (the partition may delete the segment meanwhile)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        position, pending = 0, b""
        while position < size_bytes or pending:
            chunk = os.pread(fd, min(CLEANER_READ_CHUNK_BYTES, size_bytes - position), position) if position < size_bytes else b""
            position += len(chunk)
            throttle(len(chunk))
            data = memoryview(pending + chunk) if pending else memoryview(chunk)
            offset, n = 0, len(data)
            while n - offset >= BATCH_OVERHEAD_BYTES:
                length = int.from_bytes(data[offset + 8:offset + 12], "big", signed=True)
                size = LOG_OVERHEAD_BYTES + length
                if n - offset < size:
                    break
                yield parse_header(data[offset:offset + size], 0)
                offset += size
            pending = bytes(data[offset:])
            if not chunk:
                if pending:
                    raise CorruptRecord(f"{path}: {len(pending)} bytes of a torn batch at its end")
                break
    finally:
        os.close(fd)


def build_cleaned(plan: CleaningPlan) -> CleaningResult | None:
    """One round's work, off the partition's thread: the offset map of the dirty section, then
    every segment below the round's end rewritten into new segments (grouped up to
    segment.bytes) in CLEANING_DIR, fsynced, and committed by renaming it SWAP_DIR. None: nothing
    to clean. The log is not touched: `Log.swap_cleaned` puts the result in place."""
    import time
    from .cleaner import CleanStats, SegmentInfo, TxnTracker, build_offset_map, clean_batches, group_segments
    started = time.monotonic()
    throttle = _Throttle(plan.io_max_bytes_per_second)
    dirty = [s for s in plan.segments if s[3] > plan.first_dirty_offset and s[3] <= plan.first_uncleanable_offset]
    if not dirty:
        return None

    def batches_of(segments):
        for _base, _gen, path, _upper, size, _mtime in segments:
            yield from _read_batches(path, size, throttle)

    offset_map = build_offset_map(batches_of(dirty), start_offset=plan.first_dirty_offset,
                                  end_offset=plan.first_uncleanable_offset, aborted=plan.aborted,
                                  max_keys=CLEANER_MAX_KEYS)
    if offset_map.latest_offset < plan.first_dirty_offset:
        return None
    end_offset = offset_map.latest_offset + 1
    cleaning = plan.directory / CLEANING_DIR
    shutil.rmtree(cleaning, ignore_errors=True)
    cleaning.mkdir()
    chosen = [s for s in plan.segments if s[0] < end_offset]
    infos = [SegmentInfo(s[0], s[3], s[4], -1, -1) for s in chosen]
    by_base = {s[0]: s for s in chosen}
    tracker = TxnTracker(plan.aborted)
    stats = CleanStats()
    created = []
    generation = plan.first_generation
    for group in group_segments(infos, segment_bytes=plan.segment_bytes):
        new = Segment.create(cleaning, group[0].base_offset, index_interval_bytes=plan.index_interval_bytes,
                             max_index_bytes=plan.max_index_bytes, generation=generation, allow_gaps=True)
        try:
            aborts_before = len(tracker.retained_aborts)
            buffer, spans = bytearray(), []

            def flush():
                if buffer:
                    new.append(buffer, spans)
                    throttle(len(buffer))
                    buffer.clear()
                    spans.clear()
            for data in clean_batches(batches_of([by_base[g.base_offset] for g in group]), offset_map, tracker,
                                      now_ms=plan.now_ms, delete_retention_ms=plan.delete_retention_ms,
                                      active_producers=plan.active_producers, round_end_offset=end_offset,
                                      stats=stats):
                header = parse_header(data)
                spans.append((len(buffer), header.base_offset, header.last_offset, header.max_timestamp,
                              header.size_bytes))
                buffer += data
                if len(buffer) >= CLEANER_WRITE_BUFFER_BYTES:
                    flush()
            flush()
            for entry in tracker.retained_aborts[aborts_before:]:
                new.txn_index.append(entry)
            new.mark_inactive()
            new.fsync()
        finally:
            new.close()
        mtime = by_base[group[-1].base_offset][5]   # the files keep the last old segment's mtime (Kafka's rule)
        os.utime(new.log_path, (mtime, mtime))
        created.append((group[0].base_offset, generation))
        generation += 1
    manifest = cleaning / SWAP_MANIFEST
    _write_text_atomically(manifest, "".join(f"{s[0]} {s[1]}\n" for s in chosen))
    _fsync_dir(cleaning)
    os.replace(cleaning, plan.directory / SWAP_DIR)   # the commit point
    _fsync_dir(plan.directory)
    return CleaningResult([(s[0], s[1]) for s in chosen], created, end_offset, plan.recovery_generation, stats,
                          time.monotonic() - started)


def read_cleaner_checkpoint(directory: Path) -> int:
    value = _read_offset(directory / CLEANER_OFFSET_CHECKPOINT)
    return -1 if value is None else value
