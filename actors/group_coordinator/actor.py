"""The group coordinator's Ray shell: the leader actor of one `__consumer_offsets` partition (its
PartitionReplica, plus the coordinator that writes its log in process, so the shard moves with the
partition's leadership). It replays the partition on first use, serves the group protocols (share,
classic, consumer), offsets and the group admin calls, appends each call's records before
answering, fires the groups' timers on their deadlines, and has the share coordinators initialize
newly assigned share-partitions, at the start offsets share.auto.offset.reset gives at that moment.

JoinGroup and SyncGroup answer when the rebalance lets them: each such call waits on a future
that a later call, or a timer, resolves (see classic.py: a CoordinatorResult whose response is the replies).
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
import uuid

from actors import controller_client, internal_topics, metadata_follower, metrics
from actors.coordinator_log import CoordinatorLog, CoordinatorLogError, ShardHost, TxnMarker, TxnWrite
from actors.coordinator_result import CoordinatorResult
from actors.group_coordinator.groups import Groups
from actors.partition.actor import PartitionReplica
from actors.share_coordinator.core import state_partition_for
from actors.share_partition.core import LATEST_TIMESTAMP, start_offset_timestamp
from actors.transaction_coordinator.core import AddPartitions
from protocol.errors import ErrorCode

log = logging.getLogger("kray.group_coordinator")
METADATA_POLL_S = 10.0
CONSUMER_LAG_REPORT_INTERVAL_S = 10.0  # how often committed offsets are compared with the log ends
COMPACTION_CHECK_INTERVAL_S = 30.0
COMPACTION_MIN_RECORDS = 1000  # a log shorter than this is left as it is
DEADLINE_POLL_S_MAX = 1.0
TIMERS_RETRY_S = 1.0  # timers whose records could not be written fire again after this long
INITIALIZE_WAIT_S = 3.0  # a share-group heartbeat that starts initializing share-partitions waits for them this long
UNINITIALIZED_START_OFFSET = -1  # the share-partition leader picks it by share.auto.offset.reset
NO_LEADER_EPOCH = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
TXN_OFFSET_COMMIT_ABORTABLE_VERSION = 4  # TxnOffsetCommit answers TRANSACTION_ABORTABLE from this version (KIP-890)
TXN_OFFSET_COMMIT_ADDS_VERSION = 5       # transaction version 2: TxnOffsetCommit adds the group's partition itself


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def resolve_start_offset(partition, group_configs: dict, now_ms: int) -> int:
    """Where a share-partition being initialized starts (KIP-932 InitializeShareGroupState), by the
    group's share.auto.offset.reset, asked of the partition's leader actor (``list_offsets``, one Ray
    call; two for by_duration with no record that recent, which starts at the end): latest = the end
    offset now, so that every record produced after a member's assignment is delivered; earliest =
    the log start. UNINITIALIZED_START_OFFSET if it cannot be told (no handle, an error): the
    share-partition leader then resolves it when it first loads the state."""
    if partition is None:
        return UNINITIALIZED_START_OFFSET
    isolation = READ_COMMITTED if group_configs.get("share.isolation.level") == "read_committed" else READ_UNCOMMITTED
    try:
        timestamp = start_offset_timestamp(group_configs.get("share.auto.offset.reset"), now_ms)
        error, offset, *_ = await partition.list_offsets.remote(timestamp, NO_LEADER_EPOCH, isolation)
        if not error and offset < 0 and timestamp != LATEST_TIMESTAMP:
            error, offset, *_ = await partition.list_offsets.remote(LATEST_TIMESTAMP, NO_LEADER_EPOCH, isolation)
    except Exception as e:
        log.warning("looking up the start offset of a share-partition failed: %s", e)
        return UNINITIALIZED_START_OFFSET
    return offset if not error and offset >= 0 else UNINITIALIZED_START_OFFSET


class GroupCoordinator(PartitionReplica):
    def __init__(self, spec: dict, host):
        super().__init__(spec, host)
        self.config = spec["broker_config"]
        self.controller = spec["controller"]
        self.group_log = CoordinatorLog(self)
        self.host = ShardHost(self.group_log, self._build, transactions=True)
        # members' session deadlines, carried from a shard dropped after a failed append into its
        # rebuilt successor (Groups.session_deadlines); None after a change of leadership
        self.carried_sessions: dict | None = None
        # when this replica last became its partition's leader: the groups it loads (on first use)
        # are loaded as of then, as Kafka's coordinator loads them at its election
        self.elected_ms: int | None = None
        self.image = None
        self.tasks: list[asyncio.Task] = []
        self.rebalances_reported: dict[str, int] = {}
        self.calls = itertools.count(1)
        self.waiting: dict[int, asyncio.Future] = {}  # JoinGroup / SyncGroup calls the rebalance has yet to answer
        self.wake = asyncio.Event()  # a call moved a deadline: the timer loop looks again
        self.live_record_count = 0  # at the last compaction
        # transaction markers appended here while leading, not yet below the high watermark: a shard
        # (re)built meanwhile replays the log only up to there, and takes these after it
        self.recent_markers: list[TxnMarker] = []
        self.markers_seen: dict[int, int] = {}  # producer id -> markers appended here (TxnWrite's guard)
        self.cleanable_ratio = float(self.config.get("log.cleaner.min.cleanable.ratio", 0.5))
        self.appending = 0  # calls whose records are being appended

    # ---- loading and background work -------------------------------------------------------
    @property
    def shard(self) -> Groups | None:
        return self.host.shard

    def _leadership_changed(self, leading: bool) -> None:
        super()._leadership_changed(leading)
        self.host.invalidate()  # the next leader term replays the partition afresh
        self.carried_sessions = None  # and gives its members fresh sessions, as a new coordinator does
        self.elected_ms = now_ms() if leading else None
        self.recent_markers = []
        waiting, self.waiting = self.waiting, {}
        for future in waiting.values():  # the group lives elsewhere now: its members find the new coordinator
            if not future.done():
                future.set_exception(CoordinatorLogError(ErrorCode.NOT_COORDINATOR, "the group coordinator moved"))

    async def _ready(self) -> Groups:
        if self.replica.leader_epoch < 0:  # hosted just now (its shard restarted): not told its state yet
            raise CoordinatorLogError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is starting; retry")
        if not self.replica.is_leader:
            raise CoordinatorLogError(ErrorCode.NOT_COORDINATOR, "this replica does not lead the partition now")
        if self.image is None:
            self.image = await metadata_follower.follower(self.controller).current()
        shard = await self.host.ready()
        if not self.tasks:
            self.tasks = [asyncio.ensure_future(self._follow_metadata()), asyncio.ensure_future(self._expire_loop()),
                          asyncio.ensure_future(self._report_lag_loop()), asyncio.ensure_future(self._compact_loop())]
        return shard

    async def _build(self, records) -> Groups:
        """The groups of the partition's records, as of this replica's election: members' sessions
        run from then, not from the first request after it. A coordinator that moved here during a
        network cut, which no client could reach until the heal, would otherwise give the members
        lost in the cut a whole new session at the heal, and a consumer returning with a new
        member id would wait that long in JoinGroup for its old self."""
        shard, loaded_ms = Groups(self.config), self.elected_ms or now_ms()
        for entry in records:
            if isinstance(entry, TxnMarker):
                shard.complete_transaction(entry.producer_id, entry.committed)
            else:
                _offset, key, value, producer_id = entry
                shard.replay(key, value, loaded_ms, producer_id)
        replayed_to = self.group_log.next_offset
        for marker in self.recent_markers:  # appended beyond what the replay read
            if marker.offset >= replayed_to:
                shard.complete_transaction(marker.producer_id, marker.committed)
        carried, self.carried_sessions = self.carried_sessions, None
        if carried is not None:  # ({}: the dropped shard had no members left; those the log has are gone)
            shard.carry_sessions(carried)
        shard.finish_replay(loaded_ms)
        return shard

    async def _follow_metadata(self) -> None:
        while True:
            try:
                image = await metadata_follower.follower(self.controller).other_than(self.image.version,
                                                                                     METADATA_POLL_S)
                if image is self.image:
                    continue
                gone = {t.topic_id: name for name, t in self.image.topics.items()
                        if t.topic_id not in {u.topic_id for u in image.topics.values()}}
                self.image = image
                if self.shard is not None:
                    records = self.shard.on_topics_changed(self._topics(), now_ms())
                    if gone:
                        records += self.shard.on_topics_deleted(set(gone), set(gone.values()))
                    await self._commit(records)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("metadata refresh failed: %s", e)
                await asyncio.sleep(1.0)

    def _report_metrics(self, shard: Groups) -> None:
        m = shard.metrics()
        metrics.record_group_counts(m.count_by_type_state, self.partition)
        for group_type, count in m.rebalance_count_by_type.items():
            metrics.record_rebalances(group_type, count - self.rebalances_reported.get(group_type, 0))
            self.rebalances_reported[group_type] = count

    async def _compact_loop(self) -> None:
        """Keep the partition as short as its live state: once at least `log.cleaner.min.cleanable.ratio` of the
        records since the log start are superseded (and there are COMPACTION_MIN_RECORDS), append the current
        record of every live key in one batch and delete every record before it, as Kafka's log cleaner leaves
        the latest record per key of `__consumer_offsets`. Replay then reads the live state plus what came after."""
        while True:
            await asyncio.sleep(COMPACTION_CHECK_INTERVAL_S)
            try:
                await self.compact()
            except Exception:
                log.exception("compacting %s-%d failed", self.topic, self.partition)

    async def compact(self, min_records: int = COMPACTION_MIN_RECORDS) -> bool:
        """One compaction if the log is dirty enough; True if it ran."""
        shard = self.shard
        if shard is None or not self.replica.is_leader:
            return False
        length = self.group_log.next_offset - self.core.log_start_offset
        if length < max(min_records, self.live_record_count / max(1.0 - self.cleanable_ratio, 0.01)):
            return False
        live = shard.live_records()  # and appended before any later change's records (no await in between)
        self.live_record_count = len(live)
        if len(live) > length * (1.0 - self.cleanable_ratio):
            return False
        offsets = await self.group_log.append(live) if live else []
        if shard is not self.shard:
            return False
        # never past an open transaction's first record: pending transactional offsets are not among the
        # live records, their records must stay for a replay until their marker
        start = min(offsets[0] if offsets else self.group_log.next_offset, self.core.last_stable_offset)
        error, log_start = await self.delete_records(start)
        log.info("compacted %s-%d: %d live records rewritten, log start %d", self.topic, self.partition, len(live),
                 log_start)
        return not error

    async def _report_lag_loop(self) -> None:
        """Consumer lag per group and partition (log end offset - committed offset), as a gauge: one
        ListOffsets Ray call per partition with committed offsets, every CONSUMER_LAG_REPORT_INTERVAL_S."""
        while True:
            await asyncio.sleep(CONSUMER_LAG_REPORT_INTERVAL_S)
            shard = self.shard
            if shard is None or not self.replica.is_leader:
                continue
            ends: dict[tuple[str, int], int | None] = {}
            for group_id, topic, partition, offset in shard.offsets.positions():
                if (topic, partition) not in ends:
                    ends[(topic, partition)] = await self._log_end_offset(topic, partition)
                end = ends[(topic, partition)]
                if end is not None:
                    metrics.record_consumer_lag(group_id, topic, partition, max(end - offset, 0))

    async def _log_end_offset(self, topic: str, partition: int) -> int | None:
        state = self.image.topics.get(topic)
        replica = self.image.partition_replicas.get((state.topic_id, partition)) if state is not None else None
        if replica is None:
            return None
        try:
            error, offset, *_ = await replica.list_offsets.remote(LATEST_TIMESTAMP, NO_LEADER_EPOCH, READ_UNCOMMITTED)
        except Exception:
            return None
        return None if error else offset

    async def _expire_loop(self) -> None:
        while True:
            try:
                shard = await self._ready()
            except Exception:  # not leading now, or the replay failed: the loop lives on for the next term
                await asyncio.sleep(DEADLINE_POLL_S_MAX)
                continue
            deadline = shard.next_deadline_ms()
            wait_s = DEADLINE_POLL_S_MAX if deadline is None else min(max((deadline - now_ms()) / 1000, 0.001),
                                                                      DEADLINE_POLL_S_MAX)
            try:
                await asyncio.wait_for(self.wake.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            if shard is not self.shard:
                continue  # leadership moved (and perhaps came back with a newly replayed shard) meanwhile
            try:
                if await self._settle(shard.tick(now_ms())):
                    # (the partition can't take the timers' records now: too few in-sync replicas, say;
                    # the rebuilt shard fires them again, with the sessions carried, a little later)
                    await asyncio.sleep(TIMERS_RETRY_S)
                    continue
                self._report_metrics(shard)
            except Exception:
                log.exception("firing the group timers failed")

    def _topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {t.name: (t.topic_id, len(t.partitions)) for t in self.image.topics.values() if not t.internal}

    async def _commit(self, records: list, transaction: TxnWrite | None = None, mark=None) -> int:
        """Append a call's records: 0, or the error to answer. A call that changed state only through its records
        (OffsetCommit, TxnOffsetCommit, OffsetDelete, DeleteGroups, share initialization: see groups.py) passes the
        shard's `changes_mark` from before it: when the append fails, its changes are taken back (`Groups.revert`) if no
        other call's records are on their way to the log (later changes may rest on them otherwise) and nothing changed
        the state otherwise since; else, and for every other call, the shard is rebuilt from the log."""
        shard = self.shard
        if mark is None and shard is not None:
            shard.untracked()  # it changed the groups during the call: earlier changes can't be taken back alone
        if not records:
            return 0
        self.appending += 1
        try:
            await self.group_log.append(records, transaction)
        except CoordinatorLogError as e:
            self.appending -= 1
            if mark is not None and not self.appending and shard is not None and shard is self.shard \
                    and shard.revert(mark):
                log.warning("group record append failed (%s); the call's changes are reverted", e)
                shard.settle()
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            log.warning("group record append failed (%s); reloading the shard from the log", e)
            if self.host.shard is not None:
                self.carried_sessions = self.host.shard.session_deadlines()
            self.host.invalidate()
            # the calls a rebalance holds (JoinGroup, SyncGroup) belong to the dropped shard: answered now
            # (the client joins again) instead of never, which left them to the client's request timeout
            waiting, self.waiting = self.waiting, {}
            for future in waiting.values():
                if not future.done():
                    future.set_exception(CoordinatorLogError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                             f"the group's record could not be written ({e}); retry"))
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.appending -= 1
        if not self.appending and shard is not None and shard is self.shard:
            shard.settle()
        return 0

    async def _settle(self, outcome: CoordinatorResult) -> int:
        """Append the outcome's records, then answer the calls it resolves (with the append's error if it failed).
        Returns the append's error (0: none)."""
        error = await self._commit(outcome.records)
        for call, reply in outcome.response.items():
            future = self.waiting.pop(call, None)
            if future is not None and not future.done():
                future.set_result(dataclasses.replace(reply, error_code=error) if error else reply)
        return error

    async def _call(self, command, *args, **kwargs):
        """Run a command that may answer later (JoinGroup, SyncGroup) and wait for its answer."""
        shard = await self._ready()
        call = next(self.calls)
        future = self.waiting[call] = asyncio.get_running_loop().create_future()
        try:
            await self._settle(command(shard)(call, *args, **kwargs))
            self.wake.set()
            return await future
        finally:
            self.waiting.pop(call, None)

    # ---- classic groups ----------------------------------------------------------------------
    async def join_group(self, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
                         protocols: list, session_timeout_ms: int, rebalance_timeout_ms: int, client_id: str,
                         client_host: str, require_known_member_id: bool, api_version: int):
        return await self._call(lambda s: s.join_group, group_id, member_id, instance_id, protocol_type, protocols,
                                session_timeout_ms, rebalance_timeout_ms, client_id=client_id,
                                client_host=client_host, require_known_member_id=require_known_member_id,
                                api_version=api_version, now_ms=now_ms())

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None, assignments: list):
        return await self._call(lambda s: s.sync_group, group_id, generation_id, member_id, instance_id,
                                protocol_type, protocol_name, assignments, now_ms=now_ms())

    async def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        shard = await self._ready()
        result = shard.heartbeat(group_id, generation_id, member_id, instance_id, now_ms=now_ms())
        self.wake.set()
        return result.response  # (no records: a classic heartbeat writes nothing)

    async def leave_group(self, group_id: str, members: list):
        """(group error: the append's if the records of the rebalance it starts could not be written,
        (member id, instance id, error) per member)."""
        result = await self._call(lambda s: s.leave_group, group_id, members, now_ms=now_ms())
        return result.error_code, result.members

    async def describe_classic(self, group_ids: list[str]):
        shard = await self._ready()
        return [shard.describe_classic(g) for g in group_ids]

    # ---- consumer groups (KIP-848) -----------------------------------------------------------
    async def consumer_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, request: dict):
        shard = await self._ready()
        return await self._heartbeat(shard.consumer_group_heartbeat(
            group_id, member_id, member_epoch, topics=self._topics(), now_ms=now_ms(), **request))

    async def _heartbeat(self, stepped: CoordinatorResult):
        """A KIP-848 or streams heartbeat's result: the records committed, the timers woken."""
        records, result = stepped.records, stepped.response
        error = await self._commit(records)
        if error:
            result.error_code, result.error_message = error, "the group coordinator is reloading; retry"
        self.wake.set()
        return result

    async def describe_consumer(self, group_ids: list[str]):
        shard = await self._ready()
        return shard.describe_consumer(group_ids, self._topics())

    # ---- streams groups (KIP-1071) -----------------------------------------------------------
    async def streams_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, request: dict):
        shard = await self._ready()
        return await self._heartbeat(shard.streams_group_heartbeat(
            group_id, member_id, member_epoch, topics=self._topics(), now_ms=now_ms(), **request))

    async def describe_streams(self, group_ids: list[str]):
        shard = await self._ready()
        return shard.describe_streams(group_ids)

    # ---- offsets -----------------------------------------------------------------------------
    async def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None,
                             generation_or_epoch: int, partitions: list, api_version: int) -> list[int]:
        shard = await self._ready()
        mark = shard.changes_mark()
        result = shard.commit_offsets(group_id, member_id, instance_id, generation_or_epoch, partitions,
                                      api_version=api_version, now_ms=now_ms())
        error = await self._commit(result.records, mark=mark)
        return [error or e for e in result.response]

    async def fetch_offsets(self, group_id: str, topics: list | None, member_id: str | None = None,
                            member_epoch: int = -1, require_stable: bool = False):
        """(group error, [(topic, partition, (offset, leader epoch, metadata) or None, error)])."""
        shard = await self._ready()
        error, rows = shard.fetch_offsets(group_id, topics, member_id=member_id, member_epoch=member_epoch,
                                          require_stable=require_stable)
        return error, [(t, p, None if v is None else (v.offset, v.leader_epoch, v.metadata), e)
                       for t, p, v, e in rows]

    # ---- transactional offsets (TxnOffsetCommit) ------------------------------------------------------------------
    async def txn_commit_offsets(self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int,
                                 member_id: str, instance_id: str | None, generation_or_epoch: int,
                                 partitions: list, api_version: int) -> list[int]:
        """TxnOffsetCommit: an error per partition. As Kafka's coordinator: the producer's epoch is checked
        against the partition's producer state (INVALID_PRODUCER_EPOCH), the transaction is verified with its
        coordinator (KIP-890 part 1: this __consumer_offsets partition must be in the producer's ongoing
        transaction, which AddOffsetsToTxn put there) unless the partition already holds the producer's open
        transaction, then the group's checks; the offsets are written as the producer's transactional batch and
        stay pending until its marker."""
        shard = await self._ready()
        error = self._producer_error(producer_id, producer_epoch)
        if not error and not self._in_open_transaction(producer_id, producer_epoch):
            error = await self._verify_transaction(transactional_id, producer_id, producer_epoch, api_version)
        if error:
            return [error] * len(partitions)
        if shard is not self.shard:  # reloaded while verifying
            shard = await self._ready()
        error = self._producer_error(producer_id, producer_epoch)  # (a marker may have bumped it meanwhile)
        if error:
            return [error] * len(partitions)
        seen = self.markers_seen.get(producer_id, 0)
        mark = shard.changes_mark()
        result = shard.commit_transactional_offsets(group_id, producer_id, member_id, instance_id,
                                                    generation_or_epoch, partitions, now_ms=now_ms())
        if not result.records:
            return result.response
        guard = TxnWrite(producer_id, producer_epoch, lambda: self.markers_seen.get(producer_id, 0) == seen)
        error = await self._commit(result.records, guard, mark=mark)
        return [error or e for e in result.response]

    def _producer_error(self, producer_id: int, producer_epoch: int) -> int:
        if producer_id < 0 or producer_epoch < 0:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        entry = self.core.producers.entry(producer_id)
        if entry is not None and entry.producer_epoch > producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return ErrorCode.NONE

    def _in_open_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self.core.producers.entry(producer_id)
        return entry is not None and entry.producer_epoch == producer_epoch and entry.current_txn_first_offset >= 0

    async def _verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                  api_version: int) -> int:
        """Ask the transactional id's coordinator whether this partition is in the producer's transaction
        (AddPartitionsToTxn verify_only), with Kafka's mapping of its answer for TxnOffsetCommit; from v5
        (transaction version 2: the client sends no AddOffsetsToTxn) add it to the transaction instead."""
        partition = (internal_topics.CONSUMER_OFFSETS, self.partition)
        try:
            coordinator = await self._transaction_coordinator(transactional_id)
            if coordinator is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            adds = api_version >= TXN_OFFSET_COMMIT_ADDS_VERSION
            [response] = await coordinator.add_partitions.remote(
                [AddPartitions(transactional_id, producer_id, producer_epoch, (partition,), not adds, 2 if adds else 0)])
        except Exception as e:
            log.info("verifying the transaction of %r failed: %s", transactional_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = (response.partition_errors or {}).get(partition, response.error)
        if error == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if error == ErrorCode.TRANSACTION_ABORTABLE and api_version < TXN_OFFSET_COMMIT_ABORTABLE_VERSION:
            return ErrorCode.INVALID_TXN_STATE
        return error

    async def _transaction_coordinator(self, transactional_id: str):
        for fresh in (False, True):
            if fresh:
                self.image = await controller_client.wait_for_metadata(self.controller, -1, 0)
                metadata_follower.follower(self.controller).offer(self.image)
            topic = self.image.topics.get(internal_topics.TRANSACTION_STATE)
            if topic is not None:
                index = internal_topics.transaction_partition(transactional_id, len(topic.partitions))
                actor = self.image.coordinators.get((internal_topics.TRANSACTION_STATE, index))
                if actor is not None:
                    return actor
        return None

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      committed: bool) -> tuple[list, int | None]:
        """A transaction's marker (WriteTxnMarkers) for this partition: as any partition's, and then the
        producer's pending transactional offsets become committed offsets (COMMIT) or go (ABORT), at once, as
        Kafka's coordinator replays the marker when it is written."""
        results, required_offset = super().append_marker(producer_id, producer_epoch, coordinator_epoch, committed)
        [result] = results
        if result.error_code == 0:
            self.markers_seen[producer_id] = self.markers_seen.get(producer_id, 0) + 1
            high_watermark = self.core.high_watermark
            self.recent_markers = [m for m in self.recent_markers if m.offset >= high_watermark]
            self.recent_markers.append(TxnMarker(result.base_offset, producer_id, committed))
            if self.shard is not None:
                self.shard.complete_transaction(producer_id, committed)
        return results, required_offset

    async def delete_offsets(self, group_id: str, partitions: list):
        shard = await self._ready()
        mark = shard.changes_mark()
        result = shard.delete_offsets(group_id, partitions)
        commit_error = await self._commit(result.records, mark=mark)
        error, errors = result.response
        return error, [commit_error or e for e in errors]

    # ---- share groups ------------------------------------------------------------------------
    async def share_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                                    subscribed_topic_names: list[str] | None, client_id: str, client_host: str):
        shard = await self._ready()
        stepped = shard.share_group_heartbeat(
            group_id, member_id, member_epoch, rack_id=rack_id, subscribed_topic_names=subscribed_topic_names,
            client_id=client_id, client_host=client_host, now_ms=now_ms(), topics=self._topics())
        result = stepped.response
        error = await self._commit(stepped.records)
        if error:
            result.error_code, result.error_message = error, "the group coordinator is reloading; retry"
        elif result.initialize:
            initializing = asyncio.ensure_future(self._initialize(group_id, result.initialize, result.state_epoch))
            self.tasks.append(initializing)
            # a new group's (or topic's) share-partitions are assigned once initialized: wait a little
            # for that and answer this heartbeat with them, not the member's next one a heartbeat
            # interval (5 s) later, as Kafka 4.4 does (issue 37: a new group's first records came 5 s
            # after subscribe())
            try:
                await asyncio.wait_for(asyncio.shield(initializing), INITIALIZE_WAIT_S)
            except Exception:  # (still initializing: the next heartbeat assigns them)
                return result
            shard = await self._ready()
            stepped = shard.share_group_heartbeat(
                group_id, result.member_id, result.member_epoch, rack_id=rack_id,
                subscribed_topic_names=subscribed_topic_names, client_id=client_id, client_host=client_host,
                now_ms=now_ms(), topics=self._topics())
            again = stepped.response
            if again.error_code or await self._commit(stepped.records):
                return result
            if again.initialize:
                self.tasks.append(asyncio.ensure_future(self._initialize(group_id, again.initialize,
                                                                         again.state_epoch)))
            if again.assignment is None:  # (unchanged since the first answer: that one's stands)
                again.assignment = result.assignment
            return again
        return result

    async def _initialize(self, group_id: str, partitions: list, state_epoch: int) -> None:
        """InitializeShareGroupState for newly subscribed share-partitions, at the offsets where
        share.auto.offset.reset says they start (resolved now, before any member is assigned them),
        then make them assignable."""
        try:  # the group's configs as committed now: an override set just before subscribe() counts
            configs = await controller_client.call(self.controller, "group_configs", group_id,
                                                   timeout_s=controller_client.socket_timeout_s(self.config))
        except Exception as e:
            log.warning("no group configs to resolve share-partition start offsets (the image's are used): %s", e)
            configs = self.image.group_configs.get(group_id, {})
        # partition handles from the image the coordinator follows, not a whole image asked for again:
        # that took seconds on a loaded machine with a few hundred topics, past INITIALIZE_WAIT_S
        image = self.image
        done, failed = [], []
        for topic_id, index in partitions:
            try:
                if (topic_id, index) not in image.partition_replicas:  # a topic newer than the followed image
                    image = await controller_client.wait_for_metadata(self.controller, image.version, 0)
                    metadata_follower.follower(self.controller).offer(image)
                partition = image.partition_replicas.get((topic_id, index))
                start_offset = await resolve_start_offset(partition, configs, now_ms())
                coordinator = await self._share_coordinator(group_id, topic_id, index)
                error, message = await coordinator.initialize_state.remote(group_id, topic_id, index, state_epoch,
                                                                           start_offset)
            except Exception as e:
                error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
            (failed if error else done).append((topic_id, index))
            if error:
                log.warning("initializing share state of %s %s-%d failed: %s", group_id, topic_id, index, message)
        shard = await self._ready()
        mark = shard.changes_mark()
        await self._commit(shard.share_initialized(group_id, done, failed, now_ms()).records, mark=mark)

    async def _share_coordinator(self, group_id: str, topic_id: uuid.UUID, index: int):
        count = int(self.config["share.coordinator.state.topic.num.partitions"])
        key = (internal_topics.SHARE_GROUP_STATE, state_partition_for(group_id, topic_id, index, count))
        if key not in self.image.coordinators:
            self.image = await controller_client.ensure_internal_topic(self.controller, internal_topics.SHARE_GROUP_STATE)
            metadata_follower.follower(self.controller).offer(self.image)
        return self.image.coordinators[key]

    async def share_group_summary(self, group_id: str) -> tuple[int, int, list]:
        """(error code, member count, its initialized/initializing share-partitions) for the admin APIs."""
        shard = await self._ready()
        described = shard.share.describe([group_id], self._topics())[0]
        if described.error_code:
            return described.error_code, 0, []
        return 0, len(described.members), shard.share.share_partitions(group_id)

    async def share_offsets_altered(self, group_id: str, partitions: dict) -> tuple[int, str | None]:
        """AlterShareGroupOffsets set these share-partitions' start offsets (see the core)."""
        shard = await self._ready()
        mark = shard.changes_mark()
        result = shard.share_offsets_altered(group_id, partitions, now_ms())
        error, message = result.response
        if not error and await self._commit(result.records, mark=mark):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator could not write the change; retry"
        return error, message

    async def describe(self, group_ids: list[str]):
        shard = await self._ready()
        return shard.share.describe(group_ids, self._topics())

    async def list_groups(self, states_filter: list[str], types_filter: list[str]):
        shard = await self._ready()
        return shard.list_groups(states_filter, types_filter)

    async def delete_groups(self, group_ids: list[str]):
        """Delete empty groups; a share group's share state first (as Kafka's DeleteGroups does)."""
        shard = await self._ready()
        for group_id in group_ids:
            for topic_id, index in shard.share.share_partitions(group_id):
                if shard.share.describe([group_id], self._topics())[0].members:
                    break
                try:
                    coordinator = await self._share_coordinator(group_id, topic_id, index)
                    await coordinator.delete_state.remote(group_id, topic_id, index)
                except Exception as e:
                    log.warning("deleting share state of %s failed: %s", group_id, e)
        if shard is not self.shard:  # reloaded while deleting share state
            shard = await self._ready()
        mark = shard.changes_mark()
        result = shard.delete_groups(group_ids, now_ms())
        error = await self._commit(result.records, mark=mark)
        return [(g, error or code, message) for g, code, message in result.response]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await super().close()
