"""The group coordinator shard's pure state machine for share groups (KIP-932). No Ray, no clock, no I/O.

Every command takes `now_ms` (when time matters) and a `TopicsView` (topic name -> (topic id, partition count)), the
shell's current view of the cluster metadata, and returns its answer plus the `__consumer_offsets` records to append
before answering. State changes happen inside the call, synchronously; `replay` rebuilds the persisted part.

What is persisted (Kray's decision, the KIP's "Persistence and fail-over"): a share group's existence and epoch
(`ShareGroupMetadata`) and which share-partitions are initializing / initialized / deleting
(`ShareGroupStatePartitionMetadata`), with tombstones on delete. Members and assignments are in memory only: after a
coordinator moves, the group is still there and its members get UNKNOWN_MEMBER_ID and rejoin with epoch 0. Because
the group epoch is persisted and a loaded group's assignment epoch is set to it, epochs never move backwards. A new
group starts at epoch 1, as in Kafka 4.4 (`INITIAL_GROUP_EPOCH`), so its first member joins at epoch 2.

Epochs (KIP "Rebalance process"): the group epoch is bumped when a member joins, leaves, is removed or changes its
subscription, when the metadata of the subscribed topics changes (a hash of their ids and partition counts), and when
the set of assignable share-partitions changes. When the group epoch is ahead of the assignment epoch, the next
heartbeat recomputes the target assignment of every member with the `simple` assignor. A member reconciles on its
own heartbeat: with no revocation in share groups, its epoch jumps to the assignment epoch and its assignment to its
target at once.

Initialization gating (Kafka 4.1+ `GroupSpec.isPartitionAssignable`: "for share groups, a partition can only be
assigned once its initialization is complete"; KIP-932 share-coordinator diff, "Assign a share-partition"): a
heartbeat moves subscribed partitions that are neither initialized nor recently initializing into `initializing`
(record written) and returns them in `HeartbeatResult.initialize`; the shell asks the share coordinator to initialize
them (InitializeShareGroupState, state epoch = `HeartbeatResult.state_epoch`) and then calls `mark_initialized` (or
`mark_initialize_failed`). Only initialized partitions are assigned; the next heartbeat notices the new assignable set,
bumps the group epoch and hands them out. Initializing partitions older than `group.share.initialize.retry.interval.ms`
(or loaded from the log) are retried by the next heartbeat. Deleted topics leave all three sets when the shell calls
`on_topics_deleted` (Kafka reacts to the metadata delta the same way); a heartbeat never infers deletion from a
TopicsView, so a partial view cannot wipe initialized state (re-initializing would reset the share-partition).
Assignment only ever uses partitions of subscribed topics present in the view.
"""
from __future__ import annotations

import copy
import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import actors.group_coordinator.assignor as assignor
import actors.group_coordinator.records as rec
from actors.group_coordinator.records import INITIAL_GROUP_EPOCH, Record
from actors.config_schema import BROKER_DEFAULTS, ConfigError
from protocol.errors import ErrorCode

TopicsView = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partition count)
TopicPartition = tuple[uuid.UUID, int]

LEAVE_GROUP_MEMBER_EPOCH = -1
MEMBER_ID_LENGTH_MAX = 255   # clients send 22-character base64 UUIDs (KIP-1082)
GROUP_TYPE_SHARE = "share"

# Kafka 4.2's broker configs for share groups (GroupCoordinatorConfig); defaults live in actors.config_schema.
SHARE_GROUP_CONFIG_DEFAULTS: dict[str, Any] = {key: BROKER_DEFAULTS[key] for key in (
    "group.share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms",
    "group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
    "group.share.max.heartbeat.interval.ms", "group.share.max.size", "group.share.assignors",
    "group.share.initialize.retry.interval.ms")}


class GroupState:
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45000
    min_session_timeout_ms: int = 45000
    max_session_timeout_ms: int = 60000
    heartbeat_interval_ms: int = 5000
    min_heartbeat_interval_ms: int = 5000
    max_heartbeat_interval_ms: int = 15000
    max_size: int = 200
    assignor_name: str = assignor.NAME
    initialize_retry_interval_ms: int = 30000

    @classmethod
    def from_broker_config(cls, broker_config: Mapping[str, Any]) -> "ShareGroupConfig":
        c = {**SHARE_GROUP_CONFIG_DEFAULTS, **{k: v for k, v in broker_config.items() if k.startswith("group.share.")}}
        assignors = c["group.share.assignors"]
        if isinstance(assignors, str):
            assignors = [a.strip() for a in assignors.split(",") if a.strip()]
        if len(assignors) != 1:
            raise ConfigError(f"group.share.assignors must contain exactly one assignor, but found {len(assignors)}")
        if assignors[0] not in (assignor.NAME, assignor.KAFKA_CLASS_NAME):
            raise ConfigError(f"group.share.assignors: unknown assignor {assignors[0]!r}; "
                              f"the built-in one is {assignor.NAME!r}")
        try:
            ints = {k: int(c[k]) for k in SHARE_GROUP_CONFIG_DEFAULTS if k != "group.share.assignors"}
        except (TypeError, ValueError) as e:
            raise ConfigError(f"group.share.*: {e}") from None
        return cls(ints["group.share.session.timeout.ms"], ints["group.share.min.session.timeout.ms"],
                   ints["group.share.max.session.timeout.ms"], ints["group.share.heartbeat.interval.ms"],
                   ints["group.share.min.heartbeat.interval.ms"], ints["group.share.max.heartbeat.interval.ms"],
                   ints["group.share.max.size"], assignor.NAME, ints["group.share.initialize.retry.interval.ms"])

    def __post_init__(self):
        checks = [
            (min(self.session_timeout_ms, self.min_session_timeout_ms, self.max_session_timeout_ms,
                 self.heartbeat_interval_ms, self.min_heartbeat_interval_ms, self.max_heartbeat_interval_ms,
                 self.initialize_retry_interval_ms) >= 1, "group.share.* durations must be at least 1 ms"),
            (1 <= self.max_size <= 1000, "group.share.max.size must be between 1 and 1000"),
            (self.min_session_timeout_ms <= self.session_timeout_ms <= self.max_session_timeout_ms,
             "group.share.session.timeout.ms must lie within [group.share.min.session.timeout.ms, "
             "group.share.max.session.timeout.ms]"),
            (self.min_heartbeat_interval_ms <= self.heartbeat_interval_ms <= self.max_heartbeat_interval_ms,
             "group.share.heartbeat.interval.ms must lie within [group.share.min.heartbeat.interval.ms, "
             "group.share.max.heartbeat.interval.ms]"),
            (self.heartbeat_interval_ms < self.session_timeout_ms,
             "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


# ---- results -------------------------------------------------------------------------------------------------------

@dataclass
class HeartbeatResult:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: list[tuple[uuid.UUID, list[int]]] | None = None  # None: unchanged (not sent)
    # share-partitions this heartbeat moved to `initializing`: the shell must have the share coordinator
    # initialize them (InitializeShareGroupState with state epoch `state_epoch`), then call mark_initialized
    initialize: list[TopicPartition] = field(default_factory=list)
    state_epoch: int = 0


@dataclass
class DescribedMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    assignment: list[tuple[uuid.UUID, str, list[int]]]  # (topic id, topic name, partitions)


@dataclass
class DescribedGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[DescribedMember] = field(default_factory=list)


@dataclass
class ShareGroupMetrics:
    group_count_by_state: dict[str, int]
    member_count: int
    rebalance_count: int  # group epoch bumps since this shard was created (Kafka's share-group-rebalance count)


class _GroupError(Exception):
    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(message)
        self.error_code = error_code
        self.message = message


# ---- state ---------------------------------------------------------------------------------------------------------

@dataclass
class _Member:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)
    session_deadline_ms: int = 0


@dataclass
class _ShareGroup:
    group_id: str
    group_epoch: int = INITIAL_GROUP_EPOCH
    metadata_hash: int = 0
    assignment_epoch: int = INITIAL_GROUP_EPOCH
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, dict[uuid.UUID, tuple[int, ...]]] = field(default_factory=dict)
    assignable_basis: frozenset[TopicPartition] = frozenset()  # the assignable set the target was computed from
    # persisted share-partition initialization state
    initializing: dict[TopicPartition, int | None] = field(default_factory=dict)  # -> since (ms); None: loaded
    initialized: set[TopicPartition] = field(default_factory=set)
    deleting: set[uuid.UUID] = field(default_factory=set)
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return GroupState.STABLE if self.members else GroupState.EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def init_record(self, initializing: Iterable[TopicPartition] | None = None,
                    initialized: Iterable[TopicPartition] | None = None, deleting: Iterable[uuid.UUID] | None = None,
                    topic_names: Mapping[uuid.UUID, str] | None = None) -> Record:
        """The group's ShareGroupStatePartitionMetadata record: of its state, or of the state given instead."""
        def by_topic(tps):
            out: dict[uuid.UUID, list[int]] = {}
            for t, p in tps:
                out.setdefault(t, []).append(p)
            return out
        return rec.state_partition_metadata(
            self.group_id, by_topic(self.initializing if initializing is None else initializing),
            by_topic(self.initialized if initialized is None else initialized),
            self.deleting if deleting is None else deleting, self.topic_names if topic_names is None else topic_names)

    def forget_topics(self, topic_ids: set[uuid.UUID]) -> bool:
        """Drop deleted topics from the initialization state; True if anything changed."""
        before = (len(self.initializing), len(self.initialized), len(self.deleting))
        self.initializing = {tp: t for tp, t in self.initializing.items() if tp[0] not in topic_ids}
        self.initialized = {tp for tp in self.initialized if tp[0] not in topic_ids}
        self.deleting -= topic_ids
        for t in topic_ids:
            self.topic_names.pop(t, None)
        return before != (len(self.initializing), len(self.initialized), len(self.deleting))


def _as_list(assignment: Mapping[uuid.UUID, tuple[int, ...]]) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, list(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: kv[0].bytes) if ps]


def _metadata_hash(topic_names: Iterable[str], topics: TopicsView) -> int:
    """A stable signed 64-bit hash of the subscribed topics that exist (name, id, partition count); 0 if none."""
    present = sorted((name, *topics[name]) for name in topic_names if name in topics)
    if not present:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name, topic_id, count in present:
        h.update(f"{name}\0{topic_id}\0{count}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


def _is_blank(s: str | None) -> bool:
    return s is not None and not s.strip()


# ---- the shard -----------------------------------------------------------------------------------------------------

class GroupCoordinatorShard:
    """Share groups of one `__consumer_offsets` partition."""

    def __init__(self, config: ShareGroupConfig | Mapping[str, Any] | None = None):
        if config is None:
            config = ShareGroupConfig()
        elif not isinstance(config, ShareGroupConfig):
            config = ShareGroupConfig.from_broker_config(config)
        self.config = config
        self._groups: dict[str, _ShareGroup] = {}
        self._foreign: dict[str, str] = {}  # group id -> type ("classic", "consumer", ...) owned elsewhere
        self.rebalance_count = 0

    # ---- group type namespace ----------------------------------------------------------------------------------

    def register_foreign_group(self, group_id: str, group_type: str) -> None:
        """Reserve a group id for a group of another type (classic / consumer groups, not handled here yet).
        Share-group operations on it answer GROUP_ID_NOT_FOUND, as the KIP says ("Relationship with consumer
        groups"). Registering the id of an existing share group is a caller bug."""
        if group_id in self._groups:
            raise ValueError(f"group {group_id!r} is already a share group")
        self._foreign[group_id] = group_type

    def unregister_foreign_group(self, group_id: str) -> None:
        self._foreign.pop(group_id, None)

    def group_type(self, group_id: str) -> str | None:
        """'share', the registered foreign type, or None: lets other group protocols detect a share group's id
        (a consumer joining it gets INCONSISTENT_GROUP_PROTOCOL / GROUP_ID_NOT_FOUND on their side)."""
        return GROUP_TYPE_SHARE if group_id in self._groups else self._foreign.get(group_id)

    def _share_group(self, group_id: str) -> _ShareGroup:
        if group_id in self._foreign:
            raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self._groups.get(group_id)
        if group is None:
            raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    # ---- ShareGroupHeartbeat ------------------------------------------------------------------------------------

    def share_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, *,
                              rack_id: str | None = None, subscribed_topic_names: list[str] | None = None,
                              client_id: str = "", client_host: str = "", now_ms: int,
                              topics: TopicsView) -> tuple[HeartbeatResult, list[Record]]:
        try:
            self._validate_heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(group_id, member_id)
            return self._heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names,
                                   client_id, client_host, now_ms, topics)
        except _GroupError as e:
            return HeartbeatResult(error_code=e.error_code, error_message=e.message), []

    @staticmethod
    def _validate_heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names) -> None:
        # Kafka's throwIfShareGroupHeartbeatRequestIsInvalid; v1: the client generates the member id (KIP-1082)
        def invalid(message):
            return _GroupError(ErrorCode.INVALID_REQUEST, message)
        if not member_id or not member_id.strip():
            raise invalid("MemberId can't be empty.")
        if len(member_id) > MEMBER_ID_LENGTH_MAX:
            raise invalid(f"MemberId can't be longer than {MEMBER_ID_LENGTH_MAX} characters.")
        if not group_id or not group_id.strip():
            raise invalid("GroupId can't be empty.")
        if _is_blank(rack_id):
            raise invalid("RackId can't be empty.")
        if member_epoch == 0:
            if not subscribed_topic_names:
                raise invalid("SubscribedTopicNames must be set in first request.")
        elif member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")

    def _leave(self, group_id: str, member_id: str) -> tuple[HeartbeatResult, list[Record]]:
        group = self._share_group(group_id)
        if member_id not in group.members:
            raise _GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        records = self._remove_members(group, [member_id])
        return HeartbeatResult(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH), records

    def _heartbeat(self, group_id, member_id, member_epoch, rack_id, subscribed_topic_names,
                   client_id, client_host, now_ms, topics) -> tuple[HeartbeatResult, list[Record]]:
        if group_id in self._foreign:
            raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self._groups.get(group_id)
        if group is None:
            if member_epoch != 0:
                raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
            group = _ShareGroup(group_id)  # joined to self._groups below, once nothing can fail
        member = group.members.get(member_id)
        if member is None and len(group.members) >= self.config.max_size:
            raise _GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                              f"The share group has reached its maximum capacity of {self.config.max_size} members.")
        if member is None:
            if member_epoch != 0:
                raise _GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"Member {member_id} is not a member of group {group_id}.")
            member = _Member(member_id)
        elif member_epoch != 0:
            # Kafka's throwIfShareGroupMemberEpochIsInvalid: ahead is fenced; behind is fenced unless it is the
            # previous epoch (the response carrying the new epoch may have been lost).
            if member_epoch > member.member_epoch or (member_epoch < member.member_epoch
                                                      and member_epoch != member.previous_member_epoch):
                raise _GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"The share group member has epoch {member_epoch}, the group coordinator knows "
                                  f"{member.member_epoch}. The member must abandon its partitions and rejoin.")
        # (epoch 0 from a known member id is a rejoin: accepted, see the report's decisions)

        records: list[Record] = []
        is_new = member_id not in group.members
        self._groups[group_id] = group
        group.members[member_id] = member

        # 1. update the member; a new member or a new subscription bumps the group epoch
        old_assigned = member.assigned
        subscription_changed = is_new
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed_topic_names is not None:
            names = tuple(sorted(set(subscribed_topic_names)))
            subscription_changed |= names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        member.client_id, member.client_host = client_id, client_host

        subscribed = group.subscribed_topic_names()
        metadata_hash = _metadata_hash(subscribed, topics)
        assignable = frozenset(tp for name in subscribed if name in topics
                               for tp in [(topics[name][0], p) for p in range(topics[name][1])]
                               if tp in group.initialized)
        if subscription_changed or metadata_hash != group.metadata_hash or assignable != group.assignable_basis:
            group.group_epoch += 1
            group.metadata_hash = metadata_hash
            self.rebalance_count += 1
            records.append(rec.share_group_metadata(group_id, group.group_epoch, metadata_hash))

        # 2. a new target assignment when the group epoch is ahead of the assignment epoch
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, topics, assignable)

        # 3. reconcile this member (share groups: no revocation, so at once)
        target = group.target.get(member_id, {})
        if subscription_changed or member.member_epoch != group.assignment_epoch or member.assigned != target:
            if member.member_epoch != group.assignment_epoch:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            member.assigned = target
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms

        # 4. share-partitions to initialize before they can be assigned
        initialize = self._start_initializing(group, subscribed, topics, now_ms)
        if initialize:
            records.append(group.init_record())

        result = HeartbeatResult(member_id=member_id, member_epoch=member.member_epoch,
                                 heartbeat_interval_ms=self.config.heartbeat_interval_ms,
                                 initialize=initialize, state_epoch=group.group_epoch)
        if member_epoch == 0 or subscribed_topic_names is not None or member.assigned != old_assigned:
            result.assignment = _as_list(member.assigned)
        return result, records

    def _compute_target(self, group: _ShareGroup, topics: TopicsView, assignable: frozenset[TopicPartition]):
        subscriptions = {m.member_id: frozenset(topics[n][0] for n in m.subscribed_topic_names if n in topics)
                         for m in group.members.values()}
        by_topic: dict[uuid.UUID, list[int]] = {}
        for t, p in assignable:
            by_topic.setdefault(t, []).append(p)
        group.target = assignor.assign(subscriptions, by_topic, group.target)
        group.assignment_epoch = group.group_epoch
        group.assignable_basis = assignable

    def _start_initializing(self, group: _ShareGroup, subscribed: set[str], topics: TopicsView,
                            now_ms: int) -> list[TopicPartition]:
        """Kafka's subscribedTopicsChangeMap + addInitializingTopicsRecords."""
        retry_ms = self.config.initialize_retry_interval_ms
        todo = []
        for name in sorted(subscribed):
            if name not in topics:
                continue
            topic_id, count = topics[name]
            group.topic_names[topic_id] = name
            for p in range(count):
                tp = (topic_id, p)
                if tp in group.initialized:
                    continue
                since = group.initializing.get(tp, -1)
                if since == -1 or since is None or now_ms - since >= retry_ms:
                    todo.append(tp)
        for tp in todo:
            group.initializing[tp] = now_ms
            group.deleting.discard(tp[0])
        return todo

    def _remove_members(self, group: _ShareGroup, member_ids: Iterable[str]) -> list[Record]:
        """Kafka's shareGroupFenceMember for several members at once: one epoch bump."""
        for member_id in member_ids:
            group.members.pop(member_id, None)
            group.target.pop(member_id, None)
        group.group_epoch += 1
        self.rebalance_count += 1
        if not group.members:
            group.target = {}
        return [rec.share_group_metadata(group.group_id, group.group_epoch, group.metadata_hash)]

    # ---- sessions ---------------------------------------------------------------------------------------------------

    def expire_sessions(self, now_ms: int) -> list[Record]:
        """Remove members whose session deadline (last heartbeat + session timeout) has passed."""
        records = []
        for group in self._groups.values():
            expired = [m.member_id for m in group.members.values() if m.session_deadline_ms <= now_ms]
            if expired:
                records += self._remove_members(group, expired)
        return records

    def next_deadline_ms(self) -> int | None:
        return min((m.session_deadline_ms for g in self._groups.values() for m in g.members.values()), default=None)

    def session_deadlines(self) -> dict[tuple[str, str], int]:
        """Every member's session deadline, keyed (group id, member id) (see Groups.session_deadlines)."""
        return {(g.group_id, m.member_id): m.session_deadline_ms for g in self._groups.values()
                for m in g.members.values()}

    def carry_sessions(self, deadlines: Mapping[tuple[str, str], int]) -> None:
        """Members replayed just now keep the session deadlines they had before (see Groups.carry_sessions)."""
        for g in self._groups.values():
            for m in g.members.values():
                m.session_deadline_ms = deadlines.get((g.group_id, m.member_id), m.session_deadline_ms)

    # ---- share-partition initialization -----------------------------------------------------------------------------

    def partitions_to_initialize(self, group_id: str) -> list[TopicPartition]:
        """The group's share-partitions recorded as initializing and not confirmed yet: what the shell still owes the
        share coordinator (for example after loading the shard)."""
        group = self._groups.get(group_id)
        return sorted(group.initializing, key=lambda tp: (tp[0].bytes, tp[1])) if group else []

    def mark_initialized(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """The share coordinator initialized these share-partitions: they become assignable (the next heartbeat
        bumps the group epoch and assigns them). Changes the group by replaying `initialized_records`."""
        return self._replayed(self.initialized_records(group_id, partitions))

    def initialized_records(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """`mark_initialized`'s record, computed only: the group's initialization state with these share-partitions
        initialized (none if there is no such group, or they all are already)."""
        group = self._groups.get(group_id)
        partitions = {tp for tp in partitions if group and tp not in group.initialized}
        if not partitions:
            return []
        return [group.init_record(initializing=[tp for tp in group.initializing if tp not in partitions],
                                  initialized=group.initialized | partitions)]

    def _replayed(self, records: list[Record]) -> list[Record]:
        for key, value in records:
            self.replay(key, value)
        return records

    def share_offsets_altered(self, group_id: str, partitions: Mapping[TopicPartition, str]
                              ) -> tuple[int, str | None, list[Record]]:
        """AlterShareGroupOffsets set the start offsets of these share-partitions ({(topic id,
        partition): topic name}). KIP-932: the tool may also initialize a share group, so a group
        that does not exist yet is created, empty. Either way the share-partitions count as
        initialized: the first member's heartbeat must not initialize them again, which would
        replace the start offset just set. Changes the group by replaying `offsets_altered_records`."""
        error, message, records = self.offsets_altered_records(group_id, partitions)
        return error, message, self._replayed(records)

    def offsets_altered_records(self, group_id: str, partitions: Mapping[TopicPartition, str]
                                ) -> tuple[int, str | None, list[Record]]:
        """`share_offsets_altered`'s answer and records, computed only."""
        if group_id in self._foreign:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", []
        group = self._groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} has members.", []
        records = []
        if group is None:
            group = _ShareGroup(group_id)  # (not kept: the records make it)
            records.append(rec.share_group_metadata(group_id, group.group_epoch, group.metadata_hash))
        if partitions:
            records.append(group.init_record(
                initializing=[tp for tp in group.initializing if tp not in partitions],
                initialized=group.initialized | set(partitions), deleting=group.deleting - {t for t, _ in partitions},
                topic_names={**group.topic_names, **{topic_id: name for (topic_id, _), name in partitions.items()}}))
        return ErrorCode.NONE, None, records

    def mark_initialize_failed(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """Kafka's uninitializeShareGroupState: forget these initializing partitions; the next heartbeat retries.
        Changes the group by replaying `initialize_failed_records`."""
        return self._replayed(self.initialize_failed_records(group_id, partitions))

    def initialize_failed_records(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """`mark_initialize_failed`'s record, computed only."""
        group = self._groups.get(group_id)
        partitions = {tp for tp in partitions if group and tp in group.initializing}  # (one may be listed twice)
        if not partitions:
            return []
        return [group.init_record(initializing=[tp for tp in group.initializing if tp not in partitions])]

    def on_topics_deleted(self, topic_ids: Iterable[uuid.UUID]) -> list[Record]:
        """Kafka's maybeCleanupShareGroupState: deleted topics leave every group's initialization state (the share
        coordinator removes their share state itself)."""
        topic_ids = set(topic_ids)
        return [g.init_record() for g in self._groups.values() if g.forget_topics(topic_ids)]

    def share_partitions(self, group_id: str) -> list[TopicPartition]:
        """Initialized and initializing share-partitions of a group: the state to delete (DeleteShareGroupState)
        before deleting the group."""
        group = self._groups.get(group_id)
        if group is None:
            return []
        return sorted(group.initialized | set(group.initializing), key=lambda tp: (tp[0].bytes, tp[1]))

    # ---- admin ------------------------------------------------------------------------------------------------------

    def describe(self, group_ids: Iterable[str], topics: TopicsView) -> list[DescribedGroup]:
        names = {topic_id: name for name, (topic_id, _) in topics.items()}
        out = []
        for group_id in group_ids:
            if not group_id:
                out.append(DescribedGroup(group_id, ErrorCode.INVALID_GROUP_ID, "Group id can't be empty."))
                continue
            try:
                group = self._share_group(group_id)
            except _GroupError as e:
                out.append(DescribedGroup(group_id, e.error_code, e.message))
                continue
            members = [DescribedMember(
                m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host, list(m.subscribed_topic_names),
                [(t, names.get(t) or group.topic_names.get(t, ""), ps) for t, ps in _as_list(m.assigned)
                 if t in names or t in group.topic_names])
                for m in sorted(group.members.values(), key=lambda m: m.member_id)]
            out.append(DescribedGroup(group_id, group_state=group.state, group_epoch=group.group_epoch,
                                      assignment_epoch=group.assignment_epoch,
                                      assignor_name=self.config.assignor_name, members=members))
        return out

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
                    ) -> list[tuple[str, str, str]]:
        """(group id, state, type) of the share groups; empty filters match everything; case-insensitive."""
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        if types and GROUP_TYPE_SHARE not in types:
            return []
        return [(g.group_id, g.state, GROUP_TYPE_SHARE) for g in sorted(self._groups.values(), key=lambda g: g.group_id)
                if not states or g.state.lower() in states]

    def delete_groups(self, group_ids: Iterable[str]) -> tuple[list[tuple[str, int, str | None]], list[Record]]:
        """Delete empty share groups: (group id, error code, error message) per group, and the tombstones. The shell
        deletes the groups' share state first (`share_partitions`), as Kafka's DeleteGroups does for share groups."""
        results, records = [], []
        for group_id in group_ids:
            result, group_records = self.delete_records(group_id)
            if group_records:
                del self._groups[group_id]  # DEAD
            records += group_records
            results.append(result)
        return results, records

    def delete_records(self, group_id: str) -> tuple[tuple[str, int, str | None], list[Record]]:
        """DeleteGroups for one share group, computed only: (group id, error, message) and the tombstones that
        delete it when replayed."""
        if not group_id:
            return (group_id, ErrorCode.INVALID_GROUP_ID, "Group id can't be empty."), []
        try:
            group = self._share_group(group_id)
        except _GroupError as e:
            return (group_id, e.error_code, e.message), []
        if group.members:
            return (group_id, ErrorCode.NON_EMPTY_GROUP, f"Group {group_id} is not empty."), []
        return (group_id, ErrorCode.NONE, None), [rec.state_partition_metadata_tombstone(group_id),
                                                  rec.share_group_metadata_tombstone(group_id)]

    def snapshot(self, group_id: str):
        """A copy of everything this holds for `group_id` (the group, or the id's reservation for another type),
        for `restore` (a command's changes taken back)."""
        return copy.deepcopy(self._groups.get(group_id)), self._foreign.get(group_id)

    def restore(self, group_id: str, snapshot) -> None:
        group, foreign = snapshot
        if group is None:
            self._groups.pop(group_id, None)
        else:
            self._groups[group_id] = group
        if foreign is None:
            self._foreign.pop(group_id, None)
        else:
            self._foreign[group_id] = foreign

    # ---- loading ----------------------------------------------------------------------------------------------------

    def replay(self, key_bytes, value_bytes) -> None:
        """Apply one `__consumer_offsets` record while loading the shard. Records of other kinds are skipped, except
        that classic (type 2) and consumer (type 3) group metadata reserve their ids in the group namespace."""
        r = rec.decode(key_bytes, value_bytes)
        if r.record_type in (rec.CLASSIC_GROUP_METADATA, rec.CONSUMER_GROUP_METADATA):
            if r.value is None:
                self._foreign.pop(r.key, None)
            elif r.key not in self._groups:
                self._foreign[r.key] = "classic" if r.record_type == rec.CLASSIC_GROUP_METADATA else "consumer"
            return
        if r.record_type not in (rec.SHARE_GROUP_METADATA, rec.SHARE_GROUP_STATE_PARTITION_METADATA):
            return
        group_id = r.key.group_id
        if r.value is None:
            group = self._groups.get(group_id)
            if group is None:
                return
            if r.record_type == rec.SHARE_GROUP_METADATA:
                del self._groups[group_id]
            else:
                group.initializing, group.initialized, group.deleting, group.topic_names = {}, set(), set(), {}
            return
        self._foreign.pop(group_id, None)
        group = self._groups.setdefault(group_id, _ShareGroup(group_id))
        if r.record_type == rec.SHARE_GROUP_METADATA:
            group.group_epoch = r.value.epoch
            group.metadata_hash = r.value.metadata_hash
            group.assignment_epoch = r.value.epoch  # assignments are not persisted; epochs must not go backwards
            return
        group.topic_names = {}
        # (a partition still initializing keeps when it started, where this shard saw it start; loaded: None)
        since, group.initializing, group.initialized = group.initializing, {}, set()
        for info in r.value.initializing_topics:
            group.topic_names[info.topic_id] = info.topic_name
            group.initializing.update({(info.topic_id, p): since.get((info.topic_id, p)) for p in info.partitions})
        for info in r.value.initialized_topics:
            group.topic_names[info.topic_id] = info.topic_name
            group.initialized.update((info.topic_id, p) for p in info.partitions)
        group.deleting = {info.topic_id for info in r.value.deleting_topics}
        group.topic_names.update({info.topic_id: info.topic_name for info in r.value.deleting_topics})

    def live_records(self) -> list[Record]:
        """Each share group's current records (its epoch, its share-partitions' initialization state): replaying
        them rebuilds the persisted state (compaction)."""
        out = []
        for g in self._groups.values():
            out.append(rec.share_group_metadata(g.group_id, g.group_epoch, g.metadata_hash))
            if g.initializing or g.initialized or g.deleting:
                out.append(g.init_record())
        return out

    def persisted_state(self) -> dict[str, tuple]:
        """What the log holds, per group: (group epoch, metadata hash, initializing, initialized, deleting) — for
        checking that replay rebuilds it."""
        def tps(s):
            return tuple(sorted(s, key=lambda tp: (tp[0].bytes, tp[1])))
        return {g.group_id: (g.group_epoch, g.metadata_hash, tps(g.initializing), tps(g.initialized),
                             tuple(sorted(g.deleting, key=lambda t: t.bytes)))
                for g in self._groups.values()}

    # ---- metrics ----------------------------------------------------------------------------------------------------

    def metrics(self) -> ShareGroupMetrics:
        counts = {GroupState.EMPTY: 0, GroupState.STABLE: 0}
        for g in self._groups.values():
            counts[g.state] += 1
        return ShareGroupMetrics(counts, sum(len(g.members) for g in self._groups.values()), self.rebalance_count)
