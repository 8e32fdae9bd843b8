"""DescribeConfigs and IncrementalAlterConfigs for topics, groups and brokers: a broker's static configs are
described, its dynamic ones (actors/config_schema.py DYNAMIC_BROKER_CONFIGS: the replication throttles) altered
too, for one broker (its id) or the cluster's default (""), as Kafka's dynamic broker configs.

With an authorizer, as Kafka: describing needs DESCRIBE_CONFIGS, altering ALTER_CONFIGS, on the
topic, the group, or the cluster for a broker; a refused resource answers TOPIC_/GROUP_/
CLUSTER_AUTHORIZATION_FAILED and is left as it is.
"""
from __future__ import annotations

from actors.config_schema import (BROKER_DEFAULTS, GROUP_CONFIG_SOURCES, TOPIC_CONFIG_SOURCES, effective_group_configs,
                                  is_sensitive)
from protocol.errors import ErrorCode
from protocol.messages import DescribeConfigsResponse, IncrementalAlterConfigsResponse

from actors.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP = 2, 4, 32
CONFIG_SOURCE_TOPIC, CONFIG_SOURCE_STATIC_BROKER, CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_GROUP = 1, 4, 5, 8
CONFIG_SOURCE_DYNAMIC_BROKER, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER = 2, 3
CONFIG_TYPE_BOOLEAN, CONFIG_TYPE_STRING, CONFIG_TYPE_INT, CONFIG_TYPE_LONG = 1, 2, 3, 5
OP_SET, OP_DELETE = 0, 1


_ACL_RESOURCES = {RESOURCE_TOPIC: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                  RESOURCE_GROUP: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
                  RESOURCE_BROKER: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)}


def refused(access, operation: AclOperation, resource) -> int:
    """The authorization error for one config resource, or 0 (types Kray does not serve: 0, and
    the handler answers them as before)."""
    found = _ACL_RESOURCES.get(resource.resource_type)
    if found is None:
        return 0
    resource_type, error = found
    name = CLUSTER_NAME if resource_type is ResourceType.CLUSTER else resource.resource_name
    return 0 if access.allows(operation, resource_type, name) else error


def _text(value) -> str | None:
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _type(value) -> int:
    if isinstance(value, bool):
        return CONFIG_TYPE_BOOLEAN
    if isinstance(value, int):
        return CONFIG_TYPE_LONG
    return CONFIG_TYPE_STRING


def _entry(name, value, source, synonyms, wanted_synonyms):
    sensitive = is_sensitive(name)  # passwords, keys, JAAS configs: named, never shown (as Kafka)
    return DescribeConfigsResponse.DescribeConfigsResourceResult(
        name=name, value=None if sensitive else _text(value), read_only=False, config_source=source,
        is_sensitive=sensitive,
        synonyms=synonyms if wanted_synonyms else [], config_type=_type(value), documentation=None)


def _synonym(name, value, source):
    return DescribeConfigsResponse.DescribeConfigsSynonym(name=name, value=None if is_sensitive(name) else _text(value),
                                                          source=source)


async def _describe_topic(ctx, resource, include_synonyms):
    found = await ctx.controller.topic_configs(resource.resource_name)
    if found is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.resource_name!r} does not exist", []
    configs = []
    for key, value in sorted(found["effective"].items()):
        synonyms = []
        if key in found["overrides"]:
            synonyms.append(_synonym(key, value, CONFIG_SOURCE_TOPIC))
        broker_key = TOPIC_CONFIG_SOURCES.get(key)
        if broker_key:
            source = (CONFIG_SOURCE_STATIC_BROKER if ctx.config[broker_key] != BROKER_DEFAULTS[broker_key]
                      else CONFIG_SOURCE_DEFAULT)
            synonyms.append(_synonym(broker_key, ctx.config[broker_key], source))
        source = synonyms[0].source if synonyms else CONFIG_SOURCE_DEFAULT
        configs.append(_entry(key, value, source, synonyms, include_synonyms))
    return 0, None, configs


def _describe_group(ctx, resource, include_synonyms):
    """Every group config with its value in force (an override held to the broker's bounds, as
    Kafka's GroupConfig.evaluate), its source (GROUP_CONFIG for an override, else where the broker
    config that supplies its default comes from) and, asked for, its synonyms."""
    overrides = ctx.metadata.group_configs.get(resource.resource_name, {})
    configs = []
    for key, value in sorted(effective_group_configs(overrides, ctx.config).items()):
        synonyms = [_synonym(key, value, CONFIG_SOURCE_GROUP)] if key in overrides else []
        broker_key = GROUP_CONFIG_SOURCES.get(key)
        if broker_key:
            broker_source = (CONFIG_SOURCE_STATIC_BROKER if ctx.config[broker_key] != BROKER_DEFAULTS[broker_key]
                             else CONFIG_SOURCE_DEFAULT)
            synonyms.append(_synonym(broker_key, ctx.config[broker_key], broker_source))
        source = synonyms[0].source if synonyms else CONFIG_SOURCE_DEFAULT
        configs.append(_entry(key, value, source, synonyms, include_synonyms))
    return 0, None, configs


def _describe_broker(ctx, resource, include_synonyms):
    if resource.resource_name not in ("", str(ctx.broker_id)):
        return ErrorCode.INVALID_REQUEST, f"this is broker {ctx.broker_id}; ask broker {resource.resource_name}", []
    dynamic = getattr(ctx.metadata, "dynamic_broker_configs", None) or {}
    if not resource.resource_name:  # the cluster-wide default: only what is set there, as Kafka 4.4 answers
        return 0, None, [_entry(key, value, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER,
                                [_synonym(key, value, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER)], include_synonyms)
                         for key, value in sorted(dynamic.get("", {}).items())]
    scopes = [(dynamic.get(str(ctx.broker_id), {}), CONFIG_SOURCE_DYNAMIC_BROKER),
              (dynamic.get("", {}), CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER)]
    configs = []
    for key, value in sorted(ctx.config.items()):
        source = CONFIG_SOURCE_STATIC_BROKER if value != BROKER_DEFAULTS.get(key) else CONFIG_SOURCE_DEFAULT
        synonyms = [_synonym(key, values[key], scope) for values, scope in scopes if key in values]
        synonyms.append(_synonym(key, value, source))
        configs.append(_entry(key, synonyms[0].value if len(synonyms) > 1 else value, synonyms[0].source,
                              synonyms, include_synonyms))
    return 0, None, configs


async def handle_describe_configs(ctx, header, request, connection=None) -> DescribeConfigsResponse:
    results = []
    access = ctx.access(connection)
    for resource in request.resources:
        if refusal := refused(access, AclOperation.DESCRIBE_CONFIGS, resource):
            error, message, configs = refusal, None, []
        elif resource.resource_type == RESOURCE_TOPIC:
            error, message, configs = await _describe_topic(ctx, resource, request.include_synonyms)
        elif resource.resource_type == RESOURCE_BROKER:
            error, message, configs = _describe_broker(ctx, resource, request.include_synonyms)
        elif resource.resource_type == RESOURCE_GROUP:
            await ctx.refresh_metadata()
            error, message, configs = _describe_group(ctx, resource, request.include_synonyms)
        else:
            error, message, configs = ErrorCode.INVALID_REQUEST, f"resource type {resource.resource_type} is not supported", []
        if resource.configuration_keys is not None:
            configs = [c for c in configs if c.name in set(resource.configuration_keys)]
        results.append(DescribeConfigsResponse.DescribeConfigsResult(
            error_code=error, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name, configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


async def handle_incremental_alter_configs(ctx, header, request, connection=None) -> IncrementalAlterConfigsResponse:
    responses = []
    access = ctx.access(connection)
    for resource in request.resources:
        error, message = 0, None
        changes = {c.name: (c.value if c.config_operation == OP_SET else None) for c in resource.configs}
        if refusal := refused(access, AclOperation.ALTER_CONFIGS, resource):
            error = refusal
        elif resource.resource_type not in (RESOURCE_TOPIC, RESOURCE_GROUP, RESOURCE_BROKER):
            error, message = ErrorCode.INVALID_REQUEST, "only topic, group and broker configs can be altered"
        elif any(c.config_operation not in (OP_SET, OP_DELETE) for c in resource.configs):
            error, message = ErrorCode.INVALID_CONFIG, "APPEND and SUBTRACT apply to list configs; Kray's configs are not lists"
        elif resource.resource_type == RESOURCE_TOPIC:
            error, message = await ctx.controller.alter_topic_configs(resource.resource_name, changes, True,
                                                                      request.validate_only)
        elif resource.resource_type == RESOURCE_BROKER:
            error, message = await ctx.controller.alter_broker_configs(resource.resource_name, changes,
                                                                       request.validate_only)
            await ctx.refresh_metadata()
        else:
            error, message = await ctx.controller.alter_group_configs(resource.resource_name, changes, True,
                                                                      request.validate_only)
            await ctx.refresh_metadata()
        responses.append(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=error, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)


