import os
import struct
import time

import pytest

from actors.partition.core import FetchResult, PartitionConfig, PartitionCore, ProduceResult
from protocol.errors import ErrorCode
from protocol.record_batch import (
    COMPRESSION_SNAPPY, CorruptRecord, build_batch, decode_records, iter_batches, rewrite_crc,
)

NOW = 1_700_000_000_000


def batch(n=1, *, ts=NOW, pid=-1, epoch=-1, seq=-1, value_bytes=50, **kw):
    return build_batch([(b"k%d" % i, b"v" * value_bytes, [], ts + i) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def open_core(path, **config):
    return PartitionCore.open(path, PartitionConfig(**config), now_ms=NOW)


def produce(core, data, now_ms=NOW):
    """Produce as the leader of a single-replica partition: the append is committed at once (the
    replication core moves the high watermark to the log end; the shell sets it)."""
    result = core.produce(memoryview(data), now_ms=now_ms, leader_epoch=7)
    core.log.high_watermark = core.log_end_offset
    return result


def test_produce_fetch_and_high_watermark(tmp_path):
    core = open_core(tmp_path)
    r = produce(core, batch(3))
    assert isinstance(r, ProduceResult)
    assert (r.error_code, r.base_offset, r.log_append_time_ms, r.log_start_offset) == (0, 0, -1, 0)
    assert produce(core, batch(2)).base_offset == 3
    assert core.high_watermark == core.log_end_offset == 5
    f = core.fetch(0, 1 << 20)
    assert isinstance(f, FetchResult)
    assert (f.error_code, f.high_watermark, f.last_stable_offset, f.log_start_offset) == (0, 5, 5, 0)
    hs = list(iter_batches(f.records))
    assert [h.base_offset for h in hs] == [0, 3] and hs[0].partition_leader_epoch == 7
    assert [r.offset for r in decode_records(hs[1])] == [3, 4]
    assert core.fetch(5, 100).records == b""
    assert core.fetch(6, 100).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_produce_accepts_numpy_like_readonly_buffers(tmp_path):
    np = pytest.importorskip("numpy")
    core = open_core(tmp_path)
    arr = np.frombuffer(batch(2), dtype=np.uint8)
    assert not arr.flags.writeable
    assert produce(core, arr).error_code == 0
    assert core.log_end_offset == 2


def test_idempotent_retry_returns_original_offset_and_appends_nothing(tmp_path):
    core = open_core(tmp_path)
    produce(core, batch(1))
    first = batch(3, pid=42, epoch=0, seq=0)
    assert produce(core, first).base_offset == 1
    second = batch(2, pid=42, epoch=0, seq=3)
    assert produce(core, second).base_offset == 4
    end = core.log_end_offset
    for retry, offset in ((second, 4), (first, 1)):
        r = produce(core, retry)
        assert (r.error_code, r.base_offset) == (0, offset)
    assert core.log_end_offset == end
    assert len(list(iter_batches(core.fetch(0, 1 << 20).records))) == 3


def test_sequence_gap_and_old_epoch_rejected(tmp_path):
    core = open_core(tmp_path)
    produce(core, batch(2, pid=1, epoch=5, seq=0))
    r = produce(core, batch(1, pid=1, epoch=5, seq=3))
    assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER == 45
    r = produce(core, batch(1, pid=1, epoch=4, seq=2))
    assert r.error_code == ErrorCode.INVALID_PRODUCER_EPOCH == 47
    r = produce(core, batch(1, pid=1, epoch=6, seq=1))
    assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert core.log_end_offset == 2
    assert produce(core, batch(1, pid=1, epoch=6, seq=0)).base_offset == 2


def test_dedup_survives_clean_reopen(tmp_path):
    core = open_core(tmp_path)
    data = batch(2, pid=9, epoch=1, seq=0)
    assert produce(core, data).base_offset == 0
    produce(core, batch(1))
    core.close()
    core = open_core(tmp_path)
    r = produce(core, data)
    assert (r.error_code, r.base_offset) == (0, 0) and core.log_end_offset == 3
    assert produce(core, batch(1, pid=9, epoch=1, seq=3)).error_code == 45
    assert produce(core, batch(1, pid=9, epoch=1, seq=2)).base_offset == 3


def test_dedup_survives_unclean_reopen_via_snapshot_at_roll_plus_replay(tmp_path):
    core = open_core(tmp_path, segment_bytes=2000)
    sent = []
    for i in range(30):
        data = batch(1, pid=3, epoch=0, seq=i, value_bytes=200)
        sent.append((produce(core, data).base_offset, data))
    produce(core, batch(1, pid=4, epoch=2, seq=0, value_bytes=200))
    assert len(core.log.segment_base_offsets) > 3
    assert any(p.suffix == ".snapshot" for p in tmp_path.iterdir())
    # no close(): as after a crash (the page cache keeps what was written)
    again = open_core(tmp_path, segment_bytes=2000)
    for offset, data in sent[-5:]:
        assert produce(again, data).base_offset == offset
    assert produce(again, batch(1, pid=3, epoch=0, seq=31)).error_code == 45
    assert produce(again, batch(1, pid=3, epoch=0, seq=30)).base_offset == 31
    assert produce(again, batch(1, pid=4, epoch=1, seq=1)).error_code == 47


def test_dedup_rebuilt_from_log_without_any_snapshot(tmp_path):
    core = open_core(tmp_path)
    data = batch(2, pid=11, epoch=0, seq=0)
    produce(core, data)
    for p in tmp_path.glob("*.snapshot"):
        p.unlink()
    again = open_core(tmp_path)
    assert produce(again, data).base_offset == 0 and again.log_end_offset == 2


def test_oversize_batch_rejected_and_nothing_appended(tmp_path):
    core = open_core(tmp_path, max_message_bytes=1000)
    produce(core, batch(1))
    r = produce(core, batch(1, value_bytes=2000))
    assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE == 10 and r.base_offset == -1
    assert core.log_end_offset == 1


def test_crc_mismatch_rejected_and_nothing_appended(tmp_path):
    core = open_core(tmp_path)
    data = bytearray(batch(3))
    data[-2] ^= 0x40
    assert produce(core, data).error_code == ErrorCode.CORRUPT_MESSAGE == 2
    assert core.log_end_offset == 0 and core.fetch(0, 100).records == b""


@pytest.mark.parametrize("case, code", [
    ("empty", ErrorCode.INVALID_RECORD),
    ("two_batches", ErrorCode.INVALID_RECORD),
    ("magic1", ErrorCode.INVALID_RECORD),
    ("truncated", ErrorCode.CORRUPT_MESSAGE),
    ("base_offset", ErrorCode.INVALID_RECORD),
    ("count", ErrorCode.INVALID_RECORD),
    ("control", ErrorCode.INVALID_RECORD),
    ("no_sequence", ErrorCode.INVALID_RECORD),
    ("transactional_without_producer", ErrorCode.INVALID_RECORD),
    ("future_timestamp", ErrorCode.INVALID_TIMESTAMP),
    ("codec", ErrorCode.CORRUPT_MESSAGE),
    ("segment", ErrorCode.RECORD_LIST_TOO_LARGE),
])
def test_invalid_produce(tmp_path, case, code):
    core = open_core(tmp_path, segment_bytes=5000, max_message_bytes=100_000)
    data = bytearray(batch(2))
    if case == "empty":
        data = bytearray()
    elif case == "two_batches":
        data = data + batch(1)
    elif case == "magic1":
        data[16] = 1
    elif case == "truncated":
        data = data[:-1]
    elif case == "base_offset":
        struct.pack_into(">q", data, 0, 5)
    elif case == "count":
        struct.pack_into(">i", data, 57, 3)
        rewrite_crc(data, 0)
    elif case == "control":
        data = bytearray(batch(1, is_control=True))
    elif case == "no_sequence":
        data = bytearray(batch(1, pid=3, epoch=0, seq=-1))
    elif case == "transactional_without_producer":
        data = bytearray(batch(1, is_transactional=True))
    elif case == "future_timestamp":
        data = bytearray(batch(1, ts=NOW + 3_600_001))
    elif case == "codec":
        data[22] |= 0x07
        rewrite_crc(data, 0)
    elif case == "segment":
        data = bytearray(batch(1, value_bytes=6000))
    r = produce(core, data)
    assert r.error_code == code and r.error_message
    assert core.log_end_offset == 0


def test_past_timestamp_limit_only_when_configured(tmp_path):
    core = open_core(tmp_path, message_timestamp_before_max_ms=1000)
    assert produce(core, batch(1, ts=NOW - 1001)).error_code == ErrorCode.INVALID_TIMESTAMP
    assert produce(core, batch(1, ts=NOW - 1000)).error_code == 0


def test_log_append_time_topic(tmp_path):
    core = open_core(tmp_path, log_append_time=True)
    r = produce(core, batch(2, ts=5, compression=COMPRESSION_SNAPPY), now_ms=NOW + 10)
    assert (r.error_code, r.log_append_time_ms) == (0, NOW + 10)
    (h,) = list(iter_batches(core.fetch(0, 1000).records))
    assert h.timestamp_type == 1 and h.max_timestamp == NOW + 10
    assert [x.timestamp_ms for x in decode_records(h)] == [NOW + 10] * 2
    # a duplicate answers the original append time
    data = batch(1, pid=1, epoch=0, seq=0)
    produce(core, data, now_ms=NOW + 20)
    assert produce(core, data, now_ms=NOW + 99).log_append_time_ms == NOW + 20


def test_list_offsets(tmp_path):
    core = open_core(tmp_path, segment_bytes=1000)
    for i in range(10):
        produce(core, batch(2, ts=NOW + i * 100))
    assert core.list_offsets(-2) == (0, 0, -1)
    assert core.list_offsets(-4) == (0, 0, -1)
    assert core.list_offsets(-1) == (0, 20, -1)
    assert core.list_offsets(-1, isolation_level=1) == (0, 20, -1)
    assert core.list_offsets(-3) == (0, 19, NOW + 901)
    assert core.list_offsets(-5) == (0, -1, -1)
    assert core.list_offsets(NOW + 250) == (0, 6, NOW + 300)
    assert core.list_offsets(NOW + 1) == (0, 1, NOW + 1)
    assert core.list_offsets(NOW + 10_000) == (0, -1, -1)
    assert core.list_offsets(-7) == (0, -1, -1)
    core.log.high_watermark = 6  # as replication would: offsets beyond it are not visible
    assert core.list_offsets(NOW + 300) == (0, -1, -1)
    assert core.list_offsets(-1) == (0, 6, -1)
    assert core.fetch(0, 1 << 20).high_watermark == 6
    assert [h.last_offset for h in iter_batches(core.fetch(0, 1 << 20).records)] == [1, 3, 5]


def test_retention_tick_and_delete_records(tmp_path):
    core = open_core(tmp_path, segment_bytes=1000, retention_ms=10_000)
    for i in range(20):
        produce(core, batch(2, ts=NOW + i * 1000), now_ms=NOW + i * 1000)
    bases = core.log.segment_base_offsets
    deleted = core.retention_tick(NOW + 25_000)
    assert deleted and deleted == bases[:len(deleted)]
    assert core.log_start_offset == core.log.segment_base_offsets[0] > 0
    assert core.fetch(0, 100).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert core.list_offsets(-2)[1] == core.log_start_offset
    assert core.delete_records(38) == (0, 38)
    assert core.delete_records(41) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert core.delete_records(-1) == (0, 40)
    r = produce(core, batch(1), now_ms=NOW + 25_000)
    assert (r.base_offset, r.log_start_offset) == (40, 40)
    core.close()
    assert open_core(tmp_path, segment_bytes=1000).log_start_offset == 40


def test_config_from_topic_config_like_objects(tmp_path):
    class TopicConfigLike:  # shape of actors.config_schema.TopicConfig
        segment_bytes = 4096
        index_interval_bytes = 100
        retention_ms = 5
        retention_bytes = 7
        max_message_bytes = 999
        log_append_time = True
        min_insync_replicas = 1
    config = PartitionConfig.of(TopicConfigLike())
    assert (config.segment_bytes, config.max_message_bytes, config.log_append_time) == (4096, 999, True)
    assert PartitionConfig.of({"message_timestamp_type": "LogAppendTime"}).log_append_time
    assert PartitionConfig.of(None) == PartitionConfig()
    core = PartitionCore.open(tmp_path, TopicConfigLike(), now_ms=NOW)
    assert core.log.segment_bytes == 4096
    core.reconfigure({"max_message_bytes": 10})
    assert produce(core, batch(1)).error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_error_results_for_the_actor(tmp_path):
    core = open_core(tmp_path)
    r = core.error_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert (r.error_code, r.base_offset) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    f = core.fetch_error(ErrorCode.FENCED_LEADER_EPOCH)
    assert (f.error_code, f.high_watermark, f.records) == (ErrorCode.FENCED_LEADER_EPOCH, -1, b"")


def test_truncate_to_rebuilds_producer_state(tmp_path):
    core = open_core(tmp_path)
    for seq in range(4):
        produce(core, batch(1, pid=2, epoch=0, seq=seq))
    core.truncate_to(2)
    assert core.log_end_offset == 2
    assert produce(core, batch(1, pid=2, epoch=0, seq=3)).error_code == 45
    assert produce(core, batch(1, pid=2, epoch=0, seq=2)).base_offset == 2


def test_produce_fetch_throughput_report(tmp_path):
    """Prints MB/s through PartitionCore (CRC check + idempotence + append; fetch). Run with -s."""
    values = [os.urandom(1014) for _ in range(1024)]
    blobs = [build_batch([(None, v, [], NOW) for v in values], producer_id=1, producer_epoch=0,
                         base_sequence=i * 1024) for i in range(200)]  # 200 x ~1 MiB
    core = open_core(tmp_path, max_message_bytes=2 << 20, segment_bytes=256 << 20)
    t0 = time.perf_counter()
    for blob in blobs:
        assert produce(core, blob).error_code == 0
    produce_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    offset = total = 0
    while offset < core.high_watermark:
        records = core.fetch(offset, 1 << 20).records
        total += len(records)
        offset = list(iter_batches(records))[-1].last_offset + 1
    fetch_s = time.perf_counter() - t0
    mib = sum(map(len, blobs)) / (1 << 20)
    assert total == sum(map(len, blobs))
    print(f"\ncore produce: {mib / produce_s:.0f} MiB/s ({mib:.0f} MiB, {produce_s:.2f}s); "
          f"fetch: {mib / fetch_s:.0f} MiB/s ({fetch_s:.2f}s)")
    core.close()


def test_follower_appends_the_leaders_batches_unchanged_and_knows_its_producers(tmp_path):
    leader, follower = open_core(tmp_path / "leader"), open_core(tmp_path / "follower")
    produce(leader, batch(3))
    produce(leader, batch(2, pid=9, epoch=0, seq=0))
    fetched = bytes(leader.fetch(0, 1 << 20).records)
    headers = follower.append_replicated(fetched, now_ms=NOW)
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4)]
    assert follower.log_end_offset == 5
    follower.log.high_watermark = 5
    assert bytes(follower.fetch(0, 1 << 20).records) == fetched  # offsets and epochs as the leader wrote them
    # a producer's retry that reaches this replica once it leads is answered with the original offset
    retry = follower.produce(memoryview(batch(2, pid=9, epoch=0, seq=0)), now_ms=NOW, leader_epoch=8)
    assert (retry.error_code, retry.base_offset, follower.log_end_offset) == (0, 3, 5)


def test_follower_refuses_a_corrupt_replicated_batch_and_writes_nothing(tmp_path):
    leader, follower = open_core(tmp_path / "leader"), open_core(tmp_path / "follower")
    produce(leader, batch(2))
    produce(leader, batch(2))
    fetched = bytearray(leader.fetch(0, 1 << 20).records)
    fetched[-1] ^= 0xFF  # the second batch's last byte
    with pytest.raises(CorruptRecord):
        follower.append_replicated(bytes(fetched), now_ms=NOW)
    assert follower.log_end_offset == 0


def test_reset_to_starts_an_empty_log_past_the_old_end(tmp_path):
    core = open_core(tmp_path)
    produce(core, batch(3))
    core.reset_to(100)
    assert (core.log_start_offset, core.log_end_offset, core.high_watermark) == (100, 100, 100)
    core.close()
    reopened = open_core(tmp_path)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 100)
