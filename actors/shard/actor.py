"""A shard: the Ray actor that hosts many partition replicas of one broker, as Redpanda hosts
thousands of partitions per core and Kafka's ReplicaManager hosts all of a broker's.

A Ray actor is a process (~50-70 MiB, a start of ~0.3-1 s, idle CPU of its own), so it is the
unit of hosting, not of logic: each hosted replica keeps its own cores, leadership and
share-partition leaders (actors/partition/actor.py's PartitionReplica, or a coordinator, as a plain
object here). The shard gives them one process; one data-path listener whose frames name their
partition; one mailbox for control calls (`call`, `call_many`); one replication timer and one
retention timer for all of them; and one replica fetcher per source broker for all its followers
of that broker (actors/partition/fetcher.py). Creating, deleting, leading and following a
partition are state changes in a shard, never a process start. When Ray restarts a shard it comes
back empty; the controller's supervisors host each of its replicas again (`host`), recovered from
its own files.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import os
import shutil
import time
import uuid
from typing import Any

from actors import log_to_stderr, storage_errors
from actors.partition.actor import remove_deleted_dirs
from actors.partition.fetcher import ReplicaFetchers
from actors.partition.listener import start_listener
from actors.local_socket import private_address, remove_stale_sockets, socket_dir
from actors.shard.hosted import ReplicaNotHosted
from actors.startup import start_unless_started

log = logging.getLogger("kray.shard")
REPLICATION_TICK_S = 0.25                  # ISR checks, AlterPartition resends, high watermark checkpoints
RETENTION_CHECK_INTERVAL_MS_DEFAULT = 300000  # log.retention.check.interval.ms
CLEANER_BACKOFF_MS_DEFAULT = 15000          # log.cleaner.backoff.ms
CLEANER_IO_MAX_BYTES_PER_SECOND_DEFAULT = 1.7976931348623157e308   # log.cleaner.io.max.bytes.per.second
TIMER_YIELD_EVERY = 64                     # replicas per timer step before the loop lets others run


LISTENER_NAME_SEPARATOR = "-"  # a listener's file is <pid>-shard-<broker>-<index>.sock


def _listener_pid(file_name: str) -> int | None:
    """The pid a shard listener's file name carries (what socket_dir() holds of others: None)."""
    pid, separator, rest = file_name.partition(LISTENER_NAME_SEPARATOR)
    return int(pid) if separator and pid.isdigit() and rest.startswith("shard-") else None


def _log_failure(future: concurrent.futures.Future, log_dir: str | None = None) -> None:
    if not future.cancelled() and future.exception() is not None:
        error = future.exception()
        if isinstance(error, OSError) and log_dir is not None:
            storage_errors.write_failed(log_dir, error)  # (said once per directory and cause)
        else:
            log.warning("a background write failed: %s", error)


class ShardActor:
    def __init__(self, broker_id: int, index: int, broker_config: dict[str, Any]):
        log_to_stderr()
        self.broker_id, self.index = broker_id, index
        self.frame_bytes_max = int(broker_config["socket.request.max.bytes"])
        self.replicas: dict[tuple[uuid.UUID, int], Any] = {}
        self.listener: asyncio.AbstractServer | None = None
        self.listening: asyncio.Future | None = None
        self.fetchers = ReplicaFetchers(broker_id, broker_config)
        self.retention_check_interval_s = int(broker_config.get(
            "log.retention.check.interval.ms", RETENTION_CHECK_INTERVAL_MS_DEFAULT)) / 1000
        self.timers: list[asyncio.Task] = []
        # the log cleaner of compacted topics: one thread per shard (Kafka: log.cleaner.threads per broker)
        self.cleaner_enabled = bool(broker_config.get("log.cleaner.enable", True))
        self.cleaner_backoff_s = int(broker_config.get("log.cleaner.backoff.ms", CLEANER_BACKOFF_MS_DEFAULT)) / 1000
        self.cleaner_io_max_bytes_per_second = float(broker_config.get("log.cleaner.io.max.bytes.per.second",
                                                                       CLEANER_IO_MAX_BYTES_PER_SECOND_DEFAULT))
        self.cleaner_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self.cleaner_rounds = 0   # rounds swapped in (tests and benchmarks read it)
        # one I/O thread for the replicas' checkpoint writes and their fsyncs (in order)
        self.io = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"shard-{index}-io")
        self.swept = False  # whether leftovers of deleted partitions were removed (at the first host)
        self.records_taken = asyncio.Event()  # set (and replaced) whenever a hosted replica takes records
        self.stopped = asyncio.Event()
        self.log_dir: str | None = None  # the broker's log directory (known at the first host)

    async def listen(self) -> str:
        """The shard's data-path listener (started once): every hosted replica is served on it."""
        self.listening = start_unless_started(self.listening, self._listen)
        return await asyncio.shield(self.listening)

    async def _listen(self) -> str:
        remove_stale_sockets(socket_dir(), _listener_pid)
        address = private_address(f"{os.getpid()}{LISTENER_NAME_SEPARATOR}shard-{self.broker_id}-{self.index}")
        if self.listener is None:
            self.listener = await start_listener(self.replicas.get, address, self.frame_bytes_max,
                                                 lambda: self.records_taken)
        return address

    def took_records(self) -> None:
        self.records_taken.set()
        self.records_taken = asyncio.Event()

    def in_background(self, fn, *args) -> concurrent.futures.Future:
        """Run fn(*args) on the shard's I/O thread, in the order handed over (see ReplicaHost)."""
        future = self.io.submit(fn, *args)
        future.add_done_callback(functools.partial(_log_failure, log_dir=self.log_dir))
        return future

    async def host(self, spec: dict[str, Any]) -> str:
        """Host the replica `spec` describes unless this shard does; answer where it listens."""
        from actors.shard.kinds import partition_class
        key = (spec["topic_id"], spec["partition"])
        self.log_dir = spec["log_dir"]
        if not self.timers:
            self.timers = [asyncio.get_running_loop().create_task(self._every(REPLICATION_TICK_S, "replication_tick")),
                           asyncio.get_running_loop().create_task(
                               self._every(self.retention_check_interval_s, "retention_tick"))]
            if self.cleaner_enabled:
                self.timers.append(asyncio.get_running_loop().create_task(self._clean_loop()))
        if not self.swept:  # what deleted partitions left when the broker last stopped
            self.swept = True
            self.in_background(remove_deleted_dirs, spec["log_dir"])
        if "follower_throttle_bytes_per_s" in spec:  # (the controller's current value, as of this host)
            self.fetchers.set_throttle(spec["follower_throttle_bytes_per_s"])
        if key not in self.replicas:
            try:
                self.replicas[key] = partition_class(spec["topic"])(spec, self)
            except OSError as e:  # its directory or files can't be made: the controller asks again
                storage_errors.write_failed(spec["log_dir"], e)
                raise
        return await self.replicas[key].listen()

    def set_replication_throttle(self, follower_bytes_per_s: float | None) -> None:
        """This shard's part of its broker's follower.replication.throttled.rate (None: no throttle)."""
        self.fetchers.set_throttle(follower_bytes_per_s)

    async def call(self, key: tuple[uuid.UUID, int], method: str, *args):
        """A control call (Ray) to one hosted replica: its method, awaited if it is a coroutine."""
        replica = self.replicas.get(key)
        if replica is None:
            raise ReplicaNotHosted(f"shard {self.broker_id}/{self.index} hosts no replica of {key}")
        result = getattr(replica, method)(*args)
        if inspect.isawaitable(result):
            result = await result
        if method in ("close", "delete"):
            self.replicas.pop(key, None)
        return result

    async def _every(self, interval_s: float, method: str) -> None:
        """One timer for all hosted replicas (not one per replica: 1,000 idle timers are what made
        idle replicas cost CPU). Each replica's turn is synchronous and short; the loop yields
        between replicas now and then, so that a long pass never holds up the data path."""
        while True:
            await asyncio.sleep(interval_s)
            now = time.time_ns() // 1_000_000
            for i, (key, replica) in enumerate(list(self.replicas.items())):
                if self.replicas.get(key) is not replica:
                    continue  # closed meanwhile
                try:
                    getattr(replica, method)(now)
                except Exception:
                    log.exception("%s of %s-%d failed", method, replica.topic, replica.partition)
                if i % TIMER_YIELD_EVERY == TIMER_YIELD_EVERY - 1:
                    await asyncio.sleep(0)
                    now = time.time_ns() // 1_000_000

    async def _clean_loop(self) -> None:
        """Kafka's LogCleaner thread, for the replicas of this shard: the dirtiest compacted
        replica (a record older than max.compaction.lag.ms first, then the highest dirty ratio at
        or above its min.cleanable.dirty.ratio) gets a round; the round's reading and writing
        runs on the cleaner's own thread, its swap on this loop between two calls, so produce
        and fetch go on meanwhile. Sleeps log.cleaner.backoff.ms when nothing is due."""
        self.cleaner_thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"shard-{self.index}-cleaner")
        while True:
            try:
                cleaned = await self.clean_dirtiest()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner round failed")
                cleaned = False
            await asyncio.sleep(0 if cleaned else self.cleaner_backoff_s)

    async def clean_dirtiest(self) -> bool:
        """One round for the dirtiest due replica; True when a round was swapped in."""
        from actors.partition.log import SWAP_DIR, build_cleaned
        now = time.time_ns() // 1_000_000
        best = None
        for i, (key, replica) in enumerate(list(self.replicas.items())):
            cleanable = getattr(replica, "cleanable", None)
            dirt = cleanable(now) if cleanable is not None else None
            if dirt is not None and dirt.due(replica.core.config.min_cleanable_dirty_ratio):
                rank = (dirt.max_lag_due, dirt.dirty_ratio)
                if best is None or rank > best[0]:
                    best = (rank, key, replica, dirt)
            if i % TIMER_YIELD_EVERY == TIMER_YIELD_EVERY - 1:
                await asyncio.sleep(0)
        if best is None:
            return False
        _, key, replica, dirt = best
        plan = replica.plan_cleaning(dirt, now, self.cleaner_io_max_bytes_per_second)
        if self.cleaner_thread is None:
            self.cleaner_thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"shard-{self.index}-cleaner")
        result = await asyncio.get_running_loop().run_in_executor(self.cleaner_thread, build_cleaned, plan)
        if result is None:
            return False
        if self.replicas.get(key) is not replica:   # closed or deleted meanwhile: the round is void
            shutil.rmtree(plan.directory / SWAP_DIR, ignore_errors=True)
            return False
        swapped = replica.swap_cleaned(result)
        if swapped:
            self.cleaner_rounds += 1
            stats = result.stats
            log.info("cleaned %s-%d: %d -> %d bytes, %d -> %d records in %.2f s (%.1f MB/s read)",
                     replica.topic, replica.partition, stats.bytes_read, stats.bytes_written, stats.records_read,
                     stats.records_written, result.elapsed_s,
                     stats.bytes_read / max(result.elapsed_s, 1e-6) / 1e6)
        return swapped

    async def call_many(self, calls: list[tuple[tuple[uuid.UUID, int], str, list]]) -> list[tuple[bool, Any]]:
        """Several control calls in one Ray call, in order ("host": `host(spec)`; any other: a
        replica's method): (True, result) or (False, why) each."""
        results = []
        for key, method, args in calls:
            try:
                result = await (self.host(*args) if method == "host" else self.call(key, method, *args))
                results.append((True, result))
            except Exception as e:
                results.append((False, f"{type(e).__name__}: {e}"))
        return results

    async def until_stopped(self) -> None:
        """Returns when this shard is closed; raises in the caller when its process dies, which is
        how the controller learns that Ray restarted it (and must have it host its replicas again)."""
        await self.stopped.wait()

    def hosted(self) -> list[tuple[uuid.UUID, int]]:
        return list(self.replicas)

    async def close(self) -> None:
        """Close every hosted replica (flushing its log)."""
        self.stopped.set()
        replicas, self.replicas = list(self.replicas.values()), {}
        await asyncio.gather(*(r.close() for r in replicas), return_exceptions=True)
        self.io.shutdown(wait=False)
        if self.cleaner_thread is not None:
            self.cleaner_thread.shutdown(wait=False)
        self.fetchers.close()
        for timer in self.timers:
            timer.cancel()
        if self.listener is not None:
            self.listener.close()
            for sock in self.listener.sockets:
                try:
                    os.unlink(sock.getsockname())
                except OSError:
                    pass
