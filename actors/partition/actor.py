"""The partition's Ray shell: owns one PartitionCore (log + producer state) for one topic-partition,
reads the clock, fences leader epochs, wakes long-polling fetches, and runs retention on a timer.

Its node's gateway reaches it over a Unix socket (listener.py: produce, fetch, share fetch...);
Ray calls are for control: listen, reconfigure, delete, admin reads.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from actors.partition.core import PartitionCore
from actors.partition.listener import start_listener
from actors.pipelined import unix_address
from actors.share_partition.actor import ShareLeaders
from actors.startup import start_unless_started
from protocol.errors import ErrorCode

log = logging.getLogger("kray.partition")
PARTITION_METADATA_FILE = "partition.metadata"
RETENTION_CHECK_INTERVAL_MS_DEFAULT = 300000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionActor:
    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.topic: str = spec["topic"]
        self.topic_id: uuid.UUID = spec["topic_id"]
        self.partition: int = spec["partition"]
        self.leader_epoch: int = spec["leader_epoch"]
        self.dir = Path(spec["log_dir"]) / f"{self.topic}-{self.partition}"
        self._claim_dir()
        self.core = PartitionCore.open(self.dir, spec["config"], now_ms=now_ms())
        self.data_arrived = asyncio.Event()
        self.retention_interval_s = spec.get("retention_check_interval_ms", RETENTION_CHECK_INTERVAL_MS_DEFAULT) / 1000
        self.retention_task: asyncio.Task | None = None
        self.listener: asyncio.AbstractServer | None = None
        self.listening: asyncio.Future | None = None
        self.shares = ShareLeaders(self, spec["broker_config"], spec["controller"])
        self.closed = asyncio.Event()

    async def listen(self) -> str:
        """Start the data-path listener for this node's gateway (once); return its address."""
        self.listening = start_unless_started(self.listening, self._listen)
        return await asyncio.shield(self.listening)

    async def _listen(self) -> str:
        address = unix_address(f"{os.getpid()}-{self.topic_id.hex[:12]}-{self.partition}")
        if self.listener is None:  # a retried attempt keeps the socket it already bound
            self.listener = await start_listener(self, address, int(self.spec["broker_config"]["socket.request.max.bytes"]))
        return address

    def node_id(self) -> str:
        """The Ray node this replica runs on (where placement really put it)."""
        import ray
        return ray.get_runtime_context().get_node_id()

    async def until_closed(self) -> None:
        """Returns when this actor closes; raises in the caller when the actor dies, which is how
        the controller learns that Ray restarted it (and must have it listen again)."""
        await self.closed.wait()

    def _claim_dir(self) -> None:
        """A directory left by a deleted topic of the same name is not ours: start empty."""
        marker = self.dir / PARTITION_METADATA_FILE
        if marker.exists() and marker.read_text().strip() != f"topic_id: {self.topic_id}":
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"topic_id: {self.topic_id}\n")

    def _fence(self, leader_epoch: int) -> int:
        if leader_epoch == -1 or leader_epoch == self.leader_epoch:
            return 0
        return ErrorCode.FENCED_LEADER_EPOCH if leader_epoch < self.leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH

    def _ensure_retention_timer(self) -> None:
        if self.retention_task is None:
            self.retention_task = asyncio.get_running_loop().create_task(self._retention_loop())

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_interval_s)
            try:
                self.core.retention_tick(now_ms())
            except Exception:
                log.exception("retention check of %s-%d failed", self.topic, self.partition)

    async def produce(self, blobs: list, leader_epoch: int, acks: int, timeout_ms: int) -> list:
        """Append each blob (one client request's record batch for this partition) in order."""
        self._ensure_retention_timer()
        fenced = self._fence(leader_epoch)
        if fenced:
            return [self.core.error_result(fenced) for _ in blobs]
        now = now_ms()
        results = [self.core.produce(memoryview(b), now_ms=now, leader_epoch=self.leader_epoch) for b in blobs]
        if any(r.error_code == 0 for r in results):
            self.data_arrived.set()
            self.data_arrived = asyncio.Event()
        return results

    async def fetch(self, offset: int, max_bytes: int, leader_epoch: int, isolation_level: int):
        fenced = self._fence(leader_epoch)
        if fenced:
            return self.core.fetch_error(fenced)
        return self.core.fetch(offset, max_bytes, isolation_level=isolation_level)

    async def fetch_slice(self, offset: int, max_bytes: int, leader_epoch: int, isolation_level: int):
        """``fetch`` for this node's gateway: where the records lie, not the bytes (zero copy)."""
        fenced = self._fence(leader_epoch)
        if fenced:
            return self.core.fetch_error(fenced)
        return self.core.fetch_slice(offset, max_bytes, isolation_level=isolation_level)

    async def wait_for_data(self, offset: int, timeout_ms: int) -> bool:
        """True as soon as records at or beyond `offset` are readable; False after timeout_ms."""
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while self.core.high_watermark <= offset:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.data_arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    async def list_offsets(self, timestamp: int, leader_epoch: int, isolation_level: int):
        fenced = self._fence(leader_epoch)
        if fenced:
            return fenced, -1, -1, -1
        error, offset, ts = self.core.list_offsets(timestamp, isolation_level=isolation_level)
        return error, offset, ts, self.leader_epoch if error == 0 and offset >= 0 else -1

    # ---- share groups: the share-partition leaders of this partition live here ----------------
    async def group_configs(self, group_id: str) -> dict:
        """The group's config overrides, asked of the controller (once per share-partition load)."""
        return await self.spec["controller"].group_configs.remote(group_id)

    async def share_wait(self, group_id: str, timeout_ms: int) -> bool:
        return await self.shares.share_wait(group_id, timeout_ms)

    async def share_fetch(self, group_id: str, member_id: str, acks, max_records: int, batch_size: int,
                          max_bytes: int, fetch: bool = True, record_limit: bool = False):
        return await self.shares.share_fetch(group_id, member_id, acks=acks, max_records=max_records,
                                             batch_size=batch_size, max_bytes=max_bytes, fetch=fetch,
                                             record_limit=record_limit)

    async def share_acknowledge(self, group_id: str, member_id: str, acks) -> tuple[int, str | None]:
        return await self.shares.share_acknowledge(group_id, member_id, acks)

    async def share_release(self, group_id: str, member_id: str) -> None:
        await self.shares.share_release(group_id, member_id)

    async def share_forget(self, group_id: str) -> None:
        """An admin changed this group's share state: drop the cached copy; the next fetch reloads."""
        self.shares.forget(group_id)

    async def delete_records(self, offset: int) -> tuple[int, int]:
        """Advance the log start offset to `offset` (DeleteRecords; coordinators prune with it)."""
        return self.core.delete_records(offset)

    async def reconfigure(self, config) -> None:
        self.core.reconfigure(config)

    async def close(self) -> None:
        self.closed.set()
        if self.retention_task:
            self.retention_task.cancel()
        self.shares.close()
        if self.listener:
            self.listener.close()
        self.core.close()

    async def delete(self) -> None:
        await self.close()
        shutil.rmtree(self.dir, ignore_errors=True)
