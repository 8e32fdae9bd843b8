"""A seeded fault schedule for a LocalCluster: kill, restart, pause and resume broker nodes while
your application runs beside it, and print what was done when and how leadership moved.

    with LocalCluster(nodes=3) as cluster:
        cluster.chaos(seed=7, duration_s=120)      # or: kray chaos --nodes 3 --seed 7 --duration 120

The schedule is a pure function of the seed and the broker ids (`plan`), so a run that found a
problem is replayed by running the same seed again. Faults come one at a time by default
(`max_down=1`): with replication factor 3 and min.insync.replicas=2, that is what Kafka promises
to survive without losing an acknowledged write or stopping. Every fault is undone before the
schedule ends, so the cluster is whole again when `chaos` returns.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

KILL = "kill"                    # SIGKILL of the node's every process: a power cut
KILL_GRACEFUL = "kill-graceful"  # SIGTERM first: an orderly shutdown
PAUSE = "pause"                  # SIGSTOP: a stalled machine (GC pause, hung disk, frozen VM)
RESTART = "restart"
RESUME = "resume"
FAULTS = (KILL, KILL_GRACEFUL, PAUSE)
UNDO = {KILL: RESTART, KILL_GRACEFUL: RESTART, PAUSE: RESUME}


@dataclass(frozen=True)
class Step:
    at_s: float        # seconds after the schedule starts
    action: str        # one of FAULTS, RESTART, RESUME
    broker_id: int


def plan(seed: int, brokers: list[int], duration_s: float, *, faults: tuple[str, ...] = FAULTS,
         mean_gap_s: float = 8.0, down_s: tuple[float, float] = (3.0, 15.0), max_down: int = 1) -> list[Step]:
    """The schedule: a fault every ~mean_gap_s (exponentially distributed gaps) on a broker that
    is up, undone (restart / resume) after a time drawn from `down_s`, never more than `max_down`
    brokers down at once, and everything undone by `duration_s`."""
    unknown = set(faults) - set(FAULTS)
    if unknown or not faults:
        raise ValueError(f"faults must be among {', '.join(FAULTS)} (got {', '.join(sorted(unknown)) or 'none'})")
    steps: list[Step] = []
    for start_s, end_s, broker, fault in timeline(random.Random(seed), brokers, duration_s, faults,
                                                  mean_gap_s=mean_gap_s, down_s=down_s, max_down=max_down):
        steps.append(Step(start_s, fault, broker))
        steps.append(Step(end_s, UNDO[fault], broker))
    return sorted(steps, key=lambda s: (s.at_s, s.action not in UNDO.values()))


def timeline(rng: random.Random, targets: list[int], duration_s: float, faults: tuple[str, ...], *,
             mean_gap_s: float, down_s: tuple[float, float], max_down: int) -> list[tuple[float, float, int, str]]:
    """(start_s, end_s, target, fault) of each fault, drawn from `rng`: a fault every ~mean_gap_s
    (exponentially distributed gaps) on a target that has none, lasting a time drawn from
    `down_s`, never more than `max_down` at once, all over by `duration_s`. Shared by the
    process schedule here and the network schedule (cluster/network_chaos.py)."""
    if not targets or max_down < 1:
        raise ValueError("a schedule needs brokers and max_down >= 1")
    out = []
    down: dict[int, float] = {}  # target -> when its fault is undone
    t = 0.0
    while True:
        t += rng.expovariate(1.0 / mean_gap_s)
        for target, until in sorted(down.items(), key=lambda kv: kv[1]):
            if until <= t:
                del down[target]
        up = [b for b in sorted(targets) if b not in down]
        if len(down) >= max_down or not up:
            t = min(down.values())  # wait for a recovery, then draw the next gap from there
            continue
        recovery = t + rng.uniform(*down_s)
        if recovery >= duration_s:
            break
        target, fault = rng.choice(up), rng.choice(faults)
        out.append((round(t, 3), round(recovery, 3), target, fault))
        down[target] = recovery
    return out


def leaders(image) -> dict[str, str]:
    """'topic-partition' -> its leader as a chaos timeline shows it ('2', or 'offline (2)')."""
    out = {}
    for topic in image.topics.values():
        for p in topic.partitions:
            out[f"{topic.name}-{p.index}"] = str(p.leader) if p.leader in image.brokers else f"offline ({p.leader})"
    return out


class Stopped(Exception):
    """The schedule was asked to stop early (Ctrl-C): open faults are undone, then this is raised."""


def run(cluster, steps: list[Step], *, say: Callable[[str], None] = print, poll_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic, stop=None) -> None:
    """Carry out `steps` on `cluster` (kill_node / restart_node / pause_node / resume_node),
    saying each step and every leadership change it sees, with the time since the start.
    `stop`: a threading.Event that cuts the schedule short (open faults are undone first)."""
    start = clock()
    last = leaders(cluster.metadata())

    def stamp() -> str:
        return f"+{clock() - start:7.2f}s"

    def watch_until(at_s: float) -> None:
        nonlocal last
        while True:
            now = leaders(cluster.metadata())
            moved = [f"{tp} {last.get(tp, 'new')} -> {leader}" for tp, leader in sorted(now.items())
                     if last.get(tp) != leader]
            if moved:
                say(f"{stamp()} leadership: " + ", ".join(moved))
            last = now
            remaining = at_s - (clock() - start)
            if remaining <= 0:
                return
            if stop is not None and stop.wait(min(poll_s, remaining)):
                raise Stopped()
            if stop is None:
                time.sleep(min(poll_s, remaining))

    done: list[Step] = []
    try:
        for step in steps:
            watch_until(step.at_s)
            say(f"{stamp()} {step.action} broker {step.broker_id}")
            done.append(step)
            if step.action in (KILL, KILL_GRACEFUL):
                cluster.kill_node(step.broker_id, graceful=step.action == KILL_GRACEFUL)
            elif step.action == PAUSE:
                cluster.pause_node(step.broker_id)
            elif step.action == RESUME:
                if cluster.resume_node(step.broker_id):
                    say(f"{stamp()} broker {step.broker_id} had been declared dead while paused: restarted, "
                        f"serves clients again")
            else:
                cluster.restart_node(step.broker_id)
                say(f"{stamp()} broker {step.broker_id} serves clients again")
        watch_until((clock() - start) + poll_s)
    finally:
        for line in _undo_open_faults(cluster, done):
            say(f"{stamp()} {line}")


def _undo_open_faults(cluster, done: list[Step]) -> list[str]:
    """On an early exit (Ctrl-C, an error) leave no broker killed or paused."""
    state = {step.broker_id: step.action for step in done}
    lines = []
    for broker, action in sorted(state.items()):
        if action == PAUSE:
            cluster.resume_node(broker)
            lines.append(f"resume broker {broker} (schedule cut short)")
        elif action in (KILL, KILL_GRACEFUL):
            cluster.restart_node(broker)
            lines.append(f"restart broker {broker} (schedule cut short)")
    return lines
