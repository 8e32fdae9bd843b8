"""A partition replica's shell: owns one PartitionCore (log + producer state) and one ReplicaCore
(leader epoch, ISR, high watermark, followers, acks=all waiters) for one replica of one
topic-partition on one broker; reads the clock, carries out what the replication core decides,
wakes long-polling fetches, and runs retention when its shard's timer says.

A replica is an actor-like unit hosted by a shard actor (actors/shard/), with many others: its own
state machines, its own leadership. Its node's gateway reaches it through the
shard's Unix-socket listener (listener.py: produce, fetch, follower fetch, share fetch...), whose
frames name their partition. As a follower it is fetched for by its shard's fetcher for its
leader's broker, with the shard's other followers of that broker (fetcher.py); its timers are the
shard's too (`replication_tick`, `retention_tick`). Control calls come through the shard's `call`
(Ray): listen, the controller's partition state (`update`), reconfigure, delete, admin reads;
AlterPartition goes to the controller as a Ray call.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from actors import controller_client, internal_topics, log_to_stderr, storage_errors
from actors.config_schema import replica_listed
from actors.partition.checkpoints import load_epochs, load_high_watermark, save_epochs, save_high_watermark
from actors.partition.core import PartitionCore
from actors.partition.fetcher import ReplicaFetchers
from actors.partition import wire
from actors.partition.log import flush_rolled, unlink_files
from actors.partition.replication import (
    ACKS_ALL, AlterPartitionRequest, AlterPartitionResponse, BatchSpan, Effects, FetchAnswer, FetchRequest,
    FollowerAction, PartitionRegistration, ReplicaCore, ReplicationConfig, Role,
)
from actors.share_partition.actor import ShareLeaders
from actors.share_partition.core import ShareFetchResult
from protocol.errors import ErrorCode
from protocol.record_batch import CorruptRecord, crc_is_valid, iter_batches

log = logging.getLogger("kray.partition")
PARTITION_METADATA_FILE = "partition.metadata"
DELETED_DIR_SUFFIX = "-delete"  # a deleted partition's directory until it is removed (Kafka's suffix)


def remove_deleted_dirs(log_dir: str) -> None:
    """Remove what deleted partitions left (renamed, not yet removed when their host stopped)."""
    for path in Path(log_dir).glob(f"*{DELETED_DIR_SUFFIX}"):
        shutil.rmtree(path, ignore_errors=True)
NOT_LEADER_MESSAGE = "this replica does not lead the partition now"
HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = 5000  # replica.high.watermark.checkpoint.interval.ms
REPLICA_LAG_TIME_MAX_MS_DEFAULT = 30000


class ReplicaHost(Protocol):
    """What hosts a replica (actors/shard/actor.py's ShardActor): the data-path listener that
    serves it, and the fetchers that fetch for it while it follows."""
    fetchers: ReplicaFetchers

    async def listen(self) -> str: ...

    def took_records(self) -> None:
        """Wake the long polls that wait on several of the host's replicas at once."""

    def in_background(self, fn, *args) -> concurrent.futures.Future:
        """Run fn(*args) on the host's I/O thread, after what was handed to it before: file
        writes (checkpoints, with their fsync) that must not hold up the replicas' event loop."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionReplica:
    def __init__(self, spec: dict[str, Any], host: ReplicaHost):
        log_to_stderr()
        self.spec = spec
        self.topic: str = spec["topic"]
        self.topic_id: uuid.UUID = spec["topic_id"]
        self.partition: int = spec["partition"]
        self.key = (self.topic_id, self.partition)
        self.broker_id: int = spec["broker_id"]
        self.dir = Path(spec["log_dir"]) / f"{self.topic}-{self.partition}"
        self._claim_dir()
        self.core = PartitionCore.open(self.dir, spec["config"], now_ms=now_ms())
        # its topic's follower.replication.throttled.replicas ("p:broker,..." or "*"): see `throttled`
        self.follower_throttled_replicas = str(getattr(spec["config"], "follower_throttled_replicas", "") or "")
        broker_config = spec["broker_config"]
        self.replica_lag_time_max_ms = int(broker_config.get("replica.lag.time.max.ms",
                                                             REPLICA_LAG_TIME_MAX_MS_DEFAULT))
        log_ = self.core.log
        self.replica = ReplicaCore(self.broker_id, log_end_offset=log_.log_end_offset,
                                   log_start_offset=log_.log_start_offset,
                                   high_watermark=load_high_watermark(self.dir, log_),
                                   epochs=load_epochs(self.dir, log_), config=self._replication_config(spec["config"]))
        log_.high_watermark = self.replica.high_watermark
        self.saved_epochs = self.replica.epochs.entries()
        self.saved_high_watermark = -1
        self.broker_epoch = -1
        self.waiters: dict[int, asyncio.Future] = {}   # acks=all produce requests, by waiter id
        self.data_arrived = asyncio.Event()
        self.retention_wanted = False  # retention passes start with the first write as leader
        self.last_checkpoint_ms = 0
        self.hosted_by = host  # the shard: its listener serves this replica, its fetchers fetch for it
        self.alter_in_flight: AlterPartitionRequest | None = None  # sent, neither answered nor timed out
        self.shares = ShareLeaders(self, broker_config, spec["controller"])
        self.closing = False  # `close` began: it neither leads nor follows any more

    def _replication_config(self, topic_config) -> ReplicationConfig:
        return ReplicationConfig(replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                                 min_insync_replicas=int(getattr(topic_config, "min_insync_replicas", 1) or 1))

    @property
    def leader_epoch(self) -> int:
        return self.replica.leader_epoch

    async def listen(self) -> str:
        """The address of the listener (the shard's) that serves this replica to its node's gateway."""
        return await self.hosted_by.listen()

    def node_id(self) -> str:
        """The Ray node this replica runs on (where placement really put it)."""
        import ray
        return ray.get_runtime_context().get_node_id()

    def _claim_dir(self) -> None:
        """A directory left by a deleted topic of the same name is not ours: start empty."""
        marker = self.dir / PARTITION_METADATA_FILE
        if marker.exists() and marker.read_text().strip() != f"topic_id: {self.topic_id}":
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"topic_id: {self.topic_id}\n")

    # ---- the controller's partition state --------------------------------------------------
    async def update(self, registration: dict, leader_endpoint: tuple[str, int] | None, broker_epoch: int,
                     fenced: list[int] = ()) -> None:
        """The controller's newest state of this partition (leader, epochs, replicas, ISR), where
        the leader's broker listens, this broker's epoch, and which replicas' brokers are fenced.
        Older states are ignored."""
        reg = PartitionRegistration(registration["leader"], registration["leader_epoch"],
                                    registration["partition_epoch"], tuple(registration["replicas"]),
                                    tuple(registration["isr"]))
        if (reg.leader_epoch, reg.partition_epoch) < (self.replica.leader_epoch, self.replica.partition_epoch):
            return  # overtaken by a newer state (the controller's calls may arrive out of order)
        if self.closing:
            return  # stopped: a state told before the stop must not make it lead again
        self.broker_epoch = broker_epoch
        was_leader, old_epoch = self.replica.is_leader, self.replica.leader_epoch
        self._apply(self.replica.apply_registration(reg, now_ms()))
        self._apply(self.replica.set_ineligible_replicas(fenced, now_ms()))
        self._save_epochs()
        if was_leader != self.replica.is_leader or (was_leader and old_epoch != self.replica.leader_epoch):
            # a new leader epoch on this same broker counts too: another leader may have led between
            self._leadership_changed(self.replica.is_leader)
        if self.replica.role is Role.FOLLOWER and leader_endpoint is not None:
            self.hosted_by.fetchers.follow(self, leader_endpoint)
        elif self.replica.role is not Role.FOLLOWER:
            self._stop_following()
        self._wake()

    def _leadership_changed(self, leading: bool) -> None:
        """Leadership came or went. What lives only on the leader is dropped either way and
        rebuilt on first use: share-partition leaders from the share coordinator (coordinators
        override this to drop their shard, rebuilt by replaying the partition)."""
        log.info("%s-%d: broker %d %s (leader epoch %d)", self.topic, self.partition, self.broker_id,
                 "leads" if leading else "follows", self.replica.leader_epoch)
        self.shares.close()
        self.shares = ShareLeaders(self, self.spec["broker_config"], self.spec["controller"])

    async def await_committed(self, timeout_ms: int) -> bool:
        """As a leader: wait until everything in the log now is committed (the high watermark
        reaches the log end as of this call). A new coordinator replays its partition only then,
        so that it never builds on records a later leader may not have."""
        target = self.core.log_end_offset
        return await self._wait_until(
            lambda: not self.replica.is_leader or self.core.high_watermark >= target, timeout_ms) \
            and self.replica.is_leader

    async def _wait_until(self, ready, timeout_ms: int) -> bool:
        """Wait (woken by `_wake`) until `ready()` holds: True, or False after timeout_ms."""
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while not ready():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.data_arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    def _apply(self, effects: Effects) -> None:
        """Carry out what the replication core decided (no await: state changes stay atomic)."""
        if effects.high_watermark is not None:
            self.core.log.high_watermark = effects.high_watermark
            self._wake()
        for waiter_id, error in effects.released:
            future = self.waiters.pop(waiter_id, None)
            if future is not None and not future.done():
                future.set_result(error)
        if effects.alter_partition is not None and effects.alter_partition != self.alter_in_flight:
            self.alter_in_flight = effects.alter_partition  # (a resend waits for the copy in flight)
            asyncio.get_running_loop().create_task(self._alter_partition(effects.alter_partition))

    async def _alter_partition(self, request: AlterPartitionRequest) -> None:
        """Kafka's AlterPartition, bounded by a timeout: cut off from the controller, the proposal
        stays pending (the ISR can't shrink, so acks=all writes can't be acknowledged by this
        leader alone) and the tick resends it, with the same proposal id, until one is answered."""
        try:
            error, state = await controller_client.call(
                self.spec["controller"], "alter_partition", self.broker_id, self.broker_epoch, self.topic_id,
                self.partition, request.leader_epoch, request.partition_epoch, list(request.new_isr),
                request.proposal_id, timeout_s=controller_client.ALTER_PARTITION_TIMEOUT_S)
        except Exception as e:  # the controller restarts or is cut off: the tick resends the proposal
            log.info("AlterPartition of %s-%d failed: %s", self.topic, self.partition, e)
            return
        finally:
            if self.alter_in_flight == request:
                self.alter_in_flight = None
        state = state or {}
        response = AlterPartitionResponse(error, state.get("leader", -1), state.get("leader_epoch", -1),
                                          state.get("partition_epoch", -1), tuple(state.get("isr", ())))
        self._apply(self.replica.on_alter_partition_response(request, response, now_ms()))

    def _wake(self) -> None:
        """Long polls re-check what they wait for: the high watermark (consumers) or the log end
        (followers)."""
        self.data_arrived.set()
        self.data_arrived = asyncio.Event()
        self.hosted_by.took_records()

    def _save_epochs(self) -> None:
        entries = self.replica.epochs.entries()
        if entries != self.saved_epochs:
            save_epochs(self.dir, self.replica.epochs)
            self.saved_epochs = entries

    def replication_tick(self, now: int) -> None:
        """Periodic (the shard's timer, every REPLICATION_TICK_S): lagging followers leave the ISR;
        unanswered proposals are resent; the high watermark is checkpointed now and then."""
        if self.replica.role is Role.LEADER and len(self.replica.replicas) > 1:
            self._apply(self.replica.tick(now))  # (alone in its ISR, a leader has no one to check)
        self._hand_over_files()
        hw = self.core.high_watermark
        if hw != self.saved_high_watermark and now - self.last_checkpoint_ms >= HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS:
            self.hosted_by.in_background(save_high_watermark, self.dir, hw)  # its fsync off the event loop
            self.saved_high_watermark, self.last_checkpoint_ms = hw, now

    # ---- follower: fetch from the leader ----------------------------------------------------
    def _stop_following(self) -> None:
        self.hosted_by.fetchers.unfollow(self.key)

    @property
    def throttled(self) -> bool:
        """Listed in its topic's follower.replication.throttled.replicas: its fetches count against its host's
        replication throttle (follower.replication.throttled.rate)."""
        return replica_listed(self.follower_throttled_replicas, self.partition, self.broker_id)

    def next_fetch(self) -> FetchRequest | None:
        """What this follower asks its leader for now (its fetcher batches it with others)."""
        return self.replica.next_fetch()

    def on_fetched(self, request: FetchRequest, answer: FetchAnswer, records: memoryview) -> bool:
        """The leader's answer to `request`, from this replica's fetcher: checked, then applied.
        False when the leader refused the fetch (the fetcher waits before asking again)."""
        headers = list(iter_batches(records)) if len(records) else []
        if not all(map(crc_is_valid, headers)):
            raise CorruptRecord("a fetched batch failed its CRC check")
        spans = [BatchSpan(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers]
        return self._step(request, answer, spans, records)

    def _step(self, request: FetchRequest, answer: FetchAnswer, spans: list[BatchSpan], records) -> bool:
        """Apply one fetch answer to the log (no await between the core's decision and the write).
        False when the leader refused the fetch."""
        step = self.replica.on_fetch_response(request, answer, spans)
        now = now_ms()
        if step.action is FollowerAction.APPEND:
            self.core.append_replicated(records, now_ms=now)
        elif step.action is FollowerAction.TRUNCATE:
            log.info("%s-%d: truncating to %d (leader epoch %d)", self.topic, self.partition, step.truncate_to,
                     self.replica.leader_epoch)
            self.core.truncate_to(step.truncate_to, now_ms=now)
        elif step.action is FollowerAction.RESET:
            log.info("%s-%d: starting again at the leader's log start %d", self.topic, self.partition,
                     step.truncate_to)
            self.core.reset_to(step.truncate_to, now_ms=now)
        if step.high_watermark is not None:
            self.core.log.high_watermark = step.high_watermark
        if step.log_start_offset is not None and step.log_start_offset > self.core.log_start_offset:
            self.core.delete_records(step.log_start_offset)
        self._save_epochs()
        if step.action is not FollowerAction.IGNORE:
            self._wake()
        return step.error_code == ErrorCode.NONE

    def _hand_over_files(self) -> None:
        """The log's file work that may take long goes to the host's I/O thread, not the event
        loop every replica of the host shares: fsyncing rolled segments (a 1 GiB segment's takes
        ~0.5 s here) and unlinking deleted ones (~0.27 s per GiB of cached data)."""
        log_ = self.core.log
        rolled = log_.take_rolled()
        if rolled:
            self.hosted_by.in_background(flush_rolled, log_, rolled, log_.recovery_generation)
        deleted = log_.take_deleted()
        if deleted:
            self.hosted_by.in_background(unlink_files, deleted)

    def cleanable(self, now: int):
        """This replica's dirt (cleaner.Cleanable) when its topic is compacted, else None. Leaders
        and followers clean their own copies (Kafka's rule). __transaction_state is compacted like
        any topic; __consumer_offsets keeps its group coordinator's own rewrite, and
        __share_group_state is never compacted (a share-partition's state is a snapshot plus the
        updates after it, under keys a compaction would reduce to the last of each), whatever
        their cleanup.policy says."""
        if self.topic in (internal_topics.CONSUMER_OFFSETS, internal_topics.SHARE_GROUP_STATE):
            return None
        return self.core.cleanable(now)

    def plan_cleaning(self, dirt, now: int, io_max_bytes_per_second: float):
        return self.core.plan_cleaning(dirt, now_ms=now, io_max_bytes_per_second=io_max_bytes_per_second)

    def swap_cleaned(self, result) -> bool:
        """Put a round's segments in place (on the shard's loop, between two calls: produce and
        fetch never see half of it); the replaced files are unlinked on the I/O thread."""
        swapped = self.core.swap_cleaned(result)
        self._hand_over_files()
        return swapped

    def retention_tick(self, now: int) -> None:
        """Periodic (the shard's timer, every log.retention.check.interval.ms): delete what
        retention.ms / retention.bytes let go, once this replica has taken a write as leader."""
        if self.retention_wanted:
            self.core.retention_tick(now)
            self.replica.advance_log_start_offset(self.core.log_start_offset)
            self._hand_over_files()

    async def produce(self, blobs: list, leader_epoch: int, acks: int, timeout_ms: int) -> list:
        """Append each blob (one client request's record batch for this partition) in order; with
        acks=all answer once the high watermark passes them (min.insync.replicas permitting)."""
        results, required_offset = self.append(blobs, leader_epoch, acks)
        return await self.acknowledged(results, required_offset, timeout_ms)

    def append(self, blobs: list, leader_epoch: int, acks: int) -> tuple[list, int | None]:
        """`produce`'s first step, done before anything else runs (so the calls of one connection
        append in the order they came): the results, and the offset the high watermark must pass
        before acks=all answers (None: answer now)."""
        self.retention_wanted = True
        error = self.replica.check_produce(acks, leader_epoch)
        if error:
            return [self.core.error_result(error) for _ in blobs], None
        now = now_ms()
        results = [self.core.produce(memoryview(b), now_ms=now, leader_epoch=self.replica.leader_epoch) for b in blobs]
        self._say_storage_error()
        if not any(r.error_code == 0 for r in results):
            return results, None
        self._apply(self.replica.on_leader_append(self.core.log_end_offset, now))
        self._wake()  # followers long-poll for the log end
        # a duplicate's offsets lie below the log end too: waiting for the log end covers every blob
        return results, (self.core.log_end_offset if acks == ACKS_ALL else None)

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      committed: bool) -> tuple[list, int | None]:
        """WriteTxnMarkers' first step for this partition (as `append`): the transaction
        coordinator's COMMIT/ABORT marker appended now, and the offset the high watermark must
        pass before it is answered (markers are written as acks=all; None: answer now)."""
        self.retention_wanted = True
        error = self.replica.check_produce(ACKS_ALL)
        if error:
            return [self.core.error_result(error)], None
        now = now_ms()
        result = self.core.append_marker(producer_id, producer_epoch, coordinator_epoch, committed, now_ms=now,
                                         leader_epoch=self.replica.leader_epoch)
        self._say_storage_error()
        if result.error_code:
            return [result], None
        self._apply(self.replica.on_leader_append(self.core.log_end_offset, now))
        self._wake()
        return [result], self.core.log_end_offset

    def _say_storage_error(self) -> None:
        if self.core.storage_error is not None:  # (once per directory and cause: actors/storage_errors.py)
            storage_errors.write_failed(self.dir.parent, self.core.storage_error)
            self.core.storage_error = None

    async def acknowledged(self, results: list, required_offset: int | None, timeout_ms: int) -> list:
        """`produce`'s second step: the results once acks=all's replication is done (or failed)."""
        if required_offset is None:
            return results
        error = await self._await_replication(required_offset, timeout_ms)
        return [self.core.error_result(error) if error and r.error_code == 0 else r for r in results]

    async def _await_replication(self, required_offset: int, timeout_ms: int) -> int:
        waiter_id, error = self.replica.register_waiter(required_offset)
        if error is not None:
            return error
        future = self.waiters[waiter_id] = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(timeout_ms, 1) / 1000)
        except asyncio.TimeoutError:
            if self.replica.cancel_waiter(waiter_id):
                self.waiters.pop(waiter_id, None)
                return ErrorCode.REQUEST_TIMED_OUT
            return future.result() if future.done() else ErrorCode.REQUEST_TIMED_OUT

    def release_acks_waits(self) -> int:
        """Its broker's session lapsed (actors/gateway/broker_session.py): answer the acks=all
        produces waiting here NOT_LEADER_OR_FOLLOWER at once, so their producers go to the leader
        the controller may have named meanwhile instead of waiting out their request timeout.
        Returns how many were waiting."""
        effects = self.replica.release_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._apply(effects)
        return len(effects.released)

    async def fetch(self, offset: int, max_bytes: int, leader_epoch: int, isolation_level: int):
        error = self.replica.validate_leader_epoch(leader_epoch)
        if error:
            return self.core.fetch_error(error)
        return self.core.fetch(offset, max_bytes, isolation_level=isolation_level)

    async def fetch_slice(self, offset: int, max_bytes: int, leader_epoch: int, isolation_level: int):
        """``fetch`` for this node's gateway: where the records lie, not the bytes (zero copy)."""
        error = self.replica.validate_leader_epoch(leader_epoch)
        if error:
            return self.core.fetch_error(error)
        return self.core.fetch_slice(offset, max_bytes, isolation_level=isolation_level)

    async def replica_fetch(self, replica_id: int, current_leader_epoch: int, fetch_offset: int,
                            last_fetched_epoch: int, max_bytes: int):
        """A follower's fetch, as its leader answers it: (FetchAnswer, FileSlice or None). The
        records run to the log end, not the high watermark."""
        answer, effects = self.replica.handle_follower_fetch(
            FetchRequest(replica_id, current_leader_epoch, fetch_offset, last_fetched_epoch), now_ms())
        self._apply(effects)
        if answer.read_from is None:
            return answer, None
        return answer, self.core.log.slice(answer.read_from, max_bytes, min_one_batch=True)

    async def wait_for_data(self, offset: int, timeout_ms: int, replica: int = wire.WAIT_CONSUMER) -> bool:
        """True as soon as records at or beyond `offset` are readable (for a follower: written;
        for a read_committed consumer: below the last stable offset); False after timeout_ms."""
        return await self._wait_until(lambda: self.has_data(offset, replica), timeout_ms)

    def has_data(self, offset: int, replica: int = wire.WAIT_CONSUMER) -> bool:
        """Records at or beyond `offset` are readable (`replica`: one of wire.WAIT_*; True is a
        follower's fetch: written). A replica that is closing ends every wait: what is fetched from it next
        is refused with NOT_LEADER_OR_FOLLOWER, and the client goes to the new leader."""
        if self.closing:
            return True
        core = self.core
        if replica == wire.WAIT_READ_COMMITTED:
            return core.last_stable_offset > offset
        return (core.log_end_offset if replica else core.high_watermark) > offset

    async def list_offsets(self, timestamp: int, leader_epoch: int, isolation_level: int):
        error = self.replica.check_list_offsets(leader_epoch)
        if error:
            return error, -1, -1, -1
        error, offset, ts = self.core.list_offsets(timestamp, isolation_level=isolation_level)
        return error, offset, ts, self.replica.leader_epoch if error == 0 and offset >= 0 else -1

    def describe_producers(self) -> tuple[int, list]:
        """DescribeProducers: (error, the producers this leader's state knows, as ActiveProducer tuples);
        NOT_LEADER_OR_FOLLOWER where this replica does not lead (the gateway routes to leaders only)."""
        error = self.replica.validate_leader_epoch()
        if error:
            return error, []
        return ErrorCode.NONE, self.core.producers.active_producers()

    # ---- share groups: the share-partition leaders of this partition live here ----------------
    async def group_configs(self, group_id: str) -> dict:
        """The group's config overrides, asked of the controller (once per share-partition load)."""
        return await controller_client.call(self.spec["controller"], "group_configs", group_id,
                                            timeout_s=controller_client.socket_timeout_s(self.spec["broker_config"]))

    # Only the leader replica holds share-partition leaders: a request that reaches another
    # replica (its gateway's metadata was behind) is told so, and the client asks again.
    async def share_wait(self, group_id: str, timeout_ms: int) -> bool:
        if not self.replica.is_leader:
            return True  # let the share fetch that follows learn why
        return await self.shares.share_wait(group_id, timeout_ms)

    async def share_fetch(self, group_id: str, member_id: str, acks, max_records: int, batch_size: int,
                          max_bytes: int, fetch: bool = True, record_limit: bool = False, limits: list | None = None):
        if not self.replica.is_leader:
            return ShareFetchResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, NOT_LEADER_MESSAGE,
                                    ErrorCode.NOT_LEADER_OR_FOLLOWER, NOT_LEADER_MESSAGE)
        return await self.shares.share_fetch(group_id, member_id, acks=acks, max_records=max_records,
                                             batch_size=batch_size, max_bytes=max_bytes, fetch=fetch,
                                             record_limit=record_limit, limits=limits)

    async def share_acknowledge(self, group_id: str, member_id: str, acks,
                                limits: list | None = None) -> tuple[int, str | None]:
        if not self.replica.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, NOT_LEADER_MESSAGE
        return await self.shares.share_acknowledge(group_id, member_id, acks, limits)

    async def share_release(self, group_id: str, member_id: str) -> None:
        await self.shares.share_release(group_id, member_id)

    async def share_forget(self, group_id: str) -> None:
        """An admin changed this group's share state: drop the cached copy; the next fetch reloads."""
        self.shares.forget(group_id)

    async def delete_records(self, offset: int) -> tuple[int, int]:
        """Advance the log start offset to `offset` (DeleteRecords; coordinators prune with it);
        followers follow the leader's log start."""
        error = self.replica.validate_leader_epoch()
        if error:
            return error, -1
        result = self.core.delete_records(offset)
        self.replica.advance_log_start_offset(self.core.log_start_offset)
        return result

    async def delete_records_for_client(self, offset: int, leader_epoch: int = -1) -> tuple[int, int, str | None]:
        """A client's DeleteRecords for this partition, as Kafka's ReplicaManager answers it: (error, low
        watermark, message). Internal topics and compacted ones refuse; an offset past the high watermark is
        OFFSET_OUT_OF_RANGE; one at or below the log start changes nothing. Answered once this leader's log
        start moved (its followers follow at their next fetch; Kafka waits for them, up to the timeout)."""
        error = self.replica.validate_leader_epoch(leader_epoch)
        if error:
            return error, -1, None
        if self.spec.get("internal"):
            return ErrorCode.INVALID_TOPIC_EXCEPTION, -1, f"Cannot delete records of internal topic {self.topic}"
        if self.core.config.compacted:
            return (ErrorCode.POLICY_VIOLATION, -1, f"Records of partition {self.topic}-{self.partition} can not be "
                    f"deleted while the cleanup policy is {self.core.config.cleanup_policy}")
        error, low_watermark = await self.delete_records(offset)
        return error, low_watermark, None

    async def reconfigure(self, config) -> None:
        self.core.reconfigure(config)
        self.follower_throttled_replicas = str(getattr(config, "follower_throttled_replicas", "") or "")
        self.replica.config = self._replication_config(config)

    async def close(self) -> None:
        # before any await: this replica leads no more. The acks=all produces waiting here are answered now
        # (NOT_LEADER_OR_FOLLOWER: their producers go to the leader the controller named), and so is every
        # produce, fetch or share fetch that reaches it while it closes (its shard serves it until `close`
        # returns): a reassignment stops the replica that led until its move completed, and a produce
        # appended here then would wait for its request timeout (30 s), holding up every later answer on
        # its client's connection
        self.closing = True
        self._apply(self.replica.resign())
        self._wake()  # long polls waiting on it end now (their fetch is answered NOT_LEADER_OR_FOLLOWER)
        self._stop_following()
        self.shares.close()
        # after any checkpoint still queued (so the last one written is this one, and `delete`
        # removes a directory nothing writes to any more)
        await asyncio.wrap_future(self.hosted_by.in_background(save_high_watermark, self.dir, self.core.high_watermark))
        self.core.close()

    async def delete(self) -> None:
        """Close, then remove the partition's directory: renamed at once (`*-delete`, as Kafka
        renames a deleted partition's), removed on the host's I/O thread (a topic's gigabytes of
        cached segments take a while to free), or at the host's next start after a crash."""
        await self.close()
        doomed = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")
        try:
            self.dir.rename(doomed)
        except FileNotFoundError:
            return
        self.hosted_by.in_background(shutil.rmtree, doomed, True)
