"""The group coordinator's Ray shell: the leader actor of one `__consumer_offsets` partition (its
PartitionActor, plus the coordinator that writes its log in process, so the shard moves with the
partition's leadership). It replays the partition on first use, serves ShareGroupHeartbeat and
the share group admin calls, appends each call's records before answering, expires member
sessions on their deadlines, and has the share coordinators initialize newly assigned
share-partitions, at the start offsets share.auto.offset.reset gives at that moment.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from actors import internal_topics, metrics
from actors.coordinator_log import CoordinatorLog, CoordinatorLogError, ShardHost
from actors.group_coordinator.core import GroupCoordinatorShard
from actors.partition.actor import PartitionActor
from actors.share_coordinator.core import state_partition_for
from actors.share_partition.core import LATEST_TIMESTAMP, start_offset_timestamp
from protocol.errors import ErrorCode

log = logging.getLogger("kray.group_coordinator")
METADATA_POLL_S = 10.0
DEADLINE_POLL_S_MAX = 1.0
UNINITIALIZED_START_OFFSET = -1  # the share-partition leader picks it by share.auto.offset.reset
NO_LEADER_EPOCH = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


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


class GroupCoordinatorActor(PartitionActor):
    def __init__(self, spec: dict):
        super().__init__(spec)
        self.config = spec["broker_config"]
        self.controller = spec["controller"]
        self.group_log = CoordinatorLog(self)
        self.host = ShardHost(self.group_log, self._build)
        self.image = None
        self.tasks: list[asyncio.Task] = []
        self.rebalances_reported = 0

    # ---- loading and background work -------------------------------------------------------
    @property
    def shard(self) -> GroupCoordinatorShard | None:
        return self.host.shard

    def _leadership_changed(self, leading: bool) -> None:
        super()._leadership_changed(leading)
        self.host.invalidate()  # the next leader term replays the partition afresh

    async def _ready(self) -> GroupCoordinatorShard:
        if not self.replica.is_leader:
            raise CoordinatorLogError(ErrorCode.NOT_COORDINATOR, "this replica does not lead the partition now")
        if self.image is None:
            self.image = await self.controller.wait_for_metadata.remote(-1, 0)
        shard = await self.host.ready()
        if not self.tasks:
            self.tasks = [asyncio.ensure_future(self._follow_metadata()), asyncio.ensure_future(self._expire_loop())]
        return shard

    async def _build(self, records) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(self.config)
        for _offset, key, value in records:
            shard.replay(key, value)
        return shard

    async def _follow_metadata(self) -> None:
        while True:
            try:
                image = await self.controller.wait_for_metadata.remote(self.image.version, METADATA_POLL_S)
                gone = {t.topic_id for t in self.image.topics.values()} - {t.topic_id for t in image.topics.values()}
                self.image = image
                if gone and self.shard is not None:
                    await self._commit(self.shard.on_topics_deleted(gone))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("metadata refresh failed: %s", e)
                await asyncio.sleep(1.0)

    def _report_metrics(self, shard: GroupCoordinatorShard) -> None:
        m = shard.metrics()
        metrics.record_group_counts(m.group_count_by_state)
        metrics.record_rebalances(m.rebalance_count - self.rebalances_reported)
        self.rebalances_reported = m.rebalance_count

    async def _expire_loop(self) -> None:
        while True:
            shard = await self._ready()
            deadline = shard.next_deadline_ms()
            wait_s = DEADLINE_POLL_S_MAX if deadline is None else min(max((deadline - now_ms()) / 1000, 0.01),
                                                                      DEADLINE_POLL_S_MAX)
            await asyncio.sleep(wait_s)
            try:
                await self._commit(shard.expire_sessions(now_ms()))
                self._report_metrics(shard)
            except Exception:
                log.exception("expiring share group members failed")

    def _topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {t.name: (t.topic_id, len(t.partitions)) for t in self.image.topics.values() if not t.internal}

    async def _commit(self, records: list) -> int:
        if not records:
            return 0
        try:
            await self.group_log.append(records)
        except CoordinatorLogError as e:
            log.warning("group record append failed (%s); reloading the shard from the log", e)
            self.host.invalidate()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return 0

    # ---- share groups ------------------------------------------------------------------------
    async def share_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                                    subscribed_topic_names: list[str] | None, client_id: str, client_host: str):
        shard = await self._ready()
        result, records = shard.share_group_heartbeat(
            group_id, member_id, member_epoch, rack_id=rack_id, subscribed_topic_names=subscribed_topic_names,
            client_id=client_id, client_host=client_host, now_ms=now_ms(), topics=self._topics())
        error = await self._commit(records)
        if error:
            result.error_code, result.error_message = error, "the group coordinator is reloading; retry"
        elif result.initialize:
            self.tasks.append(asyncio.ensure_future(self._initialize(group_id, result.initialize, result.state_epoch)))
        return result

    async def _initialize(self, group_id: str, partitions: list, state_epoch: int) -> None:
        """InitializeShareGroupState for newly subscribed share-partitions, at the offsets where
        share.auto.offset.reset says they start (resolved now, before any member is assigned them),
        then make them assignable."""
        try:  # every partition actor's handle: once per initialization, not on the data path
            image = await self.controller.wait_for_metadata.remote(-1, 0)
        except Exception as e:
            log.warning("no metadata to look up share-partition start offsets: %s", e)
            image = None
        configs = image.group_configs.get(group_id, {}) if image is not None else {}
        done, failed = [], []
        for topic_id, index in partitions:
            try:
                partition = image.partition_actors.get((topic_id, index)) if image is not None else None
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
        await self._commit(shard.mark_initialized(group_id, done) + shard.mark_initialize_failed(group_id, failed))

    async def _share_coordinator(self, group_id: str, topic_id: uuid.UUID, index: int):
        count = int(self.config["share.coordinator.state.topic.num.partitions"])
        key = (internal_topics.SHARE_GROUP_STATE, state_partition_for(group_id, topic_id, index, count))
        if key not in self.image.coordinators:
            self.image = await self.controller.ensure_internal_topic.remote(internal_topics.SHARE_GROUP_STATE)
        return self.image.coordinators[key]

    async def share_group_summary(self, group_id: str) -> tuple[int, int, list]:
        """(error code, member count, its initialized/initializing share-partitions) for the admin APIs."""
        shard = await self._ready()
        described = shard.describe([group_id], self._topics())[0]
        if described.error_code:
            return described.error_code, 0, []
        return 0, len(described.members), shard.share_partitions(group_id)

    async def share_offsets_altered(self, group_id: str, partitions: dict) -> tuple[int, str | None]:
        """AlterShareGroupOffsets set these share-partitions' start offsets (see the core)."""
        shard = await self._ready()
        error, message, records = shard.share_offsets_altered(group_id, partitions)
        if not error and await self._commit(records):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is reloading; retry"
        return error, message

    async def describe(self, group_ids: list[str]):
        shard = await self._ready()
        return shard.describe(group_ids, self._topics())

    async def list_groups(self, states_filter: list[str], types_filter: list[str]):
        shard = await self._ready()
        return shard.list_groups(states_filter, types_filter)

    async def delete_groups(self, group_ids: list[str]):
        """Delete empty share groups, their share state first (as Kafka's DeleteGroups does)."""
        shard = await self._ready()
        for group_id in group_ids:
            for topic_id, index in shard.share_partitions(group_id):
                if shard.describe([group_id], self._topics())[0].members:
                    break
                try:
                    coordinator = await self._share_coordinator(group_id, topic_id, index)
                    await coordinator.delete_state.remote(group_id, topic_id, index)
                except Exception as e:
                    log.warning("deleting share state of %s failed: %s", group_id, e)
        results, records = shard.delete_groups(group_ids)
        error = await self._commit(records)
        return [(g, error or code, message) for g, code, message in results]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await super().close()
