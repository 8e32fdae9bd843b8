"""Client quotas (KIP-546): DescribeClientQuotas reads them from the gateway's metadata image, AlterClientQuotas
changes them at the controller (which validates as Kafka's ClientQuotaControlManager; actors/quotas.py), and the
gateway catches up before answering, so its next describe sees the change. With an authorizer, as Kafka:
DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter (else CLUSTER_AUTHORIZATION_FAILED).

`throttle(ctx, connection, client_id, key, size_bytes)` is the enforcement the Produce and Fetch handlers call: the
throttle time the request's bytes earn under the quota of its (user, client id), and the connection muted for it."""
from __future__ import annotations


from protocol.errors import ErrorCode
from protocol.messages import AlterClientQuotasResponse, DescribeClientQuotasResponse

from actors import quotas
from actors.gateway.quota_throttles import throttle  # (Produce and Fetch call it from here)
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


# CreateTopics, DeleteTopics, CreatePartitions: from these versions a topic over controller_mutation_rate is refused
# (THROTTLING_QUOTA_EXCEEDED); below them it is let through and the answer says how long to wait (KIP-599)
STRICT_MUTATION_VERSIONS = {19: 6, 20: 5, 37: 3}
THROTTLING_QUOTA_EXCEEDED_MESSAGE = None  # (Kafka 4.4 answers it without a message)


class Mutations:
    """controller_mutation_rate for one CreateTopics, DeleteTopics or CreatePartitions request, as Kafka applies it:
    before each topic `refused()` (new versions: the client's bucket is below zero, the topic is answered
    THROTTLING_QUOTA_EXCEEDED), after it `record(partitions)` (those created or deleted), and at the end
    `throttle_time_ms()` (the connection muted for it). The buckets (actors.quotas.TokenBucket) are the active
    controller's, for the whole cluster, as Kafka's: every broker asks it (only while some client has the quota)."""

    def __init__(self, ctx, connection, header):
        client_quotas = getattr(ctx.metadata, "client_quotas", None)
        self.on = bool(client_quotas) and connection is not None and any(
            quotas.CONTROLLER_MUTATION_RATE in values for values in client_quotas.values())
        if not self.on:
            return
        self.controller, self.connection = ctx.controller, connection
        self.user, self.client_id = connection.principal.name, header.client_id or ""
        self.strict = header.api_version >= STRICT_MUTATION_VERSIONS[header.api_key]
        self.refused_throttle_ms = 0

    async def refused(self) -> bool:
        if not self.on or not self.strict:
            return False
        throttle_ms = await self.controller.controller_mutation_throttle_ms(self.user, self.client_id)
        if throttle_ms:
            self.refused_throttle_ms = throttle_ms
        return bool(throttle_ms)

    async def record(self, partitions: int) -> None:
        if self.on:
            await self.controller.record_controller_mutations(self.user, self.client_id, partitions)

    async def throttle_time_ms(self) -> int:
        if not self.on:
            return 0
        throttle_ms = self.refused_throttle_ms if self.strict else \
            await self.controller.controller_mutation_throttle_ms(self.user, self.client_id)
        if throttle_ms:
            self.connection.mute_for(throttle_ms)
        return throttle_ms
