"""Transactional offset commits (TxnOffsetCommit, issue 19): offsets pending per producer id until the transaction's
marker reaches the group's __consumer_offsets partition, as Kafka's OffsetMetadataManager keeps them; the group's
checks; replay of the transactional records and markers; the coordinator log's transactional batches (pure cores and
a real partition core, no Ray)."""
import asyncio
import time

import pytest

from actors.coordinator_log import CoordinatorLog, CoordinatorLogError, TxnMarker, TxnWrite
from actors.group_coordinator import classic_records as crec
from actors.group_coordinator.classic import COMPLETING_REBALANCE
from actors.group_coordinator.classic_records import OffsetCommitValue
from actors.group_coordinator.groups import CLASSIC, Groups
from actors.group_coordinator.offsets import OffsetStore
from protocol.errors import ErrorCode
from protocol.record_batch import iter_batches
from tests.unit.test_groups_namespace import Harness
from tests.unit.test_partition_transactions import marker, open_core

PID, OTHER_PID = 4000, 4001
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT


def commit(store, group_id, partitions, now_ms):
    """A plain OffsetCommit as the group shard makes it: the store's records, applied (replay's path)."""
    errors, records = store.commit(group_id, partitions, now_ms)
    store.apply(records)
    return errors, records


def committed(store, group="g", topic="in", partition=0):
    [(_, _, value)] = store.fetch(group, [(topic, [partition])])
    return None if value is None else value.offset


# ---- the offset store ----------------------------------------------------------------------------------------------

def test_pending_offsets_are_invisible_until_the_commit_marker():
    store = OffsetStore()
    commit(store, "g", [("in", 0, 5, -1, "")], now_ms=1)
    errors, records = store.commit_transactional("g", PID, [("in", 0, 10, 2, "m"), ("in", 1, 7, -1, None)], now_ms=2)
    assert errors == [0, 0]
    assert [crec.decode_offset_commit(k, v) for k, v in records] == [
        (("g", "in", 0), OffsetCommitValue(10, 2, "m", 2)), (("g", "in", 1), OffsetCommitValue(7, -1, "", 2))]
    assert committed(store) == 5 and committed(store, partition=1) is None
    assert store.has_pending("g", "in", 0) and store.open_transactions("g") == {PID}
    assert store.fetch_stable("g", [("in", [0, 1, 2])]) == [("in", 0, None, UNSTABLE), ("in", 1, None, UNSTABLE),
                                                             ("in", 2, None, 0)]
    assert store.complete_transaction(PID, committed=True) == [("g", "in", 0), ("g", "in", 1)]
    assert committed(store) == 10 and committed(store, partition=1) == 7
    assert store.fetch_stable("g", [("in", [0])]) == [("in", 0, OffsetCommitValue(10, 2, "m", 2), 0)]
    assert not store.open_transactions() and not store.has_pending("g", "in", 0)


def test_an_abort_drops_the_pending_offsets():
    store = OffsetStore()
    commit(store, "g", [("in", 0, 5, -1, "")], now_ms=1)
    store.commit_transactional("g", PID, [("in", 0, 10, -1, "")], now_ms=2)
    assert store.complete_transaction(PID, committed=False) == []
    assert committed(store) == 5 and not store.open_transactions()
    assert store.complete_transaction(PID, committed=True) == []  # a marker resent: nothing pending any more
    assert committed(store) == 5


def test_producers_are_kept_apart():
    store = OffsetStore()
    store.commit_transactional("g", PID, [("in", 0, 10, -1, "")], now_ms=1)
    store.commit_transactional("g", OTHER_PID, [("in", 1, 20, -1, "")], now_ms=1)
    store.complete_transaction(OTHER_PID, committed=False)
    assert committed(store, partition=1) is None and store.has_pending("g", "in", 0)
    store.complete_transaction(PID, committed=True)
    assert committed(store) == 10


def test_a_plain_commit_newer_than_the_pending_offset_stays():
    """Kafka keeps the most recent of a mix of transactional and plain commits (by record offset)."""
    store = OffsetStore()
    store.commit_transactional("g", PID, [("in", 0, 10, -1, "")], now_ms=5)
    commit(store, "g", [("in", 0, 3, -1, "")], now_ms=5)
    store.complete_transaction(PID, committed=True)
    assert committed(store) == 3
    commit(store, "g", [("in", 0, 4, -1, "")], now_ms=6)  # an older plain commit is replaced
    store.commit_transactional("g", PID, [("in", 0, 12, -1, "")], now_ms=7)
    store.complete_transaction(PID, committed=True)
    assert committed(store) == 12


def test_offsets_too_large_metadata_is_refused_alone():
    store = OffsetStore({"offset.metadata.max.bytes": 4})
    errors, records = store.commit_transactional("g", PID, [("in", 0, 1, -1, "12345"), ("in", 1, 2, -1, "1")],
                                                 now_ms=0)
    assert errors == [ErrorCode.OFFSET_METADATA_TOO_LARGE, 0] and len(records) == 1
    assert not store.has_pending("g", "in", 0) and store.has_pending("g", "in", 1)


def test_deletes_take_the_pending_offsets_too():
    store = OffsetStore()
    store.commit_transactional("g", PID, [("in", 0, 10, -1, ""), ("in", 1, 11, -1, "")], now_ms=1)
    assert store.has_offsets("g") and store.groups() == {"g"}  # a group with only pending offsets is kept
    tombstones = store.delete("g", [("in", 0)])
    assert [crec.decode_offset_commit(k, v) for k, v in tombstones] == [(("g", "in", 0), None)]
    assert not store.has_pending("g", "in", 0) and store.has_pending("g", "in", 1)
    assert [crec.decode_offset_commit(k, v)[0] for k, v in store.delete_group("g")] == [("g", "in", 1)]
    assert not store.has_offsets("g") and not store.open_transactions()
    store.complete_transaction(PID, committed=True)
    assert committed(store) is None and committed(store, partition=1) is None
    store.commit_transactional("g", PID, [("gone", 0, 1, -1, "")], now_ms=1)
    assert len(store.on_topics_deleted({"gone"})) == 1 and not store.open_transactions()


def test_retention_never_expires_an_offset_a_transaction_will_replace():
    store = OffsetStore({"offsets.retention.minutes": 1})
    commit(store, "g", [("in", 0, 5, -1, ""), ("in", 1, 6, -1, "")], now_ms=0)
    store.commit_transactional("g", PID, [("in", 0, 10, -1, "")], now_ms=0)
    expired = store.expire(120_000, lambda g: 0)
    assert [crec.decode_offset_commit(k, v)[0] for k, v in expired] == [("g", "in", 1)]
    assert committed(store) == 5 and store.has_pending("g", "in", 0)


def test_replay_rebuilds_pending_offsets_and_applies_the_markers_in_log_order():
    live = OffsetStore()
    log = []  # (key, value, producer id) or ("marker", producer id, committed)
    _, r = commit(live, "g", [("in", 0, 5, -1, "")], now_ms=1)
    log += [(k, v, -1) for k, v in r]
    _, r = live.commit_transactional("g", PID, [("in", 0, 10, -1, "")], now_ms=2)
    log += [(k, v, PID) for k, v in r]
    _, r = live.commit_transactional("g", OTHER_PID, [("in", 1, 20, -1, "")], now_ms=3)
    log += [(k, v, OTHER_PID) for k, v in r]
    live.complete_transaction(PID, True)
    log.append(("marker", PID, True))
    _, r = live.commit_transactional("g", PID, [("in", 0, 15, -1, "")], now_ms=4)  # the next transaction
    log += [(k, v, PID) for k, v in r]
    replayed = OffsetStore()
    for entry in log:
        if entry[0] == "marker":
            replayed.complete_transaction(entry[1], entry[2])
        else:
            replayed.replay(*entry)
    for store in (live, replayed):
        assert committed(store) == 10 and committed(store, partition=1) is None
        assert store.open_transactions() == {PID, OTHER_PID}
        assert store.pending(PID) == {"g": {("in", 0): OffsetCommitValue(15, -1, "", 4)}}
        store.complete_transaction(OTHER_PID, False)
        store.complete_transaction(PID, True)
        assert committed(store) == 15 and committed(store, partition=1) is None


def test_a_rewrite_of_live_records_after_a_pending_offset_does_not_outrank_it():
    """Compaction rewrites the committed offsets after a transaction's records (which it keeps): the rewritten,
    older commit must not win over the transaction's offset when the transaction commits."""
    live = OffsetStore()
    commit(live, "g", [("in", 0, 5, -1, "")], now_ms=1)
    _, pending = live.commit_transactional("g", PID, [("in", 0, 10, -1, "")], now_ms=2)
    replayed = OffsetStore()
    for k, v in pending:
        replayed.replay(k, v, PID)
    for k, v in live.live_records():  # the rewrite comes after the transaction's record in the log
        replayed.replay(k, v)
    assert committed(replayed) == 5
    replayed.complete_transaction(PID, True)
    assert committed(replayed) == 10


# ---- the group namespace: TxnOffsetCommit's checks -----------------------------------------------------------------

def txn_commit(h, group, *, member="", generation=-1, instance=None, pid=PID, offset=10):
    result = h.groups.commit_transactional_offsets(group, pid, member, instance, generation,
                                                   [("orders", 0, offset, -1, "")], now_ms=h.now_ms)
    h.log += [(k, v, pid) for k, v in result.records]
    return result.response[0]


def fetch(groups, group, require_stable=True):
    error, [(_, _, value, partition_error)] = groups.fetch_offsets(group, [("orders", [0])],
                                                                   require_stable=require_stable)
    assert error == 0
    return (None if value is None else value.offset), partition_error


def test_a_member_of_a_classic_group_commits_in_a_transaction():
    h = Harness()
    member, generation = h.classic_member()
    assert txn_commit(h, "g", member=member, generation=generation) == 0
    assert fetch(h.groups, "g") == (None, UNSTABLE)
    assert fetch(h.groups, "g", require_stable=False) == (None, 0)
    assert h.groups.complete_transaction(PID, True) == [("g", "orders", 0)]
    assert fetch(h.groups, "g") == (10, 0)
    assert txn_commit(h, "g", member=member, generation=generation + 1) == ErrorCode.ILLEGAL_GENERATION
    assert txn_commit(h, "g", member="stranger", generation=generation) == ErrorCode.UNKNOWN_MEMBER_ID
    # before v3 a TxnOffsetCommit has no member id and generation: accepted whatever the group's state
    assert txn_commit(h, "g") == 0


def test_a_classic_group_completing_its_rebalance_takes_a_transactional_commit():
    h = Harness()
    member, generation = h.classic_member()
    h.join(member)  # a rejoin: the generation moves on once the join completes
    r = h.join(member)
    assert h.groups.classic.state("g") == COMPLETING_REBALANCE
    assert txn_commit(h, "g", member=member, generation=r.generation_id) == 0


def test_a_consumer_group_member_commits_with_its_epoch():
    h = Harness()
    r = h.cgh("cg", "m1", 0)
    assert txn_commit(h, "cg", member="m1", generation=r.member_epoch) == 0
    assert txn_commit(h, "cg", member="m1", generation=r.member_epoch + 5) == ErrorCode.ILLEGAL_GENERATION
    assert txn_commit(h, "cg", member="nobody", generation=r.member_epoch) == ErrorCode.UNKNOWN_MEMBER_ID


def test_unknown_groups_and_share_groups():
    h = Harness()
    assert txn_commit(h, "new", generation=3) == ErrorCode.ILLEGAL_GENERATION
    assert h.groups.group_type("new") is None
    assert txn_commit(h, "simple") == 0  # no generation: a simple group, as Kafka creates
    assert h.groups.group_type("simple") == CLASSIC
    h.share_member("sg")
    assert txn_commit(h, "sg") == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.groups.commit_transactional_offsets("", PID, "", None, -1, [("orders", 0, 1, -1, "")],
                                                 now_ms=0).response == [ErrorCode.INVALID_GROUP_ID]


def test_an_empty_group_with_an_open_transaction_is_not_removed():
    h = Harness()
    assert txn_commit(h, "simple") == 0
    h.now_ms = 10 * 24 * 3600 * 1000
    h.groups.tick(h.now_ms)
    assert h.groups.group_type("simple") == CLASSIC
    h.groups.complete_transaction(PID, False)
    h.now_ms += 10 * 24 * 3600 * 1000
    h.groups.tick(h.now_ms)
    assert h.groups.group_type("simple") is None


def test_replay_of_the_groups_keeps_pending_offsets_and_their_group():
    h = Harness()
    assert txn_commit(h, "simple") == 0
    fresh = Groups({})
    for key, value, pid in h.log:
        fresh.replay(key, value, 0, pid)
    fresh.finish_replay(0)
    assert fresh.group_type("simple") == CLASSIC
    assert fetch(fresh, "simple") == (None, UNSTABLE)
    fresh.complete_transaction(PID, True)
    assert fetch(fresh, "simple") == (10, 0)


# ---- the coordinator log: transactional batches and replay ---------------------------------------------------------

class Partition:
    """The partition replica's calls CoordinatorLog makes, over a real partition core."""

    def __init__(self, core):
        self.core = core

    async def await_committed(self, timeout_ms):
        return True

    async def fetch(self, offset, max_bytes, leader_epoch, isolation_level):
        return self.core.fetch(offset, max_bytes, isolation_level=isolation_level)

    async def produce(self, blobs, leader_epoch, acks, timeout_ms):
        now = time.time_ns() // 1_000_000
        results = [self.core.produce(memoryview(b), now_ms=now, leader_epoch=3) for b in blobs]
        self.core.log.high_watermark = self.core.log_end_offset  # (one replica: committed at once)
        return results


def test_transactional_records_go_in_the_producers_batch_and_replay_with_their_markers(tmp_path):
    core = open_core(tmp_path)
    log = CoordinatorLog(Partition(core))

    async def scenario():
        a = log.append([(b"k0", b"plain")])
        b = log.append([(b"k1", b"txn-1")], TxnWrite(PID, 2))
        c = log.append([(b"k2", b"txn-2")], TxnWrite(PID, 2))  # the same producer: its batch, next sequence
        d = log.append([(b"k3", b"plain-2")])
        return await asyncio.gather(a, b, c, d)
    assert asyncio.run(scenario()) == [[0], [1], [2], [3]]
    batches = list(iter_batches(memoryview(core.fetch(0, 1 << 20).records)))
    assert [(h.base_offset, h.is_transactional, h.producer_id, h.base_sequence) for h in batches] == [
        (0, False, -1, -1), (1, True, PID, 0), (3, False, -1, -1)]
    marker(core, PID, committed=True, epoch=2)  # offset 4
    assert asyncio.run(log.append([(b"k4", b"txn-3")], TxnWrite(PID, 2))) == [5]  # sequence 2: accepted
    assert core.producers.entry(PID).last_seq == 2
    replayed = asyncio.run(CoordinatorLog(Partition(core)).replay(transactions=True))
    assert replayed == [(0, b"k0", b"plain", -1), (1, b"k1", b"txn-1", PID), (2, b"k2", b"txn-2", PID),
                        (3, b"k3", b"plain-2", -1), TxnMarker(4, PID, True), (5, b"k4", b"txn-3", PID)]
    assert asyncio.run(CoordinatorLog(Partition(core)).replay()) == [
        (0, b"k0", b"plain"), (1, b"k1", b"txn-1"), (2, b"k2", b"txn-2"), (3, b"k3", b"plain-2"),
        (5, b"k4", b"txn-3")]


def test_a_fenced_producer_or_an_ended_transaction_writes_nothing(tmp_path):
    core = open_core(tmp_path)
    log = CoordinatorLog(Partition(core))
    asyncio.run(log.append([(b"k", b"v")], TxnWrite(PID, 3)))
    with pytest.raises(CoordinatorLogError) as e:  # an older epoch than the partition knows
        asyncio.run(log.append([(b"k", b"zombie")], TxnWrite(PID, 2)))
    assert e.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(CoordinatorLogError) as e:
        asyncio.run(log.append([(b"k", b"late")], TxnWrite(PID, 3, lambda: False)))
    assert e.value.error_code == ErrorCode.INVALID_TXN_STATE
    assert core.log_end_offset == 1


def test_appends_queued_behind_a_failed_one_fail_with_it_unwritten(tmp_path):
    """A call queued while an append is in flight was made on a state holding that append's records: when
    the append fails, the queued call fails with the same error and writes nothing (its caller takes its
    changes back), as Kafka's coordinator runtime fails the writes after a failed one. Before, the queued
    call was appended: a DeleteGroups that failed, then a member joining the same group id, left the log
    holding both groups."""
    core = open_core(tmp_path)

    class FailingOnce(Partition):
        def __init__(self, core):
            super().__init__(core)
            self.in_flight = asyncio.Event()
            self.calls = 0

        async def produce(self, blobs, leader_epoch, acks, timeout_ms):
            self.calls += 1
            if self.calls == 1:  # the first append waits for its followers, then times out
                self.in_flight.set()
                await asyncio.sleep(0.05)
                return [type("Result", (), {"error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": "acks"})()
                        for _ in blobs]
            return await super().produce(blobs, leader_epoch, acks, timeout_ms)

    partition = FailingOnce(core)
    log = CoordinatorLog(partition)

    async def scenario():
        first = asyncio.ensure_future(log.append([(b"group", None)]))  # a tombstone: the group deleted
        await partition.in_flight.wait()
        second = asyncio.ensure_future(log.append([(b"group", b"joined")]))  # made on the deleted state
        outcomes = await asyncio.gather(first, second, return_exceptions=True)
        later = await log.append([(b"other", b"v")])  # a call after the failure is appended as ever
        return outcomes, later
    (first, second), later = asyncio.run(scenario())
    assert isinstance(first, CoordinatorLogError) and first.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert isinstance(second, CoordinatorLogError) and second.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert later == [0] and partition.calls == 2
    assert asyncio.run(CoordinatorLog(Partition(core)).replay()) == [(0, b"other", b"v")]


# ---- the gateway's checks before the coordinator -------------------------------------------------------------------

def test_the_handler_checks_the_transactional_id_and_each_topic_before_any_coordinator():
    """As Kafka's handleTxnOffsetCommitRequest; the gateway here has no coordinator, so a request that went past
    the checks would fail instead of answering them."""
    from actors.gateway.handlers.transactions import handle_txn_offset_commit
    from actors.security.authorizer import AclOperation
    from protocol import messages as m
    from protocol.headers import RequestHeader
    from tests.unit.test_security_group_apis import GROUP, TOPIC, _connection, _context
    R = m.TxnOffsetCommitRequest

    def answer(transactional_id, topics):
        request = R(transactional_id=transactional_id, group_id=GROUP, producer_id=1, producer_epoch=0, member_id="",
                    topics=[R.TxnOffsetCommitRequestTopic(name=t, partitions=[R.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5, committed_metadata="")]) for t in topics])
        response = asyncio.run(asyncio.wait_for(handle_txn_offset_commit(
            _context(AclOperation.READ), RequestHeader(28, 3, 1, "test"), request, _connection()), 10))
        return [(t.name, t.partitions[0].error_code) for t in response.topics]
    assert answer("someone-else", [TOPIC]) == [(TOPIC, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    assert answer("tx", ["secret"]) == [("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert answer("tx", [TOPIC]) == [(TOPIC, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]  # READ on it, but no topic
