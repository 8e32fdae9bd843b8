import os
import random
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.partition.log import (
    CLEAN_SHUTDOWN_MARKER, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, Log, OffsetOutOfRange, flush_rolled,
    unlink_files,
)
from actors.partition.segment import segment_file_name
from protocol.record_batch import (
    COMPRESSION_LZ4, COMPRESSION_ZSTD, build_batch, crc_is_valid, decode_records, iter_batches,
)


def batch(n=1, *, ts=1000, value_bytes=100, compression=0, step_ms=1):
    return build_batch([(b"k%d" % i, b"v" * value_bytes, [], ts + i * step_ms) for i in range(n)],
                       compression=compression)


def headers(data):
    return list(iter_batches(data))


def read_all(log, max_bytes=1 << 30):
    """Every batch from log start to end, following the one-segment-per-read rule."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        hs = headers(log.read(offset, max_bytes))
        assert hs, f"no data at {offset}"
        out.extend((h.base_offset, h.last_offset, bytes(h.buf[h.offset_in_buf:h.offset_in_buf + h.size_bytes]))
                   for h in hs if h.last_offset >= offset)
        offset = hs[-1].last_offset + 1
    return out


def test_append_assigns_offsets_and_reads_back(tmp_path):
    log = Log.open(tmp_path, segment_bytes=1 << 20)
    infos = [log.append(batch(3), leader_epoch=4, now_ms=0) for _ in range(5)]
    assert [(i.base_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14)]
    assert log.log_end_offset == 15 and log.high_watermark == 0  # the partition core moves it
    log.high_watermark = 15
    assert log.high_watermark == 15
    hs = headers(log.read(4, 1 << 20))
    assert [h.base_offset for h in hs] == [3, 6, 9, 12]  # the first batch starts before offset 4
    assert all(crc_is_valid(h) and h.partition_leader_epoch == 4 for h in hs)
    assert decode_records(hs[0])[1].offset == 4
    assert log.read(15, 1000) == b""


def test_append_across_segment_rolls(tmp_path):
    one = len(batch(2, value_bytes=200))
    log = Log.open(tmp_path, segment_bytes=one * 3 + 10)
    for _ in range(20):
        log.append(batch(2, value_bytes=200), leader_epoch=0, now_ms=0)
    assert log.segment_base_offsets == [0, 6, 12, 18, 24, 30, 36]
    assert all(s.size_bytes <= one * 3 for s in log._segments)
    got = read_all(log)
    assert [(b, l) for b, l, _ in got] == [(2 * i, 2 * i + 1) for i in range(20)]
    for offset in range(40):
        first = headers(log.read(offset, 1))[0]
        assert first.base_offset <= offset <= first.last_offset
    names = sorted(p.name for p in tmp_path.iterdir())
    assert segment_file_name(6, ".log") in names and segment_file_name(6, ".timeindex") in names


def test_multi_batch_blob_is_one_append(tmp_path):
    log = Log.open(tmp_path)
    info = log.append(batch(2) + batch(3) + batch(1), leader_epoch=1, now_ms=0)
    assert (info.base_offset, info.last_offset) == (0, 5)
    assert [(h.base_offset, h.last_offset) for h in headers(log.read(0, 1 << 20))] == [(0, 1), (2, 4), (5, 5)]


def test_oversized_batch_goes_alone_into_a_fresh_segment(tmp_path):
    log = Log.open(tmp_path, segment_bytes=1000)
    log.append(batch(1), leader_epoch=0, now_ms=0)
    big = batch(1, value_bytes=5000)
    log.append(big, leader_epoch=0, now_ms=0)
    log.append(batch(1), leader_epoch=0, now_ms=0)
    assert log.segment_base_offsets == [0, 1, 2]
    assert len(log.read(1, 10)) == len(big)


def test_read_max_bytes_and_kip74(tmp_path):
    log = Log.open(tmp_path)
    sizes = []
    for n in (1, 1, 1, 50, 1):
        data = batch(n, value_bytes=100)
        sizes.append(len(data))
        log.append(data, leader_epoch=0, now_ms=0)
    # max_bytes smaller than the first batch: that batch alone, whole
    assert len(log.read(0, 10)) == sizes[0]
    # exact fit of two batches, one byte short of three
    assert len(log.read(0, sizes[0] + sizes[1])) == sizes[0] + sizes[1]
    assert len(log.read(0, sum(sizes[:3]) - 1)) == sizes[0] + sizes[1]
    # the oversized batch (offsets 3..52) is returned whole even with a tiny max_bytes, from inside it
    data = log.read(20, 1)
    assert len(data) == sizes[3] and headers(data)[0].base_offset == 3
    # not the first partition of a response: no room, no data
    assert log.read(20, sizes[3] - 1, min_one_batch=False) == b""
    assert len(log.read(0, sizes[0] + 5, min_one_batch=False)) == sizes[0]


def test_read_bounded_by_max_offset(tmp_path):
    log = Log.open(tmp_path)
    for _ in range(5):
        log.append(batch(2), leader_epoch=0, now_ms=0)
    log.high_watermark = 6
    assert [h.base_offset for h in headers(log.read(0, 1 << 20, max_offset=6))] == [0, 2, 4]
    assert log.read(6, 1 << 20, max_offset=6) == b""
    assert log.read(5, 1 << 20, max_offset=5) == b""  # batch 4..5 straddles the bound
    log.high_watermark = 100
    assert log.high_watermark == 10


def test_offset_out_of_range(tmp_path):
    log = Log.open(tmp_path)
    log.append(batch(2), leader_epoch=0, now_ms=0)
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    assert log.read(2, 100) == b""


def test_sparse_index_lookup_matches_linear_scan(tmp_path):
    log = Log.open(tmp_path, segment_bytes=60_000, index_interval_bytes=300)
    expected = []  # (base, last, bytes) in log order
    rng = random.Random(7)
    for _ in range(1500):
        n = rng.randint(1, 4)
        data = batch(n, value_bytes=rng.randint(0, 120))
        info = log.append(data, leader_epoch=0, now_ms=0)
        expected.append((info.base_offset, info.last_offset, len(data)))
    assert len(log.segment_base_offsets) > 2
    assert sum(len(s.offset_index) for s in log._segments) > 100
    for offset in range(0, log.log_end_offset, 3):
        want = next(e for e in expected if e[1] >= offset)
        first = headers(log.read(offset, 1))[0]
        assert (first.base_offset, first.last_offset, first.size_bytes) == want
    assert [(b, l) for b, l, _ in read_all(log, max_bytes=5000)] == [(b, l) for b, l, _ in expected]


def test_reads_match_a_naive_model_of_whole_batches(tmp_path):
    """Random batch sizes, fetch sizes and high watermarks: a read is exactly the whole batches a
    naive walk over every batch picks (index entries, the position cache and the header walk are
    only shortcuts), and the slice a sendfile would send names the same bytes."""
    log = Log.open(tmp_path, index_interval_bytes=700)
    rng = random.Random(11)
    batches = []  # (base, last, size)
    for _ in range(600):
        data = batch(rng.randint(1, 5), value_bytes=rng.choice((0, 10, 200, 3000)))
        info = log.append(data, leader_epoch=0, now_ms=0)
        batches.append((info.base_offset, info.last_offset, len(data)))
    segment = log._segments[0]
    for _ in range(3000):
        offset = rng.randrange(log.log_end_offset + 1)
        max_bytes = rng.choice((1, 100, 5000, 60_000, 1 << 20))
        upper = rng.randint(offset, log.log_end_offset)
        log.high_watermark = upper
        first = min(b for b in range(len(batches)) if batches[b][1] >= offset) if offset < upper else None
        want = []
        if first is not None and batches[first][1] < upper:
            budget = max(max_bytes, batches[first][2])
            for base, last, size in batches[first:]:
                if last >= upper or size > budget:
                    break
                want.append((base, last))
                budget -= size
        got = log.read(offset, max_bytes, max_offset=upper)
        assert [(h.base_offset, h.last_offset) for h in headers(got)] == want, (offset, max_bytes, upper)
        where = segment.slice(offset, max_bytes, upper)
        if where is not None:
            assert os.pread(segment.fd, where[1], where[0]) == bytes(got)
        region, spans = log.slice_spans(offset, max_bytes, max_offset=upper)
        assert [(b, l) for _, b, l, _ in spans] == want
        assert sum(size for *_, size in spans) == region.size_bytes == len(got)


def test_reopen_gives_identical_reads(tmp_path):
    log = Log.open(tmp_path, segment_bytes=5000, index_interval_bytes=200)
    for i in range(100):
        log.append(batch(i % 3 + 1, compression=COMPRESSION_LZ4 if i % 2 else 0), leader_epoch=1, now_ms=0)
    before = read_all(log, max_bytes=3000)
    samples = {o: log.read(o, 2500) for o in range(0, log.log_end_offset, 7)}
    log.close()
    log = Log.open(tmp_path, segment_bytes=5000, index_interval_bytes=200)
    assert read_all(log, max_bytes=3000) == before
    assert {o: log.read(o, 2500) for o in samples} == samples
    info = log.append(batch(1), leader_epoch=1, now_ms=0)
    assert info.base_offset == before[-1][1] + 1


def test_reopen_rebuilds_missing_or_garbage_indexes(tmp_path):
    log = Log.open(tmp_path, segment_bytes=4000, index_interval_bytes=100)
    for _ in range(60):
        log.append(batch(2), leader_epoch=0, now_ms=0)
    before = read_all(log)
    bases = log.segment_base_offsets
    log.close()
    (tmp_path / segment_file_name(bases[0], ".index")).unlink()
    (tmp_path / segment_file_name(bases[1], ".timeindex")).unlink()
    (tmp_path / segment_file_name(bases[-1], ".index")).write_bytes(os.urandom(29))
    log = Log.open(tmp_path, segment_bytes=4000, index_interval_bytes=100)
    assert read_all(log) == before
    assert len(log._segments[0].offset_index) > 0
    for offset in range(log.log_end_offset):
        h = headers(log.read(offset, 1))[0]
        assert h.base_offset <= offset <= h.last_offset


def _fill(tmp_path, n=30):
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=500)
    for _ in range(n):
        log.append(batch(2), leader_epoch=0, now_ms=0)
    good = read_all(log)
    size = log._segments[-1].size_bytes
    log.close()
    return good, tmp_path / segment_file_name(0, ".log"), size


@pytest.mark.parametrize("damage", ["garbage", "half_batch", "crc_corrupt_tail", "zeros"])
def test_recovery_truncates_bad_tail(tmp_path, damage):
    good, path, size = _fill(tmp_path)
    if damage == "garbage":
        with open(path, "ab") as f:
            f.write(os.urandom(777))
        keep = good
    elif damage == "half_batch":
        with open(path, "ab") as f:
            f.write(batch(3)[:40])
        keep = good
    elif damage == "zeros":
        with open(path, "ab") as f:
            f.write(b"\x00" * 4096)  # a preallocated / never-written tail
        keep = good
    else:  # flip a byte inside the last batch body
        data = bytearray(path.read_bytes())
        data[-5] ^= 0xFF
        path.write_bytes(bytes(data))
        keep = good[:-1]
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=500)
    assert read_all(log) == keep
    assert log.log_end_offset == keep[-1][1] + 1
    assert path.stat().st_size == sum(len(b) for _, _, b in keep)
    info = log.append(batch(1), leader_epoch=0, now_ms=0)
    assert info.base_offset == keep[-1][1] + 1
    log.close()
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=500)
    assert read_all(log)[:-1] == keep and log.log_end_offset == info.base_offset + 1


def test_recovery_when_the_last_indexed_batch_is_corrupt(tmp_path):
    good, path, size = _fill(tmp_path)
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=500)
    last_entry_position = log._segments[-1].offset_index.values[-1]
    log.close()
    data = bytearray(path.read_bytes())
    data[last_entry_position + 30] ^= 0xFF  # inside the header, covered by the CRC
    path.write_bytes(bytes(data))
    log = Log.open(tmp_path, segment_bytes=1 << 20, index_interval_bytes=500)
    kept = read_all(log)
    assert kept == [g for g in good if sum(len(x[2]) for x in good[:good.index(g) + 1]) <= last_entry_position]
    assert all(p < log._segments[-1].size_bytes for p in log._segments[-1].offset_index.values)


def test_recovery_of_an_active_segment_that_is_all_garbage(tmp_path):
    log = Log.open(tmp_path, segment_bytes=600)
    for _ in range(6):
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets
    log.close()
    (tmp_path / segment_file_name(bases[-1], ".log")).write_bytes(os.urandom(1000))
    log = Log.open(tmp_path, segment_bytes=600)
    assert log.log_end_offset == bases[-1]
    assert log.append(batch(1), leader_epoch=0, now_ms=0).base_offset == bases[-1]


def test_retention_by_time(tmp_path):
    log = Log.open(tmp_path, segment_bytes=2000)
    for i in range(30):
        log.append(batch(1, ts=10_000 + i * 1000, value_bytes=300), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets
    assert len(bases) > 4
    # everything with max timestamp older than now - retention goes; the cut is at whole segments
    now = 10_000 + 15 * 1000 + 5000
    log.high_watermark = log.log_end_offset
    deleted = log.apply_retention(now, retention_ms=5000, retention_bytes=-1)
    assert deleted == [b for b in bases if b < 15 and next(x for x in bases + [30] if x > b) <= 15]
    assert log.log_start_offset == log.segment_base_offsets[0] == deleted[-1] + (bases[1] - bases[0])
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert headers(log.read(log.log_start_offset, 100))[0].base_offset == log.log_start_offset
    assert log.apply_retention(now, retention_ms=-1, retention_bytes=-1) == []
    start = log.log_start_offset
    log.close()
    for b in deleted:
        assert not (tmp_path / segment_file_name(b, ".log")).exists()
    log = Log.open(tmp_path, segment_bytes=2000)
    assert log.log_start_offset == start and log.log_end_offset == 30


def test_retention_by_time_rolls_and_deletes_the_active_segment_when_all_expired(tmp_path):
    log = Log.open(tmp_path, segment_bytes=1 << 20)
    for i in range(5):
        log.append(batch(1, ts=1000 + i), leader_epoch=0, now_ms=0)
    assert log.apply_retention(1_000_000, retention_ms=1000, retention_bytes=-1) == []  # HW is 0
    log.high_watermark = log.log_end_offset
    assert log.apply_retention(1_000_000, retention_ms=1000, retention_bytes=-1) == [0]
    assert log.log_start_offset == log.log_end_offset == 5 and log.segment_base_offsets == [5]
    assert log.read(5, 100) == b""
    assert log.append(batch(1), leader_epoch=0, now_ms=0).base_offset == 5
    log.close()
    assert Log.open(tmp_path).log_start_offset == 5


def test_retention_by_bytes(tmp_path):
    one = len(batch(1, value_bytes=300))
    log = Log.open(tmp_path, segment_bytes=one * 2)
    for _ in range(10):
        log.append(batch(1, value_bytes=300), leader_epoch=0, now_ms=0)
    assert log.segment_base_offsets == [0, 2, 4, 6, 8]
    log.high_watermark = log.log_end_offset
    deleted = log.apply_retention(0, retention_ms=-1, retention_bytes=one * 5)
    assert deleted == [0, 2]  # deleting a third segment would go below 5 batches
    assert log.log_start_offset == 4 and log.size_bytes == one * 6
    log.close()
    log = Log.open(tmp_path, segment_bytes=one * 2)
    assert log.log_start_offset == 4 and log.segment_base_offsets == [4, 6, 8]


def test_retention_never_deletes_above_the_high_watermark(tmp_path):
    log = Log.open(tmp_path, segment_bytes=500)
    for _ in range(6):
        log.append(batch(1, value_bytes=300), leader_epoch=0, now_ms=0)
    log.high_watermark = 2
    deleted = log.apply_retention(10**12, retention_ms=0, retention_bytes=-1)
    assert deleted == [0, 1] and log.log_start_offset == 2


def test_delete_records_before(tmp_path):
    log = Log.open(tmp_path, segment_bytes=1000)
    for _ in range(12):
        log.append(batch(2, value_bytes=100), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(1)  # above the high watermark (still 0)
    log.high_watermark = log.log_end_offset
    assert log.delete_records_before(bases[2] + 1) == bases[2] + 1
    assert log.segment_base_offsets == bases[2:]
    with pytest.raises(OffsetOutOfRange):
        log.read(bases[2], 10)
    assert headers(log.read(bases[2] + 1, 10))[0].base_offset == bases[2]  # the containing batch
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(log.log_end_offset + 1)
    log.close()
    log = Log.open(tmp_path, segment_bytes=1000)
    assert log.log_start_offset == bases[2] + 1
    assert (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text().strip() == str(bases[2] + 1)


def test_offset_for_timestamp_exact(tmp_path):
    log = Log.open(tmp_path, segment_bytes=3000, index_interval_bytes=200)
    # batches of 5 records, timestamps 100 apart inside a batch, compressed every other batch
    for i in range(40):
        log.append(batch(5, ts=10_000 + i * 1000, step_ms=100, compression=COMPRESSION_ZSTD if i % 2 else 0),
                   leader_epoch=0, now_ms=0)
    assert len(log.segment_base_offsets) > 3
    assert log.offset_for_timestamp(0) == (0, 10_000)
    assert log.offset_for_timestamp(10_000) == (0, 10_000)
    assert log.offset_for_timestamp(10_001) == (1, 10_100)
    assert log.offset_for_timestamp(10_401) == (5, 11_000)
    assert log.offset_for_timestamp(27_250) == (17 * 5 + 3, 27_300)
    assert log.offset_for_timestamp(49_400) == (199, 49_400)
    assert log.offset_for_timestamp(49_401) is None
    for target in range(9_000, 50_000, 173):
        want = next(((o, 10_000 + (o // 5) * 1000 + (o % 5) * 100) for o in range(200)
                     if 10_000 + (o // 5) * 1000 + (o % 5) * 100 >= target), None)
        assert log.offset_for_timestamp(target) == want
    assert log.max_timestamp_offset() == (199, 49_400)


def test_offset_for_timestamp_out_of_order_and_max_timestamp(tmp_path):
    log = Log.open(tmp_path)
    log.append(build_batch([(None, b"a", [], 500), (None, b"b", [], 900), (None, b"c", [], 900)]),
               leader_epoch=0, now_ms=0)
    log.append(build_batch([(None, b"d", [], 100)]), leader_epoch=0, now_ms=0)
    assert log.offset_for_timestamp(600) == (1, 900)
    assert log.offset_for_timestamp(50) == (0, 500)
    assert log.max_timestamp_offset() == (1, 900)
    log.close()
    assert Log.open(tmp_path).max_timestamp_offset() == (1, 900)


def test_log_append_time(tmp_path):
    log = Log.open(tmp_path)
    info = log.append(batch(3, ts=5), leader_epoch=0, now_ms=777, log_append_time=True)
    assert info.log_append_time_ms == 777 and info.max_timestamp_ms == 777
    (h,) = headers(log.read(0, 1000))
    assert crc_is_valid(h) and h.timestamp_type == 1 and h.max_timestamp == 777
    assert [r.timestamp_ms for r in decode_records(h)] == [777] * 3
    assert log.offset_for_timestamp(700) == (0, 777)


def test_time_based_roll(tmp_path):
    log = Log.open(tmp_path, segment_ms=10_000)
    log.append(batch(1, ts=1_000), leader_epoch=0, now_ms=0)
    log.append(batch(1, ts=5_000), leader_epoch=0, now_ms=0)
    log.append(batch(1, ts=11_001), leader_epoch=0, now_ms=0)
    assert log.segment_base_offsets == [0, 2]


def test_truncate_to(tmp_path):
    log = Log.open(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    for _ in range(20):
        log.append(batch(2, value_bytes=100), leader_epoch=0, now_ms=0)
    full = read_all(log)
    log.high_watermark = log.log_end_offset
    log.truncate_to(17)  # inside batch 16..17: the whole batch goes
    assert log.log_end_offset == 16 and log.high_watermark == 16
    assert read_all(log) == [f for f in full if f[1] < 16]
    assert log.append(batch(1), leader_epoch=0, now_ms=0).base_offset == 16
    log.truncate_to(4)
    assert log.log_end_offset == 4 and read_all(log) == full[:2]
    log.close()
    log = Log.open(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    assert log.log_end_offset == 4 and read_all(log) == full[:2]
    log.truncate_to(0)
    assert log.log_start_offset == log.log_end_offset == 0 and log.read(0, 10) == b""


def test_throughput_report(tmp_path):
    """Not a benchmark gate: prints MB/s for 200 MiB of 1 MiB blobs (run with -s to see it)."""
    blob = build_batch([(None, os.urandom(1014), [], 0) for _ in range(1024)])  # ~1 MiB, one batch
    total_blobs = 200
    log = Log.open(tmp_path, segment_bytes=256 * 1024 * 1024)
    t0 = time.perf_counter()
    for _ in range(total_blobs):
        log.append(blob, leader_epoch=0, now_ms=0)
    append_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    offset, read_bytes = 0, 0
    while offset < log.log_end_offset:
        data = log.read(offset, 1024 * 1024)
        read_bytes += len(data)
        offset = headers(data)[-1].last_offset + 1
    read_s = time.perf_counter() - t0
    mib = len(blob) * total_blobs / (1 << 20)
    assert read_bytes == len(blob) * total_blobs
    print(f"\nlog append: {mib / append_s:.0f} MiB/s ({mib:.0f} MiB in {append_s:.2f}s); "
          f"read: {mib / read_s:.0f} MiB/s ({read_s:.2f}s)")
    log.close()


# --- recovery fuzzing -------------------------------------------------------------------------------



@settings(max_examples=80, deadline=None)
@given(damage=st.sampled_from(["truncate", "flip", "append", "overwrite"]), where=st.floats(0, 1),
       junk=st.binary(min_size=1, max_size=300), index_interval=st.sampled_from([50, 400, 4096]),
       crashed=st.booleans())
def test_recovery_keeps_exactly_the_batches_before_the_damage(damage, where, junk, index_interval, crashed):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        log = Log.open(path, segment_bytes=6000, index_interval_bytes=index_interval)
        for i in range(40):
            log.append(batch(i % 3 + 1, value_bytes=40 + i), leader_epoch=0, now_ms=0)
        good = read_all(log)
        active_base = log.active_segment_base_offset
        index = log._segments[-1].offset_index
        last_entry_position = index.values[-1] if len(index) else 0
        log.close()
        if crashed:
            (path / CLEAN_SHUTDOWN_MARKER).unlink()  # unclean: the whole active segment is re-checked
        seg = path / segment_file_name(active_base, ".log")
        original = seg.read_bytes()
        data = bytearray(original)
        # after a clean shutdown only batches after the last index entry are re-checked: damage
        # deeper in the segment is disk corruption, which (like Kafka) is not scanned for
        floor = 0 if crashed else last_entry_position
        pos = floor + min(int(where * (len(data) - floor)), len(data) - floor - 1)
        if damage == "truncate":
            del data[pos:]
        elif damage == "flip":
            data[pos] ^= 0x10
        elif damage == "append":
            data += junk
        else:
            data[pos:pos + len(junk)] = junk
        seg.write_bytes(bytes(data))
        # oracle: batches survive while their bytes are intact; partitionLeaderEpoch (bytes 12-15)
        # is covered by no CRC, as in Kafka, so damage confined to it goes unnoticed
        older = [g for g in good if g[0] < active_base]
        kept, start = [], 0
        for base, last, raw in (g for g in good if g[0] >= active_base):
            now = bytes(data[start:start + len(raw)])
            if len(now) < len(raw):
                break
            if now != raw:
                if now[:12] + now[16:] != raw[:12] + raw[16:]:
                    break
            kept.append((base, last, now))
            start += len(raw)
        log = Log.open(path, segment_bytes=6000, index_interval_bytes=index_interval)
        assert read_all(log) == older + kept
        assert log.log_end_offset == (kept[-1][1] + 1 if kept else active_base)
        assert log.append(batch(1), leader_epoch=0, now_ms=0).base_offset == log.log_end_offset - 1
        log.close()


def test_clean_reopen_trusts_indexes_and_does_not_rewrite_them(tmp_path):
    log = Log.open(tmp_path, segment_bytes=5000, index_interval_bytes=300)
    for i in range(100):
        log.append(batch(1, ts=1000 + (i * 7919) % 500), leader_epoch=0, now_ms=0)
    log.close()
    indexes = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".index", ".timeindex")}
    log = Log.open(tmp_path, segment_bytes=5000, index_interval_bytes=300)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".index", ".timeindex")} == indexes
    assert log.max_timestamp_offset() == log.offset_for_timestamp(max(1000 + (i * 7919) % 500 for i in range(100)))
    log.close()


def test_rolled_segments_are_flushed_later_and_move_the_recovery_point(tmp_path, monkeypatch):
    """A roll does not fsync in line (a 1 GiB segment's fsync holds up everything its process
    hosts); `take_rolled` hands the rolled segments over, and `flush_rolled` fsyncs them and
    checkpoints the recovery point, even after the segment was deleted meanwhile."""
    log = Log.open(tmp_path, segment_bytes=600)
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text().strip() == "0"
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    for _ in range(6):
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets
    assert len(bases) >= 3 and synced == []  # rolled, not fsynced
    rolled = log.take_rolled()
    assert [point for _, point in rolled] == bases[1:]
    assert log.take_rolled() == []
    log.high_watermark = log.log_end_offset
    log.delete_records_before(bases[1])  # the first rolled segment is deleted before its flush
    synced.clear()
    flush_rolled(log, rolled, log.recovery_generation)
    # the data, offset index and time index of each, then the recovery point's checkpoint
    assert synced[:-1] == [fd for fds, _ in rolled for fd in fds] and len(rolled) == len(bases) - 1
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text().strip() == str(bases[-1])


def test_unclean_recovery_checks_every_segment_past_the_recovery_point(tmp_path):
    """A rolled segment not yet flushed when the machine failed may have lost its tail: recovery
    checks it, truncates it at its last good batch and drops the segments after it (as Kafka
    truncates the log at the first bad batch)."""
    log = Log.open(tmp_path, segment_bytes=600)
    for _ in range(9):
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets
    assert len(bases) >= 4
    flush_rolled(log, log.take_rolled()[:1], log.recovery_generation)  # only the first rolled segment reached the disk
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text().strip() == str(bases[1])
    # the crash: no clean close; the second segment's last batch is torn
    damaged = tmp_path / segment_file_name(bases[1], ".log")
    data = damaged.read_bytes()
    damaged.write_bytes(data[:-30])
    kept_end = headers(data)[-1].base_offset  # the torn batch and everything after it are gone
    log = Log.open(tmp_path, segment_bytes=600)
    assert log.segment_base_offsets == [bases[0], bases[1]]
    assert log.log_end_offset == kept_end < bases[2]
    assert not (tmp_path / segment_file_name(bases[2], ".log")).exists()
    assert log.append(batch(1), leader_epoch=0, now_ms=0).base_offset == kept_end


def test_a_clean_close_flushes_what_was_rolled(tmp_path):
    log = Log.open(tmp_path, segment_bytes=600)
    for _ in range(6):
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    before = read_all(log)
    log.close()  # nothing was taken: close fsyncs the rolled segments itself
    log = Log.open(tmp_path, segment_bytes=600)
    assert read_all(log) == before and log.take_rolled() == []


def test_deleted_segments_are_renamed_then_unlinked_elsewhere(tmp_path):
    """Retention renames a deleted segment's files (*.deleted, as Kafka does) and hands them over
    to be unlinked off the event loop; what was never unlinked goes at the next open."""
    log = Log.open(tmp_path, segment_bytes=600)
    for _ in range(6):
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    log.high_watermark = log.log_end_offset
    first = log.segment_base_offsets[0]
    assert log.apply_retention(10**13, retention_ms=1, retention_bytes=-1)
    assert not (tmp_path / segment_file_name(first, ".log")).exists()
    deleted = log.take_deleted()
    assert tmp_path / (segment_file_name(first, ".log") + ".deleted") in deleted
    assert all(p.exists() for p in deleted) and log.take_deleted() == []
    unlink_files(deleted[:3])
    assert not any(p.exists() for p in deleted[:3])
    log.close()
    Log.open(tmp_path, segment_bytes=600).close()  # the rest, never unlinked, go at open
    assert not list(tmp_path.glob("*.deleted"))


def test_a_truncation_lowers_the_recovery_point_and_an_older_flush_cannot_raise_it(tmp_path):
    """A follower truncates into flushed segments and writes on (as Kafka's truncateTo lowers the
    recovery point): recovery after an unclean shutdown checks the rewritten segment again, even
    when a flush handed over before the truncation finishes after it."""
    log = Log.open(tmp_path, segment_bytes=600)
    for _ in range(6):
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    flush_rolled(log, log.take_rolled(), log.recovery_generation)  # what rolled so far reached the disk
    for _ in range(2):
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets
    assert int((tmp_path / RECOVERY_POINT_CHECKPOINT).read_text()) == bases[-2]
    rolled, generation = log.take_rolled(), log.recovery_generation  # handed over, not done yet
    log.truncate_to(bases[1] + 1)  # into the second segment
    flush_rolled(log, rolled, generation)  # the older flush ends after the truncation
    assert int((tmp_path / RECOVERY_POINT_CHECKPOINT).read_text()) == bases[1] + 1
    for _ in range(3):  # written on, not flushed
        log.append(batch(1, value_bytes=200), leader_epoch=0, now_ms=0)
    rewritten = tmp_path / segment_file_name(bases[1], ".log")
    data = rewritten.read_bytes()
    rewritten.write_bytes(data[:-30])  # the crash tore the rewritten segment's tail
    log = Log.open(tmp_path, segment_bytes=600)  # no clean close: checked, truncated at the torn batch
    assert log.log_end_offset == headers(data)[-1].base_offset
