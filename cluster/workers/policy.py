"""How many workers a share-group pool wants: a pure policy (no Ray, no clock), stepped with
what the pool measured and the time passed in.

Workers needed = (arrival rate + backlog / lag_target_s) x handler time per record / target
utilization: enough to keep up with what arrives and drain the lag within `lag_target_s`. Scaling
up is bounded (at most `scale_up_step_max` workers per decision, then a cooldown while the new
workers start and join); scaling down waits out a stabilization window (the most workers asked for
in the last `scale_down_window_s` wins, as Kubernetes' HPA does) and removes one worker at a time,
so a pool does not flap on a noisy lag reading.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PolicyConfig:
    min_workers: int = 1
    max_workers: int = 4
    lag_target_s: float = 30.0            # drain a backlog within this long
    target_utilization: float = 0.8       # plan for workers this busy (headroom for polls and acks)
    scale_up_step_max: int = 4            # workers added at most per decision
    scale_up_cooldown_s: float = 5.0      # after adding workers: their start and first fetch
    scale_down_window_s: float = 30.0     # the most workers asked for in this window is kept
    scale_down_cooldown_s: float = 10.0   # between two removals
    handler_time_s_initial: float | None = None  # assumed per record before any is measured
    smoothing: float = 0.3                # weight of a new reading in the handler time and rate averages
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
        if self.scale_up_step_max < 1:
            raise ValueError(f"scale_up_step_max={self.scale_up_step_max}: use 1 or more")
        if self.arrival_window_s <= 0:
            raise ValueError(f"arrival_window_s={self.arrival_window_s}: use a positive number of seconds")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"smoothing={self.smoothing}: use a fraction in (0, 1]")


@dataclass(frozen=True)
class Observation:
    """One reading: the group's lag (None: unknown), the records the pool's workers finished and
    the seconds their handler ran since the last reading, and how many workers are serving."""
    now_s: float
    lag: int | None
    records: int
    handler_s: float
    workers: int


@dataclass(frozen=True)
class Decision:
    workers: int          # what the pool should run now
    desired: int          # what the formula asks for, before bounds, step and hysteresis
    reason: str


@dataclass
class ScalingPolicy:
    config: PolicyConfig
    handler_time_s: float | None = None       # per record, moving average
    rate: float | None = None                 # records finished per second, moving average
    arrival_rate: float = 0.0                 # records arriving per second, moving average over time
    _last: Observation | None = None
    _last_up_s: float = -math.inf
    _last_down_s: float = -math.inf
    _recent: deque = field(default_factory=deque)  # (now_s, desired) within the scale-down window

    def __post_init__(self):
        if self.handler_time_s is None:
            self.handler_time_s = self.config.handler_time_s_initial

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.config.smoothing * (new - old)

    def observe(self, o: Observation) -> Decision:
        last = self._last
        if o.records > 0:
            self.handler_time_s = self._average(self.handler_time_s, o.handler_s / o.records)
        if last is not None and o.now_s > last.now_s:
            dt = o.now_s - last.now_s
            self.rate = self._average(self.rate, o.records / dt)
            if o.lag is not None and last.lag is not None:  # what came in = lag's growth + what went out
                weight = 1.0 - math.exp(-dt / self.config.arrival_window_s)
                self.arrival_rate += weight * ((o.lag - last.lag + o.records) / dt - self.arrival_rate)
        self._last = o
        desired = self.desired(o.lag)
        return self._bounded(o, desired)

    def desired(self, lag: int | None) -> int:
        """Workers for the current lag and arrival rate at the measured handler time."""
        c = self.config
        arrival_rate = max(0.0, self.arrival_rate)
        if not lag and arrival_rate * (self.handler_time_s or 0.0) < 1e-3:
            return c.min_workers
        lag = lag or 0
        if self.handler_time_s is None:  # nothing measured yet: as many as the step allows
            return c.max_workers if lag else c.min_workers
        per_worker = c.target_utilization / max(self.handler_time_s, 1e-9)  # records/s one worker keeps up
        need = (arrival_rate + lag / c.lag_target_s) / per_worker
        return max(1 if lag else 0, math.ceil(need - 1e-9))

    def _bounded(self, o: Observation, desired: int) -> Decision:
        c, now = self.config, o.now_s
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
            if now - self._last_up_s < c.scale_up_cooldown_s:
                return Decision(current, desired, "scale-up cooldown")
            self._last_up_s = now
            return Decision(min(target, current + c.scale_up_step_max), desired, f"lag {o.lag}: scaling up")
        stable = max(t for _, t in self._recent)  # the most asked for within the window
        if stable < current:
            if now - max(self._last_down_s, self._last_up_s) < c.scale_down_cooldown_s:
                return Decision(current, desired, "scale-down cooldown")
            self._last_down_s = now
            return Decision(current - 1, desired, f"lag {o.lag}: scaling down")
        if target < current:
            return Decision(current, desired, "waiting out the scale-down window")
        return Decision(current, desired, "steady")
