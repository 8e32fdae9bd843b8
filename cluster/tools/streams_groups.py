"""`kray streams-groups`, after Kafka 4.4's kafka-streams-groups.sh: list streams groups (KIP-1071), describe one
(its state, its members and their tasks, or the lag of its input partitions) and delete an empty one.
The layouts are Kafka's (those of --describe --members --verbose and of standby and warmup tasks were not
compared with it).
Not built yet: --reset-offsets, --delete-offsets and the internal-topic deletion options."""
from __future__ import annotations

import sys

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (DeleteGroupsRequest, FindCoordinatorRequest, ListGroupsRequest, ListOffsetsRequest,
                               MetadataRequest, OffsetFetchRequest, StreamsGroupDescribeRequest)

KEY_TYPE_GROUP = 0
LATEST = -1
CLIENT_ID = "kray-streams-groups"
STATES = ("Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead")


def add_parser(sub) -> None:
    p = sub.add_parser("streams-groups", help="list, describe and delete streams groups (like kafka-streams-groups.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    actions = p.add_mutually_exclusive_group(required=True)
    for name in ("list", "describe", "delete"):
        actions.add_argument(f"--{name}", action="store_true")
    p.add_argument("--group", help="the streams group id (the application.id)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="with --describe: the members and their tasks")
    view.add_argument("--offsets", action="store_true", help="with --describe: the input partitions' lag (default)")
    view.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                      help="with --describe: the group's state; with --list: each group's state, only these "
                           "states if given (comma-separated: " + ", ".join(STATES) + ")")
    p.add_argument("--verbose", action="store_true", help="with --describe: epochs and target assignments too")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"kray streams-groups: {message}", file=sys.stderr)
    return 1


def run(args) -> int:
    if not args.list and not args.group:
        return _fail("this action needs --group GROUP")
    try:
        with KafkaConnection(args.bootstrap_server, client_id=CLIENT_ID) as conn:
            if args.list:
                return _list(conn, args.state)
            c = conn.send(FindCoordinatorRequest(key=args.group, key_type=KEY_TYPE_GROUP,
                                                 coordinator_keys=[args.group]))
            c = c.coordinators[0] if c.coordinators else c
            if c.error_code:
                return _fail(f"no coordinator for group {args.group}: {ErrorCode(c.error_code).name}")
            same = (c.host, c.port) == conn.address
            coordinator = conn if same else KafkaConnection(f"{c.host}:{c.port}", client_id=CLIENT_ID)
            try:
                if args.delete:
                    return _delete(coordinator, args.group)
                return _describe(conn, coordinator, f"{c.host}:{c.port} ({c.node_id})", args)
            finally:
                if not same:
                    coordinator.close()
    except AdminError as e:
        return _fail(str(e))


def _list(conn, states: str | None) -> int:
    """Every broker lists the groups it coordinates: ask them all."""
    wanted = [s.strip() for s in (states or "").split(",") if s.strip()]
    unknown = [s for s in wanted if s.lower() not in {x.lower() for x in STATES}]
    if unknown:
        return _fail(f"Invalid state list '{states}'. Valid states are: {', '.join(STATES)}")
    brokers = conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False)).brokers
    groups: dict[str, str] = {}
    for b in brokers:
        broker = conn if (b.host, b.port) == conn.address else KafkaConnection(f"{b.host}:{b.port}",
                                                                               client_id=CLIENT_ID)
        try:
            r = broker.send(ListGroupsRequest(states_filter=wanted, types_filter=["streams"]))
        finally:
            if broker is not conn:
                broker.close()
        if r.error_code:
            return _fail(f"listing groups on broker {b.node_id} failed: {ErrorCode(r.error_code).name}")
        groups.update({g.group_id: g.group_state for g in r.groups})
    if states is None:
        for group in sorted(groups):
            print(group)
        return 0
    width = max([15] + [len(g) for g in groups])
    print(f"{'GROUP':<{width}} STATE")
    for group in sorted(groups):
        print(f"{group:<{width}} {groups[group]}")
    return 0


def _describe(conn, coordinator, coordinator_name: str, args) -> int:
    d = coordinator.send(StreamsGroupDescribeRequest(group_ids=[args.group], include_authorized_operations=False)
                         ).groups[0]
    if d.error_code:
        return _fail(f"group {args.group}: {ErrorCode(d.error_code).name} {d.error_message or ''}".rstrip())
    group_width = max(15, len(d.group_id))
    if args.state is not None:
        if d.group_state == "Empty":
            print(f"\nStreams group '{d.group_id}' has no active members.", file=sys.stderr)
        width = max(25, len(coordinator_name))
        assignor = d.assignor_name or ""
        if args.verbose:
            print(f"{'GROUP':<{group_width}} {'COORDINATOR (ID)':<{width}} {'ASSIGNOR':<15} {'STATE':<25} "
                  f"{'GROUP-EPOCH':<15} {'TARGET-ASSIGNMENT-EPOCH':<25} #MEMBERS")
            print(f"{d.group_id:<{group_width}} {coordinator_name:<{width}} {assignor:<15} {d.group_state:<25} "
                  f"{d.group_epoch:<15} {d.assignment_epoch:<25} {len(d.members)}")
        else:
            print(f"{'GROUP':<{group_width}} {'COORDINATOR (ID)':<{width}} {'ASSIGNOR':<15} {'STATE':<25} #MEMBERS")
            print(f"{d.group_id:<{group_width}} {coordinator_name:<{width}} {assignor:<15} {d.group_state:<25} "
                  f"{len(d.members)}")
        return 0
    if not d.members:
        print(f"\nStreams group '{d.group_id}' has no active members.", file=sys.stderr)
        return 0
    if args.members:
        return _members(d, group_width, args.verbose)
    return _offsets(conn, coordinator, d, group_width, args.verbose)


def _tasks(kind: str, tasks) -> str:
    """Kafka 4.4's layout: "ACTIVE: 0:[0,1]; 1:[0,1];"."""
    return f"{kind}: " + " ".join(f"{t.subtopology_id}:[{','.join(map(str, t.partitions))}];" for t in tasks)


def _members(d, group_width: int, verbose: bool) -> int:
    member_w = max([15] + [len(m.member_id) for m in d.members])
    process_w = max([15] + [len(m.process_id) for m in d.members])
    client_w = max([15] + [len(m.client_id) for m in d.members])
    if verbose:
        print(f"{'GROUP':<{group_width}} {'TARGET-ASSIGNMENT-EPOCH':<25} {'TOPOLOGY-EPOCH':<14} "
              f"{'MEMBER':<{member_w}} {'MEMBER-PROTOCOL':<15} {'MEMBER-EPOCH':<15} {'PROCESS':<{process_w}} "
              f"{'CLIENT-ID':<{client_w}} ASSIGNMENTS")
    else:
        print(f"{'GROUP':<{group_width}} {'MEMBER':<{member_w}} {'PROCESS':<{process_w}} {'CLIENT-ID':<{client_w}} "
              f"ASSIGNMENTS")
    for m in sorted(d.members, key=lambda m: m.member_id):
        a = m.assignment
        shown = " ".join(s for s in (_tasks("ACTIVE", a.active_tasks) if a.active_tasks else "",
                                     _tasks("STANDBY", a.standby_tasks) if a.standby_tasks else "",
                                     _tasks("WARMUP", a.warmup_tasks) if a.warmup_tasks else "") if s)
        if verbose:
            t = m.target_assignment
            target = " ".join(s for s in (_tasks("TARGET-ACTIVE", t.active_tasks) if t.active_tasks else "",
                                          _tasks("TARGET-STANDBY", t.standby_tasks) if t.standby_tasks else "",
                                          _tasks("TARGET-WARMUP", t.warmup_tasks) if t.warmup_tasks else "") if s)
            print(f"{d.group_id:<{group_width}} {d.assignment_epoch:<25} {m.topology_epoch:<14} "
                  f"{m.member_id:<{member_w}} {'classic' if m.is_classic else 'streams':<15} {m.member_epoch:<15} "
                  f"{m.process_id:<{process_w}} {m.client_id:<{client_w}} {' '.join(x for x in (shown, target) if x)}")
        else:
            print(f"{d.group_id:<{group_width}} {m.member_id:<{member_w}} {m.process_id:<{process_w}} "
                  f"{m.client_id:<{client_w}} {shown}")
    return 0


def _offsets(conn, coordinator, d, group_width: int, verbose: bool) -> int:
    """Each input partition of the members' active tasks (source and repartition source topics): committed offset,
    log end, lag (from offset 0 when nothing is committed, as Kafka 4.4's tool shows it)."""
    sources = {s.subtopology_id: list(s.source_topics) + [i.name for i in s.repartition_source_topics]
               for s in (d.topology.subtopologies if d.topology else [])}
    partitions = sorted({(topic, p) for m in d.members for t in m.assignment.active_tasks
                         for topic in sources.get(t.subtopology_id, []) for p in t.partitions})
    topics = sorted({t for t, _ in partitions})
    committed: dict[tuple[str, int], tuple[int, int]] = {}
    if topics:
        r = coordinator.send(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=d.group_id, topics=[OffsetFetchRequest.OffsetFetchRequestTopics(
                name=t, partition_indexes=[p for x, p in partitions if x == t]) for t in topics])]), 8)
        for t in r.groups[0].topics:
            for p in t.partitions:
                if not p.error_code and p.committed_offset >= 0:
                    committed[(t.name, p.partition_index)] = (p.committed_offset, p.committed_leader_epoch)
    ends = _log_ends(conn, topics, partitions)
    topic_w = max([15] + [len(t) for t in topics])
    if verbose:
        print(f"{'GROUP':<{group_width}} {'TOPIC':<{topic_w}} {'PARTITION':<10} {'CURRENT-OFFSET':<15} "
              f"{'LEADER-EPOCH':<15} {'LOG-END-OFFSET':<15} {'OFFSET-LAG':<15}")
    else:
        print(f"{'GROUP':<{group_width}} {'TOPIC':<{topic_w}} {'PARTITION':<10} OFFSET-LAG")
    for topic, p in partitions:
        offset, epoch = committed.get((topic, p), (None, -1))
        end = ends.get((topic, p))
        lag = "-" if end is None else str(max(end - (offset or 0), 0))
        if verbose:
            print(f"{d.group_id:<{group_width}} {topic:<{topic_w}} {p:<10} {'-' if offset is None else offset:<15} "
                  f"{'-' if epoch < 0 else epoch:<15} {'-' if end is None else end:<15} {lag:<15}")
        else:
            print(f"{d.group_id:<{group_width}} {topic:<{topic_w}} {p:<10} {lag}")
    return 0


def _log_ends(conn, topics: list[str], partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> log end offset, asked of each partition's leader."""
    if not topics:
        return {}
    metadata = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                         allow_auto_topic_creation=False))
    brokers = {b.node_id: b for b in metadata.brokers}
    wanted = set(partitions)
    by_leader: dict[int, dict[str, list[int]]] = {}
    for t in metadata.topics:
        for p in t.partitions:
            if (t.name, p.partition_index) in wanted:
                by_leader.setdefault(p.leader_id, {}).setdefault(t.name, []).append(p.partition_index)
    out = {}
    for leader, by_topic in by_leader.items():
        b = brokers.get(leader)
        if b is None:
            continue
        with KafkaConnection(f"{b.host}:{b.port}", client_id=CLIENT_ID) as leader_conn:
            r = leader_conn.send(ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=30000, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=i, timestamp=LATEST) for i in indexes])
                for t, indexes in by_topic.items()]))
        for t in r.topics:
            for p in t.partitions:
                if not p.error_code:
                    out[(t.name, p.partition_index)] = p.offset
    return out


def _delete(conn, group: str) -> int:
    result = conn.send(DeleteGroupsRequest(groups_names=[group])).results[0]
    if result.error_code:
        return _fail(f"Deletion of some streams groups failed: {group}: {ErrorCode(result.error_code).name} "
                     f"{result.error_message or ''}".rstrip())
    print(f"Deletion of requested streams groups ('{group}') was successful.")
    return 0
