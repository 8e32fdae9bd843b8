"""Classic groups' pure state machine: JoinGroup, SyncGroup, Heartbeat, LeaveGroup. No Ray, no clock, no I/O.

The rebalance as Kafka's group coordinator runs it. A group is Empty, PreparingRebalance (members are (re)joining),
CompletingRebalance (the leader got every member's metadata and computes the assignment on the client), Stable
(the leader's SyncGroup handed each member its assignment) or Dead. The coordinator never reads assignments: it
relays the members' protocol metadata to the leader and the leader's assignments back, so every client-side
assignor works, incremental cooperative ones (cooperative-sticky) included.

JoinGroup and SyncGroup answer later than they are asked: a join waits until every member has rejoined (or the
rebalance timeout passes), a follower's sync waits for the leader's. So calls carry a `call` id, and every command
returns a `CoordinatorResult` (actors/coordinator_result.py): the records to append to `__consumer_offsets`, and as
its response the replies it can give now, to this call or to calls waiting from before, sent once the records are
appended. `tick(now_ms)` fires the timers: the initial
rebalance delay (`group.initial.rebalance.delay.ms`), join and sync deadlines (rebalance timeouts), member sessions
and KIP-394's pending members (a member id handed out with MEMBER_ID_REQUIRED and not used within the session).

Static members (KIP-345, `group.instance.id`) keep their place across restarts: a join with an unknown member id
and a known instance id replaces the old member and, in a Stable group whose protocol does not change, gets the
current generation back without a rebalance. The group (members with their metadata and assignments) is persisted
as Kafka's GroupMetadata record after every generation and assignment, so a coordinator that moves or restarts
keeps its groups Stable and their members heartbeating.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.group_coordinator import classic_records as crec
from actors.coordinator_result import CoordinatorResult
from actors.group_coordinator.records import Record
from actors.config_schema import BROKER_DEFAULTS, ConfigError
from actors.group_coordinator.snapshots import GroupSnapshots
from protocol.errors import ErrorCode

EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
CONSUMER_PROTOCOL_TYPE = "consumer"
GROUP_ID_LENGTH_MAX = 255
SESSION_OVER_MS = 0  # the session deadline of a member known to be gone (see carry_sessions)

CLASSIC_CONFIG_DEFAULTS: dict[str, int] = {key: BROKER_DEFAULTS[key] for key in (
    "group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms",
    "group.max.size")}


@dataclass(frozen=True)
class ClassicGroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2147483647

    @classmethod
    def from_broker_config(cls, broker_config: Mapping[str, Any]) -> "ClassicGroupConfig":
        c = {**CLASSIC_CONFIG_DEFAULTS, **{k: v for k, v in broker_config.items() if k in CLASSIC_CONFIG_DEFAULTS}}
        try:
            values = [int(c[k]) for k in CLASSIC_CONFIG_DEFAULTS]
        except (TypeError, ValueError) as e:
            raise ConfigError(f"group.*: {e}") from None
        config = cls(*values)
        if not 0 < config.min_session_timeout_ms <= config.max_session_timeout_ms:
            raise ConfigError("group.min.session.timeout.ms must be positive and at most group.max.session.timeout.ms")
        if config.initial_rebalance_delay_ms < 0 or config.max_size < 1:
            raise ConfigError("group.initial.rebalance.delay.ms must be >= 0 and group.max.size >= 1")
        return config


# ---- results -------------------------------------------------------------------------------------------------------

@dataclass
class JoinResult:
    error_code: int = 0
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # (member id, instance id, metadata)


@dataclass
class SyncResult:
    error_code: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class LeaveResult:
    error_code: int = 0
    members: list[tuple[str, str | None, int]] = field(default_factory=list)  # (member id, instance id, error)


Replies = dict[int, "JoinResult | SyncResult | LeaveResult"]   # call id -> its answer


def outcome(records: list[Record] | None = None, replies: Replies | None = None) -> CoordinatorResult[Replies]:
    """A classic command's result: the records to append, and the replies (to this call or to calls waiting from
    before) to send once they are appended."""
    return CoordinatorResult(records if records is not None else [], replies if replies is not None else {})


def merge(out: CoordinatorResult[Replies], other: CoordinatorResult[Replies]) -> CoordinatorResult[Replies]:
    """`other`'s records after `out`'s, its replies beside them."""
    out.response.update(other.response)
    out.records += other.records
    return out


@dataclass
class DescribedClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class DescribedClassicGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    state: str = DEAD
    protocol_type: str = ""
    protocol: str = ""
    members: list[DescribedClassicMember] = field(default_factory=list)


# ---- state ---------------------------------------------------------------------------------------------------------

@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_call: int | None = None   # a JoinGroup waiting for the join phase to end
    sync_call: int | None = None   # a SyncGroup waiting for the leader's assignments
    deadline_ms: int = 0           # session: the last heartbeat + session timeout

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass
class _Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    state_timestamp_ms: int = -1
    members: dict[str, _Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)    # instance id -> member id
    pending: dict[str, int] = field(default_factory=dict)   # KIP-394 member ids handed out -> deadline
    join_deadline_ms: int | None = None
    initial_delay_cap_ms: int | None = None  # set while the initial rebalance delay runs: it ends by then at most
    sync_deadline_ms: int | None = None
    pending_sync: set[str] = field(default_factory=set)  # members yet to send this generation's SyncGroup

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self, excluding: str | None = None) -> set[str] | None:
        """Protocols every member (but `excluding`) supports; None if there is no such member."""
        others = [set(m.names()) for m in self.members.values() if m.member_id != excluding]
        return set.intersection(*others) if others else None

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]], member_id: str | None) -> bool:
        names = {name for name, _ in protocols}
        candidates = self.candidate_protocols(excluding=member_id)
        if candidates is None:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(candidates & names)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support; the most votes win."""
        candidates = self.candidate_protocols() or set()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name in m.names() if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values())).names()
        return max(votes, key=lambda name: (votes[name], -first.index(name) if name in first else -len(first)))

    def record(self) -> Record:
        return crec.group_metadata(self.group_id, crec.GroupMetadataValue(
            self.protocol_type or "", self.generation, self.protocol, self.leader, self.state_timestamp_ms,
            [crec.GroupMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                              m.session_timeout_ms, m.metadata(self.protocol), m.assignment)
             for m in self.members.values()]))


class _Fail(Exception):
    def __init__(self, error_code: int, message: str = ""):
        super().__init__(message)
        self.error_code = error_code


# ---- the groups ----------------------------------------------------------------------------------------------------

class ClassicGroups(GroupSnapshots):
    def __init__(self, config: ClassicGroupConfig | Mapping[str, Any] | None = None):
        if config is None:
            config = ClassicGroupConfig()
        elif not isinstance(config, ClassicGroupConfig):
            config = ClassicGroupConfig.from_broker_config(config)
        self.config = config
        self._groups: dict[str, _Group] = {}
        self.rebalance_count = 0

    # ---- queries -------------------------------------------------------------------------------------------------

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def state(self, group_id: str) -> str:
        group = self._groups.get(group_id)
        return group.state if group else DEAD

    def empty_since_ms(self, group_id: str) -> int | None:
        """When the group became Empty (for offset retention); None if it has members or pending joins."""
        group = self._groups.get(group_id)
        if group is None:
            return -1
        if group.state != EMPTY or group.pending:
            return None
        return group.state_timestamp_ms if group.protocol_type else -1  # a simple group: by commit time

    def protocol_type(self, group_id: str) -> str:
        group = self._groups.get(group_id)
        return (group.protocol_type or "") if group else ""

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics the group's consumer-protocol members subscribe to (OffsetDelete may not delete those)."""
        group = self._groups.get(group_id)
        if group is None or group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.state == EMPTY:
            return set()
        return {t for m in group.members.values() for t in crec.subscribed_topics(m.metadata(group.protocol))}

    def create_simple(self, group_id: str, now_ms: int) -> None:
        """A group for offsets committed outside group management (generation -1): Empty, no protocol. Like Kafka,
        it is not written: its offsets bring it back on replay."""
        self._groups.setdefault(group_id, _Group(group_id, state_timestamp_ms=now_ms))

    def remove_records(self, group_id: str) -> list[Record]:
        """The tombstone that drops a group when replayed (computed only)."""
        return [crec.group_metadata(group_id, None)] if group_id in self._groups else []

    def remove(self, group_id: str) -> list[Record]:
        """Drop an Empty group (DeleteGroups, a conversion to a consumer group, retention): its tombstone."""
        group = self._groups.pop(group_id, None)
        if group is None:
            return []
        group.state = DEAD
        return [crec.group_metadata(group_id, None)]

    def is_empty(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is None or (group.state == EMPTY and not group.pending)

    # ---- JoinGroup -----------------------------------------------------------------------------------------------

    def join(self, call: int, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
             protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int, *,
             client_id: str, client_host: str, require_known_member_id: bool, api_version: int,
             now_ms: int) -> CoordinatorResult[Replies]:
        out = outcome()
        try:
            if not group_id or len(group_id) > GROUP_ID_LENGTH_MAX:
                raise _Fail(ErrorCode.INVALID_GROUP_ID)
            if not (self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms):
                raise _Fail(ErrorCode.INVALID_SESSION_TIMEOUT)
            if rebalance_timeout_ms < 0:  # v0 has none: the session timeout serves
                rebalance_timeout_ms = session_timeout_ms
            group = self._groups.get(group_id)
            if group is None:
                if member_id:
                    raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID)
                group = _Group(group_id, state_timestamp_ms=now_ms)
            known = member_id if member_id in group.members else None
            if not group.supports(protocol_type, protocols, known):
                raise _Fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            self._groups[group_id] = group
            args = (instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocols)
            if not member_id:
                self._join_new(out, call, group, args, protocol_type, require_known_member_id, api_version, now_ms)
            else:
                self._join_known(out, call, group, member_id, args, protocol_type, now_ms)
        except _Fail as e:
            out.response[call] = JoinResult(error_code=e.error_code, member_id=member_id)
        return out

    def _full(self, group: _Group) -> bool:
        return len(group.members) + len(group.pending) >= self.config.max_size

    def _join_new(self, out, call, group, args, protocol_type, require_known_member_id, api_version, now_ms):
        instance_id, client_id = args[0], args[1]
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None and instance_id in group.static:
            self._replace_static(out, call, group, group.static[instance_id], new_id, args, api_version, now_ms)
            return
        if self._full(group):
            raise _Fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if instance_id is None and require_known_member_id:  # KIP-394: come back with this id
            group.pending[new_id] = now_ms + args[4]
            out.response[call] = JoinResult(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
            return
        self._add_member(out, call, group, new_id, args, protocol_type, now_ms)

    def _join_known(self, out, call, group, member_id, args, protocol_type, now_ms):
        instance_id = args[0]
        if member_id in group.pending and instance_id is None:
            if len(group.members) >= self.config.max_size:
                raise _Fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
            del group.pending[member_id]
            self._add_member(out, call, group, member_id, args, protocol_type, now_ms)
            return
        member = self._member(group, member_id, instance_id, now_ms)
        protocols = args[5]
        if group.state == PREPARING_REBALANCE:
            self._update_member(out, member, args, call, now_ms)
            self._maybe_complete_join(out, group, now_ms)
        elif group.state == COMPLETING_REBALANCE:
            if protocols == member.protocols:  # the join response was lost: the same answer again
                out.response[call] = self._join_answer(group, member)
            else:
                self._update_member(out, member, args, call, now_ms)
                self._prepare_rebalance(out, group, now_ms)
        elif group.state == STABLE:
            if member.member_id == group.leader or protocols != member.protocols:
                self._update_member(out, member, args, call, now_ms)
                self._prepare_rebalance(out, group, now_ms)
            else:
                member.deadline_ms = now_ms + member.session_timeout_ms
                out.response[call] = self._join_answer(group, member)
        else:
            raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID)

    def _add_member(self, out, call, group, member_id, args, protocol_type, now_ms):
        instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocols = args
        member = _Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                         list(protocols), join_call=call, deadline_ms=now_ms + session_timeout_ms)
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member_id] = member
        if instance_id is not None:
            group.static[instance_id] = member_id
        if group.leader is None:
            group.leader = member_id
        if group.state == PREPARING_REBALANCE:
            if group.initial_delay_cap_ms is not None:  # a join during the initial delay extends it
                group.join_deadline_ms = min(now_ms + self.config.initial_rebalance_delay_ms,
                                             group.initial_delay_cap_ms)
            self._maybe_complete_join(out, group, now_ms)
        else:
            self._prepare_rebalance(out, group, now_ms)

    def _update_member(self, out, member, args, call, now_ms):
        _, member.client_id, member.client_host, member.rebalance_timeout_ms, member.session_timeout_ms, protocols = args
        member.protocols = list(protocols)
        if member.join_call is not None and member.join_call != call:  # a retry replaces the older call
            out.response[member.join_call] = JoinResult(error_code=ErrorCode.REBALANCE_IN_PROGRESS,
                                                       member_id=member.member_id)
        member.join_call = call
        member.deadline_ms = now_ms + member.session_timeout_ms

    def _replace_static(self, out, call, group, old_id, new_id, args, api_version, now_ms):
        """A static member restarted (new member id, same instance id): it takes over the old member's place."""
        old = group.members.pop(old_id)
        for waiting, cls in ((old.join_call, JoinResult), (old.sync_call, SyncResult)):
            if waiting is not None:
                out.response[waiting] = cls(error_code=ErrorCode.FENCED_INSTANCE_ID)
        _, client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocols = args
        member = _Member(new_id, old.instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                         list(protocols), assignment=old.assignment, deadline_ms=now_ms + session_timeout_ms)
        group.members[new_id] = member
        group.static[old.instance_id] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        if group.leader == old_id:
            group.leader = new_id
        if group.state == STABLE and group.protocol in member.names() and group.select_protocol() == group.protocol:
            # no rebalance: the old assignment stands. A returning leader is told to skip assigning (KIP-814,
            # JoinGroup v9); an older one computes an assignment that its SyncGroup in a Stable group ignores.
            out.records.append(group.record())
            answer = self._join_answer(group, member)
            if new_id == group.leader:
                if api_version >= 9:
                    answer.skip_assignment = True
                else:  # no SkipAssignment before v9: name the old leader id, so that it acts as a follower
                    answer.leader, answer.members = old_id, []
            out.response[call] = answer
            return
        member.join_call = call
        if group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(out, group, now_ms)
        else:
            self._prepare_rebalance(out, group, now_ms)

    def _join_answer(self, group: _Group, member: _Member) -> JoinResult:
        leading = member.member_id == group.leader
        members = [(m.member_id, m.instance_id, m.metadata(group.protocol)) for m in group.members.values()]
        return JoinResult(generation_id=group.generation, protocol_type=group.protocol_type,
                          protocol_name=group.protocol, leader=group.leader or "", member_id=member.member_id,
                          members=members if leading else [])

    # ---- the rebalance -------------------------------------------------------------------------------------------

    def _prepare_rebalance(self, out: CoordinatorResult[Replies], group: _Group, now_ms: int) -> None:
        if group.state == COMPLETING_REBALANCE:  # the assignment being computed is void
            for m in group.members.values():
                m.assignment = b""
                if m.sync_call is not None:
                    out.response[m.sync_call] = SyncResult(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
                    m.sync_call = None
                    m.deadline_ms = now_ms + m.session_timeout_ms
        group.sync_deadline_ms = None
        group.pending_sync.clear()
        if group.state == EMPTY and self.config.initial_rebalance_delay_ms > 0:
            group.initial_delay_cap_ms = now_ms + max(group.max_rebalance_timeout_ms(),
                                                      self.config.initial_rebalance_delay_ms)
            group.join_deadline_ms = min(now_ms + self.config.initial_rebalance_delay_ms, group.initial_delay_cap_ms)
        else:
            group.initial_delay_cap_ms = None
            group.join_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
        group.state = PREPARING_REBALANCE
        group.state_timestamp_ms = now_ms
        self.rebalance_count += 1
        self._maybe_complete_join(out, group, now_ms)

    def _maybe_complete_join(self, out: CoordinatorResult[Replies], group: _Group, now_ms: int) -> None:
        if group.state != PREPARING_REBALANCE or group.initial_delay_cap_ms is not None:
            return  # the initial delay always runs its course: more members are expected
        if not group.pending and all(m.join_call is not None for m in group.members.values()):
            self._complete_join(out, group, now_ms)

    def _complete_join(self, out: CoordinatorResult[Replies], group: _Group, now_ms: int) -> None:
        for m in [m for m in group.members.values() if m.join_call is None and m.instance_id is None]:
            self._drop_member(out, group, m)  # dynamic members that did not rejoin in time; static ones stay
        if group.members and all(m.join_call is None for m in group.members.values()):
            group.join_deadline_ms = now_ms + group.max_rebalance_timeout_ms()  # no one rejoined: wait on
            return
        group.pending.clear()
        group.join_deadline_ms = group.initial_delay_cap_ms = None
        group.generation += 1
        group.state_timestamp_ms = now_ms
        if not group.members:
            group.state, group.protocol, group.leader = EMPTY, None, None
            out.records.append(group.record())
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members or group.members[group.leader].join_call is None:
            group.leader = next(m.member_id for m in group.members.values() if m.join_call is not None)
        for m in group.members.values():
            m.assignment = b""  # the new generation's assignment comes with the leader's SyncGroup
        group.state = COMPLETING_REBALANCE
        group.sync_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
        group.pending_sync = set(group.members)
        out.records.append(group.record())
        for m in group.members.values():
            if m.join_call is not None:
                out.response[m.join_call] = self._join_answer(group, m)
            m.join_call = None
            m.deadline_ms = now_ms + m.session_timeout_ms

    def _drop_member(self, out: CoordinatorResult[Replies], group: _Group, member: _Member) -> None:
        group.members.pop(member.member_id, None)
        group.pending_sync.discard(member.member_id)
        if member.instance_id is not None and group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]
        if member.join_call is not None:
            out.response[member.join_call] = JoinResult(error_code=ErrorCode.UNKNOWN_MEMBER_ID,
                                                       member_id=member.member_id)
        if member.sync_call is not None:
            out.response[member.sync_call] = SyncResult(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _members_left(self, out: CoordinatorResult[Replies], group: _Group, now_ms: int) -> None:
        """After members were removed: a rebalance, or the end of the current join phase."""
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(out, group, now_ms)
        elif group.state == PREPARING_REBALANCE:
            if not group.members and not group.pending:
                self._complete_join(out, group, now_ms)
            else:
                self._maybe_complete_join(out, group, now_ms)

    def _member(self, group: _Group, member_id: str, instance_id: str | None, now_ms: int | None = None) -> _Member:
        """Kafka's validateMember: a static member's instance must map to this member id. Given `now_ms`, a member
        whose session has run out is unknown, though the timer has yet to remove it (see `_expired`)."""
        if instance_id is not None:
            mapped = group.static.get(instance_id)
            if mapped is None:
                raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID)
            if mapped != member_id:
                raise _Fail(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None or (now_ms is not None and self._expired(group, member, now_ms)):
            raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID)
        return member

    @staticmethod
    def _expired(group: _Group, member: _Member, now_ms: int) -> bool:
        """The member's session ran out (no JoinGroup or SyncGroup of its waiting): `tick` removes it. Until then
        (the timer's turn has not come, or its removal could not be written and the shard was rebuilt with the
        deadline carried) no request revives it: in Kafka the expired member is gone, so a late request of its
        own (an OffsetCommit queued through a network cut, say) is answered UNKNOWN_MEMBER_ID, not taken as a
        heartbeat that gives it a new session."""
        return member.deadline_ms <= now_ms and member.join_call is None and member.sync_call is None \
            and group.state != EMPTY

    # ---- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------------------------------

    def _generation_member(self, group_id: str, generation_id: int, member_id: str,
                           instance_id: str | None, now_ms: int) -> tuple[_Group, _Member]:
        """The group and member a SyncGroup or Heartbeat names, in the generation it names."""
        group = self._groups.get(group_id)
        if group is None or group.state in (EMPTY, DEAD):
            raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID)
        member = self._member(group, member_id, instance_id, now_ms)
        if generation_id != group.generation:
            raise _Fail(ErrorCode.ILLEGAL_GENERATION)
        return group, member

    def sync(self, call: int, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]], *,
             now_ms: int) -> CoordinatorResult[Replies]:
        out = outcome()
        try:
            group, member = self._generation_member(group_id, generation_id, member_id, instance_id, now_ms)
            if (protocol_type is not None and protocol_type != group.protocol_type) or \
                    (protocol_name is not None and protocol_name != group.protocol):
                raise _Fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if group.state == PREPARING_REBALANCE:
                raise _Fail(ErrorCode.REBALANCE_IN_PROGRESS)
            member.deadline_ms = now_ms + member.session_timeout_ms
            group.pending_sync.discard(member_id)
            if not group.pending_sync:
                group.sync_deadline_ms = None
            if group.state == STABLE:
                out.response[call] = self._sync_answer(group, member)
                return out
            if member.sync_call is not None:
                out.response[member.sync_call] = SyncResult(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
            member.sync_call = call
            if member_id == group.leader:
                given = dict(assignments)
                for m in group.members.values():
                    m.assignment = bytes(given.get(m.member_id, b""))
                group.state, group.state_timestamp_ms = STABLE, now_ms  # the sync deadline stays for the rest
                out.records.append(group.record())
                for m in group.members.values():
                    if m.sync_call is not None:
                        out.response[m.sync_call] = self._sync_answer(group, m)
                        m.sync_call = None
                        m.deadline_ms = now_ms + m.session_timeout_ms
        except _Fail as e:
            out.response[call] = SyncResult(error_code=e.error_code)
        return out

    @staticmethod
    def _sync_answer(group: _Group, member: _Member) -> SyncResult:
        return SyncResult(protocol_type=group.protocol_type, protocol_name=group.protocol,
                          assignment=member.assignment)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, *,
                  now_ms: int) -> CoordinatorResult[int]:
        """The error code to answer; no records (the session deadline it moves is in memory only, in Kafka too)."""
        try:
            group, member = self._generation_member(group_id, generation_id, member_id, instance_id, now_ms)
            member.deadline_ms = now_ms + member.session_timeout_ms
            error = ErrorCode.REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else ErrorCode.NONE
        except _Fail as e:
            error = e.error_code
        return CoordinatorResult([], error)

    def leave(self, call: int, group_id: str, members: list[tuple[str, str | None]], *,
              now_ms: int) -> CoordinatorResult[Replies]:
        """The records of the rebalance it starts, and the replies: this call's LeaveResult (the group error, and
        (member id, instance id, error) per member), and the calls that rebalance resolves."""
        out = outcome()
        group = self._groups.get(group_id)
        if group is None:
            out.response[call] = LeaveResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                             [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in members])
            return out
        results, removed = [], False
        for member_id, instance_id in members:
            target = member_id
            if instance_id is not None:
                mapped = group.static.get(instance_id)
                if mapped is None:
                    results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                if member_id and mapped != member_id:
                    results.append((member_id, instance_id, ErrorCode.FENCED_INSTANCE_ID))
                    continue
                target = mapped
            if target in group.pending:
                del group.pending[target]
            elif target in group.members:
                self._drop_member(out, group, group.members[target])
                removed = True
            else:
                results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            results.append((member_id, instance_id, ErrorCode.NONE))
        if removed or group.state == PREPARING_REBALANCE:
            self._members_left(out, group, now_ms)
        out.response[call] = LeaveResult(ErrorCode.NONE, results)
        return out

    # ---- offsets ---------------------------------------------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                               now_ms: int, transactional: bool = False) -> int:
        """Kafka's ClassicGroup.validateOffsetCommit; a commit from a member also counts as its heartbeat. A
        transactional commit (TxnOffsetCommit) without member id and generation (its versions before 3) is
        accepted whatever the group's state, and one from a member is not held back by a rebalance."""
        group = self._groups.get(group_id)
        if group is None or group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state == EMPTY:
            return ErrorCode.NONE  # the admin client, or a consumer that assigns partitions itself
        if transactional and generation_id < 0 and not member_id and instance_id is None:
            return ErrorCode.NONE
        try:
            member = self._member(group, member_id, instance_id, now_ms)
        except _Fail as e:
            return e.error_code
        if generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state == COMPLETING_REBALANCE and not transactional:
            return ErrorCode.REBALANCE_IN_PROGRESS
        member.deadline_ms = now_ms + member.session_timeout_ms
        return ErrorCode.NONE

    # ---- timers ----------------------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> CoordinatorResult[Replies]:
        out = outcome()
        for group in list(self._groups.values()):
            for member_id in [m for m, deadline in group.pending.items() if deadline <= now_ms]:
                del group.pending[member_id]
            if group.state == PREPARING_REBALANCE and group.join_deadline_ms is not None \
                    and group.join_deadline_ms <= now_ms:
                self._complete_join(out, group, now_ms)
            elif group.state in (COMPLETING_REBALANCE, STABLE) and group.sync_deadline_ms is not None \
                    and group.sync_deadline_ms <= now_ms:  # members that never synced this generation go
                for member_id in list(group.pending_sync):
                    if member_id in group.members:
                        self._drop_member(out, group, group.members[member_id])
                group.pending_sync.clear()
                group.sync_deadline_ms = None
                self._members_left(out, group, now_ms)
            expired = [m for m in group.members.values() if self._expired(group, m, now_ms)]
            for m in expired:
                self._drop_member(out, group, m)
            if expired:
                self._members_left(out, group, now_ms)
            elif group.state == PREPARING_REBALANCE:
                self._maybe_complete_join(out, group, now_ms)
        return out

    def next_deadline_ms(self) -> int | None:
        deadlines = []
        for g in self._groups.values():
            deadlines += g.pending.values()
            if g.state == PREPARING_REBALANCE and g.join_deadline_ms is not None:
                deadlines.append(g.join_deadline_ms)
            if g.state in (COMPLETING_REBALANCE, STABLE) and g.sync_deadline_ms is not None:
                deadlines.append(g.sync_deadline_ms)
            if g.state != EMPTY:
                deadlines += [m.deadline_ms for m in g.members.values() if m.join_call is None and m.sync_call is None]
        return min(deadlines, default=None)

    def session_deadlines(self) -> dict[tuple[str, str], int]:
        """Every member's session deadline, keyed (group id, member id) (see Groups.session_deadlines)."""
        return {(g.group_id, m.member_id): m.deadline_ms for g in self._groups.values() for m in g.members.values()}

    def carry_sessions(self, deadlines: Mapping[tuple[str, str], int]) -> None:
        """Members replayed just now keep the session deadlines they had before (see Groups.carry_sessions). A
        member the log has and the dropped shard had not was removed there (its session ran out, it left) by the
        change whose write failed: its session is over, and the timers remove it again."""
        for g in self._groups.values():
            for m in g.members.values():
                m.deadline_ms = deadlines.get((g.group_id, m.member_id), SESSION_OVER_MS)

    # ---- admin and loading -----------------------------------------------------------------------------------------

    def describe(self, group_id: str) -> DescribedClassicGroup:
        group = self._groups.get(group_id)
        if group is None:
            return DescribedClassicGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        stable = group.state == STABLE
        return DescribedClassicGroup(
            group_id, state=group.state, protocol_type=group.protocol_type or "",
            protocol=(group.protocol or "") if stable else "",
            members=[DescribedClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                                            m.metadata(group.protocol) if stable else b"",
                                            m.assignment if stable else b"")
                     for m in group.members.values()])

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, protocol type) of every classic group."""
        return [(g.group_id, g.state, g.protocol_type or "") for g in sorted(self._groups.values(),
                                                                             key=lambda g: g.group_id)]

    def replay(self, key_bytes, value_bytes, now_ms: int) -> None:
        """Load a GroupMetadata record: the group as it was last written, members' sessions starting now."""
        group_id, value = crec.decode_group_metadata(key_bytes, value_bytes)
        if value is None:
            self._groups.pop(group_id, None)
            return
        group = _Group(group_id, generation=value.generation, protocol_type=value.protocol_type or None,
                       protocol=value.protocol, leader=value.leader, state_timestamp_ms=value.state_timestamp_ms)
        for m in value.members:
            group.members[m.member_id] = _Member(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms,
                [(value.protocol or "", m.subscription)], assignment=m.assignment,
                deadline_ms=now_ms + m.session_timeout_ms)
            if m.instance_id is not None:
                group.static[m.instance_id] = m.member_id
        if not group.members:
            group.state = EMPTY
        elif any(m.assignment for m in value.members) or group.protocol is None:
            group.state = STABLE
        else:  # written at the end of a join phase: the assignment never came; rebalance
            group.state = PREPARING_REBALANCE
            group.join_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
        self._groups[group_id] = group

    def live_records(self) -> list[Record]:
        """The current GroupMetadata record of every group ever written (simple groups never are: their offsets
        bring them back): replaying them rebuilds the groups (compaction)."""
        return [g.record() for g in self._groups.values() if g.generation > 0]

    def count_by_state(self) -> dict[str, int]:
        counts = {EMPTY: 0, PREPARING_REBALANCE: 0, COMPLETING_REBALANCE: 0, STABLE: 0}
        for g in self._groups.values():
            counts[g.state] = counts.get(g.state, 0) + 1
        return counts

    def member_count(self) -> int:
        return sum(len(g.members) for g in self._groups.values())
