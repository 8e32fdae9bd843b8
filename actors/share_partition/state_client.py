"""A share-partition leader's connections to share coordinators, over the brokers' own listeners
(the coordinator has no port of its own: actors/share_coordinator/wire.py):

- `BrokerStateConnection`: to a coordinator on another broker, Kafka's share-state requests over
  TCP to that broker's inter-broker listener (its address in the metadata, 9092 on real hosts),
  with that listener's TLS and a login as the broker (`User:kray-broker`) where it uses SASL, as
  the replica fetchers connect (actors/security/inter_broker.py: `broker_transport`); its
  gateway checks CLUSTER_ACTION and forwards to the coordinator's shard.
- `LocalStateConnection`: to a coordinator on this broker, SHARE_STATE frames straight to the
  coordinator's shard over its Unix socket, as that gateway would forward them (one hop, no
  authorization: the socket is this node's own data path).

Both keep one pipelined connection (actors/pipelined.py) whose requests each wait only for their
own answer, and are written in the order their callers send. Any failure closes the connection
and fails every request waiting on it; the caller decides what to do (the leaders answer with a
retriable error and resend whole state over a new connection).
"""
from __future__ import annotations

import uuid
from typing import Awaitable

from actors.broker_connection import BrokerConnection
from actors.partition import wire as data_wire
from actors.pipelined import ConnectionClosed, PipelinedConnection
from actors.share_coordinator import wire
from protocol.errors import ErrorCode

RESPONSE_BYTES_MAX = 64 * 1024 * 1024
WRITE_VERSION = 1

StateConnectionError = ConnectionClosed


class BrokerStateConnection(BrokerConnection):
    """Kafka's share-state APIs to another broker's inter-broker listener."""
    CLIENT_ID = "kray-share-partition-leader"
    RESPONSE_BYTES_MAX = RESPONSE_BYTES_MAX

    def send_write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
                   start_offset: int, batches: list, timeout_s: float,
                   delivery_complete_count: int = -1) -> Awaitable[tuple[int, str | None]]:
        """WriteShareGroupState of one share-partition, written now (in the order callers send);
        an awaitable of (error code, message)."""
        W = wire.REQUESTS[wire.WRITE]
        request = W(group_id=group_id, topics=[W.WriteStateData(topic_id=topic_id, partitions=[W.PartitionData(
            partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
            delivery_complete_count=delivery_complete_count, state_batches=[
                W.StateBatch(first_offset=b[0], last_offset=b[1], delivery_state=b[2], delivery_count=b[3])
                for b in batches])])])
        answer = self.send(request, WRITE_VERSION, timeout_s)

        async def result():
            p = self.decode(wire.WRITE, WRITE_VERSION, await answer).results[0].partitions[0]
            return p.error_code, p.error_message
        return result()

    async def call_item(self, api_key: int, group_id: str, item: list, timeout_s: float) -> list:
        """ReadShareGroupState or InitializeShareGroupState of the one share-partition `item` names
        (a frame item: [topic id bytes, partition, fields...]); its result as the frame's
        ([error, message, fields...])."""
        topic_id, partition = uuid.UUID(bytes=item[0]), item[1]
        if api_key == wire.READ:
            R = wire.REQUESTS[wire.READ]
            request = R(group_id=group_id, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
                R.PartitionData(partition=partition, leader_epoch=item[2])])])
        elif api_key == wire.INITIALIZE:
            R = wire.REQUESTS[wire.INITIALIZE]
            request = R(group_id=group_id, topics=[R.InitializeStateData(topic_id=topic_id, partitions=[
                R.PartitionData(partition=partition, state_epoch=item[2], start_offset=item[3])])])
        else:
            raise ValueError(f"share state API {api_key}: send_write writes")
        p = self.decode(api_key, 0, await self.send(request, 0, timeout_s)).results[0].partitions[0]
        if api_key == wire.READ:
            return [p.error_code, p.error_message, p.state_epoch, p.start_offset,
                    [[b.first_offset, b.last_offset, b.delivery_state, b.delivery_count] for b in p.state_batches]]
        return [p.error_code, p.error_message]


class LocalStateConnection:
    """SHARE_STATE frames to the shard of this broker that hosts the coordinator."""

    def __init__(self, connection: PipelinedConnection):
        self.connection = connection

    @classmethod
    async def open(cls, address: str, timeout_s: float) -> "LocalStateConnection":
        return cls(await PipelinedConnection.open_unix(address, timeout_s=timeout_s,
                                                       response_bytes_max=RESPONSE_BYTES_MAX))

    @property
    def usable(self) -> bool:
        return self.connection.usable

    def send(self, coordinator_key: tuple[uuid.UUID, int], api_key: int, group_id: str, items: list,
             timeout_s: float) -> Awaitable[list | None]:
        """Written now (in the order callers send); an awaitable of the coordinator's results, one
        per item, or None where the shard hosts no coordinator of `coordinator_key` (nothing done)."""
        answer = self.connection.send(lambda correlation_id: data_wire.encode_request(
            data_wire.SHARE_STATE, correlation_id, coordinator_key, [api_key, group_id, items]), timeout_s)

        async def results():
            status, args, _ = data_wire.decode_response(await answer)
            return None if status == data_wire.NOT_HOSTED else args[0]
        return results()

    async def call(self, coordinator_key: tuple[uuid.UUID, int], api_key: int, group_id: str, items: list,
                   timeout_s: float) -> list | None:
        return await self.send(coordinator_key, api_key, group_id, items, timeout_s)

    async def call_item(self, coordinator_key: tuple[uuid.UUID, int], api_key: int, group_id: str, item: list,
                        timeout_s: float) -> list:
        """One item's result, as BrokerStateConnection.call_item (NOT_COORDINATOR where the shard
        hosts no coordinator of `coordinator_key`)."""
        results = await self.call(coordinator_key, api_key, group_id, [item], timeout_s)
        if results is None:
            return [ErrorCode.NOT_COORDINATOR, "the coordinator's shard does not host it now"]
        return results[0]

    def send_write(self, coordinator_key: tuple[uuid.UUID, int], group_id: str, topic_id: uuid.UUID, partition: int,
                   state_epoch: int, leader_epoch: int, start_offset: int, batches: list,
                   timeout_s: float, delivery_complete_count: int = -1) -> Awaitable[tuple[int, str | None]]:
        """A share-partition's write, as BrokerStateConnection.send_write (NOT_COORDINATOR where
        the shard hosts no coordinator of `coordinator_key`)."""
        answer = self.send(coordinator_key, wire.WRITE, group_id, [wire.write_item(
            topic_id, partition, state_epoch, leader_epoch, start_offset, batches, delivery_complete_count)], timeout_s)

        async def result():
            results = await answer
            if results is None:
                return ErrorCode.NOT_COORDINATOR, "the coordinator's shard does not host it now"
            return results[0][0], results[0][1]
        return result()

    def close(self) -> None:
        self.connection.close()
