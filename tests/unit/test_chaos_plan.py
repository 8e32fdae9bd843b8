"""The chaos schedule is a pure function of its seed: replayable, bounded, and always undone."""
import pytest

from cluster.chaos import FAULTS, KILL, PAUSE, RESTART, RESUME, UNDO, plan


def _down_over_time(steps):
    down, worst = set(), 0
    for step in steps:
        if step.action in FAULTS:
            assert step.broker_id not in down, f"{step}: broker already down"
            down.add(step.broker_id)
        else:
            assert step.broker_id in down, f"{step}: nothing to undo"
            down.discard(step.broker_id)
        worst = max(worst, len(down))
    return down, worst


@pytest.mark.parametrize("seed", range(200))
def test_every_fault_is_undone_in_time_and_never_more_than_max_down_at_once(seed):
    max_down = 1 + seed % 2
    steps = plan(seed, [1, 2, 3], 300, mean_gap_s=4, down_s=(1, 20), max_down=max_down)
    assert steps, "a five-minute schedule has faults"
    assert [s.at_s for s in steps] == sorted(s.at_s for s in steps)
    assert all(0 < s.at_s < 300 for s in steps)
    still_down, worst = _down_over_time(steps)
    assert not still_down and worst <= max_down
    for fault in (s for s in steps if s.action in FAULTS):  # each undone by its own kind of step
        undo = next(s for s in steps if s.broker_id == fault.broker_id and s.at_s >= fault.at_s
                    and s.action in (RESTART, RESUME))
        assert undo.action == UNDO[fault.action]


def test_the_same_seed_gives_the_same_schedule_and_seeds_differ():
    assert plan(7, [1, 2, 3], 120) == plan(7, [1, 2, 3], 120)
    assert len({tuple(plan(seed, [1, 2, 3], 120)) for seed in range(20)}) == 20


def test_only_the_asked_faults_happen():
    steps = plan(3, [1, 2, 3], 600, faults=(PAUSE,))
    assert {s.action for s in steps} == {PAUSE, RESUME}
    steps = plan(3, [1, 2, 3], 600, faults=(KILL,))
    assert {s.action for s in steps} == {KILL, RESTART}


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match="faults must be among"):
        plan(1, [1, 2, 3], 60, faults=("reboot",))
    with pytest.raises(ValueError):
        plan(1, [], 60)
