"""One metadata long poll per process, shared by the coordinators a shard hosts.

A group coordinator needs the metadata image (topics, each partition's leader replica, group
configs) and follows its changes. When each coordinator followed it on its own, every metadata
change cost the controller one image per leading coordinator in the cluster, and each shard
process one image per coordinator it hosts: at 300 topics of 6 partitions an image took a shard
about half a second to receive on an idle machine, and on a loaded one a new share group's first
heartbeat waited seconds for it. Now a process holds one `MetadataFollower` per controller (and
event loop), which asks once and tells every coordinator waiting for a change. It follows from the
first time it is asked until the process ends, as a gateway's front end does.
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from actors import controller_client

log = logging.getLogger("kray.metadata_follower")

METADATA_POLL_S = 10.0
RETRY_AFTER_S = 1.0  # after a failed long poll

# event loop -> controller's key -> its follower (a unit test's loop takes its followers with it)
_followers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


def _controller_key(controller: Any) -> Any:
    """Every copy of one controller handle (each hosted replica's spec unpickles its own) gives one key."""
    voters = getattr(controller, "voters", None)  # an ActiveController: whichever of the voters' controllers leads
    if voters is not None:  # (of its Ray cluster)
        return "voters", getattr(getattr(controller, "_handles", None), "cluster", ""), tuple(voters)
    actor_id = getattr(controller, "_actor_id", None)  # a Ray actor handle: the single controller
    return ("actor", actor_id.hex()) if actor_id is not None else ("object", id(controller))


def follower(controller: Any) -> "MetadataFollower":
    """This process's follower of `controller`'s metadata (made at the first ask)."""
    by_key = _followers.setdefault(asyncio.get_running_loop(), {})
    key = _controller_key(controller)
    if key not in by_key:
        by_key[key] = MetadataFollower(controller)
    return by_key[key]


class MetadataFollower:
    def __init__(self, controller: Any):
        self.controller = controller
        self.image = None
        self.changed = asyncio.Event()  # set (and replaced) at every new image
        self.first: asyncio.Future | None = None
        self.task: asyncio.Task | None = None

    async def current(self):
        """The latest image this process has (asked of the controller the first time)."""
        if self.image is None:
            if self.first is None or (self.first.done() and (self.first.cancelled()
                                                             or self.first.exception() is not None)):
                self.first = asyncio.ensure_future(controller_client.wait_for_metadata(self.controller, -1, 0))
            image = await asyncio.shield(self.first)
            if self.image is None:
                self._take(image)
        if self.task is None:
            self.task = asyncio.ensure_future(self._follow())
        return self.image

    async def other_than(self, version: int, timeout_s: float):
        """An image of another version than `version` once there is one, else after `timeout_s` the
        current one (as the controller's long poll answers)."""
        await self.current()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.image.version == version and loop.time() < deadline:
            try:
                await asyncio.wait_for(self.changed.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                break
        return self.image

    def offer(self, image) -> None:
        """An image a follower's user asked of the controller itself: taken if newer, so that no one
        waiting is handed an older one after it."""
        if self.image is None or image.version > self.image.version:
            self._take(image)

    def _take(self, image) -> None:
        self.image = image
        self.changed.set()
        self.changed = asyncio.Event()

    async def _follow(self) -> None:
        while True:
            try:
                image = await controller_client.wait_for_metadata(self.controller, self.image.version, METADATA_POLL_S)
                if image.version != self.image.version:  # (a restarted controller may count from lower)
                    self._take(image)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("metadata refresh failed: %s", e)
                await asyncio.sleep(RETRY_AFTER_S)
