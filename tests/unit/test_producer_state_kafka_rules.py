"""Kafka's idempotent-producer rules, one test per rule, checked against Kray.

Each test names the Apache Kafka test it mirrors (storage module ProducerStateManagerTest,
core UnifiedLogTest, LogValidatorTest, integration ProducerIdExpirationTest). Where Kray differs
on purpose, the docstring says why in one line. Table-level rules run against
ProducerStateTable; partition-level rules (snapshots, truncation, log start, produce answers)
against PartitionCore with real RecordBatch bytes.
"""

import struct

import pytest

from actors.partition.core import PartitionConfig, PartitionCore
from actors.partition.producer_state import (
    INT32_MAX, INVALID_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, Action,
    ProducerStateTable, list_snapshots, snapshot_path, write_snapshot,
)
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch, decode_records, iter_batches, rewrite_crc

NOW = 1_700_000_000_000
DAY_MS = 86_400_000
PID = 1


def seq_add(seq: int, n: int) -> int:
    return (seq + n) % (INT32_MAX + 1)


def client_append(table, pid, epoch, first_seq, offset, count=1, ts=NOW):
    """A client's batch of ``count`` records: checked, and recorded if it may be appended."""
    last_seq = seq_add(first_seq, count - 1)
    verdict = table.check(pid, epoch, first_seq, last_seq)
    if verdict.action == Action.APPEND:
        table.record(pid, epoch, first_seq, last_seq, offset, offset + count - 1, ts)
    return verdict


def replicate(table, pid, epoch, first_seq, offset, count=1, ts=NOW):
    """A batch a follower (or a log replay) records without validation."""
    table.record(pid, epoch, first_seq, seq_add(first_seq, count - 1), offset, offset + count - 1, ts)


# --- ProducerStateTable ------------------------------------------------------------------------

def test_consecutive_sequences_append_gaps_and_old_epochs_are_rejected():
    """ProducerStateManagerTest.testBasicIdMapping: seq 0 then 1 append; a jump ahead is
    OUT_OF_ORDER_SEQUENCE_NUMBER; a bumped epoch starting at 0 appends; the old epoch is then
    INVALID_PRODUCER_EPOCH."""
    table = ProducerStateTable()
    assert client_append(table, PID, 0, 0, 0).action == Action.APPEND
    assert client_append(table, PID, 0, 1, 1).action == Action.APPEND
    verdict = client_append(table, PID, 0, 5, 2)
    assert (verdict.action, verdict.error_code) == (Action.REJECT, OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert client_append(table, PID, 1, 0, 3).action == Action.APPEND
    verdict = client_append(table, PID, 0, 0, 4)
    assert (verdict.action, verdict.error_code) == (Action.REJECT, INVALID_PRODUCER_EPOCH)


def test_unknown_producer_accepts_any_first_sequence():
    """UnifiedLogTest.testAllowNonZeroSequenceOnFirstAppendNonZeroEpoch and
    ProducerAppendInfo.checkSequence (KIP-360): the first batch of a producer the partition does
    not know is taken whatever its epoch and sequence; Kafka 4 never answers
    UNKNOWN_PRODUCER_ID."""
    table = ProducerStateTable()
    assert client_append(table, 23, 1, 3, 0, count=2).action == Action.APPEND
    entry = table.entry(23)
    assert (entry.producer_epoch, entry.batches[0].first_seq, entry.last_seq) == (1, 3, 4)
    assert client_append(table, 23, 1, 5, 2).action == Action.APPEND


def test_expired_producer_is_forgotten_and_its_next_sequence_accepted():
    """ProducerStateManagerTest.testPidExpirationTimeout and ProducerIdExpirationTest.
    testProducerIdExpirationWithNoTransactions: a producer idle for producer.id.expiration.ms
    (last batch timestamp + expiration <= now) is removed; its next batch, continuing its old
    sequence, is accepted as from an unknown producer."""
    table = ProducerStateTable()
    client_append(table, PID, 5, 0, 1, ts=NOW)
    assert table.expire(NOW + DAY_MS - 1, DAY_MS) == 0
    assert table.expire(NOW + DAY_MS, DAY_MS) == 1
    assert table.entry(PID) is None
    assert client_append(table, PID, 5, 1, 2, ts=NOW + DAY_MS).action == Action.APPEND
    assert len(table) == 1 and table.entry(PID).last_seq == 1


def test_sequence_wraps_from_int32_max_to_zero():
    """ProducerStateManagerTest.testProducerSequenceWrapAround: after a batch ending at
    Int.MaxValue the next in-sequence batch starts at 0; the cached first sequence stays
    Int.MaxValue."""
    table = ProducerStateTable()
    replicate(table, PID, 15, INT32_MAX, 735)
    assert client_append(table, PID, 15, 0, 1235).action == Action.APPEND
    entry = table.entry(PID)
    assert (entry.producer_epoch, entry.batches[0].first_seq, entry.last_seq) == (15, INT32_MAX, 0)


def test_batch_spanning_the_wrap_ends_at_its_wrapped_last_sequence():
    """ProducerStateManagerTest.testProducerSequenceWithWrapAroundBatchRecord: a batch from
    Int.MaxValue - 10 holding 21 records ends at sequence 9, offsets as appended."""
    table = ProducerStateTable()
    replicate(table, PID, 15, INT32_MAX - 10, 2000, count=21)
    entry = table.entry(PID)
    batch = entry.batches[-1]
    assert (batch.first_seq, batch.last_seq, batch.first_offset, batch.last_offset) == \
        (INT32_MAX - 10, 9, 2000, 2020)
    assert client_append(table, PID, 15, 10, 2021).action == Action.APPEND


def test_only_zero_follows_int32_max():
    """ProducerStateManagerTest.testProducerSequenceInvalidWrapAround: after Int.MaxValue,
    sequence 1 is out of order (only 0 is next)."""
    table = ProducerStateTable()
    replicate(table, PID, 15, INT32_MAX, 735)
    verdict = client_append(table, PID, 15, 1, 1235)
    assert verdict.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_replicated_batches_are_recorded_without_validation():
    """ProducerStateManagerTest.testNoValidationOnFirstEntryWhenLoadingLog,
    testAcceptAppendWithoutProducerStateOnReplica and testAcceptAppendWithSequenceGapsOnReplica:
    a follower (or a log replay) records what its leader wrote, gaps and all."""
    table = ProducerStateTable()
    replicate(table, PID, 5, 16, 735)
    entry = table.entry(PID)
    assert (entry.producer_epoch, entry.batches[0].first_seq, entry.last_seq,
            entry.batches[0].first_offset, entry.batches[0].last_offset) == (5, 16, 16, 735, 735)
    replicate(table, PID, 5, 20, 736)   # a gap a client could not have written
    assert table.entry(PID).last_seq == 20


def test_a_rejected_batch_leaves_the_state_unchanged():
    """ProducerStateManagerTest.testAcceptAppendWithSequenceGapsOnReplica (first half) and
    testPrepareUpdateDoesNotMutate: checking a batch changes nothing; only an append does."""
    table = ProducerStateTable()
    client_append(table, PID, 0, 0, 0)
    assert client_append(table, PID, 0, 3, 1).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check(PID, 0, 1, 5).action == Action.APPEND   # checked, not recorded
    entry = table.entry(PID)
    assert (entry.last_seq, len(entry.batches)) == (0, 1)


def test_a_new_epoch_must_start_at_sequence_zero():
    """ProducerStateManagerTest.testOutOfSequenceAfterControlRecordEpochBump (the data-batch half)
    and ProducerAppendInfo.checkSequence: a bumped epoch (KIP-360: the idempotent producer bumps
    its epoch itself after an unresolved sequence) is out of order unless it starts at 0,
    also when it skips epochs."""
    table = ProducerStateTable()
    client_append(table, PID, 0, 0, 0)
    client_append(table, PID, 0, 1, 1)
    assert client_append(table, PID, 1, 2, 2).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client_append(table, PID, 2, 2, 2).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client_append(table, PID, 2, 0, 2).action == Action.APPEND
    entry = table.entry(PID)
    assert (entry.producer_epoch, entry.last_seq) == (2, 0)


def test_an_older_epoch_is_invalid_producer_epoch():
    """UnifiedLogTest.testOldProducerEpoch: epoch 0 after epoch 1 answers
    INVALID_PRODUCER_EPOCH (Kafka >= 2.7; not PRODUCER_FENCED)."""
    table = ProducerStateTable()
    client_append(table, PID, 1, 0, 0)
    verdict = client_append(table, PID, 0, 0, 1)
    assert verdict.error_code == INVALID_PRODUCER_EPOCH == 47


def test_an_epoch_bump_drops_the_old_epochs_cached_batches():
    """ProducerStateEntry.maybeUpdateProducerEpoch (ProducerStateManagerTest.
    testControlRecordBumpsProducerEpoch, data half): after a bump, a retry of an old-epoch batch is
    no duplicate but a fenced write; only the new epoch's batches are cached."""
    table = ProducerStateTable()
    for seq in range(3):
        client_append(table, PID, 0, seq, seq)
    client_append(table, PID, 1, 0, 3)
    assert len(table.entry(PID).batches) == 1
    assert client_append(table, PID, 0, 2, 4).error_code == INVALID_PRODUCER_EPOCH
    assert table.check(PID, 1, 0, 0).action == Action.DUPLICATE


def test_duplicates_of_the_last_five_batches_answer_their_original_offsets():
    """UnifiedLogTest.testDuplicateAppends: a retry of the tail batch (several records) or of the
    4th batch from the tail is a duplicate with its original offsets; a batch older than the
    last five is out of order."""
    table = ProducerStateTable()
    for seq in range(6):                      # singles: seq 0..5 at offsets 0..5
        client_append(table, PID, 0, seq, seq)
    client_append(table, PID, 0, 6, 6, count=3)   # seq 6..8 at offsets 6..8
    tail = table.check(PID, 0, 6, 8)
    assert tail.action == Action.DUPLICATE
    assert (tail.duplicate.first_offset, tail.duplicate.last_offset) == (6, 8)
    fourth = table.check(PID, 0, 2, 2)        # cached: 2, 3, 4, 5, 6-8
    assert fourth.action == Action.DUPLICATE and fourth.duplicate.first_offset == 2
    assert table.check(PID, 0, 1, 1).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_partial_duplicate_is_out_of_order():
    """UnifiedLogTest.testDuplicateAppends ("partial duplicate of the tail"): a batch overlapping a
    cached one without matching its exact sequence range is out of order, not a duplicate."""
    table = ProducerStateTable()
    client_append(table, PID, 0, 0, 0, count=3)          # seq 0..2
    assert table.check(PID, 0, 1, 2).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check(PID, 0, 0, 3).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_duplicate_check_comes_before_the_no_epoch_leniency():
    """UnifiedLog.analyzeAndValidateProducerState runs findDuplicateBatch before checkSequence's
    NO_PRODUCER_EPOCH leniency: a producer known only with epoch -1 still has its retries
    recognised (Kray skipped the duplicate check there until this test)."""
    table = ProducerStateTable()
    client_append(table, PID, NO_PRODUCER_EPOCH, 7, 0, count=2)
    verdict = table.check(PID, NO_PRODUCER_EPOCH, 7, 8)
    assert verdict.action == Action.DUPLICATE and verdict.duplicate.first_offset == 0
    assert table.check(PID, NO_PRODUCER_EPOCH, 30, 30).action == Action.APPEND


def test_snapshot_round_trip_keeps_every_field():
    """ProducerStateManagerTest.testReadWriteSnapshot. Kafka's snapshot keeps a producer's last
    batch only; ours keeps all five, so retries are still recognised after a restart."""
    table = ProducerStateTable()
    for seq in range(7):
        client_append(table, PID, 2, seq, 100 + seq, ts=NOW + seq)
    client_append(table, 11, 12, 0, 200, count=4, ts=123456)
    loaded = ProducerStateTable.from_bytes(table.to_bytes())
    for pid in (PID, 11):
        a, b = table.entry(pid), loaded.entry(pid)
        assert (a.producer_epoch, list(a.batches), a.last_timestamp_ms) == \
            (b.producer_epoch, list(b.batches), b.last_timestamp_ms)
    assert len(loaded.entry(PID).batches) == 5


# --- PartitionCore --------------------------------------------------------------------------

def batch(n=1, *, pid=PID, epoch=0, seq=0, ts=NOW, value_bytes=20):
    return build_batch([(b"k%d" % i, b"v" * value_bytes, [], ts + i) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def open_core(path, now_ms=NOW, **config):
    return PartitionCore.open(path, PartitionConfig(**config), now_ms=now_ms)


def produce(core, data, now_ms=NOW):
    """Produce as the leader of a single-replica partition (the high watermark follows)."""
    result = core.produce(memoryview(data), now_ms=now_ms, leader_epoch=0)
    core.log.high_watermark = core.log_end_offset
    return result


def test_produce_of_a_duplicate_answers_success_with_the_original_offsets(tmp_path):
    """UnifiedLogTest.testDuplicateAppends at the partition: a retried batch answers error NONE,
    its original base offset and the current log start, and appends nothing. Kafka also answers
    the batch's max timestamp as logAppendTime on CreateTime topics; Kray answers -1 there, as
    for the first append (else the Java client stamps every record with that one timestamp)."""
    core = open_core(tmp_path)
    produce(core, build_batch([(None, b"x", [], NOW)]))          # a non-idempotent record first
    first = batch(3, seq=0)
    assert produce(core, first).base_offset == 1
    assert produce(core, batch(1, seq=3)).base_offset == 4
    end = core.log_end_offset
    r = produce(core, first)
    assert (r.error_code, r.base_offset, r.log_append_time_ms, r.log_start_offset) == (0, 1, -1, 0)
    assert core.log_end_offset == end


@pytest.mark.parametrize("case, code", [
    ("gap", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("old_epoch", ErrorCode.INVALID_PRODUCER_EPOCH),
    ("new_epoch_not_at_zero", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("older_than_five_batches", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
])
def test_produce_answers_kafkas_error_and_appends_nothing(tmp_path, case, code):
    """UnifiedLogTest.testDuplicateAppends / testOldProducerEpoch and ProducerStateManagerTest.
    testBasicIdMapping at the partition: the produce answers the error code, offset -1, and the
    log does not grow."""
    core = open_core(tmp_path)
    for seq in range(6):
        produce(core, batch(1, epoch=3, seq=seq))
    data = {"gap": batch(1, epoch=3, seq=7), "old_epoch": batch(1, epoch=2, seq=6),
            "new_epoch_not_at_zero": batch(1, epoch=4, seq=6),
            "older_than_five_batches": batch(1, epoch=3, seq=0)}[case]
    r = produce(core, data)
    assert (r.error_code, r.base_offset) == (code, -1) and r.error_message
    assert core.log_end_offset == 6


def test_idempotent_batch_without_a_sequence_is_invalid_record(tmp_path):
    """LogValidator.validateBatch ("Invalid sequence number"): a batch with a producer id must
    carry a base sequence >= 0, else INVALID_RECORD."""
    core = open_core(tmp_path)
    r = produce(core, batch(1, seq=-1))
    assert r.error_code == ErrorCode.INVALID_RECORD and core.log_end_offset == 0


@pytest.mark.parametrize("last_offset_delta, count", [(0, 3), (15, 3), (-3, 3)])
def test_sequence_range_inconsistent_with_the_record_count_is_invalid_record(
        tmp_path, last_offset_delta, count):
    """LogValidatorTest.testInconsistentCountAndOffset: a batch's last sequence is its base
    sequence + lastOffsetDelta, so a lastOffsetDelta that disagrees with the record count is
    INVALID_RECORD and the producer state is untouched."""
    core = open_core(tmp_path)
    data = bytearray(batch(3, seq=0))
    struct.pack_into(">i", data, 23, last_offset_delta)
    struct.pack_into(">i", data, 57, count)
    rewrite_crc(data, 0)
    r = produce(core, data)
    assert r.error_code == ErrorCode.INVALID_RECORD
    assert core.log_end_offset == 0 and core.producers.entry(PID) is None


@pytest.mark.xfail(strict=True, reason="Kray validates batch headers only (DESIGN habit 3); "
                   "Kafka counts the records of every batch")
def test_record_count_must_match_the_records_in_the_batch(tmp_path):
    """LogValidatorTest.testUnmatchedNumberOfRecords: lastOffsetDelta and count agree with each
    other but not with the records the batch holds -> INVALID_RECORD. Not done in Kray yet:
    it needs every batch decompressed and walked on the produce path."""
    core = open_core(tmp_path)
    data = bytearray(batch(3, seq=0))
    struct.pack_into(">i", data, 23, 5)
    struct.pack_into(">i", data, 57, 6)
    rewrite_crc(data, 0)
    assert produce(core, data).error_code == ErrorCode.INVALID_RECORD


def test_duplicates_of_the_last_five_batches_survive_a_restart(tmp_path):
    """UnifiedLogTest.testDuplicateAppends across a restart, clean (snapshot at the log end) and
    unclean (snapshot at a roll + replay). Kafka's snapshot keeps only the last batch, so after its
    clean restart only the tail batch is recognised; Kray keeps all five."""
    for clean in (True, False):
        directory = tmp_path / str(clean)
        core = open_core(directory, segment_bytes=600)
        sent = [(produce(core, data).base_offset, data)
                for data in (batch(1, seq=seq) for seq in range(12))]
        if clean:
            core.close()
        core = open_core(directory, segment_bytes=600)
        end = core.log_end_offset
        for offset, data in sent[-5:]:
            r = produce(core, data)
            assert (r.error_code, r.base_offset) == (0, offset)
        assert produce(core, sent[-6][1]).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert core.log_end_offset == end
        assert produce(core, batch(1, seq=12)).base_offset == end


def test_expired_producers_are_dropped_when_a_snapshot_is_loaded(tmp_path):
    """ProducerStateManagerTest.testRemoveExpiredPidsOnReload: a producer whose last batch is
    producer.id.expiration.ms old when the partition reloads is gone; its next batch (seq 2) is
    accepted as from an unknown producer. (Kray kept it until this test.)"""
    core = open_core(tmp_path)
    produce(core, batch(1, seq=0))
    produce(core, batch(1, seq=1))
    core.close()
    later = NOW + 1 + DAY_MS
    core = open_core(tmp_path, now_ms=later)
    assert core.producers.entry(PID) is None
    r = produce(core, batch(1, seq=5, ts=later), now_ms=later)
    assert (r.error_code, r.base_offset) == (0, 2)


def test_loading_a_snapshot_keeps_producers_that_have_not_expired(tmp_path):
    """ProducerStateManagerTest.testLoadFromSnapshotRetainsNonExpiredProducers: two producers
    in the snapshot are both back, with their last sequence and offset."""
    core = open_core(tmp_path)
    produce(core, batch(1, pid=1, seq=0))
    produce(core, batch(1, pid=2, seq=0))
    core.close()
    core = open_core(tmp_path, now_ms=NOW + DAY_MS - 10)
    assert [(core.producers.entry(p).last_seq, core.producers.entry(p).batches[-1].last_offset)
            for p in (1, 2)] == [(0, 0), (0, 1)]


def test_snapshots_past_the_log_end_are_deleted_on_load(tmp_path):
    """UnifiedLogTest.testLoadingLogDeletesProducerStateSnapshotsPastLogEndOffset: a stray
    snapshot beyond the log end offset is removed when the partition opens."""
    core = open_core(tmp_path)
    produce(core, batch(1, seq=0))
    write_snapshot(tmp_path, 42, ProducerStateTable())
    core.log.close()
    core = open_core(tmp_path)
    assert 42 not in list_snapshots(tmp_path)
    assert core.producers.entry(PID).last_seq == 0


def test_truncation_rebuilds_producer_state_from_snapshot_and_log(tmp_path):
    """UnifiedLogTest.testProducerIdMapTruncateTo / ProducerStateManagerTest.
    testTruncateAndReloadRemovesOutOfRangeSnapshots: truncation removes snapshots past the new
    log end and rebuilds the table from the newest one left plus the log; the producer's next
    expected sequence is the one after the last batch kept."""
    core = open_core(tmp_path, segment_bytes=300)
    for seq in range(10):
        produce(core, batch(1, seq=seq))
    core.log.high_watermark = 4
    core.truncate_to(4)
    assert all(s <= 4 for s in list_snapshots(tmp_path))
    assert core.producers.entry(PID).last_seq == 3
    assert produce(core, batch(1, seq=5)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(core, batch(1, seq=3)).base_offset == 3          # duplicate of a kept batch
    assert produce(core, batch(1, seq=4)).base_offset == 4


def test_truncation_without_snapshots_replays_the_log(tmp_path):
    """UnifiedLogTest.testProducerIdMapTruncateToWithNoSnapshots: with every snapshot file gone,
    truncating to 1 rebuilds the producer from the log: last sequence 0."""
    core = open_core(tmp_path)
    produce(core, batch(1, seq=0))
    produce(core, batch(1, seq=1))
    for p in tmp_path.glob("*.snapshot"):
        p.unlink()
    core.truncate_to(1)
    assert core.producers.entry(PID).last_seq == 0


def test_truncating_fully_forgets_producers_and_snapshots(tmp_path):
    """UnifiedLogTest.testProducerIdMapTruncateFullyAndStartAt / ProducerStateManagerTest.
    testTruncateFullyAndStartAt: a follower restarting its log at the leader's log start drops all
    producer state and snapshots; a producer's next batch is then taken whatever its sequence.
    (Kray reloaded an old snapshot below the new start until this test.)"""
    core = open_core(tmp_path, segment_bytes=300)
    for seq in range(6):
        produce(core, batch(1, seq=seq))
    core.close()
    core = open_core(tmp_path, segment_bytes=300)
    assert list_snapshots(tmp_path)
    core.reset_to(29)
    assert list_snapshots(tmp_path) == [] and len(core.producers) == 0
    assert (core.log_start_offset, core.log_end_offset) == (29, 29)
    assert produce(core, batch(1, seq=17)).base_offset == 29
    core.log.close()
    again = open_core(tmp_path, segment_bytes=300)
    assert again.producers.entry(PID).last_seq == 17


def test_producers_outlive_the_deletion_of_their_records(tmp_path):
    """UnifiedLogTest.testProducerIdExpirationOnSegmentDeletion and
    testDeleteSnapshotsOnIncrementLogStartOffset: retention and DeleteRecords keep the producer
    state (until producer.id.expiration.ms) and delete snapshots below the new log start. Kray
    also snapshots the table at the log end first, so an unclean restart keeps the producers."""
    core = open_core(tmp_path, segment_bytes=300, retention_ms=1000)
    produce(core, batch(1, pid=1, seq=0))
    for seq in range(4):
        produce(core, batch(1, pid=2, seq=seq))
    produce(core, build_batch([(None, b"x", [], NOW)]))
    assert len(core.log.segment_base_offsets) >= 2
    deleted = core.retention_tick(NOW + 2000)
    assert deleted and core.log_start_offset > 0
    assert core.delete_records(-1) == (0, core.log_end_offset)
    assert {p for p in (1, 2) if core.producers.entry(p)} == {1, 2}
    assert all(s >= core.log_start_offset for s in list_snapshots(tmp_path))
    # unclean restart: no close()
    core = open_core(tmp_path, now_ms=NOW + 2000, segment_bytes=300, retention_ms=1000)
    assert core.producers.entry(2).last_seq == 3
    assert produce(core, batch(1, pid=2, seq=2)).base_offset == 3   # a retry, recognised
    assert produce(core, batch(1, pid=2, seq=5)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_snapshot_below_the_log_start_is_not_loaded(tmp_path):
    """ProducerStateManager.truncateAndReload drops snapshots at or below the log start: replaying
    from such a snapshot would miss the deleted records after it and leave a producer behind its
    real sequence (then every write of it is out of order). Kray still loads one exactly at the
    log start: nothing lies between it and the log."""
    core = open_core(tmp_path)
    produce(core, batch(1, pid=2, seq=0))
    write_snapshot(tmp_path, 1, core.producers)         # pid 2 at seq 0, as of offset 1
    for seq in range(1, 4):
        produce(core, batch(1, pid=2, seq=seq))         # offsets 1..3, then deleted
    produce(core, build_batch([(None, b"x", [], NOW)]))
    core.log.delete_records_before(4)                   # the log alone: no snapshot at the end
    core.log.close()
    core = open_core(tmp_path)
    assert list_snapshots(tmp_path) == []
    assert core.producers.entry(2) is None               # unknown, not stuck at seq 0
    assert produce(core, batch(1, pid=2, seq=4)).base_offset == 5


def test_a_follower_accepts_duplicate_sequences_its_leader_wrote(tmp_path):
    """UnifiedLogTest.testDuplicateAppendToFollower: replicated batches are not validated, so two
    batches with the same sequences at increasing offsets are both appended."""
    leader_a, leader_b = open_core(tmp_path / "a"), open_core(tmp_path / "b")
    produce(leader_a, batch(2, seq=0))
    produce(leader_b, build_batch([(None, b"p", [], NOW)] * 2))
    produce(leader_b, batch(2, seq=0))
    follower = open_core(tmp_path / "f")
    follower.append_replicated(bytes(leader_a.fetch(0, 1 << 20).records), now_ms=NOW)
    follower.append_replicated(bytes(leader_b.fetch(2, 1 << 20).records), now_ms=NOW)
    assert follower.log_end_offset == 4
    assert [b.first_offset for b in follower.producers.entry(PID).batches] == [0, 2]


def test_a_new_leader_continues_the_sequence_its_old_leader_checked(tmp_path):
    """Leader change (UnifiedLogTest.testDuplicateAppendToFollower, the follower's side, and the
    KIP-360 rule that a leader's state comes from its log): after replicating, the follower
    turned leader recognises retries of the last five batches, rejects a gap and takes the next
    sequence."""
    leader, follower = open_core(tmp_path / "l"), open_core(tmp_path / "f")
    sent = [(produce(leader, data).base_offset, data) for data in (batch(2, seq=2 * i) for i in range(7))]
    follower.append_replicated(bytes(leader.fetch(0, 1 << 20).records), now_ms=NOW)
    follower.log.high_watermark = follower.log_end_offset
    for offset, data in sent[-5:]:
        assert produce(follower, data).base_offset == offset
    assert produce(follower, batch(1, seq=15)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(follower, batch(1, seq=14)).base_offset == 14
    assert [r.value for h in iter_batches(follower.fetch(14, 1 << 20).records)
            for r in decode_records(h)] == [b"v" * 20]


def test_corrupt_snapshots_are_deleted_and_the_previous_one_loaded(tmp_path):
    """ProducerStateManagerTest.testLoadFromEmptySnapshotFile, testLoadFromTruncatedSnapshotFile
    and testLoadFromCorruptSnapshotFile: the damaged newest snapshot is removed, the one before
    it loaded, and the log replayed from there."""
    for damage in ("empty", "truncated", "garbage"):
        directory = tmp_path / damage
        core = open_core(directory)
        produce(core, batch(1, seq=0))
        write_snapshot(directory, 1, core.producers)
        produce(core, batch(1, seq=1))
        write_snapshot(directory, 2, core.producers)
        path = snapshot_path(directory, 2)
        data = path.read_bytes()
        path.write_bytes({"empty": b"", "truncated": data[:len(data) // 2],
                          "garbage": data[:4] + bytes(37) + data[41:]}[damage])
        core.log.close()
        core = open_core(directory)
        assert not path.exists()
        assert core.producers.entry(PID).last_seq == 1       # snapshot at 1 + replay of offset 1
