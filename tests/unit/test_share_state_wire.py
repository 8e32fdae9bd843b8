"""The share coordinator's state listener and the leaders' pipelined client, over real loopback
sockets, with a recording stand-in for the coordinator (its shard is tested on its own)."""
import asyncio
import uuid

import pytest

from actors.gateway.frontend import start_frontend
from actors.gateway.security.inter_broker import (SECRET_KEY, BrokerLoginFailed, state_listener_security,
                                                  with_broker_secret)
from actors.share_coordinator.core import ReadResult, StateBatch, SummaryResult
from actors.share_coordinator.wire import STATE_ROUTES, StateListenerContext
from actors.pipelined import PipelinedConnection
from actors.share_partition.state_client import StateConnection, StateConnectionError
from protocol.errors import ErrorCode
from protocol.messages import (ApiVersionsRequest, DeleteShareGroupStateRequest, ReadShareGroupStateRequest,
                               WriteShareGroupStateRequest)

CONFIG = with_broker_secret({"socket.request.max.bytes": 1 << 20, "connections.max.idle.ms": 60000,
                             "connection.failed.authentication.delay.ms": 10})
TOPIC = uuid.uuid4()


class RecordingCoordinator:
    def __init__(self, delay_s=0.0):
        self.writes, self.delay_s = [], delay_s

    async def write_state(self, group_id, topic_id, partition, state_epoch, leader_epoch, start_offset, batches,
                          delivery_complete_count):
        self.writes.append((group_id, topic_id, partition, state_epoch, leader_epoch, start_offset, batches))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return (ErrorCode.FENCED_STATE_EPOCH, "stale") if state_epoch < 0 else (0, None)

    async def read_state(self, group_id, topic_id, partition, leader_epoch):
        return ReadResult(0, None, 3, 40, (StateBatch(40, 44, 0, 2),), [])

    async def delete_state(self, group_id, topic_id, partition):
        return 0, None

    async def initialize_state(self, *args):
        return 0, None

    async def read_state_summary(self, group_id, topic_id, partition):
        return SummaryResult(0, None, 3, 1, 40, -1)


def write_request(start_offset, state_epoch=1):
    W = WriteShareGroupStateRequest
    return W(group_id="g", topics=[W.WriteStateData(topic_id=TOPIC, partitions=[W.PartitionData(
        partition=0, state_epoch=state_epoch, leader_epoch=2, start_offset=start_offset, delivery_complete_count=-1,
        state_batches=[W.StateBatch(first_offset=start_offset, last_offset=start_offset + 9, delivery_state=2,
                                    delivery_count=1)])])])


async def serve(coordinator):
    ctx = StateListenerContext(coordinator, CONFIG)
    server = await start_frontend(ctx, "127.0.0.1", 0, STATE_ROUTES, security=state_listener_security(CONFIG))
    return server, server.sockets[0].getsockname()[1]


def test_pipelined_writes_are_applied_in_order_and_answered_by_correlation_id():
    async def run():
        coordinator = RecordingCoordinator(delay_s=0.001)
        server, port = await serve(coordinator)
        connection = await StateConnection.open("127.0.0.1", port, 5, CONFIG)
        answers = await asyncio.gather(*(connection.call(write_request(100 * i, state_epoch=-1 if i == 7 else 1), 1, 5)
                                         for i in range(20)))
        connection.close()
        server.close()
        return coordinator, answers

    coordinator, answers = asyncio.run(run())
    assert [w[5] for w in coordinator.writes] == [100 * i for i in range(20)]
    assert coordinator.writes[0][6] == [(0, 9, 2, 1)]
    codes = [a.results[0].partitions[0].error_code for a in answers]
    assert codes == [ErrorCode.FENCED_STATE_EPOCH if i == 7 else 0 for i in range(20)]
    assert answers[7].results[0].partitions[0].error_message == "stale"


def test_read_and_delete_and_api_versions_over_the_wire():
    async def run():
        server, port = await serve(RecordingCoordinator())
        connection = await StateConnection.open("127.0.0.1", port, 5, CONFIG)
        R, D = ReadShareGroupStateRequest, DeleteShareGroupStateRequest
        read = await connection.call(R(group_id="g", topics=[R.ReadStateData(topic_id=TOPIC, partitions=[
            R.PartitionData(partition=0, leader_epoch=1)])]), 0, 5)
        delete = await connection.call(D(group_id="g", topics=[D.DeleteStateData(topic_id=TOPIC, partitions=[
            D.PartitionData(partition=0)])]), 0, 5)
        versions = await connection.call(ApiVersionsRequest(), 3, 5)
        connection.close()
        server.close()
        return read, delete, versions

    read, delete, versions = asyncio.run(run())
    p = read.results[0].partitions[0]
    assert (p.state_epoch, p.start_offset, [(b.first_offset, b.last_offset, b.delivery_count) for b in p.state_batches]) \
        == (3, 40, [(40, 44, 2)])
    assert delete.results[0].partitions[0].error_code == 0
    assert {k.api_key for k in versions.api_keys} == {17, 18, 36, 83, 84, 85, 86, 87}  # SASL and state APIs only


def test_a_lost_listener_fails_waiting_requests_and_the_connection_stays_failed():
    async def run():
        received = asyncio.Event()

        async def dies_mid_request(reader, writer):  # a coordinator that dies holding a request
            await reader.read(1)
            received.set()
            writer.transport.abort()

        server = await asyncio.start_server(dies_mid_request, "127.0.0.1", 0)
        connection = StateConnection(await PipelinedConnection.open_tcp(  # no login: it would be the first byte
            "127.0.0.1", server.sockets[0].getsockname()[1], timeout_s=5, response_bytes_max=1 << 20))
        pending = asyncio.ensure_future(connection.call(write_request(0), 1, 30))
        await asyncio.wait_for(received.wait(), 5)
        with pytest.raises(StateConnectionError):
            await asyncio.wait_for(pending, 5)
        assert not connection.usable
        with pytest.raises(StateConnectionError):
            await connection.call(write_request(1), 1, 5)
        server.close()

    asyncio.run(run())


def test_the_state_listener_serves_brokers_only():
    """Nobody without the cluster's secret gets an answer to a share-state request: a request
    before logging in closes the connection, and a login with another secret fails (as Kafka's
    brokers refuse these APIs to anyone without CLUSTER_ACTION)."""
    async def run():
        coordinator = RecordingCoordinator()
        server, port = await serve(coordinator)
        outcomes = {}
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        from protocol.headers import RequestHeader, encode_request
        writer.write(encode_request(RequestHeader(85, 1, 1, "intruder"), write_request(0).encode(1)))
        await writer.drain()
        outcomes["unauthenticated"] = await asyncio.wait_for(reader.read(1), 5)
        writer.close()
        try:
            await StateConnection.open("127.0.0.1", port, 5, CONFIG | {SECRET_KEY: "guessed"})
        except BrokerLoginFailed as e:
            outcomes["wrong secret"] = str(e)
        try:
            await StateConnection.open("127.0.0.1", port, 5, {})
        except BrokerLoginFailed as e:
            outcomes["no secret"] = str(e)
        broker = await StateConnection.open("127.0.0.1", port, 5, CONFIG)
        outcomes["broker"] = (await broker.call(write_request(7), 1, 5)).results[0].partitions[0].error_code
        broker.close()
        server.close()
        return coordinator, outcomes

    coordinator, outcomes = asyncio.run(run())
    assert outcomes["unauthenticated"] == b"", "closed without an answer"
    assert "Authentication failed" in outcomes["wrong secret"]
    assert "composition root" in outcomes["no secret"]
    assert outcomes["broker"] == 0
    assert [w[5] for w in coordinator.writes] == [7], "only the broker's write reached the coordinator"
