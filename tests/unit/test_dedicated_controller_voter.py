"""The dedicated controller's voter (actors/controller/quorum_shell/voter.py): the metadata quorum's
single voter, run in the controller's own process with no peers, read and written through
QuorumMetadataLog's in-process calls. It elects itself, commits what it appends, and a controller
started again on the same directory reads every record it committed (a new epoch)."""
import asyncio
import random
import time

from actors.controller.quorum import QuorumConfig, RaftCore
from actors.controller.quorum_metadata import QuorumMetadataLog
from actors.controller.quorum_shell.settings import DEDICATED_CONTROLLER_ID
from actors.controller.quorum_shell.voter import LocalVoter, build_dedicated_voter


async def _controller_log(config, failures):
    node = build_dedicated_voter(config)
    run = asyncio.ensure_future(node.run())
    log = QuorumMetadataLog((DEDICATED_CONTROLLER_ID,), on_failure=failures.append, only=DEDICATED_CONTROLLER_ID,
                            local=LocalVoter(node))
    return node, run, log


async def _stop(node, run, log):
    log.close()
    node.stop()
    await asyncio.wait_for(run, 5)


def test_a_single_voter_elects_itself_commits_and_reads_it_all_after_a_restart(tmp_path):
    config = {"log.dirs": str(tmp_path)}

    async def scenario():
        failures = []
        node, run, log = await _controller_log(config, failures)
        started = time.monotonic()
        assert await log.open(timeout_s=10) == []
        first_open_s = time.monotonic() - started
        log.append([{"type": "cluster", "cluster_id": "c1"}])
        log.append([{"type": "topic", "n": i} for i in range(3)])
        await asyncio.wait_for(log.durable(log.appended), 5)
        status, settled = await LocalVoter(node).quorum_status()
        assert status.role == "leader" and status.leader_id == DEDICATED_CONTROLLER_ID and settled
        first_epoch = log.epoch
        await _stop(node, run, log)

        node, run, log = await _controller_log(config, failures)
        started = time.monotonic()
        records = await log.open(timeout_s=10)
        again_open_s = time.monotonic() - started
        assert records == [{"type": "cluster", "cluster_id": "c1"}] + [{"type": "topic", "n": i} for i in range(3)]
        assert log.epoch > first_epoch
        log.append([{"type": "topic", "n": 3}])
        await asyncio.wait_for(log.durable(log.appended), 5)
        await _stop(node, run, log)
        assert not failures
        return first_open_s, again_open_s

    first_open_s, again_open_s = asyncio.run(scenario())
    # the only voter elects itself at once (no election timeout to wait: no one else can win)
    assert first_open_s < 1 and again_open_s < 1, (first_open_s, again_open_s)
    assert (tmp_path / "__cluster_metadata-0" / "quorum-state").exists()


def test_the_only_voter_leads_at_its_first_tick_and_again_after_a_restart():
    core = RaftCore(7, QuorumConfig(voters=(7,)), now_ms=0, rng=random.Random(1))
    out = core.tick(0)
    assert core.status().role == "leader" and core.epoch == 1 and out.committed  # its LeaderChange
    again = RaftCore(7, QuorumConfig(voters=(7,)), now_ms=5, rng=random.Random(1), election=core.election_state,
                     log=list(core.log.batches_between(0, core.log.end_offset)))
    again.tick(5)
    assert again.status().role == "leader" and again.epoch == 2
