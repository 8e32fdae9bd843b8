"""The share coordinator's inter-broker listener: Kafka's share-state APIs (Initialize, Read, Write,
Delete and ReadSummary ShareGroupState, keys 83-87) on a socket of the coordinator's own, as
Kafka's brokers send them to each other.

Why a socket beside the Ray handle: a share-partition leader writes state on every acknowledging
ShareFetch, and a Ray actor call costs ~2 ms here whatever its size; a request over a kept-open
loopback connection costs a fraction of that. Requests on one connection are applied in the
order sent (the front end starts their handlers in order, and a loaded shard applies a write
without waiting), so one leader's writes never overtake each other.

These APIs are served here only, never by a gateway or a partition's client listener. The
listener is a SASL listener whose one user is the broker (actors/gateway/security/inter_broker.py):
a share-partition leader logs in before its first request; anyone else is refused and closed.
"""
from __future__ import annotations

from typing import Any

from actors.gateway.dispatch import Route
from actors.gateway.handlers.api_versions import handle_api_versions
from actors.gateway.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake
from actors.gateway.security.inter_broker import broker_credentials
from protocol.messages import (DeleteShareGroupStateResponse, InitializeShareGroupStateResponse,
                               ReadShareGroupStateResponse, ReadShareGroupStateSummaryResponse,
                               WriteShareGroupStateResponse)


class StateListenerContext:
    """What the front end needs (config, advertised APIs) plus the coordinator it serves."""

    def __init__(self, coordinator: Any, config: dict):
        self.coordinator = coordinator
        self.config = config
        self.advertised: list = []
        self._credentials = broker_credentials(config)  # the broker's SCRAM credential, made once

    def scram_credentials(self, mechanism) -> dict:
        return self._credentials.get(mechanism, {})


async def _each(request, result_cls, op):
    """Run `op(topic_id, partition_data)` for every partition of the request, grouped by topic."""
    results = []
    for topic in request.topics:
        results.append(result_cls(topic_id=topic.topic_id,
                                  partitions=[await op(topic.topic_id, p) for p in topic.partitions]))
    return results


async def handle_write(ctx, header, request, connection=None) -> WriteShareGroupStateResponse:
    R = WriteShareGroupStateResponse

    async def write(topic_id, p):
        code, message = await ctx.coordinator.write_state(
            request.group_id, topic_id, p.partition, p.state_epoch, p.leader_epoch, p.start_offset,
            [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches],
            p.delivery_complete_count)
        return R.PartitionResult(partition=p.partition, error_code=code, error_message=message)
    return R(results=await _each(request, R.WriteStateResult, write))


async def handle_read(ctx, header, request, connection=None) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse

    async def read(topic_id, p):
        r = await ctx.coordinator.read_state(request.group_id, topic_id, p.partition, p.leader_epoch)
        return R.PartitionResult(partition=p.partition, error_code=r.error_code, error_message=r.error_message,
                                 state_epoch=r.state_epoch, start_offset=r.start_offset, state_batches=[
                                     R.StateBatch(first_offset=b[0], last_offset=b[1], delivery_state=b[2],
                                                  delivery_count=b[3]) for b in r.state_batches])
    return R(results=await _each(request, R.ReadStateResult, read))


async def handle_initialize(ctx, header, request, connection=None) -> InitializeShareGroupStateResponse:
    R = InitializeShareGroupStateResponse

    async def initialize(topic_id, p):
        code, message = await ctx.coordinator.initialize_state(request.group_id, topic_id, p.partition,
                                                               p.state_epoch, p.start_offset)
        return R.PartitionResult(partition=p.partition, error_code=code, error_message=message)
    return R(results=await _each(request, R.InitializeStateResult, initialize))


async def handle_delete(ctx, header, request, connection=None) -> DeleteShareGroupStateResponse:
    R = DeleteShareGroupStateResponse

    async def delete(topic_id, p):
        code, message = await ctx.coordinator.delete_state(request.group_id, topic_id, p.partition)
        return R.PartitionResult(partition=p.partition, error_code=code, error_message=message)
    return R(results=await _each(request, R.DeleteStateResult, delete))


async def handle_read_summary(ctx, header, request, connection=None) -> ReadShareGroupStateSummaryResponse:
    R = ReadShareGroupStateSummaryResponse

    async def summary(topic_id, p):
        s = await ctx.coordinator.read_state_summary(request.group_id, topic_id, p.partition)
        return R.PartitionResult(partition=p.partition, error_code=s.error_code, error_message=s.error_message,
                                 state_epoch=s.state_epoch, leader_epoch=s.leader_epoch, start_offset=s.start_offset,
                                 delivery_complete_count=s.delivery_complete_count)
    return R(results=await _each(request, R.ReadStateSummaryResult, summary))


STATE_ROUTES: dict[int, Route] = {
    17: Route(handle_sasl_handshake, 0, 1),  # answered by the connection's SASL session
    18: Route(handle_api_versions, 0, 4),
    36: Route(handle_sasl_authenticate, 0, 2),
    83: Route(handle_initialize, 0, 0),
    84: Route(handle_read, 0, 0),
    85: Route(handle_write, 0, 1),
    86: Route(handle_delete, 0, 0),
    87: Route(handle_read_summary, 0, 1),
}
