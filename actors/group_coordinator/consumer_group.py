"""KIP-848 consumer groups (ConsumerGroupHeartbeat): the group coordinator's pure state machine. No Ray, no clock, no
I/O.

Commands take `now_ms` where time matters and a `TopicsView` (topic name -> (topic id, partition count)); they return
their answer plus the `__consumer_offsets` records to append before answering. `replay` rebuilds the persisted part.

Persisted (Kray's decision, as for share groups in core.py): a consumer group's existence, epoch and metadata hash
(`ConsumerGroupMetadata`, type 3, written on every group epoch bump; a tombstone on delete). Members, target and
current assignments live in memory only: after the coordinator moves, the group is still there, its members get
UNKNOWN_MEMBER_ID and rejoin with epoch 0. Epochs never go backwards: a loaded group's assignment epoch is set to
its persisted group epoch, and the first join bumps past it. A new group starts at epoch 1, as in Kafka 4.4
(`INITIAL_GROUP_EPOCH`), so its first member joins at epoch 2.

Epochs and reconciliation (KIP-848, Kafka's GroupMetadataManager and CurrentAssignmentBuilder):
- the group epoch is bumped when a member joins, leaves, is fenced or expires, changes its subscription (names or
  regex), and when the metadata of the subscribed topics changes (a hash of names, ids and partition counts; regex
  subscriptions resolve against the non-internal topics of the view with `re.fullmatch`);
- when the group epoch is ahead of the assignment epoch, the next heartbeat computes a new target assignment for
  every member with the assignor most members prefer (`ServerAssignor`), else the first of group.consumer.assignors;
- a member reconciles on its own heartbeats: partitions its target drops must be revoked first (UNREVOKED_PARTITIONS:
  it is told its assignment minus them and keeps its epoch until its TopicPartitions no longer hold them; a heartbeat
  without TopicPartitions proves nothing); then it moves to the assignment epoch and gets the partitions of its
  target that nobody else holds; those still held elsewhere come on a later heartbeat (UNRELEASED_PARTITIONS);
- a member that does not revoke within its rebalance timeout is fenced (removed) by `expire`, as is a member whose
  session (group.consumer.session.timeout.ms since its last heartbeat) runs out.

Static membership: the instance id maps to one member. Leaving with epoch -2 keeps the member and its assignment
(epoch -2) for a session timeout; a join with the same instance id and epoch 0 then replaces it under the new member
id, keeping its assignment, without a group epoch bump. While the old member is active, UNRELEASED_INSTANCE_ID.

Decisions where Kafka's snapshot differs or is silent:
- epoch 0 from a known dynamic member id is a rejoin: the member has dropped its partitions (TopicPartitions must be
  empty), so its current assignment is cleared and it reconciles to its target again (Kafka's Oct-2024 code would
  answer FENCED_MEMBER_EPOCH unless its previous epoch was 0, which a Java client would meet again and again);
- a static member that leaves with -2 gets a fresh session deadline (now + session timeout);
- expiry removes all the expired members of a group with one epoch bump.
"""
from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.group_coordinator import consumer_assignors as assignors
from actors.group_coordinator import consumer_records as rec
from actors.group_coordinator.consumer_records import Record
from actors.group_coordinator.records import INITIAL_GROUP_EPOCH
from actors.config_schema import BROKER_DEFAULTS, ConfigError
from actors.group_coordinator.snapshots import GroupSnapshots
from protocol.errors import ErrorCode

TopicsView = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partition count); same as core.py
TopicPartitions = list[tuple[uuid.UUID, list[int]]]
Assignment = dict[uuid.UUID, frozenset[int]]

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1   # KIP-1082
OFFSET_COMMIT_MIN_VERSION_FOR_CONSUMER_PROTOCOL = 9
MEMBER_TYPE_CONSUMER = 1                            # ConsumerGroupDescribe v1 MemberType
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

# Kafka's GroupCoordinatorConfig names and defaults
CONSUMER_GROUP_CONFIG_DEFAULTS: dict[str, Any] = {key: value for key, value in BROKER_DEFAULTS.items()
                                                  if key.startswith("group.consumer.")}


class GroupState:
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState:
    STABLE = "STABLE"
    UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
    UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_size: int
    assignor_names: tuple[str, ...]   # the first is the default

    @classmethod
    def from_broker_config(cls, broker_config: Mapping[str, Any]) -> "ConsumerGroupConfig":
        c = {**CONSUMER_GROUP_CONFIG_DEFAULTS,
             **{k: v for k, v in broker_config.items() if k in CONSUMER_GROUP_CONFIG_DEFAULTS}}
        try:
            ints = {k: int(v) for k, v in c.items() if k != "group.consumer.assignors"}
        except (TypeError, ValueError) as e:
            raise ConfigError(f"group.consumer.*: {e}") from None
        names = c["group.consumer.assignors"]
        if isinstance(names, str):
            names = names.split(",")
        names = tuple(assignors.KAFKA_CLASS_NAMES.get(n.strip(), n.strip()) for n in names if n.strip())
        if not names:
            raise ConfigError("group.consumer.assignors must name at least one assignor")
        for n in names:
            if n not in assignors.ASSIGNORS:
                raise ConfigError(f"group.consumer.assignors: unknown assignor {n!r}; "
                                  f"the built-in ones are {', '.join(assignors.ASSIGNORS)}")
        if len(set(names)) != len(names):
            raise ConfigError("group.consumer.assignors names an assignor twice")
        session, min_session, max_session = (ints[f"group.consumer.{p}session.timeout.ms"]
                                             for p in ("", "min.", "max."))
        interval, min_interval, max_interval = (ints[f"group.consumer.{p}heartbeat.interval.ms"]
                                                for p in ("", "min.", "max."))
        checks = [
            (min(session, min_session, max_session, interval, min_interval, max_interval) >= 1,
             "group.consumer.* durations must be at least 1 ms"),
            (ints["group.consumer.max.size"] >= 1, "group.consumer.max.size must be at least 1"),
            (min_session <= session <= max_session,
             "group.consumer.session.timeout.ms must lie within [group.consumer.min.session.timeout.ms, "
             "group.consumer.max.session.timeout.ms]"),
            (min_interval <= interval <= max_interval,
             "group.consumer.heartbeat.interval.ms must lie within [group.consumer.min.heartbeat.interval.ms, "
             "group.consumer.max.heartbeat.interval.ms]"),
            (interval < session, "group.consumer.heartbeat.interval.ms must be less than "
                                 "group.consumer.session.timeout.ms"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        return cls(session, interval, ints["group.consumer.max.size"], names)


# ---- results -------------------------------------------------------------------------------------------------------

@dataclass
class ConsumerHeartbeatResult:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: not sent (unchanged and not a full request)


@dataclass
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: list[tuple[uuid.UUID, str, list[int]]]          # (topic id, topic name, partitions)
    target_assignment: list[tuple[uuid.UUID, str, list[int]]]
    member_type: int = MEMBER_TYPE_CONSUMER


@dataclass
class DescribedConsumerGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[DescribedConsumerMember] = field(default_factory=list)


class _GroupError(Exception):
    def __init__(self, error_code: ErrorCode, message: str | None):
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _invalid(message: str) -> _GroupError:
    return _GroupError(ErrorCode.INVALID_REQUEST, message)


# ---- state ---------------------------------------------------------------------------------------------------------

@dataclass
class _Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    state: str = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: (topic id, partition) -> the member epoch at which the member was given the partition,
    # for every partition it holds (assigned or pending revocation)
    assignment_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    session_deadline_ms: int = 0
    rebalance_deadline_ms: int | None = None  # set while UNREVOKED_PARTITIONS

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == assignment_epoch

    def copy(self, **changes) -> "_Member":
        values = {k: getattr(self, k) for k in self.__dataclass_fields__}
        values.update(changes)
        return _Member(**values)

    def rejoined(self) -> "_Member":
        """A copy for a member that rejoins with epoch 0: it has dropped its partitions and reconciles afresh."""
        return self.copy(member_epoch=0, state=MemberState.STABLE, assigned={}, pending_revocation={},
                         assignment_epochs={}, rebalance_deadline_ms=None)


@dataclass
class _Group:
    group_id: str
    group_epoch: int = INITIAL_GROUP_EPOCH
    metadata_hash: int = 0
    assignment_epoch: int = INITIAL_GROUP_EPOCH
    members: dict[str, _Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)   # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)    # member id -> target assignment

    @property
    def state(self) -> str:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return GroupState.STABLE
        return GroupState.RECONCILING

    def holders(self, excluding: str) -> set[tuple[uuid.UUID, int]]:
        """Partitions held (assigned or pending revocation) by members other than `excluding`."""
        out = set()
        for m in self.members.values():
            if m.member_id != excluding:
                for a in (m.assigned, m.pending_revocation):
                    out.update((t, p) for t, ps in a.items() for p in ps)
        return out

    def preferred_assignor(self, default_names: tuple[str, ...]) -> str:
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default_names[0]
        return max(counts, key=lambda n: (counts[n], -default_names.index(n)))


def new_member_id() -> str:
    """A Kafka-style member id: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _is_blank(s: str | None) -> bool:
    return s is not None and not s.strip()


def _as_assignment(topic_partitions: TopicPartitions | None) -> Assignment | None:
    if topic_partitions is None:
        return None
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, partitions in topic_partitions:
        out.setdefault(topic_id, set()).update(partitions)
    return {t: frozenset(ps) for t, ps in out.items() if ps}


def _as_list(assignment: Mapping[uuid.UUID, frozenset[int]]) -> TopicPartitions:
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: kv[0].bytes) if ps]


def _overlaps(a: Assignment | None, b: Assignment) -> bool:
    """Does `a` (what the member says it owns; None = not sent, assume it still owns everything) hold any of `b`?"""
    if a is None:
        return True
    return any(a.get(t, frozenset()) & ps for t, ps in b.items())


def _is_subset(a: Assignment | None, b: Assignment) -> bool:
    if a is None:
        return False
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())


def _metadata_hash(topic_names: Iterable[str], topics: TopicsView) -> int:
    """A stable signed 64-bit hash of the subscribed topics that exist (name, id, partition count); 0 if none."""
    present = sorted((name, *topics[name]) for name in topic_names if name in topics)
    if not present:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name, topic_id, count in present:
        h.update(f"{name}\0{topic_id}\0{count}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


# ---- the consumer groups of one coordinator shard -------------------------------------------------------------------

class ConsumerGroups(GroupSnapshots):
    def __init__(self, broker_config: Mapping[str, Any]):
        self.config = ConsumerGroupConfig.from_broker_config(broker_config)
        self._groups: dict[str, _Group] = {}
        self._topics: TopicsView = {}          # the last view seen: used when members leave or expire
        self._regexes: dict[str, re.Pattern] = {}
        self._rebalance_count = 0
        self.new_member_id = new_member_id     # replaceable in tests

    # ---- subscriptions -------------------------------------------------------------------------------------------

    def _compile(self, regex: str) -> re.Pattern:
        pattern = self._regexes.get(regex)
        if pattern is None:
            pattern = self._regexes[regex] = re.compile(regex)
        return pattern

    def _subscribed_topics(self, member: _Member, topics: TopicsView) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            pattern = self._compile(member.subscribed_topic_regex)
            names.update(t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t))
        return names

    def _group_hash(self, members: Iterable[_Member], topics: TopicsView) -> int:
        names: set[str] = set()
        for m in members:
            names |= self._subscribed_topics(m, topics)
        return _metadata_hash(names, topics)

    def _bump(self, group: _Group, metadata_hash: int) -> Record:
        group.group_epoch += 1
        group.metadata_hash = metadata_hash
        self._rebalance_count += 1
        return rec.consumer_group_metadata(group.group_id, group.group_epoch, metadata_hash)

    # ---- ConsumerGroupHeartbeat -----------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int, subscribed_topic_names: list[str] | None,
                  subscribed_topic_regex: str | None, server_assignor: str | None,
                  owned_partitions: TopicPartitions | None, client_id: str, client_host: str, now_ms: int,
                  topics: TopicsView, api_version: int) -> tuple[ConsumerHeartbeatResult, list[Record]]:
        try:
            self._validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                           subscribed_topic_names, subscribed_topic_regex, server_assignor, owned_partitions,
                           api_version)
            self._topics = topics
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(group_id, member_id, member_epoch, instance_id, now_ms)
            if not member_id:
                member_id = self.new_member_id()   # v0 only: the coordinator names a joining member
            return self._heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                   subscribed_topic_names, subscribed_topic_regex, server_assignor,
                                   _as_assignment(owned_partitions), client_id, client_host, now_ms, topics)
        except _GroupError as e:
            return ConsumerHeartbeatResult(error_code=e.error_code, error_message=e.message), []

    def _validate(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                  subscribed_topic_names, subscribed_topic_regex, server_assignor, owned_partitions,
                  api_version) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not group_id or not group_id.strip():
            raise _invalid("GroupId can't be empty.")
        if _is_blank(instance_id):
            raise _invalid("InstanceId can't be empty.")
        if _is_blank(rack_id):
            raise _invalid("RackId can't be empty.")
        member_id_blank = not member_id or not member_id.strip()
        if api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION and member_id_blank:
            raise _invalid("MemberId can't be empty.")
        if member_epoch > 0 or member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if member_id_blank:
                raise _invalid("MemberId can't be empty.")
        elif member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if owned_partitions is None or owned_partitions:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                raise _invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if member_id_blank:
                raise _invalid("MemberId can't be empty.")
            if instance_id is None:
                raise _invalid("InstanceId can't be null.")
        else:
            raise _invalid("MemberEpoch is invalid.")
        if subscribed_topic_regex:
            try:
                self._compile(subscribed_topic_regex)
            except (re.error, RecursionError, OverflowError) as e:
                raise _GroupError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                  f"SubscribedTopicRegex `{subscribed_topic_regex}` is not a valid regular "
                                  f"expression: {e}.") from None
        if server_assignor is not None and server_assignor not in self.config.assignor_names:
            raise _GroupError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                              f"ServerAssignor {server_assignor} is not supported. Supported assignors: "
                              f"{', '.join(self.config.assignor_names)}.")

    def _consumer_group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        return group

    @staticmethod
    def _unknown_member(group_id: str, member_id: str) -> _GroupError:
        return _GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")

    @staticmethod
    def _check_epoch(member: _Member, received: int, owned: Assignment | None) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
        if received > member.member_epoch:
            raise _GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                              f"The consumer group member has a greater member epoch ({received}) than the one known "
                              f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                              f"partitions and rejoin.")
        if received < member.member_epoch and (received != member.previous_member_epoch
                                               or not _is_subset(owned, member.assigned)):
            # the previous epoch with a subset of the assignment: the response with the new epoch was lost
            raise _GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                              f"The consumer group member has a smaller member epoch ({received}) than the one known "
                              f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                              f"partitions and rejoin.")

    def _static_member(self, group: _Group, instance_id: str) -> _Member | None:
        member_id = group.static_members.get(instance_id)
        return None if member_id is None else group.members.get(member_id)

    def _static_member_named(self, group: _Group, instance_id: str, member_id: str) -> _Member:
        """The static member of `instance_id`, which must be `member_id` (Kafka's static member checks)."""
        member = self._static_member(group, instance_id)
        if member is None:
            raise _GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if member.member_id != member_id:
            raise _GroupError(ErrorCode.FENCED_INSTANCE_ID,
                              f"Static member {member_id} with instance id {instance_id} was fenced by member "
                              f"{member.member_id}.")
        return member

    def _resolve_member(self, group: _Group, member_id: str, member_epoch: int, instance_id: str | None,
                        owned: Assignment | None) -> tuple[_Member, _Member | None]:
        """The member this heartbeat is about (a copy to update) and the static member it replaces, if any."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                    raise self._unknown_member(group.group_id, member_id)
                return _Member(member_id), None
            if member_epoch == JOIN_GROUP_MEMBER_EPOCH:   # a rejoin: the member dropped its partitions
                return member.rejoined(), None
            self._check_epoch(member, member_epoch, owned)
            return member.copy(), None

        existing = self._static_member(group, instance_id)
        if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if existing is None:
                member = group.members.get(member_id)
                return (member.copy() if member else _Member(member_id)), None
            if existing.member_id == member_id and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # the same static member rejoins (its join response was lost, or FENCED_MEMBER_EPOCH): as a dynamic
                # rejoin, not a replacement of itself (apache/kafka#23542)
                return existing.rejoined(), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _GroupError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                  f"Static member {member_id} with instance id {instance_id} cannot join the group "
                                  f"because the instance id is owned by {existing.member_id} member.")
            # the static member comes back: a copy under the new member id, with its assignment, at epoch 0
            return existing.copy(member_id=member_id, member_epoch=0, previous_member_epoch=0,
                                 rebalance_deadline_ms=None), existing
        existing = self._static_member_named(group, instance_id, member_id)
        self._check_epoch(existing, member_epoch, owned)
        return existing.copy(), None

    def _heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                   subscribed_topic_names, subscribed_topic_regex, server_assignor, owned: Assignment | None,
                   client_id, client_host, now_ms, topics) -> tuple[ConsumerHeartbeatResult, list[Record]]:
        group = self._groups.get(group_id)
        if group is None:
            if member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise _GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            group = _Group(group_id)   # kept below, once nothing can fail
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise _GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum "
                                                                f"capacity of {self.config.max_size} members.")
        member, replaced = self._resolve_member(group, member_id, member_epoch, instance_id, owned)
        old_member = group.members.get(member_id) or replaced
        old_assigned = old_member.assigned if old_member else {}

        # 1. update the member; a join or a new subscription bumps the group epoch, as does new topic metadata
        is_new = old_member is None
        if instance_id is not None:
            member.instance_id = instance_id
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if server_assignor is not None:
            member.server_assignor = server_assignor
        subscription_changed = is_new
        if subscribed_topic_names is not None:
            names = tuple(sorted(set(subscribed_topic_names)))
            subscription_changed |= names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        if subscribed_topic_regex is not None:
            regex = subscribed_topic_regex or None
            subscription_changed |= regex != member.subscribed_topic_regex
            member.subscribed_topic_regex = regex
        member.client_id, member.client_host = client_id, client_host

        self._groups[group_id] = group
        if replaced is not None:
            del group.members[replaced.member_id]
            group.target[member_id] = group.target.pop(replaced.member_id, {})
        group.members[member_id] = member
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member_id

        records = []
        metadata_hash = self._group_hash(group.members.values(), topics)
        if subscription_changed or metadata_hash != group.metadata_hash:
            records.append(self._bump(group, metadata_hash))

        # 2. a new target assignment when the group epoch is ahead of the assignment epoch
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, topics)

        # 3. reconcile this member towards its target
        self._reconcile(group, member, owned, now_ms)
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms

        result = ConsumerHeartbeatResult(member_id=member_id, member_epoch=member.member_epoch,
                                         heartbeat_interval_ms=self.config.heartbeat_interval_ms)
        full_request = member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
            rebalance_timeout_ms != -1 and owned is not None
            and (subscribed_topic_names is not None or subscribed_topic_regex is not None))
        if full_request or member.assigned != old_assigned:
            result.assignment = _as_list(member.assigned)
        return result, records

    def _compute_target(self, group: _Group, topics: TopicsView) -> None:
        subscriptions = {}
        for m in group.members.values():
            topic_ids = frozenset(topics[n][0] for n in self._subscribed_topics(m, topics) if n in topics)
            subscriptions[m.member_id] = assignors.MemberSubscription(topic_ids, m.instance_id,
                                                                     group.target.get(m.member_id, {}))
        partition_counts = {topic_id: count for topic_id, count in topics.values()}
        assign = assignors.ASSIGNORS[group.preferred_assignor(self.config.assignor_names)]
        group.target = assign(subscriptions, partition_counts)
        group.assignment_epoch = group.group_epoch

    def _reconcile(self, group: _Group, member: _Member, owned: Assignment | None, now_ms: int) -> None:
        """Kafka's CurrentAssignmentBuilder, applied in place to `member`."""
        if member.is_reconciled_to(group.assignment_epoch):
            return
        if member.state == MemberState.UNREVOKED_PARTITIONS and _overlaps(owned, member.pending_revocation):
            return   # still owns partitions it must revoke
        before = (member.state, member.member_epoch, member.assigned, member.pending_revocation)
        target = group.target.get(member.member_id, {})
        held_elsewhere = group.holders(excluding=member.member_id)
        assigned, revoking, adding, unreleased = {}, {}, {}, False
        for topic_id in set(target) | set(member.assigned):
            wanted = target.get(topic_id, frozenset())
            current = member.assigned.get(topic_id, frozenset())
            kept = current & wanted
            if kept:
                assigned[topic_id] = kept
            if current - kept:
                revoking[topic_id] = current - kept
            free = frozenset(p for p in wanted - kept if (topic_id, p) not in held_elsewhere)
            unreleased |= len(free) < len(wanted - kept)
            if free:
                adding[topic_id] = free

        if revoking and _overlaps(owned, revoking):
            # revoke first: keep the epoch, tell the member its assignment without the revoked partitions
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.assigned, member.pending_revocation = assigned, revoking
        else:
            for topic_id, partitions in adding.items():
                assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
            member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
            if member.member_epoch != group.assignment_epoch:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = group.assignment_epoch
            member.assigned, member.pending_revocation = assigned, {}
        # KIP-1251: a partition the member keeps keeps the epoch it was given at; a new one gets the new epoch
        member.assignment_epochs = {(topic_id, p): member.assignment_epochs.get((topic_id, p), member.member_epoch)
                                    for held in (member.assigned, member.pending_revocation)
                                    for topic_id, partitions in held.items() for p in partitions}

        if (member.state, member.member_epoch, member.assigned, member.pending_revocation) != before:
            member.rebalance_deadline_ms = (now_ms + max(member.rebalance_timeout_ms, 0)
                                            if member.state == MemberState.UNREVOKED_PARTITIONS else None)

    def _leave(self, group_id, member_id, member_epoch, instance_id, now_ms) -> tuple[ConsumerHeartbeatResult,
                                                                                       list[Record]]:
        group = self._consumer_group(group_id)
        if instance_id is None:
            if member_id not in group.members:
                raise self._unknown_member(group_id, member_id)
            member = group.members[member_id]
        else:
            member = self._static_member_named(group, instance_id, member_id)
            if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # a temporary leave: the member and its assignment stay for a session timeout
                member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
                member.pending_revocation = {}
                member.rebalance_deadline_ms = None
                member.session_deadline_ms = now_ms + self.config.session_timeout_ms
                return ConsumerHeartbeatResult(member_id=member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH), []
        records = self._remove_members(group, [member.member_id])
        return ConsumerHeartbeatResult(member_id=member_id, member_epoch=member_epoch), records

    def _remove_members(self, group: _Group, member_ids: Iterable[str]) -> list[Record]:
        """Kafka's consumerGroupFenceMember for several members at once: one epoch bump."""
        for member_id in member_ids:
            member = group.members.pop(member_id)
            group.target.pop(member_id, None)
            if member.instance_id is not None and group.static_members.get(member.instance_id) == member_id:
                del group.static_members[member.instance_id]
        return [self._bump(group, self._group_hash(group.members.values(), self._topics))]

    # ---- timers ---------------------------------------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[Record]:
        """Fence members whose session ran out, and members that did not revoke within their rebalance timeout."""
        records = []
        for group in self._groups.values():
            expired = [m.member_id for m in group.members.values()
                       if m.session_deadline_ms <= now_ms
                       or (m.rebalance_deadline_ms is not None and m.rebalance_deadline_ms <= now_ms)]
            if expired:
                records += self._remove_members(group, expired)
        return records

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for g in self._groups.values() for m in g.members.values()
                     for d in (m.session_deadline_ms, m.rebalance_deadline_ms) if d is not None]
        return min(deadlines, default=None)

    def session_deadlines(self) -> dict[tuple[str, str], int]:
        """Every member's session deadline, keyed (group id, member id) (see Groups.session_deadlines)."""
        return {(g.group_id, m.member_id): m.session_deadline_ms for g in self._groups.values()
                for m in g.members.values()}

    def carry_sessions(self, deadlines: Mapping[tuple[str, str], int]) -> None:
        """Members replayed just now keep the session deadlines they had before (see Groups.carry_sessions)."""
        for g in self._groups.values():
            for m in g.members.values():
                m.session_deadline_ms = deadlines.get((g.group_id, m.member_id), m.session_deadline_ms)

    def on_topics_changed(self, topics: TopicsView, now_ms: int) -> list[Record]:
        """The cluster metadata changed: bump the epoch of every group whose subscribed topics' metadata changed (a
        new topic matching a regex, partitions added, a topic deleted). Members get the new target on their next
        heartbeat."""
        self._topics = topics
        records = []
        for group in self._groups.values():
            if group.members:
                metadata_hash = self._group_hash(group.members.values(), topics)
                if metadata_hash != group.metadata_hash:
                    records.append(self._bump(group, metadata_hash))
        return records

    # ---- offsets --------------------------------------------------------------------------------------------------

    def _check_member_epoch(self, group: _Group, member_id: str | None, member_epoch: int) -> tuple[int, str | None]:
        member = group.members.get(member_id) if member_id is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}."
        if member_epoch != member.member_epoch:   # Kafka: STALE_MEMBER_EPOCH either way; clients retry it
            return (ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match the "
                                                  f"expected member epoch {member.member_epoch}.")
        return ErrorCode.NONE, None

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                               api_version: int, transactional: bool = False) -> tuple[int, str | None]:
        """Kafka's ConsumerGroup.validateOffsetCommit. An unknown group accepts a commit with a negative epoch (a
        simple / admin commit; the caller creates the group); otherwise GROUP_ID_NOT_FOUND (v9+) or
        ILLEGAL_GENERATION (older versions), as Kafka's OffsetMetadataManager answers. A member's epoch older than
        its current one passes here and is checked per partition (`stale_commit_partitions`, KIP-1251)."""
        group = self._groups.get(group_id)
        if group is None:
            if member_epoch < 0:
                return ErrorCode.NONE, None
            if api_version >= OFFSET_COMMIT_MIN_VERSION_FOR_CONSUMER_PROTOCOL:
                return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
            return ErrorCode.ILLEGAL_GENERATION, None
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE, None
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
        if api_version < OFFSET_COMMIT_MIN_VERSION_FOR_CONSUMER_PROTOCOL and not transactional:
            return (ErrorCode.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members using "
                                                   "the modern group protocol")
        member = group.members[member_id]
        if member_epoch > member.member_epoch:
            return (ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} is newer than the "
                                                  f"current member epoch {member.member_epoch}.")
        return ErrorCode.NONE, None

    def stale_commit_partitions(self, group_id: str, member_id: str, member_epoch: int,
                                partitions: Iterable[tuple[str, int]]) -> list[bool]:
        """KIP-1251 (Kafka 4.3+), for a commit that passed `validate_offset_commit`: per (topic, partition), True
        where it must be refused with STALE_MEMBER_EPOCH. A member commits with its current epoch, or with an
        older one for partitions it still holds since that epoch or before: assignment epoch <= the commit's
        epoch <= the member's epoch. Kafka checks nothing per partition at the current epoch."""
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        partitions = list(partitions)
        if member is None or member_epoch < 0 or member_epoch >= member.member_epoch:
            return [False] * len(partitions)
        out = []
        for topic, partition in partitions:
            topic_id = self._topics.get(topic, (None, 0))[0]
            given = member.assignment_epochs.get((topic_id, partition))
            out.append(given is None or given > member_epoch)
        return out

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> tuple[int, str | None]:
        """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9+): no member id and a negative epoch is an admin
        or a client outside group management; otherwise the member and its epoch must match."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE, None
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        return self._check_member_epoch(group, member_id, member_epoch)

    # ---- admin ----------------------------------------------------------------------------------------------------

    def describe(self, group_ids: Iterable[str], topics: TopicsView) -> list[DescribedConsumerGroup]:
        names = {topic_id: name for name, (topic_id, _) in topics.items()}

        def named(assignment):
            return [(t, names[t], ps) for t, ps in _as_list(assignment) if t in names]

        out = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                out.append(DescribedConsumerGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                                  f"Group {group_id} not found."))
                continue
            members = [DescribedConsumerMember(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                list(m.subscribed_topic_names), m.subscribed_topic_regex, named(m.assigned),
                named(group.target.get(m.member_id, {})))
                for m in sorted(group.members.values(), key=lambda m: m.member_id)]
            out.append(DescribedConsumerGroup(group_id, group_state=group.state, group_epoch=group.group_epoch,
                                              assignment_epoch=group.assignment_epoch,
                                              assignor_name=group.preferred_assignor(self.config.assignor_names),
                                              members=members))
        return out

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics the group's members subscribe to now, by name or regex (OffsetDelete may not delete those)."""
        group = self._groups.get(group_id)
        if group is None:
            return set()
        return {t for m in group.members.values() for t in self._subscribed_topics(m, self._topics)}

    def list_groups(self) -> list[tuple[str, str]]:
        return [(g.group_id, g.state) for g in sorted(self._groups.values(), key=lambda g: g.group_id)]

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def is_empty(self, group_id: str) -> bool:
        """True for a group without members, and for an unknown group."""
        group = self._groups.get(group_id)
        return group is None or not group.members

    def create_empty(self, group_id: str) -> list[Record]:
        """Create the group, empty, if it does not exist (its metadata record at the initial epoch); else nothing."""
        if group_id in self._groups:
            return []
        group = self._groups[group_id] = _Group(group_id)
        return [rec.consumer_group_metadata(group_id, group.group_epoch, group.metadata_hash)]

    def delete_records(self, group_id: str) -> tuple[int, str | None, list[Record]]:
        """DeleteGroups for this group, computed only: (error, message, the tombstone that deletes it when replayed)."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, f"Group {group_id} is not empty.", []
        return ErrorCode.NONE, None, [rec.consumer_group_metadata_tombstone(group_id)]

    def delete_group(self, group_id: str) -> tuple[int, str | None, list[Record]]:
        error, message, records = self.delete_records(group_id)
        if not error:
            del self._groups[group_id]
        return error, message, records

    # ---- loading --------------------------------------------------------------------------------------------------

    def replay(self, record_type: int, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """Apply one `__consumer_offsets` record while loading; records of other types are ignored."""
        if record_type != rec.RECORD_TYPE_CONSUMER_GROUP_METADATA:
            return
        r = rec.decode_consumer_group_metadata(key_bytes, value_bytes)
        if r.epoch is None:
            self._groups.pop(r.group_id, None)
            return
        group = self._groups.setdefault(r.group_id, _Group(r.group_id))
        group.group_epoch = group.assignment_epoch = r.epoch   # assignments are not persisted
        group.metadata_hash = r.metadata_hash

    def live_records(self) -> list[Record]:
        """The current metadata record of every group: replaying them rebuilds the persisted state (compaction)."""
        return [rec.consumer_group_metadata(g.group_id, g.group_epoch, g.metadata_hash) for g in self._groups.values()]

    def persisted_state(self) -> dict[str, tuple[int, int]]:
        """(group epoch, metadata hash) per group: what the log holds, for checking that replay rebuilds it."""
        return {g.group_id: (g.group_epoch, g.metadata_hash) for g in self._groups.values()}

    # ---- metrics --------------------------------------------------------------------------------------------------

    def rebalance_count(self) -> int:
        return self._rebalance_count

    def count_by_state(self) -> dict[str, int]:
        counts = dict.fromkeys((GroupState.EMPTY, GroupState.ASSIGNING, GroupState.RECONCILING, GroupState.STABLE), 0)
        for g in self._groups.values():
            counts[g.state] += 1
        return counts

    def member_count(self) -> int:
        return sum(len(g.members) for g in self._groups.values())
