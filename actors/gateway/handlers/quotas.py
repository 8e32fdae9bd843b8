"""Client quotas (KIP-546): DescribeClientQuotas reads them from the gateway's metadata image, AlterClientQuotas
changes them at the controller (which validates as Kafka's ClientQuotaControlManager; actors/quotas.py), and the
gateway catches up before answering, so its next describe sees the change. With an authorizer, as Kafka:
DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter (else CLUSTER_AUTHORIZATION_FAILED).

`throttle(ctx, connection, client_id, key, size_bytes)` is the enforcement the Produce and Fetch handlers call: the
throttle time the request's bytes earn under the quota of its (user, client id), and the connection muted for it."""
from __future__ import annotations

import time

from protocol.errors import ErrorCode
from protocol.messages import AlterClientQuotasResponse, DescribeClientQuotasResponse

from actors import quotas
from actors.security.authorizer import AclOperation

CLUSTER_REFUSED = "not authorized on the cluster: an ACL (ALTER_CONFIGS or DESCRIBE_CONFIGS on CLUSTER) is needed"


async def handle_describe_client_quotas(ctx, header, request, connection=None) -> DescribeClientQuotasResponse:
    R = DescribeClientQuotasResponse
    if not ctx.access(connection).allows_cluster(AclOperation.DESCRIBE_CONFIGS):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_REFUSED,
                 entries=None)
    error, message, found = quotas.describe(
        getattr(ctx.metadata, "client_quotas", {}),
        [(c.entity_type, c.match_type, c.match) for c in request.components], request.strict)
    if error:
        return R(throttle_time_ms=0, error_code=error, error_message=message, entries=None)
    return R(throttle_time_ms=0, error_code=0, error_message=None, entries=[
        R.EntryData(entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())])
        for entity, values in found])


async def handle_alter_client_quotas(ctx, header, request, connection=None) -> AlterClientQuotasResponse:
    R = AlterClientQuotasResponse

    def entity(entry):
        return [R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]
    if not ctx.access(connection).allows_cluster(AclOperation.ALTER_CONFIGS):
        return R(throttle_time_ms=0, entries=[R.EntryData(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                          error_message=CLUSTER_REFUSED, entity=entity(e))
                                              for e in request.entries])
    entries = [([(e.entity_type, e.entity_name) for e in entry.entity],
                [(op.key, op.value, op.remove) for op in entry.ops]) for entry in request.entries]
    results = await ctx.controller.alter_client_quotas(entries, request.validate_only) if entries else []
    if any(error == 0 for error, _ in results) and not request.validate_only:
        await ctx.refresh_metadata()
    return R(throttle_time_ms=0, entries=[R.EntryData(error_code=error, error_message=message, entity=entity(e))
                                          for e, (error, message) in zip(request.entries, results)])


def throttle(ctx, connection, client_id: str | None, key: str, size_bytes: int, count_throttled: bool = True) -> int:
    """The throttle time (ms) a request of `size_bytes` earns under the `key` quota (producer_byte_rate,
    consumer_byte_rate) of its connection's user and client id; the connection takes no further request for that
    long (KIP-219). 0 where no quota applies. `count_throttled` False: a throttled request's bytes are taken back
    (a fetch answered empty sent none)."""
    client_quotas = getattr(ctx.metadata, "client_quotas", None)
    if not client_quotas or connection is None:
        return 0
    throttles = ctx.quota_throttles.get(key)
    if throttles is None:
        throttles = ctx.quota_throttles[key] = quotas.Throttles(
            key, int(ctx.config.get("quota.window.num", 11)),
            int(ctx.config.get("quota.window.size.seconds", 1)) * 1000)
    now_ms = int(time.monotonic() * 1000)
    throttle_ms = throttles.record(client_quotas, connection.principal.name, client_id or "", size_bytes, now_ms)
    if throttle_ms and not count_throttled:
        throttles.record(client_quotas, connection.principal.name, client_id or "", -size_bytes, now_ms)
    if throttle_ms:
        connection.mute_for(throttle_ms)
    return throttle_ms
