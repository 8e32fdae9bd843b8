"""What handlers see: the broker's identity and configs, the current metadata image, and typed
clients for the actors they call. Ray stays behind `RayPartitions` and `RayController`; tests may
hand handlers other implementations of the same methods.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np
import ray

from actors.gateway.coalesce import ProduceCoalescer


class PartitionClient(Protocol):
    async def produce(self, records: Any, *, leader_epoch: int, acks: int, timeout_ms: int) -> Any: ...
    async def fetch(self, offset: int, max_bytes: int, *, leader_epoch: int, isolation_level: int) -> Any: ...
    async def wait_for_data(self, offset: int, timeout_ms: int) -> bool: ...
    async def list_offsets(self, timestamp: int, *, leader_epoch: int, isolation_level: int) -> Any: ...


RELEASE = 2  # the ShareAcknowledge type that makes records Available again
CONTROLLER_RETRY_S = 30.0


def as_array(buf: Any) -> np.ndarray:
    """Hand record bytes to Ray as a numpy view: Ray moves it out of band, without pickling a copy."""
    return np.frombuffer(buf, dtype=np.uint8)


class RayPartition:
    __slots__ = ("handle", "coalescer")

    def __init__(self, handle):
        self.handle = handle
        self.coalescer = ProduceCoalescer(self._send)

    async def _send(self, blobs, leader_epoch, acks, timeout_ms):
        return await self.handle.produce.remote([as_array(b) for b in blobs], leader_epoch, acks, timeout_ms)

    async def produce(self, records, *, leader_epoch, acks, timeout_ms):
        return await self.coalescer.produce(records, leader_epoch=leader_epoch, acks=acks, timeout_ms=timeout_ms)

    async def fetch(self, offset, max_bytes, *, leader_epoch, isolation_level):
        return await self.handle.fetch.remote(offset, max_bytes, leader_epoch, isolation_level)

    async def wait_for_data(self, offset, timeout_ms):
        ref = self.handle.wait_for_data.remote(offset, timeout_ms)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise

    async def list_offsets(self, timestamp, *, leader_epoch, isolation_level):
        return await self.handle.list_offsets.remote(timestamp, leader_epoch, isolation_level)

    async def share_fetch(self, group_id, member_id, *, acks, max_records, batch_size, max_bytes, wait_ms, fetch,
                          record_limit=False):
        ref = self.handle.share_fetch.remote(group_id, member_id, acks, max_records, batch_size, max_bytes,
                                             wait_ms, fetch, record_limit)
        try:
            return await ref
        except asyncio.CancelledError:  # the answer went out without us: give back what this call acquires
            asyncio.ensure_future(self._release_unsent(ref, group_id, member_id))
            raise

    async def _release_unsent(self, ref, group_id, member_id):
        result = await ref
        if result.acquired:
            await self.handle.share_acknowledge.remote(group_id, member_id,
                                                       [(first, last, [RELEASE]) for first, last, _ in result.acquired])

    async def share_acknowledge(self, group_id, member_id, acks):
        return await self.handle.share_acknowledge.remote(group_id, member_id, acks)

    async def share_release(self, group_id, member_id):
        return await self.handle.share_release.remote(group_id, member_id)

    async def share_forget(self, group_id):
        return await self.handle.share_forget.remote(group_id)


class RayController:
    """Typed wrappers around the controller actor's methods. While Ray restarts the controller,
    calls are retried (with backoff, for up to CONTROLLER_RETRY_S) instead of failing the client's
    request; a create that did land before a crash then answers TOPIC_ALREADY_EXISTS, as in Kafka."""

    def __init__(self, handle, for_partition: tuple[uuid.UUID, int] | None = None):
        self.handle = handle
        self.for_partition = for_partition  # a partition leader's: its metadata images carry only its own handle

    async def _call(self, method: str, *args):
        deadline = time.monotonic() + CONTROLLER_RETRY_S
        delay_s = 0.1
        while True:
            try:
                return await getattr(self.handle, method).remote(*args)
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError):
                if time.monotonic() + delay_s > deadline:
                    raise
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)

    async def create_topic(self, name, num_partitions, replication_factor, configs, validate_only, assignments):
        return await self._call("create_topic", name, num_partitions, replication_factor, configs, validate_only,
                                assignments)

    async def delete_topic(self, name):
        return await self._call("delete_topic", name)

    async def create_partitions(self, name, count, validate_only):
        return await self._call("create_partitions", name, count, validate_only)

    async def alter_topic_configs(self, name, configs, incremental, validate_only):
        return await self._call("alter_topic_configs", name, configs, incremental, validate_only)

    async def alter_group_configs(self, group_id, configs, incremental, validate_only):
        return await self._call("alter_group_configs", group_id, configs, incremental, validate_only)

    async def topic_configs(self, name):
        return await self._call("topic_configs", name)

    async def allocate_producer_id(self):
        return await self._call("allocate_producer_id")

    async def ensure_internal_topic(self, name):
        return await self._call("ensure_internal_topic", name)

    async def wait_for_metadata(self, known_version, timeout_s):
        return await self._call("wait_for_metadata", known_version, timeout_s, self.for_partition)


@dataclass
class GatewayContext:
    broker_id: int
    config: dict[str, Any]
    controller: Any
    # (key, actor handle) -> a PartitionClient, or None where this front end must not serve it
    client_for: Callable[[tuple[uuid.UUID, int], Any], Any] = lambda key, handle: None
    metadata: Any = None  # actors.controller.actor.MetadataImage, replaced whole on each refresh
    advertised: list[tuple[int, int, int]] = field(default_factory=list)
    share_sessions: Any = None
    _clients: dict[tuple[uuid.UUID, int], Any] = field(default_factory=dict)
    _handles: dict[tuple[uuid.UUID, int], Any] = field(default_factory=dict)

    def __post_init__(self):
        from actors.gateway.share_sessions import ShareSessionCache
        self.share_sessions = ShareSessionCache(int(self.config.get("group.share.max.share.sessions", 2000)))

    def set_metadata(self, image) -> None:
        self.metadata = image
        clients = {}
        for key, handle in image.partition_actors.items():
            same = key in self._clients and self._handles.get(key) == handle
            clients[key] = self._clients[key] if same else self.client_for(key, handle)
        self._clients, self._handles = clients, dict(image.partition_actors)

    def partition(self, topic_id: uuid.UUID, index: int):
        return self._clients.get((topic_id, index))

    async def refresh_metadata(self) -> None:
        """Pull the controller's newest image now (after an admin change made through us)."""
        image = await self.controller.wait_for_metadata(-1, 0)
        if self.metadata is None or image.version >= self.metadata.version:
            self.set_metadata(image)
