"""An OffsetCommit whose records cannot be appended leaves the committed offsets as they were, without reloading
the group shard from the log, when nothing else was on its way to the log (issue 34 item 3); with another append
under way the shard is rebuilt from the log, as before. The shell (actors/group_coordinator/actor.py) runs over a
log that fails on demand; no Ray."""
import asyncio
import itertools
import uuid
from types import SimpleNamespace

from actors.coordinator_log import CoordinatorLogError, ShardHost
from actors.group_coordinator.actor import GroupCoordinator
from actors.group_coordinator.groups import Groups
from protocol.errors import ErrorCode


class FlakyLog:
    """The coordinator's log: appends in order, or fails each append while `failing`; counts replays."""

    def __init__(self):
        self.records: list = []
        self.failing = False
        self.replays = 0

    @property
    def next_offset(self) -> int:
        return len(self.records)

    async def append(self, records, transaction=None):
        await asyncio.sleep(0)
        if self.failing:
            raise CoordinatorLogError(ErrorCode.REQUEST_TIMED_OUT, "the append timed out")
        self.records += records

    async def replay(self, transactions=False):
        self.replays += 1
        return [(offset, key, value, -1) for offset, (key, value) in enumerate(self.records)]


def coordinator() -> GroupCoordinator:
    c = GroupCoordinator.__new__(GroupCoordinator)   # the shell without its partition replica
    c.replica = SimpleNamespace(leader_epoch=1, is_leader=True)
    c.config = {}
    c.group_log = FlakyLog()
    c.host = ShardHost(c.group_log, c._build, transactions=True)
    c.image = "not needed by offset commits"
    c.tasks = ["not started in this test"]
    c.elected_ms, c.recent_markers, c.carried_sessions = 1, [], None
    c.waiting, c.calls, c.wake, c.appending = {}, itertools.count(1), asyncio.Event(), 0
    return c


def commit(c, group_id, offset, partition=0):
    return c.commit_offsets(group_id, "", None, -1, [("orders", partition, offset, -1, "")], 9)


async def offsets(c, group_id="g"):
    return [(t, p, v.offset) for t, p, v in c.shard.offsets.fetch(group_id, None)]


async def replayed(c) -> Groups:
    return await c._build(await c.group_log.replay(True))


def test_a_failed_offset_commit_is_reverted_and_the_shard_kept():
    async def run():
        c = coordinator()
        assert await commit(c, "g", 5) == [0]
        shard, before = c.shard, await offsets(c)
        c.group_log.failing = True
        assert await commit(c, "g", 9) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        assert await commit(c, "new", 1) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        assert c.shard is shard and c.group_log.replays == 1, "the shard was not reloaded"
        assert await offsets(c) == before == [("orders", 0, 5)]
        assert shard.group_type("new") is None, "the simple group the failed commit created is gone too"
        assert shard.list_groups() == (await replayed(c)).list_groups()
        c.group_log.failing = False
        assert await commit(c, "g", 7) == [0]
        assert await offsets(c) == [("orders", 0, 7)]
        assert (await replayed(c)).offsets.fetch("g", None) == shard.offsets.fetch("g", None)
    asyncio.run(run())


def test_with_another_append_under_way_the_shard_is_rebuilt_from_the_log():
    async def run():
        c = coordinator()
        assert await commit(c, "g", 5) == [0]
        shard = c.shard
        c.group_log.failing = True
        answers = await asyncio.gather(commit(c, "g", 6), commit(c, "g", 7, partition=1))
        assert answers == [[ErrorCode.COORDINATOR_NOT_AVAILABLE]] * 2
        assert c.shard is None or c.shard is not shard, "the shard was dropped"
        c.group_log.failing = False
        assert [(t, p, v.offset) for t, p, v in (await c._ready()).offsets.fetch("g", None)] == [("orders", 0, 5)]
        assert c.group_log.replays == 2
    asyncio.run(run())


def test_a_failed_delete_groups_or_offset_delete_is_reverted_and_the_shard_kept():
    """DeleteGroups and OffsetDelete change the groups only through their tombstones (groups.py): when those cannot
    be appended, their changes are taken back, the shard stays, and the log rebuilds the same groups."""
    async def run():
        c = coordinator()
        assert await commit(c, "g", 5) == [0] and await commit(c, "g", 6, partition=1) == [0]
        shard = c.shard
        c.group_log.failing = True
        assert await c.delete_offsets("g", [("orders", 0)]) == (0, [ErrorCode.COORDINATOR_NOT_AVAILABLE])
        assert await c.delete_groups(["g"]) == [("g", ErrorCode.COORDINATOR_NOT_AVAILABLE, None)]
        assert c.shard is shard and c.group_log.replays == 1, "the shard was not reloaded"
        assert await offsets(c) == [("orders", 0, 5), ("orders", 1, 6)] and shard.group_type("g") == "classic"
        assert shard.list_groups() == (await replayed(c)).list_groups()
        c.group_log.failing = False
        assert await c.delete_offsets("g", [("orders", 0)]) == (0, [0])
        assert await offsets(c) == [("orders", 1, 6)]
        assert await c.delete_groups(["g"]) == [("g", 0, None)]
        assert shard.group_type("g") is None and (await replayed(c)).group_type("g") is None
        assert c.group_log.replays == 1 + 2  # (the two `replayed` above)
    asyncio.run(run())


def test_a_group_changed_during_the_append_by_another_call_makes_the_shard_rebuild():
    """A call that changes the groups during the call (here a classic heartbeat) lands while a DeleteGroups' append
    is under way: when that append fails, its changes can no longer be taken back alone; the log rebuilds them."""
    async def run():
        c = coordinator()
        assert await commit(c, "g", 5) == [0]
        shard = c.shard
        c.group_log.failing = True
        deleted, heartbeat = await asyncio.gather(c.delete_groups(["g"]), c.heartbeat("other", 1, "m", None))
        assert deleted == [("g", ErrorCode.COORDINATOR_NOT_AVAILABLE, None)]
        assert c.shard is None or c.shard is not shard, "the shard was dropped"
        c.group_log.failing = False
        assert (await c._ready()).group_type("g") == "classic" and await offsets(c) == [("orders", 0, 5)]
        assert c.group_log.replays == 2
    asyncio.run(run())


def test_a_failed_alter_share_group_offsets_is_reverted_and_the_shard_kept():
    """AlterShareGroupOffsets creates an empty share group and marks its share-partitions initialized through its
    records: when they cannot be appended, the group is not there, and the shard stays."""
    async def run():
        c = coordinator()
        assert await commit(c, "g", 5) == [0]
        shard, orders = c.shard, uuid.uuid4()
        c.group_log.failing = True
        error, message = await c.share_offsets_altered("sg", {(orders, 0): "orders"})
        assert error == ErrorCode.COORDINATOR_NOT_AVAILABLE and "retry" in message
        assert c.shard is shard and c.group_log.replays == 1, "the shard was not reloaded"
        assert shard.group_type("sg") is None and shard.share.share_partitions("sg") == []
        c.group_log.failing = False
        assert await c.share_offsets_altered("sg", {(orders, 0): "orders"}) == (0, None)
        assert shard.share.share_partitions("sg") == [(orders, 0)]
        assert (await replayed(c)).share.persisted_state() == shard.share.persisted_state()
    asyncio.run(run())
