"""`kray consumer-groups`, after kafka-consumer-groups.sh: list, describe (offsets, members, state),
reset offsets, delete offsets, delete groups, for classic and KIP-848 consumer groups. Speaks the group
admin APIs through Kray's own small client (`cluster.admin.KafkaConnection`), as `kray share-groups` does.

The pure parts (argument checks, topic specs, the ConsumerProtocol assignment decoder, the reset plan,
the tables) are functions of their inputs, tested without a broker in tests/unit/test_consumer_groups_tool.py.
"""
from __future__ import annotations

import struct
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (ConsumerGroupDescribeRequest, DeleteGroupsRequest, DescribeGroupsRequest,
                               FindCoordinatorRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest,
                               OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest)

CLIENT_ID = "kray-consumer-groups"
KEY_TYPE_GROUP = 0
EARLIEST, LATEST = -2, -1
MISSING = "-"
CONSUMER_PROTOCOL_TYPES = ("consumer", "")  # "" = a group that only holds offsets committed by an admin
LIST_TYPES = ["consumer", "classic"]
# OffsetCommit and OffsetFetch v10 name topics by id only; v9 still names them, which is all this tool needs
OFFSET_API_MAX_VERSION = 9
KNOWN_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
INACTIVE_STATES = ("empty", "dead")
COORDINATOR_RETRIES = 20
COORDINATOR_RETRY_S = 0.5
RESET_SPECS = ("to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by", "to_current")
TP = tuple[str, int]


def add_parser(sub) -> None:
    p = sub.add_parser("consumer-groups",
                       help="list, describe, reset and delete consumer groups (like kafka-consumer-groups.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="list the consumer groups")
    actions.add_argument("--describe", action="store_true", help="describe groups (--offsets, --members, --state)")
    actions.add_argument("--reset-offsets", action="store_true", help="reset a group's committed offsets")
    actions.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of some topics")
    actions.add_argument("--delete", action="store_true", help="delete groups")
    p.add_argument("--group", action="append", default=[], help="a consumer group id (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every consumer group (describe, reset, delete)")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
                   help="a topic, optionally some of its partitions (reset-offsets, delete-offsets; repeatable)")
    p.add_argument("--all-topics", action="store_true",
                   help="with --reset-offsets: every partition the group has committed offsets for")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag (default)")
    view.add_argument("--members", action="store_true", help="with --describe: the group's members")
    view.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                      help="with --describe: the group's state; with --list: show states, or only groups in "
                           "these comma-separated states (e.g. Stable,Empty)")
    p.add_argument("--verbose", action="store_true", help="with --describe --members: each member's assignment")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    to.add_argument("--to-latest", action="store_true", help="reset to the log end")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="reset to the first record at or after this time (UTC unless an offset like +02:00 is given)")
    to.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    to.add_argument("--shift-by", type=int, metavar="N", help="move the committed offsets by N (may be negative)")
    to.add_argument("--to-current", action="store_true", help="reset to the committed offsets (the log end if none)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets, change nothing (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"kray consumer-groups: {message}", file=sys.stderr)
    return 1


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


# ---- pure parts ------------------------------------------------------------------------------------------------

def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """'T' -> (T, None: every partition); 'T:0,2' -> (T, [0, 2]), as kafka-consumer-groups.sh reads --topic."""
    topic, sep, rest = spec.partition(":")
    if not topic:
        raise ValueError(f"--topic {spec!r} names no topic (example: --topic orders or --topic orders:0,1)")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in rest.split(",") if p.strip()})
    except ValueError:
        raise ValueError(f"--topic {spec!r}: partitions must be numbers, as in {topic}:0,1") from None
    if not partitions or partitions[0] < 0:
        raise ValueError(f"--topic {spec!r}: name partitions 0 or more after the colon, as in {topic}:0,1")
    return topic, partitions


def parse_datetime(text: str) -> int:
    """--to-datetime as epoch milliseconds; UTC unless the text carries an offset (Z, +02:00)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--to-datetime {text!r} is not YYYY-MM-DDTHH:mm:SS.sss (example: 2024-05-01T12:00:00.000)") \
            from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def parse_states(text: str) -> set[str]:
    """--list --state Stable,Empty -> {'stable', 'empty'} (case-insensitive, as Kafka's tool)."""
    known = {s.lower() for s in KNOWN_STATES}
    states = {s.strip().lower() for s in text.split(",") if s.strip()}
    bad = sorted(states - known)
    if bad:
        raise ValueError(f"--state {text!r}: unknown state(s) {', '.join(bad)}; "
                         f"the states are {', '.join(KNOWN_STATES)}")
    return states


def reset_spec(args) -> tuple[str, int | None]:
    """The chosen --to-*/--shift-by option as (kind, value)."""
    if args.to_earliest:
        return "earliest", None
    if args.to_latest:
        return "latest", None
    if args.to_datetime is not None:
        return "datetime", parse_datetime(args.to_datetime)
    if args.to_offset is not None:
        return "offset", args.to_offset
    if args.shift_by is not None:
        return "shift", args.shift_by
    if args.to_current:
        return "current", None
    raise ValueError("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, --to-offset, "
                     "--shift-by, --to-current")


def check_args(args) -> str | None:
    """What is wrong with the options, in words that say what to do, or None."""
    action = next(a for a in ("list", "describe", "reset_offsets", "delete_offsets", "delete") if getattr(args, a))
    flag = "--" + action.replace("_", "-")
    has_spec = any(getattr(args, s) not in (None, False) for s in RESET_SPECS)
    if action != "describe" and (args.offsets or args.members or args.verbose):
        return "--offsets, --members and --verbose go with --describe"
    if args.state is not None and action not in ("list", "describe"):
        return "--state goes with --list or --describe"
    if action == "describe" and args.state:
        return "--describe --state takes no value (states filter only --list)"
    if action != "reset_offsets" and (has_spec or args.dry_run or args.execute or args.all_topics):
        return "--to-*, --shift-by, --all-topics, --dry-run and --execute go with --reset-offsets"
    if action not in ("reset_offsets", "delete_offsets") and args.topic:
        return "--topic goes with --reset-offsets or --delete-offsets"
    if action == "list":
        if args.group or args.all_groups:
            return "--list takes no --group or --all-groups (use --describe --group G)"
    elif action == "delete_offsets":
        if len(args.group) != 1 or args.all_groups:
            return "--delete-offsets needs exactly one --group GROUP"
        if not args.topic:
            return "--delete-offsets needs --topic TOPIC[:P,P]"
    else:
        if bool(args.group) == args.all_groups:
            return f"{flag} needs --group GROUP (repeatable) or --all-groups"
    if action == "reset_offsets":
        if bool(args.topic) == args.all_topics:
            return "--reset-offsets needs --topic TOPIC[:P,P] (repeatable) or --all-topics"
        if not has_spec:
            return ("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by, "
                    "--to-current")
    try:
        for spec in args.topic:
            parse_topic_spec(spec)
        if args.to_datetime is not None:
            parse_datetime(args.to_datetime)
        if action == "list" and args.state:
            parse_states(args.state)
    except ValueError as e:
        return str(e)
    return None


@dataclass(frozen=True)
class Assignment:
    version: int
    partitions: dict[str, list[int]]
    user_data: bytes | None


def decode_assignment(data: bytes) -> Assignment:
    """Kafka's ConsumerProtocol Assignment (the classic protocol's member_assignment): int16 version, an
    array of (string topic, array of int32 partitions), nullable bytes user data. Empty bytes (a member in
    the middle of a rebalance) decode as no partitions. Later versions may append fields: ignored."""
    data = bytes(data)
    if not data:
        return Assignment(0, {}, None)
    try:
        at = 0

        def take(fmt):
            nonlocal at
            values = struct.unpack_from(fmt, data, at)
            at += struct.calcsize(fmt)
            return values[0]

        def take_bytes(n):
            nonlocal at
            if n < 0 or at + n > len(data):
                raise ValueError("truncated")
            chunk = data[at:at + n]
            at += n
            return chunk

        version = take(">h")
        partitions: dict[str, list[int]] = {}
        for _ in range(max(take(">i"), 0)):
            topic = take_bytes(take(">h")).decode()
            count = take(">i")
            partitions.setdefault(topic, []).extend(take(">i") for _ in range(max(count, 0)))
        user_data = None
        if at < len(data):
            n = take(">i")
            user_data = None if n < 0 else take_bytes(n)
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"a member assignment that is not Kafka's ConsumerProtocol format: {e}") from None
    return Assignment(version, {t: sorted(ps) for t, ps in partitions.items()}, user_data)


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None, version: int = 0) -> bytes:
    """The inverse of decode_assignment (for tests and for whoever needs to build one)."""
    out = [struct.pack(">hi", version, len(partitions))]
    for topic, ps in partitions.items():
        name = topic.encode()
        out.append(struct.pack(">h", len(name)) + name + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    out.append(struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data)
    return b"".join(out)


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: dict[str, list[int]]
    instance_id: str | None = None


@dataclass
class GroupDescription:
    group_id: str
    state: str
    assignment_strategy: str
    members: list[Member] = field(default_factory=list)
    kind: str = "classic"  # or "consumer" (KIP-848)


def format_assignment(assignment: dict[str, list[int]]) -> str:
    """Kafka's style: topic(0,1),other(2); '-' for none."""
    parts = [f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(assignment.items()) if ps]
    return ",".join(parts) or MISSING


def table(header: list[str], rows: list[list]) -> str:
    return "\n".join("\t".join(MISSING if c is None else str(c) for c in row) for row in [header, *rows])


OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]
STATE_HEADER = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
MEMBERS_HEADER = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
RESET_HEADER = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]


def offsets_rows(group: GroupDescription, committed: dict[TP, int], log_end: dict[TP, int]) -> list[list]:
    """One row per assigned or committed partition (members first, sorted), then members without partitions,
    as kafka-consumer-groups.sh --describe --offsets. None prints as '-'."""
    rows, owner = [], {}
    for m in group.members:
        for topic, ps in m.assignment.items():
            for p in ps:
                owner[(topic, p)] = m
    for tp in sorted(set(owner) | set(committed)):
        current, end = committed.get(tp), log_end.get(tp)
        lag = end - current if current is not None and end is not None else None
        m = owner.get(tp)
        rows.append([group.group_id, tp[0], tp[1], current, end, lag,
                     m.member_id if m else None, m.host if m else None, m.client_id if m else None])
    for m in sorted(group.members, key=lambda m: m.member_id):
        if not any(m.assignment.values()):
            rows.append([group.group_id, None, None, None, None, None, m.member_id, m.host, m.client_id])
    return rows


def members_rows(group: GroupDescription, verbose: bool) -> list[list]:
    rows = []
    for m in sorted(group.members, key=lambda m: m.member_id):
        row = [group.group_id, m.member_id, m.host, m.client_id, sum(len(ps) for ps in m.assignment.values())]
        rows.append(row + [format_assignment(m.assignment)] if verbose else row)
    return rows


def state_row(group: GroupDescription, coordinator: tuple[str, int, int]) -> list:
    host, port, node_id = coordinator
    return [group.group_id, f"{host}:{port} ({node_id})", group.assignment_strategy or MISSING, group.state,
            len(group.members)]


def member_state_note(group_id: str, state: str, rows: int) -> tuple[str | None, bool]:
    """(a note for stderr, whether to print the table), after Kafka's shouldPrintMemberState."""
    s = state.lower()
    if s == "dead":
        return f"Consumer group '{group_id}' does not exist.", False
    if s == "empty":
        return f"Consumer group '{group_id}' has no active members.", rows > 0
    if s in ("preparingrebalance", "completingrebalance", "assigning", "reconciling"):
        return f"Warning: Consumer group '{group_id}' is rebalancing.", rows > 0
    return None, rows > 0


def reset_refusal(group_id: str, state: str | None) -> str | None:
    """Offsets are reset only while nobody consumes: an Empty group, or one that does not exist yet."""
    if state is None or state.lower() in INACTIVE_STATES:
        return None
    return (f"Assignments can only be reset if the group '{group_id}' is inactive, but the current state is {state}. "
            f"Stop the group's consumers and try again.")


def plan_reset(spec: tuple[str, int | None], partitions: list[TP], committed: dict[TP, int],
               log_start: dict[TP, int], log_end: dict[TP, int],
               by_time: dict[TP, int] | None = None) -> tuple[dict[TP, int], list[str]]:
    """New offsets per partition and warnings, as kafka-consumer-groups.sh computes them: --to-datetime falls
    back to the log end where no record is that recent, --to-current to the log end where nothing is committed,
    --shift-by needs a committed offset; then every offset is clamped to [log start, log end]."""
    kind, value = spec
    plan, warnings = {}, []
    for tp in sorted(partitions):
        start, end = log_start[tp], log_end[tp]
        if kind == "earliest":
            offset = start
        elif kind == "latest":
            offset = end
        elif kind == "datetime":
            found = (by_time or {}).get(tp, -1)
            offset = found if found >= 0 else end
        elif kind == "offset":
            offset = value
        elif kind == "shift":
            if tp not in committed:
                raise ValueError(f"{tp[0]}-{tp[1]} has no committed offset to shift from; use --to-offset, "
                                 f"--to-earliest or --to-latest for it")
            offset = committed[tp] + value
        elif kind == "current":
            offset = committed.get(tp, end)
        else:
            raise ValueError(f"unknown reset kind {kind!r}")
        if offset < start:
            warnings.append(f"New offset ({offset}) is lower than earliest offset for topic partition "
                            f"{tp[0]}-{tp[1]}. Value will be set to {start}")
            offset = start
        elif offset > end:
            warnings.append(f"New offset ({offset}) is higher than latest offset for topic partition "
                            f"{tp[0]}-{tp[1]}. Value will be set to {end}")
            offset = end
        plan[tp] = offset
    return plan, warnings


def select_partitions(specs: list[tuple[str, list[int] | None]], partition_counts: dict[str, int]) -> list[TP]:
    """The partitions --topic names: every partition of T, or those of T:P,P (which must exist)."""
    out = set()
    for topic, wanted in specs:
        count = partition_counts[topic]
        for p in (range(count) if wanted is None else wanted):
            if p >= count:
                raise ValueError(f"topic {topic} has no partition {p} (it has {count}: 0-{count - 1})")
            out.add((topic, p))
    return sorted(out)


def listed_consumer_groups(groups, version: int, states: set[str] | None) -> dict[str, str]:
    """group id -> state of the consumer groups (classic with protocol type consumer or '', and KIP-848) in a
    ListGroups answer of that version, optionally only those in some states (the state is '' before v4)."""
    out = {}
    for g in groups:
        if g.protocol_type not in CONSUMER_PROTOCOL_TYPES:
            continue
        if version >= 5 and g.group_type and g.group_type.lower() not in LIST_TYPES:
            continue
        state = g.group_state if version >= 4 else ""
        if states and state.lower() not in states:
            continue
        out[g.group_id] = state
    return out


# ---- talking to brokers ----------------------------------------------------------------------------------------

class Session:
    """The bootstrap connection plus one cached connection per other broker (coordinators, partition leaders)."""

    def __init__(self, bootstrap: str):
        self.conn = KafkaConnection(bootstrap, client_id=CLIENT_ID)
        self.others: dict[tuple[str, int], KafkaConnection] = {}
        self.coordinators: dict[str, tuple[str, int, int]] = {}

    def to(self, host: str, port: int) -> KafkaConnection:
        if (host, port) == self.conn.address:
            return self.conn
        if (host, port) not in self.others:
            self.others[(host, port)] = KafkaConnection(f"{host}:{port}", client_id=CLIENT_ID)
        return self.others[(host, port)]

    def coordinator(self, group: str) -> KafkaConnection:
        """The group's coordinator (FindCoordinator; retried while the coordinator is loading)."""
        if group not in self.coordinators:
            for attempt in range(COORDINATOR_RETRIES):
                r = self.conn.send(FindCoordinatorRequest(key=group, key_type=KEY_TYPE_GROUP, coordinator_keys=[group]))
                c = r.coordinators[0] if r.coordinators else r
                if not c.error_code:
                    break
                if c.error_code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) \
                        or attempt == COORDINATOR_RETRIES - 1:
                    raise AdminError(f"no coordinator for group {group}: {_error_name(c.error_code)}; "
                                     f"is the broker still starting? try again")
                time.sleep(COORDINATOR_RETRY_S)
            self.coordinators[group] = (c.host, c.port, c.node_id)
        host, port, _ = self.coordinators[group]
        return self.to(host, port)

    def close(self) -> None:
        for c in self.others.values():
            c.close()
        self.conn.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run(args) -> int:
    problem = check_args(args)
    if problem:
        return _fail(problem)
    try:
        with Session(args.bootstrap_server) as session:
            if args.list:
                return _list(session, args)
            if args.delete_offsets:
                return _delete_offsets(session, args)
            groups = args.group
            if args.all_groups:
                groups = sorted(_list_groups(session, None))
            if args.describe:
                return _describe(session, groups, args)
            if args.delete:
                return _delete(session, groups)
            return _reset_offsets(session, groups, args)
    except AdminError as e:
        return _fail(str(e))
    except ValueError as e:
        return _fail(str(e))


def _list_groups(session: Session, states: set[str] | None) -> dict[str, str]:
    """Each broker lists the groups it coordinates: ask them all (as kafka-consumer-groups does)."""
    brokers = session.conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False)).brokers
    found: dict[str, str] = {}
    for b in brokers:
        conn = session.to(b.host, b.port)
        version = conn.version_for(ListGroupsRequest.API_KEY)
        r = conn.send(ListGroupsRequest(states_filter=[], types_filter=LIST_TYPES), version)
        if r.error_code:
            raise AdminError(f"listing groups on broker {b.node_id} ({b.host}:{b.port}) failed: "
                             f"{_error_name(r.error_code)}")
        found |= listed_consumer_groups(r.groups, version, states)
    return found


def _list(session: Session, args) -> int:
    states = parse_states(args.state) if args.state else None
    groups = _list_groups(session, states)
    if args.state is None:
        for g in sorted(groups):
            print(g)
    else:
        print(table(["GROUP", "STATE"], [[g, groups[g] or MISSING] for g in sorted(groups)]))
    return 0


def describe_group(conn: KafkaConnection, group: str) -> GroupDescription | None:
    """ConsumerGroupDescribe first, then DescribeGroups where the former answers GROUP_ID_NOT_FOUND or is not
    spoken (what Kafka's admin client does); None when the group does not exist."""
    if ConsumerGroupDescribeRequest.API_KEY in conn.versions:
        g = conn.send(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)).groups[0]
        if not g.error_code and g.group_state.lower() != "dead":
            return GroupDescription(group, g.group_state, g.assignor_name, kind="consumer", members=[
                Member(m.member_id, m.client_id, m.client_host,
                       {t.topic_name: sorted(t.partitions) for t in m.assignment.topic_partitions if t.partitions},
                       m.instance_id)
                for m in g.members])
        if g.error_code not in (0, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
            raise AdminError(f"describing group {group} failed: {_error_name(g.error_code)} {g.error_message or ''}")
    g = conn.send(DescribeGroupsRequest(groups=[group], include_authorized_operations=False)).groups[0]
    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND or (not g.error_code and g.group_state.lower() == "dead"):
        return None
    if g.error_code:
        raise AdminError(f"describing group {group} failed: {_error_name(g.error_code)} {g.error_message or ''}")
    if g.protocol_type not in CONSUMER_PROTOCOL_TYPES:
        raise AdminError(f"group '{group}' is not a consumer group (its protocol type is {g.protocol_type!r}); "
                         f"for share groups use kray share-groups")
    members = []
    for m in g.members:
        try:
            assignment = decode_assignment(m.member_assignment).partitions
        except ValueError as e:
            raise AdminError(f"group {group}, member {m.member_id}: {e}") from None
        members.append(Member(m.member_id, m.client_id, m.client_host, assignment, m.group_instance_id))
    return GroupDescription(group, g.group_state, g.protocol_data, members, kind="classic")


def fetch_committed(conn: KafkaConnection, group: str) -> dict[TP, int]:
    """Every committed offset of the group (OffsetFetch, all topics)."""
    version = min(conn.version_for(OffsetFetchRequest.API_KEY), OFFSET_API_MAX_VERSION)
    if version >= 8:
        r = conn.send(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, topics=None)], require_stable=False), version)
        g = r.groups[0]
        error, topics = g.error_code, g.topics
    else:
        r = conn.send(OffsetFetchRequest(group_id=group, topics=None), version)
        error, topics = r.error_code, r.topics
    if error == ErrorCode.GROUP_ID_NOT_FOUND:  # none at all is an empty answer: this id names another kind of group
        raise AdminError(f"group '{group}' is not a consumer group (OffsetFetch: GROUP_ID_NOT_FOUND); a share group? "
                         f"kray share-groups --list shows those")
    if error:
        raise AdminError(f"fetching the offsets of group {group} failed: {_error_name(error)}")
    out = {}
    for t in topics:
        for p in t.partitions:
            if p.error_code:
                raise AdminError(f"offset of {t.name}-{p.partition_index} in group {group}: "
                                 f"{_error_name(p.error_code)}")
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _metadata(session: Session, topics: list[str]):
    """Metadata of existing topics; an unknown topic fails with what to do."""
    r = session.conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                          allow_auto_topic_creation=False))
    for t in r.topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"topic '{t.name}' does not exist (kray topics --list shows the topics)")
        if t.error_code:
            raise AdminError(f"topic {t.name}: {_error_name(t.error_code)}")
    return r


def list_offsets(session: Session, tps: list[TP], timestamp: int, metadata=None) -> dict[TP, int]:
    """(topic, partition) -> offset for one ListOffsets timestamp, asking each partition's leader."""
    if not tps:
        return {}
    metadata = metadata or _metadata(session, sorted({t for t, _ in tps}))
    brokers = {b.node_id: b for b in metadata.brokers}
    leaders = {(t.name, p.partition_index): p.leader_id for t in metadata.topics for p in t.partitions}
    by_leader: dict[int, dict[str, list[int]]] = {}
    for topic, p in tps:
        leader = leaders.get((topic, p), -1)
        if leader not in brokers:
            raise AdminError(f"{topic}-{p} has no leader right now; try again in a moment")
        by_leader.setdefault(leader, {}).setdefault(topic, []).append(p)
    out = {}
    for leader, topics in by_leader.items():
        b = brokers[leader]
        r = session.to(b.host, b.port).send(ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=30000,
                                                               topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                                    for p in ps]) for topic, ps in topics.items()]))
        for t in r.topics:
            for p in t.partitions:
                if p.error_code:
                    raise AdminError(f"offsets of {t.name}-{p.partition_index}: {_error_name(p.error_code)}; "
                                     f"try again in a moment")
                out[(t.name, p.partition_index)] = p.offset
    return out


def _describe(session: Session, groups: list[str], args) -> int:
    failed = False
    for i, group in enumerate(groups):
        if i:
            print()
        coordinator = session.coordinator(group)
        description = describe_group(coordinator, group)
        if description is None:
            print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
            failed = True
            continue
        if args.state is not None:
            print(table(STATE_HEADER, [state_row(description, session.coordinators[group])]))
            continue
        if args.members:
            rows = members_rows(description, args.verbose)
            header = MEMBERS_HEADER + (["ASSIGNMENT"] if args.verbose else [])
        else:
            committed = fetch_committed(coordinator, group)
            assigned = [(t, p) for m in description.members for t, ps in m.assignment.items() for p in ps]
            log_end = list_offsets(session, sorted(set(committed) | set(assigned)), LATEST)
            rows = offsets_rows(description, committed, log_end)
            header = OFFSETS_HEADER
        note, show = member_state_note(group, description.state, len(rows))
        if note:
            print(note, file=sys.stderr)
        if show:
            print(table(header, rows))
    return 1 if failed else 0


def _delete(session: Session, groups: list[str]) -> int:
    failures = []
    deleted = []
    for group in groups:
        conn = session.coordinator(group)
        if describe_group(conn, group) is None:
            failures.append((group, "it does not exist"))
            continue
        result = conn.send(DeleteGroupsRequest(groups_names=[group])).results[0]
        if result.error_code == ErrorCode.NON_EMPTY_GROUP:
            failures.append((group, "the group is not empty: stop its consumers first"))
        elif result.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            failures.append((group, "it does not exist"))
        elif result.error_code:
            failures.append((group, f"{_error_name(result.error_code)} {result.error_message or ''}".strip()))
        else:
            deleted.append(group)
    if deleted:
        print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in deleted)}) was successful.")
    if failures:
        print("Deletion of some consumer groups failed:", file=sys.stderr)
        for group, why in failures:
            print(f"* Group '{group}' could not be deleted due to: {why}", file=sys.stderr)
    return 1 if failures else 0


OFFSET_DELETE_HINTS = {
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "the group's consumers subscribe to this topic; stop them first",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "no such partition",
}


def _delete_offsets(session: Session, args) -> int:
    group = args.group[0]
    specs = [parse_topic_spec(s) for s in args.topic]
    whole = sorted({t for t, ps in specs if ps is None})
    counts = {t.name: len(t.partitions) for t in _metadata(session, whole).topics} if whole else {}
    tps = [(t, p) for t, ps in specs for p in (range(counts[t]) if ps is None else ps)]
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(set(tps)):
        by_topic.setdefault(t, []).append(p)
    conn = session.coordinator(group)
    r = conn.send(OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name=t, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
        for t, ps in by_topic.items()]))
    if r.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return _fail(f"Consumer group '{group}' does not exist.")
    if r.error_code == ErrorCode.NON_EMPTY_GROUP:
        return _fail(f"Consumer group '{group}' is not empty: stop its consumers first.")
    if r.error_code:
        return _fail(f"deleting offsets of group '{group}' failed: {_error_name(r.error_code)}")
    rows, failed = [], False
    for t in r.topics:
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            if p.error_code:
                failed = True
                status = f"Error: {OFFSET_DELETE_HINTS.get(p.error_code, _error_name(p.error_code))}"
            else:
                status = "Successful"
            rows.append([t.name, p.partition_index, status])
    print(f"Request succeeded for deleting offsets from group '{group}'." if not failed else
          f"Deleting offsets from group '{group}' failed for some partitions.")
    print(table(["TOPIC", "PARTITION", "STATUS"], rows))
    return 1 if failed else 0


def _reset_offsets(session: Session, groups: list[str], args) -> int:
    spec = reset_spec(args)
    topic_specs = [parse_topic_spec(s) for s in args.topic]
    failed = False
    for i, group in enumerate(groups):
        if i:
            print()
        conn = session.coordinator(group)
        description = describe_group(conn, group)
        refusal = reset_refusal(group, description.state if description else None)
        if refusal:
            print(f"Error: {refusal}", file=sys.stderr)
            failed = True
            continue
        committed = fetch_committed(conn, group)
        if args.all_topics:
            partitions = sorted(committed)
            if not partitions:
                print(f"Consumer group '{group}' has no committed offsets; name the topics with --topic.",
                      file=sys.stderr)
                continue
            metadata = _metadata(session, sorted({t for t, _ in partitions}))
        else:
            metadata = _metadata(session, sorted({t for t, _ in topic_specs}))
            partitions = select_partitions(topic_specs, {t.name: len(t.partitions) for t in metadata.topics})
        log_start = list_offsets(session, partitions, EARLIEST, metadata)
        log_end = list_offsets(session, partitions, LATEST, metadata)
        by_time = list_offsets(session, partitions, spec[1], metadata) if spec[0] == "datetime" else None
        plan, warnings = plan_reset(spec, partitions, committed, log_start, log_end, by_time)
        for w in warnings:
            print(f"WARN: {w}", file=sys.stderr)
        print(table(RESET_HEADER, [[group, t, p, o] for (t, p), o in sorted(plan.items())]))
        if not args.execute:
            print("(dry run: nothing changed; add --execute to apply)", file=sys.stderr)
            continue
        if not _commit(conn, group, plan):
            failed = True
    return 1 if failed else 0


COMMIT_HINTS = {
    ErrorCode.UNKNOWN_MEMBER_ID: "the group has members again; stop its consumers and try again",
    ErrorCode.ILLEGAL_GENERATION: "the group has members again; stop its consumers and try again",
    ErrorCode.STALE_MEMBER_EPOCH: "the group has members again; stop its consumers and try again",
}


def _commit(conn: KafkaConnection, group: str, plan: dict[TP, int]) -> bool:
    """Commit as Kafka's admin alterConsumerGroupOffsets does: no member, generation/epoch -1."""
    by_topic: dict[str, list] = {}
    for (t, p), offset in sorted(plan.items()):
        by_topic.setdefault(t, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
    version = min(conn.version_for(OffsetCommitRequest.API_KEY), OFFSET_API_MAX_VERSION)
    r = conn.send(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]), version)
    ok = True
    for t in r.topics:
        for p in t.partitions:
            if p.error_code:
                ok = False
                why = COMMIT_HINTS.get(p.error_code, "")
                print(f"kray consumer-groups: cannot commit {t.name}-{p.partition_index} for group '{group}': "
                      f"{_error_name(p.error_code)}{'; ' + why if why else ''}", file=sys.stderr)
    return ok
