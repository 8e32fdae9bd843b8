"""The transaction coordinator moves with its `__transaction_state` partition: killed and restarted, its shard's new
coordinator replays the partition and goes on where the old one stopped. An Ongoing transaction keeps its producer
id, epoch and partitions (the producer carries on, unfenced); one that was committing (PrepareCommit) is still
committing and its markers are sent again by the new coordinator (until the partition leaders take WriteTxnMarkers,
issue 19's log side, they stay pending; after, the transaction is CompleteCommit)."""
import time

import ray
from confluent_kafka.admin import AdminClient, NewTopic

from actors import internal_topics
from cluster.admin import KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest,
                               FindCoordinatorRequest, InitProducerIdRequest)
from tests.actors.restarts import host_of, inspect_replica, kill_and_await_restart, leader_replica

E = ErrorCode
RETRIED = (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR,
           E.CONCURRENT_TRANSACTIONS)


def _retrying(send, error_of, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            r = send()
        except Exception:  # the broker's connection broke with the shard: connect again
            r = None
        if r is not None and (error_of(r) not in RETRIED or time.monotonic() > deadline):
            return r
        assert time.monotonic() < deadline, "no answer from the coordinator"
        time.sleep(0.3)


def _add(bootstrap, txn, producer_id, epoch, topic, partitions):
    R = AddPartitionsToTxnRequest

    def send():
        with KafkaConnection(bootstrap) as conn:
            return conn.send(R(v3_and_below_transactional_id=txn, v3_and_below_producer_id=producer_id,
                               v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                                   R.AddPartitionsToTxnTopic(name=topic, partitions=partitions)]), 3)
    r = _retrying(send, lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
    return {p.partition_index: p.partition_error_code for p in r.results_by_topic_v3_and_below[0].results_by_partition}


def _describe(bootstrap, txn):
    def send():
        with KafkaConnection(bootstrap) as conn:
            return conn.send(DescribeTransactionsRequest(transactional_ids=[txn]), 0).transaction_states[0]
    return _retrying(send, lambda s: s.error_code)


def _init(bootstrap, txn):
    def send():
        with KafkaConnection(bootstrap) as conn:
            return conn.send(InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=120000), 4)
    return _retrying(send, lambda r: r.error_code)


def test_a_restarted_coordinator_replays_its_transactions_and_resends_markers(broker):
    topic = "txn-restart"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    with KafkaConnection(broker.bootstrap) as conn:
        found = _retrying(lambda: conn.send(FindCoordinatorRequest(key_type=1, coordinator_keys=["ongoing", "ending"]),
                                            4), lambda r: max(c.error_code for c in r.coordinators))
        assert [c.error_code for c in found.coordinators] == [0, 0]
    ongoing, ending = _init(broker.bootstrap, "ongoing"), _init(broker.bootstrap, "ending")
    assert (ongoing.error_code, ending.error_code) == (0, 0)
    assert _add(broker.bootstrap, "ongoing", ongoing.producer_id, ongoing.producer_epoch, topic, [0, 1]) == {0: 0, 1: 0}
    assert _add(broker.bootstrap, "ending", ending.producer_id, ending.producer_epoch, topic, [1]) == {1: 0}
    with KafkaConnection(broker.bootstrap) as conn:
        assert conn.send(EndTxnRequest(transactional_id="ending", producer_id=ending.producer_id,
                                       producer_epoch=ending.producer_epoch, committed=True), 3).error_code == 0

    image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    count = len(image.topics[internal_topics.TRANSACTION_STATE].partitions)
    assert count == 50  # Kafka's transaction.state.log.num.partitions
    coordinators = {txn: leader_replica(broker.controller, internal_topics.TRANSACTION_STATE,
                                        internal_topics.transaction_partition(txn, count))
                    for txn in ("ongoing", "ending")}
    for shard in {id(host_of(c)): host_of(c) for c in coordinators.values()}.values():
        kill_and_await_restart(shard)

    # before any client asks, the new coordinator has loaded its partition and sends the committing transaction's
    # markers again (Kafka loads on election: the partitions' last stable offsets must not wait for a client)
    def committing():
        try:
            return inspect_replica(coordinators["ending"], lambda r: (
                r.shard is not None and r.shard.transactions["ending"].state.name,
                r.sender.pending() if r.sender is not None else set()))
        except Exception:  # not hosted again yet
            return None
    deadline = time.monotonic() + 60
    while (seen := committing()) is None or seen[0] is False:
        assert time.monotonic() < deadline, "the coordinator did not load its partition on election"
        time.sleep(0.3)
    assert seen in (("PREPARE_COMMIT", {"ending"}), ("COMPLETE_COMMIT", set()))

    state = _describe(broker.bootstrap, "ongoing")
    assert (state.error_code, state.transaction_state, state.producer_id, state.producer_epoch) == (
        0, "Ongoing", ongoing.producer_id, ongoing.producer_epoch)
    assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [(topic, [0, 1])]
    # the producer carries on with its epoch: it was not fenced by the move
    assert _add(broker.bootstrap, "ongoing", ongoing.producer_id, ongoing.producer_epoch, topic, [0]) == {0: 0}

    state = _describe(broker.bootstrap, "ending")
    assert (state.error_code, state.producer_id, state.producer_epoch) == (0, ending.producer_id,
                                                                           ending.producer_epoch)
    assert state.transaction_state in ("PrepareCommit", "CompleteCommit")
