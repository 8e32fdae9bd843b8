"""A shard's data-path listener (actors/partition/listener.py) over a real Unix socket: one frame
reads several partitions (MANY) and one frame waits for any of several (WAIT_FOR_ANY), each
partition answered by its own replica, an unhosted one answered NOT_HOSTED; a malformed batch
closes only that connection."""
import asyncio
import os
import tempfile
import uuid

import pytest

from actors.partition import wire
from actors.partition.core import FetchResult
from actors.partition.listener import start_listener
from actors.pipelined import PipelinedConnection

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")


class Replica:
    """What the listener calls on a hosted replica for FETCH and WAIT_FOR_ANY."""

    def __init__(self, high_watermark: int):
        self.high_watermark = high_watermark

    async def fetch_slice(self, offset, max_bytes, leader_epoch, isolation_level):
        return FetchResult(0, self.high_watermark, self.high_watermark, 0, b"", None)

    def has_data(self, offset, replica=False):
        return self.high_watermark > offset


class Host:
    def __init__(self, replicas):
        self.replicas = replicas
        self.taken = asyncio.Event()

    def took_records(self):
        self.taken.set()
        self.taken = asyncio.Event()


async def _serve(host):
    address = os.path.join(tempfile.mkdtemp(), "shard.sock")
    server = await start_listener(host.replicas.get, address, 1 << 20, lambda: host.taken)
    connection = await PipelinedConnection.open_unix(address, timeout_s=5, response_bytes_max=1 << 20)
    return server, connection


async def _call(connection, api_key, args):
    body = await connection.call(lambda cid: wire.encode_request(api_key, cid, wire.NO_PARTITION, args), 5)
    status, out, _ = wire.decode_response(body)
    assert status == wire.ANSWERED
    return out


def test_one_frame_reads_several_partitions_each_from_its_own_replica():
    async def main():
        host = Host({(TOPIC, 0): Replica(5), (TOPIC, 1): Replica(9)})
        server, connection = await _serve(host)
        try:
            calls = [[wire.FETCH, TOPIC.bytes, p, [0, 1024, -1, 0]] for p in (0, 1, 2)]
            (answers,) = await _call(connection, wire.MANY, [calls])
            assert [status for status, _ in answers] == [wire.ANSWERED, wire.ANSWERED, wire.NOT_HOSTED]
            assert [out[1] for _, out in answers[:2]] == [5, 9]  # each partition's own high watermark
        finally:
            connection.close()
            server.close()
    asyncio.run(main())


def test_one_frame_waits_for_any_of_several_partitions():
    async def main():
        quiet, busy = Replica(3), Replica(3)
        host = Host({(TOPIC, 0): quiet, (TOPIC, 1): busy})
        server, connection = await _serve(host)
        try:
            wanted = [[TOPIC.bytes, 0, 3, False], [TOPIC.bytes, 1, 3, False]]
            assert await _call(connection, wire.WAIT_FOR_ANY, [100, wanted]) == [False]  # nothing new: timed out

            async def later():
                await asyncio.sleep(0.1)
                busy.high_watermark = 4
                host.took_records()
            started = asyncio.get_running_loop().time()
            writer = asyncio.ensure_future(later())
            assert await _call(connection, wire.WAIT_FOR_ANY, [5000, wanted]) == [True]
            assert asyncio.get_running_loop().time() - started < 2, "woken by the write, not the timeout"
            await writer
            # a partition no longer hosted answers at once (the fetch that follows learns why)
            assert await _call(connection, wire.WAIT_FOR_ANY, [5000, [[TOPIC.bytes, 7, 0, False]]]) == [True]
        finally:
            connection.close()
            server.close()
    asyncio.run(main())


@pytest.mark.parametrize("calls", [
    [[wire.PRODUCE, TOPIC.bytes, 0, [0, 1, 1000]]],   # only reads may be batched
    [[wire.FETCH, b"short", 0, [0, 1024, -1, 0]]],     # not a topic id
    "not a list",
])
def test_a_malformed_batch_closes_only_its_connection(calls):
    async def main():
        host = Host({(TOPIC, 0): Replica(5)})
        server, bad = await _serve(host)
        good = await PipelinedConnection.open_unix(server.sockets[0].getsockname(), timeout_s=5,
                                                   response_bytes_max=1 << 20)
        try:
            with pytest.raises(ConnectionError):
                await _call(bad, wire.MANY, [calls])
            (answers,) = await _call(good, wire.MANY, [[[wire.FETCH, TOPIC.bytes, 0, [0, 1024, -1, 0]]]])
            assert answers[0][0] == wire.ANSWERED
        finally:
            bad.close()
            good.close()
            server.close()
    asyncio.run(main())


def test_release_waiters_reaches_the_partitions_replica_and_answers_how_many_waited():
    """A gateway whose session lapsed asks each partition it led to answer its waiting acks=all
    produces at once (RELEASE_WAITERS); an unhosted partition is answered NOT_HOSTED."""
    from actors.gateway.partition_client import DataPaths, PartitionNotHosted, SocketPartition

    class Leading(Replica):
        released = 0

        def release_acks_waits(self):
            self.released += 1
            return 2

    async def main():
        leading = Leading(5)
        host = Host({(TOPIC, 0): leading})
        server, connection = await _serve(host)
        address = server.sockets[0].getsockname()
        paths = DataPaths()
        try:
            assert await SocketPartition(address, (TOPIC, 0), paths).release_acks_waits() == 2
            assert leading.released == 1
            with pytest.raises(PartitionNotHosted):
                await SocketPartition(address, (TOPIC, 1), paths).release_acks_waits()
        finally:
            connection.close()
            server.close()
    asyncio.run(main())
