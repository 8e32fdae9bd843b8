"""The log cleaner's pure core (actors/partition/cleaner.py): what a compacted topic keeps."""
from __future__ import annotations

import pytest

from actors.partition.cleaner import (
    DELETE_HORIZON_MASK, CleanStats, OffsetMap, ProducerLast, SegmentInfo, TxnTracker, build_offset_map,
    cleanable, clean_batches, first_uncleanable_offset, group_segments,
)
from actors.partition.control_records import build_marker_batch
from actors.partition.txn_index import AbortedTxn
from protocol.record_batch import (
    COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD, crc_is_valid,
    decode_records, iter_batches, patch_base_offset,
)
from protocol.record_batch import build_batch

NOW = 1_000_000
DELETE_RETENTION_MS = 1000


class LogBuilder:
    """Batches at consecutive offsets, as a log holds them."""

    def __init__(self):
        self.blob = bytearray()
        self.next_offset = 0

    def add(self, records, **kw) -> int:
        rows = [(None if k is None else k.encode(), None if v is None else v.encode(), (), NOW - 100 + i)
                for i, (k, v) in enumerate(records)]
        batch = bytearray(build_batch(rows, **kw))
        patch_base_offset(batch, 0, self.next_offset)
        base = self.next_offset
        self.blob += batch
        self.next_offset += len(rows)
        return base

    def marker(self, producer_id: int, committed: bool) -> int:
        batch = bytearray(build_marker_batch(producer_id, 0, 0, committed, NOW - 50))
        patch_base_offset(batch, 0, self.next_offset)
        base = self.next_offset
        self.blob += batch
        self.next_offset += 1
        return base

    def headers(self):
        return list(iter_batches(memoryview(bytes(self.blob))))


def run_round(blob_or_headers, *, now=NOW, aborted=(), producers=None, start=0, end=None):
    headers = blob_or_headers if isinstance(blob_or_headers, list) else list(iter_batches(memoryview(blob_or_headers)))
    end = headers[-1].next_offset if end is None else end
    offset_map = build_offset_map(headers, start_offset=start, end_offset=end, aborted=aborted)
    tracker = TxnTracker(aborted)
    out = b"".join(clean_batches(headers, offset_map, tracker, now_ms=now, delete_retention_ms=DELETE_RETENTION_MS,
                                 active_producers=producers or {}, round_end_offset=offset_map.latest_offset + 1))
    return out, tracker


def records_of(blob: bytes):
    out = []
    for header in iter_batches(memoryview(blob)):
        assert crc_is_valid(header)
        if header.is_control:
            continue
        out += [(r.offset, r.key and r.key.decode(), r.value and r.value.decode()) for r in decode_records(header)]
    return out


def test_keeps_the_latest_record_per_key_at_its_offset():
    log = LogBuilder()
    for round_ in range(5):
        log.add([(f"k{k}", f"v{round_}-{k}") for k in range(3)])
    cleaned, _ = run_round(bytes(log.blob))
    assert records_of(cleaned) == [(12, "k0", "v4-0"), (13, "k1", "v4-1"), (14, "k2", "v4-2")]
    # the last batch of the round survives whole; earlier batches left nothing and are gone
    assert [h.base_offset for h in iter_batches(memoryview(cleaned))] == [12]


def test_batches_keep_base_offset_and_last_offset_when_records_go():
    log = LogBuilder()
    log.add([("a", "1"), ("b", "1"), ("a", "2")])       # offsets 0-2: offset 0 is superseded
    log.add([("c", "1"), ("c", "2")])                   # 3-4
    cleaned, _ = run_round(bytes(log.blob))
    headers = list(iter_batches(memoryview(cleaned)))
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [(0, 2, 2), (3, 4, 1)]
    assert records_of(cleaned) == [(1, "b", "1"), (2, "a", "2"), (4, "c", "2")]


def test_records_without_a_key_are_dropped_and_later_records_kept():
    log = LogBuilder()
    log.add([(None, "x"), ("a", "1")])
    log.add([("a", "2")])
    headers = log.headers()
    # the map covers offsets 0-1 only: offset 2 lies past it and stays, whatever its key
    offset_map = build_offset_map(headers, start_offset=0, end_offset=2)
    assert offset_map.latest_offset == 1
    out = b"".join(clean_batches(headers, offset_map, TxnTracker(), now_ms=NOW, delete_retention_ms=1,
                                 active_producers={}, round_end_offset=2))
    assert records_of(out) == [(1, "a", "1"), (2, "a", "2")]


def test_tombstones_stay_delete_retention_ms_after_the_round_that_met_them():
    log = LogBuilder()
    log.add([("a", "1"), ("b", "1")])
    log.add([("a", None)])                              # tombstone for a at offset 2
    log.add([("c", "1")])
    first, _ = run_round(bytes(log.blob), now=NOW)
    assert records_of(first) == [(1, "b", "1"), (2, "a", None), (3, "c", "1")]
    tomb = [h for h in iter_batches(memoryview(first)) if h.base_offset == 2][0]
    assert tomb.attributes & DELETE_HORIZON_MASK and tomb.base_timestamp == NOW + DELETE_RETENTION_MS
    assert decode_records(tomb)[0].timestamp_ms == NOW - 100   # record timestamps survive the horizon
    # a later round before the horizon keeps it; one at the horizon removes it
    again, _ = run_round(first, now=NOW + DELETE_RETENTION_MS - 1)
    assert (2, "a", None) in records_of(again)
    later, _ = run_round(first, now=NOW + DELETE_RETENTION_MS)
    assert records_of(later) == [(1, "b", "1"), (3, "c", "1")]


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_compressed_batches_are_recompressed_with_their_codec(codec):
    log = LogBuilder()
    log.add([(f"k{i % 4}", f"value-{i}" * 20) for i in range(40)], compression=codec)
    cleaned, _ = run_round(bytes(log.blob))
    [header] = list(iter_batches(memoryview(cleaned)))
    assert header.compression == codec and crc_is_valid(header)
    assert (header.base_offset, header.last_offset) == (0, 39)
    assert records_of(cleaned) == [(36 + k, f"k{k}", f"value-{36 + k}" * 20) for k in range(4)]


def test_aborted_transactions_are_removed_and_their_marker_later():
    log = LogBuilder()
    log.add([("a", "committed")], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.marker(7, committed=True)                                                        # offset 1
    first = log.add([("a", "aborted")], producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
    abort_at = log.marker(8, committed=False)                                            # offset 3
    log.add([("z", "1")])
    aborted = [AbortedTxn(8, first, abort_at, first)]
    cleaned, tracker = run_round(bytes(log.blob), aborted=aborted)
    # the aborted record is gone and did not hide the committed value of its key
    assert records_of(cleaned) == [(0, "a", "committed"), (4, "z", "1")]
    # the abort marker stays while its transaction had data in this round, and is indexed
    offsets = [h.base_offset for h in iter_batches(memoryview(cleaned))]
    assert abort_at in offsets and tracker.retained_aborts == aborted
    # the next round finds no data of it: the marker gets a horizon, then goes
    second, tracker2 = run_round(cleaned, aborted=aborted)
    assert tracker2.retained_aborts == []
    marker = [h for h in iter_batches(memoryview(second)) if h.base_offset == abort_at][0]
    assert marker.attributes & DELETE_HORIZON_MASK
    third, _ = run_round(second, aborted=aborted, now=NOW + DELETE_RETENTION_MS)
    assert abort_at not in [h.base_offset for h in iter_batches(memoryview(third))]
    # the commit marker stays while its transaction's record does
    assert 1 in [h.base_offset for h in iter_batches(memoryview(third))]


def test_the_last_batch_of_an_active_producer_is_kept_empty():
    log = LogBuilder()
    log.add([("a", "1")], producer_id=5, producer_epoch=2, base_sequence=0)
    log.add([("a", "2")])
    headers = log.headers()
    producers = {5: ProducerLast(last_data_offset=0, producer_epoch=2)}
    cleaned, _ = run_round(headers, producers=producers)
    kept = list(iter_batches(memoryview(cleaned)))
    assert [(h.base_offset, h.records_count, h.producer_id, h.base_sequence) for h in kept] == [
        (0, 0, 5, 0), (1, 1, -1, -1)]
    assert crc_is_valid(kept[0])
    # a producer no longer known leaves nothing
    gone, _ = run_round(headers, producers={})
    assert [h.base_offset for h in iter_batches(memoryview(gone))] == [1]


def test_untouched_batches_are_copied_byte_for_byte():
    log = LogBuilder()
    log.add([("a", "1"), ("b", "1")])
    stats = CleanStats()
    headers = log.headers()
    offset_map = build_offset_map(headers, start_offset=0, end_offset=2)
    out = b"".join(clean_batches(headers, offset_map, TxnTracker(), now_ms=NOW, delete_retention_ms=1,
                                 active_producers={}, round_end_offset=2, stats=stats))
    assert out == bytes(log.blob)
    assert (stats.records_read, stats.records_written) == (2, 2)


def seg(base, nxt, size=100, first_ts=0, largest_ts=0):
    return SegmentInfo(base, nxt, size, first_ts, largest_ts)


def test_the_round_never_passes_the_last_stable_offset_nor_the_active_segment():
    segments = [seg(0, 10), seg(10, 20), seg(20, 30), seg(30, 35)]
    assert first_uncleanable_offset(segments[:3], active_base_offset=30, last_stable_offset=15, now_ms=NOW,
                                    min_compaction_lag_ms=0) == 15
    c = cleanable(segments, checkpoint_offset=0, log_start_offset=0, active_base_offset=30, last_stable_offset=15,
                  now_ms=NOW, min_compaction_lag_ms=0, max_compaction_lag_ms=2**63 - 1)
    # only the segment wholly below the LSO is dirty and cleanable
    assert (c.first_uncleanable_offset, c.dirty_bytes) == (15, 100)
    c = cleanable(segments, checkpoint_offset=0, log_start_offset=0, active_base_offset=30, last_stable_offset=35,
                  now_ms=NOW, min_compaction_lag_ms=0, max_compaction_lag_ms=2**63 - 1)
    assert (c.first_uncleanable_offset, c.dirty_bytes) == (30, 300)


def test_min_compaction_lag_holds_young_segments_back():
    segments = [seg(0, 10, largest_ts=NOW - 5000), seg(10, 20, largest_ts=NOW - 500), seg(20, 30)]
    bound = first_uncleanable_offset(segments[:2], active_base_offset=20, last_stable_offset=30, now_ms=NOW,
                                     min_compaction_lag_ms=1000)
    assert bound == 10
    assert first_uncleanable_offset(segments[:2], active_base_offset=20, last_stable_offset=30, now_ms=NOW,
                                    min_compaction_lag_ms=0) == 20


def test_dirty_ratio_and_max_compaction_lag_decide_a_round():
    segments = [seg(0, 10, 300), seg(10, 20, 100, first_ts=NOW - 10_000), seg(20, 30)]
    kw = dict(log_start_offset=0, active_base_offset=20, last_stable_offset=30, now_ms=NOW, min_compaction_lag_ms=0)
    c = cleanable(segments, checkpoint_offset=10, max_compaction_lag_ms=2**63 - 1, **kw)
    assert (c.clean_bytes, c.dirty_bytes, c.dirty_ratio) == (300, 100, 0.25)
    assert not c.due(0.5) and c.due(0.25)
    lagging = cleanable(segments, checkpoint_offset=10, max_compaction_lag_ms=5000, **kw)
    assert lagging.due(0.5)
    # a checkpoint below the log start (retention) starts again at the log start
    c = cleanable(segments, checkpoint_offset=3, max_compaction_lag_ms=2**63 - 1, **(kw | {"log_start_offset": 10}))
    assert c.first_dirty_offset == 10


def test_segments_are_grouped_up_to_segment_bytes():
    segments = [seg(0, 10, 400), seg(10, 20, 500), seg(20, 30, 200), seg(30, 40, 900)]
    groups = group_segments(segments, segment_bytes=1000)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20], [30]]


def test_offset_map_skips_aborted_data_and_respects_the_range():
    log = LogBuilder()
    log.add([("a", "1")])
    first = log.add([("a", "x")], producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True)
    abort_at = log.marker(3, committed=False)
    log.add([("b", "1")])
    offset_map = build_offset_map(log.headers(), start_offset=0, end_offset=4,
                                  aborted=[AbortedTxn(3, first, abort_at, first)])
    assert offset_map.offsets == {b"a": 0, b"b": 3} and offset_map.latest_offset == 3
    assert build_offset_map(log.headers(), start_offset=0, end_offset=3).latest_offset == 2
    assert isinstance(offset_map, OffsetMap)
    assert COMPRESSION_NONE == 0
