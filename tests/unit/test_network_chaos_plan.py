"""The network fault schedule (cluster/network_chaos.py) is a pure function of its seed:
replayable, one fault per host at a time, each healed by its own kind of step, and applied to
the hosts by the method that makes or heals that fault."""
import pytest

from cluster.network_chaos import FAULTS, HEAL, LATENCY, LOSS, ONE_WAY, SPLIT, NetStep, apply, plan


@pytest.mark.parametrize("seed", range(100))
def test_every_fault_is_healed_in_time_by_its_own_heal_and_never_two_at_once(seed):
    steps = plan(seed, [1, 2, 3], 300, mean_gap_s=4, down_s=(1, 20))
    assert steps and all(0 < s.at_s < 300 for s in steps)
    assert [s.at_s for s in steps] == sorted(s.at_s for s in steps)
    open_fault = None
    for s in steps:
        if s.action == HEAL:
            assert open_fault is not None and (s.host, s.fault, s.peer, s.probability) == \
                (open_fault.host, open_fault.fault, open_fault.peer, open_fault.probability)
            open_fault = None
        else:
            assert open_fault is None, f"{s} while {open_fault} is open"
            assert s.action == s.fault in FAULTS
            if s.fault == ONE_WAY:
                assert s.peer in (1, 2, 3) and s.peer != s.host
            if s.fault == LOSS:
                assert 0.05 <= s.probability <= 0.3
            open_fault = s
    assert open_fault is None


def test_the_same_seed_replays_and_seeds_differ_and_only_asked_faults_come():
    assert plan(7, [1, 2, 3], 120) == plan(7, [1, 2, 3], 120)
    assert len({tuple(plan(seed, [1, 2, 3], 120)) for seed in range(20)}) == 20
    assert {s.fault for s in plan(3, [1, 2, 3], 600, faults=(SPLIT,))} == {SPLIT}
    with pytest.raises(ValueError, match="must be among"):
        plan(1, [1, 2, 3], 60, faults=("jitter",))
    with pytest.raises(ValueError, match="two hosts"):
        plan(1, [1], 60, faults=(ONE_WAY,))


class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, a, k))


@pytest.mark.parametrize("fault,made,healed", [
    (NetStep(1, "isolate", 2, "isolate"), ("isolate", (2,), {}), ("heal", (2,), {})),
    (NetStep(1, "split", 1, "split"), ("split", (1,), {}), ("unsplit", (1,), {})),
    (NetStep(1, "one-way", 3, "one-way", peer=1), ("cut", (3, 1), {"both_ways": False}), ("uncut", (3, 1), {})),
    (NetStep(1, "loss", 2, "loss", probability=0.2), ("lose", (2, 0.2), {}), ("unlose", (2,), {})),
    (NetStep(1, "latency", 3, "latency", delay_ms=40), ("degrade", (3,), {"delay_ms": 40, "jitter_ms": 10}),
     ("restore", (3,), {})),
])
def test_each_fault_and_its_heal_call_the_hosts_methods_that_make_and_undo_it(fault, made, healed):
    hosts = Recorder()
    apply(hosts, fault)
    apply(hosts, NetStep(2, HEAL, fault.host, fault.fault, fault.peer, fault.probability, fault.delay_ms))
    assert hosts.calls == [made, healed]
    assert "h" in fault.describe()


def test_latency_comes_only_when_asked_and_leaves_the_default_schedules_as_they_were():
    steps = plan(5, [1, 2, 3], 600, faults=FAULTS + (LATENCY,))
    slow = [s for s in steps if s.fault == LATENCY and s.action != HEAL]
    assert slow and all(20 <= s.delay_ms <= 200 for s in slow)
    assert not any(s.fault == LATENCY for seed in range(20) for s in plan(seed, [1, 2, 3], 300))
    # seed 21's 60 s schedule, which tests/hosts/test_chaos_checked.py describes, is unchanged
    assert [(s.at_s, s.action, s.host, s.peer, s.probability) for s in plan(21, [1, 2, 3], 60, mean_gap_s=5,
                                                                             down_s=(4, 14)) if s.action != HEAL] == \
        [(0.901, ONE_WAY, 3, 2, None), (13.016, SPLIT, 3, None, None), (26.288, LOSS, 2, None, 0.204),
         (38.214, "isolate", 1, None, None)]  # as planned before latency existed
