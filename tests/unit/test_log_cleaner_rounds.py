"""A compacted partition's cleaning rounds on disk: PartitionCore + Log (plan, build, swap), what
a consumer reads afterwards, restarts, and a crash at each step of the swap."""
from __future__ import annotations

import os
import shutil

from actors.partition.core import PartitionConfig, PartitionCore
from actors.partition.log import CLEANING_DIR, SWAP_DIR, build_cleaned
from protocol.errors import ErrorCode
from protocol.record_batch import COMPRESSION_ZSTD, build_batch, decode_records, iter_batches

NOW = 1_700_000_000_000
KEYS = 5


def open_core(path, **config):
    config = {"cleanup_policy": "compact", "segment_bytes": 2000, "min_cleanable_dirty_ratio": 0.5} | config
    return PartitionCore.open(path, PartitionConfig(**config), now_ms=NOW)


def produce(core, records, **kw):
    rows = [(None if k is None else k.encode(), None if v is None else v.encode(), [], NOW) for k, v in records]
    result = core.produce(memoryview(build_batch(rows, **kw)), now_ms=NOW, leader_epoch=1)
    core.log.high_watermark = core.log_end_offset
    return result


def read_all(core):
    out, offset = [], core.log_start_offset
    while offset < core.log_end_offset:
        data = core.fetch(offset, 1 << 20).records
        data = data if isinstance(data, (bytes, bytearray)) else bytes(data)
        if not data:
            break
        for header in iter_batches(memoryview(data)):
            for r in decode_records(header):
                if r.offset >= offset:
                    out.append((r.offset, r.key.decode() if r.key else None, r.value and r.value.decode()))
            offset = header.next_offset
    return out


def fill(core, rounds=60):
    """Many updates to few keys: the latest value of key i is (rounds-1)-i."""
    for n in range(rounds):
        produce(core, [(f"k{n % KEYS}", f"{n}-" + "x" * 40)])
    produce(core, [("tail", "t")])   # in the active segment, never cleaned


def one_round(core, now=NOW):
    dirt = core.cleanable(now)
    assert dirt is not None and dirt.due(core.config.min_cleanable_dirty_ratio)
    result = build_cleaned(core.plan_cleaning(dirt, now_ms=now, io_max_bytes_per_second=1e308))
    assert result is not None
    return result


def latest(rows):
    by_key = {}
    for offset, key, value in rows:
        by_key[key] = (offset, key, value)
    return sorted(by_key.values())


def test_a_round_keeps_the_latest_value_per_key_at_its_offset(tmp_path):
    core = open_core(tmp_path)
    fill(core)
    before = read_all(core)
    assert len(core.log.segment_base_offsets) > 3
    result = one_round(core)
    assert core.swap_cleaned(result)
    after = read_all(core)
    active = core.log.active_segment_base_offset
    cleaned = [r for r in after if r[0] < active]
    # each key once below the active segment, at its original offset, with its latest value there
    assert cleaned == latest([r for r in before if r[0] < active])
    assert [r for r in after if r[0] >= active] == [r for r in before if r[0] >= active]
    assert core.log.size_bytes < sum(1 for _ in before) * 100
    # nothing dirty is left: no second round is due
    assert not core.cleanable(NOW).due(0.5)
    # produce and fetch go on; a restart reads the same
    produce(core, [("k0", "new")])
    expected = read_all(core)
    core.close()
    again = open_core(tmp_path)
    assert read_all(again) == expected
    again.close()
    # an unclean restart (no clean-shutdown marker: every segment is checked) too
    os.unlink(tmp_path / ".kray_cleanshutdown")
    third = open_core(tmp_path)
    assert read_all(third) == expected


def test_a_fetch_slice_of_a_replaced_segment_names_no_file_any_more(tmp_path):
    core = open_core(tmp_path)
    fill(core)
    stale = core.fetch_slice(0, 1 << 20).records
    assert os.path.exists(stale.path)
    assert core.swap_cleaned(one_round(core))
    assert not os.path.exists(stale.path)          # the gateway asks again instead of reading other bytes
    fresh = core.fetch_slice(0, 1 << 20).records
    assert fresh.path != stale.path and os.path.exists(fresh.path)


def test_a_crash_before_the_commit_leaves_the_old_segments(tmp_path):
    core = open_core(tmp_path)
    fill(core)
    before = read_all(core)
    result = one_round(core)
    core.close()
    # the round's directory as it was before its rename (the commit point)
    os.replace(tmp_path / SWAP_DIR, tmp_path / CLEANING_DIR)
    reopened = open_core(tmp_path)
    assert read_all(reopened) == before
    assert not (tmp_path / CLEANING_DIR).exists()
    assert result.replaced


def test_a_crash_after_the_commit_finishes_the_swap_at_open(tmp_path):
    core = open_core(tmp_path)
    fill(core)
    before = read_all(core)
    active = core.log.active_segment_base_offset
    one_round(core)                       # committed (SWAP_DIR), never swapped in: the process died
    core.close()
    # and half the new files had already moved in
    moved = sorted(p for p in (tmp_path / SWAP_DIR).iterdir() if p.name.endswith(".log"))[:1]
    for path in moved:
        shutil.move(path, tmp_path / path.name)
    reopened = open_core(tmp_path)
    after = read_all(reopened)
    assert [r for r in after if r[0] < active] == latest([r for r in before if r[0] < active])
    assert not (tmp_path / SWAP_DIR).exists()


def test_a_round_is_dropped_when_retention_deleted_a_segment_meanwhile(tmp_path):
    core = open_core(tmp_path, cleanup_policy="compact,delete", retention_bytes=3000)
    fill(core)
    before = read_all(core)
    result = one_round(core)
    core.retention_tick(NOW)              # deletes the oldest segments under the round
    kept = read_all(core)
    assert kept != before
    assert not core.swap_cleaned(result)
    assert read_all(core) == kept and not (tmp_path / SWAP_DIR).exists()


def test_tombstones_go_after_delete_retention_ms(tmp_path):
    core = open_core(tmp_path, delete_retention_ms=1000)
    fill(core)
    produce(core, [("k1", None)])         # delete k1
    for n in range(30):                   # roll past it
        produce(core, [(f"k{2 + n % 3}", "y" * 60)])
    assert core.swap_cleaned(one_round(core, NOW))
    active = core.log.active_segment_base_offset
    rows = [r for r in read_all(core) if r[0] < active]
    assert [r for r in rows if r[1] == "k1"] == [r for r in rows if r[1] == "k1" and r[2] is None] != []
    # the next round past the horizon drops the tombstone (dirt: more updates, rolled)
    for n in range(30):
        produce(core, [(f"k{2 + n % 3}", "z" * 60)])
    assert core.swap_cleaned(one_round(core, NOW + 1000))
    active = core.log.active_segment_base_offset
    assert [r for r in read_all(core) if r[0] < active and r[1] == "k1"] == []


def test_compressed_batches_survive_a_round(tmp_path):
    core = open_core(tmp_path)
    for n in range(30):
        produce(core, [(f"k{i}", f"{n}-{i}-" + "c" * 30) for i in range(4)], compression=COMPRESSION_ZSTD)
    produce(core, [("tail", "t")])
    before = read_all(core)
    assert core.swap_cleaned(one_round(core))
    active = core.log.active_segment_base_offset
    assert [r for r in read_all(core) if r[0] < active] == latest([r for r in before if r[0] < active])
    data = core.fetch(0, 1 << 20).records
    assert all(h.compression == COMPRESSION_ZSTD for h in iter_batches(memoryview(bytes(data))) if h.records_count)


def test_a_compacted_topic_refuses_records_without_a_key_per_record(tmp_path):
    core = open_core(tmp_path)
    r = produce(core, [("a", "1"), (None, "2"), ("b", "3"), (None, "4")])
    assert r.error_code == ErrorCode.INVALID_RECORD
    assert [index for index, _ in r.record_errors] == [1, 3]
    assert core.log_end_offset == 0       # nothing of the batch was written
    assert produce(core, [("a", "1")]).error_code == ErrorCode.NONE
    # a topic that deletes takes them
    other = PartitionCore.open(tmp_path / "d", PartitionConfig(), now_ms=NOW)
    assert other.produce(memoryview(build_batch([(None, b"v", [], NOW)])), now_ms=NOW,
                         leader_epoch=1).error_code == ErrorCode.NONE
    assert other.cleanable(NOW) is None


def test_a_follower_copies_a_cleaned_log_with_its_gaps_and_recovers_it(tmp_path):
    leader = open_core(tmp_path / "leader")
    fill(leader)
    assert leader.swap_cleaned(one_round(leader))
    follower = open_core(tmp_path / "follower")
    offset = 0
    while offset < leader.log_end_offset:
        data = bytes(leader.fetch(offset, 1 << 20).records)
        headers = follower.append_replicated(memoryview(data), now_ms=NOW)
        offset = headers[-1].next_offset
    follower.log.high_watermark = follower.log_end_offset
    expected = read_all(leader)
    assert read_all(follower) == expected and follower.log_end_offset == leader.log_end_offset
    follower.close()
    os.unlink(tmp_path / "follower" / ".kray_cleanshutdown")   # unclean: every segment is checked
    assert read_all(open_core(tmp_path / "follower")) == expected


def test_a_truncation_below_the_cleaned_offset_makes_what_follows_dirty_again(tmp_path):
    core = open_core(tmp_path)
    fill(core)
    assert core.swap_cleaned(one_round(core))
    cleaned_to = core.cleanable(NOW).first_dirty_offset
    core.truncate_to(cleaned_to - 10, now_ms=NOW)
    assert core.cleanable(NOW).first_dirty_offset <= cleaned_to - 10


def test_a_round_stops_at_the_last_stable_offset_and_drops_aborted_data(tmp_path):
    core = open_core(tmp_path)
    for n in range(20):
        produce(core, [(f"k{n % KEYS}", f"{n}-" + "x" * 40)])
    # producer 9's transaction is aborted, producer 8's stays open across later segments
    produce(core, [("k0", "aborted" + "a" * 40)], producer_id=9, producer_epoch=0, base_sequence=0,
            is_transactional=True)
    assert core.append_marker(9, 0, 0, False, now_ms=NOW, leader_epoch=1).error_code == 0
    core.log.high_watermark = core.log_end_offset
    core.log.roll(now_ms=NOW)             # (only whole segments below the last stable offset are cleaned)
    open_at = produce(core, [("k1", "open" + "o" * 40)], producer_id=8, producer_epoch=0, base_sequence=0,
                      is_transactional=True).base_offset
    for n in range(40):
        produce(core, [(f"k{n % KEYS}", f"late-{n}-" + "y" * 40)])
    assert core.last_stable_offset == open_at
    before = read_all(core)
    assert core.swap_cleaned(one_round(core))
    after = read_all(core)
    # everything from the last stable offset on is as it was, duplicates and all
    assert [r for r in after if r[0] >= open_at] == [r for r in before if r[0] >= open_at]
    # below it: the aborted record is gone and each key appears once
    below = [r for r in after if r[0] < open_at]
    assert not [r for r in below if r[2].startswith("aborted")]
    assert len({r[1] for r in below}) == len(below)


def test_max_compaction_lag_rolls_the_active_segment_so_it_can_be_cleaned(tmp_path):
    core = open_core(tmp_path, segment_bytes=1 << 20, max_compaction_lag_ms=1000)
    rows = [(b"k", b"1", [], NOW)]
    core.produce(memoryview(build_batch(rows)), now_ms=NOW, leader_epoch=1)
    core.produce(memoryview(build_batch([(b"k", b"2", [], NOW + 500)])), now_ms=NOW + 500, leader_epoch=1)
    assert len(core.log.segment_base_offsets) == 1
    core.produce(memoryview(build_batch([(b"k", b"3", [], NOW + 2000)])), now_ms=NOW + 2000, leader_epoch=1)
    assert core.log.segment_base_offsets == [0, 2]
    core.log.high_watermark = core.log_end_offset
    dirt = core.cleanable(NOW + 2000)
    assert dirt.max_lag_due and dirt.due(0.99)
    # a topic that does not compact keeps segment.ms
    plain = PartitionCore.open(tmp_path / "plain", PartitionConfig(max_compaction_lag_ms=1000), now_ms=NOW)
    for t in (NOW, NOW + 2000):
        plain.produce(memoryview(build_batch([(b"k", b"v", [], t)])), now_ms=t, leader_epoch=1)
    assert plain.log.segment_base_offsets == [0]


def test_a_committed_round_is_void_after_a_truncation_or_a_deleted_segment(tmp_path):
    core = open_core(tmp_path)
    fill(core)
    one_round(core)                       # committed, not swapped in
    core.truncate_to(core.log.segment_base_offsets[2], now_ms=NOW)
    assert not (tmp_path / SWAP_DIR).exists()
    expected = read_all(core)
    core.close()
    assert read_all(open_core(tmp_path)) == expected
    # a replaced segment deleted while the process was down: the round is dropped at open
    other = open_core(tmp_path / "b")
    fill(other)
    one_round(other)
    first = other.log.segment_base_offsets[0]
    other.close()
    for path in (tmp_path / "b").glob(f"{first:020d}.*"):
        path.unlink()
    reopened = open_core(tmp_path / "b")
    assert not (tmp_path / "b" / SWAP_DIR).exists()
    assert reopened.log.segment_base_offsets[0] != first
