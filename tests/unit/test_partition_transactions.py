"""The partition log's side of transactions (KIP-98): transactional batches, COMMIT/ABORT markers,
the last stable offset, the aborted-transaction index, read_committed fetch/ListOffsets, restart
recovery and follower consistency. Pure: PartitionCore on a temporary directory, no Ray."""

from actors.partition.control_records import build_marker_batch, read_marker
from actors.partition.core import READ_COMMITTED, READ_UNCOMMITTED, PartitionConfig, PartitionCore
from actors.partition.txn_index import TXN_INDEX_SUFFIX
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch, decode_records, iter_batches

NOW = 1_700_000_000_000
LATEST = -1


def txn_batch(pid, seq, n=1, *, epoch=0, transactional=True, value=b"v"):
    return build_batch([(b"k", value, [], NOW + i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=transactional)


def open_core(path, **config):
    return PartitionCore.open(path, PartitionConfig(**config), now_ms=NOW)


def produce(core, data):
    r = core.produce(memoryview(data), now_ms=NOW, leader_epoch=3)
    core.log.high_watermark = core.log_end_offset
    return r


def marker(core, pid, committed, *, epoch=0, coordinator_epoch=0):
    r = core.append_marker(pid, epoch, coordinator_epoch, committed, now_ms=NOW, leader_epoch=3)
    core.log.high_watermark = core.log_end_offset
    return r


def values(records) -> list:
    """What a read_committed-unaware reader decodes: every data record's (offset, value)."""
    out = []
    for h in iter_batches(memoryview(bytes(records))):
        if not h.is_control:
            out += [(r.offset, r.value) for r in decode_records(h)]
    return out


def test_open_transaction_holds_the_last_stable_offset_until_its_marker(tmp_path):
    core = open_core(tmp_path)
    produce(core, build_batch([(b"k", b"plain", [], NOW)]))          # offset 0
    assert produce(core, txn_batch(7, 0, 2)).base_offset == 1         # offsets 1-2, transaction opens at 1
    produce(core, build_batch([(b"k", b"after", [], NOW)]))          # offset 3
    assert core.high_watermark == 4 and core.last_stable_offset == 1
    f = core.fetch(0, 1 << 20, isolation_level=READ_COMMITTED)
    assert values(f.records) == [(0, b"plain")] and f.last_stable_offset == 1 and f.aborted_transactions == []
    assert values(core.fetch(0, 1 << 20).records) == [(0, b"plain"), (1, b"v"), (2, b"v"), (3, b"after")]
    assert core.fetch(0, 1 << 20).aborted_transactions is None
    assert core.list_offsets(LATEST, isolation_level=READ_COMMITTED)[1] == 1
    assert core.list_offsets(LATEST, isolation_level=READ_UNCOMMITTED)[1] == 4
    r = marker(core, 7, committed=True)
    assert (r.error_code, r.base_offset) == (0, 4)
    assert core.last_stable_offset == 5
    f = core.fetch(1, 1 << 20, isolation_level=READ_COMMITTED)
    assert [o for o, _ in values(f.records)] == [1, 2, 3] and f.aborted_transactions == []
    control = [h for h in iter_batches(memoryview(bytes(f.records))) if h.is_control]
    assert len(control) == 1 and read_marker(control[0]) == (True, 0)   # clients get the marker, and skip it


def test_marker_below_the_high_watermark_only_frees_the_last_stable_offset(tmp_path):
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0))
    core.append_marker(7, 0, 0, True, now_ms=NOW, leader_epoch=3)   # not replicated yet: HW stays at 1
    core.log.high_watermark = 1
    assert core.last_stable_offset == 0
    core.log.high_watermark = 2
    assert core.last_stable_offset == 2


def test_aborted_transactions_are_indexed_and_returned_to_read_committed_fetches(tmp_path):
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0, 2))      # 0-1, pid 7 (aborted later)
    produce(core, txn_batch(8, 0))         # 2, pid 8 (committed later)
    marker(core, 7, committed=False)       # 3
    assert core.last_stable_offset == 2    # pid 8 still open
    marker(core, 8, committed=True)        # 4
    assert core.last_stable_offset == 5
    f = core.fetch(0, 1 << 20, isolation_level=READ_COMMITTED)
    assert f.aborted_transactions == [(7, 0)]
    entries = core.log.collect_aborted_txns(0, 5)
    assert [tuple(e) for e in entries] == [(7, 0, 3, 2)]   # LSO at abort: pid 8's first offset
    assert core.fetch(4, 1 << 20, isolation_level=READ_COMMITTED).aborted_transactions == []
    assert (tmp_path / f"{0:020d}{TXN_INDEX_SUFFIX}").stat().st_size == 34


def test_producer_epoch_and_coordinator_epoch_fencing(tmp_path):
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0, epoch=1))
    assert marker(core, 7, True, epoch=0).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert marker(core, 7, False, epoch=2, coordinator_epoch=5).error_code == 0   # fencing abort, bumped epoch
    # a zombie of epoch 1 writing after the fence
    assert produce(core, txn_batch(7, 1, epoch=1)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert marker(core, 7, True, epoch=2, coordinator_epoch=4).error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert produce(core, txn_batch(7, 0, epoch=2)).error_code == 0   # the new epoch starts at sequence 0
    assert core.last_stable_offset == 2


def test_plain_write_of_a_producer_with_an_open_transaction_is_refused(tmp_path):
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0))
    r = produce(core, txn_batch(7, 1, transactional=False))
    assert r.error_code == ErrorCode.INVALID_TXN_STATE
    marker(core, 7, True)
    assert produce(core, txn_batch(7, 1, transactional=False)).error_code == 0


def test_clients_may_not_write_control_batches_or_transactional_batches_without_a_producer(tmp_path):
    core = open_core(tmp_path)
    assert produce(core, build_marker_batch(7, 0, 0, True, NOW)).error_code == ErrorCode.INVALID_RECORD
    anonymous = build_batch([(b"k", b"v", [], NOW)], is_transactional=True)
    assert produce(core, anonymous).error_code == ErrorCode.INVALID_RECORD


def test_duplicate_transactional_batch_answers_its_first_offset(tmp_path):
    core = open_core(tmp_path)
    first = produce(core, txn_batch(7, 0, 3))
    again = produce(core, txn_batch(7, 0, 3))
    assert (again.error_code, again.base_offset) == (0, first.base_offset) and core.log_end_offset == 3


def test_restart_keeps_open_transactions_and_the_abort_index(tmp_path):
    core = open_core(tmp_path, segment_bytes=300)
    produce(core, txn_batch(7, 0, 2))      # 0-1
    produce(core, txn_batch(8, 0))         # 2
    marker(core, 7, committed=False)       # 3
    produce(core, txn_batch(8, 1))         # 4 (pid 8 still open)
    core.close()
    core = open_core(tmp_path, segment_bytes=300)
    core.log.high_watermark = core.log_end_offset
    assert core.producers.ongoing_transactions == {8: 2} and core.last_stable_offset == 2
    assert core.fetch(0, 1 << 20, isolation_level=READ_COMMITTED).aborted_transactions == [(7, 0)]
    assert produce(core, txn_batch(8, 2, transactional=False)).error_code == ErrorCode.INVALID_TXN_STATE
    marker(core, 8, committed=True)
    assert core.last_stable_offset == core.log_end_offset


def test_unclean_restart_rebuilds_a_lost_abort_index_from_the_log(tmp_path):
    core = open_core(tmp_path, segment_bytes=200)
    for i in range(3):
        produce(core, txn_batch(7, i))
        marker(core, 7, committed=False)
    produce(core, txn_batch(9, 0))         # open
    expected = [tuple(e) for e in core.log.collect_aborted_txns(0, core.log_end_offset)]
    assert len(expected) == 3 and len(core.log.segment_base_offsets) > 1
    core.log.flush()
    for index in tmp_path.glob("*" + TXN_INDEX_SUFFIX):   # lost in the crash, with the snapshots
        index.unlink()
    for snapshot in tmp_path.glob("*.snapshot"):
        snapshot.unlink()
    core = open_core(tmp_path, segment_bytes=200)          # no close(): unclean
    core.log.high_watermark = core.log_end_offset
    assert [tuple(e) for e in core.log.collect_aborted_txns(0, core.log_end_offset)] == expected
    assert core.producers.ongoing_transactions == {9: 6}
    assert core.last_stable_offset == 6


def test_follower_derives_the_same_state_from_the_batches_it_appends(tmp_path):
    leader = open_core(tmp_path / "leader")
    follower = open_core(tmp_path / "follower")
    produce(leader, txn_batch(7, 0, 2))
    produce(leader, txn_batch(8, 0))
    marker(leader, 7, committed=False, coordinator_epoch=4)
    produce(leader, build_batch([(b"k", b"plain", [], NOW)]))
    follower.append_replicated(leader.log.read(0, 1 << 20), now_ms=NOW)
    follower.log.high_watermark = follower.log_end_offset
    assert follower.producers.ongoing_transactions == leader.producers.ongoing_transactions == {8: 2}
    assert follower.last_stable_offset == leader.last_stable_offset == 2
    assert ([tuple(e) for e in follower.log.collect_aborted_txns(0, 5)]
            == [tuple(e) for e in leader.log.collect_aborted_txns(0, 5)] == [(7, 0, 3, 2)])
    # the follower, become leader, fences an older coordinator as its leader would have
    assert follower.append_marker(7, 0, 3, True, now_ms=NOW, leader_epoch=4).error_code == \
        ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_truncation_forgets_markers_and_aborts_past_the_cut(tmp_path):
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0))         # 0
    marker(core, 7, committed=False)       # 1
    core.truncate_to(1, now_ms=NOW)
    core.log.high_watermark = core.log_end_offset
    assert core.producers.ongoing_transactions == {7: 0} and core.last_stable_offset == 0
    assert core.log.collect_aborted_txns(0, 10) == []


def test_delete_records_inside_a_transaction_keeps_read_committed_whole(tmp_path):
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0))         # 0
    produce(core, build_batch([(b"k", b"plain", [], NOW)]))   # 1
    produce(core, txn_batch(7, 1))         # 2
    marker(core, 7, committed=False)       # 3
    assert core.delete_records(2) == (0, 2)
    assert core.last_stable_offset == 4
    f = core.fetch(2, 1 << 20, isolation_level=READ_COMMITTED)
    assert f.aborted_transactions == [(7, 0)]   # the reader still drops the rest of the aborted transaction


def test_delete_records_past_an_open_transaction_start_keeps_the_lso_at_the_log_start(tmp_path):
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0))         # 0, open
    produce(core, build_batch([(b"k", b"plain", [], NOW)]))   # 1
    assert core.delete_records(1) == (0, 1)
    assert core.last_stable_offset == 1
    assert core.list_offsets(LATEST, isolation_level=READ_COMMITTED)[1] == 1


def test_snapshot_round_trip_keeps_transactions():
    from actors.partition.producer_state import ProducerStateTable
    table = ProducerStateTable()
    table.record(7, 0, 0, 0, 10, 10, NOW, transactional=True)
    table.record_marker(8, 1, 6, False, 11, NOW)
    copy = ProducerStateTable.from_bytes(table.to_bytes())
    assert copy.ongoing_transactions == {7: 10}
    assert copy.entry(8).coordinator_epoch == 6
    assert copy.check_marker(8, 1, 5).error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_open_transactions_are_neither_expired_nor_evicted():
    from actors.partition.producer_state import ProducerStateTable
    table = ProducerStateTable(max_producer_ids=2)
    table.record(7, 0, 0, 0, 0, 0, NOW, transactional=True)   # least recently written, but open
    table.record(8, 0, 0, 0, 1, 1, NOW)
    table.record(9, 0, 0, 0, 2, 2, NOW)
    assert table.entry(8) is None and table.entry(7) is not None and table.entry(9) is not None
    table.expire(NOW + 10**9, 1)
    assert table.ongoing_transactions == {7: 0}


def test_read_committed_reader_skips_markers_and_aborted_batches_only(tmp_path):
    from actors.partition.core import skipped_by_read_committed
    core = open_core(tmp_path)
    produce(core, txn_batch(7, 0, 2))                          # 0-1 aborted
    produce(core, txn_batch(8, 0))                             # 2 committed
    produce(core, build_batch([(b"k", b"plain", [], NOW)]))    # 3
    produce(core, txn_batch(7, 2))                             # 4 aborted
    marker(core, 7, committed=False)                           # 5
    marker(core, 8, committed=True)                            # 6
    produce(core, txn_batch(9, 0))                             # 7, open
    upper = core.last_stable_offset
    assert upper == 7
    where, spans = core.log.slice_spans(0, 1 << 20, max_offset=upper)
    skipped = skipped_by_read_committed(core.log.headers_in(0, where), core.log.collect_aborted_txns(0, upper))
    assert skipped == [(0, 1), (4, 6)]   # aborted data, then its marker and the commit marker


def test_coordinator_replay_skips_transaction_markers(tmp_path):
    """An internal partition that gets markers (e.g. __consumer_offsets under TxnOffsetCommit)
    still replays: a coordinator reads its own records, never a marker as one."""
    import asyncio
    from actors.coordinator_log import CoordinatorLog
    core = open_core(tmp_path)
    produce(core, build_batch([(b"key-1", b"value-1", [], NOW)]))
    marker(core, 7, committed=True)
    produce(core, build_batch([(b"key-2", b"value-2", [], NOW)]))

    class Partition:
        async def await_committed(self, timeout_ms):
            return True

        async def fetch(self, offset, max_bytes, leader_epoch, isolation_level):
            return core.fetch(offset, max_bytes, isolation_level=isolation_level)

    assert asyncio.run(CoordinatorLog(Partition()).replay()) == [(0, b"key-1", b"value-1"), (2, b"key-2", b"value-2")]
