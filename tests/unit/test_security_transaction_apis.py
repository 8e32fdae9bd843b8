"""The transaction APIs' ACL checks at the gateway, as Kafka's KafkaApis makes them (issue 19): a principal without
WRITE on its transactional id cannot start, extend or end a transaction nor produce transactional records; without
WRITE on a topic it cannot add it; an internal topic is never added by a client; brokers' AddPartitionsToTxn v4+
needs CLUSTER_ACTION; DescribeTransactions needs DESCRIBE. Every refusal comes before any coordinator: the gateway
here has none (its controller is None), so a handler that went past its check would fail instead of answering."""
import asyncio
from types import SimpleNamespace

from actors.gateway.connection import ClientConnection
from actors.gateway.context import GatewayContext
from actors.gateway.handlers.groups import handle_find_coordinator
from actors.gateway.handlers.transactions import (handle_add_partitions_to_txn, handle_describe_transactions,
                                                  handle_end_txn, handle_transactional_init_producer_id,
                                                  transactional_produce)
from actors.security.authorizer import (KAFKA_STANDARD_AUTHORIZER, AccessControlEntry, AclBinding,
                                        AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                        ResourceType)
from actors.security.principal import KafkaPrincipal
from actors.config_schema import BROKER_DEFAULTS
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from protocol.record_batch import build_batch

E, Op, Res = ErrorCode, AclOperation, ResourceType
TXN, TOPIC, OTHER = "tx", "orders", "audit"


def _acl(resource_type, name, operation):
    return AclBinding(ResourcePattern(resource_type, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW))


def _topic(name, internal=False):
    return SimpleNamespace(name=name, internal=internal, partitions=[SimpleNamespace(leader=1)])


def _context(*acls):
    ctx = GatewayContext(broker_id=1, config={**BROKER_DEFAULTS, "authorizer.class.name": KAFKA_STANDARD_AUTHORIZER},
                         controller=None)
    topics = {t.name: t for t in (_topic(TOPIC), _topic(OTHER), _topic("__consumer_offsets", internal=True))}
    ctx.set_metadata(SimpleNamespace(version=1, acls=tuple(acls), acl_version=1, partition_listeners={},
                                     topics=topics, topic_by_id=lambda i: None, brokers={}, cluster_id="c",
                                     controller_id=1, coordinators={}))
    return ctx


def _answer(ctx, handler, api_key, version, request):
    connection = ClientConnection(("127.0.0.1", 5555), listener_name="SASL_PLAINTEXT",
                                  principal=KafkaPrincipal.user("alice"))
    return asyncio.run(asyncio.wait_for(handler(ctx, RequestHeader(api_key, version, 1, "test"), request, connection),
                                        10))


def _add_v3(*topics):
    R = m.AddPartitionsToTxnRequest
    return R(v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
             v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=[0]) for t in topics])


def _errors_v3(response):
    return {t.name: t.results_by_partition[0].partition_error_code for t in response.results_by_topic_v3_and_below}


def test_init_producer_id_needs_write_on_the_transactional_id():
    ctx = _context(_acl(Res.TRANSACTIONAL_ID, TXN, Op.DESCRIBE))
    r = _answer(ctx, handle_transactional_init_producer_id, 22, 4,
                m.InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=60000))
    assert (r.error_code, r.producer_id, r.producer_epoch) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)


def test_add_partitions_needs_write_on_the_transactional_id():
    ctx = _context(_acl(Res.TOPIC, TOPIC, Op.WRITE))
    assert _errors_v3(_answer(ctx, handle_add_partitions_to_txn, 24, 3, _add_v3(TOPIC))) == {
        TOPIC: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


def test_a_topic_not_writable_fails_the_whole_request_and_the_others_are_not_attempted():
    ctx = _context(_acl(Res.TRANSACTIONAL_ID, TXN, Op.WRITE), _acl(Res.TOPIC, TOPIC, Op.WRITE))
    assert _errors_v3(_answer(ctx, handle_add_partitions_to_txn, 24, 3, _add_v3(TOPIC, OTHER))) == {
        TOPIC: E.OPERATION_NOT_ATTEMPTED, OTHER: E.TOPIC_AUTHORIZATION_FAILED}


def test_a_client_never_adds_an_internal_topic_even_with_every_acl():
    ctx = _context(_acl(Res.TRANSACTIONAL_ID, TXN, Op.WRITE), _acl(Res.TOPIC, "*", Op.ALL))
    assert _errors_v3(_answer(ctx, handle_add_partitions_to_txn, 24, 3, _add_v3("__consumer_offsets"))) == {
        "__consumer_offsets": E.TOPIC_AUTHORIZATION_FAILED}


def test_the_brokers_batched_add_partitions_needs_cluster_action():
    R = m.AddPartitionsToTxnRequest
    request = R(transactions=[R.AddPartitionsToTxnTransaction(
        transactional_id=TXN, producer_id=1, producer_epoch=0, verify_only=True,
        topics=[R.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])])])
    ctx = _context(_acl(Res.TRANSACTIONAL_ID, TXN, Op.WRITE), _acl(Res.TOPIC, TOPIC, Op.WRITE))
    r = _answer(ctx, handle_add_partitions_to_txn, 24, 4, request)
    assert (r.error_code, r.results_by_transaction) == (E.CLUSTER_AUTHORIZATION_FAILED, [])


def test_end_txn_needs_write_on_the_transactional_id():
    ctx = _context(_acl(Res.TRANSACTIONAL_ID, TXN, Op.DESCRIBE))
    r = _answer(ctx, handle_end_txn, 26, 3, m.EndTxnRequest(transactional_id=TXN, producer_id=1, producer_epoch=0,
                                                            committed=True))
    assert r.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_describe_transactions_and_find_coordinator_need_describe_on_the_transactional_id():
    ctx = _context(_acl(Res.TOPIC, TOPIC, Op.ALL))
    r = _answer(ctx, handle_describe_transactions, 65, 0, m.DescribeTransactionsRequest(transactional_ids=[TXN]))
    assert [(s.transactional_id, s.error_code) for s in r.transaction_states] == [
        (TXN, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    found = _answer(ctx, handle_find_coordinator, 10, 4, m.FindCoordinatorRequest(key_type=1, coordinator_keys=[TXN]))
    assert [(c.key, c.error_code) for c in found.coordinators] == [(TXN, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]


def _produce(transactional_id, transactional):
    R = m.ProduceRequest
    batch = build_batch([(b"k", b"v", [], 0)], producer_id=1, producer_epoch=0, base_sequence=0,
                        is_transactional=transactional)
    return R(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[R.TopicProduceData(
        name=TOPIC, partition_data=[R.PartitionProduceData(index=0, records=batch),
                                    R.PartitionProduceData(index=1, records=batch)])])


def test_transactional_records_need_write_on_a_transactional_id_and_nothing_is_appended():
    appended = []

    async def handle_produce(ctx, header, request, connection=None):
        appended.append(request)
        return "appended"
    handler = transactional_produce(handle_produce)
    only_topic = _context(_acl(Res.TOPIC, TOPIC, Op.WRITE))
    for transactional_id in (TXN, None):  # without WRITE on the id; with no id at all
        r = _answer(only_topic, handler, 0, 9, _produce(transactional_id, transactional=True))
        assert [(p.index, p.error_code) for p in r.responses[0].partition_responses] == [
            (0, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), (1, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    assert appended == []
    assert _answer(only_topic, handler, 0, 9, _produce(None, transactional=False)) == "appended"  # idempotent
    allowed = _context(_acl(Res.TOPIC, TOPIC, Op.WRITE), _acl(Res.TRANSACTIONAL_ID, TXN, Op.WRITE))
    assert _answer(allowed, handler, 0, 9, _produce(TXN, transactional=True)) == "appended"
