"""`kray share-groups`, after kafka-share-groups.sh: list, describe (members, offsets, state),
reset offsets, delete offsets, delete groups. Speaks the share admin APIs through Kray's own
small client (no Python Kafka library has them)."""
from __future__ import annotations

import sys
from datetime import datetime, timezone

from actors.share_coordinator.core import share_coordinator_key
from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (AlterShareGroupOffsetsRequest, DeleteGroupsRequest, DeleteShareGroupOffsetsRequest,
                               DescribeConfigsRequest, DescribeShareGroupOffsetsRequest, FindCoordinatorRequest, ListGroupsRequest,
                               ListOffsetsRequest, MetadataRequest, ReadShareGroupStateRequest,
                               ShareGroupDescribeRequest)

KEY_TYPE_GROUP, KEY_TYPE_SHARE = 0, 2
ARCHIVING = 3  # a state batch's delivery state: waiting for its dead-letter record (KIP-1191)
NO_LEADER_EPOCH = -1  # ReadShareGroupState without a leader epoch: a read that fences no leader
RESOURCE_GROUP = 32
DLQ_TOPIC_CONFIG = "errors.deadletterqueue.topic.name"
EARLIEST, LATEST = -2, -1


def add_parser(sub) -> None:
    p = sub.add_parser("share-groups", help="list, describe, reset and delete share groups (like kafka-share-groups.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    actions = p.add_mutually_exclusive_group(required=True)
    for name in ("list", "describe", "reset-offsets", "delete-offsets", "delete"):
        actions.add_argument(f"--{name}", action="store_true")
    p.add_argument("--group", help="the share group id")
    p.add_argument("--topic", action="append", default=[], help="topic (reset-offsets, delete-offsets; repeatable)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="with --describe: the group's members")
    view.add_argument("--offsets", action="store_true", help="with --describe: start offsets and lag (default)")
    view.add_argument("--state", action="store_true", help="with --describe: the group's state")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="first record at or after this time (UTC)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets, change nothing (default)")
    mode.add_argument("--execute", action="store_true", help="apply the new offsets")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"kray share-groups: {message}", file=sys.stderr)
    return 1


def _coordinator(conn: KafkaConnection, group: str) -> KafkaConnection:
    """A connection to the group's coordinator (FindCoordinator), the broker the group admin APIs go to."""
    r = conn.send(FindCoordinatorRequest(key=group, key_type=KEY_TYPE_GROUP, coordinator_keys=[group]))
    c = r.coordinators[0] if r.coordinators else r
    if c.error_code:
        raise AdminError(f"no coordinator for group {group}: {ErrorCode(c.error_code).name}")
    if (c.host, c.port) == conn.address:
        return conn
    return KafkaConnection(f"{c.host}:{c.port}", client_id="kray-share-groups")


def run(args) -> int:
    if not args.list and not args.group:
        return _fail("this action needs --group GROUP")
    try:
        with KafkaConnection(args.bootstrap_server, client_id="kray-share-groups") as conn:
            if args.list:
                return _list(conn)
            coordinator = _coordinator(conn, args.group)
            if args.describe:
                return _describe(coordinator, args)
            if args.delete:
                return _delete(coordinator, args.group)
            if args.delete_offsets:
                return _delete_offsets(coordinator, args)
            return _reset_offsets(conn, coordinator, args)
    except AdminError as e:
        return _fail(str(e))


def _list(conn) -> int:
    """Each broker lists the groups it coordinates: ask them all (as kafka-share-groups does)."""
    brokers = conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False)).brokers
    groups = set()
    for b in brokers:
        address = f"{b.host}:{b.port}"
        broker = conn if (b.host, b.port) == conn.address else KafkaConnection(address, client_id="kray-share-groups")
        try:
            r = broker.send(ListGroupsRequest(states_filter=[], types_filter=["share"]))
        finally:
            if broker is not conn:
                broker.close()
        if r.error_code:
            return _fail(f"listing groups on broker {b.node_id} ({address}) failed: {ErrorCode(r.error_code).name}")
        groups.update(g.group_id for g in r.groups)
    for group in sorted(groups):
        print(group)
    return 0


def _describe(conn, args) -> int:
    group = conn.send(ShareGroupDescribeRequest(group_ids=[args.group])).groups[0]
    if group.error_code:
        return _fail(f"group {args.group}: {ErrorCode(group.error_code).name} {group.error_message or ''}")
    if args.state:
        print("GROUP\tCOORDINATOR\tSTATE\tGROUP-EPOCH\tASSIGNMENT-EPOCH\t#MEMBERS")
        print(f"{group.group_id}\t{conn.address[0]}:{conn.address[1]}\t{group.group_state}\t{group.group_epoch}\t"
              f"{group.assignment_epoch}\t{len(group.members)}")
        return 0
    if args.members:
        print("GROUP\tCONSUMER-ID\tHOST\tCLIENT-ID\t#PARTITIONS\tASSIGNMENT")
        for m in group.members:
            parts = [f"{t.topic_name}:{','.join(map(str, sorted(t.partitions)))}" for t in m.assignment.topic_partitions]
            count = sum(len(t.partitions) for t in m.assignment.topic_partitions)
            print(f"{group.group_id}\t{m.member_id}\t{m.client_host}\t{m.client_id}\t{count}\t{';'.join(parts) or '-'}")
        return 0
    r = conn.send(DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=args.group, topics=None)]))
    g = r.groups[0]
    if g.error_code:
        return _fail(f"group {args.group}: {ErrorCode(g.error_code).name} {g.error_message or ''}")
    print("GROUP\tTOPIC\tPARTITION\tSTART-OFFSET\tLAG")
    for t in g.topics:
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            start = p.start_offset if p.start_offset >= 0 else "-"
            lag = p.lag if p.lag >= 0 else "-"
            print(f"{args.group}\t{t.topic_name}\t{p.partition_index}\t{start}\t{lag}")
    _describe_dead_letters(conn, args.group, [(t.topic_id, p.partition_index) for t in g.topics for p in t.partitions])
    return 0


def _describe_dead_letters(conn, group: str, partitions: list) -> None:
    """The group's dead-letter topic (KIP-1191), how many records it holds (its partitions' end
    minus start offsets: every group writing to that topic counts) and how many of the group's
    records wait ARCHIVING for their DLQ write, when it has one."""
    r = conn.send(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=RESOURCE_GROUP, resource_name=group, configuration_keys=[DLQ_TOPIC_CONFIG])]))
    found = [c.value for res in r.results if not res.error_code for c in res.configs if c.name == DLQ_TOPIC_CONFIG]
    if not found or not found[0]:
        return
    dlq = found[0]
    try:
        starts, ends = _offsets(conn, dlq, EARLIEST), _offsets(conn, dlq, LATEST)
        records = sum(end - starts[i] for i, end in ends.items())
    except AdminError:
        records = "-"  # not created yet
    print()
    print("GROUP\tDLQ-TOPIC\tDLQ-RECORDS\tARCHIVING")
    print(f"{group}\t{dlq}\t{records}\t{_archiving_count(conn, group, partitions)}")


def _archiving_count(conn, group: str, partitions: list) -> int | str:
    """Records of the group's share-partitions (topic id, partition) persisted as ARCHIVING: rejected
    (or out of delivery attempts) and not yet written to the DLQ topic. Read from each one's share
    coordinator (FindCoordinator of its share key, ReadShareGroupState without a leader epoch,
    which changes nothing), as the share-partition leaders read them; "-" where one cannot be read."""
    count = 0
    for topic_id, index in partitions:
        key = share_coordinator_key(group, topic_id, index)
        try:
            r = conn.send(FindCoordinatorRequest(key=key, key_type=KEY_TYPE_SHARE, coordinator_keys=[key]))
            c = r.coordinators[0] if r.coordinators else r
            if c.error_code:
                return "-"
            address = f"{c.host}:{c.port}"
            coordinator = conn if (c.host, c.port) == conn.address else KafkaConnection(address, client_id="kray-share-groups")
            try:
                read = coordinator.send(ReadShareGroupStateRequest(group_id=group, topics=[
                    ReadShareGroupStateRequest.ReadStateData(topic_id=topic_id, partitions=[
                        ReadShareGroupStateRequest.PartitionData(partition=index, leader_epoch=NO_LEADER_EPOCH)])]))
            finally:
                if coordinator is not conn:
                    coordinator.close()
        except AdminError:
            return "-"
        result = read.results[0].partitions[0]
        if result.error_code == ErrorCode.INVALID_REQUEST:  # never initialized: nothing delivered yet
            continue
        if result.error_code:
            return "-"
        count += sum(b.last_offset - b.first_offset + 1 for b in result.state_batches if b.delivery_state == ARCHIVING)
    return count


def _delete(conn, group) -> int:
    result = conn.send(DeleteGroupsRequest(groups_names=[group])).results[0]
    if result.error_code:
        return _fail(f"cannot delete {group}: {ErrorCode(result.error_code).name} {result.error_message or ''}")
    print(f"Deleted share group {group}.")
    return 0


def _delete_offsets(conn, args) -> int:
    if not args.topic:
        return _fail("--delete-offsets needs --topic TOPIC")
    r = conn.send(DeleteShareGroupOffsetsRequest(group_id=args.group, topics=[
        DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in args.topic]))
    if r.error_code:
        return _fail(f"{ErrorCode(r.error_code).name}: {r.error_message or ''}")
    failed = [t for t in r.responses if t.error_code]
    for t in failed:
        print(f"kray share-groups: {t.topic_name}: {ErrorCode(t.error_code).name}", file=sys.stderr)
    for t in r.responses:
        if not t.error_code:
            print(f"Deleted the offsets of share group {args.group} on topic {t.topic_name}.")
    return 1 if failed else 0


def _target_timestamp(args) -> int:
    if args.to_earliest:
        return EARLIEST
    if args.to_latest:
        return LATEST
    if args.to_datetime:
        moment = datetime.fromisoformat(args.to_datetime)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return int(moment.timestamp() * 1000)
    raise AdminError("--reset-offsets needs --to-earliest, --to-latest or --to-datetime")


def _list_offsets(conn, topic: str, indexes: list[int], timestamp: int) -> dict[int, int]:
    """partition -> offset for one ListOffsets timestamp, from the partitions' leader."""
    if not indexes:
        return {}
    r = conn.send(ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=30000, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=i, timestamp=timestamp) for i in indexes])]))
    failed = [p for p in r.topics[0].partitions if p.error_code]
    if failed:
        raise AdminError(f"{topic}-{failed[0].partition_index}: {ErrorCode(failed[0].error_code).name}")
    return {p.partition_index: p.offset for p in r.topics[0].partitions}


def _topic_offsets(metadata, topic, timestamp: int) -> dict[int, int]:
    """partition -> offset of one topic (from Metadata) for a ListOffsets timestamp, asked of each
    partition's leader; no record at or after that time: the end of the partition, as
    kafka-share-groups does."""
    by_leader: dict = {}
    for p in topic.partitions:
        by_leader.setdefault(p.leader_id, []).append(p.partition_index)
    brokers = {b.node_id: b for b in metadata.brokers}
    found: dict[int, int] = {}
    for leader, indexes in by_leader.items():
        b = brokers[leader]
        with KafkaConnection(f"{b.host}:{b.port}", client_id="kray-share-groups") as leader_conn:
            mine = _list_offsets(leader_conn, topic.name, indexes, timestamp)
            mine |= _list_offsets(leader_conn, topic.name, [i for i, o in mine.items() if o < 0], LATEST)
        found |= mine
    return found


def _offsets(conn, topic: str, timestamp: int) -> dict[int, int]:
    """partition -> offset for `timestamp` of every partition of `topic`; AdminError if it does not exist."""
    metadata = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                         allow_auto_topic_creation=False))
    t = metadata.topics[0]
    if t.error_code:
        raise AdminError(f"topic {topic}: {ErrorCode(t.error_code).name}")
    return _topic_offsets(metadata, t, timestamp)


def _reset_offsets(conn, coordinator, args) -> int:
    if not args.topic:
        return _fail("--reset-offsets needs --topic TOPIC")
    timestamp = _target_timestamp(args)
    metadata = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in args.topic],
                                         allow_auto_topic_creation=False))
    plan: list[tuple[str, int, int]] = []
    for topic in metadata.topics:
        if topic.error_code:
            return _fail(f"topic {topic.name}: {ErrorCode(topic.error_code).name}")
        found = _topic_offsets(metadata, topic, timestamp)
        plan += [(topic.name, i, offset) for i, offset in found.items()]
    print("GROUP\tTOPIC\tPARTITION\tNEW-START-OFFSET")
    for name, index, offset in sorted(plan):
        print(f"{args.group}\t{name}\t{index}\t{offset}")
    if not args.execute:
        print("(dry run: nothing changed; add --execute to apply)")
        return 0
    topics: dict = {}
    for name, index, offset in plan:
        topics.setdefault(name, []).append(AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition(
            partition_index=index, start_offset=offset))
    r = coordinator.send(AlterShareGroupOffsetsRequest(group_id=args.group, topics=[
        AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(topic_name=n, partitions=ps)
        for n, ps in topics.items()]))
    if r.error_code:
        return _fail(f"cannot reset offsets: {ErrorCode(r.error_code).name}: {r.error_message or ''}")
    errors = [(t.topic_name, p.partition_index, p.error_code) for t in r.responses for p in t.partitions if p.error_code]
    for name, index, code in errors:
        print(f"kray share-groups: {name}-{index}: {ErrorCode(code).name}", file=sys.stderr)
    return 1 if errors else 0
