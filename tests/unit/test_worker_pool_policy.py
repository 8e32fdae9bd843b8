"""The worker pool's scaling policy (cluster/workers/policy.py): what a pool of share-group workers
does as the lag and the handler time change, driven by a manual clock."""
import pytest

from cluster.workers.policy import Observation, PolicyConfig, ScalingPolicy


def policy(**overrides):
    config = dict(min_workers=1, max_workers=8, lag_target_s=10.0, target_utilization=1.0, arrival_window_s=60.0, scale_up_step_max=8,
                  scale_up_cooldown_s=5.0, scale_down_window_s=30.0, scale_down_cooldown_s=10.0, smoothing=1.0)
    return ScalingPolicy(PolicyConfig(**(config | overrides)))


def step(p, now_s, lag, workers, records=0, handler_s=0.0):
    return p.observe(Observation(now_s=now_s, lag=lag, records=records, handler_s=handler_s, workers=workers))


def test_a_backlog_gets_enough_workers_to_drain_it_within_the_target():
    p = policy()
    step(p, 0, lag=0, workers=1)
    # one worker finished 10 records in 1 s of handler time (0.1 s each) while 400 wait:
    # draining 400 in 10 s takes 40 records/s, 10 per worker per second: 4 workers
    d = step(p, 1, lag=400, workers=1, records=10, handler_s=1.0)
    assert p.handler_time_s == pytest.approx(0.1)
    assert d.workers > 1 and d.desired >= 4


def test_workers_also_keep_up_with_what_keeps_arriving():
    p = policy(arrival_window_s=1.0)
    workers = 1
    for t in range(0, 30):  # no lag, yet 50 records/s finished: 50/s arrive; at 0.1 s each, 5 workers
        workers = step(p, t, lag=0, workers=workers, records=50, handler_s=5.0).workers
    assert p.arrival_rate == pytest.approx(50)
    assert workers == 5


def test_a_burst_counts_as_backlog_not_as_a_lasting_arrival_rate():
    p = policy(lag_target_s=10.0, arrival_window_s=60.0)
    step(p, 0, lag=0, workers=1, records=10, handler_s=1.0)
    d = step(p, 1, lag=1000, workers=1, records=10, handler_s=1.0)  # 1000 at once: 100/s drain 1000 in 10 s
    assert 10 <= d.desired <= 12, "the burst is drained within lag_target_s, not counted twice"


def test_target_utilization_leaves_headroom():
    p = policy(target_utilization=0.5)
    step(p, 0, lag=110, workers=1)
    d = step(p, 1, lag=100, workers=1, records=10, handler_s=1.0)  # 10/s needed, 5/s per worker at half load
    assert d.desired == 2


def test_scale_up_is_bounded_by_max_workers_and_the_step():
    p = policy(max_workers=6, scale_up_step_max=2)
    step(p, 0, lag=0, workers=1)
    d = step(p, 1, lag=100_000, workers=1, records=10, handler_s=1.0)
    assert d.desired > 6 and d.workers == 3  # a step of 2 at most
    d = step(p, 10, lag=100_000, workers=3, records=10, handler_s=1.0)
    assert d.workers == 5
    d = step(p, 20, lag=100_000, workers=5, records=10, handler_s=1.0)
    assert d.workers == 6  # never above max_workers


def test_scale_up_waits_for_the_cooldown_while_new_workers_start():
    p = policy(scale_up_step_max=1, scale_up_cooldown_s=5.0)
    step(p, 0, lag=0, workers=1)
    assert step(p, 1, lag=1000, workers=1, records=10, handler_s=1.0).workers == 2
    assert step(p, 3, lag=1000, workers=2, records=10, handler_s=1.0).workers == 2  # 2 s later: cooling down
    assert step(p, 6.5, lag=1000, workers=2, records=10, handler_s=1.0).workers == 3


def test_without_a_measured_handler_time_a_backlog_scales_up_by_the_step():
    p = policy(scale_up_step_max=2)
    d = step(p, 0, lag=50, workers=1)  # nothing finished yet: no handler time
    assert p.handler_time_s is None and d.workers == 3


def test_a_configured_initial_handler_time_is_used_until_one_is_measured():
    p = policy(handler_time_s_initial=0.5)
    d = step(p, 0, lag=40, workers=1)  # 40 x 0.5 s / 10 s = 2 workers
    assert d.desired == 2 and d.workers == 2


def test_scale_down_waits_out_the_window_then_removes_one_worker_at_a_time():
    p = policy(scale_down_window_s=30.0, scale_down_cooldown_s=10.0)
    step(p, 0, lag=440, workers=4)
    assert step(p, 1, lag=400, workers=4, records=40, handler_s=4.0).workers == 4  # 4 is what 400 needs
    decisions = [(t, step(p, t, lag=0, workers=4).workers) for t in range(2, 31)]
    assert all(w == 4 for _, w in decisions), "the backlog's 4 are kept within the 30 s window"
    workers, removals = 4, []
    for t in range(31, 120):
        d = step(p, t, lag=0, workers=workers)
        if d.workers < workers:
            removals.append(t)
        assert d.workers >= workers - 1, "one worker at a time"
        workers = d.workers
    assert workers == 1 and len(removals) == 3
    assert all(b - a >= 10 for a, b in zip(removals, removals[1:])), "a cooldown between removals"


def test_a_noisy_lag_does_not_make_the_pool_flap():
    p = policy(scale_down_window_s=30.0)
    step(p, 0, lag=0, workers=1)
    workers, changes, t = 1, 0, 1
    for t in range(1, 200):  # the lag swings between 0 and 300 every other second
        lag = 300 if t % 2 else 0
        d = step(p, t, lag=lag, workers=workers, records=10, handler_s=1.0)
        changes += d.workers != workers
        workers = d.workers
    assert changes <= 3, f"{changes} changes: the pool flapped"


def test_no_lag_and_nothing_arriving_settles_on_min_workers():
    p = policy(min_workers=2, scale_down_window_s=5.0, scale_down_cooldown_s=1.0)
    workers = 5
    for t in range(0, 60):
        workers = step(p, t, lag=0, workers=workers).workers
    assert workers == 2


def test_a_pool_below_min_or_above_max_is_brought_inside_at_once():
    p = policy(min_workers=2, max_workers=4)
    assert step(p, 0, lag=0, workers=0).workers == 2
    assert step(p, 1, lag=0, workers=7).workers == 4


def test_an_unknown_lag_holds_the_pool_as_it_is():
    p = policy()
    step(p, 0, lag=0, workers=3)
    d = step(p, 100, lag=None, workers=3)
    assert d.workers == 3 and "unknown" in d.reason


def test_min_workers_zero_lets_an_idle_pool_stop_and_a_backlog_start_it():
    p = policy(min_workers=0, scale_down_window_s=5.0, scale_down_cooldown_s=1.0, handler_time_s_initial=0.01)
    workers = 1
    for t in range(0, 20):
        workers = step(p, t, lag=0, workers=workers).workers
    assert workers == 0
    assert step(p, 21, lag=10, workers=0).workers == 1


def test_handler_time_is_a_moving_average_of_what_workers_report():
    p = policy(smoothing=0.5)
    step(p, 0, lag=0, workers=1, records=10, handler_s=1.0)   # 0.1 s each
    step(p, 1, lag=0, workers=1, records=10, handler_s=3.0)   # 0.3 s each
    assert p.handler_time_s == pytest.approx(0.2)
    step(p, 2, lag=0, workers=1)                               # nothing finished: unchanged
    assert p.handler_time_s == pytest.approx(0.2)
    assert p.rate == pytest.approx(5.0)  # 10/s, then 0/s, halfway each time


@pytest.mark.parametrize("bad, says", [
    (dict(min_workers=-1), "min_workers"),
    (dict(min_workers=5, max_workers=2), "raise max_workers"),
    (dict(max_workers=0, min_workers=0), "max_workers"),
    (dict(lag_target_s=0), "lag_target_s"),
    (dict(target_utilization=1.5), "target_utilization"),
    (dict(scale_up_step_max=0), "scale_up_step_max"),
    (dict(arrival_window_s=0), "arrival_window_s"),
])
def test_bad_settings_say_what_to_change(bad, says):
    with pytest.raises(ValueError, match=says):
        PolicyConfig(**bad)
