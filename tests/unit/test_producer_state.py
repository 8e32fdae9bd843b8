from actors.partition.producer_state import (
    INT32_MAX, INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, Action, ProducerStateTable,
    delete_snapshots_above, list_snapshots, load_latest_snapshot, snapshot_path, write_snapshot,
)


def append(table, pid, epoch, first_seq, count, offset, ts=1000):
    verdict = table.check(pid, epoch, first_seq, (first_seq + count - 1) % (INT32_MAX + 1))
    if verdict.action == Action.APPEND:
        table.record(pid, epoch, first_seq, (first_seq + count - 1) % (INT32_MAX + 1),
                     offset, offset + count - 1, ts)
    return verdict


def test_unknown_producer_accepted_with_any_sequence():
    table = ProducerStateTable()
    assert append(table, 1, 0, 0, 5, 0).action == Action.APPEND
    assert append(table, 2, 3, 17, 1, 5).action == Action.APPEND  # KIP-360: no UNKNOWN_PRODUCER_ID
    assert table.entry(2).last_seq == 17


def test_in_sequence_gap_and_duplicates():
    table = ProducerStateTable()
    offset = 0
    for i in range(7):  # 7 batches of 2 records: seqs 0-1, 2-3, ..., 12-13
        assert append(table, 9, 0, 2 * i, 2, offset).action == Action.APPEND
        offset += 2
    assert len(table.entry(9).batches) == 5
    # retry of the last batch and of the oldest cached batch: duplicates with original offsets
    for first_seq, first_offset in ((12, 12), (4, 4)):
        verdict = table.check(9, 0, first_seq, first_seq + 1)
        assert verdict.action == Action.DUPLICATE
        assert (verdict.duplicate.first_offset, verdict.duplicate.last_offset) == (first_offset, first_offset + 1)
    # older than the 5 cached batches: not a duplicate any more, out of order
    assert table.check(9, 0, 2, 3).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    # same first seq but different last seq is not a duplicate
    assert table.check(9, 0, 12, 14).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    # a gap
    verdict = table.check(9, 0, 15, 15)
    assert verdict.action == Action.REJECT and verdict.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check(9, 0, 14, 20).action == Action.APPEND


def test_epochs():
    table = ProducerStateTable()
    append(table, 5, 3, 0, 10, 0)
    verdict = table.check(5, 2, 10, 10)
    assert verdict.action == Action.REJECT and verdict.error_code == INVALID_PRODUCER_EPOCH
    # a duplicate needs the same epoch too
    assert table.check(5, 2, 0, 9).error_code == INVALID_PRODUCER_EPOCH
    # new epoch must start at 0
    assert table.check(5, 4, 10, 10).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(table, 5, 4, 0, 1, 10).action == Action.APPEND
    entry = table.entry(5)
    assert entry.producer_epoch == 4 and len(entry.batches) == 1
    assert table.check(5, 3, 10, 10).error_code == INVALID_PRODUCER_EPOCH
    assert table.check(5, 4, 0, 0).action == Action.DUPLICATE


def test_sequence_wraps_at_int32_max():
    table = ProducerStateTable()
    append(table, 1, 0, INT32_MAX - 1, 2, 0)  # MAX-1, MAX
    assert table.check(1, 0, 1, 1).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(table, 1, 0, 0, 3, 2).action == Action.APPEND
    assert table.check(1, 0, 3, 3).action == Action.APPEND
    table2 = ProducerStateTable()
    append(table2, 1, 0, INT32_MAX, 3, 0)  # MAX, 0, 1
    assert table2.entry(1).last_seq == 1
    assert table2.check(1, 0, 2, 2).action == Action.APPEND
    assert table2.check(1, 0, INT32_MAX, 1).action == Action.DUPLICATE


def test_expiry_and_limit():
    table = ProducerStateTable(max_producer_ids=3)
    for pid in range(4):
        append(table, pid, 0, 0, 1, pid, ts=1000 + pid)
    assert len(table) == 3 and table.entry(0) is None  # least recently written evicted
    append(table, 1, 0, 1, 1, 10, ts=5000)  # producer 1 written again: now most recent
    append(table, 4, 0, 0, 1, 11, ts=5000)
    assert table.entry(2) is None and table.entry(1) is not None
    assert table.expire(now_ms=1003 + 86_400_000, expiration_ms=86_400_000) == 1  # producer 3
    assert sorted(pid for pid in (1, 3, 4) if table.entry(pid)) == [1, 4]


def test_snapshot_round_trip_and_corruption(tmp_path):
    table = ProducerStateTable()
    for pid in range(3):
        for i in range(7):
            append(table, pid, pid, i, 1, pid * 100 + i, ts=i)
    write_snapshot(tmp_path, 50, table)
    write_snapshot(tmp_path, 80, table)
    write_snapshot(tmp_path, 120, table)
    assert list_snapshots(tmp_path) == [80, 120]  # only the newest two kept
    offset, loaded = load_latest_snapshot(tmp_path, 100)
    assert offset == 80
    for pid in range(3):
        a, b = table.entry(pid), loaded.entry(pid)
        assert (a.producer_epoch, list(a.batches), a.last_timestamp_ms) == (b.producer_epoch, list(b.batches), b.last_timestamp_ms)
    assert loaded.check(2, 2, 6, 6).action == Action.DUPLICATE
    data = bytearray(snapshot_path(tmp_path, 120).read_bytes())
    data[10] ^= 1
    snapshot_path(tmp_path, 120).write_bytes(bytes(data))
    assert load_latest_snapshot(tmp_path, 1000)[0] == 80  # corrupt one skipped and removed
    assert list_snapshots(tmp_path) == [80]
    delete_snapshots_above(tmp_path, 79)
    assert load_latest_snapshot(tmp_path, 1000) is None
