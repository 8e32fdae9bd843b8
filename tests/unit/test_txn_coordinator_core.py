"""The transaction coordinator's pure core (actors/transaction_coordinator): transitions, fencing, timeouts on a
manual clock, expiry, epoch exhaustion, replay, and a property test against a naive model."""
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.coordinator_result import CoordinatorResult
from actors.transaction_coordinator.core import (SHORT_MAX, AddOffsets, AddPartitions, EndTxn, InitProducerId,
                                                 Markers, MarkersWritten, TransactionCoordinatorCore, TxnConfig,
                                                 TxnResponse, client_error, epoch_exhausted)
from actors.transaction_coordinator.records import TxnMetadata, decode_record, encode_record
from actors.transaction_coordinator.states import (STATE_NAMES, TRANSITIONS, IllegalTransition, TxnState,
                                                   check_transition)
from protocol.coordinator_records import TransactionLogValue
from protocol.errors import ErrorCode as E, MalformedMessage

S = TxnState
T0 = 1_700_000_000_000
TIMEOUT_MS = 60_000
TP0, TP1, TP2 = ("t", 0), ("t", 1), ("u", 0)


class Harness:
    """A core, a manual clock, a producer id source, and the log it wrote (each step appended, as a shell would)."""

    def __init__(self, config=TxnConfig(), auto_append=True):
        self.core = TransactionCoordinatorCore(config, coordinator_epoch=7)
        self.now_ms = T0
        self.log = []
        self.pids = itertools.count(1000)
        self.auto_append = auto_append

    def run(self, step):
        self.log.extend(step.records)
        if self.auto_append:
            self.core.on_appended({decode_record(k, v)[0] for k, v in step.records})
        return step

    def init(self, txn_id="tx", timeout_ms=TIMEOUT_MS, pid=-1, epoch=-1):
        return self.run(self.core.init_producer_id(InitProducerId(txn_id, timeout_ms, next(self.pids), pid, epoch),
                                                   self.now_ms))

    def add(self, pid, epoch, *partitions, txn_id="tx", verify_only=False):
        return self.run(self.core.add_partitions(AddPartitions(txn_id, pid, epoch, partitions, verify_only),
                                                 self.now_ms))

    def add_offsets(self, pid, epoch, group="g", partition=5, txn_id="tx"):
        return self.run(self.core.add_offsets(AddOffsets(txn_id, pid, epoch, group, partition), self.now_ms))

    def end(self, pid, epoch, committed, txn_id="tx"):
        return self.run(self.core.end_txn(EndTxn(txn_id, pid, epoch, committed), self.now_ms))

    def written(self, pid, epoch, committed, txn_id="tx"):
        return self.run(self.core.markers_written(MarkersWritten(txn_id, pid, epoch, committed), self.now_ms))

    def meta(self, txn_id="tx") -> TxnMetadata:
        return self.core.transactions[txn_id]

    def replayed(self) -> TransactionCoordinatorCore:
        core = TransactionCoordinatorCore(self.core.config, coordinator_epoch=8)
        for key, value in self.log:
            core.replay(key, value)
        return core

    def assert_replay_equals_live(self):
        replayed = self.replayed()
        assert {k: m.durable() for k, m in replayed.transactions.items()} == {
            k: m.durable() for k, m in self.core.transactions.items()}


def ok(step, pid=None, epoch=None):
    assert step.response.error == E.NONE, step.response.error
    if pid is not None:
        assert (step.response.producer_id, step.response.producer_epoch) == (pid, epoch)
    return step


# ---- the table ---------------------------------------------------------------------------------------------------

LEGAL = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.EMPTY, S.PREPARE_ABORT), (S.COMPLETE_COMMIT, S.PREPARE_ABORT), (S.COMPLETE_ABORT, S.PREPARE_ABORT),  # v2
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


@pytest.mark.parametrize("from_state,to_state", list(itertools.product(TxnState, TxnState)),
                         ids=lambda s: STATE_NAMES[s])
def test_every_pair_of_states(from_state, to_state):
    if (from_state, to_state) in LEGAL:
        check_transition(from_state, to_state)
    else:
        with pytest.raises(IllegalTransition):
            check_transition(from_state, to_state)


def test_table_names_every_state_as_kafka():
    assert set(TRANSITIONS) == set(TxnState)
    assert [STATE_NAMES[s] for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                                                   "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert [int(s) for s in TxnState] == list(range(8))


# ---- records -----------------------------------------------------------------------------------------------------

def test_record_round_trip_and_tombstone():
    meta = TxnMetadata("tx", 5, 3, TIMEOUT_MS, S.ONGOING, T0, frozenset({TP0, TP1, TP2}), T0 - 5, prev_producer_id=4,
                       last_producer_epoch=2)
    key, value = encode_record(meta, "tx")
    assert key[:2] == b"\x00\x00" and value[:2] == b"\x00\x01"
    assert decode_record(key, value) == ("tx", meta.durable())
    assert decode_record(key, value)[1].last_producer_epoch == -1  # in memory only
    assert encode_record(None, "tx") == (key, None)
    assert decode_record(key, None) == ("tx", None)


def test_record_reads_value_version_0_and_refuses_nonsense():
    value = TransactionLogValue(producer_id=5, producer_epoch=1, transaction_timeout_ms=10, transaction_status=4,
                                transaction_partitions=[], transaction_last_update_timestamp_ms=9,
                                transaction_start_timestamp_ms=8)
    key, _ = encode_record(None, "tx")
    _, meta = decode_record(key, b"\x00\x00" + value.encode(0))
    assert (meta.state, meta.prev_producer_id, meta.partitions) == (S.COMPLETE_COMMIT, -1, frozenset())
    with pytest.raises(MalformedMessage):
        decode_record(b"\x00\x01" + key[2:], None)  # another record type
    value.transaction_status = 7  # PrepareEpochFence is never stored
    with pytest.raises(MalformedMessage):
        decode_record(key, b"\x00\x00" + value.encode(0))
    with pytest.raises(MalformedMessage):
        decode_record(key, b"\x00\x09" + value.encode(0))
    with pytest.raises(ValueError):
        encode_record(TxnMetadata("tx", 5, 0, 1, S.EMPTY, 0, frozenset({TP0})), "tx")
    with pytest.raises(ValueError):
        encode_record(TxnMetadata("tx", 5, 0, 1, S.DEAD, 0), "tx")


# ---- InitProducerId ----------------------------------------------------------------------------------------------

def test_init_producer_id_new_and_bump():
    h = Harness()
    step = ok(h.init(), 1000, 0)
    assert len(step.records) == 1 and not step.response.markers
    assert (h.meta().state, h.meta().txn_timeout_ms, h.meta().txn_start_timestamp_ms) == (S.EMPTY, TIMEOUT_MS, -1)
    ok(h.init(timeout_ms=5_000), 1000, 1)  # the same id again: the epoch bumps, the producer id stays
    assert h.meta().txn_timeout_ms == 5_000
    assert h.add(1000, 0, TP0).response.error == E.PRODUCER_FENCED  # the zombie of epoch 0
    h.assert_replay_equals_live()


@pytest.mark.parametrize("timeout_ms,error", [(0, E.INVALID_TRANSACTION_TIMEOUT), (-1, E.INVALID_TRANSACTION_TIMEOUT),
                                              (900_001, E.INVALID_TRANSACTION_TIMEOUT), (900_000, E.NONE), (1, E.NONE)])
def test_transaction_timeout_bounded_by_max(timeout_ms, error):
    h = Harness()
    assert h.init(timeout_ms=timeout_ms).response.error == error
    assert ("tx" in h.core.transactions) == (error == E.NONE)


def test_transaction_max_timeout_is_configurable():
    h = Harness(TxnConfig(transaction_max_timeout_ms=1_000))
    assert h.init(timeout_ms=1_001).response.error == E.INVALID_TRANSACTION_TIMEOUT
    ok(h.init(timeout_ms=1_000))


def test_config_from_kafka_keys():
    assert TxnConfig.from_configs({}) == TxnConfig(900_000, 604_800_000)
    assert TxnConfig.from_configs({"transaction.max.timeout.ms": "5000", "transactional.id.expiration.ms": 7}) == \
        TxnConfig(5_000, 7)
    for key in ("transaction.max.timeout.ms", "transactional.id.expiration.ms"):
        with pytest.raises(ValueError, match=key):
            TxnConfig.from_configs({key: 0})


def test_init_producer_id_bad_requests():
    h = Harness()
    assert h.init(txn_id="").response.error == E.INVALID_REQUEST
    assert h.init(pid=5).response.error == E.INVALID_REQUEST  # an id without an epoch
    assert h.init(epoch=5).response.error == E.INVALID_REQUEST
    assert not h.log


def test_pending_until_appended():
    h = Harness(auto_append=False)
    step = ok(h.init())
    assert h.init().response.error == E.CONCURRENT_TRANSACTIONS
    h.core.on_appended(["tx"])
    ok(h.init(), step.response.producer_id, 1)
    assert h.add(step.response.producer_id, 1, TP0).response.error == E.CONCURRENT_TRANSACTIONS
    h.core.on_appended(["tx"])
    ok(h.add(step.response.producer_id, 1, TP0))
    assert h.end(step.response.producer_id, 1, True).response.error == E.CONCURRENT_TRANSACTIONS  # AddPartitions not appended yet
    h.core.on_appended(["tx"])
    ok(h.end(step.response.producer_id, 1, True))
    assert h.written(step.response.producer_id, 1, True).response.error == E.CONCURRENT_TRANSACTIONS  # markers before the Prepare
    h.core.on_appended(["tx"])
    ok(h.written(step.response.producer_id, 1, True))


def test_kip360_init_with_current_producer_id_and_epoch():
    h = Harness()
    ok(h.init(), 1000, 0)
    ok(h.init(pid=1000, epoch=0), 1000, 1)
    ok(h.init(pid=1000, epoch=0), 1000, 1)  # a retry of that bump: the same epoch back
    assert h.meta().last_producer_epoch == 0
    assert h.init(pid=1000, epoch=5).response.error == E.PRODUCER_FENCED  # neither the current nor the last epoch
    assert h.init(pid=999, epoch=1).response.error == E.PRODUCER_FENCED  # another producer id
    ok(h.init(pid=1000, epoch=1), 1000, 2)
    # the last epoch lives in memory only (as in Kafka): after a coordinator move the retry is fenced
    h.core = h.replayed()
    assert h.init(pid=1000, epoch=1).response.error == E.PRODUCER_FENCED
    ok(h.init(pid=1000, epoch=2), 1000, 3)


def test_init_while_ongoing_fences_and_aborts():
    h = Harness()
    ok(h.init())
    ok(h.add(1000, 0, TP0, TP1))
    step = h.init()
    assert step.response.error == E.CONCURRENT_TRANSACTIONS
    assert (h.meta().state, h.meta().producer_epoch) == (S.PREPARE_ABORT, 1)
    assert step.response.markers == (Markers("tx", 1000, 1, False, 7, (TP0, TP1)),)
    assert h.end(1000, 0, True).response.error == E.PRODUCER_FENCED  # the old producer
    assert h.init().response.error == E.CONCURRENT_TRANSACTIONS  # until the markers are written
    ok(h.written(1000, 1, False))
    assert h.meta().state == S.COMPLETE_ABORT and h.meta().partitions == frozenset()
    ok(h.init(), 1000, 2)
    h.assert_replay_equals_live()


# ---- a transaction -----------------------------------------------------------------------------------------------

def test_commit_flow():
    h = Harness()
    ok(h.init())
    h.now_ms += 10
    step = ok(h.add(1000, 0, TP0))
    assert step.response.partition_errors == {TP0: E.NONE} and len(step.records) == 1
    assert (h.meta().state, h.meta().txn_start_timestamp_ms) == (S.ONGOING, T0 + 10)
    h.now_ms += 10
    assert ok(h.add(1000, 0, TP0)).records == []  # nothing new
    ok(h.add(1000, 0, TP1, TP2))
    ok(h.add_offsets(1000, 0, "g", 5))
    assert h.meta().partitions == {TP0, TP1, TP2, ("__consumer_offsets", 5)}
    assert h.meta().txn_start_timestamp_ms == T0 + 10  # the transaction started at its first partition
    step = ok(h.end(1000, 0, True), 1000, 0)
    assert h.meta().state == S.PREPARE_COMMIT
    assert step.response.markers == (Markers("tx", 1000, 0, True, 7, tuple(sorted(h.meta().partitions))),)
    assert h.core.markers_to_resend() == list(step.response.markers)
    for error, attempt in [(E.CONCURRENT_TRANSACTIONS, lambda: h.end(1000, 0, True)),
                           (E.INVALID_TXN_STATE, lambda: h.end(1000, 0, False)),
                           (E.CONCURRENT_TRANSACTIONS, lambda: h.add(1000, 0, TP0)),
                           (E.CONCURRENT_TRANSACTIONS, lambda: h.add_offsets(1000, 0)),
                           (E.CONCURRENT_TRANSACTIONS, lambda: h.init()),
                           (E.INVALID_TXN_STATE, lambda: h.written(1000, 0, False))]:
        assert attempt().response.error == error
    h.assert_replay_equals_live()
    h.now_ms += 10
    ok(h.written(1000, 0, True))
    assert (h.meta().state, h.meta().partitions, h.meta().txn_last_update_timestamp_ms) == (
        S.COMPLETE_COMMIT, frozenset(), T0 + 30)
    assert h.core.markers_to_resend() == []
    assert ok(h.end(1000, 0, True)).records == []  # a retried commit
    assert h.end(1000, 0, False).response.error == E.INVALID_TXN_STATE
    h.now_ms += 10
    ok(h.add(1000, 0, TP2))  # the next transaction, same epoch (transaction version 1)
    assert (h.meta().state, h.meta().partitions, h.meta().txn_start_timestamp_ms) == (S.ONGOING, {TP2}, T0 + 40)
    h.assert_replay_equals_live()


def test_abort_flow():
    h = Harness()
    ok(h.init())
    ok(h.add(1000, 0, TP0))
    step = ok(h.end(1000, 0, False))
    assert h.meta().state == S.PREPARE_ABORT and step.response.markers[0].committed is False
    assert h.end(1000, 0, False).response.error == E.CONCURRENT_TRANSACTIONS
    assert h.end(1000, 0, True).response.error == E.INVALID_TXN_STATE
    assert h.written(1000, 0, True).response.error == E.INVALID_TXN_STATE
    ok(h.written(1000, 0, False))
    assert h.meta().state == S.COMPLETE_ABORT
    ok(h.end(1000, 0, False))  # a retried abort
    assert h.end(1000, 0, True).response.error == E.INVALID_TXN_STATE
    ok(h.init(), 1000, 1)
    h.assert_replay_equals_live()


def test_end_txn_errors():
    h = Harness()
    assert h.end(1000, 0, True, txn_id="").response.error == E.INVALID_REQUEST
    assert h.end(1000, 0, True).response.error == E.INVALID_PRODUCER_ID_MAPPING  # unknown id
    ok(h.init())
    assert h.end(1000, 0, True).response.error == E.INVALID_TXN_STATE  # Empty: nothing to end
    assert h.end(1000, 0, False).response.error == E.INVALID_TXN_STATE  # (an empty abort is transaction version 2)
    assert h.end(999, 0, True).response.error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end(1000, 1, True).response.error == E.PRODUCER_FENCED
    assert h.written(999, 0, True).response.error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.written(1000, 3, True).response.error == E.PRODUCER_FENCED
    assert len(h.log) == 1


def test_add_partitions_errors():
    h = Harness()
    assert h.add(1000, 0, TP0, txn_id="").response.partition_errors == {TP0: E.INVALID_REQUEST}
    assert h.add(1000, 0, TP0, TP1).response.partition_errors == {TP0: E.INVALID_PRODUCER_ID_MAPPING,
                                                         TP1: E.INVALID_PRODUCER_ID_MAPPING}
    ok(h.init())
    assert h.add(999, 0, TP0).response.error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(1000, 1, TP0).response.error == E.PRODUCER_FENCED
    assert h.add_offsets(1000, 1).response.error == E.PRODUCER_FENCED
    assert h.add_offsets(1000, 1).response.partition_errors is None
    assert len(h.log) == 1


def test_verify_only_writes_nothing():
    h = Harness()
    ok(h.init())
    ok(h.add(1000, 0, TP0))
    before = len(h.log)
    step = h.add(1000, 0, TP0, TP1, verify_only=True)
    assert step.response.partition_errors == {TP0: E.NONE, TP1: E.TRANSACTION_ABORTABLE} and step.records == []
    assert h.add(1000, 1, TP0, verify_only=True).response.partition_errors == {TP0: E.PRODUCER_FENCED}
    assert h.add(7, 0, TP0, verify_only=True).response.partition_errors == {TP0: E.INVALID_PRODUCER_ID_MAPPING}
    ok(h.end(1000, 0, True))
    assert h.add(1000, 0, TP0, verify_only=True).response.partition_errors == {TP0: E.CONCURRENT_TRANSACTIONS}
    assert len(h.log) == before + 1 and h.meta().partitions == {TP0}


def test_client_error_for_old_versions():
    assert client_error(22, 3, E.PRODUCER_FENCED) == E.INVALID_PRODUCER_EPOCH
    assert client_error(22, 4, E.PRODUCER_FENCED) == E.PRODUCER_FENCED
    for key in (24, 25, 26):
        assert client_error(key, 1, E.PRODUCER_FENCED) == E.INVALID_PRODUCER_EPOCH
        assert client_error(key, 2, E.PRODUCER_FENCED) == E.PRODUCER_FENCED
    assert client_error(26, 0, E.CONCURRENT_TRANSACTIONS) == E.CONCURRENT_TRANSACTIONS
    assert client_error(28, 0, E.PRODUCER_FENCED) == E.PRODUCER_FENCED


# ---- epoch exhaustion --------------------------------------------------------------------------------------------

def at_epoch(h, epoch, state=S.COMPLETE_COMMIT, partitions=frozenset(), timeout_ms=TIMEOUT_MS):
    """Put "tx" at producer 500, `epoch`, through the log (as a replay would)."""
    record = encode_record(TxnMetadata("tx", 500, epoch, timeout_ms, state, T0, partitions,
                                       T0 if partitions else -1), "tx")
    h.log.append(record)
    h.core.replay(*record)


def test_epoch_exhaustion_rotates_the_producer_id():
    h = Harness()
    at_epoch(h, SHORT_MAX - 3)
    ok(h.init(), 500, SHORT_MAX - 2)
    assert not epoch_exhausted(SHORT_MAX - 2)
    ok(h.init(), 500, SHORT_MAX - 1)
    assert epoch_exhausted(SHORT_MAX - 1)
    step = ok(h.init(pid=500, epoch=SHORT_MAX - 1))
    new_pid = step.response.producer_id
    assert new_pid != 500 and step.response.producer_epoch == 0
    assert (h.meta().prev_producer_id, h.meta().last_producer_epoch) == (500, SHORT_MAX - 1)
    # KIP-360: the producer retries with the exhausted old id and epoch: it gets the new id back, not fenced
    ok(h.init(pid=500, epoch=SHORT_MAX - 1), new_pid, 0)
    ok(h.init(pid=new_pid, epoch=0), new_pid, 1)
    assert h.init(pid=500, epoch=SHORT_MAX - 1).response.error == E.PRODUCER_FENCED  # the previous id is now new_pid
    h.assert_replay_equals_live()


def test_epoch_exhaustion_without_producer_id():
    h = Harness()
    at_epoch(h, SHORT_MAX - 1)
    step = ok(h.init())
    assert step.response.producer_id != 500 and step.response.producer_epoch == 0
    assert h.meta().last_producer_epoch == -1


def test_fence_at_the_last_epochs():
    h = Harness()
    at_epoch(h, SHORT_MAX - 1, S.ONGOING, frozenset({TP0}))
    step = h.init()
    assert step.response.error == E.CONCURRENT_TRANSACTIONS and step.response.markers[0].producer_epoch == SHORT_MAX
    ok(h.written(500, SHORT_MAX, False))
    step = ok(h.init())
    assert step.response.producer_id != 500 and step.response.producer_epoch == 0
    h2 = Harness()
    at_epoch(h2, SHORT_MAX, S.ONGOING, frozenset({TP0}))
    assert h2.init().response.markers[0].producer_epoch == SHORT_MAX  # no epoch above it: the fence keeps it


# ---- time --------------------------------------------------------------------------------------------------------

def test_timed_out_transaction_is_fenced_and_aborted():
    h = Harness()
    ok(h.init(timeout_ms=1_000))
    assert h.core.next_deadline_ms() is None
    h.now_ms += 5
    ok(h.add(1000, 0, TP0))
    assert h.core.next_deadline_ms() == T0 + 5 + 1_000
    h.now_ms += 500
    ok(h.add(1000, 0, TP1))  # more partitions do not move the deadline
    assert h.core.next_deadline_ms() == T0 + 5 + 1_000
    h.now_ms = T0 + 5 + 1_000
    assert h.run(h.core.abort_timed_out(h.now_ms)) == CoordinatorResult([], TxnResponse())  # not yet: strictly past
    h.now_ms += 1
    step = h.run(h.core.abort_timed_out(h.now_ms))
    assert len(step.records) == 1 and step.response.markers == (Markers("tx", 1000, 1, False, 7, (TP0, TP1)),)
    assert (h.meta().state, h.meta().producer_epoch) == (S.PREPARE_ABORT, 1)
    assert h.core.next_deadline_ms() is None
    assert h.run(h.core.abort_timed_out(h.now_ms + 10_000)).records == []
    assert h.end(1000, 0, True).response.error == E.PRODUCER_FENCED  # the producer learns it was fenced
    ok(h.written(1000, 1, False))
    ok(h.init(timeout_ms=1_000), 1000, 2)
    h.assert_replay_equals_live()


def test_timeout_skips_pending_transactions():
    h = Harness(auto_append=False)
    ok(h.init(timeout_ms=1_000))
    h.core.on_appended(["tx"])
    ok(h.add(1000, 0, TP0))
    assert h.core.abort_timed_out(T0 + 10_000).records == []  # its AddPartitions is not durable yet
    h.core.on_appended(["tx"])
    assert len(h.core.abort_timed_out(T0 + 10_000).records) == 1


def test_idle_transactional_ids_expire():
    h = Harness(TxnConfig(transactional_id_expiration_ms=100_000), auto_append=False)
    ok(h.init(txn_id="a"))
    ok(h.init(txn_id="b"))
    ok(h.init(txn_id="c"))
    h.core.on_appended("abc")
    ok(h.add(1001, 0, TP0, txn_id="b"))  # b is Ongoing: never expires (it times out instead)
    h.core.on_appended("b")
    h.now_ms += 50_000
    for attempt in (lambda: h.add(1002, 0, TP0, txn_id="c"), lambda: h.end(1002, 0, True, txn_id="c"),
                    lambda: h.written(1002, 0, True, txn_id="c")):
        ok(attempt())
        h.core.on_appended("c")  # c completes at T0 + 50 s
    assert h.core.expire_transactional_ids(T0 + 99_999).records == []
    step = h.run(h.core.expire_transactional_ids(T0 + 100_000))
    assert step.records == [encode_record(None, "a")]
    assert "a" not in h.core.transactions and set(h.core.transactions) == {"b", "c"}
    assert h.init(txn_id="a").response.error == E.CONCURRENT_TRANSACTIONS  # until the tombstone is durable
    h.core.on_appended("a")
    assert h.end(1000, 0, True, txn_id="a").response.error == E.INVALID_PRODUCER_ID_MAPPING
    h.now_ms = T0 + 100_000
    ok(h.init(txn_id="a"))
    assert h.core.transactions["a"].producer_id not in (1000, 1001, 1002)  # a new producer id, epoch 0
    h.core.on_appended("a")
    assert [k for k, _ in h.run(h.core.expire_transactional_ids(T0 + 150_000)).records] == [
        encode_record(None, "c")[0]]
    h.core.on_appended("c")
    h.assert_replay_equals_live()


# ---- replay, describe, list ----------------------------------------------------------------------------------------

def test_replay_resends_markers_of_prepared_transactions():
    h = Harness()
    for txn_id, committed in (("a", True), ("b", False), ("c", None)):
        pid = ok(h.init(txn_id=txn_id)).response.producer_id
        ok(h.add(pid, 0, TP0, txn_id=txn_id))
        if committed is not None:
            ok(h.end(pid, 0, committed, txn_id=txn_id))
    replayed = h.replayed()
    assert [(m.transactional_id, m.committed, m.coordinator_epoch) for m in replayed.markers_to_resend()] == [
        ("a", True, 8), ("b", False, 8)]
    h.assert_replay_equals_live()


def test_describe_and_list():
    h = Harness()
    ok(h.init(txn_id="alpha"))
    ok(h.init(txn_id="beta"))
    h.now_ms += 100
    ok(h.add(1001, 0, TP0, txn_id="beta"))
    assert h.core.describe("") == (E.INVALID_REQUEST, None)
    assert h.core.describe("nope") == (E.TRANSACTIONAL_ID_NOT_FOUND, None)
    error, meta = h.core.describe("beta")
    assert error == E.NONE and meta.partitions == {TP0} and meta.txn_start_timestamp_ms == T0 + 100
    listed = h.core.list_transactions(h.now_ms)
    assert [(t.transactional_id, t.state) for t in listed.transactions] == [("alpha", "Empty"), ("beta", "Ongoing")]
    assert [t.transactional_id for t in h.core.list_transactions(h.now_ms, ["Ongoing", "Bogus"]).transactions] == [
        "beta"]
    assert h.core.list_transactions(h.now_ms, ["Bogus"]).unknown_state_filters == ["Bogus"]
    assert [t.transactional_id for t in h.core.list_transactions(h.now_ms, producer_id_filters=[1000]).transactions
            ] == ["alpha"]
    assert [t.transactional_id for t in h.core.list_transactions(
        T0 + 200, duration_filter_ms=50).transactions] == ["alpha", "beta"]  # alpha never started (-1)
    assert [t.transactional_id for t in h.core.list_transactions(
        T0 + 200, duration_filter_ms=100).transactions] == ["alpha"]
    assert [t.transactional_id for t in h.core.list_transactions(
        h.now_ms, transactional_id_pattern="al.*").transactions] == ["alpha"]
    assert h.core.list_transactions(h.now_ms, transactional_id_pattern="(").error == E.INVALID_REGULAR_EXPRESSION


# ---- property: random producers, zombies, clocks and coordinator moves -------------------------------------------

IDS = ("a", "b")
PARTITIONS = (TP0, TP1, TP2)
_id = st.sampled_from(["a", "a", "a", "b"])
_who = st.sampled_from(["current", "current", "current", "stale", "other"])
_add = st.tuples(st.just("add"), _id, _who, st.sets(st.sampled_from(PARTITIONS), min_size=1, max_size=2))
_end = st.tuples(st.just("end"), _id, _who, st.booleans())
_written = st.tuples(st.just("written"), _id)
_op = st.one_of(
    st.tuples(st.just("init"), _id, st.sampled_from(["none", "current", "stale"])),
    _add, _add, _add,
    st.tuples(st.just("offsets"), _id, _who),
    _end, _end, _written, _written,
    st.tuples(st.just("tick"), st.sampled_from([1, 500, 2_000, 50_000])),
    st.tuples(st.just("timeouts")),
    st.tuples(st.just("expire")),
    st.tuples(st.just("move")),   # the partition's leadership moves: a new core replays the log
)


def _check_log(log, seeded=0):
    """Every id's records follow the table; epochs never go back within a producer id; ids are not reused.
    (The first `seeded` records were written by the test, not the coordinator.)"""
    last: dict[str, TxnMetadata | None] = {}
    owner_of_pid: dict[int, str] = {}
    for key, value in log[:seeded]:
        txn_id, last[txn_id] = decode_record(key, value)
        owner_of_pid[last[txn_id].producer_id] = txn_id
    for key, value in log[seeded:]:
        txn_id, meta = decode_record(key, value)
        before = last.get(txn_id)
        if meta is None:
            assert before is not None and before.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        elif before is None:
            assert meta.state == S.EMPTY and meta.producer_epoch == 0
        else:
            assert before.state in TRANSITIONS[meta.state] or (before.state, meta.state) == (S.ONGOING, S.PREPARE_ABORT)
            if meta.producer_id == before.producer_id:
                assert meta.producer_epoch >= before.producer_epoch
            else:
                assert meta.producer_epoch == 0 and epoch_exhausted(before.producer_epoch)
        if meta is not None:
            assert owner_of_pid.setdefault(meta.producer_id, txn_id) == txn_id
        last[txn_id] = meta


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, min_size=15, max_size=60), st.sampled_from([0, SHORT_MAX - 4]))
def test_property_against_a_model_of_the_producers(ops, first_epoch):
    h = Harness(TxnConfig(transactional_id_expiration_ms=100_000))
    client: dict[str, tuple[int, int]] = {}       # what each id's live producer holds (its last InitProducerId)
    stale: dict[str, set[tuple[int, int]]] = {i: set() for i in IDS}
    if first_epoch:                                # start near exhaustion through the log
        for txn_id in IDS:
            record = encode_record(TxnMetadata(txn_id, 500 + ord(txn_id), first_epoch, 1_000, S.EMPTY, T0), txn_id)
            h.log.append(record)
            h.core.replay(*record)
            client[txn_id] = (500 + ord(txn_id), first_epoch)
    else:
        for txn_id in IDS:
            step = ok(h.init(txn_id, 1_000))
            client[txn_id] = (step.response.producer_id, step.response.producer_epoch)
    for op in ops:
        kind, txn_id = op[0], (op[1] if len(op) > 1 and op[1] in IDS else None)
        meta_before = h.core.transactions.get(txn_id) if txn_id else None
        current = client.get(txn_id)
        pair = {"current": current, "stale": max(stale[txn_id], default=None) if txn_id else None,
                "other": (1, 0)}.get(op[2] if len(op) > 2 and isinstance(op[2], str) else "current")
        if kind == "init":
            expected = {"none": None, "current": current, "stale": pair}[op[2]]
            step = h.init(txn_id, 1_000, *(expected or (-1, -1)))
            if step.response.error == E.NONE:
                if current is not None:
                    stale[txn_id].add(current)
                client[txn_id] = (step.response.producer_id, step.response.producer_epoch)
            elif meta_before is not None and meta_before.state == S.ONGOING and expected in (None, current):
                assert step.response.error == E.CONCURRENT_TRANSACTIONS and len(step.response.markers) == 1  # fenced and aborting
        elif kind in ("add", "offsets", "end"):
            if pair is None:
                continue
            if kind == "add":
                step = h.add(*pair, *sorted(op[3]), txn_id=txn_id)
            elif kind == "offsets":
                step = h.add_offsets(*pair, txn_id=txn_id)
            else:
                step = h.end(*pair, op[3], txn_id=txn_id)
            meta = h.core.transactions.get(txn_id)
            if step.response.error == E.NONE:  # fencing: only the producer of the live id and epoch succeeds
                assert meta is not None and pair == (meta.producer_id, meta.producer_epoch)
            if pair in stale[txn_id] and pair != current:
                assert step.response.error in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING)
        elif kind == "written":
            pending = [m for m in h.core.markers_to_resend() if m.transactional_id == txn_id]
            if not pending:
                continue
            m = pending[0]
            ok(h.written(m.producer_id, m.producer_epoch, m.committed, txn_id=txn_id))
            assert h.core.transactions[txn_id].state == (S.COMPLETE_COMMIT if m.committed else S.COMPLETE_ABORT)
        elif kind == "tick":
            h.now_ms += op[1]
            continue
        elif kind == "timeouts":
            step = h.run(h.core.abort_timed_out(h.now_ms))
            assert not any(m.state == S.ONGOING and m.txn_start_timestamp_ms + m.txn_timeout_ms < h.now_ms
                           for m in h.core.transactions.values())
        elif kind == "expire":
            step = h.run(h.core.expire_transactional_ids(h.now_ms))
            for key, _ in step.records:
                gone = decode_record(key, None)[0]
                stale[gone].add(client.pop(gone))
        elif kind == "move":
            h.core = h.replayed()
            for m in h.core.transactions.values():
                h.core.on_appended([m.transactional_id])
            continue
        # every Prepare record comes with its markers, in the same step
        prepared = [meta for meta in (decode_record(k, v)[1] for k, v in step.records)
                    if meta is not None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)]
        sent = [(m.transactional_id, m.producer_id, m.producer_epoch, m.committed, m.partitions) for m in step.response.markers]
        assert sent == [(p.transactional_id, p.producer_id, p.producer_epoch, p.state == S.PREPARE_COMMIT,
                         tuple(sorted(p.partitions))) for p in prepared]
        h.assert_replay_equals_live()
    _check_log(h.log, seeded=len(IDS) if first_epoch else 0)


# ---- property: one transactional id against a naive model ------------------------------------------------------

class NaiveTxn:
    """The life of one transactional id as a producer sees it, written plainly (transaction version 1)."""

    def __init__(self):
        self.state, self.pid, self.epoch, self.parts, self.start, self.updated = None, None, None, set(), -1, -1

    def init(self, now, new_pid):
        if self.state in ("PrepareCommit", "PrepareAbort"):
            return E.CONCURRENT_TRANSACTIONS
        if self.state == "Ongoing":
            self.fence(now)
            return E.CONCURRENT_TRANSACTIONS
        if self.state is None or self.epoch >= SHORT_MAX - 1:
            self.pid, self.epoch = new_pid, 0
        else:
            self.epoch += 1
        self.state, self.parts, self.start, self.updated = "Empty", set(), -1, now
        return E.NONE

    def fence(self, now):
        self.epoch = min(self.epoch + 1, SHORT_MAX)
        self.state, self.updated = "PrepareAbort", now

    def add(self, now, pid, epoch, parts):
        if self.state is None or pid != self.pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if epoch != self.epoch:
            return E.PRODUCER_FENCED
        if self.state in ("PrepareCommit", "PrepareAbort"):
            return E.CONCURRENT_TRANSACTIONS
        if self.state != "Ongoing":
            self.start, self.parts = now, set()
        if self.state != "Ongoing" or not parts <= self.parts:
            self.updated = now
        self.state, self.parts = "Ongoing", self.parts | parts
        return E.NONE

    def end(self, now, pid, epoch, commit):
        if self.state is None or pid != self.pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if epoch != self.epoch:
            return E.PRODUCER_FENCED
        word = "Commit" if commit else "Abort"
        if self.state == "Ongoing":
            self.state, self.updated = "Prepare" + word, now
            return E.NONE
        if self.state == "Complete" + word:
            return E.NONE
        if self.state == "Prepare" + word:
            return E.CONCURRENT_TRANSACTIONS
        return E.INVALID_TXN_STATE

    def markers_written(self, now):
        if self.state in ("PrepareCommit", "PrepareAbort"):
            self.state, self.parts, self.updated = self.state.replace("Prepare", "Complete"), set(), now
            return True
        return False

    def tick(self, now, timeout_ms, expiration_ms):
        if self.state == "Ongoing" and self.start + timeout_ms < now:
            self.fence(now)
        elif self.state in ("Empty", "CompleteCommit", "CompleteAbort") and self.updated <= now - expiration_ms:
            self.state = None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.tuples(st.just("init")),
    st.tuples(st.just("add"), st.sampled_from(["live", "live", "live", "zombie"]),
              st.sets(st.sampled_from(PARTITIONS), min_size=1, max_size=2)),
    st.tuples(st.just("end"), st.sampled_from(["live", "live", "live", "zombie"]), st.booleans()),
    st.tuples(st.just("written")), st.tuples(st.just("written")),
    st.tuples(st.just("tick"), st.sampled_from([1, 400, 1_500, 30_000])),
    st.tuples(st.just("move")),
), min_size=10, max_size=60), st.sampled_from([-1, SHORT_MAX - 3]))
def test_one_transactional_id_against_a_naive_model(ops, start_epoch):
    timeout_ms, expiration_ms = 1_000, 20_000
    h = Harness(TxnConfig(transactional_id_expiration_ms=expiration_ms))
    model = NaiveTxn()
    live = zombie = (-1, -1)
    if start_epoch >= 0:
        at_epoch(h, start_epoch, timeout_ms=timeout_ms)
        model.state, model.pid, model.epoch, model.updated = "CompleteCommit", 500, start_epoch, T0
        live = (500, start_epoch)
    for op in ops:
        if op[0] == "init":
            new_pid = next(h.pids)
            h.pids = itertools.chain([new_pid], h.pids)
            step = h.init(timeout_ms=timeout_ms)
            assert step.response.error == model.init(h.now_ms, new_pid)
            if step.response.error == E.NONE:
                zombie, live = live, (step.response.producer_id, step.response.producer_epoch)
                assert live == (model.pid, model.epoch)
        elif op[0] in ("add", "end"):
            pid, epoch = live if op[1] == "live" else zombie
            if op[0] == "add":
                step = h.add(pid, epoch, *sorted(op[2]))
                assert step.response.error == model.add(h.now_ms, pid, epoch, set(op[2]))
            else:
                step = h.end(pid, epoch, op[2])
                assert step.response.error == model.end(h.now_ms, pid, epoch, op[2])
        elif op[0] == "written":
            for m in h.core.markers_to_resend():
                ok(h.written(m.producer_id, m.producer_epoch, m.committed))
            assert bool(h.core.markers_to_resend()) is False
            model.markers_written(h.now_ms)
        elif op[0] == "tick":
            h.now_ms += op[1]
            h.run(h.core.abort_timed_out(h.now_ms))
            h.run(h.core.expire_transactional_ids(h.now_ms))
            model.tick(h.now_ms, timeout_ms, expiration_ms)
        elif op[0] == "move":
            h.core = h.replayed()
        meta = h.core.transactions.get("tx")
        if model.state is None:
            assert meta is None
        else:
            assert (STATE_NAMES[meta.state], meta.producer_id, meta.producer_epoch, set(meta.partitions),
                    meta.txn_start_timestamp_ms if model.state != "Empty" else -1, meta.txn_last_update_timestamp_ms
                    ) == (model.state, model.pid, model.epoch, model.parts if "Complete" not in model.state else set(),
                          model.start if model.state != "Empty" else -1, model.updated)
    h.assert_replay_equals_live()
