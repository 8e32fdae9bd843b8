"""DescribeProducers (issue 19, KIP-664) without Ray: a partition's producer state as the response's ActiveProducers
(Kafka's fields and -1s), the gateway handler's per-topic and per-partition errors (ACLs: READ on the topic), and
the data-path frame from the gateway to the partition leader over a real Unix socket."""
import asyncio
import os
import tempfile
import uuid
from types import SimpleNamespace

import pytest

from actors.gateway.connection import ClientConnection
from actors.gateway.context import GatewayContext
from actors.gateway.handlers.producers import handle_describe_producers, producer_states
from actors.gateway.partition_client import DataPaths, PartitionNotHosted, SocketPartition
from actors.security.authorizer import (KAFKA_STANDARD_AUTHORIZER, AccessControlEntry, AclBinding,
                                        AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                        ResourceType)
from actors.security.principal import KafkaPrincipal
from actors.partition.core import PartitionConfig, PartitionCore
from actors.partition.listener import start_listener
from actors.partition.producer_state import ActiveProducer
from actors.config_schema import BROKER_DEFAULTS
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from protocol.messages import DescribeProducersRequest, DescribeProducersResponse
from protocol.record_batch import build_batch

E = ErrorCode
NOW = 1_700_000_000_000
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


# ---- the pure part: producer state -> ActiveProducers ------------------------------------------------------------

def _batch(pid, seq, n, *, epoch, transactional=False, ts=NOW):
    return build_batch([(b"k", b"v", [], ts + i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=transactional)


def _produce(core, data, now_ms=NOW):
    r = core.produce(memoryview(data), now_ms=now_ms, leader_epoch=0)
    assert r.error_code == 0, r
    core.log.high_watermark = core.log_end_offset
    return r.base_offset


def _described(core) -> dict[int, DescribeProducersResponse.ProducerState]:
    """The ActiveProducers a response carries for this partition, after a v0 round trip, by producer id."""
    response = DescribeProducersResponse(throttle_time_ms=0, topics=[DescribeProducersResponse.TopicResponse(
        name="t", partitions=[DescribeProducersResponse.PartitionResponse(
            partition_index=0, error_code=0, active_producers=producer_states(core.producers.active_producers()))])])
    decoded = DescribeProducersResponse.decode(response.encode(0), 0)
    return {p.producer_id: p for p in decoded.topics[0].partitions[0].active_producers}


def fields(p) -> tuple:
    return (p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch, p.current_txn_start_offset)


def test_idempotent_and_transactional_producers_as_active_producers(tmp_path):
    core = PartitionCore.open(tmp_path, PartitionConfig(), now_ms=NOW)
    assert _described(core) == {}
    _produce(core, build_batch([(b"k", b"plain", [], NOW)]))                 # offset 0: no producer id, not listed
    _produce(core, _batch(11, 0, 3, epoch=2))                               # offsets 1-3, sequences 0-2
    _produce(core, _batch(11, 3, 2, epoch=2, ts=NOW + 50))                  # offsets 4-5, sequences 3-4
    txn_start = _produce(core, _batch(22, 0, 2, epoch=5, transactional=True, ts=NOW + 100))  # offsets 6-7
    _produce(core, _batch(22, 2, 1, epoch=5, transactional=True, ts=NOW + 200))              # offset 8
    described = _described(core)
    assert set(described) == {11, 22}
    # idempotent: its epoch, the last sequence written, its newest batch's max timestamp, no marker, no transaction
    assert fields(described[11]) == (2, 4, NOW + 51, -1, -1)
    # transactional: the open transaction starts at its first batch, not its latest
    assert fields(described[22]) == (5, 2, NOW + 200, -1, txn_start)
    assert txn_start == 6

    r = core.append_marker(22, 5, 7, True, now_ms=NOW + 300, leader_epoch=0)  # COMMIT from coordinator epoch 7
    assert r.error_code == 0
    described = _described(core)
    # after the commit: no open transaction; the marker's coordinator epoch and time are the producer's
    assert fields(described[22]) == (5, 2, NOW + 300, 7, -1)
    assert fields(described[11]) == (2, 4, NOW + 51, -1, -1)


def test_a_marker_that_bumps_the_epoch_leaves_no_sequence():
    """Kafka keeps a producer's batches per epoch: a marker of a newer epoch (an InitProducerId that fenced the
    transaction) leaves the producer no cached batch, so LastSequence is -1, as Kafka's lastSeq answers."""
    from actors.partition.producer_state import ProducerStateTable
    table = ProducerStateTable()
    table.record(9, 0, 0, 4, 10, 14, NOW, transactional=True)
    table.record_marker(9, 1, 3, True, 15, NOW + 1)
    assert table.active_producers() == [ActiveProducer(9, 1, -1, NOW + 1, 3, -1)]


# ---- the handler: errors per topic and partition, ACLs -----------------------------------------------------------

class Leader:
    """A partition leader's data-path client, answering DescribeProducers with what it was given."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    async def describe_producers(self):
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Ctx:
    def __init__(self, leaders, readable=None):
        topic = SimpleNamespace(name="t", topic_id=TOPIC_ID, partitions=[0, 1, 2, 3])
        self.metadata = SimpleNamespace(topics={"t": topic, "secret": topic})
        self.leaders, self.readable = leaders, readable

    def access(self, connection):
        readable = self.readable
        return SimpleNamespace(allowed=lambda operation, resource_type, names: {
            n for n in names if readable is None or (operation, resource_type, n) in readable})

    def partition(self, topic_id, index, follower=False):
        return self.leaders.get(index)


def _request(*topics):
    return DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name=name, partition_indexes=list(ps))
                                            for name, ps in topics])


def _answers(response) -> dict:
    decoded = DescribeProducersResponse.decode(response.encode(0), 0)
    return {(t.name, p.partition_index): (p.error_code, [(s.producer_id, s.current_txn_start_offset)
                                                         for s in p.active_producers])
            for t in decoded.topics for p in t.partitions}


def test_each_partition_is_answered_by_its_leader_or_with_its_error():
    producer = ActiveProducer(5, 1, 9, NOW, -1, 40)
    leaders = {0: Leader((0, [producer])), 1: Leader((E.NOT_LEADER_OR_FOLLOWER, [])),
               2: Leader(PartitionNotHosted("moved"))}
    response = asyncio.run(handle_describe_producers(Ctx(leaders), None, _request(("t", [0, 1, 2, 3, 7]),
                                                                                  ("nope", [0]), ("bad/name", [0]))))
    assert _answers(response) == {
        ("t", 0): (0, [(5, 40)]),
        ("t", 1): (E.NOT_LEADER_OR_FOLLOWER, []),        # the replica no longer leads
        ("t", 2): (E.NOT_LEADER_OR_FOLLOWER, []),        # the leader's host does not host it now
        ("t", 3): (E.NOT_LEADER_OR_FOLLOWER, []),        # a partition another broker leads
        ("t", 7): (E.UNKNOWN_TOPIC_OR_PARTITION, []),    # no such partition
        ("nope", 0): (E.UNKNOWN_TOPIC_OR_PARTITION, []),
        ("bad/name", 0): (E.INVALID_TOPIC_EXCEPTION, []),
    }


def test_a_topic_the_principal_may_not_read_is_refused_per_partition_and_its_leader_not_asked():
    leader = Leader((0, [ActiveProducer(5, 1, 9, NOW, -1, -1)]))
    ctx = Ctx({0: leader}, readable={(AclOperation.READ, ResourceType.TOPIC, "t")})
    response = asyncio.run(handle_describe_producers(ctx, None, _request(("secret", [0, 1]), ("t", [0]))))
    assert _answers(response) == {("secret", 0): (E.TOPIC_AUTHORIZATION_FAILED, []),
                                  ("secret", 1): (E.TOPIC_AUTHORIZATION_FAILED, []),
                                  ("t", 0): (0, [(5, -1)])}
    assert leader.calls == 1


def _acl(name, operation):
    return AclBinding(ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW))


@pytest.mark.parametrize("operation,expected", [
    (AclOperation.DESCRIBE, E.TOPIC_AUTHORIZATION_FAILED),  # Kafka asks READ; DESCRIBE is not enough
    (AclOperation.READ, E.NOT_LEADER_OR_FOLLOWER),          # past the check: this gateway leads nothing
])
def test_kafkas_authorizer_asks_read_on_the_topic(operation, expected):
    ctx = GatewayContext(broker_id=1, config={**BROKER_DEFAULTS, "authorizer.class.name": KAFKA_STANDARD_AUTHORIZER},
                         controller=None)
    topic = SimpleNamespace(name="orders", topic_id=TOPIC_ID, internal=False, partitions=[SimpleNamespace(leader=2)])
    ctx.set_metadata(SimpleNamespace(version=1, acls=(_acl("orders", operation),), acl_version=1,
                                     partition_listeners={}, topics={"orders": topic}, topic_by_id=lambda i: None,
                                     brokers={}, cluster_id="c", controller_id=1, coordinators={}))
    connection = ClientConnection(("127.0.0.1", 5555), listener_name="SASL_PLAINTEXT",
                                  principal=KafkaPrincipal.user("alice"))
    response = asyncio.run(handle_describe_producers(ctx, RequestHeader(61, 0, 1, "test"),
                                                     _request(("orders", [0])), connection))
    assert _answers(response) == {("orders", 0): (expected, [])}


# ---- the data path: gateway -> the shard's listener -> the replica -------------------------------------------------

def test_the_leader_answers_over_the_data_path_and_an_unhosted_partition_is_not_hosted():
    class Replica:
        def describe_producers(self):
            return 0, [ActiveProducer(5, 1, 9, NOW, 3, 40), ActiveProducer(6, 0, -1, NOW + 1, -1, -1)]

    async def main():
        address = os.path.join(tempfile.mkdtemp(), "shard.sock")
        server = await start_listener({(TOPIC_ID, 0): Replica()}.get, address, 1 << 20, asyncio.Event)
        paths = DataPaths()
        try:
            assert await SocketPartition(address, (TOPIC_ID, 0), paths).describe_producers() == (
                0, [ActiveProducer(5, 1, 9, NOW, 3, 40), ActiveProducer(6, 0, -1, NOW + 1, -1, -1)])
            with pytest.raises(PartitionNotHosted):
                await SocketPartition(address, (TOPIC_ID, 1), paths).describe_producers()
        finally:
            paths.close(address)
            server.close()
    asyncio.run(main())
