"""How a gateway reaches the partition leaders on its node: `SocketPartition`, the data path over
kept-open Unix-socket connections (actors/partition/wire.py), one per listener on the node, shared
by every partition that listens there (`DataPaths`); and `RayPartition`, Ray calls for the rare
admin steps that may reach a partition on any node.

A failed connection fails the calls waiting on it (the handlers answer a retriable error or close
the client's connection, the client refreshes metadata and retries); the next call opens a new
one. When Ray restarts what hosts a partition, the controller's metadata names its new address and
the gateway makes a new client.
"""
from __future__ import annotations

import asyncio
import uuid
from typing import Any

from actors.gateway.file_region import FileRegion
from actors.partition import wire
from protocol.errors import ErrorCode
from actors.partition.core import FetchResult, ProduceResult
from actors.partition.producer_state import ActiveProducer
from actors.pipelined import PipelinedConnection
from actors.share_partition.core import ShareFetchResult
from actors.startup import start_unless_started, succeeded

CONNECT_TIMEOUT_S = 10.0
# produce waits for the append (and, with replication, for acks=all); fetch reads; long polls
# carry their own timeout: a call that outlives its longest wait by this much means a stuck peer
CALL_TIMEOUT_S = 60.0
RESPONSE_BYTES_MAX = 256 * 1024 * 1024
FETCH_ATTEMPTS = 3  # a fetch whose segment is deleted under it is asked again


class PartitionNotHosted(ConnectionError):
    """The listener hosts no replica of this partition (deleted, or its host restarted and has not
    hosted it again yet): nothing was done."""


class DataPaths:
    """A gateway's kept-open connections to the listeners on its node, one per address."""

    def __init__(self):
        self.opening: dict[str, asyncio.Future] = {}

    async def connection(self, address: str) -> PipelinedConnection:
        opening = self.opening.get(address)
        if opening is not None and succeeded(opening) and not opening.result().usable:
            opening = None  # it worked, then failed: connect again
        opening = self.opening[address] = start_unless_started(opening, lambda: PipelinedConnection.open_unix(
            address, timeout_s=CONNECT_TIMEOUT_S, response_bytes_max=RESPONSE_BYTES_MAX))
        return await asyncio.shield(opening)

    def close(self, address: str) -> None:
        opening = self.opening.pop(address, None)
        if succeeded(opening):
            opening.result().close()

    def keep_only(self, addresses: set[str]) -> None:
        """Close the idle connections to listeners that no partition this broker leads uses any
        more. One with requests in flight stays until they are answered (a replica that stopped
        leading still answers them); one to a listener that is gone failed by itself."""
        for address in [a for a in self.opening if a not in addresses]:
            opening = self.opening[address]
            if not (succeeded(opening) and opening.result().waiting):
                self.close(address)


def by_listener(items: list, client_of) -> list[list]:
    """`items` grouped, in order, by the listener (one per shard) that `client_of(item)` reaches;
    an item whose client is not a socket one is a group of its own. A group travels as one frame."""
    groups: dict = {}
    for item in items:
        client = client_of(item)
        key = (id(client.paths), client.address) if isinstance(client, SocketPartition) else id(item)
        groups.setdefault(key, []).append(item)
    return list(groups.values())


class SocketPartition:
    def __init__(self, address: str, key: tuple[uuid.UUID, int], paths: DataPaths | None = None):
        self.address = address
        self.key = key
        self.paths = paths if paths is not None else DataPaths()

    async def _call(self, api_key: int, args: list, blobs=(), timeout_s: float = CALL_TIMEOUT_S, key=None):
        return await (await self._send(api_key, args, blobs, timeout_s, key))

    async def _send(self, api_key: int, args: list, blobs=(), timeout_s: float = CALL_TIMEOUT_S, key=None):
        """Write the request now (in the order callers send); return an awaitable of its answer."""
        connection = await self.paths.connection(self.address)
        key = key or self.key
        answer = connection.send(lambda cid: wire.encode_request(api_key, cid, key, args, blobs), timeout_s)

        async def decoded():
            status, args_out, blobs_out = wire.decode_response(await answer)
            if status == wire.NOT_HOSTED:
                raise PartitionNotHosted(f"no replica of {self.key} behind {self.address!r}")
            return args_out, blobs_out
        return decoded()

    # ---- the PartitionClient surface the handlers use ----------------------------------------
    # Calls that change the partition come in two steps, `send_…` and awaiting what it returns:
    # the request is written when `send_…` returns, so a handler that sends its requests in a
    # client connection's request order has them applied in that order (see actors/gateway/order.py).
    async def produce(self, records, *, leader_epoch, acks, timeout_ms):
        return await (await self.send_produce(records, leader_epoch=leader_epoch, acks=acks, timeout_ms=timeout_ms))

    async def send_produce(self, records, *, leader_epoch, acks, timeout_ms):
        answer = await self._send(wire.PRODUCE, [leader_epoch, acks, timeout_ms], (records,))

        async def result():
            (error, base_offset, append_time_ms, log_start, message, record_errors), _ = await answer
            return ProduceResult(error, base_offset, append_time_ms, log_start, [tuple(e) for e in record_errors],
                                 message)
        return result()

    async def send_produce_many(self, calls: list, *, leader_epoch, acks, timeout_ms):
        """Several partitions' record batches, each (partition, records), to partitions behind
        this client's listener, in one frame (written when this returns, as `send_produce`'s):
        an awaitable of a ProduceResult per call, in order, or PartitionNotHosted for a
        partition the listener does not host (nothing was done for it)."""
        answer = await self._send(wire.PRODUCE_MANY, [leader_epoch, acks, timeout_ms,
                                                      [[key[0].bytes, key[1]] for key, _ in calls]],
                                  [records for _, records in calls], key=wire.NO_PARTITION)

        async def results():
            (answers,), _ = await answer
            return [ProduceResult(out[0], out[1], out[2], out[3], [tuple(e) for e in out[5]], out[4])
                    if status == wire.ANSWERED else
                    PartitionNotHosted(f"no replica of {key} behind {self.address!r}")
                    for (status, out), (key, _) in zip(answers, calls)]
        return results()

    async def fetch(self, offset, max_bytes, *, leader_epoch, isolation_level):
        """Records come back as a FileRegion: sent from the segment file when the response goes out."""
        for _ in range(FETCH_ATTEMPTS):
            out, _ = await self._call(wire.FETCH, fetch_args(offset, max_bytes, leader_epoch, isolation_level))
            result = fetch_result(out)
            if result is not None:
                return result
        raise ConnectionError(f"a segment vanished {FETCH_ATTEMPTS} times while fetching offset {offset}")

    async def replica_fetch(self, replica_id, offset, max_bytes, *, leader_epoch, last_fetched_epoch):
        """A follower's fetch (records up to the log end); returns (FetchResult, diverging epoch as
        (epoch, end offset) or None)."""
        for _ in range(FETCH_ATTEMPTS):
            out, _ = await self._call(wire.REPLICA_FETCH, replica_fetch_args(replica_id, offset, max_bytes,
                                                                             leader_epoch, last_fetched_epoch))
            result = replica_fetch_result(out)
            if result is not None:
                return result
        raise ConnectionError(f"a segment vanished {FETCH_ATTEMPTS} times while fetching offset {offset}")

    async def many(self, calls: list[tuple[tuple[uuid.UUID, int], int, list]]) -> list[tuple[int, list]]:
        """Several FETCH / REPLICA_FETCH calls, each (partition, api key, args), to partitions behind
        this client's listener, in one frame: (status, answer args) per call, in order."""
        (answers,), _ = await self._call(wire.MANY, [[[api, key[0].bytes, key[1], args] for key, api, args in calls]],
                                         key=wire.NO_PARTITION)
        return answers

    async def send_txn_markers(self, markers: list, *, timeout_ms: int):
        """WriteTxnMarkers' markers, each (partition, producer id, producer epoch, coordinator
        epoch, committed), to partitions behind this client's listener, in one frame (written when
        this returns): an awaitable of (error code, message) per marker, in order, or
        PartitionNotHosted where the listener does not host the partition (nothing was done)."""
        answer = await self._send(wire.TXN_MARKERS, [timeout_ms, [[key[0].bytes, key[1], *rest]
                                                                  for key, *rest in markers]],
                                  key=wire.NO_PARTITION)

        async def results():
            (answers,), _ = await answer
            return [tuple(out) if status == wire.ANSWERED else
                    PartitionNotHosted(f"no replica of {key} behind {self.address!r}")
                    for (status, out), (key, *_) in zip(answers, markers)]
        return results()

    async def release_acks_waits(self) -> int:
        """Answer the partition's waiting acks=all produces NOT_LEADER_OR_FOLLOWER now (this broker's
        session lapsed); how many were waiting."""
        (count,), _ = await self._call(wire.RELEASE_WAITERS, [])
        return count

    async def wait_for_data(self, offset, timeout_ms, replica=False):
        (ready,), _ = await self._call(wire.WAIT_FOR_DATA, [offset, timeout_ms, replica],
                                       timeout_s=timeout_ms / 1000 + CALL_TIMEOUT_S)
        return ready

    async def wait_for_any(self, wanted: list[tuple[tuple[uuid.UUID, int], int, bool]], timeout_ms: int) -> bool:
        """True once any of (partition, offset, replica) behind this client's listener has records at
        or past its offset (see `wait_for_data`); one frame for all of them."""
        (ready,), _ = await self._call(
            wire.WAIT_FOR_ANY, [timeout_ms, [[key[0].bytes, key[1], offset, replica] for key, offset, replica in wanted]],
            timeout_s=timeout_ms / 1000 + CALL_TIMEOUT_S, key=wire.NO_PARTITION)
        return ready

    async def list_offsets(self, timestamp, *, leader_epoch, isolation_level):
        out, _ = await self._call(wire.LIST_OFFSETS, [timestamp, leader_epoch, isolation_level])
        return tuple(out)

    async def delete_records(self, offset: int, leader_epoch: int = -1) -> tuple[int, int, str | None]:
        """(error, low watermark, why refused): DeleteRecords for one partition at its leader."""
        (error, low_watermark, message), _ = await self._call(wire.DELETE_RECORDS, [leader_epoch, offset])
        return error, low_watermark, message

    async def describe_producers(self) -> tuple[int, list[ActiveProducer]]:
        """(error, the partition leader's active producers): DescribeProducers for one partition."""
        (error, producers), _ = await self._call(wire.DESCRIBE_PRODUCERS, [])
        return error, [ActiveProducer(*p) for p in producers]

    async def share_fetch(self, group_id, member_id, *, acks, max_records, batch_size, max_bytes, fetch,
                          record_limit=False, limits=None):
        return await (await self.send_share_fetch(group_id, member_id, acks=acks, max_records=max_records,
                                                  batch_size=batch_size, max_bytes=max_bytes, fetch=fetch,
                                                  record_limit=record_limit, limits=limits))

    async def send_share_fetch(self, group_id, member_id, *, acks, max_records, batch_size, max_bytes, fetch,
                               record_limit=False, limits=None):
        """Acknowledge `acks` and (if `fetch`) acquire what is acquirable now; never waits. The
        acquired batches come back as a FileRegion, sent from the segment file. `limits`: the
        group's (actors/config_schema.py ShareGroupLimits.as_list()), None: those the leader has."""
        answer = await self._send(
            wire.SHARE_FETCH, [group_id, member_id, acks, max_records, batch_size, max_bytes, fetch, record_limit,
                               limits])
        return self._share_fetch_result(answer)

    async def _share_fetch_result(self, answer):
        (error, message, ack_error, ack_message, acquired, path, position, size_bytes), _ = await answer
        records = b""
        if size_bytes:
            try:
                records = FileRegion.open(path, position, size_bytes)
            except FileNotFoundError:  # retention removed the segment in between: the records stay
                acquired = []           # acquired until their lock expires, then go to another fetch
                error, message = ErrorCode.UNKNOWN_SERVER_ERROR, f"segment {path} was deleted; fetch again"
        return ShareFetchResult(error, message, ack_error, ack_message, records, [tuple(a) for a in acquired])

    async def share_wait(self, group_id, timeout_ms):
        (ready,), _ = await self._call(wire.SHARE_WAIT, [group_id, timeout_ms],
                                       timeout_s=timeout_ms / 1000 + CALL_TIMEOUT_S)
        return ready

    async def share_acknowledge(self, group_id, member_id, acks, limits=None):
        return await (await self.send_share_acknowledge(group_id, member_id, acks, limits))

    async def send_share_acknowledge(self, group_id, member_id, acks, limits=None):
        answer = await self._send(wire.SHARE_ACKNOWLEDGE, [group_id, member_id, acks, limits])

        async def result():
            out, _ = await answer
            return tuple(out)
        return result()

    async def share_release(self, group_id, member_id):
        await self._call(wire.SHARE_RELEASE, [group_id, member_id])

    async def txn_coordinator(self, operation: str, args: list) -> list:
        """A per-transaction request (`operation`: add_partitions, add_offsets, end_txn) to the
        transaction coordinator this client's partition (of `__transaction_state`) hosts: its answer
        (actors/transaction_coordinator/wire.py txn_answer), or PartitionNotHosted."""
        (answer,), _ = await self._call(wire.TXN_COORDINATOR, [operation, args])
        return answer

    async def send_share_state(self, api_key: int, group_id: str, items: list):
        """Kafka's share-state operation `api_key` (83-87) for the partitions in `items` (see
        actors/share_coordinator/wire.py), to the share coordinator this client's partition (of
        `__share_group_state`) hosts; written when this returns, as `send_produce`'s: an awaitable of
        one result per item, or PartitionNotHosted where no coordinator of it is hosted there."""
        answer = await self._send(wire.SHARE_STATE, [api_key, group_id, items])

        async def results():
            (out,), _ = await answer
            return out
        return results()


def fetch_args(offset, max_bytes, leader_epoch, isolation_level) -> list:
    return [offset, max_bytes, leader_epoch, isolation_level]


def fetch_result(out: list) -> FetchResult | None:
    """A FETCH answer, its records a FileRegion of the segment; None when retention deleted the
    segment in between (ask again)."""
    error, high_watermark, last_stable, log_start, message, path, position, size_bytes, aborted = out
    if aborted is not None:
        aborted = [tuple(a) for a in aborted]
    if not size_bytes:
        return FetchResult(error, high_watermark, last_stable, log_start, b"", message, aborted)
    try:
        records = FileRegion.open(path, position, size_bytes)
    except FileNotFoundError:
        return None
    return FetchResult(error, high_watermark, last_stable, log_start, records, message, aborted)


def replica_fetch_args(replica_id, offset, max_bytes, leader_epoch, last_fetched_epoch) -> list:
    return [replica_id, leader_epoch, offset, last_fetched_epoch, max_bytes]


def replica_fetch_result(out: list) -> tuple[FetchResult, tuple[int, int] | None] | None:
    """A REPLICA_FETCH answer and its diverging epoch (or None); None when the segment vanished."""
    error, high_watermark, log_start, _log_end, diverging_epoch, diverging_end, path, position, size_bytes = out
    diverging = (diverging_epoch, diverging_end) if diverging_end >= 0 else None
    records = b""
    if size_bytes:
        try:
            records = FileRegion.open(path, position, size_bytes)
        except FileNotFoundError:
            return None
    return FetchResult(error, high_watermark, high_watermark, log_start, records), diverging


class RayPartition:
    """Admin steps on a partition of any node, as Ray calls (control path: rare, not per record)."""
    __slots__ = ("handle",)

    def __init__(self, handle: Any):
        self.handle = handle

    async def list_offsets(self, timestamp, *, leader_epoch, isolation_level):
        return await self.handle.list_offsets.remote(timestamp, leader_epoch, isolation_level)

    async def share_forget(self, group_id):
        return await self.handle.share_forget.remote(group_id)
