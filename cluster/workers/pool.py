"""ShareWorkerPool: a handler run by a pool of Ray actors that share-consume a group, scaled
between min and max workers on the group's lag and the measured handler time.

    def handle(record):                       # a confluent_kafka.Message
        resize(record.value())                # return: ACCEPT; raise: RELEASE; poison: REJECT

    with ShareWorkerPool("127.0.0.1:9092", "thumbnails", ["images"], handle,
                         min_workers=1, max_workers=8, num_cpus=1, poison=(ValueError,)) as pool:
        ...
        print(pool.stats())                   # lag, rate, workers, handler time, errors

This module is the Ray shell: it starts and drains worker actors (worker.py), reads the lag over
the Kafka protocol (lag.py) and asks the pure policy (policy.py) how many workers to run. It speaks
only the Kafka protocol to the brokers, so it works against Apache Kafka 4.2+ as well as Kray.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import ray

from cluster.workers.lag import ShareGroupLag
from cluster.workers.policy import Observation, PolicyConfig, ScalingPolicy
from cluster.workers.worker import ShareWorker

log = logging.getLogger("kray.workers")
STATS_TIMEOUT_S_MAX = 1.0  # a worker still starting answers a later tick (its counts are cumulative)
HISTORY_MAX = 10_000
OUTCOMES = ("accepted", "released", "rejected")


@dataclass
class _Worker:
    name: str
    actor: Any
    run: Any                                 # the ObjectRef of its run()
    started_s: float
    seen: dict = field(default_factory=dict)  # its cumulative counts at the last tick
    draining_since_s: float | None = None
    asked_at: float = 0.0                    # wall clock (time.time()) when the pool asked for it
    measure_start: bool = False              # asked for with a backlog: its first records time its start-up
    first_records_at: float | None = None    # wall clock of its first fetched records (the worker's)
    warm: bool = False                       # serving, and its counts read, at the last tick


class ShareWorkerPool:
    def __init__(self, bootstrap_servers: str, group: str, topics: list[str] | str, handler: Callable[[Any], Any], *,
                 batch: bool = False, poison: tuple[type[BaseException], ...] = (),
                 min_workers: int = 1, max_workers: int = 4, num_cpus: float = 1, num_gpus: float = 0,
                 memory: int | None = None, client_config: dict[str, str] | None = None,
                 lag_target_s: float = 30.0, max_poll_records: int = 10, interval_s: float = 2.0,
                 drain_timeout_s: float = 60.0, record_lock_duration_ms: int | None = None, **policy: Any):
        """`handler(record)` per record, or `handler(records)` per polled batch with `batch=True`.
        `poison`: exception types that REJECT (archive) instead of RELEASE. `client_config`:
        librdkafka settings for the workers' ShareConsumers (security, for example), also used for
        the lag reads. `record_lock_duration_ms`: the group's lock duration (read with
        DescribeConfigs on start when not given), within which a worker finishes a poll's records or
        releases them. `policy`: more PolicyConfig fields (scale_up_cooldown_s, scale_down_window_s, ...)."""
        if isinstance(topics, str):
            topics = [topics]
        if not topics:
            raise ValueError("ShareWorkerPool needs at least one topic: pass topics=['orders']")
        if not callable(handler):
            raise TypeError(f"handler {handler!r} is not callable: pass a function taking a record")
        if not isinstance(poison, tuple) or not all(isinstance(p, type) and issubclass(p, BaseException)
                                                     for p in poison):
            raise TypeError(f"poison={poison!r}: pass a tuple of exception types, e.g. poison=(ValueError,)")
        if interval_s <= 0 or drain_timeout_s <= 0 or max_poll_records < 1:
            raise ValueError("interval_s and drain_timeout_s must be positive and max_poll_records at least 1")
        unknown = set(policy) - set(PolicyConfig.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown ShareWorkerPool options {sorted(unknown)}; policy options are "
                            f"{sorted(PolicyConfig.__dataclass_fields__)}")
        self.config = PolicyConfig(min_workers=min_workers, max_workers=max_workers, lag_target_s=lag_target_s,
                                   **policy)
        self.bootstrap_servers, self.group, self.topics = bootstrap_servers, group, list(topics)
        self.handler, self.batch, self.poison = handler, batch, poison
        self.client_config = dict(client_config or {})
        self.max_poll_records, self.interval_s, self.drain_timeout_s = max_poll_records, interval_s, drain_timeout_s
        self.record_lock_duration_ms = record_lock_duration_ms
        self.actor_options = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_concurrency": 4, "max_restarts": 0}
        if memory:
            self.actor_options["memory"] = memory
        self._actor_class = None  # ShareWorker made remote once, on start
        self.policy = ScalingPolicy(self.config)
        self.lag = ShareGroupLag(bootstrap_servers, group, self.topics, properties=self.client_config)
        self.history: deque[dict] = deque(maxlen=HISTORY_MAX)  # one stats() per tick, for plots
        self._workers: list[_Worker] = []
        self._draining: list[_Worker] = []
        self._totals = {k: 0 for k in (*OUTCOMES, "errors", "ack_errors", "lock_released")}
        self._starts_timed = 0  # start-ups measured (ask -> first records)
        self._stats: dict = {}
        self._last_error: str | None = None
        self._started_s = 0.0
        self._next_id = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "ShareWorkerPool":
        if self._thread is not None:
            raise RuntimeError("this ShareWorkerPool is already started")
        self._started_s = time.monotonic()
        if self.record_lock_duration_ms is None:
            self.record_lock_duration_ms = self.lag.record_lock_duration_ms()
        self._actor_class = ray.remote(ShareWorker).options(**self.actor_options)
        backlog = bool(self.config.min_workers and self.lag.read())  # then the first workers' start-up is timed
        for _ in range(self.config.min_workers):
            self._add_worker(measure_start=backlog)
        self._tick()
        self._thread = threading.Thread(target=self._loop, name=f"share-worker-pool-{self.group}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> dict:
        """Drain every worker (each finishes and acknowledges what it holds) and stop; the final stats."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for w in list(self._workers):
                self._drain(w)
        deadline = time.monotonic() + (self.drain_timeout_s if timeout_s is None else timeout_s)
        while self._draining and time.monotonic() < deadline:
            self._reap(wait_s=0.2)
        for w in self._draining:
            log.warning("worker %s did not drain within the timeout: killed", w.name)
            ray.kill(w.actor)
        self._draining.clear()
        self._publish(self.lag.read(), None)
        self.lag.close()
        return self.stats()

    def __enter__(self) -> "ShareWorkerPool":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what users read --------------------------------------------------------------------

    def stats(self) -> dict:
        """lag (records; None: unknown), rate (records/s), workers (serving; draining apart),
        handler_time_ms (per record), worker_rate (records/s one busy worker finished, measured
        while a backlog kept it busy; None until then), start_time_s (a new worker's start-up: from
        asking for it to its first fetched records, the initial guess until starts_timed > 0),
        accepted/released/rejected/errors/ack_errors (totals),
        lock_released (records released unhandled: their lock would have expired first),
        desired (what the policy asked for) and why, last_error (a worker's, with its name)."""
        with self._lock:
            return dict(self._stats)

    # -- the control loop -------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._tick()
            except Exception:  # the pool keeps running; the next tick tries again
                log.exception("share worker pool %s: a tick failed", self.group)

    def _tick(self) -> None:
        records, handler_s, warm_records, warm_workers, started_s = self._collect()
        self._reap(wait_s=0)
        lag = self.lag.read()
        now = time.time()
        starting_s = tuple(now - w.asked_at for w in self._workers if w.first_records_at is None)
        if lag == 0:  # a worker that finds nothing to fetch would time its start-up wrongly
            for w in self._workers:
                w.measure_start = False
        decision = self.policy.observe(Observation(
            now_s=time.monotonic() - self._started_s, lag=lag, records=records, handler_s=handler_s,
            workers=len(self._workers), starting_s=starting_s, started_s=started_s, warm_records=warm_records,
            warm_workers=warm_workers))
        with self._lock:
            while len(self._workers) < decision.workers:
                self._add_worker(measure_start=bool(lag))
            while len(self._workers) > decision.workers:
                self._drain(self._workers[-1])  # the newest goes first
        self._publish(lag, decision)

    def _add_worker(self, measure_start: bool = False) -> None:
        name = f"{self.group}-{self._next_id}"
        self._next_id += 1
        actor = self._actor_class.remote(
            self.bootstrap_servers, self.group, self.topics, self.handler, batch=self.batch, poison=self.poison,
            client_config=self.client_config, max_poll_records=self.max_poll_records, name=name,
            record_lock_duration_ms=self.record_lock_duration_ms)
        self._workers.append(_Worker(name, actor, actor.run.remote(), time.monotonic(), asked_at=time.time(),
                                     measure_start=measure_start))

    def _drain(self, w: _Worker) -> None:
        self._workers.remove(w)
        w.actor.drain.remote()
        w.draining_since_s = time.monotonic()
        self._draining.append(w)

    def _collect(self) -> tuple[int, float, int, int, tuple[float, ...]]:
        """Since the last tick, over every worker: records finished and handler seconds; the records
        finished by, and the number of, workers busy throughout (serving and read at the last tick
        too, not draining, and no poll came back empty in between: their throughput is what a worker
        can do here); the start-up times (ask -> first records) of workers asked for with a backlog
        that got their first records."""
        workers = list(self._workers) + list(self._draining)
        refs = [w.actor.stats.remote() for w in workers]
        timeout_s = min(STATS_TIMEOUT_S_MAX, self.interval_s / 2)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
        records, handler_s, warm_records, warm_workers, started_s = 0, 0.0, 0, 0, []
        for w, ref in zip(workers, refs):
            was_warm, w.warm = w.warm, False
            if ref not in ready:
                continue  # its counts come with a later tick, spanning more than one interval: not warm then
            before_empty = w.seen.get("empty_polls", 0)
            try:
                now = ray.get(ref)
                r, h = self._account(w, now)
            except ray.exceptions.RayError:
                continue  # a worker that died: _reap says why
            records, handler_s = records + r, handler_s + h
            if w.first_records_at is None and now.get("first_records_at"):
                w.first_records_at = now["first_records_at"]
                if w.measure_start:
                    started_s.append(w.first_records_at - w.asked_at)
                    self._starts_timed += 1
            if w.draining_since_s is None and w.first_records_at is not None:
                if was_warm and now.get("empty_polls", 0) == before_empty:  # busy all along: no empty poll
                    warm_records, warm_workers = warm_records + r, warm_workers + 1
                w.warm = True
        return records, handler_s, warm_records, warm_workers, tuple(started_s)

    def _account(self, w: _Worker, now: dict) -> tuple[int, float]:
        before = w.seen
        w.seen = now
        if now.get("last_error") and now["last_error"] != before.get("last_error"):
            self._last_error = f"{w.name}: {now['last_error']}"
        for k in self._totals:
            self._totals[k] += now.get(k, 0) - before.get(k, 0)
        records = sum(now[k] - before.get(k, 0) for k in OUTCOMES)
        return records, now["handler_s"] - before.get("handler_s", 0.0)

    def _reap(self, wait_s: float) -> None:
        """Workers whose run() ended: drained ones are done; others crashed and are replaced by
        the next tick's decision. A draining worker past drain_timeout_s is killed."""
        every = self._workers + self._draining
        if not every:
            return
        done, _ = ray.wait([w.run for w in every], num_returns=len(every), timeout=wait_s)
        for w in every:
            if w.run in done:
                try:
                    self._account(w, ray.get(w.run))
                except Exception as e:  # e.g. a consumer that cannot start: the next tick starts another
                    self._totals["errors"] += 1
                    self._last_error = f"{w.name} stopped: {e}"
                    log.warning("worker %s stopped: %s", w.name, e)
                with self._lock:
                    (self._workers if w in self._workers else self._draining).remove(w)
            elif w.draining_since_s is not None and time.monotonic() - w.draining_since_s > self.drain_timeout_s:
                log.warning("worker %s did not drain within %.0f s: killed", w.name, self.drain_timeout_s)
                ray.kill(w.actor)
                with self._lock:
                    self._draining.remove(w)

    def _publish(self, lag: int | None, decision) -> None:
        handler_time_s = self.policy.handler_time_s
        stats = {"time_s": round(time.monotonic() - self._started_s, 3), "lag": lag,
                 "rate": round(self.policy.rate or 0.0, 2), "workers": len(self._workers),
                 "draining": len(self._draining),
                 "handler_time_ms": None if handler_time_s is None else round(handler_time_s * 1000, 3),
                 "worker_rate": None if self.policy.worker_rate is None else round(self.policy.worker_rate, 2),
                 "start_time_s": round(self.policy.start_time_s, 3), "starts_timed": self._starts_timed,
                 **self._totals,
                 "desired": decision.desired if decision else None, "reason": decision.reason if decision else "stopped",
                 "lag_estimated": self.lag.estimated, "record_lock_duration_ms": self.record_lock_duration_ms,
                 "last_error": self._last_error}
        with self._lock:
            self._stats = stats
        self.history.append(stats)
        try:
            from actors import metrics
            metrics.record_worker_pool(self.group, stats)
        except Exception as e:  # metrics are a view: never stop the pool
            log.debug("worker pool metrics: %s", e)
