"""Where the gateway sends a transactional id's requests (issue 19): to the coordinator of the `__transaction_state`
partition the id hashes to (Kafka's partitionFor), and only where this broker leads that partition; elsewhere it
answers NOT_COORDINATOR (the producer finds the coordinator again) and FindCoordinator names the leader's broker."""
import asyncio
from types import SimpleNamespace

from actors import internal_topics
from actors.gateway.context import GatewayContext
from actors.gateway.handlers.groups import handle_find_coordinator
from actors.gateway.handlers.transactions import (handle_add_offsets_to_txn, handle_add_partitions_to_txn,
                                                  handle_end_txn, handle_transactional_init_producer_id)
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader

E = ErrorCode
PARTITIONS = 50
THIS_BROKER, OTHER_BROKER = 1, 2


def _context():
    """Broker 1, whose image says broker 2 leads every __transaction_state partition."""
    state = SimpleNamespace(name=internal_topics.TRANSACTION_STATE, internal=True,
                            partitions=[SimpleNamespace(leader=OTHER_BROKER) for _ in range(PARTITIONS)])
    orders = SimpleNamespace(name="orders", internal=False, partitions=[SimpleNamespace(leader=THIS_BROKER)])
    brokers = {b: SimpleNamespace(broker_id=b, host=f"10.0.0.{b}", port=9092, endpoints={}) for b in (1, 2)}
    ctx = GatewayContext(broker_id=THIS_BROKER, config={}, controller=None)
    ctx.set_metadata(SimpleNamespace(
        version=1, acls=(), acl_version=0, partition_listeners={}, brokers=brokers, cluster_id="c", controller_id=1,
        topics={t.name: t for t in (state, orders)}, topic_by_id=lambda i: None,
        coordinators={(internal_topics.TRANSACTION_STATE, i): object() for i in range(PARTITIONS)}))
    return ctx


def _answer(handler, api_key, version, request):
    return asyncio.run(asyncio.wait_for(handler(_context(), RequestHeader(api_key, version, 1, "t"), request, None),
                                        10))


def test_requests_for_a_partition_led_elsewhere_answer_not_coordinator():
    init = _answer(handle_transactional_init_producer_id, 22, 4,
                   m.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000))
    assert (init.error_code, init.producer_id) == (E.NOT_COORDINATOR, -1)
    end = _answer(handle_end_txn, 26, 3, m.EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0,
                                                         committed=True))
    assert end.error_code == E.NOT_COORDINATOR
    offsets = _answer(handle_add_offsets_to_txn, 25, 3, m.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g"))
    assert offsets.error_code == E.NOT_COORDINATOR
    R = m.AddPartitionsToTxnRequest
    added = _answer(handle_add_partitions_to_txn, 24, 3, R(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[R.AddPartitionsToTxnTopic(name="orders", partitions=[0])]))
    assert [(t.name, [p.partition_error_code for p in t.results_by_partition])
            for t in added.results_by_topic_v3_and_below] == [("orders", [E.NOT_COORDINATOR])]


def test_an_empty_transactional_id_is_an_invalid_request():
    init = _answer(handle_transactional_init_producer_id, 22, 4,
                   m.InitProducerIdRequest(transactional_id="", transaction_timeout_ms=60000))
    assert init.error_code == E.INVALID_REQUEST


def test_find_coordinator_names_the_leader_of_the_ids_partition():
    found = _answer(handle_find_coordinator, 10, 4, m.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx", ""]))
    assert [(c.key, c.error_code, c.node_id, c.host) for c in found.coordinators] == [
        ("tx", 0, OTHER_BROKER, "10.0.0.2"), ("", E.INVALID_REQUEST, -1, "")]
    # Kafka's mapping, so operators find the same partition: abs("tx".hashCode()) % 50 = (116 * 31 + 120) % 50
    assert internal_topics.transaction_partition("tx", PARTITIONS) == 16
