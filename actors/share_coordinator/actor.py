"""The share coordinator's Ray shell: the leader actor of one `__share_group_state` partition.

It is that partition's PartitionReplica (the log, fetchable like any other) plus the share
coordinator that writes it, so its shard moves with the partition's leadership and appends stay
in process. It replays the partition into its shard on first use, then serves the share-group
state operations (Initialize, Read, Write, Delete, ReadSummary): as actor methods for the group
coordinator and the admin APIs (Ray calls: rare), and as SHARE_STATE frames on its shard's
data-path listener (`share_state`, wire.py) for share-partition leaders, whose writes come with
every acknowledging ShareFetch: from its own broker's gateway (Kafka's share-state APIs from
other brokers, on the broker's inter-broker listener) and from share-partition leaders on its own
broker. It listens on no port of its own. Each operation's records are appended before it
answers; when an append fails and no other operation's records are on their way to the log, the
operation's changes are reverted in the shard (the log never had them), else the shard is rebuilt
from the log. Records before the oldest live snapshot are pruned.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from actors.coordinator_log import CoordinatorLog, CoordinatorLogError, ShardHost
from actors.partition.actor import PartitionReplica
from actors.share_coordinator import wire
from actors.coordinator_result import CoordinatorResult
from actors.share_coordinator.core import (ReadResponse, ShareCoordinatorShard, StateResponse,
                                         SummaryResponse)
from protocol.errors import ErrorCode

log = logging.getLogger("kray.share_coordinator")
PRUNE_INTERVAL_S = 30.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ShareCoordinator(PartitionReplica):
    def __init__(self, spec: dict, host):
        super().__init__(spec, host)
        self.state_log = CoordinatorLog(self)
        self.snapshot_update_records_max = int(
            spec["broker_config"]["share.coordinator.snapshot.update.records.per.snapshot"])
        self.host = ShardHost(self.state_log, self._build)
        self.pruner: asyncio.Task | None = None
        self.appending = 0  # operations whose records are being appended

    @property
    def shard(self) -> ShareCoordinatorShard | None:
        return self.host.shard

    def _leadership_changed(self, leading: bool) -> None:
        super()._leadership_changed(leading)
        self.host.invalidate()  # the next leader term replays the partition afresh

    async def _ready(self) -> ShareCoordinatorShard:
        if self.replica.leader_epoch < 0:  # hosted just now (its shard restarted): not told its state yet
            raise CoordinatorLogError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is starting; retry")
        if not self.replica.is_leader:
            raise CoordinatorLogError(ErrorCode.NOT_COORDINATOR, "this replica does not lead the partition now")
        shard = await self.host.ready()
        if self.pruner is None:
            self.pruner = asyncio.ensure_future(self._prune_loop())
        return shard

    async def _build(self, records) -> ShareCoordinatorShard:
        shard = ShareCoordinatorShard(snapshot_update_records_max=self.snapshot_update_records_max)
        for offset, key, value in records:
            shard.replay(key, value, offset)
        return shard

    async def _run(self, operation) -> StateResponse | ReadResponse:
        """Run an operation on the shard and append its records: its response, or the append's error."""
        shard = await self._ready()
        mark = shard.changes_mark()
        result = operation(shard)
        error, message = await self._commit(shard, mark, result)
        return result.response._replace(error_code=error, error_message=message) if error else result.response

    async def _commit(self, shard: ShareCoordinatorShard, mark: int, result: CoordinatorResult
                      ) -> tuple[int, str | None]:
        """Append the result's records: (the error to answer, its message): the response's own, or the append's."""
        response = result.response
        if response.error_code or not result.records:
            if not self.appending and shard is self.shard:
                shard.settle()
            return response.error_code, response.error_message
        self.appending += 1
        try:
            offsets = await self.state_log.append(result.records)
        except CoordinatorLogError as e:
            self.appending -= 1
            if not self.appending and shard is self.shard:
                log.warning("share-state append failed (%s); its changes are reverted", e)
                shard.revert(mark)  # nothing else was built on them: the shard is as the log has it
                shard.settle()
            else:  # later operations' changes rest on these (or the shard was rebuilt meanwhile)
                log.warning("share-state append failed (%s); reloading the shard from the log", e)
                self.host.invalidate()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
        self.appending -= 1
        if shard is self.shard:
            shard.on_appended(result.records, offsets)
            if not self.appending:
                shard.settle()
        return 0, None

    async def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                               start_offset: int) -> StateResponse:
        """(error code, message), as every operation that answers a StateResponse."""
        return await self._run(lambda shard: shard.initialize(
            group_id, topic_id, partition, state_epoch=state_epoch, start_offset=start_offset, now_ms=now_ms()))

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
                         ) -> ReadResponse:
        return await self._run(lambda shard: shard.read(
            group_id, topic_id, partition, leader_epoch=leader_epoch, now_ms=now_ms()))

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                          leader_epoch: int, start_offset: int, state_batches: list,
                          delivery_complete_count: int = -1) -> StateResponse:
        return await self._run(lambda shard: shard.write(
            group_id, topic_id, partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
            start_offset=start_offset, state_batches=state_batches, delivery_complete_count=delivery_complete_count,
            now_ms=now_ms()))

    async def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateResponse:
        return await self._run(lambda shard: shard.delete(group_id, topic_id, partition))

    async def read_state_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SummaryResponse:
        shard = await self._ready()
        return shard.read_summary(group_id, topic_id, partition)

    async def share_state(self, api_key: int, group_id: str, items: list) -> list[list]:
        """A SHARE_STATE frame's operations (Kafka's keys 83-87, see wire.py), run in order."""
        return await wire.apply(self, api_key, group_id, items)

    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(PRUNE_INTERVAL_S)
            try:
                shard = self.shard
                if shard is None:
                    continue
                await self._commit(shard, shard.changes_mark(),
                                   CoordinatorResult(shard.snapshot_cold_partitions(now_ms=now_ms()),
                                                     StateResponse(0, None)))
                await self.delete_records(shard.prunable_before_offset())
            except Exception:
                log.exception("pruning %s-%d failed", self.topic, self.partition)

    async def close(self) -> None:
        if self.pruner:
            self.pruner.cancel()
        await super().close()
