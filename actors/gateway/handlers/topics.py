"""CreateTopics, DeleteTopics, CreatePartitions: forwarded to the controller, one topic at a time.

With an authorizer (Kafka's ControllerApis): creating needs CREATE on the cluster or on the topic
(the created topic's configs are returned only with DESCRIBE_CONFIGS on it); deleting needs
DELETE on the cluster, or DESCRIBE and DELETE on the topic; adding partitions ALTER on the topic.
A refused topic answers TOPIC_AUTHORIZATION_FAILED and is not touched.
"""
from __future__ import annotations

import uuid

from protocol.errors import ErrorCode
from protocol.messages import CreatePartitionsResponse, CreateTopicsResponse, DeleteTopicsResponse

from actors.gateway.handlers.configs import CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_TOPIC
from actors.gateway.handlers.quotas import THROTTLING_QUOTA_EXCEEDED_MESSAGE, Mutations
from actors.security.authorizer import AclOperation, ResourceType

TOPIC = ResourceType.TOPIC

ZERO_UUID = uuid.UUID(int=0)


async def handle_create_topics(ctx, header, request, connection=None) -> CreateTopicsResponse:
    results = []
    names = [t.name for t in request.topics]
    access = ctx.access(connection)
    creatable = set(names) if access.allows_cluster(AclOperation.CREATE) else \
        access.allowed(AclOperation.CREATE, TOPIC, names)
    configs_visible = access.allowed(AclOperation.DESCRIBE_CONFIGS, TOPIC, names)
    mutations = Mutations(ctx, connection, header)
    for t in request.topics:
        result = CreateTopicsResponse.CreatableTopicResult(name=t.name, topic_id=ZERO_UUID, num_partitions=-1,
                                                           replication_factor=-1, configs=None)
        results.append(result)
        if names.count(t.name) > 1:
            result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, f"topic {t.name!r} is listed twice"
            continue
        if t.name not in creatable:
            result.error_code, result.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            continue
        if t.assignments and (t.num_partitions != -1 or t.replication_factor != -1):
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "give either replica assignments or num_partitions/replication_factor, not both"
            continue
        if await mutations.refused():  # controller_mutation_rate (KIP-599)
            result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE
            continue
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
        configs = {c.name: c.value for c in t.configs}
        error, message, created = await ctx.controller.create_topic(
            t.name, t.num_partitions, t.replication_factor, configs, request.validate_only, assignments)
        result.error_code, result.error_message = error, message
        if created and not request.validate_only:
            await mutations.record(created["num_partitions"])
        if created:
            result.topic_id = created["topic_id"]
            result.num_partitions = created["num_partitions"]
            result.replication_factor = created["replication_factor"]
            overrides = {c.name for c in t.configs}
            if t.name not in configs_visible:
                result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            result.configs = [CreateTopicsResponse.CreatableTopicConfigs(
                name=k, value=None if v is None else str(v).lower() if isinstance(v, bool) else str(v),
                read_only=False, config_source=CONFIG_SOURCE_TOPIC if k in overrides else CONFIG_SOURCE_DEFAULT,
                is_sensitive=False) for k, v in sorted(created["configs"].items())]
    if not request.validate_only:
        await ctx.refresh_metadata()
    return CreateTopicsResponse(throttle_time_ms=await mutations.throttle_time_ms(), topics=results)


async def handle_delete_topics(ctx, header, request, connection=None) -> DeleteTopicsResponse:
    if header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    results = []
    access = ctx.access(connection)
    cluster_delete = access.allows_cluster(AclOperation.DELETE)
    mutations = Mutations(ctx, connection, header)
    for name, topic_id in wanted:
        result = DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=topic_id)
        results.append(result)
        by_id = name is None
        if by_id:
            topic = ctx.metadata.topic_by_id(topic_id)
            if topic is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                continue
            name = topic.name
        if not cluster_delete:
            describable = access.allows(AclOperation.DESCRIBE, TOPIC, name)
            if not describable or not access.allows(AclOperation.DELETE, TOPIC, name):
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # by id: named only when describable
                if by_id and describable:
                    result.name = name
                continue
        result.name = name
        if await mutations.refused():
            result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE
            continue
        topic = ctx.metadata.topics.get(name)
        error, message, deleted_id = await ctx.controller.delete_topic(name)
        result.error_code, result.error_message = error, message
        if error == 0 and topic is not None:
            await mutations.record(len(topic.partitions))
        if deleted_id is not None:
            result.topic_id = deleted_id
    await ctx.refresh_metadata()
    return DeleteTopicsResponse(throttle_time_ms=await mutations.throttle_time_ms(), responses=results)


async def handle_create_partitions(ctx, header, request, connection=None) -> CreatePartitionsResponse:
    results = []
    alterable = ctx.access(connection).allowed(AclOperation.ALTER, TOPIC, (t.name for t in request.topics))
    mutations = Mutations(ctx, connection, header)
    for t in request.topics:
        if t.name not in alterable:
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
        elif t.assignments:
            error, message = ErrorCode.INVALID_REQUEST, "manual replica assignments are not supported yet"
        elif await mutations.refused():
            error, message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE
        else:
            topic = ctx.metadata.topics.get(t.name)
            error, message = await ctx.controller.create_partitions(t.name, t.count, request.validate_only)
            if error == 0 and topic is not None and not request.validate_only:
                await mutations.record(t.count - len(topic.partitions))
        results.append(CreatePartitionsResponse.CreatePartitionsTopicResult(
            name=t.name, error_code=error, error_message=message))
    await ctx.refresh_metadata()
    return CreatePartitionsResponse(throttle_time_ms=await mutations.throttle_time_ms(), results=results)
