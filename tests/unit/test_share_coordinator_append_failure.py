"""A share-state operation whose records cannot be appended leaves the share coordinator's state as it was,
without reloading the shard from the log, when nothing else was on its way to the log (issue 34 item 3). The
shell (actors/share_coordinator/actor.py) runs over a log that fails on demand; no Ray."""
import asyncio
import uuid
from types import SimpleNamespace

from actors.coordinator_log import CoordinatorLogError, ShardHost
from actors.share_coordinator.actor import ShareCoordinator
from protocol.errors import ErrorCode

G, T, P = "g", uuid.uuid4(), 0


class FlakyLog:
    """The coordinator's log: appends in order, or fails each append while `failing`; counts replays."""

    def __init__(self):
        self.records: list = []
        self.failing = False
        self.replays = 0

    async def append(self, records, transaction=None):
        await asyncio.sleep(0)
        if self.failing:
            raise CoordinatorLogError(ErrorCode.REQUEST_TIMED_OUT, "the append timed out")
        start = len(self.records)
        self.records += records
        return list(range(start, start + len(records)))

    async def replay(self, transactions=False):
        self.replays += 1
        return [(offset, key, value) for offset, (key, value) in enumerate(self.records)]


def coordinator() -> ShareCoordinator:
    c = ShareCoordinator.__new__(ShareCoordinator)   # the shell without its partition replica
    c.replica = SimpleNamespace(leader_epoch=1, is_leader=True)
    c.state_log = FlakyLog()
    c.snapshot_update_records_max = 500
    c.host = ShardHost(c.state_log, c._build)
    c.pruner = "not started in this test"
    c.appending = 0
    return c


def write(c, start_offset, batches, leader_epoch=1):
    return c.write_state(G, T, P, 1, leader_epoch, start_offset, batches)


async def replayed(c) -> dict:
    fresh = await c._build(await c.state_log.replay())
    return fresh.states()


def test_a_failed_append_reverts_the_operation_and_keeps_the_shard():
    async def run():
        c = coordinator()
        assert await c.initialize_state(G, T, P, 1, 0) == (0, None)
        assert await write(c, 0, [(0, 9, 2, 1)]) == (0, None)
        shard, before = c.shard, c.shard.states()
        c.state_log.failing = True
        error, message = await write(c, 5, [(5, 9, 2, 2)], leader_epoch=3)
        assert error == ErrorCode.COORDINATOR_NOT_AVAILABLE and "the append timed out" in message
        assert c.shard is shard and c.state_log.replays == 1, "the shard was not reloaded"
        assert shard.states() == before == await replayed(c), "the state is what the log holds"
        c.state_log.failing = False
        assert await write(c, 3, [(3, 9, 2, 1)], leader_epoch=2) == (0, None), "leader epoch 3 was never taken"
        assert shard.states() == await replayed(c)
        assert shard.state(G, T, P).start_offset == 3
    asyncio.run(run())


def test_a_failed_initialize_and_delete_revert_too():
    async def run():
        c = coordinator()
        c.state_log.failing = True
        assert (await c.initialize_state(G, T, P, 1, 0))[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert c.shard.state(G, T, P) is None
        c.state_log.failing = False
        assert await c.initialize_state(G, T, P, 1, 0) == (0, None)
        c.state_log.failing = True
        assert (await c.delete_state(G, T, P))[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert c.shard.state(G, T, P) is not None and c.shard.states() == await replayed(c)
    asyncio.run(run())


def test_with_other_appends_under_way_the_shard_is_rebuilt_from_the_log():
    """Two writes in one group commit: the second was computed on the first's state, so neither can be
    reverted alone; the shard is rebuilt from the log, as before."""
    async def run():
        c = coordinator()
        assert await c.initialize_state(G, T, P, 1, 0) == (0, None)
        c.state_log.failing = True
        results = await asyncio.gather(write(c, 0, [(0, 4, 2, 1)]), write(c, 0, [(5, 9, 2, 1)]))
        assert [e for e, _ in results] == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
        assert c.shard is None, "invalidated: the next operation replays the log"
        c.state_log.failing = False
        assert await write(c, 0, [(0, 1, 2, 1)]) == (0, None)
        assert c.state_log.replays == 2 and c.shard.states() == await replayed(c)
    asyncio.run(run())
