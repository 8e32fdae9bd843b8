"""Every group of one `__consumer_offsets` partition: share groups (core.py), classic groups (classic.py), KIP-848
consumer groups (consumer_group.py), streams groups (streams_group.py, KIP-1071) and the committed offsets
(offsets.py), in one namespace. Pure, like its parts.

A group id names one group of one type. This module routes each request to its type's state machine, answers
requests aimed at a group of another type as Kafka does, converts an empty group between the classic and consumer
protocols (KIP-848's upgrade and downgrade of empty groups), and checks offset commits against the group's
members. The shell appends the records a call returns before it answers.

The offset commands (OffsetCommit, TxnOffsetCommit, OffsetDelete), DeleteGroups and the share groups' initialization
state (the share coordinators' answers, AlterShareGroupOffsets) change state only through the records they return: each
computes them from the current state without changing it, then applies them at once by the path replay takes (`apply`),
as Kafka's coordinator replays a CoordinatorResult's records into its timeline data structures when it writes them.
Until the shell settles them (their append done), `revert(mark)` takes back every change applied since `changes_mark()`:
offsets partition by partition (OffsetStore), groups by a copy of each group's state taken before its first record, as
Kafka reverts its snapshot registry when an append fails. What is not written in Kafka either (a simple group, which
offsets committed outside group management create) is made in memory beside the records and taken back with them. The
other commands (the group protocols' heartbeats, joins and syncs, the timers, topic changes) still change state during
the call: after them `revert` refuses and the shell rebuilds the shard from the log when an append fails.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.coordinator_result import CoordinatorResult
from actors.group_coordinator import classic_records as crec
from actors.group_coordinator import records as rec
from actors.group_coordinator import streams_records as srec
from actors.group_coordinator.classic import (STABLE, ClassicGroups, DescribedClassicGroup, JoinResult, LeaveResult,
                                              Replies, SyncResult, merge, outcome)
from actors.group_coordinator.consumer_group import ConsumerGroups, ConsumerHeartbeatResult, DescribedConsumerGroup
from actors.group_coordinator.core import GroupCoordinatorShard, HeartbeatResult, TopicsView
from actors.group_coordinator.offsets import OffsetStore
from actors.group_coordinator.records import Record
from actors.group_coordinator.streams_group import DescribedStreamsGroup, StreamsGroups, StreamsHeartbeatResult
from protocol.errors import ErrorCode

SHARE, CLASSIC, CONSUMER, STREAMS = "share", "classic", "consumer", "streams"
STREAMS_PROTOCOL_TYPE = "streams"
SHARE_PROTOCOL_TYPE = "share"
CONSUMER_PROTOCOL_TYPE = "consumer"
UNDO_GROUPS_MAX = 10_000  # group copies kept for `revert` while appends overlap; beyond, the shell reloads


def _group_of(record_type: int, key_bytes) -> str | None:
    """The group id of a group record (classic, consumer, share or streams metadata); None for another type."""
    if record_type in (crec.CLASSIC_GROUP_METADATA, rec.CONSUMER_GROUP_METADATA):
        return rec.decode(key_bytes, None).key
    if record_type in (rec.SHARE_GROUP_METADATA, rec.SHARE_GROUP_STATE_PARTITION_METADATA):
        return rec.decode(key_bytes, None).key.group_id
    if record_type == srec.RECORD_TYPE_STREAMS_GROUP_METADATA:
        return srec.decode_streams_group_metadata(key_bytes, None).group_id
    return None


@dataclass
class GroupMetrics:
    count_by_type_state: dict[tuple[str, str], int]
    rebalance_count_by_type: dict[str, int]
    member_count_by_type: dict[str, int] = field(default_factory=dict)


class Groups:
    def __init__(self, broker_config: Mapping[str, Any] | None = None):
        config = dict(broker_config or {})
        self.share = GroupCoordinatorShard(config)
        self.classic = ClassicGroups(config)
        self.consumer = ConsumerGroups(config)
        self.streams = StreamsGroups(config)
        self.offsets = OffsetStore(config)
        self.next_retention_check_ms = 0
        # each group's state before the records applied since the last settle changed it (see `revert`)
        self._undo: list[tuple[str, tuple]] = []
        self._undo_dropped = 0  # changes forgotten unsettled: `revert` before them refuses

    # ---- the namespace -------------------------------------------------------------------------------------------

    def group_type(self, group_id: str) -> str | None:
        if self.classic.has_group(group_id):
            return CLASSIC
        if self.consumer.has_group(group_id):
            return CONSUMER
        if self.streams.has_group(group_id):
            return STREAMS
        return SHARE if self.share.group_type(group_id) == SHARE else None

    def _classic_created(self, group_id: str, existed: bool) -> None:
        if not existed and self.classic.has_group(group_id):
            self.share.register_foreign_group(group_id, CLASSIC)

    def _remove_classic(self, group_id: str) -> list[Record]:
        self.share.unregister_foreign_group(group_id)
        return self.classic.remove(group_id)

    def _remove_consumer(self, group_id: str) -> list[Record]:
        self.share.unregister_foreign_group(group_id)
        return self.consumer.delete_group(group_id)[2]

    # ---- loading ---------------------------------------------------------------------------------------------------

    def replay(self, key_bytes, value_bytes, now_ms: int, producer_id: int = -1) -> None:
        """Apply one record of the partition; `producer_id` is its transactional batch's (-1: not transactional),
        which makes an offset commit pending until the producer's marker (`complete_transaction`)."""
        self.untracked()
        record_type = crec.record_type(key_bytes)
        if record_type in crec.OFFSET_COMMIT_TYPES:
            self.offsets.replay(key_bytes, value_bytes, producer_id)
            return
        self._replay_group_record(record_type, key_bytes, value_bytes, now_ms)

    def _replay_group_record(self, record_type: int, key_bytes, value_bytes, now_ms: int) -> None:
        if record_type == crec.CLASSIC_GROUP_METADATA:
            self.classic.replay(key_bytes, value_bytes, now_ms)
        self.consumer.replay(record_type, key_bytes, value_bytes)
        streams_group = self.streams.replay(record_type, key_bytes, value_bytes)
        if streams_group is not None:
            if self.streams.has_group(streams_group):
                self.share.register_foreign_group(streams_group, STREAMS)
            else:
                self.share.unregister_foreign_group(streams_group)
        self.share.replay(key_bytes, value_bytes)  # share records; other types' ids reserved in its namespace

    def finish_replay(self, now_ms: int) -> None:
        """Groups known only by their offsets (committed outside group management) come back as simple groups."""
        for group_id in self.offsets.groups():
            if self.group_type(group_id) is None:
                self.classic.create_simple(group_id, now_ms)
                self._classic_created(group_id, existed=False)

    # ---- applying a command's records, and taking them back ------------------------------------------------------

    def apply(self, records: list[Record], now_ms: int, producer_id: int = -1) -> None:
        """Replay a command's records now, before their append (the path `replay` takes; `producer_id`: of the
        transactional batch they go in), remembering what they change so that `revert` can take them back."""
        for key_bytes, value_bytes in records:
            record_type = crec.record_type(key_bytes)
            if record_type in crec.OFFSET_COMMIT_TYPES:
                self.offsets.apply([(key_bytes, value_bytes)], producer_id)
                continue
            group_id = _group_of(record_type, key_bytes)
            if group_id is None:
                self.untracked()  # (no command writes such a record: not revertable)
            else:
                self._capture(group_id)
            self._replay_group_record(record_type, key_bytes, value_bytes, now_ms)

    def _create_simple(self, group_id: str, now_ms: int) -> None:
        """A simple group for offsets committed outside group management: in memory only, as in Kafka (its offsets
        bring it back on replay, `finish_replay`), and taken back with the records of the command that made it."""
        if self.group_type(group_id) is None:
            self._capture(group_id)
            self.classic.create_simple(group_id, now_ms)
            self._classic_created(group_id, existed=False)

    def _capture(self, group_id: str) -> None:
        if len(self._undo) >= UNDO_GROUPS_MAX:
            self.untracked()
        self._undo.append((group_id, (self.classic.snapshot(group_id), self.consumer.snapshot(group_id),
                                      self.streams.snapshot(group_id), self.share.snapshot(group_id))))

    def untracked(self) -> None:
        """Groups change otherwise than by `apply` (a heartbeat, a join, a timer): the changes applied before can
        no longer be taken back alone (`revert` refuses; the shell then rebuilds the shard from the log)."""
        if self._undo:
            self._undo_dropped += len(self._undo)
            self._undo.clear()

    def changes_mark(self) -> tuple[int, int]:
        """Where the next command's changes start (see `revert`)."""
        return self.offsets.changes_mark(), self._undo_dropped + len(self._undo)

    def revert(self, mark: tuple[int, int]) -> bool:
        """Take back every change applied since `mark` (the records whose append failed, and the simple groups they
        made), newest first: the state is as it was at `mark`. Only right when no other append was under way.
        False, changing nothing, when they are no longer all remembered (something changed state otherwise since):
        the shell then rebuilds the shard from the log."""
        offsets_mark, groups_mark = mark
        if groups_mark < self._undo_dropped or not self.offsets.can_revert(offsets_mark):
            return False
        self.offsets.revert(offsets_mark)
        while self._undo_dropped + len(self._undo) > groups_mark:
            group_id, (classic, consumer, streams, share) = self._undo.pop()
            self.classic.restore(group_id, classic)
            self.consumer.restore(group_id, consumer)
            self.streams.restore(group_id, streams)
            self.share.restore(group_id, share)
        return True

    def settle(self) -> None:
        """Every change applied so far is in the log (or was reverted): forget how to take them back."""
        self.offsets.settle()
        self._undo.clear()
        self._undo_dropped = 0

    # ---- classic protocol ------------------------------------------------------------------------------------------

    def _not_classic(self, group_id: str) -> int | None:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        kind = self.group_type(group_id)
        return None if kind in (None, CLASSIC) else ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    def _downgrade(self, group_id: str) -> list[Record]:
        """An empty consumer group that a classic member joins becomes a classic group (offsets stay)."""
        if self.group_type(group_id) == CONSUMER and self.consumer.is_empty(group_id):
            return self._remove_consumer(group_id)
        return []

    def join_group(self, call: int, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int, *,
                   client_id: str, client_host: str, require_known_member_id: bool, api_version: int,
                   now_ms: int) -> CoordinatorResult[Replies]:
        """Kafka's JoinGroup (classic.py). The classic commands change the group during the call, not through the
        records: the GroupMetadata record (the generation, its members with their metadata and assignments) is
        written after every generation and assignment, as Kafka writes it, but much of a rebalance is in memory
        only in Kafka too and has no record to replay: members' sessions (a heartbeat writes nothing), pending
        member ids (KIP-394), the calls a join or sync phase holds, and the phase itself (replay gives Stable,
        Empty, or PreparingRebalance for a generation whose assignment never came). A failed append reloads the
        shard (`untracked`)."""
        self.untracked()
        converted = self._downgrade(group_id)
        error = self._not_classic(group_id)
        if error:
            return outcome(replies={call: JoinResult(error_code=error, member_id=member_id)})
        existed = self.classic.has_group(group_id)
        out = outcome(records=converted)
        merge(out, self.classic.join(call, group_id, member_id, instance_id, protocol_type, protocols,
                                     session_timeout_ms, rebalance_timeout_ms, client_id=client_id,
                                     client_host=client_host, require_known_member_id=require_known_member_id,
                                     api_version=api_version, now_ms=now_ms))
        self._classic_created(group_id, existed)
        return out

    def sync_group(self, call: int, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]], *,
                   now_ms: int) -> CoordinatorResult[Replies]:
        """Kafka's SyncGroup: the leader's assignments are written in the GroupMetadata record (see `join_group`)."""
        self.untracked()
        error = self._not_classic(group_id)
        if error:  # a group of another type has no such member
            error = error if error == ErrorCode.INVALID_GROUP_ID else ErrorCode.UNKNOWN_MEMBER_ID
            return outcome(replies={call: SyncResult(error_code=error)})
        return self.classic.sync(call, group_id, generation_id, member_id, instance_id, protocol_type, protocol_name,
                                 assignments, now_ms=now_ms)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, *,
                  now_ms: int) -> CoordinatorResult[int]:
        """Kafka's classic Heartbeat: the error code to answer, and no records: it moves the member's session
        deadline, which is in memory only, in Kafka too."""
        self.untracked()
        error = self._not_classic(group_id)
        if error:  # a group of another type has no such member
            return CoordinatorResult([], error if error == ErrorCode.INVALID_GROUP_ID else ErrorCode.UNKNOWN_MEMBER_ID)
        return self.classic.heartbeat(group_id, generation_id, member_id, instance_id, now_ms=now_ms)

    def leave_group(self, call: int, group_id: str, members: list[tuple[str, str | None]], *,
                    now_ms: int) -> CoordinatorResult[Replies]:
        """Kafka's LeaveGroup: the records of the rebalance it starts, and the replies: this call's LeaveResult
        (the group error, and (member id, instance id, error) each), and the calls the rebalance resolves. See
        `join_group` for what is written."""
        self.untracked()
        error = self._not_classic(group_id)
        if error:  # a group of another type has no such member
            error = error if error == ErrorCode.INVALID_GROUP_ID else ErrorCode.UNKNOWN_MEMBER_ID
            return outcome(replies={call: LeaveResult(error, [(m, i, error) for m, i in members])})
        return self.classic.leave(call, group_id, members, now_ms=now_ms)

    def describe_classic(self, group_id: str) -> DescribedClassicGroup:
        if not group_id:
            return DescribedClassicGroup(group_id, ErrorCode.INVALID_GROUP_ID, "Group id can't be empty.")
        kind = self.group_type(group_id)
        if kind not in (None, CLASSIC):
            return DescribedClassicGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                         f"Group {group_id} is not a classic group.")
        return self.classic.describe(group_id)

    # ---- share groups (KIP-932) -------------------------------------------------------------------------------------

    def share_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, topics: TopicsView,
                              now_ms: int, **request) -> CoordinatorResult[HeartbeatResult]:
        """Kafka's ShareGroupHeartbeat (`GroupCoordinatorShard.share_group_heartbeat`): the records and the
        heartbeat's answer. Changes the group during the call, not through the records: Kray keeps a share group's
        members and assignments in memory only and writes its epoch, metadata hash and initialization state
        (core.py), where Kafka also writes member and assignment records. A failed append reloads the shard."""
        self.untracked()
        result, records = self.share.share_group_heartbeat(group_id, member_id, member_epoch, topics=topics,
                                                           now_ms=now_ms, **request)
        return CoordinatorResult(records, result)

    def share_initialized(self, group_id: str, done: Iterable, failed: Iterable, now_ms: int = 0
                          ) -> CoordinatorResult[None]:
        """The share coordinators initialized the share-partitions `done` and failed `failed` (the shell asked
        them after a heartbeat): the records of the group's initialization state, applied (`apply`); until the
        shell settles them, `revert` takes them back."""
        records = self.share.initialized_records(group_id, done)
        self.apply(records, now_ms)
        failed_records = self.share.initialize_failed_records(group_id, failed)
        self.apply(failed_records, now_ms)
        return CoordinatorResult(records + failed_records)

    def share_offsets_altered(self, group_id: str, partitions: Mapping, now_ms: int = 0
                              ) -> CoordinatorResult[tuple[int, str | None]]:
        """AlterShareGroupOffsets set these share-partitions' start offsets (`GroupCoordinatorShard.
        share_offsets_altered`): the records, applied (`apply`), and as the response (error, message)."""
        error, message, records = self.share.offsets_altered_records(group_id, partitions)
        self.apply(records, now_ms)
        return CoordinatorResult(records, (error, message))

    # ---- consumer protocol (KIP-848) ------------------------------------------------------------------------------

    def consumer_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, topics: TopicsView,
                                 now_ms: int, **request) -> CoordinatorResult[ConsumerHeartbeatResult]:
        """Kafka's ConsumerGroupHeartbeat: the records and the heartbeat's answer. Changes the group during the call,
        not through the records: Kray keeps a consumer group's members, target and current assignments in memory
        only and writes only its epoch and metadata hash (consumer_group.py), where Kafka writes member, target
        assignment and current assignment records; sessions are in memory in Kafka too. A failed append reloads the
        shard (`untracked`)."""
        self.untracked()
        kind = self.group_type(group_id)
        records: list[Record] = []
        if kind == CLASSIC and self.classic.is_empty(group_id) and member_epoch == 0:
            records = self._remove_classic(group_id)  # upgrade an empty classic group; its offsets stay
        elif kind in (CLASSIC, SHARE, STREAMS):
            return CoordinatorResult([], ConsumerHeartbeatResult(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"Group {group_id} is not a consumer group"
                              + (" (a classic group with members: stop them first)" if kind == CLASSIC else ".")))
        existed = self.consumer.has_group(group_id)
        result, heartbeat_records = self.consumer.heartbeat(group_id, member_id, member_epoch, topics=topics,
                                                            now_ms=now_ms, **request)
        if not existed and self.consumer.has_group(group_id):
            self.share.register_foreign_group(group_id, CONSUMER)
        return CoordinatorResult(records + heartbeat_records, result)

    def describe_consumer(self, group_ids: Iterable[str], topics: TopicsView) -> list[DescribedConsumerGroup]:
        out = []
        for group_id in group_ids:
            kind = self.group_type(group_id)
            if kind in (CLASSIC, SHARE, STREAMS):
                out.append(DescribedConsumerGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                                  f"Group {group_id} is not a consumer group."))
            else:
                out += self.consumer.describe([group_id], topics)
        return out

    def on_topics_changed(self, topics: TopicsView, now_ms: int) -> list[Record]:
        self.untracked()
        return self.consumer.on_topics_changed(topics, now_ms) + self.streams.on_topics_changed(topics, now_ms)

    # ---- streams protocol (KIP-1071) ------------------------------------------------------------------------------

    def streams_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, topics: TopicsView,
                                now_ms: int, **request) -> CoordinatorResult[StreamsHeartbeatResult]:
        """Kafka's StreamsGroupHeartbeat (KIP-1071): the records and the heartbeat's answer. Changes the group during
        the call, not through the records: as for consumer groups, Kray writes only the group's epoch and metadata
        hash (streams_group.py; Kafka also writes members, topology and assignments). A failed append reloads the
        shard (`untracked`)."""
        self.untracked()
        kind = self.group_type(group_id)
        records: list[Record] = []
        if kind == CLASSIC and self.classic.is_empty(group_id) and member_epoch == 0:
            records = self._remove_classic(group_id)  # an empty classic (or simple) group becomes a streams group
        elif kind in (CLASSIC, SHARE, CONSUMER):
            return CoordinatorResult([], StreamsHeartbeatResult(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"Group {group_id} is not a streams group."))
        existed = self.streams.has_group(group_id)
        result, heartbeat_records = self.streams.heartbeat(group_id, member_id, member_epoch, topics=topics,
                                                           now_ms=now_ms, **request)
        if not existed and self.streams.has_group(group_id):
            self.share.register_foreign_group(group_id, STREAMS)
        return CoordinatorResult(records + heartbeat_records, result)

    def describe_streams(self, group_ids: Iterable[str]) -> list[DescribedStreamsGroup]:
        out = []
        for group_id in group_ids:
            kind = self.group_type(group_id)
            if kind in (CLASSIC, SHARE, CONSUMER):
                out.append(DescribedStreamsGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                                 f"Group {group_id} is not a streams group."))
            else:
                out += self.streams.describe([group_id])
        return out

    # ---- offsets ---------------------------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_or_epoch: int,
                       partitions: list[tuple[str, int, int, int, str | None]], *, api_version: int,
                       now_ms: int) -> CoordinatorResult[list[int]]:
        """Kafka's OffsetCommit: the records to append, and as the response an error code per partition (in
        order). The offsets change only through the records, applied at once (`apply`); until the shell settles
        them, `revert` takes them back, and the simple group a commit created."""
        errors, records, simple = self._offset_commit(group_id, member_id, instance_id, generation_or_epoch,
                                                      partitions, api_version=api_version, now_ms=now_ms)
        self.apply(records, now_ms)
        if simple:
            self._create_simple(group_id, now_ms)
        return CoordinatorResult(records, errors)

    def _offset_commit(self, group_id: str, member_id: str, instance_id: str | None, generation_or_epoch: int,
                       partitions: list[tuple[str, int, int, int, str | None]], *, api_version: int,
                       now_ms: int) -> tuple[list[int], list[Record], bool]:
        """OffsetCommit's errors and records, computed only, and whether the group is to be made a simple group."""
        if not group_id:
            return [ErrorCode.INVALID_GROUP_ID] * len(partitions), [], False
        kind = self.group_type(group_id)
        if kind is None:
            if generation_or_epoch >= 0:  # a member of a group that is gone
                error = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
                return [error] * len(partitions), [], False
            # a "simple" group: offsets without group management
            return *self.offsets.commit(group_id, partitions, now_ms), True
        if kind == CLASSIC:
            error = self.classic.validate_offset_commit(group_id, member_id, instance_id, generation_or_epoch, now_ms)
        elif kind == CONSUMER:
            error, _ = self.consumer.validate_offset_commit(group_id, member_id, generation_or_epoch, api_version)
            if not error:
                return *self._commit_unless_stale(group_id, member_id, generation_or_epoch, partitions,
                                                  ErrorCode.STALE_MEMBER_EPOCH,
                                                  lambda ps: self.offsets.commit(group_id, ps, now_ms)), False
        elif kind == STREAMS:
            error, _ = self.streams.validate_offset_commit(group_id, member_id, generation_or_epoch)
            if not error:
                return *self._commit_unless_stale(group_id, member_id, generation_or_epoch, partitions,
                                                  ErrorCode.STALE_MEMBER_EPOCH,
                                                  lambda ps: self.offsets.commit(group_id, ps, now_ms),
                                                  self.streams), False
        else:
            error = ErrorCode.GROUP_ID_NOT_FOUND
        if error:
            return [error] * len(partitions), [], False
        return *self.offsets.commit(group_id, partitions, now_ms), False

    def _commit_unless_stale(self, group_id: str, member_id: str, member_epoch: int, partitions: list,
                             stale_error: int, commit, groups=None) -> tuple[list[int], list[Record]]:
        """Commit the partitions a consumer-group (or streams-group) member may commit at `member_epoch`
        (KIP-1251); the others answer `stale_error`."""
        stale = (groups or self.consumer).stale_commit_partitions(group_id, member_id, member_epoch,
                                                                  [(t, p) for t, p, *_ in partitions])
        errors, records = commit([x for x, refused in zip(partitions, stale) if not refused])
        answers = iter(errors)
        return [stale_error if refused else next(answers) for refused in stale], records

    def commit_transactional_offsets(self, group_id: str, producer_id: int, member_id: str,
                                     instance_id: str | None, generation_or_epoch: int,
                                     partitions: list[tuple[str, int, int, int, str | None]], *,
                                     now_ms: int) -> CoordinatorResult[list[int]]:
        """Kafka's TxnOffsetCommit (OffsetMetadataManager.commitTransactionalOffset): the records, which the shell
        appends in `producer_id`'s transactional batch, and as the response an error code per partition. The pending
        offsets change only through the records, applied at once as the producer's (`apply`); until the shell settles
        them, `revert` takes them back, and the simple group the commit created."""
        errors, records, simple = self._transactional_offset_commit(group_id, member_id, instance_id,
                                                                    generation_or_epoch, partitions, now_ms=now_ms)
        self.apply(records, now_ms, producer_id)
        if simple:
            self._create_simple(group_id, now_ms)
        return CoordinatorResult(records, errors)

    def _transactional_offset_commit(self, group_id: str, member_id: str,
                                     instance_id: str | None, generation_or_epoch: int,
                                     partitions: list[tuple[str, int, int, int, str | None]], *,
                                     now_ms: int) -> tuple[list[int], list[Record], bool]:
        """TxnOffsetCommit's errors and records, computed only, and whether the group is to be made a simple group
        (the records are a plain commit's; written in the producer's batch, they are pending). The offsets stay pending
        until the producer's marker reaches the partition (`complete_transaction`). A group that does not exist
        is created as a simple group when the request has no generation, else ILLEGAL_GENERATION; a member's
        generation (classic) or epoch (consumer) must be current (a stale consumer epoch is ILLEGAL_GENERATION,
        as Kafka answers TxnOffsetCommit)."""
        if not group_id:
            return [ErrorCode.INVALID_GROUP_ID] * len(partitions), [], False
        kind = self.group_type(group_id)
        if kind is None:
            if generation_or_epoch >= 0:
                return [ErrorCode.ILLEGAL_GENERATION] * len(partitions), [], False
            return *self.offsets.commit(group_id, partitions, now_ms), True
        if kind == CLASSIC:
            error = self.classic.validate_offset_commit(group_id, member_id, instance_id, generation_or_epoch, now_ms,
                                                        transactional=True)
        elif kind == CONSUMER:
            error, _ = self.consumer.validate_offset_commit(group_id, member_id, generation_or_epoch, 0,
                                                            transactional=True)
            if error == ErrorCode.STALE_MEMBER_EPOCH:
                error = ErrorCode.ILLEGAL_GENERATION
            if not error:
                return *self._commit_unless_stale(
                    group_id, member_id, generation_or_epoch, partitions, ErrorCode.ILLEGAL_GENERATION,
                    lambda ps: self.offsets.commit(group_id, ps, now_ms)), False
        elif kind == STREAMS:
            error, _ = self.streams.validate_offset_commit(group_id, member_id, generation_or_epoch)
            if error == ErrorCode.STALE_MEMBER_EPOCH:
                error = ErrorCode.ILLEGAL_GENERATION
            if not error:
                return *self._commit_unless_stale(
                    group_id, member_id, generation_or_epoch, partitions, ErrorCode.ILLEGAL_GENERATION,
                    lambda ps: self.offsets.commit(group_id, ps, now_ms), self.streams), False
        else:
            error = ErrorCode.GROUP_ID_NOT_FOUND
        if error:
            return [error] * len(partitions), [], False
        return *self.offsets.commit(group_id, partitions, now_ms), False

    def complete_transaction(self, producer_id: int, committed: bool) -> list[tuple[str, str, int]]:
        """A COMMIT or ABORT marker of `producer_id` was appended to (or replayed from) the partition (offsets only:
        `OffsetStore.complete_transaction` makes the offset changes before it unrevertable)."""
        return self.offsets.complete_transaction(producer_id, committed)

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None, *,
                      member_id: str | None = None, member_epoch: int = -1, require_stable: bool = False):
        """(group error, [(topic, partition, committed value or None, error)]): with `require_stable`, a partition
        with a pending transactional offset answers UNSTABLE_OFFSET_COMMIT (the client retries)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        kind = self.group_type(group_id)
        if kind == SHARE:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if kind in (CONSUMER, STREAMS):
            groups = self.consumer if kind == CONSUMER else self.streams
            error, _ = groups.validate_offset_fetch(group_id, member_id, member_epoch)
            if error:
                return error, []
        if require_stable:
            return ErrorCode.NONE, self.offsets.fetch_stable(group_id, topics)
        return ErrorCode.NONE, [(t, p, v, ErrorCode.NONE) for t, p, v in self.offsets.fetch(group_id, topics)]

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> CoordinatorResult[tuple[int, list[int]]]:
        """Kafka's OffsetDelete: the tombstones, and as the response (group error, an error per partition). A group's
        members may not lose the offsets of topics they subscribe to (GROUP_SUBSCRIBED_TO_TOPIC). The offsets change
        only through the tombstones, applied at once (`apply`); until the shell settles them, `revert` takes them
        back."""
        error, errors, records = self._offset_delete(group_id, partitions)
        self.apply(records, now_ms=0)  # (tombstones of offsets: no clock)
        return CoordinatorResult(records, (error, errors))

    def _offset_delete(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, list[int], list[Record]]:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [], []
        kind = self.group_type(group_id)
        if kind not in (CLASSIC, CONSUMER, STREAMS):
            return ErrorCode.GROUP_ID_NOT_FOUND, [], []
        if kind == CLASSIC and not self.classic.is_empty(group_id) and \
                self.classic.protocol_type(group_id) not in ("", CONSUMER_PROTOCOL_TYPE):
            return ErrorCode.NON_EMPTY_GROUP, [], []
        subscribed = (self.classic.subscribed_topics(group_id) if kind == CLASSIC
                      else self.streams.subscribed_topics(group_id) if kind == STREAMS
                      else self.consumer.subscribed_topics(group_id))
        errors = [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if topic in subscribed else ErrorCode.NONE
                  for topic, _ in partitions]
        records = self.offsets.tombstones(group_id, [tp for tp, e in zip(partitions, errors) if not e])
        return ErrorCode.NONE, errors, records

    # ---- admin -----------------------------------------------------------------------------------------------------

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
                    ) -> list[tuple[str, str, str, str]]:
        """(group id, state, type, protocol type) of every group; empty filters match all; case-insensitive."""
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        rows = [(g, state, SHARE, SHARE_PROTOCOL_TYPE) for g, state, _ in self.share.list_groups()]
        rows += [(g, state, CLASSIC, protocol_type) for g, state, protocol_type in self.classic.list_groups()]
        rows += [(g, state, CONSUMER, CONSUMER_PROTOCOL_TYPE) for g, state in self.consumer.list_groups()]
        rows += [(g, state, STREAMS, STREAMS_PROTOCOL_TYPE) for g, state in self.streams.list_groups()]
        return sorted(r for r in rows if (not states or r[1].lower() in states) and (not types or r[2] in types))

    def delete_groups(self, group_ids: Iterable[str], now_ms: int = 0
                      ) -> CoordinatorResult[list[tuple[str, int, str | None]]]:
        """Kafka's DeleteGroups for every type (share groups: the shell deletes their share state first): the
        records, and as the response (group id, error, message) each. Each group's tombstones (its offsets' and its
        own) are computed from the state, then applied (`apply`) before the next group is looked at; until the shell
        settles them, `revert` takes them back."""
        results, records = [], []
        for group_id in group_ids:
            result, group_records = self._delete_group(group_id)
            self.apply(group_records, now_ms)
            results.append(result)
            records += group_records
        return CoordinatorResult(records, results)

    def _delete_group(self, group_id: str) -> tuple[tuple[str, int, str | None], list[Record]]:
        """One group's DeleteGroups answer and tombstones, computed only."""
        kind = self.group_type(group_id)
        if kind == SHARE or (kind is None and not group_id):
            return self.share.delete_records(group_id)
        if kind is None:
            return (group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."), []
        if kind in (CONSUMER, STREAMS):
            groups = self.consumer if kind == CONSUMER else self.streams
            error, message, group_records = groups.delete_records(group_id)
            if error:
                return (group_id, error, message), []
            return (group_id, error, message), self.offsets.group_tombstones(group_id) + group_records
        if not self.classic.is_empty(group_id):
            return (group_id, ErrorCode.NON_EMPTY_GROUP, f"Group {group_id} is not empty."), []
        return (group_id, ErrorCode.NONE, None), (self.offsets.group_tombstones(group_id)
                                                  + self.classic.remove_records(group_id))

    def on_topics_deleted(self, topic_ids: set, topic_names: set[str]) -> list[Record]:
        self.untracked()
        return self.share.on_topics_deleted(topic_ids) + self.offsets.on_topics_deleted(topic_names)

    def live_records(self) -> list[Record]:
        """The current record of every key the log holds state for: group metadata of every type, then every
        committed offset. Appended as one batch, they make every record before them redundant: the shell deletes
        those (compaction by rewriting what is live, as the share coordinator prunes its log)."""
        self.untracked()
        return (self.share.live_records() + self.classic.live_records() + self.consumer.live_records()
                + self.streams.live_records() + self.offsets.live_records())

    # ---- timers ----------------------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> CoordinatorResult[Replies]:
        """Every timer due: classic rebalance phases and sessions, share and consumer sessions, offset retention."""
        self.untracked()
        out = self.classic.tick(now_ms)
        out.records += self.share.expire_sessions(now_ms) + self.consumer.expire(now_ms)
        out.records += self.streams.expire(now_ms)
        if now_ms >= self.next_retention_check_ms:
            self.next_retention_check_ms = now_ms + self.offsets.check_interval_ms
            out.records += self.offsets.expire(now_ms, self._empty_since_ms, self._subscribed_now)
            for group_id in [g for g, state, _ in self.classic.list_groups()
                             if self.classic.is_empty(g) and not self.offsets.has_offsets(g)]:
                out.records += self._remove_classic(group_id)  # an empty group with no offsets left is gone
            for group_id in [g for g, _ in self.consumer.list_groups()
                             if self.consumer.is_empty(g) and not self.offsets.has_offsets(g)]:
                out.records += self._remove_consumer(group_id)
            for group_id in [g for g, _ in self.streams.list_groups()
                             if self.streams.is_empty(g) and not self.offsets.has_offsets(g)]:
                out.records += self.streams.delete_group(group_id)[2]
                self.share.unregister_foreign_group(group_id)
        return out

    def _subscribed_now(self, group_id: str) -> set[str] | None:
        """The topics a group with members subscribes to, where that is known: a Stable classic group of the
        consumer protocol type, or a consumer group (KIP-496 expires the offsets of other topics)."""
        kind = self.group_type(group_id)
        if kind == CLASSIC and self.classic.state(group_id) == STABLE and \
                self.classic.protocol_type(group_id) == CONSUMER_PROTOCOL_TYPE:
            return self.classic.subscribed_topics(group_id)
        if kind == CONSUMER and not self.consumer.is_empty(group_id):
            return self.consumer.subscribed_topics(group_id)
        if kind == STREAMS and not self.streams.is_empty(group_id):
            return self.streams.subscribed_topics(group_id)
        return None

    def _empty_since_ms(self, group_id: str) -> int | None:
        kind = self.group_type(group_id)
        if kind == CLASSIC:
            return self.classic.empty_since_ms(group_id)
        if kind in (CONSUMER, STREAMS):
            return -1 if (self.consumer if kind == CONSUMER else self.streams).is_empty(group_id) else None
        return -1 if kind is None else None

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (self.classic.next_deadline_ms(), self.share.next_deadline_ms(),
                                 self.consumer.next_deadline_ms(), self.streams.next_deadline_ms(),
                                 self.next_retention_check_ms) if d is not None]
        return min(deadlines, default=None)

    def session_deadlines(self) -> dict[tuple[str, str, str], int]:
        """Every member's session deadline (last heartbeat + session timeout), keyed (kind, group id, member id).

        A shard rebuilt from its partition after a failed append (its memory was ahead of the log) gives the
        members it replays fresh sessions, as a new coordinator does. The same coordinator must not: a member
        whose session ran out during a network cut, whose removal could not be written (too few in-sync
        replicas), would otherwise get a new session at every retry, and a consumer that returns with a new
        member id would wait for it in JoinGroup long after the cut healed. The actor carries these
        deadlines into the rebuilt shard (`carry_sessions`)."""
        return {(kind, *key): deadline for kind, groups in (("classic", self.classic), ("consumer", self.consumer),
                                                             ("share", self.share), ("streams", self.streams))
                for key, deadline in groups.session_deadlines().items()}

    def carry_sessions(self, deadlines: Mapping[tuple[str, str, str], int]) -> None:
        self.untracked()
        for kind, groups in (("classic", self.classic), ("consumer", self.consumer), ("share", self.share),
                             ("streams", self.streams)):
            groups.carry_sessions({(g, m): d for (k, g, m), d in deadlines.items() if k == kind})

    # ---- metrics ---------------------------------------------------------------------------------------------------

    def metrics(self) -> GroupMetrics:
        share = self.share.metrics()
        counts = {(SHARE, state): n for state, n in share.group_count_by_state.items()}
        counts.update({(CLASSIC, state): n for state, n in self.classic.count_by_state().items()})
        counts.update({(CONSUMER, state): n for state, n in self.consumer.count_by_state().items()})
        counts.update({(STREAMS, state): n for state, n in self.streams.count_by_state().items()})
        return GroupMetrics(counts, {SHARE: share.rebalance_count, CLASSIC: self.classic.rebalance_count,
                                     CONSUMER: self.consumer.rebalance_count(), STREAMS: self.streams.rebalance_count()},
                            {SHARE: share.member_count, CLASSIC: self.classic.member_count(),
                             CONSUMER: self.consumer.member_count(), STREAMS: self.streams.member_count()})

