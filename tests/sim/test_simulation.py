"""The deterministic replication simulation, as a CI test: blocks of seeds, each replayable with
`python -m tests.sim --seed S --steps N -v`. See tests/sim/world.py for the invariants."""
import collections
import os

import pytest

from protocol.errors import ErrorCode
from tests.sim.breaks import BREAKS, broken
from tests.sim.fixed_bugs import divergent_follower_below_log_start
from tests.sim.world import InvariantViolation, Simulation

# a longer soak: KRAY_SIM_SEEDS=20000 KRAY_SIM_STEPS=1000 pytest tests/sim
SEEDS = int(os.environ.get("KRAY_SIM_SEEDS", 2000))
STEPS = int(os.environ.get("KRAY_SIM_STEPS", 600))
BLOCK = 100
# Breaks whose failure needs a long and rare schedule, with the seeds (1000 steps) that show it,
# found with `python -m tests.sim --seeds A:B --steps 1000 --break RULE`. Seeds depend on the
# scheduler: when it changes, hunt again.
RARE_BREAK_SEEDS: dict[str, list[int]] = {
    "controller_forgets_answers": [5452, 7275],  # 2 seeds in 16,000 (the rule is also pinned by
    # tests/unit/test_controller_elections.py::test_each_alter_partition_proposal_is_decided_once)
}
# Breaks no seed has shown yet; their rule is pinned by a unit test instead.
NOT_REACHED = {
    "forget_pending_isr_change_on_any_error":
        "needs an applied change whose answer dies with a controller restart, a retry answered "
        "INVALID_UPDATE_VERSION and a stalled new ISR member before metadata arrives: 0 of 30,000 "
        "seeds x 1,000 steps once the controller decides each proposal once; pinned by "
        "tests/unit/test_replication_core.py::test_an_error_that_may_follow_an_applied_change_keeps_the_maximal_isr",
}
RARE_BREAK_STEPS = 1000
# Seeds that showed bugs of the cores the simulation found, kept as regressions.
FIXED_CORE_BUGS = {
    # A follower whose last records were of an epoch the leader no longer held (DeleteRecords had
    # moved the leader's log start past them) was taken into the ISR at its stale log end, was
    # elected, and served a record never committed at an offset the partition had deleted. Now
    # the leader answers OFFSET_OUT_OF_RANGE and the follower starts over at the log start
    # (actors/partition/replication.py handle_follower_fetch). 12196: the same through a stale
    # fetch from before the follower's truncation.
    458: 1000,
    12196: 1000,
}


@pytest.mark.parametrize("first_seed", range(0, SEEDS, BLOCK))
def test_invariants_hold(first_seed):
    totals = collections.Counter()
    for seed in range(first_seed, first_seed + BLOCK):
        totals.update(Simulation(seed).run(STEPS).stats)
    # the block exercised what it claims to: failovers, divergence, acknowledged writes, ISR
    # changes, fenced and stale leaders, controller restarts
    exercised = ("acked", "truncations", "diverging_epochs", "isr_changes", "crashes", "restarts", "pauses",
                 "dropped", "duplicated", "stale_leader_appends", "alter_partition_FENCED_LEADER_EPOCH",
                 "controller_restarts", "preferred_elections", "consumed", "deleted_records",
                 # batched follower fetches: several partitions in one fetch, partitions moving
                 # between fetchers, answers dropped for partitions that left, stale answers the
                 # cores ignore, held (long-polled) fetches, refused partitions delayed alone
                 "batched_fetches", "fetcher_moves", "answers_dropped_left_fetcher", "stale_answers_ignored",
                 "held_fetches", "delayed_partitions", "fetch_request_errors")
    assert [k for k in exercised if totals[k] == 0] == []
    assert totals["leaders"] > BLOCK


@pytest.mark.parametrize("seed", sorted(FIXED_CORE_BUGS))
def test_fixed_core_bugs_stay_fixed(seed):
    Simulation(seed).run(FIXED_CORE_BUGS[seed])


def test_a_seed_replays_exactly():
    first, second = Simulation(1234).run(STEPS), Simulation(1234).run(STEPS)
    assert list(first.timeline) == list(second.timeline)
    assert first.metadata_log == second.metadata_log
    assert [[r.log for r in b.replicas.values()] for b in first.brokers.values()] == \
        [[r.log for r in b.replicas.values()] for b in second.brokers.values()]
    assert first.stats == second.stats


@pytest.mark.parametrize("seed", sorted({s for seeds in RARE_BREAK_SEEDS.values() for s in seeds}))
def test_rare_break_seeds_pass_unbroken(seed):
    """A seed that shows a break must hold without it (else it shows something else)."""
    Simulation(seed).run(RARE_BREAK_STEPS)


@pytest.mark.parametrize("rule", sorted(set(BREAKS) - set(NOT_REACHED)))
def test_a_broken_rule_is_caught(rule):
    """The simulation can fail: breaking any one of these rules violates an invariant on some seed."""
    seeds, steps = range(500), STEPS
    if rule in RARE_BREAK_SEEDS:
        seeds, steps = RARE_BREAK_SEEDS[rule], RARE_BREAK_STEPS
    with broken(rule):
        with pytest.raises(InvariantViolation) as caught:
            for seed in seeds:
                Simulation(seed).run(steps)
    message = str(caught.value)
    assert "replay: python -m tests.sim --seed" in message and "last steps:" in message


def test_unclean_election_can_lose_acknowledged_writes():
    """Kafka's warning, reproduced: with unclean.leader.election.enable an out-of-sync replica may
    lead, and acknowledged (or committed) records disappear. The same invariants catch it."""
    with pytest.raises(InvariantViolation) as caught:
        for seed in range(500):
            Simulation(seed, unclean_leader_election_enable=True).run(STEPS)
    assert "I2:" in str(caught.value) or "I3:" in str(caught.value)


def test_a_follower_with_records_of_a_deleted_epoch_starts_over_at_the_log_start():
    """tests/sim/fixed_bugs.py: seed 458's bug, step by step, now refused by the leader."""
    seen = divergent_follower_below_log_start()
    assert seen["committed_at_0"] == (1, "w16")
    assert seen["answer_error"] == ErrorCode.OFFSET_OUT_OF_RANGE and seen["proposed_isr"] is None
    assert seen["follower_log_start"] == 1 and seen["follower_log"] == []  # w6 is gone