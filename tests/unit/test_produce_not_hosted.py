"""A Produce whose partition the shard no longer hosts (deleted, or moved while the request
travelled) is answered NOT_LEADER_OR_FOLLOWER for that partition, as Kafka answers a broker that
does not lead it: nothing was appended, so the client refreshes its metadata and retries. The
client's connection stays open and the request's other partitions are appended. Over a real shard
listener on a Unix socket; the gateway's routing is replaced by a fixed map."""
import asyncio
import os
import tempfile
import uuid

from actors.gateway.connection import ClientConnection
from actors.gateway.context import GatewayContext
from actors.gateway.handlers import produce
from actors.gateway.partition_client import DataPaths, SocketPartition
from actors.partition.core import ProduceResult
from actors.partition.listener import start_listener
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from protocol.messages import ProduceRequest

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")


class Leader:
    """A hosted replica that appends every batch at the next offset (acks=1: no wait)."""

    def __init__(self):
        self.batches: list[bytes] = []

    def append(self, blobs, leader_epoch, acks):
        results = []
        for blob in blobs:
            results.append(ProduceResult(0, base_offset=len(self.batches)))
            self.batches.append(bytes(blob))
        return results, None

    async def produce(self, blobs, leader_epoch, acks, timeout_ms):
        return self.append(blobs, leader_epoch, acks)[0]


def _produce(hosted: dict, partitions: list[int], monkeypatch) -> tuple:
    async def main():
        address = os.path.join(tempfile.mkdtemp(), "shard.sock")
        server = await start_listener(hosted.get, address, 1 << 20, asyncio.Event)
        paths = DataPaths()

        async def leader_clients(ctx, wanted, by_id):
            return [(SocketPartition(address, (TOPIC, index), paths), 0) for _, _, index in wanted]
        monkeypatch.setattr(produce, "leader_clients", leader_clients)
        ctx = GatewayContext(broker_id=1, config={}, controller=None)
        connection = ClientConnection(("127.0.0.1", 5555), listener_name="PLAINTEXT")
        request = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
            name="orders", partition_data=[ProduceRequest.PartitionProduceData(index=p, records=b"batch-%d" % p)
                                           for p in partitions])])
        try:
            response = await produce.handle_produce(ctx, RequestHeader(0, 9, 1, "test"), request, connection)
        finally:
            server.close()
        return ([(p.index, p.error_code, p.base_offset) for p in response.responses[0].partition_responses],
                connection.broken)
    return asyncio.run(main())


def test_a_lone_partition_not_hosted_answers_not_leader_and_keeps_the_connection(monkeypatch):
    answers, broken = _produce({}, [0], monkeypatch)
    assert answers == [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)]
    assert broken is None


def test_in_one_frame_the_hosted_partitions_append_and_the_other_answers_not_leader(monkeypatch):
    leader = Leader()
    answers, broken = _produce({(TOPIC, 0): leader, (TOPIC, 2): leader}, [0, 1, 2], monkeypatch)
    assert answers == [(0, 0, 0), (1, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1), (2, 0, 1)]
    assert leader.batches == [b"batch-0", b"batch-2"]
    assert broken is None
