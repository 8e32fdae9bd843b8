"""PartitionCore: one partition's log + idempotent-producer state + topic config, Ray-free.

Every method that depends on time takes ``now_ms``; results carry Kafka error codes. The high
watermark is the replication core's to move (actors/partition/replication.py): the shell sets it.

Kafka semantics followed (Kafka 4 broker: KafkaApis/ProduceRequest.validateRecords, UnifiedLog,
LogValidator) — the checks run on batch headers only, before anything is written:

* a produce blob must hold exactly one magic-2 batch (zero, several, or magic 0/1) -> INVALID_RECORD
  (87); framing errors / CRC mismatch / unknown codec -> CORRUPT_MESSAGE (2); batch larger than
  max.message.bytes -> MESSAGE_TOO_LARGE (10); blob larger than segment.bytes ->
  RECORD_LIST_TOO_LARGE (18); baseOffset != 0, count != lastOffsetDelta+1, control batches from
  clients, idempotent batch without a sequence -> INVALID_RECORD (87);
* CreateTime topics: the batch's maxTimestamp must be <= now + message.timestamp.after.max.ms and
  its baseTimestamp >= now - message.timestamp.before.max.ms, else INVALID_TIMESTAMP (32). Kafka
  checks every record; checking the header (max and first timestamps) avoids decoding bodies;
* a transactional batch without a producer id -> INVALID_RECORD (87); a transactional batch opens
  its producer's transaction here (without KIP-890 verification, which is the coordinator's side,
  as Kafka with verification off: a partition the coordinator was not told about still accepts it);
* idempotent and transactional batches go through the ProducerStateTable (duplicates answer the
  original offset; an older epoch INVALID_PRODUCER_EPOCH; a plain batch while the producer's
  transaction is open INVALID_TXN_STATE).

Transactions (KIP-98): the coordinator's COMMIT/ABORT markers are control batches appended by
``append_marker`` (a follower derives the same state from the batches it appends). The last stable
offset (LSO) is the first offset of the earliest transaction not yet complete and replicated, at
most the high watermark and at least the log start offset; read_committed fetches stop there and
carry the aborted transactions overlapping what they return, from the segments' .txnindex files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from protocol.errors import ErrorCode
from protocol.record_batch import (
    COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD, NO_TIMESTAMP,
    CorruptRecord, UnsupportedMagic, build_batch, crc_is_valid, decode_records, iter_batches, parse_header,
    record_keys,
)

from .cleaner import (
    DEFAULT_DELETE_RETENTION_MS, DEFAULT_MAX_COMPACTION_LAG_MS, DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
    DEFAULT_MIN_COMPACTION_LAG_MS, ProducerLast, is_compacted,
)
from .control_records import build_marker_batch, read_marker
from .txn_index import AbortedTxn
from .log import (
    DEFAULT_INDEX_INTERVAL_BYTES, DEFAULT_SEGMENT_BYTES, DEFAULT_SEGMENT_INDEX_BYTES,
    DEFAULT_SEGMENT_MS, FileSlice, Log, OffsetOutOfRange,
)
from .producer_state import (
    DEFAULT_MAX_PRODUCER_IDS, DEFAULT_PRODUCER_ID_EXPIRATION_MS, Action, ProducerStateTable,
    delete_snapshots_above, delete_snapshots_below, list_snapshots, load_latest_snapshot,
    write_snapshot,
)

# ListOffsets special timestamps
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class PartitionConfig:
    """Per-partition topic config, units in the names (Kafka key in the comment)."""
    segment_bytes: int = DEFAULT_SEGMENT_BYTES                    # segment.bytes
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES      # index.interval.bytes
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES        # segment.index.bytes
    segment_ms: int = DEFAULT_SEGMENT_MS                          # segment.ms
    retention_ms: int = 7 * 24 * 3600 * 1000                      # retention.ms (-1: forever)
    retention_bytes: int = -1                                     # retention.bytes (-1: no limit)
    max_message_bytes: int = 1048588                              # max.message.bytes
    log_append_time: bool = False                                 # message.timestamp.type
    message_timestamp_before_max_ms: int = LONG_MAX               # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = 3_600_000               # message.timestamp.after.max.ms
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS  # producer.id.expiration.ms
    max_producer_ids: int = DEFAULT_MAX_PRODUCER_IDS
    cleanup_policy: str = "delete"                                # cleanup.policy (delete | compact | both)
    min_cleanable_dirty_ratio: float = DEFAULT_MIN_CLEANABLE_DIRTY_RATIO  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = DEFAULT_MIN_COMPACTION_LAG_MS    # min.compaction.lag.ms
    max_compaction_lag_ms: int = DEFAULT_MAX_COMPACTION_LAG_MS    # max.compaction.lag.ms
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS        # delete.retention.ms
    compression_type: str = "producer"                            # compression.type
    compression_gzip_level: int = -1                              # compression.gzip.level (-1: the codec's)
    compression_lz4_level: int = 9                                # compression.lz4.level
    compression_zstd_level: int = 3                               # compression.zstd.level

    @property
    def codec(self) -> int | None:
        """The codec compression.type stores batches with, or None ("producer": as they come)."""
        return TOPIC_CODECS.get(self.compression_type)

    @property
    def codec_level(self) -> int | None:
        return {COMPRESSION_GZIP: self.compression_gzip_level, COMPRESSION_LZ4: self.compression_lz4_level,
                COMPRESSION_ZSTD: self.compression_zstd_level}.get(self.codec)

    @property
    def compacted(self) -> bool:
        return is_compacted(self.cleanup_policy)

    @property
    def roll_ms(self) -> int:
        """How long a segment stays active: segment.ms, or max.compaction.lag.ms when shorter on a
        compacted topic (the active segment is never cleaned: Kafka rolls it so that the cleaner
        can honour the lag)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compacted else self.segment_ms

    @property
    def deletes(self) -> bool:
        """Whether retention.ms / retention.bytes apply (cleanup.policy names delete)."""
        return "delete" in {p.strip() for p in self.cleanup_policy.split(",")}

    @classmethod
    def of(cls, config: Any) -> "PartitionConfig":
        """Accept a PartitionConfig, None, a dict, or any object with same-named attributes
        (e.g. actors.config_schema.TopicConfig); ``message_timestamp_type`` strings are understood."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        values = {f.name: get(f.name) for f in fields(cls) if get(f.name) is not None}
        timestamp_type = get("message_timestamp_type")
        if timestamp_type is not None:
            values["log_append_time"] = timestamp_type == "LogAppendTime"
        return cls(**values)


@dataclass
class ProduceResult:
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list = field(default_factory=list)   # [(batch_index, message)]
    error_message: str | None = None


@dataclass
class FetchResult:
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = b""
    error_message: str | None = None
    aborted_transactions: list | None = None   # read_committed: [(producer id, first offset)...]


class PartitionCore:
    def __init__(self, directory: Path, log: Log, producers: ProducerStateTable, config: PartitionConfig):
        self.directory = directory
        self.config = config
        self._log = log
        self._producers = producers
        self.storage_error: OSError | None = None  # the last log write that failed (its shell says so)

    @classmethod
    def open(cls, directory: Path | str, config: Any = None, *, now_ms: int = NO_TIMESTAMP) -> "PartitionCore":
        config = PartitionConfig.of(config)
        directory = Path(directory)
        log = Log.open(directory, segment_bytes=config.segment_bytes,
                       index_interval_bytes=config.index_interval_bytes,
                       max_index_bytes=config.segment_index_bytes, segment_ms=config.roll_ms,
                       now_ms=now_ms)
        producers = _rebuild_producer_state(directory, log, config, now_ms)
        return cls(directory, log, producers, config)

    # --- views ------------------------------------------------------------------------------

    @property
    def log(self) -> Log:
        return self._log

    @property
    def producers(self) -> ProducerStateTable:
        return self._producers

    @property
    def high_watermark(self) -> int:
        return self._log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the earliest transaction that is open (or whose
        marker is not below the high watermark yet), capped by the high watermark, never below
        the log start offset."""
        log = self._log
        high_watermark = log.high_watermark
        first_unstable = self._producers.first_unstable_offset(high_watermark)
        if first_unstable is None:
            return high_watermark
        return min(max(first_unstable, log.log_start_offset), high_watermark)

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    def error_result(self, error_code: int, message: str | None = None) -> ProduceResult:
        return ProduceResult(error_code, -1, -1, self._log.log_start_offset, [], message)

    def fetch_error(self, error_code: int, message: str | None = None) -> FetchResult:
        return FetchResult(error_code, -1, -1, -1, b"", message)

    # --- produce ----------------------------------------------------------------------------

    def produce(self, records, *, now_ms: int, leader_epoch: int) -> ProduceResult:
        config = self.config
        try:
            batches = list(iter_batches(records if isinstance(records, memoryview) else memoryview(records)))
        except UnsupportedMagic as exc:
            return self.error_result(ErrorCode.INVALID_RECORD, f"{exc}; produce requires magic 2")
        except CorruptRecord as exc:
            return self.error_result(ErrorCode.CORRUPT_MESSAGE, str(exc))
        if len(batches) != 1:
            return self.error_result(ErrorCode.INVALID_RECORD,
                                     f"a produce request must carry exactly one record batch per "
                                     f"partition, got {len(batches)}")
        batch = batches[0]
        if batch.size_bytes > config.max_message_bytes:
            return self.error_result(ErrorCode.MESSAGE_TOO_LARGE,
                                     f"batch of {batch.size_bytes} bytes exceeds max.message.bytes "
                                     f"{config.max_message_bytes}")
        if not crc_is_valid(batch):
            return self.error_result(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch")
        if batch.size_bytes > config.segment_bytes:
            return self.error_result(ErrorCode.RECORD_LIST_TOO_LARGE,
                                     f"batch of {batch.size_bytes} bytes exceeds segment.bytes")
        invalid = _invalid_client_batch(batch)
        if invalid:
            code, message = invalid
            return self.error_result(code, message)
        if config.compacted:
            keyless = _records_without_key(batch)
            if keyless:
                result = self.error_result(
                    ErrorCode.INVALID_RECORD,
                    f"records rejected ({len(keyless)} of {batch.records_count}, at most "
                    f"{RECORD_ERRORS_SHOWN} named): a compacted topic takes no record without a key")
                result.record_errors = [(index, "a compacted topic takes no record without a key")
                                        for index in keyless]
                return result
        if config.codec is not None and batch.compression != config.codec:
            try:
                records, batch = _recompressed(batch, config.codec, config.codec_level)
            except CorruptRecord as exc:
                return self.error_result(ErrorCode.CORRUPT_MESSAGE, str(exc))
            if batch.size_bytes > config.max_message_bytes:
                return self.error_result(ErrorCode.MESSAGE_TOO_LARGE,
                                         f"batch of {batch.size_bytes} bytes once compressed as {config.compression_type} "
                                         f"exceeds max.message.bytes {config.max_message_bytes}")
        if not config.log_append_time and batch.max_timestamp != NO_TIMESTAMP:
            if (batch.max_timestamp - now_ms > config.message_timestamp_after_max_ms
                    or now_ms - batch.base_timestamp > config.message_timestamp_before_max_ms):
                return self.error_result(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"timestamps [{batch.base_timestamp}, {batch.max_timestamp}] out of range "
                    f"[now - {config.message_timestamp_before_max_ms}, now + "
                    f"{config.message_timestamp_after_max_ms}]")

        idempotent = batch.producer_id >= 0
        transactional = batch.is_transactional
        if idempotent:
            verdict = self._producers.check(batch.producer_id, batch.producer_epoch,
                                            batch.base_sequence, batch.last_sequence, transactional)
            if verdict.action == Action.DUPLICATE:
                dup = verdict.duplicate
                return ProduceResult(ErrorCode.NONE, dup.first_offset,
                                     dup.timestamp_ms if config.log_append_time else -1,
                                     self._log.log_start_offset)
            if verdict.action == Action.REJECT:
                return self.error_result(verdict.error_code, verdict.message)

        try:
            info = self._log.append(records, leader_epoch=leader_epoch, now_ms=now_ms,
                                    log_append_time=config.log_append_time)
        except OSError as exc:
            self.storage_error = exc
            return self.error_result(ErrorCode.KAFKA_STORAGE_ERROR, f"log write failed: {exc}")
        if info.rolled and len(self._producers):
            # snapshot the table as of the new segment's base offset, before this batch (Kafka: at
            # roll); best effort: without it a restart replays more of the log
            try:
                write_snapshot(self.directory, info.base_offset, self._producers)
            except OSError:
                pass
        if idempotent:
            self._producers.record(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                   batch.last_sequence, info.base_offset, info.last_offset,
                                   info.max_timestamp_ms, transactional)
        return ProduceResult(ErrorCode.NONE, info.base_offset, info.log_append_time_ms,
                             self._log.log_start_offset)

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      *, now_ms: int, leader_epoch: int) -> ProduceResult:
        """Write the transaction coordinator's COMMIT or ABORT marker for ``producer_id`` (one
        partition of WriteTxnMarkers): a control batch ending the producer's transaction here;
        an abort is indexed. A marker for a producer without an open transaction is written too
        (Kafka does: the coordinator may resend after a failover). Errors: INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED, INVALID_RECORD (no producer id), KAFKA_STORAGE_ERROR."""
        if producer_id < 0 or producer_epoch < 0:
            return self.error_result(ErrorCode.INVALID_RECORD, "a transaction marker needs a producer id and epoch")
        verdict = self._producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if verdict.action == Action.REJECT:
            return self.error_result(verdict.error_code, verdict.message)
        batch = build_marker_batch(producer_id, producer_epoch, coordinator_epoch, committed, now_ms)
        try:
            info = self._log.append(batch, leader_epoch=leader_epoch, now_ms=now_ms,
                                    log_append_time=self.config.log_append_time)
        except OSError as exc:
            self.storage_error = exc
            return self.error_result(ErrorCode.KAFKA_STORAGE_ERROR, f"log write failed: {exc}")
        if info.rolled and len(self._producers):
            try:
                write_snapshot(self.directory, info.base_offset, self._producers)
            except OSError:
                pass
        self._complete_txn(producer_id, producer_epoch, coordinator_epoch, not committed, info.base_offset,
                           info.max_timestamp_ms)
        return ProduceResult(ErrorCode.NONE, info.base_offset, info.log_append_time_ms,
                             self._log.log_start_offset)

    def _complete_txn(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, aborted: bool,
                      offset: int, timestamp_ms: int) -> None:
        producers = self._producers
        completed = producers.record_marker(producer_id, producer_epoch, coordinator_epoch, aborted, offset,
                                            timestamp_ms)
        if completed is not None and aborted:
            self._log.add_aborted_txn(AbortedTxn(producer_id, completed.first_offset, offset,
                                                 producers.last_stable_offset_at_abort(completed)))

    # --- fetch / offsets --------------------------------------------------------------------

    def fetch(self, offset: int, max_bytes: int, *, isolation_level: int = READ_UNCOMMITTED,
              min_one_batch: bool = True) -> FetchResult:
        """Consumer fetch, bounded by the high watermark (read_uncommitted) or the last stable
        offset (read_committed, which also gets the aborted transactions of the range).
        ``min_one_batch``: KIP-74, a first batch larger than max_bytes is still returned whole
        (Kafka does so for the first partition of a response only)."""
        return self._fetch(self._log.read, offset, max_bytes, min_one_batch, isolation_level)

    def fetch_slice(self, offset: int, max_bytes: int, *, isolation_level: int = READ_UNCOMMITTED,
                    min_one_batch: bool = True) -> FetchResult:
        """``fetch`` answering where the records lie (a FileSlice of a segment) instead of the
        bytes: the node's gateway sends them from the file (sendfile), as Kafka does."""
        return self._fetch(self._log.slice, offset, max_bytes, min_one_batch, isolation_level)

    def _fetch(self, read, offset: int, max_bytes: int, min_one_batch: bool, isolation_level: int) -> FetchResult:
        log = self._log
        high_watermark = log.high_watermark
        last_stable_offset = self.last_stable_offset
        read_committed = isolation_level == READ_COMMITTED
        upper = last_stable_offset if read_committed else high_watermark
        try:
            records = read(offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)
        except OffsetOutOfRange as exc:
            return FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark, last_stable_offset,
                               log.log_start_offset, b"", str(exc))
        except OSError as exc:
            return self.fetch_error(ErrorCode.KAFKA_STORAGE_ERROR, f"log read failed: {exc}")
        aborted = None
        if read_committed:
            empty = records.size_bytes == 0 if isinstance(records, FileSlice) else not len(records)
            aborted = [] if empty else [
                (a.producer_id, a.first_offset)
                for a in log.collect_aborted_txns(offset, min(upper, log.segment_upper_offset(offset)))]
        return FetchResult(ErrorCode.NONE, high_watermark, last_stable_offset, log.log_start_offset, records,
                           None, aborted)

    def list_offsets(self, timestamp: int, *, isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int, int]:
        """ListOffsets for one partition: (error_code, offset, timestamp_ms).

        -2 earliest / -4 earliest-local -> log start offset; -1 latest -> high watermark
        (read_committed: the last stable offset, which also bounds the other lookups);
        -3 max timestamp -> first record carrying the max timestamp; -5 latest-tiered -> offset -1
        (no tiered storage, as Kafka answers when remote storage is off); t >= 0 -> first record
        with timestamp >= t. Results at/after the high watermark (not yet visible) and unknown
        negative timestamps answer offset -1, timestamp -1."""
        log = self._log
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return ErrorCode.NONE, log.log_start_offset, NO_TIMESTAMP
        visible = self.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return ErrorCode.NONE, visible, NO_TIMESTAMP
        if timestamp == MAX_TIMESTAMP:
            found = log.max_timestamp_offset()
        elif timestamp >= 0:
            found = log.offset_for_timestamp(timestamp)
        else:
            found = None
        if found is None or found[0] >= visible:
            return ErrorCode.NONE, -1, NO_TIMESTAMP
        return ErrorCode.NONE, found[0], found[1]

    def delete_records(self, offset: int) -> tuple[int, int]:
        """DeleteRecords: (error_code, low_watermark). offset -1 means the high watermark."""
        log = self._log
        target = log.high_watermark if offset == -1 else offset
        try:
            low_watermark = log.delete_records_before(target)
        except OffsetOutOfRange:
            return ErrorCode.OFFSET_OUT_OF_RANGE, -1
        self._after_log_start_moved()
        return ErrorCode.NONE, low_watermark

    # --- maintenance ------------------------------------------------------------------------

    def retention_tick(self, now_ms: int) -> list[int]:
        """Apply retention.ms / retention.bytes and expire idle producer ids. Returns the base
        offsets of deleted segments."""
        config = self.config
        deletes = config.deletes   # cleanup.policy=compact alone: no time or size retention (Kafka's rule)
        deleted = self._log.apply_retention(now_ms, retention_ms=config.retention_ms if deletes else -1,
                                            retention_bytes=config.retention_bytes if deletes else -1)
        self._producers.expire(now_ms, config.producer_id_expiration_ms)
        if deleted:
            self._after_log_start_moved()
        return deleted

    # --- the log cleaner (cleanup.policy=compact) ---------------------------------------------

    def cleanable(self, now_ms: int):
        """This partition's dirt (cleaner.Cleanable), None unless its topic is compacted."""
        config = self.config
        if not config.compacted:
            return None
        return self._log.cleanable(last_stable_offset=self.last_stable_offset, now_ms=now_ms,
                                   min_compaction_lag_ms=config.min_compaction_lag_ms,
                                   max_compaction_lag_ms=config.max_compaction_lag_ms)

    def plan_cleaning(self, dirt, *, now_ms: int, io_max_bytes_per_second: float):
        """A round (log.CleaningPlan) for `build_cleaned`, keeping the last batch of every producer
        this partition still knows (idempotence after a restart replays it)."""
        active = {}
        for entry in self._producers._entries.values():
            last = entry.batches[-1].last_offset if entry.batches else None
            active[entry.producer_id] = ProducerLast(last, entry.producer_epoch)
        return self._log.plan_cleaning(dirt, active_producers=active, now_ms=now_ms,
                                       delete_retention_ms=self.config.delete_retention_ms,
                                       io_max_bytes_per_second=io_max_bytes_per_second)

    def swap_cleaned(self, result) -> bool:
        return self._log.swap_cleaned(result)

    def _after_log_start_moved(self) -> None:
        """Kafka keeps a producer's state when the records it wrote are deleted (retention,
        DeleteRecords) until producer.id.expiration.ms, and drops snapshots below the new log
        start. A rebuild ignores such snapshots (the records between them and the log start are
        gone), so the table is first snapshotted at the log end offset: a restart then keeps the
        producers too. Best effort, as at a roll."""
        directory, log_start_offset = self.directory, self._log.log_start_offset
        snapshots = list_snapshots(directory)
        try:
            if len(self._producers) and (not snapshots or snapshots[-1] < log_start_offset):
                write_snapshot(directory, self._log.log_end_offset, self._producers)
            delete_snapshots_below(directory, log_start_offset)
        except OSError:
            pass

    def reconfigure(self, config: Any) -> None:
        self.config = PartitionConfig.of(config)
        log = self._log
        log.segment_bytes = self.config.segment_bytes
        log.index_interval_bytes = self.config.index_interval_bytes
        log.max_index_bytes = self.config.segment_index_bytes
        log.segment_ms = self.config.roll_ms
        self._producers.max_producer_ids = self.config.max_producer_ids

    def append_replicated(self, records, *, now_ms: int) -> list:
        """A follower appends what it fetched from its leader: whole batches, offsets and leader
        epochs as the leader wrote them, continuing exactly at the log end. Every batch's CRC is
        checked first (CorruptRecord: nothing is written); idempotent producers, transactions and
        markers are recorded (aborts indexed), so that this replica answers retries, serves
        read_committed fetches and fences markers as its leader did if it leads one day. Returns
        the batches' headers."""
        view = records if isinstance(records, memoryview) else memoryview(records)
        headers = list(iter_batches(view))
        markers = {}
        for header in headers:
            if not crc_is_valid(header):
                raise CorruptRecord(f"replicated batch at offset {header.base_offset}: CRC mismatch")
            if header.is_control and header.producer_id >= 0:
                markers[header.base_offset] = read_marker(header)   # CorruptRecord before anything is written
        if not headers:
            return []
        info = self._log.append(view, leader_epoch=None, now_ms=now_ms, assign_offsets=False)
        if info.rolled and len(self._producers):
            try:
                write_snapshot(self.directory, headers[0].base_offset, self._producers)
            except OSError:
                pass
        for h in headers:
            if h.producer_id < 0:
                continue
            if not h.is_control:
                self._producers.record(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                                       h.base_offset, h.last_offset, h.max_timestamp, h.is_transactional)
            elif markers[h.base_offset] is not None:
                marker = markers[h.base_offset]
                self._complete_txn(h.producer_id, h.producer_epoch, marker.coordinator_epoch, not marker.committed,
                                   h.base_offset, h.max_timestamp)
        return headers

    def reset_to(self, offset: int, *, now_ms: int = NO_TIMESTAMP) -> None:
        """Delete the whole log; it starts again, empty, at `offset` (a follower behind its
        leader's log start). Producer state and its snapshots go too (Kafka's
        truncateFullyAndStartAt): they described records that are gone."""
        self._log.reset_to(offset, now_ms=now_ms)
        delete_snapshots_above(self.directory, -1)
        self._producers = ProducerStateTable(max_producer_ids=self.config.max_producer_ids)

    def truncate_to(self, offset: int, *, now_ms: int = NO_TIMESTAMP) -> None:
        """Replication truncation: cut the log and rebuild producer state from snapshot + log
        (Kafka's truncateAndReload)."""
        self._log.truncate_to(offset, now_ms=now_ms)
        self._producers = _rebuild_producer_state(self.directory, self._log, self.config, now_ms)

    def close(self) -> None:
        write_snapshot(self.directory, self._log.log_end_offset, self._producers)
        self._log.close()


def skipped_by_read_committed(headers, aborted: list[AbortedTxn]) -> list[tuple[int, int]]:
    """The (base, last) offset ranges a read_committed reader does not deliver among ``headers``
    (batches in offset order): control batches (markers), and the transactional batches of a
    producer from the first offset of one of its ``aborted`` transactions until its marker, as
    Kafka's consumers filter them. Adjacent ranges are merged."""
    pending = sorted(aborted, key=lambda a: a.first_offset)
    aborting: set[int] = set()
    i, out = 0, []
    for h in headers:
        last = h.last_offset
        while i < len(pending) and pending[i].first_offset <= last:
            aborting.add(pending[i].producer_id)
            i += 1
        if h.is_control:
            aborting.discard(h.producer_id)
        elif not (h.is_transactional and h.producer_id in aborting):
            continue
        if out and out[-1][1] + 1 == h.base_offset:
            out[-1] = (out[-1][0], last)
        else:
            out.append((h.base_offset, last))
    return out


RECORD_ERRORS_SHOWN = 1000  # per produced batch: a bound on the response, each names its record


def _records_without_key(batch) -> list[int]:
    """The indexes (in the batch) of its records without a key, at most RECORD_ERRORS_SHOWN;
    a malformed batch answers none here (the append path judges it)."""
    try:
        keys = record_keys(batch)
    except CorruptRecord:
        return []
    return [index for index, (_offset, key) in enumerate(keys) if key is None][:RECORD_ERRORS_SHOWN]


# compression.type -> the codec batches are stored with ("producer": absent, as the producer sent them)
TOPIC_CODECS = {"uncompressed": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY,
                "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}


def _recompressed(batch, codec: int, level: int | None):
    """A client's batch with its records compressed with `codec`, as Kafka's LogValidator recompresses
    for a topic whose compression.type is not "producer": (its bytes, its header). Producer id, epoch,
    sequence, transactional flag, timestamps and timestamp type are kept."""
    records = [(r.key, r.value, r.headers, r.timestamp_ms) for r in decode_records(batch)]
    data = build_batch(records, batch.base_offset, codec, batch.producer_id, batch.producer_epoch,
                       batch.base_sequence, partition_leader_epoch=batch.partition_leader_epoch,
                       is_transactional=batch.is_transactional, timestamp_type=batch.timestamp_type, level=level)
    return memoryview(data), parse_header(memoryview(data))


def _invalid_client_batch(batch) -> tuple[int, str] | None:
    """LogValidator.validateBatch for client appends, plus what we do not support yet."""
    if batch.compression > COMPRESSION_ZSTD:
        return ErrorCode.CORRUPT_MESSAGE, f"unknown compression type {batch.compression}"
    if batch.base_offset != 0:
        return ErrorCode.INVALID_RECORD, f"batch baseOffset must be 0, got {batch.base_offset}"
    if batch.records_count <= 0 or batch.last_offset_delta + 1 != batch.records_count:
        return (ErrorCode.INVALID_RECORD,
                f"inconsistent batch: lastOffsetDelta {batch.last_offset_delta}, count {batch.records_count}")
    if batch.is_control:
        return ErrorCode.INVALID_RECORD, "clients are not allowed to write control records"
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        return ErrorCode.INVALID_RECORD, f"invalid sequence number {batch.base_sequence}"
    if batch.is_transactional and batch.producer_id < 0:
        return ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id"
    return None


def _rebuild_producer_state(directory: Path, log: Log, config: PartitionConfig,
                            now_ms: int) -> ProducerStateTable:
    """Kafka's truncateAndReload + rebuildProducerState: drop snapshots past the log end offset
    and below the log start offset (the records between such a snapshot and the log start are
    gone, so replaying from it would leave producers behind their real sequence); load the
    newest remaining one, forgetting producers idle for producer.id.expiration.ms at ``now_ms``
    (unless ``now_ms`` is NO_TIMESTAMP); then replay the batch headers after it."""
    log_start_offset, log_end_offset = log.log_start_offset, log.log_end_offset
    max_producer_ids = config.max_producer_ids
    delete_snapshots_above(directory, log_end_offset)
    delete_snapshots_below(directory, log_start_offset)
    # a segment's aborted-transaction index is lost: replay the whole log (which re-adds them)
    loaded = None if log.take_missing_txn_indexes() else load_latest_snapshot(
        directory, log_end_offset, max_producer_ids=max_producer_ids)
    if loaded is None:
        snapshot_offset, table = -1, ProducerStateTable(max_producer_ids=max_producer_ids)
    else:
        snapshot_offset, table = loaded
        if now_ms != NO_TIMESTAMP:
            table.expire(now_ms, config.producer_id_expiration_ms)
    start = max(snapshot_offset, log_start_offset)
    if start < log_end_offset:
        for header in log.iter_batch_headers(start):
            if header.base_offset < snapshot_offset or header.producer_id < 0:
                continue
            if not header.is_control:
                table.record(header.producer_id, header.producer_epoch, header.base_sequence,
                             header.last_sequence, header.base_offset, header.last_offset,
                             header.max_timestamp, header.is_transactional)
                continue
            marker = _read_marker_at(log, header)
            if marker is None:
                continue
            completed = table.record_marker(header.producer_id, header.producer_epoch, marker.coordinator_epoch,
                                            not marker.committed, header.base_offset, header.max_timestamp)
            if completed is not None and completed.aborted:   # already indexed unless the index was lost
                log.add_aborted_txn(AbortedTxn(completed.producer_id, completed.first_offset,
                                               completed.last_offset, table.last_stable_offset_at_abort(completed)))
    return table


def _read_marker_at(log: Log, header):
    """The marker of a control batch met while replaying headers (whose bytes may not all have
    been read): from the header's buffer if it holds the whole batch, else read again. A corrupt
    one is skipped (recovery checked the CRCs of what may be torn)."""
    try:
        return read_marker(header)
    except CorruptRecord:
        pass
    try:
        data = memoryview(log.read(header.base_offset, header.size_bytes))
        return read_marker(next(iter_batches(data)))
    except (CorruptRecord, StopIteration, OffsetOutOfRange):
        return None
