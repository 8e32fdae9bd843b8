"""`kray topics`, after kafka-topics.sh: --create, --list, --describe, --delete, --alter.

The action may also be given as a word: `kray topics create --topic T`.
"""
from __future__ import annotations

import sys

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
                               DescribeConfigsRequest, IncrementalAlterConfigsRequest, MetadataRequest)

ACTIONS = ("create", "list", "describe", "delete", "alter")
RESOURCE_TOPIC = 2


def add_parser(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics (like kafka-topics.sh)")
    p.add_argument("action", nargs="?", choices=ACTIONS, help="what to do (or use --create/--list/...)")
    for action in ACTIONS:
        p.add_argument(f"--{action}", dest=f"flag_{action}", action="store_true", help=f"{action} topics")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--topic", help="the topic name")
    p.add_argument("--partitions", type=int, default=-1, help="number of partitions (create, alter)")
    p.add_argument("--replication-factor", type=int, default=-1, help="replicas per partition (create)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config (repeatable)")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY", help="remove a topic config (alter)")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave out internal topics (__consumer_offsets, ...) when listing or describing every topic")
    p.set_defaults(func=run)


def _action(args) -> str | None:
    chosen = [a for a in ACTIONS if getattr(args, f"flag_{a}")] + ([args.action] if args.action else [])
    if len(set(chosen)) != 1:
        return None
    return chosen[0]


def _fail(message: str) -> int:
    print(f"kray topics: {message}", file=sys.stderr)
    return 1


def run(args) -> int:
    action = _action(args)
    if action is None:
        return _fail("say exactly one of --create, --list, --describe, --alter, --delete")
    if action in ("create", "delete", "alter") and not args.topic:
        return _fail(f"--{action} needs --topic NAME")
    try:
        with KafkaConnection(args.bootstrap_server, client_id="kray-topics") as conn:
            return globals()[f"_{action}"](conn, args)
    except AdminError as e:
        return _fail(str(e))


def _configs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise AdminError(f"--config {pair!r} is not KEY=VALUE (example: --config retention.ms=60000)")
        out[key] = value
    return out


def _create(conn, args) -> int:
    request = CreateTopicsRequest(timeout_ms=30000, topics=[CreateTopicsRequest.CreatableTopic(
        name=args.topic, num_partitions=args.partitions, replication_factor=args.replication_factor,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in _configs(args.config).items()])])
    result = conn.send(request).topics[0]
    if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
        return 0
    if result.error_code:
        return _fail(f"cannot create {args.topic}: {ErrorCode(result.error_code).name}: {result.error_message or ''}")
    print(f"Created topic {args.topic}.")
    return 0


def _metadata(conn, topics: list[str] | None):
    wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    return conn.send(MetadataRequest(topics=wanted, allow_auto_topic_creation=False))


def _list(conn, args) -> int:
    for name in sorted(t.name for t in _metadata(conn, None).topics
                       if t.error_code == 0 and not (args.exclude_internal and t.is_internal)):
        print(name)
    return 0


def _describe(conn, args) -> int:
    metadata = _metadata(conn, [args.topic] if args.topic else None)
    status = 0
    for topic in sorted(metadata.topics, key=lambda t: t.name or ""):
        if args.exclude_internal and topic.is_internal and not args.topic:
            continue
        if topic.error_code:
            status = _fail(f"topic {topic.name}: {ErrorCode(topic.error_code).name}")
            continue
        configs = conn.send(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=RESOURCE_TOPIC, resource_name=topic.name, configuration_keys=None)])).results[0].configs
        overrides = ",".join(f"{c.name}={c.value}" for c in configs if c.config_source == 1)
        rf = len(topic.partitions[0].replica_nodes) if topic.partitions else 0
        print(f"Topic: {topic.name}\tTopicId: {topic.topic_id}\tPartitionCount: {len(topic.partitions)}\t"
              f"ReplicationFactor: {rf}\tConfigs: {overrides}")
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            print(f"\tTopic: {topic.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                  f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}")
    return status


def _delete(conn, args) -> int:
    result = conn.send(DeleteTopicsRequest(timeout_ms=30000, topic_names=[args.topic], topics=[
        DeleteTopicsRequest.DeleteTopicState(name=args.topic)])).responses[0]
    if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
        return 0
    if result.error_code:
        return _fail(f"cannot delete {args.topic}: {ErrorCode(result.error_code).name}: {result.error_message or ''}")
    print(f"Deleted topic {args.topic}.")
    return 0


def _alter(conn, args) -> int:
    if args.partitions != -1:
        result = conn.send(CreatePartitionsRequest(timeout_ms=30000, validate_only=False, topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name=args.topic, count=args.partitions,
                                                          assignments=None)])).results[0]
        if result.error_code:
            return _fail(f"cannot add partitions: {ErrorCode(result.error_code).name}: {result.error_message or ''}")
    changes = [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=0, value=v)
               for k, v in _configs(args.config).items()]
    changes += [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=1, value=None)
                for k in args.delete_config]
    if changes:
        result = conn.send(IncrementalAlterConfigsRequest(validate_only=False, resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=args.topic,
                                                                configs=changes)])).responses[0]
        if result.error_code:
            return _fail(f"cannot alter configs: {ErrorCode(result.error_code).name}: {result.error_message or ''}")
    print(f"Altered topic {args.topic}.")
    return 0
