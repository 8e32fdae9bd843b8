"""Transaction version 2 (KIP-890 part 2) in the transaction coordinator's pure core: an epoch bump at every end,
markers with the new epoch, implicit adds, retries with the epoch before the bump, the empty abort, and the next
producer id once the epoch is exhausted. The same steps run against Apache Kafka 4.4 in tests/kafka."""
from dataclasses import replace

from actors.transaction_coordinator.core import SHORT_MAX, AddPartitions, EndTxn, MarkersWritten
from actors.transaction_coordinator.states import TxnState
from protocol.errors import ErrorCode as E
from tests.unit.test_txn_coordinator_core import TP0, TP1, Harness, ok

S = TxnState


def add2(h, pid, epoch, *partitions, txn_id="tx"):
    return h.run(h.core.add_partitions(AddPartitions(txn_id, pid, epoch, partitions, False, 2), h.now_ms))


def end2(h, pid, epoch, committed, txn_id="tx", new_producer_id=-1):
    return h.run(h.core.end_txn(EndTxn(txn_id, pid, epoch, committed, 2, new_producer_id), h.now_ms))


def ended(h, step):
    """The markers of `step` written: the shell's report, stepped."""
    [markers] = step.response.markers
    return h.run(h.core.markers_written(MarkersWritten(markers.transactional_id, markers.producer_id,
                                                       markers.producer_epoch, markers.committed), h.now_ms))


def test_every_end_bumps_the_epoch_and_its_markers_carry_the_new_one():
    h = Harness()
    init = ok(h.init())
    pid = init.response.producer_id
    ok(add2(h, pid, 0, TP0, TP1))
    assert h.meta().client_transaction_version == 2
    commit = ok(end2(h, pid, 0, True), pid, 1)
    [markers] = commit.response.markers
    assert (markers.producer_epoch, markers.partitions, markers.committed) == (1, (TP0, TP1), True)
    ok(ended(h, commit))
    assert (h.meta().state, h.meta().producer_epoch) == (S.COMPLETE_COMMIT, 1)
    ok(add2(h, pid, 1, TP0))
    abort = ok(end2(h, pid, 1, False), pid, 2)
    assert abort.response.markers[0].producer_epoch == 2
    ok(ended(h, abort))
    h.assert_replay_equals_live()


def test_an_end_retried_with_the_epoch_before_its_bump_is_answered_as_done():
    h = Harness()
    pid = ok(h.init()).response.producer_id
    ok(add2(h, pid, 0, TP0))
    commit = ok(end2(h, pid, 0, True), pid, 1)
    assert end2(h, pid, 0, True).response.error == E.CONCURRENT_TRANSACTIONS    # its markers are still being written
    ok(ended(h, commit))
    retry = ok(end2(h, pid, 0, True), pid, 1)                          # written: the retry is told the new epoch
    assert not retry.records and not retry.response.markers
    assert end2(h, pid, 0, False).response.error == E.INVALID_TXN_STATE         # an abort of what was committed
    assert end2(h, pid, 1, True).response.error == E.NONE  # the current epoch in CompleteCommit: a retry too


def test_a_stale_epoch_is_fenced_and_a_zombie_cannot_add_partitions():
    h = Harness()
    pid = ok(h.init()).response.producer_id
    ok(add2(h, pid, 0, TP0))
    ok(ended(h, ok(end2(h, pid, 0, True))))
    ok(add2(h, pid, 1, TP0))
    assert add2(h, pid, 0, TP1).response.partition_errors == {TP1: E.PRODUCER_FENCED}   # the old epoch's producer
    assert end2(h, pid, 0, True).response.error == E.PRODUCER_FENCED                    # Ongoing: only the current epoch
    assert end2(h, pid + 1, 1, True).response.error == E.INVALID_PRODUCER_ID_MAPPING


def test_an_abort_with_no_transaction_open_ends_an_empty_one_with_a_bump():
    h = Harness()
    pid = ok(h.init()).response.producer_id
    empty = ok(end2(h, pid, 0, False), pid, 1)                 # right after InitProducerId (Empty)
    assert empty.response.markers[0].partitions == ()
    ok(ended(h, empty))
    assert (h.meta().state, h.meta().producer_epoch) == (S.COMPLETE_ABORT, 1)
    ok(ended(h, ok(end2(h, pid, 1, False), pid, 2)))           # and after an end (Complete*)
    assert end2(h, pid, 2, True).response.error == E.INVALID_TXN_STATE  # a commit of nothing (as Kafka 4.4 answers)
    v1 = h.core.end_txn(EndTxn("tx", pid, 2, False), h.now_ms)   # version 1 (EndTxn v4): a retry, as Kafka 4.4 answers
    assert (v1.response.error, v1.records, v1.response.producer_epoch) == (E.NONE, [], 2)
    fresh = ok(h.init(txn_id="fresh"))
    assert h.core.end_txn(EndTxn("fresh", fresh.response.producer_id, 0, False), h.now_ms).response.error == E.INVALID_TXN_STATE
    h.assert_replay_equals_live()


def test_version_1_ends_keep_the_epoch():
    h = Harness()
    pid = ok(h.init()).response.producer_id
    ok(h.add(pid, 0, TP0))
    assert h.meta().client_transaction_version == 0
    commit = ok(h.end(pid, 0, True), pid, 0)
    assert commit.response.markers[0].producer_epoch == 0
    ok(h.written(pid, 0, True))
    assert end2(h, pid, -1, True).response.error == E.PRODUCER_FENCED


def test_an_exhausted_epoch_continues_with_the_next_producer_id():
    h = Harness()
    pid = ok(h.init()).response.producer_id
    h.core.transactions["tx"] = replace(h.meta(), producer_epoch=SHORT_MAX - 1)
    ok(add2(h, pid, SHORT_MAX - 1, TP0))
    request = EndTxn("tx", pid, SHORT_MAX - 1, True, 2)
    assert h.core.needs_new_producer_id(request)
    assert h.core.end_txn(request, h.now_ms).response.error == E.COORDINATOR_NOT_AVAILABLE  # the shell had no id to give
    commit = ok(end2(h, pid, SHORT_MAX - 1, True, new_producer_id=4242), 4242, 0)
    assert (commit.response.markers[0].producer_id, commit.response.markers[0].producer_epoch) == (pid, SHORT_MAX)
    ok(ended(h, commit))
    meta = h.meta()
    assert (meta.producer_id, meta.producer_epoch, meta.prev_producer_id) == (4242, 0, pid)
    ok(end2(h, pid, SHORT_MAX - 1, True), 4242, 0)       # the retry, with the old id and epoch
    ok(add2(h, 4242, 0, TP0))                            # the next transaction, with the new id
    assert add2(h, pid, SHORT_MAX - 1, TP1).response.partition_errors == {TP1: E.INVALID_PRODUCER_ID_MAPPING}
    h.assert_replay_equals_live()
