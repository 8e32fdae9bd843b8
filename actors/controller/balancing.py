"""The balancer's shell side: every `kray.balancer.check.interval.ms` the controller asks the pure core
(actors/controller/balancer.py) for the next moves and carries them out as any AlterPartitionReassignments is
carried out (KIP-455: the joining replicas start, catch up and join the ISR, then the leaving ones stop), at
most `kray.balancer.max.moves.in.flight` at once, operators' moves included; it then elects preferred
leaders, and unregisters brokers that were drained.

What it balances: with `kray.balancer.enable`, replicas and preferred leaders over the brokers that serve
(registered, unfenced, their replicas listening: a broker that just joined counts once it serves), by count.
Brokers being removed (the dynamic broker config `kray.broker.draining`, which `kray remove-broker` sets, and
which the node watcher sets for a node Ray drains) are drained whether the balancer is enabled or not. A
drained broker (no partition places a replica on it) is retired: its gateway and shards stop, its node runs
no broker from then on, and the broker is unregistered from the metadata.

Throttle: with `kray.balancer.replication.throttled.rate` set, the balancer throttles its moves as kray
reassign-partitions --throttle does (both sides of Kafka's throttle: the moving partitions' current replicas in
leader.replication.throttled.replicas, the joining ones in follower.replication.throttled.replicas, the rate on
the brokers sending and receiving, except where the operator set one); it removes what it set once no move
runs. What it set is remembered by this controller only: after a
controller failover, entries it left are cleared by the next controller only when it throttles again
(`kray reassign-partitions --verify` or kray configs remove them too).

Load: with `kray.balancer.load.weights.enable`, every `kray.balancer.load.sample.interval.ms` (while balancing
or draining) it asks each broker that serves for the sizes on disk of the partitions it leads
(actors/controller/load_samples.py keeps them and the produce rates their growth gives), and the core weighs
each partition by them; without it (the default) the balance is by count.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from actors.controller import balancer
from actors.controller.elections import PREFERRED, reassigning
from actors.controller.load_samples import LoadSamples
from actors.controller.quorum_membership import Absences, next_voter_step

log = logging.getLogger("kray.controller")
LONG_MAX = 9223372036854775807
RETIRE_STOP_TIMEOUT_S = 10.0
# (the topic's throttled replica list, the brokers' rate) of each side of Kafka's replication throttle
LEADER_SIDE = ("leader.replication.throttled.replicas", "leader.replication.throttled.rate")
FOLLOWER_SIDE = ("follower.replication.throttled.replicas", "follower.replication.throttled.rate")
DRAINING = "kray.broker.draining"
SAMPLE_TIMEOUT_S = 10.0  # a broker that does not answer within this is left out of the sample
VOTER_CHANGE_TIMEOUT_MS = 10_000  # one AddRaftVoter/RemoveRaftVoter the balancer asks its own voter for


def _enabled(value: Any) -> bool:
    return str(value).lower() == "true"


def partition_loads(core, samples: LoadSamples | None = None) -> list[balancer.PartitionLoad]:
    """The partitions as the balancer sees them: a partition being moved with the replicas it ends with, and
    its size and produce rate where `samples` know them."""
    out = []
    for topic in core.topics.values():
        for p in topic.partitions:
            moving = reassigning(p)
            replicas = tuple(r for r in p.replicas if r not in p.removing) if moving else tuple(p.replicas)
            size, rate = samples.of((topic.name, p.index)) if samples is not None else (None, None)
            out.append(balancer.PartitionLoad(topic.name, p.index, replicas, p.leader, tuple(p.isr), moving,
                                              size_bytes=size, produce_bytes_per_s=rate))
    return out


class Balancing:
    def __init__(self, shell):
        self.shell = shell
        self.task: asyncio.Task | None = None
        self.throttled_entries: dict[tuple[str, str], set[str]] = {}  # (topic, key) -> "partition:broker" it added
        self.throttled_brokers: set[tuple[int, str]] = set()  # (broker, rate key) it set
        self.said: set[str] = set()  # stuck reasons said already
        self.retiring: set[int] = set()
        self.samples = LoadSamples(interval_s=30.0)  # (its interval is the config's at each sample)
        self.absences = Absences()  # since when each broker has not served (voters are replaced after a delay)

    @property
    def core(self):
        return self.shell.core

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def interval_s(self) -> float:
        return int(self.core.broker_config.get("kray.balancer.check.interval.ms", 5000)) / 1000

    def _sample_interval_s(self) -> float:
        return int(self.core.broker_config.get("kray.balancer.load.sample.interval.ms", 30000)) / 1000

    def _weighing(self) -> bool:
        """Whether partitions' sizes and rates are sampled and weighed (else the balance is by count)."""
        core = self.core
        return _enabled(core.broker_config.get("kray.balancer.load.weights.enable", False)) and (
            _enabled(core.broker_config.get("kray.balancer.enable", False))
            or bool(core.draining_brokers() & set(core.brokers)))

    async def sample(self) -> None:
        """Ask every broker that serves for the sizes of the partitions it leads (one Ray call each, at once);
        a broker that does not answer is left out."""
        now = time.monotonic()
        brokers = [(b, g) for b, g in self.shell.rec.gateways.items() if b in self.shell.rec.serving]
        answers = await asyncio.gather(*(asyncio.wait_for(_ask(g.led_partition_sizes.remote()), SAMPLE_TIMEOUT_S)
                                         for _, g in brokers), return_exceptions=True)
        sizes: dict[tuple[str, int], int] = {}
        for (broker_id, _), answer in zip(brokers, answers):
            if isinstance(answer, BaseException):
                log.info("balancer: broker %d did not say its partitions' sizes (%s)", broker_id,
                         type(answer).__name__)
                continue
            sizes.update(answer)
        self.samples.record(sizes, now)
        self.samples.forget_except({(t.name, p.index) for t in self.core.topics.values() for p in t.partitions})

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s())
            try:
                self.samples.interval_s = self._sample_interval_s()
                if self._weighing() and self.samples.due(time.monotonic()):
                    await self.sample()
                self.step()
                await self.keep_voters()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the balancer's step failed; trying again")

    # ---- the metadata quorum's voters --------------------------------------------------------
    def _vote_to_give_away(self, broker_id: int, enabled: bool, draining: set[int]) -> bool:
        """Whether drained `broker_id` still votes while keep_voters can give its vote to a broker that
        serves (then it retires after that change, not before: its voter stops with its gateway)."""
        status = self.shell.leadership.status
        if not enabled or self.shell.voter_id is None or status is None:
            return False
        voters = {v.replica_id for v in status.voters}
        observers = {o.replica_id for o in status.observers}
        takers = (set(self.shell.quorum_voters) & observers & set(self.shell.rec.serving)) - voters - draining
        return broker_id in voters and bool(takers)

    async def keep_voters(self) -> None:
        """With kray.balancer.enable and combined voters: three voters (one on a single broker) on brokers that
        serve, one AddRaftVoter/RemoveRaftVoter at a time through this controller's own voter, which leads
        (actors/controller/quorum_membership.py decides which). Brokers that may vote are those named in
        controller.quorum.voters (each runs a quorum node, an observer while it does not vote, and a
        controller); a voter whose broker has not served for kray.balancer.voter.replacement.delay.ms, or is
        being drained, is replaced by one of them that serves."""
        shell, config = self.shell, self.core.broker_config
        status = self.shell.leadership.status
        if shell.voter_id is None or status is None or status.role != "leader" or \
                not _enabled(config.get("kray.balancer.enable", False)):
            return
        voters = [v.replica_id for v in status.voters]
        eligible = set(shell.quorum_voters) & (set(voters) | {o.replica_id for o in status.observers})
        draining = self.core.draining_brokers()
        serving = (set(shell.rec.serving) & set(self.core.live_brokers())) - draining
        delay_s = int(config.get("kray.balancer.voter.replacement.delay.ms", 60000)) / 1000
        live = self.absences.live(set(voters) | eligible, serving, time.monotonic(), delay_s) - draining
        step = next_voter_step(voters, live, leader_id=status.leader_id, change_pending=False, eligible=eligible)
        if step is None:
            return
        gateway = shell.rec.gateways.get(shell.voter_id)
        if gateway is None:
            return
        shell._say(f"metadata quorum: {step.op} voter {step.broker_id} ({step.reason}; voters now "
                   f"{sorted(voters)})")
        try:
            error, message = await asyncio.wait_for(
                _ask(gateway.change_raft_voters.remote(step.op, step.broker_id, VOTER_CHANGE_TIMEOUT_MS)),
                VOTER_CHANGE_TIMEOUT_MS / 1000 + SAMPLE_TIMEOUT_S)
        except asyncio.TimeoutError:
            error, message = -1, "its voter did not answer"
        if error:
            log.warning("balancer: %s voter %d not done (%s: %s); asked again later", step.op, step.broker_id,
                        error, message)
        else:
            log.warning("balancer: voter %d %s (%s)", step.broker_id, "added" if step.op == "add" else "removed",
                        step.reason)

    # ---- one step ----------------------------------------------------------------------------
    def step(self) -> balancer.BalancePlan | None:
        core, rec = self.core, self.shell.rec
        config = core.broker_config
        draining = core.draining_brokers() & set(core.brokers)
        enabled = _enabled(config.get("kray.balancer.enable", False))
        if not enabled and not draining:
            self._clear_throttles()
            return None
        loads = partition_loads(core, self.samples if self._weighing() else None)
        eligible = [b for b in core.live_brokers() if b in rec.serving and b not in draining]
        down = sorted(b for b in core.brokers if b not in draining and b not in eligible)
        if enabled and down:  # (a broker fenced for a moment must not set off moves among the others)
            self._say_once(f"balancer: waits while broker{'s' if len(down) > 1 else ''} "
                           f"{', '.join(map(str, down))} {'are' if len(down) > 1 else 'is'} down or starting "
                           f"(drains go on)")
        elif not down:
            self.said = {t for t in self.said if not t.startswith("balancer: waits while")}
        result = balancer.plan(loads, eligible, draining, int(config.get("kray.balancer.max.moves.in.flight", 10)),
                               balance=enabled and not down)
        for reason in result.stuck:
            self._say_once(f"balancer: {reason}")
        if result.moves:
            self._throttle(result.moves, loads)
            topics: dict[str, list] = {}
            for move in result.moves:
                topics.setdefault(move.topic, []).append((move.partition, list(move.replicas)))
            answers, outcome = core.alter_partition_reassignments(list(topics.items()),
                                                                  allow_replication_factor_change=False)
            self.shell._persist(outcome)
            self.shell.supervision.follow_placements()
            failed = [f"{name}-{index}: {message}" for name, parts in answers for index, error, message in parts
                      if error]
            if failed:
                log.warning("balancer: moves refused: %s", "; ".join(failed))
            started = len(result.moves) - len(failed)
            log.info("balancer: %d reassignments started (%s)", started,
                     ", ".join(f"{m.topic}-{m.partition} -> {list(m.replicas)}" for m in result.moves[:10]))
        moving = any(p.moving for p in loads) or bool(result.moves)
        if result.elections and not moving:
            topics = {}
            for name, index in result.elections:
                topics.setdefault(name, []).append(index)
            _, outcome = core.elect_leaders(PREFERRED, list(topics.items()))
            self.shell._persist(outcome)
        if not moving:
            self._clear_throttles()
        for broker_id in sorted(draining):
            if broker_id not in self.retiring and not any(broker_id in p.replicas for t in core.topics.values()
                                                          for p in t.partitions):
                if self._vote_to_give_away(broker_id, enabled, draining):
                    self._say_once(f"balancer: broker {broker_id} is drained and still votes in the metadata "
                                   f"quorum: it stops once another broker has its vote")
                    continue
                self.retiring.add(broker_id)
                self.shell.supervision._spawn(self._retire(broker_id))
        return result

    def _say_once(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            log.warning("%s", text)
            self.shell._say(text)

    # ---- throttles -----------------------------------------------------------------------------
    def _rate(self) -> int:
        return int(self.core.broker_config.get("kray.balancer.replication.throttled.rate", LONG_MAX))

    def _throttle(self, moves: list[balancer.Move], loads: list[balancer.PartitionLoad]) -> None:
        """As kray reassign-partitions --throttle, before the moves start (their replicas start throttled): each
        moving partition's current replicas in its topic's leader.replication.throttled.replicas and its joining
        replicas in follower.replication.throttled.replicas; the balancer's rate as leader.replication.throttled.rate
        on the brokers sending and follower.replication.throttled.rate on those receiving (not on a broker whose
        rate the operator set)."""
        rate = self._rate()
        if rate >= LONG_MAX:
            return
        current = {(p.topic, p.partition): set(p.replicas) for p in loads}
        entries: dict[tuple[str, str], set[str]] = {}
        rates: set[tuple[int, str]] = set()
        for move in moves:
            before = current[(move.topic, move.partition)]
            for side, brokers in ((LEADER_SIDE, before), (FOLLOWER_SIDE, set(move.replicas) - before)):
                for b in brokers:
                    entries.setdefault((move.topic, side[0]), set()).add(f"{move.partition}:{b}")
                    rates.add((b, side[1]))
        for (name, key), wanted in sorted(entries.items()):
            value = str(self.core.topics[name].configs.get(key) or "")
            if value.strip() == "*":
                continue
            listed = [e for e in value.split(",") if e.strip()]
            new = [e for e in sorted(wanted) if e not in listed]
            if new:
                self.throttled_entries.setdefault((name, key), set()).update(new)
                self._set_topic_config(name, key, ",".join(listed + new))
        for b, key in sorted(rates):
            if key not in self.core.dynamic_broker_configs.get(str(b), {}) or (b, key) in self.throttled_brokers:
                self.throttled_brokers.add((b, key))
                self.shell._persist(self.core.alter_broker_configs(str(b), {key: rate}))
        if rates:
            self.shell.supervision.push_replication_throttles()

    def _clear_throttles(self) -> None:
        """No move runs: remove the throttles the balancer set."""
        if not self.throttled_entries and not self.throttled_brokers:
            return
        for (name, key), added in list(self.throttled_entries.items()):
            topic = self.core.topics.get(name)
            if topic is not None:
                kept = [e for e in str(topic.configs.get(key) or "").split(",") if e.strip() and e not in added]
                self._set_topic_config(name, key, ",".join(kept) if kept else None)
        self.throttled_entries.clear()
        for b, key in sorted(self.throttled_brokers):
            if key in self.core.dynamic_broker_configs.get(str(b), {}):
                self.shell._persist(self.core.alter_broker_configs(str(b), {key: None}))
        self.throttled_brokers.clear()
        self.shell.supervision.push_replication_throttles()

    def _set_topic_config(self, name: str, key: str, value: str | None) -> None:
        outcome = self.core.alter_topic_configs(name, {key: value}, incremental=True)
        self.shell._persist(outcome)
        if not outcome.error_code:
            self.shell.supervision._spawn(self.shell.reconfigure_replicas(name))

    # ---- retiring a drained broker -------------------------------------------------------------
    async def _retire(self, broker_id: int) -> None:
        """A drained broker: its gateway stops (clients move to the other brokers), its shards close, and it is
        unregistered from the metadata."""
        try:
            gateway, shards = self.shell.rec.broker_retired(broker_id)
            self.shell.supervision.note_changes()
            self.shell._say(f"broker {broker_id} drained: no partition has a replica on it; it stops and unregisters "
                            f"(its Ray node may go)")
            if gateway is not None:
                await _quietly(gateway.stop.remote())
                _kill(gateway)
            for shard in shards:
                await _quietly(shard.close.remote())
                _kill(shard)
            outcome = self.core.unregister_broker(broker_id)
            self.shell._persist(outcome)
            if outcome.error_code:
                log.warning("broker %d not unregistered: %s", broker_id, outcome.message)
            else:
                log.warning("broker %d drained and unregistered", broker_id)
        finally:
            self.retiring.discard(broker_id)


async def _ask(ref):
    return await ref


async def _quietly(call) -> None:
    try:
        await asyncio.wait_for(call, RETIRE_STOP_TIMEOUT_S)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.info("retiring a broker: %s", e)


def _kill(handle) -> None:
    try:
        ray.kill(handle, no_restart=True)
    except Exception as e:
        log.debug("could not kill %s: %s", handle, e)
