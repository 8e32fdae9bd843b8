"""Streams groups (KIP-1071, StreamsGroupHeartbeat): the group coordinator's pure state machine for Kafka Streams
applications with group.protocol=streams. No Ray, no clock, no I/O; built like consumer_group.py (KIP-848).

Commands take `now_ms` and a `TopicsView`; they return their answer plus the `__consumer_offsets` records to append.

The first heartbeat of a member (epoch 0) carries the application's topology; the group keeps the topology of the
highest topology epoch a member brought, and members of an older one get the STALE_TOPOLOGY status. The topology is
configured against the cluster's topics (streams_topology.py): while source topics are missing, internal topics
are missing (the heartbeat result names them; the shell has them created, as Kafka 4.1+ does) or partition counts
disagree, members get the matching status and no tasks. Once it is ready, each subtopology has one task per
partition of its inputs, and tasks are assigned:

- active tasks spread evenly over the members, sticky (a member keeps the tasks it has while it has no more than
  its share), each task on exactly one member;
- `group.streams.num.standby.replicas` standby tasks per task (default 0), each on a member of another process
  than the task's active one, at most one copy per member; no warmup tasks are given.

Epochs and reconciliation follow KIP-848's (Kafka's streams CurrentAssignmentBuilder): the group epoch is bumped
when a member joins, leaves or is fenced, when the topology changes and when the metadata of the topics it uses
changes; the assignment epoch catches up on the next heartbeat with a new target assignment. A member first
revokes the tasks its target drops (UNREVOKED_TASKS: it keeps its epoch until its heartbeat no longer lists them),
then moves to the assignment epoch and gets the new tasks nobody else still holds as active
(UNRELEASED_TASKS until then). A member that does not revoke within its rebalance timeout, or whose session
(group.streams.session.timeout.ms) runs out, is fenced. Assignment is delayed by
group.streams.initial.rebalance.delay.ms after a group is created (ASSIGNMENT_DELAYED), as Kafka 4.4 does.

Offsets: a streams member commits with its member epoch; an older epoch is accepted for partitions of tasks it has
held since that epoch or before (KIP-1251's rule, as for consumer groups), else STALE_MEMBER_EPOCH.

Persisted (Kray's decision, as for consumer groups): a streams group's existence, epoch and metadata hash
(StreamsGroupMetadata, type 17, written at every group epoch bump; a tombstone on delete), besides the offsets its
members commit. Members, topology and assignments live in memory: after the coordinator moves, the group is still
there, its members get UNKNOWN_MEMBER_ID and rejoin with epoch 0 (Kafka Streams does) and their topology; epochs
never go backwards (a loaded group's assignment epoch is its persisted group epoch). A new group starts at epoch 1,
as Kafka 4.4's StreamsGroup does (`INITIAL_GROUP_EPOCH`), so its first member joins at epoch 2.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.config_schema import BROKER_DEFAULTS, ConfigError
from actors.group_coordinator import streams_records as rec
from actors.group_coordinator import streams_topology as st
from actors.group_coordinator.records import INITIAL_GROUP_EPOCH
from actors.group_coordinator.streams_records import Record
from actors.group_coordinator.streams_topology import Topology
from actors.group_coordinator.snapshots import GroupSnapshots
from protocol.errors import ErrorCode

TopicsView = Mapping[str, tuple[object, int]]
Tasks = dict[str, frozenset[int]]   # subtopology id -> partitions (task ids)

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
TASK_OFFSET_INTERVAL_MS = 60000   # what Kafka 4.4 answers (no broker config sets it)
ASSIGNOR_NAME = "sticky"          # Kafka's name for its (only) streams assignor, group.streams.assignors' default

STREAMS_GROUP_CONFIG_DEFAULTS: dict[str, Any] = {key: value for key, value in BROKER_DEFAULTS.items()
                                                 if key.startswith("group.streams.")}


class GroupState:
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState:
    STABLE = "STABLE"
    UNREVOKED_TASKS = "UNREVOKED_TASKS"
    UNRELEASED_TASKS = "UNRELEASED_TASKS"


@dataclass(frozen=True)
class StreamsGroupConfig:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    num_standby_replicas: int
    initial_rebalance_delay_ms: int
    max_size: int
    task_offset_interval_ms: int

    @classmethod
    def from_broker_config(cls, broker_config: Mapping[str, Any]) -> "StreamsGroupConfig":
        c = {**STREAMS_GROUP_CONFIG_DEFAULTS,
             **{k: v for k, v in broker_config.items() if k in STREAMS_GROUP_CONFIG_DEFAULTS}}
        try:
            ints = {k: int(v) for k, v in c.items()}
        except (TypeError, ValueError) as e:
            raise ConfigError(f"group.streams.*: {e}") from None
        config = cls(ints["group.streams.session.timeout.ms"], ints["group.streams.heartbeat.interval.ms"],
                     ints["group.streams.num.standby.replicas"], ints["group.streams.initial.rebalance.delay.ms"],
                     ints["group.streams.max.size"], TASK_OFFSET_INTERVAL_MS)
        if not 0 <= config.num_standby_replicas <= ints["group.streams.max.standby.replicas"]:
            raise ConfigError("group.streams.num.standby.replicas must lie within [0, "
                              "group.streams.max.standby.replicas]")
        if config.heartbeat_interval_ms >= config.session_timeout_ms:
            raise ConfigError("group.streams.heartbeat.interval.ms must be less than "
                              "group.streams.session.timeout.ms")
        if min(config.session_timeout_ms, config.heartbeat_interval_ms, config.max_size) < 1 \
                or config.initial_rebalance_delay_ms < 0:
            raise ConfigError("group.streams.* durations and sizes must be positive")
        return config


# ---- results -------------------------------------------------------------------------------------------------------

@dataclass
class StreamsHeartbeatResult:
    error_code: int = 0
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    task_offset_interval_ms: int = 0
    status: list[tuple[int, str]] = field(default_factory=list)
    # None: unchanged since the last answer (not sent)
    active_tasks: list[tuple[str, list[int]]] | None = None
    standby_tasks: list[tuple[str, list[int]]] | None = None
    warmup_tasks: list[tuple[str, list[int]]] | None = None
    endpoint_information_epoch: int = 0
    # interactive queries: [((host, port), active [(topic, [partitions])], standby [...])] for every member with
    # a user endpoint (application.server); None when the member already has the group's endpoint epoch
    partitions_by_user_endpoint: list | None = None
    # internal topics the shell must create (Kafka's broker creates them from the heartbeat)
    topics_to_create: list[st.TopicToCreate] = field(default_factory=list)


@dataclass
class DescribedStreamsMember:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: list[tuple[str, str]]
    assignment: tuple[list, list, list]          # (active, standby, warmup) as [(subtopology id, [partitions])]
    target_assignment: tuple[list, list, list]
    task_offsets: list[tuple[str, int, int]] = field(default_factory=list)
    task_end_offsets: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass
class DescribedStreamsGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    internal_partitions: dict[str, int] = field(default_factory=dict)
    members: list[DescribedStreamsMember] = field(default_factory=list)


class _GroupError(Exception):
    def __init__(self, error_code: int, message: str | None):
        super().__init__(message)
        self.error_code, self.message = error_code, message


def _invalid(message: str) -> _GroupError:
    return _GroupError(ErrorCode.INVALID_REQUEST, message)


# ---- state ---------------------------------------------------------------------------------------------------------

@dataclass
class _TaskSets:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def kinds(self) -> tuple[Tasks, Tasks, Tasks]:
        return self.active, self.standby, self.warmup

    def as_lists(self) -> tuple[list, list, list]:
        return tuple(_as_list(t) for t in self.kinds())


@dataclass
class _Member:
    member_id: str
    process_id: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    topology_epoch: int = 0
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    state: str = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: _TaskSets = field(default_factory=_TaskSets)
    pending_revocation: Tasks = field(default_factory=dict)       # active tasks to give up
    # KIP-1251 for streams: (subtopology id, partition) -> the member epoch the active task was given at
    task_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    last_sent: tuple | None = None
    task_offsets: tuple[tuple[str, int, int], ...] = ()        # as the member last reported them
    task_end_offsets: tuple[tuple[str, int, int], ...] = ()
    session_deadline_ms: int = 0
    rebalance_deadline_ms: int | None = None


@dataclass
class _Group:
    group_id: str
    group_epoch: int = INITIAL_GROUP_EPOCH
    assignment_epoch: int = INITIAL_GROUP_EPOCH
    metadata_hash: int = 0
    topology: Topology | None = None
    configured: st.ConfiguredTopology | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, _TaskSets] = field(default_factory=dict)
    assign_not_before_ms: int = 0
    tasks_delayed: bool = False   # the target was computed without tasks during the initial rebalance delay
    endpoint_epoch: int = 0       # bumped when the map of user endpoints to partitions changes
    endpoint_map: tuple = ()
    shutdown_requested: bool = False

    @property
    def state(self) -> str:
        if not self.members:
            return GroupState.EMPTY
        if self.configured is None or not self.configured.ready:
            return GroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if all(m.state == MemberState.STABLE and m.member_epoch == self.assignment_epoch
               for m in self.members.values()):
            return GroupState.STABLE
        return GroupState.RECONCILING


def _as_list(tasks: Mapping[str, frozenset[int]]) -> list[tuple[str, list[int]]]:
    return [(s, sorted(ps)) for s, ps in sorted(tasks.items()) if ps]


def _as_tasks(pairs: Iterable[tuple[str, Iterable[int]]] | None) -> Tasks | None:
    if pairs is None:
        return None
    out: dict[str, set[int]] = {}
    for subtopology, partitions in pairs:
        out.setdefault(subtopology, set()).update(partitions)
    return {s: frozenset(ps) for s, ps in out.items() if ps}


def _minus(a: Tasks, b: Tasks) -> Tasks:
    return {s: ps - b.get(s, frozenset()) for s, ps in a.items() if ps - b.get(s, frozenset())}


def _union(a: Tasks, b: Tasks) -> Tasks:
    return {s: a.get(s, frozenset()) | b.get(s, frozenset()) for s in set(a) | set(b)}


def _overlaps(a: Tasks | None, b: Tasks) -> bool:
    if a is None:
        return True
    return any(a.get(s, frozenset()) & ps for s, ps in b.items())


def _is_blank(s: str | None) -> bool:
    return s is not None and not s.strip()


def _metadata_hash(names: Iterable[str], topics: TopicsView) -> int:
    """A stable signed 64-bit hash of the topics that exist among `names` (name, id, partition count); 0 if none."""
    present = sorted((n, str(topics[n][0]), topics[n][1]) for n in names if n in topics)
    if not present:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name, topic_id, count in present:
        h.update(f"{name}\0{topic_id}\0{count}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


# ---- the task assignor ---------------------------------------------------------------------------------------------

def assign(task_counts: Mapping[str, int], members: Mapping[str, _Member], num_standby_replicas: int
           ) -> dict[str, _TaskSets]:
    """Active tasks spread evenly and stickily over the members; standby tasks on other processes."""
    tasks = [(s, p) for s in sorted(task_counts) for p in range(task_counts[s])]
    ids = sorted(members)
    out = {m: _TaskSets() for m in ids}
    if not ids:
        return out
    quota_floor, extra = divmod(len(tasks), len(ids))
    owner: dict[tuple[str, int], str] = {}
    load = dict.fromkeys(ids, 0)
    # stickiness: members keep what they hold (active or pending revocation), up to their share
    for m in ids:
        held = _union(members[m].assigned.active, members[m].pending_revocation)
        for s, ps in sorted(held.items()):
            for p in sorted(ps):
                if (s, p) in owner or s not in task_counts or p >= task_counts[s]:
                    continue
                if load[m] < quota_floor + (1 if extra else 0):
                    owner[(s, p)] = m
                    load[m] += 1
    # then the rest, to the least loaded member (ties: member id)
    for task in tasks:
        if task not in owner:
            m = min(ids, key=lambda x: (load[x], x))
            owner[task] = m
            load[m] += 1
    # rebalance: nobody above ceil while someone is below floor
    ceil = quota_floor + (1 if extra else 0)
    for task in tasks:
        m = owner[task]
        low = min(ids, key=lambda x: (load[x], x))
        if load[m] > ceil or (load[m] - load[low] > 1):
            owner[task], load[m], load[low] = low, load[m] - 1, load[low] + 1
    active: dict[str, dict[str, set[int]]] = {m: {} for m in ids}
    for (s, p), m in owner.items():
        active[m].setdefault(s, set()).add(p)
    standby: dict[str, dict[str, set[int]]] = {m: {} for m in ids}
    standby_load = dict.fromkeys(ids, 0)
    for (s, p) in tasks:
        active_process = members[owner[(s, p)]].process_id
        candidates = [m for m in ids if members[m].process_id != active_process]
        chosen_processes: set[str] = set()
        for _ in range(num_standby_replicas):
            options = [m for m in candidates if members[m].process_id not in chosen_processes]
            if not options:
                break
            m = min(options, key=lambda x: (standby_load[x], x))
            standby[m].setdefault(s, set()).add(p)
            standby_load[m] += 1
            chosen_processes.add(members[m].process_id)
    for m in ids:
        out[m] = _TaskSets({s: frozenset(ps) for s, ps in active[m].items()},
                           {s: frozenset(ps) for s, ps in standby[m].items()}, {})
    return out


# ---- the streams groups of one coordinator shard --------------------------------------------------------------------

class StreamsGroups(GroupSnapshots):
    def __init__(self, broker_config: Mapping[str, Any]):
        self.config = StreamsGroupConfig.from_broker_config(broker_config)
        self._groups: dict[str, _Group] = {}
        self._topics: TopicsView = {}
        self._rebalance_count = 0

    # ---- StreamsGroupHeartbeat ------------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, now_ms: int, topics: TopicsView,
                  instance_id: str | None = None, rack_id: str | None = None, rebalance_timeout_ms: int = -1,
                  topology: Topology | None = None, active_tasks=None, standby_tasks=None, warmup_tasks=None,
                  process_id: str | None = None, user_endpoint: tuple[str, int] | None = None,
                  client_tags: list[tuple[str, str]] | None = None, shutdown_application: bool = False,
                  endpoint_information_epoch: int = 0, client_id: str = "", client_host: str = "",
                  task_offsets: list[tuple[str, int, int]] | None = None,
                  task_end_offsets: list[tuple[str, int, int]] | None = None,
                  ) -> tuple[StreamsHeartbeatResult, list[Record]]:
        """The answer and the records to append before answering."""
        records: list[Record] = []
        try:
            self._validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms, topology,
                           process_id, active_tasks, standby_tasks, warmup_tasks)
            self._topics = topics
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(group_id, member_id, member_epoch, records), records
            return self._heartbeat(group_id, member_id, member_epoch, now_ms, topics, instance_id, rack_id,
                                   rebalance_timeout_ms, topology, _as_tasks(active_tasks), _as_tasks(standby_tasks),
                                   _as_tasks(warmup_tasks), process_id, user_endpoint, client_tags,
                                   shutdown_application, client_id, client_host, records,
                                   endpoint_information_epoch, task_offsets, task_end_offsets), records
        except _GroupError as e:
            return StreamsHeartbeatResult(error_code=e.error_code, error_message=e.message), records

    @staticmethod
    def _validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms, topology,
                  process_id, active_tasks, standby_tasks, warmup_tasks) -> None:
        """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid (the messages as Kafka 4.4 answers them)."""
        if not group_id or not group_id.strip():
            raise _invalid("GroupId can't be empty.")
        if not member_id or not member_id.strip():
            raise _invalid("MemberId can't be empty.")
        if _is_blank(instance_id):
            raise _invalid("InstanceId can't be empty.")
        if _is_blank(rack_id):
            raise _invalid("RackId can't be empty.")
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if topology is None:
                raise _invalid("Topology must be non-null when (re-)joining.")
            for tasks, name in ((active_tasks, "ActiveTasks"), (standby_tasks, "StandbyTasks"),
                                (warmup_tasks, "WarmupTasks")):
                if tasks is None or any(ps for _, ps in tasks):
                    raise _invalid(f"{name} must be empty when (re-)joining.")
            if process_id is None or not process_id.strip():
                raise _invalid("ProcessId can't be empty.")
            invalid = st.validate(topology)
            if invalid:
                raise _GroupError(ErrorCode.STREAMS_INVALID_TOPOLOGY, invalid)
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _invalid("MemberEpoch is invalid.")
        sent = [tasks is not None for tasks in (active_tasks, standby_tasks, warmup_tasks)]
        if any(sent) and not all(sent):
            raise _invalid("If one task-type is non-null, all must be non-null.")

    def _group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        return group

    def _bump(self, group: _Group, records: list[Record]) -> None:
        group.group_epoch += 1
        self._rebalance_count += 1
        records.append(rec.streams_group_metadata(group.group_id, group.group_epoch, group.metadata_hash))

    def _configure(self, group: _Group, topics: TopicsView) -> bool:
        """(Re)configure the group's topology against `topics`; True if its metadata changed."""
        if group.topology is None:
            return False
        metadata_hash = _metadata_hash(st.required_topics(group.topology, topics), topics)
        if group.configured is not None and metadata_hash == group.metadata_hash:
            return False
        group.metadata_hash = metadata_hash
        group.configured = st.configure(group.topology, topics)
        return True

    def _heartbeat(self, group_id, member_id, member_epoch, now_ms, topics, instance_id, rack_id,
                   rebalance_timeout_ms, topology, owned_active, owned_standby, owned_warmup, process_id,
                   user_endpoint, client_tags, shutdown_application, client_id, client_host,
                   records: list[Record], endpoint_information_epoch: int = 0, task_offsets=None,
                   task_end_offsets=None) -> StreamsHeartbeatResult:
        group = self._groups.get(group_id)
        if group is None:
            if member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
            group = self._groups[group_id] = _Group(group_id)
        member = group.members.get(member_id)
        bump = False
        if member is None:
            if member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise _GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"Member {member_id} is not a member of group {group_id}.")
            if len(group.members) >= self.config.max_size:
                raise _GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                  f"The streams group has reached its maximum capacity of {self.config.max_size} "
                                  f"members.")
            member = _Member(member_id)
            if not group.members and group.group_epoch == INITIAL_GROUP_EPOCH:   # a new group
                group.assign_not_before_ms = now_ms + self.config.initial_rebalance_delay_ms
            group.members[member_id] = member
            bump = True
        elif member_epoch == JOIN_GROUP_MEMBER_EPOCH:   # a rejoin: it dropped its tasks
            member.member_epoch, member.state = 0, MemberState.STABLE
            member.assigned, member.pending_revocation, member.task_epochs = _TaskSets(), {}, {}
            member.last_sent, member.rebalance_deadline_ms = None, None
        else:
            self._check_epoch(group, member, member_epoch, owned_active)
        if topology is not None and (group.topology is None or topology.epoch > group.topology.epoch
                                     or (topology.epoch == group.topology.epoch and topology != group.topology
                                         and len(group.members) == 1)):
            if group.topology != topology:
                group.topology, group.configured = topology, None
                bump = True
        if topology is not None:
            member.topology_epoch = topology.epoch
        updates = dict(process_id=process_id, instance_id=instance_id, rack_id=rack_id,
                       user_endpoint=user_endpoint,
                       client_tags=None if client_tags is None else tuple(sorted(client_tags)))
        for name, value in updates.items():
            if value is not None and getattr(member, name) != value:
                setattr(member, name, value)
                bump = bump or name in ("process_id", "rack_id", "client_tags")
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        if task_offsets is not None:      # (subtopology id, partition, offset): what describe shows
            member.task_offsets = tuple(sorted(task_offsets))
        if task_end_offsets is not None:
            member.task_end_offsets = tuple(sorted(task_end_offsets))
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms
        if shutdown_application:
            group.shutdown_requested = True
        if self._configure(group, topics):
            bump = True
        if bump:
            self._bump(group, records)

        status: list[tuple[int, str]] = []
        ready = group.configured is not None and group.configured.ready
        delayed = now_ms < group.assign_not_before_ms
        if not delayed and group.tasks_delayed:
            group.tasks_delayed = False    # the delay is over: a new epoch hands out the tasks
            self._bump(group, records)
        if group.group_epoch > group.assignment_epoch and (group.assignment_epoch == INITIAL_GROUP_EPOCH
                                                           or not delayed):
            # a new group's first target comes at once, without tasks while the initial rebalance delay lasts or
            # the topology is not ready; later ones wait for the delay (the group is Assigning), as Kafka 4.4 does
            task_counts = group.configured.task_counts if ready and not delayed else {}
            group.tasks_delayed = group.tasks_delayed or (ready and delayed)
            group.target = assign(task_counts, group.members, self.config.num_standby_replicas)
            group.assignment_epoch = group.group_epoch
        if delayed:
            status.append((st.ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
        self._reconcile(group, member, owned_active, owned_standby, owned_warmup, now_ms)

        if group.configured is not None and group.configured.status is not None:
            status.append(group.configured.status)
        if group.topology is not None and member.topology_epoch < group.topology.epoch:
            status.append((st.STALE_TOPOLOGY, f"The member's topology epoch {member.topology_epoch} is behind the "
                                              f"group's topology epoch {group.topology.epoch}."))
        if group.shutdown_requested:
            status.append((st.SHUTDOWN_APPLICATION, "A KafkaStreams instance encountered a fatal error and "
                                                    "requested a shutdown for the entire application."))
        result = StreamsHeartbeatResult(
            member_id=member_id, member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            task_offset_interval_ms=self.config.task_offset_interval_ms, status=status,
            topics_to_create=list(group.configured.to_create) if group.configured is not None else [])
        sent = member.assigned.as_lists()
        full = member_epoch == JOIN_GROUP_MEMBER_EPOCH or owned_active is not None
        if full or sent != member.last_sent:
            result.active_tasks, result.standby_tasks, result.warmup_tasks = sent
            member.last_sent = sent
        endpoint_map = self._endpoint_map(group)
        if endpoint_map != group.endpoint_map:
            group.endpoint_map, group.endpoint_epoch = endpoint_map, group.endpoint_epoch + 1
        result.endpoint_information_epoch = group.endpoint_epoch
        if endpoint_information_epoch != group.endpoint_epoch:
            result.partitions_by_user_endpoint = [(endpoint, [(t, list(ps)) for t, ps in active],
                                                   [(t, list(ps)) for t, ps in standby])
                                                  for endpoint, active, standby in endpoint_map]
        return result

    @staticmethod
    def _endpoint_map(group: _Group) -> tuple:
        """Kafka's EndpointToPartitionsManager: each user endpoint with the input partitions (source and repartition
        source topics) of the active and standby tasks its member holds now."""
        configured = group.configured
        inputs = configured.source_partitions if configured is not None and configured.ready else {}

        def partitions(tasks: Tasks) -> tuple:
            out: dict[str, set[int]] = {}
            for s, ps in tasks.items():
                for topic, count in inputs.get(s, {}).items():
                    out.setdefault(topic, set()).update(p for p in ps if p < count)
            return tuple((topic, tuple(sorted(ps))) for topic, ps in sorted(out.items()) if ps)
        return tuple(sorted((m.user_endpoint, partitions(_union(m.assigned.active, m.pending_revocation)),
                             partitions(m.assigned.standby))
                            for m in group.members.values() if m.user_endpoint is not None))

    @staticmethod
    def _check_epoch(group: _Group, member: _Member, received: int, owned_active: Tasks | None) -> None:
        if received > member.member_epoch:
            raise _GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                              f"The streams group member has a greater member epoch ({received}) than the one known "
                              f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                              f"partitions and rejoin.")
        if received < member.member_epoch:
            # the answer that moved the member on may have been lost: it may repeat its previous epoch while
            # it holds nothing it was not given
            owns_assigned = owned_active is not None and not _minus(owned_active, _union(
                member.assigned.active, member.pending_revocation))
            if not (received == member.previous_member_epoch and owns_assigned):
                raise _GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"The streams group member has a smaller member epoch ({received}) than the one "
                                  f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                  f"all its partitions and rejoin.")

    def _reconcile(self, group: _Group, member: _Member, owned_active: Tasks | None, owned_standby: Tasks | None,
                   owned_warmup: Tasks | None, now_ms: int) -> None:
        if member.member_epoch == group.assignment_epoch and member.state == MemberState.STABLE:
            return
        target = group.target.get(member.member_id, _TaskSets())
        before = (member.state, member.member_epoch)
        if member.state == MemberState.UNREVOKED_TASKS:
            if _overlaps(owned_active, member.pending_revocation):
                return   # still holds tasks it must give up
            member.pending_revocation = {}
        keep = {s: ps & target.active.get(s, frozenset()) for s, ps in member.assigned.active.items()}
        keep = {s: ps for s, ps in keep.items() if ps}
        revoke = _minus(member.assigned.active, target.active)
        if revoke:
            member.state = MemberState.UNREVOKED_TASKS
            member.pending_revocation = revoke
            member.assigned = _TaskSets(keep, {s: ps & target.standby.get(s, frozenset())
                                               for s, ps in member.assigned.standby.items()
                                               if ps & target.standby.get(s, frozenset())}, {})
            member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
        else:
            held_elsewhere: dict[str, set[int]] = {}
            for other in group.members.values():
                if other.member_id != member.member_id:
                    for s, ps in _union(other.assigned.active, other.pending_revocation).items():
                        held_elsewhere.setdefault(s, set()).update(ps)
            given = {s: frozenset(p for p in ps if p not in held_elsewhere.get(s, ()))
                     for s, ps in target.active.items()}
            given = {s: ps for s, ps in given.items() if ps}
            unreleased = _minus(target.active, given)
            if member.member_epoch != group.assignment_epoch:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = group.assignment_epoch
            member.state = MemberState.UNRELEASED_TASKS if unreleased else MemberState.STABLE
            member.assigned = _TaskSets(given, dict(target.standby), dict(target.warmup))
            member.rebalance_deadline_ms = None
        member.task_epochs = {(s, p): member.task_epochs.get((s, p), member.member_epoch)
                              for tasks in (member.assigned.active, member.pending_revocation)
                              for s, ps in tasks.items() for p in ps}
        if (member.state, member.member_epoch) != before and member.state != MemberState.UNREVOKED_TASKS:
            member.rebalance_deadline_ms = None

    def _leave(self, group_id: str, member_id: str, member_epoch: int, records: list[Record]
               ) -> StreamsHeartbeatResult:
        group = self._group(group_id)
        if member_id not in group.members:
            raise _GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        self._remove_members(group, [member_id], records)
        return StreamsHeartbeatResult(member_id=member_id, member_epoch=member_epoch)

    def _remove_members(self, group: _Group, member_ids: Iterable[str], records: list[Record]) -> None:
        for member_id in member_ids:
            group.members.pop(member_id, None)
            group.target.pop(member_id, None)
        if not group.members:
            group.shutdown_requested = False
        self._bump(group, records)

    # ---- timers ---------------------------------------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[Record]:
        records: list[Record] = []
        for group in self._groups.values():
            expired = [m.member_id for m in group.members.values()
                       if m.session_deadline_ms <= now_ms
                       or (m.rebalance_deadline_ms is not None and m.rebalance_deadline_ms <= now_ms)]
            if expired:
                self._remove_members(group, expired, records)
        return records

    def next_deadline_ms(self) -> int | None:
        return min((d for g in self._groups.values() for m in g.members.values()
                    for d in (m.session_deadline_ms, m.rebalance_deadline_ms) if d is not None), default=None)

    def session_deadlines(self) -> dict[tuple[str, str], int]:
        return {(g.group_id, m.member_id): m.session_deadline_ms for g in self._groups.values()
                for m in g.members.values()}

    def carry_sessions(self, deadlines: Mapping[tuple[str, str], int]) -> None:
        for g in self._groups.values():
            for m in g.members.values():
                m.session_deadline_ms = deadlines.get((g.group_id, m.member_id), m.session_deadline_ms)

    def on_topics_changed(self, topics: TopicsView, now_ms: int) -> list[Record]:
        """The cluster metadata changed: groups whose topics changed are reconfigured and get a new epoch."""
        self._topics = topics
        records: list[Record] = []
        for group in self._groups.values():
            if group.members and self._configure(group, topics):
                self._bump(group, records)
        return records

    # ---- offsets --------------------------------------------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int) -> tuple[int, str | None]:
        """Kafka's StreamsGroup.validateOffsetCommit: a negative epoch into an empty group is an admin's commit."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE, None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
        if member_epoch > member.member_epoch:
            return (ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} is newer than the "
                                                  f"current member epoch {member.member_epoch}.")
        return ErrorCode.NONE, None

    def stale_commit_partitions(self, group_id: str, member_id: str, member_epoch: int,
                                partitions: Iterable[tuple[str, int]]) -> list[bool]:
        """Per (topic, partition) of a commit that passed `validate_offset_commit`, True where an older member epoch
        may not commit it: the member must hold an active task reading that partition since that epoch or before."""
        partitions = list(partitions)
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or member_epoch < 0 or member_epoch >= member.member_epoch:
            return [False] * len(partitions)
        configured = group.configured
        out = []
        for topic, partition in partitions:
            epochs = [member.task_epochs[(s, partition)]
                      for s, inputs in (configured.source_partitions.items() if configured else ())
                      if topic in inputs and (s, partition) in member.task_epochs]
            out.append(not epochs or min(epochs) > member_epoch)
        return out

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> tuple[int, str | None]:
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE, None
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        member = group.members.get(member_id) if member_id is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
        if member_epoch != member.member_epoch:
            return (ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match the "
                                                  f"expected member epoch {member.member_epoch}.")
        return ErrorCode.NONE, None

    # ---- admin ----------------------------------------------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[DescribedStreamsGroup]:
        out = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                out.append(DescribedStreamsGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                                 f"Group {group_id} not found."))
                continue
            members = [DescribedStreamsMember(
                m.member_id, m.member_epoch, m.instance_id, m.rack_id, m.client_id, m.client_host, m.topology_epoch,
                m.process_id, m.user_endpoint, list(m.client_tags),
                _TaskSets(_union(m.assigned.active, m.pending_revocation), m.assigned.standby,
                          m.assigned.warmup).as_lists(),
                group.target.get(m.member_id, _TaskSets()).as_lists(), list(m.task_offsets),
                list(m.task_end_offsets))
                for m in sorted(group.members.values(), key=lambda m: m.member_id)]
            out.append(DescribedStreamsGroup(
                group_id, group_state=group.state, group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch, topology=group.topology,
                internal_partitions=dict(group.configured.internal_partitions) if group.configured else {},
                members=members))
        return out

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self._groups.get(group_id)
        if group is None or group.topology is None or not group.members:
            return set()
        return st.required_topics(group.topology, self._topics)

    def list_groups(self) -> list[tuple[str, str]]:
        return [(g.group_id, g.state) for g in sorted(self._groups.values(), key=lambda g: g.group_id)]

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def is_empty(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is None or not group.members

    def delete_records(self, group_id: str) -> tuple[int, str | None, list[Record]]:
        """DeleteGroups for this group, computed only: (error, message, the tombstone that deletes it when replayed)."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, f"Group {group_id} is not empty.", []
        return ErrorCode.NONE, None, [rec.streams_group_metadata_tombstone(group_id)]

    def delete_group(self, group_id: str) -> tuple[int, str | None, list[Record]]:
        error, message, records = self.delete_records(group_id)
        if not error:
            del self._groups[group_id]
        return error, message, records

    # ---- loading --------------------------------------------------------------------------------------------------

    def replay(self, record_type: int, key_bytes: bytes, value_bytes: bytes | None) -> str | None:
        """Apply one `__consumer_offsets` record while loading; other types are ignored. Returns the group id of a
        streams-group record (its id is then reserved in the namespace), else None."""
        if record_type != rec.RECORD_TYPE_STREAMS_GROUP_METADATA:
            return None
        r = rec.decode_streams_group_metadata(key_bytes, value_bytes)
        if r.epoch is None:
            self._groups.pop(r.group_id, None)
            return r.group_id
        group = self._groups.setdefault(r.group_id, _Group(r.group_id))
        group.group_epoch = group.assignment_epoch = r.epoch   # members and assignments are not persisted
        group.metadata_hash = r.metadata_hash
        return r.group_id

    def live_records(self) -> list[Record]:
        return [rec.streams_group_metadata(g.group_id, g.group_epoch, g.metadata_hash) for g in self._groups.values()]

    def persisted_state(self) -> dict[str, tuple[int, int]]:
        return {g.group_id: (g.group_epoch, g.metadata_hash) for g in self._groups.values()}

    # ---- metrics --------------------------------------------------------------------------------------------------

    def rebalance_count(self) -> int:
        return self._rebalance_count

    def count_by_state(self) -> dict[str, int]:
        counts = dict.fromkeys((GroupState.EMPTY, GroupState.NOT_READY, GroupState.ASSIGNING,
                                GroupState.RECONCILING, GroupState.STABLE), 0)
        for g in self._groups.values():
            counts[g.state] += 1
        return counts

    def member_count(self) -> int:
        return sum(len(g.members) for g in self._groups.values())
