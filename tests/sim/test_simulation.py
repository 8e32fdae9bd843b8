"""The deterministic replication simulation, as a CI test: blocks of seeds, each replayable with
`python -m tests.sim --seed S --steps N -v`. See tests/sim/world.py for the invariants."""
import collections

import pytest

from tests.sim.breaks import BREAKS, broken
from tests.sim.world import InvariantViolation, Simulation

SEEDS = 2000
BLOCK = 100
STEPS = 600
# seeds beyond the CI block that once found a bug (each note says which); they run every time
REGRESSION_SEEDS = {
    5137: "an INVALID_UPDATE_VERSION answering a duplicate AlterPartition dropped an applied ISR expansion",
}


@pytest.mark.parametrize("first_seed", range(0, SEEDS, BLOCK))
def test_invariants_hold(first_seed):
    totals = collections.Counter()
    for seed in range(first_seed, first_seed + BLOCK):
        totals.update(Simulation(seed).run(STEPS).stats)
    # the block exercised what it claims to: failovers, divergence, acknowledged writes
    assert totals["acked"] > 0 and totals["leaders"] > BLOCK and totals["truncations"] > 0
    assert totals["crashes"] > 0 and totals["pauses"] > 0 and totals["dropped"] > 0 and totals["duplicated"] > 0


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS))
def test_regression_seeds(seed):
    Simulation(seed).run(STEPS)


def test_a_seed_replays_exactly():
    first, second = Simulation(1234).run(STEPS), Simulation(1234).run(STEPS)
    assert list(first.timeline) == list(second.timeline)
    assert first.metadata_log == second.metadata_log
    assert [b.log for b in first.brokers.values()] == [b.log for b in second.brokers.values()]
    assert first.stats == second.stats


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_a_broken_rule_is_caught(rule):
    """The simulation can fail: breaking any one of these rules violates an invariant on some seed."""
    with broken(rule):
        with pytest.raises(InvariantViolation) as caught:
            for seed in [*REGRESSION_SEEDS, *range(500)]:
                Simulation(seed).run(STEPS)
    message = str(caught.value)
    assert "replay: python -m tests.sim --seed" in message and "last steps:" in message


def test_unclean_election_can_lose_acknowledged_writes():
    """Kafka's warning, reproduced: with unclean.leader.election.enable an out-of-sync replica may
    lead, and acknowledged (or committed) records disappear. The same invariants catch it."""
    with pytest.raises(InvariantViolation) as caught:
        for seed in range(500):
            Simulation(seed, unclean_leader_election_enable=True).run(STEPS)
    assert "I2:" in str(caught.value) or "I3:" in str(caught.value)
