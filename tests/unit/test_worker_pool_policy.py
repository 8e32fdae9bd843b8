"""The worker pool's scaling policy (cluster/workers/policy.py): what a pool of share-group workers
does as the lag and the handler time change, driven by a manual clock.

Numbers in the comments: r = records/s one worker finishes, T = seconds left to the backlog's
deadline (lag_target_s after the reading before the backlog was seen), S = a new worker's start-up."""
import pytest

from cluster.workers.policy import Observation, PolicyConfig, ScalingPolicy

NO_ARRIVAL = 1e9  # an arrival window so long that a burst adds nothing to the arrival rate


def policy(**overrides):
    config = dict(min_workers=1, max_workers=8, lag_target_s=10.0, target_utilization=1.0, arrival_window_s=60.0,
                  scale_up_cooldown_s=5.0, scale_down_window_s=30.0, scale_down_cooldown_s=10.0, smoothing=1.0,
                  start_time_s_initial=0.0)
    return ScalingPolicy(PolicyConfig(**(config | overrides)))


def step(p, now_s, lag, workers, records=0, handler_s=0.0, **more):
    return p.observe(Observation(now_s=now_s, lag=lag, records=records, handler_s=handler_s, workers=workers, **more))


# -- the need, planned against the deadline -------------------------------------------------------

def test_a_backlog_gets_enough_workers_to_drain_it_within_the_target():
    p = policy(arrival_window_s=NO_ARRIVAL)
    step(p, 0, lag=0, workers=1)
    # one worker finished 10 records in 1 s of handler time (0.1 s each) while 400 wait, seen 1 s
    # after the last reading: 400 in T = 9 s at r = 10: 5 workers
    d = step(p, 1, lag=400, workers=1, records=10, handler_s=1.0)
    assert p.handler_time_s == pytest.approx(0.1)
    assert d.desired == 5 and d.workers == 5


def test_a_large_backlog_gets_its_whole_need_in_one_decision():
    """Kafka-sized burst: 4,000 records of 20 ms on one worker, target 15 s. The need (way above +4)
    is granted at once: a step capped at +4 and then a cooldown would miss the target for sure."""
    p = ScalingPolicy(PolicyConfig(min_workers=1, max_workers=16, lag_target_s=15.0, start_time_s_initial=3.0))
    step(p, 0, lag=0, workers=1)
    d = step(p, 1, lag=4000, workers=1, records=20, handler_s=0.4)
    # r = 0.8 / 20 ms = 40/s; T = 14 s; 1 serving: 560; 3,440 (+ a little arrival) at 40 x 11 s each: 8 more
    assert d.desired >= 9 and d.workers == d.desired, d
    assert "scaling up" in d.reason


def test_start_up_time_counts_against_the_target():
    quick, slow = (policy(arrival_window_s=NO_ARRIVAL, start_time_s_initial=s) for s in (0.0, 4.0))
    for p in (quick, slow):
        step(p, 0, lag=0, workers=1, records=10, handler_s=1.0)
    # T = 9 s, r = 10: instant workers: 400 / 90 -> 5; workers that start in 4 s work 5 s each:
    # 1 serving does 90, 310 left / 50 per new worker -> 7 more
    assert step(quick, 1, lag=400, workers=1, records=10, handler_s=1.0).desired == 5
    assert step(slow, 1, lag=400, workers=1, records=10, handler_s=1.0).desired == 8


def test_the_measured_start_up_time_replaces_the_initial_one():
    p = policy(start_time_s_initial=5.0, smoothing=0.5)
    assert p.start_time_s == 5.0
    step(p, 0, lag=0, workers=1, started_s=(3.0,))
    assert p.start_time_s == pytest.approx(4.0)
    step(p, 1, lag=0, workers=1, started_s=(3.0, 3.0))
    assert p.start_time_s == pytest.approx(3.25)


def test_workers_still_starting_count_as_capacity_so_the_next_reading_does_not_ask_again():
    p = policy(arrival_window_s=NO_ARRIVAL, start_time_s_initial=4.0)
    step(p, 0, lag=0, workers=1, records=10, handler_s=1.0)
    assert step(p, 1, lag=400, workers=1, records=10, handler_s=1.0).workers == 8
    # a second later the 7 new ones are still starting (1 s of their 4 s) and the lag is down by 10:
    # they count for T - 3 s each; nothing more is asked for
    d = step(p, 2, lag=390, workers=8, records=10, handler_s=1.0, starting_s=(1.0,) * 7)
    assert d.workers == 8 and d.desired <= 8, d


def test_the_deadline_holds_while_the_backlog_waits():
    """The time a backlog already waited counts: the same lag 4 s later needs more workers (a
    horizon sliding with each reading would forgive the lost time and ask for the same)."""
    p = policy(arrival_window_s=NO_ARRIVAL, max_workers=20, scale_down_window_s=1.0)
    step(p, 0, lag=0, workers=1, records=10, handler_s=1.0)
    early = step(p, 1, lag=400, workers=1, records=10, handler_s=1.0).desired  # T = 9: 5
    late = step(p, 5, lag=400, workers=1, records=10, handler_s=1.0).desired   # T = 5: 8
    assert (early, late) == (5, 8)


def test_a_target_new_workers_cannot_reach_in_time_asks_for_every_worker_allowed():
    p = policy(arrival_window_s=NO_ARRIVAL, start_time_s_initial=4.0, lag_target_s=3.0)
    step(p, 0, lag=0, workers=1, records=10, handler_s=1.0)
    d = step(p, 1, lag=400, workers=1, records=10, handler_s=1.0)  # T = 2 s, a new worker starts in 4 s
    assert d.workers == 8 and "target missed" in d.reason


def test_a_late_lag_the_workers_there_finish_before_a_new_one_starts_does_not_fill_the_pool():
    p = policy(arrival_window_s=NO_ARRIVAL, start_time_s_initial=4.0, lag_target_s=3.0)
    step(p, 0, lag=0, workers=2, records=10, handler_s=1.0)
    d = step(p, 1, lag=60, workers=2, records=10, handler_s=1.0)  # T = 2 s; 2 x 10/s finish 60 in 3 s < 4 s
    assert d.desired == 2 and d.workers == 2, d  # not max_workers: new workers would come too late to help


def test_a_backlog_one_reading_can_finish_is_not_a_deadline():
    """In steady traffic the lag rarely reads 0 (records in flight count): a lag the pool finishes
    within a reading starts no deadline, so a busy pool is not pushed to max_workers by the clock."""
    p = policy(arrival_window_s=1.0)
    workers = 5
    for t in range(0, 60):  # 50/s arrive, 50 finished per second, 30 in flight at each reading
        workers = step(p, t, lag=30, workers=workers, records=50, handler_s=5.0).workers
    assert p.deadline_s is None and workers == 6  # 50/s at 10 each, plus the 30 within the target


# -- what one worker delivers --------------------------------------------------------------------

def test_the_measured_per_worker_rate_is_planned_when_below_the_handler_estimate():
    p = policy(arrival_window_s=NO_ARRIVAL, target_utilization=0.8, max_workers=32)
    step(p, 0, lag=5000, workers=4, records=0)
    # 4 workers busy throughout (lag >= what they finished) finished 100 records of 20 ms in 1 s:
    # 25/s each, below 0.8 / 20 ms = 40/s (polls, acknowledgements and a shared CPU cost the rest)
    d = step(p, 1, lag=4900, workers=4, records=100, handler_s=2.0, warm_records=100, warm_workers=4)
    assert p.worker_rate == pytest.approx(25.0) and p.planned_worker_rate() == pytest.approx(25.0)
    # T = 9 s: 4,900 at 25/s: 21.8 workers
    assert d.desired == 22


def test_a_measured_rate_above_the_handler_estimate_keeps_the_headroom():
    p = policy(target_utilization=0.8)
    step(p, 0, lag=5000, workers=2)
    step(p, 1, lag=4900, workers=2, records=100, handler_s=2.0, warm_records=100, warm_workers=2)  # 50/s each
    assert p.worker_rate == pytest.approx(50.0) and p.planned_worker_rate() == pytest.approx(40.0)


@pytest.mark.parametrize("lags", [(0, 400), (400, 0), (30, 20)])
def test_the_per_worker_rate_is_measured_only_while_workers_are_kept_busy(lags):
    """Before the backlog, after it, or with less waiting than was done, workers were idle part of
    the time: their throughput says nothing about their capacity."""
    p = policy()
    step(p, 0, lag=lags[0], workers=2)
    step(p, 1, lag=lags[1], workers=2, records=40, handler_s=0.4, warm_records=40, warm_workers=2)
    assert p.worker_rate is None


def test_workers_also_keep_up_with_what_keeps_arriving():
    p = policy(arrival_window_s=1.0)
    workers = 1
    for t in range(0, 30):  # no lag, yet 50 records/s finished: 50/s arrive; at 0.1 s each, 5 workers
        workers = step(p, t, lag=0, workers=workers, records=50, handler_s=5.0).workers
    assert p.arrival_rate == pytest.approx(50)
    assert workers == 5


def test_a_burst_counts_as_backlog_not_as_a_lasting_arrival_rate():
    p = policy(lag_target_s=10.0, arrival_window_s=60.0, max_workers=20)
    step(p, 0, lag=0, workers=1, records=10, handler_s=1.0)
    d = step(p, 1, lag=1000, workers=1, records=10, handler_s=1.0)  # 1000 at once: drained in T = 9 s at 10/s
    assert p.arrival_rate < 20, "a burst is not a lasting arrival rate"
    assert 12 <= d.desired <= 13, "the burst is drained within lag_target_s, not counted twice"


def test_target_utilization_leaves_headroom():
    p = policy(target_utilization=0.5, arrival_window_s=NO_ARRIVAL)
    step(p, 0, lag=0, workers=1)
    d = step(p, 1, lag=90, workers=1, records=10, handler_s=1.0)  # 90 in 9 s: 10/s, 5/s per worker at half load
    assert d.desired == 2


def test_a_configured_initial_handler_time_is_used_until_one_is_measured():
    p = policy(handler_time_s_initial=0.5)
    d = step(p, 0, lag=40, workers=1)  # 40 x 0.5 s / 10 s = 2 workers
    assert d.desired == 2 and d.workers == 2


# -- steps, cooldowns and bounds -----------------------------------------------------------------

def test_without_a_measured_handler_time_a_backlog_doubles_the_pool_or_adds_four():
    p = policy(max_workers=16, scale_up_cooldown_s=5.0)
    d = step(p, 0, lag=50, workers=1)  # nothing finished yet: the need is unknown
    assert p.handler_time_s is None and d.workers == 5  # +4 (doubling would be +1)
    assert step(p, 1, lag=50, workers=5).workers == 5, "a guessed step waits out the cooldown"
    assert step(p, 5, lag=50, workers=5).workers == 10  # doubling (+5) beats +4


def test_the_first_measurement_after_a_guessed_step_asks_for_the_rest_at_once():
    p = policy(max_workers=16, arrival_window_s=NO_ARRIVAL)
    assert step(p, 0, lag=900, workers=1).workers == 5
    # 1 s later, measured (0.1 s each): 890 in T = 9 s at 10/s: 10 workers, no cooldown for a measured need
    assert step(p, 1, lag=890, workers=5, records=10, handler_s=1.0).workers == 10


def test_scale_up_step_max_caps_each_step_and_spaces_steps_by_the_cooldown():
    p = policy(max_workers=6, scale_up_step_max=2)
    step(p, 0, lag=0, workers=1)
    d = step(p, 1, lag=100_000, workers=1, records=10, handler_s=1.0)
    assert d.desired > 6 and d.workers == 3  # a step of 2 at most
    assert step(p, 3, lag=100_000, workers=3, records=10, handler_s=1.0).workers == 3  # cooling down
    assert step(p, 10, lag=100_000, workers=3, records=10, handler_s=1.0).workers == 5
    assert step(p, 20, lag=100_000, workers=5, records=10, handler_s=1.0).workers == 6  # never above max_workers


def test_scale_down_waits_out_the_window_then_removes_one_worker_at_a_time():
    p = policy(scale_down_window_s=30.0, scale_down_cooldown_s=10.0, handler_time_s_initial=0.1,
               arrival_window_s=NO_ARRIVAL)
    assert step(p, 0, lag=400, workers=4).workers == 4  # 400 in 10 s at 10/s each
    assert step(p, 1, lag=360, workers=4, records=40, handler_s=4.0).workers == 4
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
    p = policy(scale_down_window_s=30.0, start_time_s_initial=3.0)
    step(p, 0, lag=0, workers=1)
    workers, moves = 1, []
    for t in range(1, 200):  # the lag swings between 0 and 300 every other second
        lag = 300 if t % 2 else 0
        d = step(p, t, lag=lag, workers=workers, records=10, handler_s=1.0)
        if d.workers != workers:
            moves.append("up" if d.workers > workers else "down")
        workers = d.workers
    # up once for the first backlog (new workers count for T - S only), then calmly down to what
    # serving workers need, never up again
    assert moves[0] == "up" and "up" not in moves[1:], moves
    assert len(moves) <= 5, f"{moves}: the pool flapped"


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
    (dict(start_time_s_initial=-1), "start_time_s_initial"),
    (dict(arrival_window_s=0), "arrival_window_s"),
])
def test_bad_settings_say_what_to_change(bad, says):
    with pytest.raises(ValueError, match=says):
        PolicyConfig(**bad)
