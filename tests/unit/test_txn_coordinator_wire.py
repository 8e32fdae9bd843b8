"""actors/transaction_coordinator/wire.py: Kafka's transaction requests to the core's inputs, TxnResponses to responses
(encoded in every version), and the marker traffic to partition leaders."""
import msgpack
import pytest

from actors.transaction_coordinator import wire
from actors.transaction_coordinator.core import (EndTxn, InitProducerId, Markers, MarkersWritten,
                                                 TransactionCoordinatorCore, TxnResponse)
from protocol.errors import ErrorCode as E
from protocol.messages import (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, DescribeTransactionsResponse,
                               EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
                               ListTransactionsResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse)

T0 = 1_700_000_000_000


def roundtrip(message, version):
    return type(message).decode(message.encode(version), version)


def test_init_producer_id():
    request = InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60_000, producer_id=5,
                                    producer_epoch=2)
    assert wire.init_producer_id_input(request, 77) == InitProducerId("tx", 60_000, 77, 5, 2)
    assert wire.init_producer_id_input(InitProducerIdRequest(transactional_id="tx", enable2_pc=True), 1) == \
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert wire.init_producer_id_input(InitProducerIdRequest(transactional_id="tx", keep_prepared_txn=True), 1) == \
        E.UNSUPPORTED_VERSION
    response = wire.init_producer_id_response(4, TxnResponse(producer_id=77, producer_epoch=0))
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 77, 0)
    assert wire.init_producer_id_response(3, TxnResponse(error=E.PRODUCER_FENCED)).error_code == E.INVALID_PRODUCER_EPOCH
    assert wire.init_producer_id_response(4, TxnResponse(error=E.PRODUCER_FENCED)).error_code == E.PRODUCER_FENCED
    failed = wire.init_producer_id_response(5, E.INVALID_TRANSACTION_TIMEOUT)
    assert (failed.producer_id, failed.producer_epoch) == (-1, -1)
    for version in range(0, 7):
        assert roundtrip(response, version).producer_id == 77


def test_end_txn():
    request = EndTxnRequest(transactional_id="tx", producer_id=5, producer_epoch=2, committed=True)
    assert wire.end_txn_input(request, 4) == EndTxn("tx", 5, 2, True)
    assert wire.end_txn_input(request, 5) == EndTxn("tx", 5, 2, True, transaction_version=2)
    response = wire.end_txn_response(5, TxnResponse(producer_id=5, producer_epoch=2))
    assert (roundtrip(response, 5).producer_id, roundtrip(response, 5).producer_epoch) == (5, 2)
    fenced = wire.end_txn_response(1, TxnResponse(error=E.PRODUCER_FENCED))
    assert (fenced.error_code, fenced.producer_id) == (E.INVALID_PRODUCER_EPOCH, -1)
    assert wire.add_offsets_response(1, TxnResponse(error=E.PRODUCER_FENCED)).error_code == E.INVALID_PRODUCER_EPOCH
    assert wire.add_offsets_response(2, TxnResponse(error=E.PRODUCER_FENCED)).error_code == E.PRODUCER_FENCED
    for version in range(0, 6):
        decoded = roundtrip(wire.end_txn_response(version, TxnResponse(error=E.CONCURRENT_TRANSACTIONS)), version)
        assert isinstance(decoded, EndTxnResponse) and decoded.error_code == E.CONCURRENT_TRANSACTIONS


def test_add_partitions_v3_and_below_through_the_core():
    core = TransactionCoordinatorCore()
    step = core.init_producer_id(InitProducerId("tx", 60_000, 9), T0)
    core.on_appended(["tx"])
    R = AddPartitionsToTxnRequest
    request = R(v3_and_below_transactional_id="tx", v3_and_below_producer_id=9, v3_and_below_producer_epoch=0,
                v3_and_below_topics=[R.AddPartitionsToTxnTopic(name="t", partitions=[1, 0]),
                                     R.AddPartitionsToTxnTopic(name="u", partitions=[0])])
    inputs = wire.add_partitions_inputs(roundtrip(request, 3), 3)
    assert [i.partitions for i in inputs] == [(("t", 1), ("t", 0), ("u", 0))]
    steps = [core.add_partitions(i, T0).response for i in inputs]
    core.on_appended(["tx"])
    response = roundtrip(wire.add_partitions_response(3, inputs, steps), 3)
    assert [(t.name, [(p.partition_index, p.partition_error_code) for p in t.results_by_partition])
            for t in response.results_by_topic_v3_and_below] == [("t", [(0, 0), (1, 0)]), ("u", [(0, 0)])]
    fenced = wire.add_partitions_response(1, inputs, [core.add_partitions(inputs[0]._replace(producer_epoch=3), T0).response])
    assert {p.partition_error_code for t in fenced.results_by_topic_v3_and_below for p in t.results_by_partition} \
        == {E.INVALID_PRODUCER_EPOCH}
    assert step.response.error == E.NONE


def test_add_partitions_v4_batch_and_verification():
    R = AddPartitionsToTxnRequest
    request = R(transactions=[
        R.AddPartitionsToTxnTransaction(transactional_id="a", producer_id=1, producer_epoch=0, verify_only=True,
                                        topics=[R.AddPartitionsToTxnTopic(name="t", partitions=[0])]),
        R.AddPartitionsToTxnTransaction(transactional_id="b", producer_id=2, producer_epoch=0,
                                        topics=[R.AddPartitionsToTxnTopic(name="t", partitions=[1])])])
    inputs = wire.add_partitions_inputs(roundtrip(request, 5), 5)
    assert [(i.transactional_id, i.verify_only) for i in inputs] == [("a", True), ("b", False)]
    steps = [TxnResponse(partition_errors={("t", 0): E.TRANSACTION_ABORTABLE}), {("t", 1): E.UNKNOWN_TOPIC_OR_PARTITION}]
    response = roundtrip(wire.add_partitions_response(5, inputs, steps), 5)
    assert response.error_code == 0
    assert [(r.transactional_id, r.topic_results[0].results_by_partition[0].partition_error_code)
            for r in response.results_by_transaction] == [("a", E.TRANSACTION_ABORTABLE),
                                                          ("b", E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert isinstance(response, AddPartitionsToTxnResponse)


def test_describe_and_list_transactions():
    core = TransactionCoordinatorCore()
    core.init_producer_id(InitProducerId("tx", 60_000, 9), T0)
    core.on_appended(["tx"])
    core.add_partitions(wire.add_partitions_inputs(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=9, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[2, 0])]),
        3)[0], T0 + 5)
    results = [(i, *core.describe(i)) for i in ("tx", "nope")]
    response = roundtrip(wire.describe_transactions_response(results), 0)
    found, missing = response.transaction_states
    assert (found.transaction_state, found.producer_id, found.transaction_start_time_ms, found.topics) == (
        "Ongoing", 9, T0 + 5, [DescribeTransactionsResponse.TopicData(topic="t", partitions=[0, 2])])
    assert (missing.error_code, missing.transactional_id) == (E.TRANSACTIONAL_ID_NOT_FOUND, "nope")
    listed = wire.list_transactions_response(core.list_transactions(T0 + 10, ["Ongoing", "Nope"]))
    for version in range(0, 3):
        decoded = ListTransactionsResponse.decode(listed.encode(version), version)
        assert [(t.transactional_id, t.producer_id, t.transaction_state) for t in decoded.transaction_states] == [
            ("tx", 9, "Ongoing")]
        assert decoded.unknown_state_filters == ["Nope"]


# ---- markers -----------------------------------------------------------------------------------------------------

LEADERS = {("t", 0): 1, ("t", 1): 2, ("u", 0): 1}


def marker(txn_id="tx", pid=9, epoch=0, committed=True, partitions=(("t", 0), ("t", 1), ("u", 0))):
    return Markers(txn_id, pid, epoch, committed, 4, partitions)


def response_for(request, errors=None):
    errors = errors or {}
    R = WriteTxnMarkersResponse
    return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
        R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=errors.get((t.name, p), 0))
            for p in t.partition_indexes]) for t in m.topics]) for m in request.markers])


def test_requests_grouped_by_leader():
    requests, leaderless = wire.write_txn_markers_requests(
        [marker(), marker("tx2", 10, 3, False, (("t", 1), ("x", 0)))], LEADERS.get)
    assert sorted(requests) == [1, 2] and leaderless == [(marker("tx2", 10, 3, False, (("t", 1), ("x", 0))),
                                                          ("x", 0))]
    to_1 = roundtrip(requests[1], 2)
    assert [(m.producer_id, m.transaction_result, m.coordinator_epoch,
             [(t.name, t.partition_indexes) for t in m.topics]) for m in to_1.markers] == [
        (9, True, 4, [("t", [0]), ("u", [0])])]
    assert [(m.producer_id, m.producer_epoch, m.transaction_result) for m in requests[2].markers] == [
        (9, 0, True), (10, 3, False)]
    assert isinstance(roundtrip(requests[2], 1), WriteTxnMarkersRequest)


@pytest.mark.parametrize("error,outcome", [(E.NONE, "done"), (E.UNSUPPORTED_VERSION, "done"),
                                           (E.UNSUPPORTED_FOR_MESSAGE_FORMAT, "done"),
                                           (E.NOT_LEADER_OR_FOLLOWER, "retry"), (E.REQUEST_TIMED_OUT, "retry"),
                                           (E.UNKNOWN_TOPIC_OR_PARTITION, "retry"), (E.KAFKA_STORAGE_ERROR, "retry"),
                                           (E.NOT_ENOUGH_REPLICAS, "retry"),
                                           (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, "retry"),
                                           (E.INVALID_PRODUCER_EPOCH, "cancel"),
                                           (E.TRANSACTION_COORDINATOR_FENCED, "cancel")])
def test_marker_outcome(error, outcome):
    assert wire.marker_outcome(error) == outcome


def test_marker_outcome_of_a_bug():
    with pytest.raises(RuntimeError):
        wire.marker_outcome(E.CORRUPT_MESSAGE)


def test_marker_progress_completes_after_every_partition():
    progress = wire.MarkerProgress()
    assert progress.start(marker(partitions=())) == MarkersWritten("tx", 9, 0, True)  # nothing to write
    assert progress.start(marker()) is None
    sent, leaderless = progress.requests(LEADERS.get)
    assert [broker for _, broker, _ in sent] == [1, 2] and not leaderless
    assert progress.requests(LEADERS.get) == ([], [])  # all in flight
    (id1, _, req1), (id2, _, req2) = sent
    assert progress.answer(id1, response_for(req1, {("u", 0): E.NOT_LEADER_OR_FOLLOWER})) == []
    progress.failed(id2)  # no answer from broker 2
    again, _ = progress.requests({("t", 1): 2, ("u", 0): 3}.get)
    assert sorted((b, [(t.name, t.partition_indexes) for t in r.markers[0].topics]) for _, b, r in again) == [
        (2, [("t", [1])]), (3, [("u", [0])])]
    (id3, _, req3), (id4, _, req4) = again
    assert progress.answer(id3, response_for(req3)) == []
    assert progress.answer(id4, response_for(req4)) == [MarkersWritten("tx", 9, 0, True)]
    assert progress.waiting == {} and progress.in_flight == {}


def test_marker_progress_cancel_and_stale_answers():
    progress = wire.MarkerProgress()
    progress.start(marker())
    sent, _ = progress.requests(LEADERS.get)
    (id1, _, req1), (id2, _, req2) = sent
    assert progress.answer(id1, response_for(req1, {("t", 0): E.INVALID_PRODUCER_EPOCH})) == []
    assert progress.waiting == {}  # fenced: a newer producer or coordinator completes it
    assert progress.answer(id2, response_for(req2)) == []  # stale: ignored
    # the same id's next transaction: an answer for the previous one does not count for it
    progress.start(marker(committed=False))
    sent, _ = progress.requests(LEADERS.get)
    assert progress.answer(id1, response_for(req1)) == []
    assert set(progress.waiting["tx"][1]) == {("t", 0), ("t", 1), ("u", 0)}
    done = []
    for request_id, _, request in sent:
        done += progress.answer(request_id, response_for(request))
    assert done == [MarkersWritten("tx", 9, 0, False)]
    progress.start(marker())
    progress.cancel("tx")
    assert progress.requests(LEADERS.get) == ([], [])


def test_a_missing_partition_in_the_answer_is_retried():
    progress = wire.MarkerProgress()
    progress.start(marker(partitions=(("t", 0),)))
    (request_id, _, request), = progress.requests(LEADERS.get)[0]
    assert progress.answer(request_id, WriteTxnMarkersResponse(markers=[])) == []
    assert len(progress.requests(LEADERS.get)[0]) == 1


def test_a_response_crosses_the_data_path_with_its_error_and_partition_errors():
    """TXN_COORDINATOR frames (msgpack) carry what the gateway answers with: the error and each partition's (not
    the markers, which stay with the coordinator)."""
    response = TxnResponse(error=E.CONCURRENT_TRANSACTIONS, markers=(marker(),),
                           partition_errors={("orders", 0): E.NONE, ("orders", 3): E.INVALID_PRODUCER_EPOCH})
    back = wire.txn_response(msgpack.unpackb(msgpack.packb(wire.txn_answer(response))))
    assert back.error == E.CONCURRENT_TRANSACTIONS and back.markers == ()
    assert back.partition_errors == response.partition_errors
    assert wire.txn_response(msgpack.unpackb(msgpack.packb(wire.txn_answer(TxnResponse())))).partition_errors is None
