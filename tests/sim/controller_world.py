"""A deterministic simulation of the controller's reconciler (actors/controller/reconciler.py) in
a world of Ray nodes, shards, gateways and a cut-able network, stepped by one seeded scheduler
(issue 34, item 2).

The world: three brokers, each on a Ray node labelled with its broker id and an address of its own,
two shards per broker (a replica goes to the shard `shard_index` picks, as in the controller);
the metadata core is the real ControllerCore with its ReplicationControl (sessions, fencing,
elections, preferred leaders, AlterPartition). The controller is the reconciler plus a small shell
that carries out its actions as actor.py does: a Host waits for its shard without a timeout, a Tell
times out after REPLICA_UPDATE_TIMEOUT_S (its call still travels, and may land later), a gateway's
serve call is pending until the gateway dies. Calls to one actor arrive in the order they were
sent (Ray's ordering of one caller's calls); calls to and answers from a broker cut off from the
controller wait until the cut heals; calls to a dead actor fail. A shard that crashes is restarted
empty by Ray (a new life); its watcher reports the death later (a message of its own). A node that
crashes takes its shards and gateway with it; Ray declares it dead later (the node table); a node
may come back on the same host (a new node id) before or after that; a stranger node elsewhere
may claim a live broker's id. The controller itself restarts: a new reconciler adopts what the
running shards say they host (a shard cut off does not answer) and the gateways Ray names.

Each seed draws its own mix of actions (swarm testing, as tests/sim/world.py), then each step
picks one with `random.Random(seed)`.

Invariants, checked after every step:
  C1 routing: a partition whose leader the metadata image names at an address (the reconciler's
     `route`) is hosted by that shard in its current life at that address, and the replica took
     its leader's state of the current leader epoch; only a shard whose death the controller has
     not heard of yet is exempt;
  C2 one broker per id: at most one live gateway per broker id (a stranger claiming a live
     broker's id gets none; a node that replaces another on its host gets the broker once the
     old one's actors are killed);
  C3 nothing held is dead for good: the reconciler holds no replica in, and no handle of, an
     actor it had killed (a lost node's actors are forgotten with it);
  C4 one host call at a time per replica: the reconciler never asks a shard to host a replica
     while its previous host call is out.
Liveness, at the end of a run (`settle`): the network heals, every crashed node returns, faults
stop; within SETTLE_S of simulated time every placed replica of a live broker is hosted in its
shard's current life and holds its partition's current state, and every partition whose leader
is live is routed to it.
"""
from __future__ import annotations

import collections
import itertools
import random
import types
import uuid
from dataclasses import dataclass, field
from typing import Any

from actors.config_schema import BROKER_DEFAULTS
from actors.controller import core as core_module, reconciler as rc
from actors.controller.core import BrokerInfo, ControllerCore
from actors.controller.nodes import BROKER_ID_LABEL, NodeView
from actors.shard.hosted import shard_index

BROKERS = (0, 1, 2)
SHARDS_PER_BROKER = 2
REPLICA_UPDATE_TIMEOUT_S = 5.0   # actor.py: a Tell not answered in this long failed
HEARTBEAT_S = 2.0                # broker.heartbeat.interval.ms
TICK_S = 0.25                    # the controller's session tick
NODE_POLL_S = 1.0                # the node watcher
SETTLE_S = 90.0
TIMELINE_STEPS = 40

ACTIONS = ("deliver", "reconcile", "advance_clock", "create_topic", "delete_topic", "isr_catch_up",
           "crash_shard", "crash_gateway", "crash_node", "declare_dead", "node_returns", "stranger_node",
           "cut", "heal", "restart_controller")
WEIGHT_CHOICES = {
    "deliver": (30, 45, 60), "reconcile": (10, 20), "advance_clock": (8, 12, 20), "create_topic": (1, 2),
    "delete_topic": (0, 0.3, 1), "isr_catch_up": (3, 6), "crash_shard": (0.3, 1, 2), "crash_gateway": (0, 0.3, 1),
    "crash_node": (0.2, 0.5, 1), "declare_dead": (1, 3), "node_returns": (1, 3), "stranger_node": (0, 0.2),
    "cut": (0, 0.5, 1.5), "heal": (1, 3), "restart_controller": (0.2, 0.5, 1),
}


class InvariantViolation(AssertionError):
    pass


@dataclass
class Node:
    node_id: str
    broker_id: int
    address: str
    alive: bool = True          # its processes run
    in_table: bool = True       # Ray's node table says alive

    def view(self) -> NodeView:
        return NodeView(self.node_id, self.in_table, self.address, {BROKER_ID_LABEL: str(self.broker_id)})


@dataclass(eq=False)
class Shard:
    """A shard actor: hosts replicas; Ray restarts it empty after a crash (a new life)."""
    broker_id: int
    index: int
    node: Node
    life: int = 0
    alive: bool = True
    killed: bool = False
    hosted: dict = field(default_factory=dict)  # (topic id, partition) -> the state it took (or None)
    queue: collections.deque = field(default_factory=collections.deque)
    death_unreported: bool = False

    @property
    def address(self) -> str:
        return f"{self.node.node_id}/shard-{self.index}#{self.life}"


@dataclass(eq=False)
class Gateway:
    broker_id: int
    node: Node
    alive: bool = True
    killed: bool = False
    started: bool = False
    broker_epoch: int = -1
    queue: collections.deque = field(default_factory=collections.deque)
    waiting: list = field(default_factory=list)  # serve calls out until it stops


@dataclass(eq=False)
class ReplicaHandle:
    shard: Shard
    key: tuple


@dataclass(eq=False)
class Call:
    kind: str          # host | tell | serve | delete
    action: Any
    target: Any        # Shard or Gateway
    controller: int    # the controller incarnation that made it (answers to an older one are lost)
    deadline: float | None = None
    timed_out: bool = False


class ControllerSimulation:
    def __init__(self, seed: int, verbose: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.verbose = verbose
        self.weights = {a: self.rng.choice(WEIGHT_CHOICES[a]) for a in ACTIONS}
        self.now = 0.0
        self.core = ControllerCore(dict(BROKER_DEFAULTS), "sim")
        self.nodes: dict[str, Node] = {}
        self.node_gen = itertools.count()
        for b in BROKERS:
            self._new_node(b, f"10.0.0.{b}")
        self.shards: list[Shard] = []
        self.gateways: list[Gateway] = []
        self.cut: set[int] = set()  # brokers cut off from the controller
        self.incarnation = 0
        self.killed: set[int] = set()  # id() of actors the reconciler had killed
        self.death_notices: collections.deque = collections.deque()
        self.timeline: collections.deque = collections.deque(maxlen=TIMELINE_STEPS)
        self.stats: collections.Counter = collections.Counter()
        self.topics = itertools.count()
        self.last_tick = self.last_poll = self.last_heartbeat = 0.0
        self.steps = 0
        self._start_controller()

    # ---- the world -----------------------------------------------------------------------
    def _new_node(self, broker_id: int, address: str) -> Node:
        node = Node(f"n{next(self.node_gen)}-b{broker_id}", broker_id, address)
        self.nodes[node.node_id] = node
        return node

    def _deliverable(self, target) -> bool:
        return target.broker_id not in self.cut

    def _log(self, text: str) -> None:
        self.timeline.append(f"{self.now:8.2f}s {text}")
        if self.verbose:
            print(self.timeline[-1])

    def fail(self, text: str) -> None:
        raise InvariantViolation(f"{text}\nreplay: python -m tests.sim --controller --seed {self.seed} "
                                 f"--steps {self.steps} -v\n"
                                 f"last steps:\n" + "\n".join(self.timeline))

    # ---- the controller's shell (as actor.py) --------------------------------------------
    def _start_controller(self, found: tuple[dict, dict] | None = None) -> None:
        self.rec = rc.Reconciler()
        self.incarnation += 1
        self.hosting: set[tuple] = set()
        if found is not None:
            shards, gateways = found
            self.rec.adopt(self.core, shards, gateways, lambda shard, topic, p, b: ReplicaHandle(shard, (topic.topic_id, p)))
            for broker_id in set(self.core.brokers) - self.rec.registered:
                self.core.replication.broker_died(broker_id)
            self.core.replication.finish_replay(self._ms())

    def _ms(self) -> int:
        return int(self.now * 1000)

    def _execute(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, rc.Say):
                self._log(f"say: {action.text[:90]}")
            elif isinstance(action, rc.Fence):
                self.core.replication.broker_died(action.broker_id)
                self.stats["fenced_lost"] += 1
            elif isinstance(action, rc.Kill):
                actor = action.handle
                actor.killed, actor.alive = True, False
                self.killed.add(id(actor))
                self._fail_queue(actor)
            elif isinstance(action, rc.StartGateway):
                node = self.nodes[action.node.node_id]
                # (gateways are named actors: one per broker id; the controller adopts a running one)
                gateway = next((g for g in self.gateways if g.broker_id == action.broker_id and not g.killed), None)
                if gateway is None:
                    gateway = Gateway(action.broker_id, node, alive=node.alive)
                    self.gateways.append(gateway)
                elif gateway.node is not node:  # it says where it runs (`_locate_gateway`)
                    self._send(Call("locate", action, gateway, self.incarnation))
                self.rec.gateway_deployed(action.broker_id, gateway)
                self.stats["gateways_started"] += 1
            elif isinstance(action, rc.Host):
                if action.key in self.hosting:
                    self.fail(f"C4: {action.key} asked to be hosted while its host call is out")
                self.hosting.add(action.key)
                self._send(Call("host", action, action.handle.shard, self.incarnation))
            elif isinstance(action, rc.Tell):
                self._send(Call("tell", action, action.handle.shard, self.incarnation,
                                deadline=self.now + REPLICA_UPDATE_TIMEOUT_S))
            elif isinstance(action, rc.ServeGateway):
                self._send(Call("serve", action, action.handle, self.incarnation))
            elif isinstance(action, rc.StopReplica):
                self._send(Call("delete", action, action.handle.shard, self.incarnation))
            else:
                raise TypeError(action)
        self.rec.take_changed()

    def _send(self, call: Call) -> None:
        if call.target.killed:  # (a call to a dead actor fails when it arrives: `deliver`)
            self._answer(call, None, failed=True)
            return
        call.target.queue.append(call)

    def _start_partitions(self) -> None:
        for topic in list(self.core.topics.values()):
            _, starts = self.rec.missing(rc.desired_replicas(self.core, self.rec.registered, [topic]))
            for start in starts:
                topic_id, partition, broker_id = start.key
                node = self.nodes.get(self.core.brokers[broker_id].node_id)
                index = shard_index(topic_id, partition, SHARDS_PER_BROKER)
                shard = self.rec.shards.get((broker_id, index))
                if shard is None:
                    shard = next((s for s in self.shards if (s.broker_id, s.index) == (broker_id, index)
                                  and not s.killed), None)  # running, unknown to this controller
                    if shard is None:
                        shard = Shard(broker_id, index, node, alive=node.alive)
                        self.shards.append(shard)
                    self.rec.shards[(broker_id, index)] = shard
                self.rec.replica_started(start.key, ReplicaHandle(shard, (topic_id, partition)), (broker_id, index))

    def reconcile(self) -> None:
        self._start_partitions()
        self._execute(self.rec.step(self.now, lambda key: rc.partition_state(self.core, key)))

    def _answer(self, call: Call, result: Any, failed: bool = False) -> None:
        """A call's answer reaches the controller that made it (a restarted one hears nothing)."""
        if call.controller != self.incarnation:
            return
        action = call.action
        if call.kind == "host":
            self.hosting.discard(action.key)
            if failed:
                self.rec.host_failed(action, self.now)
            else:
                self.rec.hosted(action, result, self.now)
        elif call.kind == "tell":
            if call.timed_out:
                return
            if failed:
                self.rec.tell_failed(action, self.now)
            else:
                self.rec.told(action)
        elif call.kind == "locate":
            if not failed:
                self.rec.gateway_located(action.broker_id, result)
        elif call.kind == "serve":
            if failed:
                self.rec.gateway_failed(action, None, self.now)
            elif result == "started":
                self.rec.gateway_started(action)
        self.rec.take_changed()

    def _fail_queue(self, target) -> None:
        while target.queue:
            self._answer(target.queue.popleft(), None, failed=True)
        if isinstance(target, Gateway):
            for call in target.waiting:
                self._answer(call, None, failed=True)
            target.waiting.clear()

    def _register(self, gateway: Gateway) -> bool:
        """A gateway's start: it registers its broker (a new broker epoch) and says it is ready."""
        b = gateway.broker_id
        if gateway.node.node_id in self.rec.lost_nodes:
            return False  # refused: its node was declared dead
        info = BrokerInfo(b, gateway.node.address, 9092, node_id=gateway.node.node_id)
        previous = self.core.brokers.get(b)
        outcome = self.core.register_broker(info, self._ms())
        gateway.broker_epoch = outcome.broker_epoch
        self._execute(self.rec.broker_registered(b, gateway.node.node_id, info.host, info.port, outcome.broker_epoch,
                                                 previous and previous.node_id))
        self.rec.supervise_gateway(b, gateway)  # (a gateway registers with itself: actors/gateway/actor.py)
        self._start_partitions()
        self.rec.broker_serving(b)
        self.stats["registrations"] += 1
        return True

    # ---- deliveries ----------------------------------------------------------------------
    def deliver(self) -> bool:
        ready = [t for t in self.shards + self.gateways if t.queue and (self._deliverable(t) or not t.alive)]
        if self.death_notices:
            ready.append("death")
        if not ready:
            return False
        target = self.rng.choice(ready)
        if target == "death":
            shard = self.death_notices.popleft()
            shard.death_unreported = False
            if self.rec.shards.get((shard.broker_id, shard.index)) is shard:
                self.rec.shard_died((shard.broker_id, shard.index), self.now)
                self.rec.take_changed()
                self._log(f"controller hears shard {shard.address} died")
            return True
        call = target.queue.popleft()
        if not target.alive:
            self._answer(call, None, failed=True)
            return True
        if isinstance(target, Gateway):
            if call.kind == "locate":
                self._answer(call, target.node.node_id)
            elif call.kind == "serve":
                if not target.started:
                    if not self._register(target):
                        self._answer(call, None, failed=True)
                        return True
                    target.started = True
                target.waiting.append(call)
                self._answer(call, "started")
            return True
        key = call.action.key[:2]
        if call.kind == "host":
            target.hosted.setdefault(key, None)
            self._answer(call, target.address)
            self.stats["hosted"] += 1
        elif call.kind == "tell":
            if key not in target.hosted:
                self._answer(call, None, failed=True)
                self.stats["tells_not_hosted"] += 1
                return True
            taken = target.hosted[key]
            state = call.action.state
            if taken is None or (state[1], state[2], state[6]) >= (taken[1], taken[2], taken[6]):
                target.hosted[key] = state
            self._answer(call, None)
            self.stats["told"] += 1
        elif call.kind == "delete":
            target.hosted.pop(key, None)
            self.stats["deleted"] += 1
        return True

    # ---- time ----------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        self.now += seconds
        for calls in [t.queue for t in self.shards]:
            for call in calls:
                if call.kind == "tell" and not call.timed_out and call.deadline <= self.now:
                    call.timed_out = True  # (it still travels)
                    if call.controller == self.incarnation:
                        self.rec.tell_failed(call.action, self.now)
                        self.stats["tell_timeouts"] += 1
        if self.now - self.last_heartbeat >= HEARTBEAT_S:
            self.last_heartbeat = self.now
            for g in self.gateways:
                if g.alive and g.started and g.broker_id not in self.cut and g.broker_id in self.rec.registered:
                    self.core.replication.heartbeat(g.broker_id, g.broker_epoch, self._ms())
        if self.now - self.last_tick >= TICK_S:
            self.last_tick = self.now
            if self.core.replication.tick(self._ms()).records:
                self.stats["session_fences"] += 1
            if self.rng.random() < 0.05 and self.core.replication.balance_leaders().records:
                self.stats["preferred_elections"] += 1
        if self.now - self.last_poll >= NODE_POLL_S:
            self.last_poll = self.now
            self.watch_nodes()

    def watch_nodes(self) -> None:
        views = [n.view() for n in self.nodes.values()]
        actions, new = self.rec.nodes_seen(views)
        self._execute(actions)
        for node in new:
            self._execute(self.rec.claim(node, node.labelled_broker_id, views))

    # ---- faults --------------------------------------------------------------------------
    def _crash_shard(self, shard: Shard) -> None:
        shard.life += 1
        shard.hosted.clear()
        if not shard.death_unreported:
            shard.death_unreported = True
            self.death_notices.append(shard)
        self._fail_queue(shard)

    def step(self) -> None:
        action = self.rng.choices(ACTIONS, [self.weights[a] for a in ACTIONS])[0]
        live_shards = [s for s in self.shards if s.alive and not s.killed]
        if action == "deliver":
            self.deliver()
        elif action == "reconcile":
            self.reconcile()
        elif action == "advance_clock":
            self.advance(self.rng.choice((0.01, 0.05, 0.2, 0.5, 1.0)))
        elif action == "create_topic":
            live = self.core.live_brokers()
            if live and len(self.core.topics) < 4:
                name = f"t{next(self.topics)}"
                self._create_topic(name, self.rng.randint(1, 3), min(3, len(live)))
                self._log(f"create {name}")
                self.stats["topics"] += 1
        elif action == "delete_topic" and self.core.topics:
            topic = self.core.topics[self.rng.choice(sorted(self.core.topics))]
            self.core.delete_topic(topic.name)
            self._execute(self.rec.unwanted(rc.placed_replicas(self.core, []), {topic.topic_id}))
            self._log(f"delete {topic.name}")
            self.stats["topics_deleted"] += 1
        elif action == "isr_catch_up":
            self._isr_catch_up()
        elif action == "crash_shard" and live_shards:
            shard = self.rng.choice(live_shards)
            self._crash_shard(shard)
            self._log(f"shard {shard.address} crashes (Ray restarts it empty)")
            self.stats["shard_crashes"] += 1
        elif action == "crash_gateway":
            live = [g for g in self.gateways if g.alive and not g.killed]
            if live:
                g = self.rng.choice(live)
                g.started = False
                self._fail_queue(g)
                self._log(f"gateway of broker {g.broker_id} crashes (Ray restarts it)")
                self.stats["gateway_crashes"] += 1
        elif action == "crash_node":
            live = [n for n in self.nodes.values() if n.alive]
            if len(live) > 1:
                node = self.rng.choice(live)
                node.alive = False
                for shard in self.shards:
                    if shard.node is node and shard.alive:
                        shard.alive = False
                        self._crash_shard(shard)
                for g in self.gateways:
                    if g.node is node:
                        g.alive = False
                        self._fail_queue(g)
                self._log(f"node {node.node_id} crashes")
                self.stats["node_crashes"] += 1
        elif action == "declare_dead":
            dead = [n for n in self.nodes.values() if not n.alive and n.in_table]
            if dead:
                node = self.rng.choice(dead)
                node.in_table = False
                self._log(f"Ray declares {node.node_id} dead")
        elif action == "node_returns":
            self._node_returns()
        elif action == "stranger_node":
            taken = [n for n in self.nodes.values() if n.alive and n.in_table]
            if taken and not any(n.address.startswith("10.9.") for n in self.nodes.values()):
                victim = self.rng.choice(taken)
                self._new_node(victim.broker_id, f"10.9.9.{victim.broker_id}")
                self._log(f"a stranger node claims broker id {victim.broker_id}")
                self.stats["strangers"] += 1
        elif action == "cut":
            b = self.rng.choice(BROKERS)
            self.cut.add(b)
            self._log(f"broker {b} cut off from the controller")
            self.stats["cuts"] += 1
        elif action == "heal" and self.cut:
            self.cut.clear()
            self._log("network heals")
        elif action == "restart_controller":
            self._restart_controller()
        self.check()

    def _create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        """The core's create_topic, with a topic id drawn from the seed (the shard a replica goes to
        depends on it), so that a seed replays exactly."""
        saved = core_module.uuid
        core_module.uuid = types.SimpleNamespace(uuid4=lambda: uuid.UUID(int=self.rng.getrandbits(128)),
                                                 UUID=uuid.UUID)
        try:
            self.core.create_topic(name, partitions, replication_factor, {})
        finally:
            core_module.uuid = saved

    def _node_returns(self) -> None:
        """A crashed broker's host starts a new Ray node (the old one declared dead, or not yet)."""
        for b in BROKERS:
            current = [n for n in self.nodes.values() if n.broker_id == b and n.alive and not n.address.startswith("10.9.")]
            if not current:
                old = next(n for n in self.nodes.values() if n.broker_id == b and not n.address.startswith("10.9."))
                node = self._new_node(b, old.address)
                self._log(f"broker {b}'s host returns as node {node.node_id}")
                self.stats["node_returns"] += 1
                return

    def _isr_catch_up(self) -> None:
        """A follower that took its partition's state catches up: its leader asks to add it to the ISR."""
        for topic in self.core.topics.values():
            for p in topic.partitions:
                leader = self.core.replication.brokers.get(p.leader)
                if leader is None or leader.fenced:
                    continue
                for b in p.replicas:
                    if b in p.isr or not self.core.replication.is_live(b):
                        continue
                    handle = self.rec.replicas.get((topic.topic_id, p.index, b))
                    if handle is None or (topic.topic_id, p.index) not in handle.handle.shard.hosted:
                        continue
                    self.core.replication.alter_partition(
                        p.leader, leader.broker_epoch, (topic.topic_id.bytes, p.index), leader_epoch=p.leader_epoch,
                        partition_epoch=p.partition_epoch, new_isr=sorted(p.isr + [b]))
                    self.stats["isr_expansions"] += 1
                    return

    def _restart_controller(self) -> None:
        # Ray names an actor until it is killed, also one pinned to a dead node (restarting for ever)
        shards = {}
        for s in self.shards:
            if s.killed or s.broker_id not in self.core.brokers:
                continue
            answers = s.alive and s.broker_id not in self.cut
            shards[(s.broker_id, s.index)] = (s, [k for k in s.hosted] if answers else None)
        gateways = {}
        for g in self.gateways:
            answers = g.alive and g.broker_id not in self.cut
            if not g.killed and (answers or g.broker_id in self.core.brokers):
                gateways[g.broker_id] = (g, g.node.node_id if answers else self.core.brokers[g.broker_id].node_id,
                                         answers)
        self._log("the controller restarts and adopts the running actors")
        self._start_controller((shards, gateways))
        self.stats["controller_restarts"] += 1

    # ---- invariants ----------------------------------------------------------------------
    def check(self) -> None:
        for topic in self.core.topics.values():
            for p in topic.partitions:
                key = (topic.topic_id, p.index, p.leader)
                handle, listener = self.rec.route(key, p.leader_epoch)
                if listener is None:
                    continue
                shard = handle.shard
                if shard.death_unreported:
                    continue
                taken = shard.hosted.get(key[:2])
                if listener != shard.address or taken is None or taken[0] != p.leader or taken[1] != p.leader_epoch:
                    self.fail(f"C1: {topic.name}-{p.index} routed to broker {p.leader} at {listener}, but shard "
                              f"{shard.address} holds {taken if key[:2] in shard.hosted else 'nothing'} (leader epoch "
                              f"{p.leader_epoch})")
                self.stats["routed_checks"] += 1
        per_broker = collections.Counter(b for b in self.rec.node_brokers.values() if b is not None)
        if any(n > 1 for n in per_broker.values()):
            self.fail(f"C2: Ray nodes per broker id {dict(per_broker)}")
        for key, r in self.rec.replicas.items():
            if id(r.handle.shard) in self.killed:
                self.fail(f"C3: replica {key} is held in shard {r.handle.shard.address}, which was killed")
        for g in self.rec.gateways.values():
            if id(g) in self.killed:
                self.fail(f"C3: a killed gateway of broker {g.broker_id} is held")

    # ---- runs ----------------------------------------------------------------------------
    def run(self, steps: int) -> "ControllerSimulation":
        self.steps = steps
        for _ in range(steps):
            self.step()
        self.settle()
        return self

    def settle(self) -> None:
        self.cut.clear()
        for _ in BROKERS:
            self._node_returns()
        for node in self.nodes.values():
            if not node.alive:
                node.in_table = False
        deadline = self.now + SETTLE_S
        while self.now < deadline:
            while self.deliver():
                self.check()
            self.reconcile()
            self.advance(0.1)
            self.check()
            if self.converged() is None:
                self.stats["settled"] += 1
                return
        self.fail(f"liveness: not converged {SETTLE_S:.0f} s after the faults stopped: {self.converged()}")

    def converged(self) -> str | None:
        for g in self.gateways:  # what deploy_brokers (kray start) waits for: every started broker serving
            if g.alive and g.started and not g.killed and g.broker_id in self.rec.registered \
                    and self.core.replication.is_live(g.broker_id) and g.broker_id not in self.rec.serving:
                return f"broker {g.broker_id}'s gateway serves, but the controller does not count it as serving"
        for topic in self.core.topics.values():
            for p in topic.partitions:
                for b in p.replicas:
                    if not self.core.replication.is_live(b) or b not in self.rec.registered:
                        continue
                    key = (topic.topic_id, p.index, b)
                    r = self.rec.replicas.get(key)
                    if r is None:
                        return f"{topic.name}-{p.index} has no replica on broker {b}"
                    state = r.handle.shard.hosted.get(key[:2])
                    if state != rc.partition_state(self.core, key):
                        return f"{topic.name}-{p.index} on broker {b} holds {state}, not the current state"
                if self.core.replication.is_live(p.leader) and p.leader in self.rec.registered and \
                        self.rec.route((topic.topic_id, p.index, p.leader), p.leader_epoch)[1] is None:
                    return f"{topic.name}-{p.index} is not routed to its leader {p.leader}"
        return None
