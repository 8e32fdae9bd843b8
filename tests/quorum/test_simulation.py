"""The quorum simulation as a CI test: blocks of seeds (each replayable with `python -m tests.quorum
--seed S --steps N -v`), the liveness scenarios, and the planted bugs it must catch. See
tests/quorum/world.py for the invariants; longer runs by hand: `python -m tests.quorum --seeds 0:5000`."""
import collections
import os

import pytest

from tests.quorum.breaks import BREAKS, broken
from tests.quorum.scenarios import SCENARIOS
from tests.quorum.world import InvariantViolation, LivenessViolation, Simulation, run_seed

# a longer soak: KRAY_QUORUM_SEEDS=5000 pytest tests/quorum
SEEDS = int(os.environ.get("KRAY_QUORUM_SEEDS", 200))
STEPS = int(os.environ.get("KRAY_QUORUM_STEPS", 2000))
BLOCK = 50
SCENARIO_SEEDS = 12
# A planted bug is caught within this many seeds from 0 ...
CATCH_WITHIN_SEEDS = 40
# ... except these, whose failure needs a rarer schedule: the seeds (2,000 steps) that show it, found
# with `python -m tests.quorum --seeds A:B --break RULE`. Seeds depend on the scheduler: when it
# changes, hunt again.
RARE_BREAK_SEEDS = {
    "hw_before_own_epoch": [164, 115],   # Raft's figure 8 needs leaders deposed at the right times: 4
    # seeds in 0..164; the rule is also pinned by
    # test_raft.py::test_the_high_watermark_is_what_a_majority_holds_once_it_covers_the_leaders_own_epoch
}


@pytest.mark.parametrize("first_seed", range(0, SEEDS, BLOCK))
def test_invariants_hold_and_the_quorum_recovers(first_seed):
    totals = collections.Counter()
    for seed in range(first_seed, first_seed + BLOCK):
        totals.update(run_seed(seed, STEPS).stats)
    # the block exercised what it claims to: elections lost and won, pre-votes refused, divergent
    # logs truncated, crashes (also mid-write) and restarts, partitions, drops and duplicates,
    # resignations, observers fetching, proposals committed, voter changes
    exercised = ("leaders", "resigned", "end_quorum_epoch", "pre_vote_granted", "pre_vote_refused", "vote_granted",
                 "vote_refused", "diverging_epochs", "truncations", "crashes", "crashes_mid_write", "restarts",
                 "partitions", "cut_off", "dropped", "duplicated", "fetch_FENCED_LEADER_EPOCH",
                 "fetch_NOT_LEADER_OR_FOLLOWER", "observer_fetches", "accepted", "acknowledged", "not_leader",
                 # KIP-853: voters added and removed (a leader too, which then resigned), changes
                 # refused while another was uncommitted or the new voter lagged
                 "voters_added", "voters_removed", "removed_leader_resigned", "voter_change_REQUEST_TIMED_OUT")
    assert [k for k in exercised if totals[k] == 0] == []
    assert totals["settled"] == BLOCK and totals["acknowledged"] > 10 * BLOCK


def test_a_seed_replays_exactly():
    first, second = run_seed(1234, STEPS), run_seed(1234, STEPS)
    assert list(first.timeline) == list(second.timeline)
    assert first.committed == second.committed and first.stats == second.stats
    assert [n.log for n in first.node_list] == [n.log for n in second.node_list]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_liveness_scenario(name):
    figures = collections.Counter()
    for seed in range(SCENARIO_SEEDS):
        figures.update(SCENARIOS[name](seed))
    assert figures[f"{name}_runs"] == SCENARIO_SEEDS


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_a_planted_bug_is_caught(rule):
    """The simulation can fail: each planted bug violates an invariant (or liveness) on some seed."""
    planted = BREAKS[rule]
    seeds = RARE_BREAK_SEEDS.get(rule, range(CATCH_WITHIN_SEEDS))
    with broken(rule) as options, pytest.raises(InvariantViolation) as caught:
        for seed in seeds:
            if planted.caught_by == "simulation":
                Simulation(seed, **options.get("simulation", {})).run(STEPS).settle()
            else:
                SCENARIOS[planted.caught_by](seed)
    message = str(caught.value)
    assert "replay: python -m tests.quorum " in message and "last steps:" in message
    if planted.caught_by != "simulation":
        assert isinstance(caught.value, LivenessViolation)


@pytest.mark.parametrize("seed", sorted({s for seeds in RARE_BREAK_SEEDS.values() for s in seeds}))
def test_rare_break_seeds_pass_unbroken(seed):
    """A seed that shows a planted bug must hold without it (else it shows something else)."""
    run_seed(seed, STEPS)
