"""How many workers a share-group pool wants: a pure policy (no Ray, no clock), stepped with
what the pool measured and the time passed in.

The plan is a deadline. A backlog seen at a reading is to be drained `lag_target_s` after the
previous reading (its records may have waited since then): within the time left, T, the pool must
finish the lag plus what arrives meanwhile (arrival rate x T). A worker finishes `r` records per
second: the lesser of `target_utilization / handler time` (what the handler allows, with headroom
for polls and acknowledgements) and the throughput measured per busy worker (what this machine and
broker actually deliver, e.g. on two cores shared with the broker). Serving workers work for all of
T; a worker still starting works for T minus the rest of its start-up; a new worker works for T
minus the measured start-up time (from asking for a worker to its first fetched records: a Ray
actor's start plus a consumer joining the group). The workers wanted are the fewest that finish in
time; when new workers could not start before the deadline, every worker allowed (`max_workers`).
Without a backlog (lag 0), the workers that keep up with the arrival rate.

Scaling up asks for that whole need at once (workers still starting already count as capacity, so
the next reading does not ask again for them); `scale_up_step_max` optionally caps a step. Before
any handler time is measured the need is unknown: a backlog doubles the pool or adds 4 workers,
whichever is more, once per `scale_up_cooldown_s` (Kubernetes HPA's default scale-up policy:
100 % or 4 pods per period), and the first measurement asks for the rest. Scaling down waits out a
stabilization window (the most workers asked for in the last `scale_down_window_s` wins, as HPA's
scale-down stabilization does) and removes one worker per `scale_down_cooldown_s`, so a pool does
not flap on a noisy lag reading.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

UNMEASURED_STEP_MIN = 4  # while the need is unknown: double the pool or add this many (HPA's default)


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-6)  # a need of 2.0000000001 workers (float noise) is 2


@dataclass(frozen=True)
class PolicyConfig:
    min_workers: int = 1
    max_workers: int = 4
    lag_target_s: float = 30.0            # drain a backlog within this long of its first reading
    target_utilization: float = 0.8       # plan for workers this busy (headroom for polls and acks)
    scale_up_step_max: int | None = None  # workers added at most per decision (None: the whole need)
    scale_up_cooldown_s: float = 5.0      # between two limited steps (unmeasured need, or capped)
    scale_down_window_s: float = 30.0     # the most workers asked for in this window is kept
    scale_down_cooldown_s: float = 10.0   # between two removals
    handler_time_s_initial: float | None = None  # assumed per record before any is measured
    start_time_s_initial: float = 5.0     # assumed start of a new worker (ask -> first records) until measured
    smoothing: float = 0.3                # weight of a new reading in the moving averages
    arrival_window_s: float = 60.0        # time constant of the arrival-rate average: a burst counts
                                          # as backlog, and only a little (burst / window) as arrival

    def __post_init__(self):
        if self.min_workers < 0:
            raise ValueError(f"min_workers={self.min_workers}: use 0 or more")
        if self.max_workers < max(1, self.min_workers):
            raise ValueError(f"max_workers={self.max_workers} must be at least 1 and at least "
                             f"min_workers={self.min_workers}: raise max_workers or lower min_workers")
        if self.lag_target_s <= 0:
            raise ValueError(f"lag_target_s={self.lag_target_s}: use a positive number of seconds")
        if not 0 < self.target_utilization <= 1:
            raise ValueError(f"target_utilization={self.target_utilization}: use a fraction in (0, 1]")
        if self.scale_up_step_max is not None and self.scale_up_step_max < 1:
            raise ValueError(f"scale_up_step_max={self.scale_up_step_max}: use 1 or more, or None for no cap")
        if self.start_time_s_initial < 0:
            raise ValueError(f"start_time_s_initial={self.start_time_s_initial}: use 0 or more seconds")
        if self.arrival_window_s <= 0:
            raise ValueError(f"arrival_window_s={self.arrival_window_s}: use a positive number of seconds")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"smoothing={self.smoothing}: use a fraction in (0, 1]")


@dataclass(frozen=True)
class Observation:
    """One reading: the group's lag (None: unknown), the records the pool's workers finished and
    the seconds their handler ran since the last reading, and how many workers are serving.

    `starting_s`: how long each worker still starting (asked for, no records fetched yet; counted
    in `workers`) has been at it. `started_s`: start-up times (ask -> first fetched records) of the
    workers that got their first records since the last reading. `warm_records` / `warm_workers`:
    the records finished by, and the number of, workers busy throughout the interval (serving, and
    none of their polls came back empty): the per-worker throughput is measured on them, and only
    while the lag at both readings is at least what the pool finished in between."""
    now_s: float
    lag: int | None
    records: int
    handler_s: float
    workers: int
    starting_s: tuple[float, ...] = ()
    started_s: tuple[float, ...] = ()
    warm_records: int = 0
    warm_workers: int = 0


@dataclass(frozen=True)
class Decision:
    workers: int          # what the pool should run now
    desired: int          # what the plan asks for, before bounds, step and hysteresis
    reason: str


@dataclass
class ScalingPolicy:
    config: PolicyConfig
    handler_time_s: float | None = None       # per record, moving average
    rate: float | None = None                 # records finished per second, moving average
    arrival_rate: float = 0.0                 # records arriving per second, moving average over time
    worker_rate: float | None = None          # records/s one busy worker finished (measured), moving average
    start_time_s: float | None = None         # a new worker's start-up (ask -> first records), moving average
    deadline_s: float | None = None           # when the current backlog is to be drained
    _last: Observation | None = None
    _last_up_s: float = -math.inf
    _last_down_s: float = -math.inf
    _recent: deque = field(default_factory=deque)  # (now_s, desired) within the scale-down window
    _why: str = ""

    def __post_init__(self):
        if self.handler_time_s is None:
            self.handler_time_s = self.config.handler_time_s_initial
        if self.start_time_s is None:
            self.start_time_s = self.config.start_time_s_initial

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.config.smoothing * (new - old)

    def observe(self, o: Observation) -> Decision:
        last, c = self._last, self.config
        if o.records > 0:
            self.handler_time_s = self._average(self.handler_time_s, o.handler_s / o.records)
        for s in o.started_s:
            self.start_time_s = self._average(self.start_time_s, max(0.0, s))
        if last is not None and o.now_s > last.now_s:
            dt = o.now_s - last.now_s
            self.rate = self._average(self.rate, o.records / dt)
            if o.lag is not None and last.lag is not None:  # what came in = lag's growth + what went out
                weight = 1.0 - math.exp(-dt / c.arrival_window_s)
                self.arrival_rate += weight * ((o.lag - last.lag + o.records) / dt - self.arrival_rate)
                # busy throughout: more waiting at both readings than the pool finished in between
                if o.warm_workers > 0 and o.warm_records > 0 and min(last.lag, o.lag) >= o.records:
                    self.worker_rate = self._average(self.worker_rate, o.warm_records / dt / o.warm_workers)
        if o.lag is not None:
            if o.lag <= o.records:  # the pool finishes the lag within one reading: no backlog to plan for
                self.deadline_s = None
            elif self.deadline_s is None:  # a new backlog: its records may have waited since the last reading
                since = last.now_s if last is not None and last.lag is not None else o.now_s
                self.deadline_s = since + c.lag_target_s
        self._last = o
        desired = self.desired(o.lag, now_s=o.now_s, workers=o.workers, starting_s=o.starting_s)
        return self._bounded(o, desired)

    def planned_worker_rate(self) -> float | None:
        """Records/s to plan per worker: the handler's allowance, or the measured throughput when lower."""
        allowed = None if self.handler_time_s is None else \
            self.config.target_utilization / max(self.handler_time_s, 1e-9)
        rates = [r for r in (allowed, self.worker_rate) if r is not None and r > 0]
        return min(rates) if rates else None

    def desired(self, lag: int | None, now_s: float | None = None, workers: int = 0,
                starting_s: tuple[float, ...] = ()) -> int | None:
        """Workers for the current lag and arrival rate (None: unknown until a handler time is measured)."""
        c = self.config
        arrival_rate = max(0.0, self.arrival_rate)
        r = self.planned_worker_rate()
        if not lag and arrival_rate * (self.handler_time_s or 0.0) < 1e-3:
            self._why = "idle"
            return c.min_workers
        if r is None:
            self._why = "handler time not measured yet"
            return None
        if not lag:  # no backlog: keep up with what arrives
            self._why = f"keeping up with {arrival_rate:.0f} records/s at {r:.1f} each"
            return max(0, _ceil(arrival_rate / r))
        time_left_s = c.lag_target_s if self.deadline_s is None or now_s is None else self.deadline_s - now_s
        start_s = self.start_time_s
        work = lag + arrival_rate * max(0.0, time_left_s)
        starting = sorted(starting_s, reverse=True)[:workers]  # the longest started is the nearest ready
        warm = max(0, workers - len(starting))
        if time_left_s > 0 and warm * r * time_left_s >= work:
            self._why = f"{warm} serving drain it in time"
            return max(1, _ceil(work / (r * time_left_s)))
        capacity, n = warm * r * max(0.0, time_left_s), warm
        for age in starting:
            capacity += r * max(0.0, time_left_s - max(0.0, start_s - age))
            n += 1
            if capacity >= work:
                self._why = f"{n} (with {n - warm} starting) drain it in time"
                return n
        window_s = time_left_s - start_s  # what a worker asked for now can still work before the deadline
        if window_s <= 0:  # the target is missed whatever is asked for now
            if self._finish_within(start_s, lag, arrival_rate, r, warm, starting, start_s):
                self._why = f"target missed, but the {n} there finish before a new worker could start"
                return n
            self._why = (f"target missed: {max(0.0, time_left_s):.1f} s left, a worker starts in {start_s:.1f} s: "
                         f"all allowed")
            return c.max_workers
        self._why = f"{max(0.0, time_left_s):.1f} s left, start-up {start_s:.1f} s, {r:.1f} records/s per worker"
        return n + _ceil((work - capacity) / (r * window_s))

    @staticmethod
    def _finish_within(horizon_s: float, lag: int, arrival_rate: float, r: float, warm: int,
                       starting: list[float], start_s: float) -> bool:
        """Whether the workers there (serving, and starting ones once started) finish the lag and
        what arrives within horizon_s."""
        capacity = warm * r * horizon_s + sum(r * max(0.0, horizon_s - max(0.0, start_s - age)) for age in starting)
        return capacity >= lag + arrival_rate * horizon_s

    def _bounded(self, o: Observation, desired: int | None) -> Decision:
        c, now = self.config, o.now_s
        measured = desired is not None
        if not measured:  # a backlog, its need unknown: double or add UNMEASURED_STEP_MIN
            desired = o.workers + max(o.workers, UNMEASURED_STEP_MIN)
        target = min(c.max_workers, max(c.min_workers, desired))
        self._recent.append((now, target))
        while self._recent and self._recent[0][0] < now - c.scale_down_window_s:
            self._recent.popleft()
        current = o.workers
        if current < c.min_workers:
            return Decision(c.min_workers, desired, "below min_workers")
        if current > c.max_workers:
            return Decision(c.max_workers, desired, "above max_workers")
        if o.lag is None:
            return Decision(current, desired, "lag unknown: holding")
        if target > current:
            step = target - current
            limited = not measured or (c.scale_up_step_max is not None and step > c.scale_up_step_max)
            if limited and now - self._last_up_s < c.scale_up_cooldown_s:
                return Decision(current, desired, "scale-up cooldown (a limited step)")
            self._last_up_s = now
            if c.scale_up_step_max is not None:
                step = min(step, c.scale_up_step_max)
            why = self._why if measured else "handler time not measured: doubling"
            return Decision(current + step, desired, f"lag {o.lag}: scaling up ({why})")
        stable = max(t for _, t in self._recent)  # the most asked for within the window
        if stable < current:
            if now - max(self._last_down_s, self._last_up_s) < c.scale_down_cooldown_s:
                return Decision(current, desired, "scale-down cooldown")
            self._last_down_s = now
            return Decision(current - 1, desired, f"lag {o.lag}: scaling down")
        if target < current:
            return Decision(current, desired, "waiting out the scale-down window")
        return Decision(current, desired, "steady")
