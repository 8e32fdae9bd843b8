"""A seeded schedule of network faults on hosts of their own (cluster/hosts: KrayHosts), beside
the process schedule of cluster/chaos.py (same shape: a pure `plan` of the seed, then `run`).

    with KrayHosts(3) as hosts:
        steps = plan(seed=7, hosts=[1, 2, 3], duration_s=120)    # or: kray chaos --hosts 3 --seed 7
        run(hosts, steps)

Faults, one host at a time by default, each healed before the next on that host:

- isolate   the host's cable pulled: no other host and no client reaches it, both ways
- split     the host cut off from every other host (the controller's on h1, the other replicas)
            but not from the clients: a leader on the wrong side of a partition, still written to
- one-way   packets from the host to one other host are lost; the other way is not
- loss      the host's link loses a share of its packets, both ways (iptables' statistic match)
- latency   the host's link holds each packet delay ± delay/4 ms, both ways (HostNetwork.degrade:
            tc netem where the kernel has it, else the NFQUEUE delay relay,
            cluster/hosts/delay_relay.py); asked for by name (--faults ...,latency), not in the
            default set, so the default schedules of existing seeds replay unchanged
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

from cluster.chaos import Stopped, timeline

ISOLATE = "isolate"
SPLIT = "split"
ONE_WAY = "one-way"
LOSS = "loss"
LATENCY = "latency"
HEAL = "heal"
FAULTS = (ISOLATE, SPLIT, ONE_WAY, LOSS)        # the default schedule's
KNOWN_FAULTS = FAULTS + (LATENCY,)
NEEDS_IPTABLES = (LOSS,)


@dataclass(frozen=True)
class NetStep:
    at_s: float                       # seconds after the schedule starts
    action: str                       # one of FAULTS, or HEAL
    host: int                         # the host the fault is on (its index: host h2 is broker 2)
    fault: str                        # for HEAL: the fault it heals; else == action
    peer: int | None = None           # one-way: the host whose packets from `host` are lost
    probability: float | None = None  # loss: each packet's chance of being lost
    delay_ms: float | None = None     # latency: each packet's delay (± a quarter of it), each way

    def describe(self) -> str:
        what = {ISOLATE: f"isolate h{self.host}", SPLIT: f"split h{self.host} from the other hosts",
                ONE_WAY: f"one-way loss h{self.host}->h{self.peer}",
                LOSS: f"loss {100 * (self.probability or 0):.0f}% on h{self.host}'s link",
                LATENCY: f"latency {self.delay_ms or 0:g} ms ± {(self.delay_ms or 0) / 4:g} ms on h{self.host}'s link"}[self.fault]
        return what if self.action != HEAL else f"heal ({what})"


def plan(seed: int, hosts: list[int], duration_s: float, *, faults: tuple[str, ...] = FAULTS,
         mean_gap_s: float = 8.0, down_s: tuple[float, float] = (3.0, 15.0), max_down: int = 1,
         loss: tuple[float, float] = (0.05, 0.3), latency_ms: tuple[float, float] = (20.0, 200.0)) -> list[NetStep]:
    """The schedule: a pure function of its arguments (the same seed replays it). Timing and
    targets as cluster/chaos.plan; one-way's other host, loss's probability and latency's delay
    drawn after (each only for its own faults, so a schedule without latency is the one it was)."""
    unknown = set(faults) - set(KNOWN_FAULTS)
    if unknown or not faults:
        raise ValueError(f"network faults must be among {', '.join(KNOWN_FAULTS)} (got {', '.join(sorted(unknown)) or 'none'})")
    if ONE_WAY in faults and len(hosts) < 2:
        raise ValueError("one-way loss needs two hosts")
    rng = random.Random(seed)
    drawn = timeline(rng, hosts, duration_s, faults, mean_gap_s=mean_gap_s, down_s=down_s, max_down=max_down)
    steps = []
    for start_s, end_s, host, fault in drawn:
        peer = rng.choice([h for h in sorted(hosts) if h != host]) if fault == ONE_WAY else None
        probability = round(rng.uniform(*loss), 3) if fault == LOSS else None
        delay_ms = round(rng.uniform(*latency_ms)) if fault == LATENCY else None
        steps.append(NetStep(start_s, fault, host, fault, peer, probability, delay_ms))
        steps.append(NetStep(end_s, HEAL, host, fault, peer, probability, delay_ms))
    return sorted(steps, key=lambda s: (s.at_s, s.action != HEAL))


def apply(hosts, step: NetStep) -> None:
    """Make or heal `step`'s fault on `hosts` (a KrayHosts or a HostNetwork)."""
    heal = step.action == HEAL
    if step.fault == ISOLATE:
        (hosts.heal if heal else hosts.isolate)(step.host)
    elif step.fault == SPLIT:
        (hosts.unsplit if heal else hosts.split)(step.host)
    elif step.fault == ONE_WAY:
        if heal:
            hosts.uncut(step.host, step.peer)
        else:
            hosts.cut(step.host, step.peer, both_ways=False)
    elif step.fault == LOSS:
        if heal:
            hosts.unlose(step.host)
        else:
            hosts.lose(step.host, step.probability)
    elif step.fault == LATENCY:
        if heal:
            hosts.restore(step.host)
        else:
            hosts.degrade(step.host, delay_ms=step.delay_ms, jitter_ms=step.delay_ms / 4)
    else:
        raise ValueError(f"unknown fault {step.fault!r}")


def run(hosts, steps: list[NetStep], *, say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
        stop=None, on_step: Callable[[float, NetStep], None] | None = None) -> None:
    """Carry out `steps` on `hosts`, saying each with the time since the start; `on_step(t, step)`
    hears each once it is done (`t` from `clock`, read after its last command: records sent
    while a split's routes were still going in are not the fault's). Every fault is healed when
    this returns, also when `stop` (a threading.Event) cuts the schedule short (then Stopped is
    raised) or a step fails."""
    start = clock()
    try:
        for step in steps:
            remaining = step.at_s - (clock() - start)
            if remaining > 0:
                if stop is not None:
                    if stop.wait(remaining):
                        raise Stopped()
                else:
                    time.sleep(remaining)
            apply(hosts, step)
            now = clock()  # once the fault is whole: a split is several commands
            say(f"+{now - start:7.2f}s {step.describe()}")
            if on_step is not None:
                on_step(now, step)
    finally:
        hosts.heal_all()
