"""`kray reassign-partitions`, after Kafka's kafka-reassign-partitions.sh (ReassignPartitionsCommand):
move partitions' replicas between brokers with AlterPartitionReassignments, from Kafka's JSON plan:

    {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3, 4]}]}

--generate proposes a plan for the topics of --topics-to-move-json-file ({"version": 1, "topics": [{"topic":
"orders"}]}) over the brokers of --broker-list (each topic's replication factor kept, replicas spread round-robin:
Kafka's tool starts at a random broker, this one at the partition's index, so the same input proposes the same
plan); --execute starts a plan (and prints the current assignment, to roll back with), with --throttle setting
Kafka's replication throttles (the moving replicas in the topics' leader/follower.replication.throttled.replicas,
the rate in the brokers' leader/follower.replication.throttled.rate); --verify says where each partition is and,
once no reassignment runs in the cluster, removes the throttles; --cancel stops the plan's moves in progress
(each partition back to its original replicas) and removes the throttles; --list shows the moves in progress.
The lines printed are Kafka's."""
from __future__ import annotations

import json
import sys

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (AlterPartitionReassignmentsRequest as Alter, IncrementalAlterConfigsRequest as Configs,
                               ListPartitionReassignmentsRequest as ListMoves, MetadataRequest)

CLIENT_ID = "kray-reassign-partitions"
TIMEOUT_MS = 30_000
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
OP_SET, OP_DELETE = 0, 1
BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                    "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
CANNOT_EXECUTE = ("Cannot execute because there is an existing partition assignment.  Use --additional to override "
                  "this and create a new partition assignment in addition to the existing one. The --additional flag "
                  "can also be used to change the throttle by resubmitting the current reassignment.")
RUN_VERIFY = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle "
              "is removed.")
ACTIONS = ("generate", "execute", "verify", "cancel", "list")

Partition = tuple[str, int]


def add_parser(sub) -> None:
    p = sub.add_parser("reassign-partitions", help="move partition replicas between brokers "
                                                   "(like kafka-reassign-partitions.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    for action, text in (("generate", "propose a plan for --topics-to-move-json-file over --broker-list"),
                         ("execute", "start the plan of --reassignment-json-file"),
                         ("verify", "say whether the plan of --reassignment-json-file is done; once no move "
                                    "runs, remove the replication throttles"),
                         ("cancel", "cancel the moves of --reassignment-json-file in progress and remove the "
                                    "throttles"),
                         ("list", "list the partition moves in progress")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version": 1, "partitions": [{"topic": T, "partition": P, "replicas": [B, ...]}]}')
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"version": 1, "topics": [{"topic": T}]}')
    p.add_argument("--broker-list", metavar="IDS", help="the brokers to place replicas on, e.g. 1,2,3 (--generate)")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="limit the moving replicas' replication to this many bytes/s per broker (--execute)")
    p.add_argument("--additional", action="store_true",
                   help="execute although other moves are in progress (or resubmit to change the throttle)")
    p.add_argument("--preserve-throttles", action="store_true", help="--verify and --cancel leave the throttles")
    p.add_argument("--disable-rack-aware", action="store_true", help="accepted for Kafka's sake: Kray's --generate "
                                                                       "does not place by rack")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS", help="accepted for Kafka's sake")
    p.set_defaults(func=run)


class UsageError(AdminError):
    pass


def _read_json(path: str) -> object:
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise AdminError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError:
        raise AdminError("The input string is not a valid JSON") from None


def parse_plan(data: object) -> list[tuple[Partition, list[int]]]:
    """Kafka's parsePartitionReassignmentData and its checks, in its words."""
    if not isinstance(data, dict):
        raise AdminError("The input string is not a valid JSON")
    version = data.get("version", 1)
    if version != 1:
        raise AdminError(f"Not supported version field value {version}")
    entries = data.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise AdminError("Partition reassignment list cannot be empty")
    plan, seen = [], []
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
                and isinstance(e.get("replicas"), list) and all(isinstance(r, int) for r in e["replicas"])):
            raise AdminError('each partition needs "topic" (a string), "partition" (an integer) and "replicas" '
                             '(a list of broker ids)')
        replicas = e["replicas"]
        if not replicas:
            raise AdminError("Partition replica list cannot be empty")
        log_dirs = e.get("log_dirs", ["any"] * len(replicas))
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise AdminError(f"Size of replicas list {replicas} is different from size of log dirs list {log_dirs} "
                             f"for partition {e['topic']}-{e['partition']}")
        if any(d != "any" for d in log_dirs):
            raise AdminError(f"log_dirs other than \"any\" ({log_dirs}) move replicas between a broker's log "
                             f"directories: Kray's brokers have one")
        plan.append(((e["topic"], e["partition"]), replicas))
        seen.append((e["topic"], e["partition"]))
    duplicates = sorted({p for p in seen if seen.count(p) > 1})
    if duplicates:
        raise AdminError(f"Partition reassignment contains duplicate topic partitions: "
                         f"{','.join(f'{t}-{p}' for t, p in duplicates)}")
    twice = [f"{t}-{p}: {','.join(map(str, r))}" for (t, p), r in plan if len(set(r)) != len(r)]
    if twice:
        raise AdminError(f"Partition replica lists may not contain duplicate entries: {'. '.join(twice)}")
    return plan


def plan_json(assignment: dict[Partition, list[int]]) -> str:
    """Kafka's formatAsReassignmentJson: partitions sorted by topic, then partition; log_dirs "any"."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": assignment[(t, p)], "log_dirs": ["any"] * len(assignment[(t, p)])}
        for t, p in sorted(assignment)]}, separators=(",", ":"))


def _names(parts) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(parts))


def _metadata(conn: KafkaConnection, topics: list[str] | None):
    request = MetadataRequest(topics=None if topics is None else [
        MetadataRequest.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False)
    return conn.send(request)


def current_assignment(conn: KafkaConnection, topics: set[str]) -> tuple[dict[Partition, list[int]], set[int]]:
    """Each partition's replicas (of `topics`) and the cluster's broker ids, from Metadata."""
    answer = _metadata(conn, sorted(topics))
    assignment = {}
    for t in answer.topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"Topic {t.name} not found.")
        if t.error_code:
            raise AdminError(f"topic {t.name}: {ErrorCode(t.error_code).name}")
        for p in t.partitions:
            assignment[(t.name, p.partition_index)] = list(p.replica_nodes)
    return assignment, {b.node_id for b in answer.brokers}


def ongoing(conn: KafkaConnection) -> dict[Partition, tuple[list[int], list[int], list[int]]]:
    answer = conn.send(ListMoves(timeout_ms=TIMEOUT_MS, topics=None))
    if answer.error_code:
        raise AdminError(f"listing the partition reassignments failed: {ErrorCode(answer.error_code).name}: "
                         f"{answer.error_message}")
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in answer.topics for p in t.partitions}


def alter(conn: KafkaConnection, targets: dict[Partition, list[int] | None]) -> dict[Partition, str]:
    """AlterPartitionReassignments; the partitions that failed, each with why."""
    topics: dict[str, list] = {}
    for (t, p), replicas in sorted(targets.items()):
        topics.setdefault(t, []).append(Alter.ReassignablePartition(partition_index=p, replicas=replicas))
    answer = conn.send(Alter(timeout_ms=TIMEOUT_MS, allow_replication_factor_change=True, topics=[
        Alter.ReassignableTopic(name=t, partitions=ps) for t, ps in topics.items()]))
    if answer.error_code:
        return {part: f"{ErrorCode(answer.error_code).name}: {answer.error_message}" for part in targets}
    return {(t.name, p.partition_index): f"{ErrorCode(p.error_code).name}: {p.error_message or ''}".rstrip(": ")
            for t in answer.responses for p in t.partitions if p.error_code}


def alter_configs(conn: KafkaConnection, resources: list[tuple[int, str, list[tuple[str, str | None]]]]) -> None:
    if not resources:
        return
    answer = conn.send(Configs(validate_only=False, resources=[
        Configs.AlterConfigsResource(resource_type=kind, resource_name=name, configs=[
            Configs.AlterableConfig(name=key, config_operation=OP_DELETE if value is None else OP_SET, value=value)
            for key, value in ops]) for kind, name, ops in resources]))
    failed = [f"{r.resource_name}: {ErrorCode(r.error_code).name}: {r.error_message}" for r in answer.responses
              if r.error_code]
    if failed:
        raise AdminError("altering the throttle configs failed: " + "; ".join(failed))


def clear_throttles(conn: KafkaConnection, plan: list[tuple[Partition, list[int]]]) -> None:
    """Kafka's clearAllThrottles: the broker rates of every broker (and every broker of the plan), the
    throttled replica lists of the plan's topics."""
    brokers = {b.node_id for b in _metadata(conn, []).brokers} | {r for _, replicas in plan for r in replicas}
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          f"{','.join(map(str, sorted(brokers)))}")
    alter_configs(conn, [(RESOURCE_BROKER, str(b), [(k, None) for k in BROKER_THROTTLES]) for b in sorted(brokers)])
    topics = sorted({t for (t, _), _ in plan})
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    alter_configs(conn, [(RESOURCE_TOPIC, t, [(k, None) for k in TOPIC_THROTTLES]) for t in topics])


def throttled_replicas(plan: list[tuple[Partition, list[int]]], current: dict[Partition, list[int]],
                       moves: dict[Partition, tuple[list[int], list[int], list[int]]]
                       ) -> tuple[dict[str, str], dict[str, str], set[int]]:
    """Kafka's calculateProposedMoveMap / calculateLeaderThrottles / calculateFollowerThrottles: per topic, the
    source replicas ("partition:broker", leaders' side) and the destinations (followers' side), and the brokers
    involved. A partition already moving keeps its move's sources (its original replicas)."""
    sources: dict[Partition, set[int]] = {part: set(r) - set(adding) for part, (r, adding, _) in moves.items()}
    destinations: dict[Partition, set[int]] = {part: set(adding) for part, (_, adding, _) in moves.items()}
    for part, replicas in plan:
        src = sources.get(part, set(current.get(part, [])))
        sources[part], destinations[part] = src, set(replicas) - src
    leader, follower = {}, {}
    for topic in sorted({t for t, _ in sources}):
        leader[topic] = ",".join(sorted(f"{p}:{b}" for (t, p), bs in sources.items() if t == topic for b in bs))
        follower[topic] = ",".join(sorted(f"{p}:{b}" for (t, p), bs in destinations.items() if t == topic
                                          for b in bs))
    brokers = set().union(*sources.values(), *destinations.values()) if sources else set()
    return leader, follower, brokers


def execute(conn: KafkaConnection, plan, throttle: int, additional: bool) -> int:
    moves = ongoing(conn)
    if moves and not additional:
        raise AdminError(CANNOT_EXECUTE)
    current, brokers = current_assignment(conn, {t for (t, _), _ in plan})
    unknown = sorted({r for _, replicas in plan for r in replicas} - brokers)
    if unknown:
        raise AdminError(f"Unknown broker id {unknown[0]}")
    missing = [part for part, _ in plan if part not in current]
    if missing:
        raise AdminError(f"Unable to find partition: {_names(missing[:1])}")
    print("Current partition replica assignment\n")
    print(plan_json({part: current[part] for part, _ in plan}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        print(RUN_VERIFY)
        leader, follower, moving = throttled_replicas(plan, current, moves)
        alter_configs(conn, [(RESOURCE_TOPIC, t, [(TOPIC_THROTTLES[0], leader[t]), (TOPIC_THROTTLES[1], follower[t])])
                             for t in sorted(leader)])
        alter_configs(conn, [(RESOURCE_BROKER, str(b), [(BROKER_THROTTLES[0], str(throttle)),
                                                        (BROKER_THROTTLES[1], str(throttle))])
                             for b in sorted(moving)])
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    errors = alter(conn, dict(plan))
    if errors:
        raise AdminError("Error reassigning partition(s):\n" + "\n".join(f"{t}-{p}: {why}"
                                                                          for (t, p), why in sorted(errors.items())))
    print(f"Successfully started partition reassignment{'' if len(plan) == 1 else 's'} for "
          f"{_names(part for part, _ in plan)}")
    return 0


def verify(conn: KafkaConnection, plan, preserve_throttles: bool) -> int:
    moves = ongoing(conn)
    current, _ = current_assignment(conn, {t for (t, p), _ in plan if (t, p) not in moves})
    print("Status of partition reassignment:")
    for (t, p), target in sorted(plan):
        if (t, p) in moves:
            print(f"Reassignment of partition {t}-{p} is still in progress.")
        elif current.get((t, p)) == target:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            have = ",".join(map(str, current.get((t, p), [])))
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is {have} rather than "
                  f"{','.join(map(str, target))}.")
    if not moves and not preserve_throttles:
        clear_throttles(conn, plan)
    return 0


def cancel(conn: KafkaConnection, plan, preserve_throttles: bool) -> int:
    moves = ongoing(conn)
    active = sorted(part for part, _ in plan if part in moves)
    if active:
        errors = alter(conn, {part: None for part in active})
        if errors:
            raise AdminError(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n"
                             + "\n".join(f"{t}-{p}: {why}" for (t, p), why in sorted(errors.items())))
        print(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for: {_names(active)}")
    else:
        print("None of the specified partition reassignments are active.")
    if not preserve_throttles:
        clear_throttles(conn, plan)
    return 0


def list_moves(conn: KafkaConnection) -> int:
    moves = ongoing(conn)
    if not moves:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), (replicas, adding, removing) in sorted(moves.items()):
        print(f"{t}-{p}: replicas: {','.join(map(str, replicas))}."
              + (f" adding: {','.join(map(str, adding))}." if adding else "")
              + (f" removing: {','.join(map(str, removing))}." if removing else ""))
    return 0


def propose(current: dict[Partition, list[int]], brokers: list[int]) -> dict[Partition, list[int]]:
    """Each topic's partitions over `brokers`, its replication factor kept: partition i's replicas are the
    brokers from index i on, round-robin (as Kafka's AdminUtils.assignReplicasToBrokers without racks, from a
    fixed start instead of a random one)."""
    proposed = {}
    for topic in sorted({t for t, _ in current}):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        if rf > len(brokers):
            raise AdminError(f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
        for i, p in enumerate(parts):
            proposed[(topic, p)] = [brokers[(i + j) % len(brokers)] for j in range(rf)]
    return proposed


def generate(conn: KafkaConnection, topics_file: str, broker_list: str) -> int:
    data = _read_json(topics_file)
    if not isinstance(data, dict) or data.get("version", 1) != 1:
        raise AdminError(f"Not supported version field value {data.get('version') if isinstance(data, dict) else data}")
    entries = data.get("topics")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("topic"), str)
                                                for e in entries):
        raise AdminError('expected {"version": 1, "topics": [{"topic": "name"}, ...]}')
    topics = [e["topic"] for e in entries]
    twice = sorted({t for t in topics if topics.count(t) > 1})
    if twice:
        raise AdminError(f"List of topics to reassign contains duplicate entries: {','.join(twice)}")
    try:
        brokers = [int(b) for b in broker_list.split(",")]
    except ValueError:
        raise AdminError(f"--broker-list {broker_list!r}: broker ids separated by commas, e.g. 1,2,3") from None
    dupes = sorted({b for b in brokers if brokers.count(b) > 1})
    if dupes:
        raise AdminError(f"Broker list contains duplicate entries: {','.join(map(str, dupes))}")
    current, known = current_assignment(conn, set(topics))
    unknown = [b for b in brokers if b not in known]
    if unknown:
        raise AdminError(f"Unknown broker id {unknown[0]}")
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(propose(current, sorted(brokers))))
    return 0


def _check_options(args) -> str:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise UsageError(f"Command must include exactly one action: {', '.join('--' + a for a in ACTIONS)}")
    action = chosen[0]
    if action in ("execute", "verify", "cancel") and not args.reassignment_json_file:
        raise UsageError('Missing required argument "[reassignment-json-file]"')
    if action == "generate" and not (args.topics_to_move_json_file and args.broker_list):
        raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    if args.throttle >= 0 and action != "execute":
        raise UsageError(f"Option \"[throttle]\" can't be used with action \"[{action}]\"")
    return action


def run(args) -> int:
    try:
        action = _check_options(args)
        plan = parse_plan(_read_json(args.reassignment_json_file)) if action in ("execute", "verify", "cancel") \
            else None
        with KafkaConnection(args.bootstrap_server, client_id=CLIENT_ID) as conn:
            if action == "generate":
                return generate(conn, args.topics_to_move_json_file, args.broker_list)
            if action == "execute":
                return execute(conn, plan, args.throttle, args.additional)
            if action == "verify":
                return verify(conn, plan, args.preserve_throttles)
            if action == "cancel":
                return cancel(conn, plan, args.preserve_throttles)
            return list_moves(conn)
    except AdminError as e:
        print(f"kray reassign-partitions: {e}", file=sys.stderr)
        return 1
