"""ShareCoordinatorShard: the pure share-coordinator state machine (no Ray, no clock)."""

import uuid

import pytest

from actors.share_coordinator import (
    ReadResponse, ShareCoordinatorShard, StateBatch, StateResponse, combine_state_batches, decode_record,
    java_string_hash, share_coordinator_key, state_partition_for, state_partition_for_key,
)
from actors.coordinator_result import CoordinatorResult
from protocol.coordinator_records import ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue
from protocol.errors import ErrorCode

G, T, P = "grp", uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"), 0
NONE = ErrorCode.NONE


class Log:
    """A stand-in for the `__share_group_state` partition the shell appends to."""

    def __init__(self):
        self.records = []

    def append(self, shard, records):
        offsets = list(range(len(self.records), len(self.records) + len(records)))
        self.records += records
        shard.on_appended(records, offsets)
        return records

    def rebuild(self, from_offset=0, **kw):
        shard = ShareCoordinatorShard(**kw)
        for offset, (k, v) in enumerate(self.records):
            if offset >= from_offset:
                shard.replay(k, v, offset)
        return shard


def kinds(records):
    return [(type(k).__name__, None if v is None else type(v).__name__)
            for k, v in (decode_record(kb, vb) for kb, vb in records)]


def setup(limit=500, state_epoch=0, start_offset=-1):
    shard, log = ShareCoordinatorShard(snapshot_update_records_max=limit), Log()
    result = shard.initialize(G, T, P, state_epoch=state_epoch, start_offset=start_offset, now_ms=1000)
    assert result.response.error_code == NONE
    log.append(shard, result.records)
    return shard, log


def write(shard, log, *, start_offset=-1, batches=(), state_epoch=0, leader_epoch=0, count=-1, now_ms=2000):
    result = shard.write(G, T, P, state_epoch=state_epoch, leader_epoch=leader_epoch,
                         start_offset=start_offset, state_batches=list(batches),
                         delivery_complete_count=count, now_ms=now_ms)
    log.append(shard, result.records)
    return result.response.error_code, result.response.error_message, result.records


def test_initialize_then_read():
    shard, log = setup(state_epoch=3)
    assert kinds(log.records) == [("ShareSnapshotKey", "ShareSnapshotValue")]
    _, value = decode_record(*log.records[0])
    assert (value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
            value.delivery_complete_count, value.create_timestamp, value.write_timestamp,
            value.state_batches) == (0, 3, 0, -1, -1, 1000, 1000, [])
    result = shard.read(G, T, P, leader_epoch=-1)
    assert result == CoordinatorResult([], ReadResponse(NONE, None, 3, -1, ()))


def test_initialize_with_start_offset_sets_count_zero_and_retry_is_noop():
    shard, log = setup(state_epoch=1, start_offset=42)
    assert shard.read_summary(G, T, P) == (NONE, None, 1, 0, 42, 0)
    assert shard.initialize(G, T, P, state_epoch=1, start_offset=42, now_ms=5) == CoordinatorResult(
        [], StateResponse(NONE, None))


def test_reinitialize_with_new_state_epoch_replaces_state_and_bumps_snapshot_epoch():
    shard, log = setup()
    write(shard, log, start_offset=10, batches=[(10, 19, 2, 1)])
    result = shard.initialize(G, T, P, state_epoch=1, start_offset=50, now_ms=3000)
    code, recs = result.response.error_code, result.records
    log.append(shard, recs)
    st = shard.state(G, T, P)
    assert (code, st.snapshot_epoch, st.state_epoch, st.start_offset, st.state_batches) == (NONE, 1, 1, 50, ())
    fenced = shard.initialize(G, T, P, state_epoch=0, start_offset=0, now_ms=4000)
    assert fenced.response.error_code == ErrorCode.FENCED_STATE_EPOCH


def test_uninitialized_and_invalid_requests():
    shard = ShareCoordinatorShard()
    assert shard.read(G, T, P, leader_epoch=0).response.error_code == ErrorCode.INVALID_REQUEST
    assert shard.write(G, T, P, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=[],
                       now_ms=0).response.error_code == ErrorCode.INVALID_REQUEST
    assert shard.initialize(G, T, -1, state_epoch=0, start_offset=-1,
                            now_ms=0).response.error_code == ErrorCode.INVALID_REQUEST
    assert shard.initialize(G, T, 0, state_epoch=-1, start_offset=-1,
                            now_ms=0).response.error_code == ErrorCode.INVALID_REQUEST
    assert shard.delete(G, T, -1).response.error_code == ErrorCode.INVALID_REQUEST
    assert shard.read_summary(G, T, -1).error_code == ErrorCode.INVALID_REQUEST
    assert shard.states() == {}
    shard, log = setup()
    bad = [(5, 4, 0, 1)]                                   # first > last
    assert write(shard, log, batches=bad)[0] == ErrorCode.INVALID_REQUEST
    assert write(shard, log, batches=[(0, 1, 0, -1)])[0] == ErrorCode.INVALID_REQUEST
    with pytest.raises(ValueError):
        ShareCoordinatorShard(snapshot_update_records_max=501)


def test_writes_merge_into_read_state():
    shard, log = setup()
    assert write(shard, log, start_offset=0, batches=[(0, 10, 0, 1)], count=0)[0] == NONE
    write(shard, log, start_offset=0, batches=[StateBatch(11, 20, 0, 1)], count=0)
    assert shard.read(G, T, P, leader_epoch=0).response.state_batches == ((0, 20, 0, 1),)   # coalesced
    write(shard, log, batches=[(5, 7, 2, 1)], count=3)                               # ack 5..7
    result = shard.read(G, T, P, leader_epoch=0)
    assert result.response.start_offset == 0
    assert result.response.state_batches == ((0, 4, 0, 1), (5, 7, 2, 1), (8, 20, 0, 1))
    assert kinds(log.records) == [("ShareSnapshotKey", "ShareSnapshotValue")] + [("ShareUpdateKey", "ShareUpdateValue")] * 3
    assert log.rebuild().states() == shard.states()


def test_update_record_holds_only_new_batches_pruned_at_start_offset():
    shard, log = setup()
    write(shard, log, start_offset=0, batches=[(0, 9, 0, 1)])
    _, _, recs = write(shard, log, start_offset=5, batches=[(3, 12, 2, 1)], count=4)
    _, value = decode_record(*recs[0])
    assert (value.start_offset, [(b.first_offset, b.last_offset) for b in value.state_batches]) == (5, [(5, 12)])
    assert value.delivery_complete_count == 4
    assert shard.state(G, T, P).state_batches == ((5, 12, 2, 1),)


def test_higher_delivery_count_wins_regardless_of_order():
    # Kafka's combiner: per offset the highest (delivery count, state) survives, so a late write of an
    # earlier delivery cannot undo a later one.
    assert combine_state_batches([(0, 9, 0, 2)], [(3, 5, 2, 1)], -1) == ((0, 9, 0, 2),)
    assert combine_state_batches([(0, 9, 0, 1)], [(3, 5, 0, 2)], -1) == ((0, 2, 0, 1), (3, 5, 0, 2), (6, 9, 0, 1))
    assert combine_state_batches([(0, 9, 0, 1)], [(0, 9, 2, 1)], -1) == ((0, 9, 2, 1),)      # same count: state
    assert combine_state_batches([(0, 4, 2, 1)], [(5, 9, 2, 1)], 3) == ((3, 9, 2, 1),)
    assert combine_state_batches([(0, 4, 2, 1)], [], 5) == ()


def test_kafka_non_sequential_batch_updates():
    # Kafka's ShareCoordinatorShardTest.testNonSequentialBatchUpdates: b2 must survive the start offset move.
    shard, log = setup(limit=0)
    write(shard, log, start_offset=100, batches=[(100, 109, 1, 1), (110, 119, 1, 2), (120, 129, 1, 0)], count=0)
    write(shard, log, start_offset=-1, batches=[(100, 109, 2, 1)], count=10)
    write(shard, log, start_offset=110, batches=[(120, 129, 2, 1)], count=10)
    st = shard.state(G, T, P)
    assert (st.start_offset, st.delivery_complete_count, st.snapshot_epoch) == (110, 10, 3)
    assert st.state_batches == ((110, 119, 1, 2), (120, 129, 2, 1))
    assert all(k == ("ShareSnapshotKey", "ShareSnapshotValue") for k in kinds(log.records))


def test_snapshot_every_n_updates_and_replay_equality():
    n = 3
    shard, log = setup(limit=n)
    for i in range(10):
        write(shard, log, start_offset=i, batches=[(i, i + 4, 0, 1)], count=0, now_ms=2000 + i)
        assert log.rebuild(snapshot_update_records_max=n).states() == shard.states()
    snap, upd = ("ShareSnapshotKey", "ShareSnapshotValue"), ("ShareUpdateKey", "ShareUpdateValue")
    assert kinds(log.records) == [snap] + ([upd] * n + [snap]) * 2 + [upd] * 2
    last_snapshot = [v for v in (decode_record(*r)[1] for r in log.records) if isinstance(v, ShareSnapshotValue)][-1]
    assert (last_snapshot.snapshot_epoch, last_snapshot.write_timestamp, last_snapshot.start_offset) == (2, 2007, 7)
    assert [(b.first_offset, b.last_offset) for b in last_snapshot.state_batches] == [(7, 11)]
    st = shard.state(G, T, P)
    assert (st.start_offset, st.state_batches, st.updates_since_snapshot) == (9, ((9, 13, 0, 1),), 2)


def test_stale_epochs_are_fenced():
    shard, log = setup(state_epoch=2)
    log.append(shard, shard.read(G, T, P, leader_epoch=5).records)   # leader 5 records its epoch
    assert len(log.records) == 2
    assert shard.read(G, T, P, leader_epoch=5).records == []         # same epoch again: nothing
    before = shard.states()
    assert write(shard, log, leader_epoch=4, state_epoch=2, batches=[(0, 1, 2, 1)])[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert write(shard, log, leader_epoch=5, state_epoch=1, batches=[(0, 1, 2, 1)])[0] == ErrorCode.FENCED_STATE_EPOCH
    assert shard.read(G, T, P, leader_epoch=4).response.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert shard.states() == before and len(log.records) == 2
    # -1 means "not supplied" and skips the checks
    assert write(shard, log, leader_epoch=-1, state_epoch=-1, batches=[(0, 1, 2, 1)])[0] == NONE
    assert shard.state(G, T, P).leader_epoch == 5
    # a newer leader takes over through a read, fencing leader 5
    code_epoch = shard.read(G, T, P, leader_epoch=6)
    log.append(shard, code_epoch.records)
    assert write(shard, log, leader_epoch=5, state_epoch=2)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert log.rebuild().states() == shard.states()


def test_read_with_higher_leader_epoch_writes_one_record_and_returns_state():
    shard, log = setup()
    write(shard, log, start_offset=0, batches=[(0, 3, 2, 1)])
    result = shard.read(G, T, P, leader_epoch=1, now_ms=5000)
    read = result.response
    assert (read.error_code, read.start_offset, read.state_batches) == (NONE, 0, ((0, 3, 2, 1),))
    assert kinds(result.records) == [("ShareUpdateKey", "ShareUpdateValue")]
    _, value = decode_record(*result.records[0])
    assert (value.leader_epoch, value.start_offset, value.state_batches) == (1, 0, [])
    assert shard.state(G, T, P).leader_epoch == 1
    assert shard.read(G, T, P, leader_epoch=-1).records == []


def test_out_of_order_write_never_moves_start_offset_backwards():
    shard, log = setup()
    write(shard, log, start_offset=0, batches=[(0, 29, 0, 1)], count=0)
    write(shard, log, start_offset=20, batches=[(20, 24, 2, 1)], count=5)     # newer write lands first
    code, _, _ = write(shard, log, start_offset=10, batches=[(10, 14, 2, 1), (25, 26, 2, 1)], count=3)  # stale
    assert code == NONE
    st = shard.state(G, T, P)
    assert st.start_offset == 20
    assert st.delivery_complete_count == 5                       # stale count ignored
    assert st.state_batches == ((20, 26, 2, 1), (27, 29, 0, 1))  # batches below 20 dropped
    assert shard.read_summary(G, T, P).start_offset == 20
    for limit in (0, 500):                                       # same through a snapshot
        shard2, log2 = setup(limit=limit)
        write(shard2, log2, start_offset=20, count=5)
        write(shard2, log2, start_offset=10, count=3)
        assert shard2.state(G, T, P).start_offset == 20
        assert log2.rebuild(snapshot_update_records_max=limit).states() == shard2.states()
    write(shard, log, start_offset=20, count=7)                  # same start offset: the larger count
    assert shard.state(G, T, P).delivery_complete_count == 7
    write(shard, log, start_offset=20, count=6)
    assert shard.state(G, T, P).delivery_complete_count == 7
    write(shard, log, start_offset=25, count=1)                  # start moved: the request's count
    assert shard.state(G, T, P).delivery_complete_count == 1


def test_delete_writes_tombstone():
    shard, log = setup()
    write(shard, log, start_offset=0, batches=[(0, 3, 2, 1)])
    result = shard.delete(G, T, P)
    code, recs = result.response.error_code, result.records
    log.append(shard, recs)
    assert code == NONE and kinds(recs) == [("ShareSnapshotKey", None)]
    assert shard.state(G, T, P) is None
    assert shard.read(G, T, P, leader_epoch=0).response.error_code == ErrorCode.INVALID_REQUEST
    assert shard.delete(G, T, P) == CoordinatorResult([], StateResponse(NONE, None))  # again: nothing to write
    assert log.rebuild().states() == {}
    result = shard.initialize(G, T, P, state_epoch=0, start_offset=-1, now_ms=9)   # fresh again
    code, recs = result.response.error_code, result.records
    assert code == NONE and decode_record(*recs[0])[1].snapshot_epoch == 0


def test_read_summary():
    shard = ShareCoordinatorShard()
    assert shard.read_summary(G, T, P, leader_epoch=0) == (NONE, None, 0, 0, -1, -1)
    shard, log = setup(state_epoch=4)
    log.append(shard, shard.read(G, T, P, leader_epoch=2).records)
    write(shard, log, leader_epoch=2, state_epoch=4, start_offset=30, batches=[(30, 39, 2, 1)], count=10)
    n = len(log.records)
    assert shard.read_summary(G, T, P, leader_epoch=1) == (NONE, None, 4, 2, 30, 10)   # not fenced, as Kafka
    assert len(log.records) == n


def test_prunable_offset_follows_latest_snapshots():
    shard, log = ShareCoordinatorShard(snapshot_update_records_max=2), Log()
    assert shard.prunable_before_offset() == 0
    t2 = uuid.uuid4()
    log.append(shard, shard.initialize(G, T, P, state_epoch=0, start_offset=0, now_ms=0).records)    # 0
    log.append(shard, shard.initialize(G, t2, P, state_epoch=0, start_offset=0, now_ms=0).records)   # 1
    assert shard.last_snapshot_offsets() == {(G, T, P): 0, (G, t2, P): 1}
    assert shard.prunable_before_offset() == 0
    for i in range(3):                                                                     # 2, 3, 4=snapshot
        write(shard, log, start_offset=i)
    assert shard.last_snapshot_offsets()[(G, T, P)] == 4
    assert shard.prunable_before_offset() == 1                       # t2's snapshot holds the prune point
    log.append(shard, shard.delete(G, t2, P).records)                 # 5
    assert shard.prunable_before_offset() == 4
    for from_offset in (shard.prunable_before_offset(), 0):
        assert log.rebuild(from_offset, snapshot_update_records_max=2).states() == shard.states()
    log.append(shard, shard.delete(G, T, P).records)                  # 6: nothing live any more
    assert shard.prunable_before_offset() == 7


def test_cold_partition_snapshot_releases_prune_point():
    shard, log = ShareCoordinatorShard(), Log()
    t2 = uuid.uuid4()
    log.append(shard, shard.initialize(G, t2, P, state_epoch=0, start_offset=0, now_ms=0).records)     # 0, idle
    log.append(shard, shard.initialize(G, T, P, state_epoch=0, start_offset=0, now_ms=0).records)      # 1
    for i in range(5):                                                                                  # 2..6
        write(shard, log, start_offset=i, now_ms=10 * i)
    assert shard.prunable_before_offset() == 0
    assert shard.snapshot_cold_partitions(now_ms=299_999) == []
    recs = log.append(shard, shard.snapshot_cold_partitions(now_ms=300_000))                           # 7, 8
    assert [decode_record(*r)[0].topic_id for r in recs] == [t2, T]
    _, value = decode_record(*recs[0])
    assert (value.snapshot_epoch, value.create_timestamp, value.write_timestamp) == (1, 0, 300_000)
    assert shard.prunable_before_offset() == 7
    assert log.rebuild(7).states() == shard.states()
    # both idle snapshots are at the end already: rewriting them would free nothing
    assert shard.snapshot_cold_partitions(now_ms=10**9) == []


def test_cold_snapshot_only_for_idle_partitions_at_the_front():
    shard, log = ShareCoordinatorShard(snapshot_update_records_max=3), Log()
    t2 = uuid.uuid4()
    log.append(shard, shard.initialize(G, t2, P, state_epoch=0, start_offset=0, now_ms=0).records)     # idle
    log.append(shard, shard.initialize(G, T, P, state_epoch=0, start_offset=0, now_ms=0).records)
    for i in range(8):                                      # T snapshots at now_ms 400_000+
        write(shard, log, start_offset=i, now_ms=400_000 + i)
    assert shard.state(G, T, P).write_timestamp_ms >= 400_000
    recs = log.append(shard, shard.snapshot_cold_partitions(now_ms=400_010))
    assert [decode_record(*r)[0].topic_id for r in recs] == [t2]        # T is not cold
    assert shard.prunable_before_offset() == shard.last_snapshot_offsets()[(G, T, P)]
    assert log.rebuild(shard.prunable_before_offset(), snapshot_update_records_max=3).states() == shard.states()


def test_replay_without_offsets_pins_prune_point():
    shard, log = setup()
    write(shard, log, start_offset=3, batches=[(3, 4, 2, 1)])
    rebuilt = ShareCoordinatorShard()
    for k, v in log.records:
        rebuilt.replay(k, v)
    assert rebuilt.states() == shard.states()
    assert rebuilt.prunable_before_offset() == 0


def test_replay_of_update_without_snapshot_and_snapshot_replaces():
    shard = ShareCoordinatorShard()
    from actors.share_coordinator import encode_record
    upd = ShareUpdateValue(snapshot_epoch=0, leader_epoch=3, start_offset=5, delivery_complete_count=1,
                           state_batches=[ShareUpdateValue.StateBatch(first_offset=5, last_offset=6,
                                                                      delivery_state=2, delivery_count=1)])
    shard.replay(*encode_record(ShareUpdateKey(group_id=G, topic_id=T, partition=P), upd))
    assert shard.state(G, T, P).state_batches == ((5, 6, 2, 1),)
    snap = ShareSnapshotValue(snapshot_epoch=1, state_epoch=2, leader_epoch=1, start_offset=9, state_batches=[],
                              create_timestamp=1, write_timestamp=1)
    shard.replay(*encode_record(ShareSnapshotKey(group_id=G, topic_id=T, partition=P), snap))
    st = shard.state(G, T, P)
    assert (st.start_offset, st.state_batches, st.state_epoch, st.leader_epoch) == (9, (), 2, 3)


def test_state_partition_for_uses_kafkas_key_and_hash():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2**31            # Utils.abs(MIN_VALUE) -> 0
    assert state_partition_for_key("polygenelubricants", 7) == 0
    assert share_coordinator_key("g", uuid.UUID(int=0), 3) == "g:AAAAAAAAAAAAAAAAAAAAAA:3"
    key = share_coordinator_key(G, T, 5)
    h = java_string_hash(key)
    assert state_partition_for(G, T, 5, 50) == abs(h) % 50
    assert {state_partition_for(G, T, p, 50) for p in range(200)} == set(range(50))


def test_write_accepts_generated_request_batches():
    from protocol.messages import WriteShareGroupStateRequest
    shard, log = setup()
    wire = [WriteShareGroupStateRequest.StateBatch(first_offset=0, last_offset=4, delivery_state=2, delivery_count=1)]
    assert write(shard, log, start_offset=0, batches=wire)[0] == NONE
    assert shard.state(G, T, P).state_batches == ((0, 4, 2, 1),)
