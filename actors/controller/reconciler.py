"""The controller's reconciler: what must run where, and what each running part must be told.

A pure state machine, as Ray Serve's deployment state manager is beside its controller actor: its
inputs are the desired state (each partition's replicas and the brokers they are placed on, from
the metadata core; the Ray nodes a watcher sees), what is known of the running parts (a handle per
replica, shard and gateway, and what each said last: hosted at an address, told a state, failed,
died) and the clock (`now`, seconds, passed in). Its output is actions, which the controller's Ray
shell (actor.py) carries out and whose results it reports back:

    StartReplica  a desired replica has no handle: the shell makes one (in a shard on its node)
    Host          have the replica's shard host it (first start, after the shard died, retries)
    Tell          send a hosted replica its partition's state (leader, epochs, ISR, fenced brokers)
    StartGateway  a new broker node: start (or find) its gateway
    ServeGateway  ask a gateway to serve, and wait until it stops (a failure is retried)
    Fence         a broker's node is gone: fence it at once (new leaders from the ISRs)
    Kill          actors of a lost node: killed, so that the node that returns can use their names
    StopReplica   a replica no longer placed (its topic deleted, or a reassignment moved it off its
                  broker): delete its files
    Say           a sentence for `kray start` (broker_events)

Retries back off (RETRY_S doubling to RETRY_S_MAX); a replica whose Tell failed (its broker cut
off) is told again RETELL_S later. A result that comes back for a handle the reconciler no longer
holds (its node lost, its topic deleted) is ignored. `changed` says that what the gateways'
metadata image routes to changed (a listener, a confirmed leader, a serving broker): the shell
publishes a new image version.

Desired placement is an input on purpose: moving a replica (reassignment, a balancer draining a
broker) is a new placement, for which `missing` starts the new replicas and `unwanted` stops the
ones no longer placed.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from actors.controller.nodes import NodeView, proposed_broker_id, replaces

ReplicaKey = tuple[uuid.UUID, int, int]  # (topic id, partition, broker id)
ShardKey = tuple[int, int]  # (broker id, shard index)
# what a replica must know: (leader, leader epoch, partition epoch, replicas, isr, the leader's
# (host, port) or None, its own broker's epoch, the fenced replicas' brokers)
PartitionStateView = tuple

RETRY_S = 0.2
RETRY_S_MAX = 5.0
RETELL_S = 1.0


# ---- actions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StartReplica:
    key: ReplicaKey


@dataclass(frozen=True)
class Host:
    key: ReplicaKey
    handle: Any
    shard: ShardKey
    life: int  # the shard's life the call is made in (a result from an earlier life is stale)


@dataclass(frozen=True)
class Tell:
    key: ReplicaKey
    handle: Any
    state: PartitionStateView


@dataclass(frozen=True)
class StartGateway:
    broker_id: int
    node: NodeView


@dataclass(frozen=True)
class ServeGateway:
    broker_id: int
    handle: Any


@dataclass(frozen=True)
class Fence:
    broker_id: int


@dataclass(frozen=True)
class Kill:
    what: tuple
    handle: Any


@dataclass(frozen=True)
class StopReplica:
    key: ReplicaKey
    handle: Any


@dataclass(frozen=True)
class Say:
    text: str


# ---- what is known of the running parts ------------------------------------------------------
@dataclass
class Replica:
    handle: Any
    shard: ShardKey
    listener: str | None = None    # its shard's data-path address, once it was hosted
    told: PartitionStateView | None = None  # the state last sent (None: to be told)
    leading: int | None = None     # the leader epoch in which it confirmed that it leads
    hosted: bool = False           # its shard hosts it in the shard's current life
    hosting: bool = False          # a Host is out
    host_at: float = 0.0           # not hosted: (re)host no sooner than this
    delay_s: float = RETRY_S
    retell_at: float = 0.0         # a failed Tell: told again no sooner than this


@dataclass
class GatewaySupervision:
    handle: Any
    serving: bool = False  # a ServeGateway is out
    stopped: bool = False  # stopped on purpose: not asked again
    started: bool = False  # its start answered (broker_ready answered, maybe by an earlier controller)
    retry_at: float = 0.0
    delay_s: float = RETRY_S


def partition_state(core, key: ReplicaKey) -> PartitionStateView | None:
    """What replica `key` must know, from the metadata core (None: its partition is gone)."""
    topic = core.topics_by_id.get(key[0])
    if topic is None or key[1] >= len(topic.partitions):
        return None
    p = topic.partitions[key[1]]
    leader = core.brokers.get(p.leader)
    liveness = core.replication.brokers.get(key[2])
    return (p.leader, p.leader_epoch, p.partition_epoch, tuple(p.replicas), tuple(p.isr),
            (leader.host, leader.port) if leader is not None else None,
            liveness.broker_epoch if liveness is not None else -1,
            tuple(r for r in p.replicas if not core.replication.is_live(r)))


def placed_replicas(core, topics: Iterable | None = None) -> dict[ReplicaKey, int]:
    """Every replica the metadata places (of `topics`, default all), each with its broker."""
    return {(topic.topic_id, p.index, broker_id): broker_id
            for topic in (core.topics.values() if topics is None else topics)
            for p in topic.partitions for broker_id in p.replicas}


def desired_replicas(core, registered: set[int], topics: Iterable | None = None) -> dict[ReplicaKey, int]:
    """The replicas that should run now (of `topics`, default all): those placed on a broker that
    registered in this controller's incarnation and has a Ray node (a broker that has not may name
    a dead node: an actor pinned to it never starts; its replicas start when it registers)."""
    return {key: broker_id for key, broker_id in placed_replicas(core, topics).items()
            if broker_id in registered and getattr(core.brokers.get(broker_id), "node_id", "")}


class Reconciler:
    def __init__(self):
        self.replicas: dict[ReplicaKey, Replica] = {}
        self.shards: dict[ShardKey, Any] = {}
        self.shard_lives: dict[ShardKey, int] = {}
        self.gateways: dict[int, Any] = {}  # broker id -> its gateway's handle
        self.supervised: dict[int, GatewaySupervision] = {}
        self.node_brokers: dict[str, int | None] = {}  # Ray node id -> its broker id (None: no broker there)
        self.lost_nodes: set[str] = set()  # declared dead: a gateway left on one may not register
        self.retired_nodes: set[str] = set()  # (of lost_nodes) their broker was drained and unregistered
        self.id_conflicts: set[tuple[str, str]] = set()  # (node, live node) claiming one broker id: said once
        # nodes whose gateway said it runs there when this controller adopted it: a node on the same
        # host that claims the broker is an older one Ray has not declared dead yet, not a newer one
        self.confirmed_nodes: set[str] = set()
        # brokers that registered with this incarnation, or whose gateway it adopted: only they get
        # replicas (a broker the log knows may name a dead Ray node)
        self.registered: set[int] = set()
        self.ever_registered: set[int] = set()
        self.serving: set[int] = set()  # brokers whose replicas listen since they registered
        self.broker_failures: dict[int, str] = {}  # broker id -> why its gateway could not start
        self.changed = False

    def take_changed(self) -> bool:
        changed, self.changed = self.changed, False
        return changed

    # ---- replicas ------------------------------------------------------------------------
    def missing(self, desired: dict[ReplicaKey, int]) -> tuple[list[ReplicaKey], list[StartReplica]]:
        """Of `desired`: the keys that have a replica, and a StartReplica for each that has none."""
        have = [key for key in desired if key in self.replicas]
        return have, [StartReplica(key) for key in desired if key not in self.replicas]

    def replica_started(self, key: ReplicaKey, handle: Any, shard: ShardKey) -> None:
        """The shell made a handle for `key` (StartReplica) in shard `shard`: hosted at the next step."""
        self.replicas[key] = Replica(handle, shard)
        self.changed = True

    def unwanted(self, placed: dict[ReplicaKey, int], topic_ids: set[uuid.UUID]) -> list[StopReplica]:
        """Replicas of `topic_ids` that are no longer placed (`placed_replicas`: their topic or
        partition deleted, their broker no longer a replica): forgotten, each with a StopReplica."""
        gone = [key for key in self.replicas if key[0] in topic_ids and key not in placed]
        return [StopReplica(key, self.replicas.pop(key).handle) for key in gone]

    def handles(self, topic_id: uuid.UUID | None = None) -> list[Any]:
        return [r.handle for key, r in self.replicas.items() if topic_id is None or key[0] == topic_id]

    def step(self, now: float, state_of: Callable[[ReplicaKey], PartitionStateView | None]) -> list:
        """What to do now: host replicas whose shard does not (and whose retry is due), tell hosted
        replicas whose partition state moved, ask supervised gateways to serve."""
        actions: list = []
        for key, r in self.replicas.items():
            if not r.hosted:
                if not r.hosting and now >= r.host_at:
                    r.hosting = True
                    actions.append(Host(key, r.handle, r.shard, self.shard_lives.get(r.shard, 0)))
                continue
            if now < r.retell_at:
                continue
            r.retell_at = 0.0
            state = state_of(key)
            if state is not None and r.told != state:
                r.told = state
                actions.append(Tell(key, r.handle, state))
        for broker_id, g in self.supervised.items():
            if not g.serving and not g.stopped and now >= g.retry_at:
                g.serving = True
                actions.append(ServeGateway(broker_id, g.handle))
        return actions

    def next_wake(self) -> float | None:
        """When a step next has something to do by the clock alone (a retry, a retell)."""
        times = [r.host_at for r in self.replicas.values() if not r.hosted and not r.hosting]
        times += [r.retell_at for r in self.replicas.values() if r.hosted and r.told is None and r.retell_at]
        times += [g.retry_at for g in self.supervised.values() if not g.serving and not g.stopped]
        return min(times, default=None)

    def _current(self, key: ReplicaKey, handle: Any) -> Replica | None:
        r = self.replicas.get(key)
        return r if r is not None and r.handle is handle else None

    def hosted(self, action: Host, address: str, now: float) -> None:
        """Its shard hosts it (idempotent) and listens at `address`: it is told its state next."""
        r = self._current(action.key, action.handle)
        if r is None:
            return
        r.hosting = False
        if action.life != self.shard_lives.get(r.shard, 0):  # the shard died meanwhile
            self._down(action.key, r, now)
            return
        r.hosted, r.delay_s, r.told, r.retell_at = True, RETRY_S, None, 0.0
        if r.listener != address:  # its address first: the image routes to a leader only once it
            r.listener = address   # also confirmed that it leads (`told`)
            self.changed = True

    def host_failed(self, action: Host, now: float) -> None:
        r = self._current(action.key, action.handle)
        if r is not None:
            r.hosting = False
            self._down(action.key, r, now)
            r.delay_s = min(r.delay_s * 2, RETRY_S_MAX)

    def _down(self, key: ReplicaKey, r: Replica, now: float) -> None:
        r.hosted, r.told = False, None
        r.host_at = now + r.delay_s
        if r.leading is not None:  # no route to it until it is back, listening and told it leads
            r.leading = None
            self.changed = True

    def shard_died(self, shard: ShardKey, now: float) -> None:
        """Ray restarts a dead shard empty: its replicas are hosted again (after RETRY_S)."""
        self.shard_lives[shard] = self.shard_lives.get(shard, 0) + 1
        for key, r in self.replicas.items():
            if r.shard == shard and (r.hosted or r.leading is not None):
                self._down(key, r, now)

    def told(self, action: Tell) -> None:
        """The replica took `action.state`: if it leads in that epoch, gateways may route to it
        (unless its shard died meanwhile: the answer may come from before the death)."""
        r = self._current(action.key, action.handle)
        leader, leader_epoch = action.state[0], action.state[1]
        if r is not None and r.hosted and leader == action.key[2] and (r.leading if r.leading is not None else -1) < leader_epoch:
            r.leading = leader_epoch
            self.changed = True

    def tell_failed(self, action: Tell, now: float) -> None:
        """No answer in time (cut off) or an error: told again RETELL_S later (or once hosted again)."""
        r = self._current(action.key, action.handle)
        if r is not None and r.told == action.state:
            r.told, r.retell_at = None, now + RETELL_S

    def serving_replica(self, key: ReplicaKey, core) -> bool:
        """Replica `key` listens and, if it is its partition's leader, confirmed that it leads."""
        r = self.replicas.get(key)
        if r is None or r.listener is None:
            return False
        topic = core.topics_by_id.get(key[0])
        if topic is None or key[1] >= len(topic.partitions):
            return True  # deleted meanwhile: nothing to wait for
        p = topic.partitions[key[1]]
        return p.leader != key[2] or r.leading == p.leader_epoch

    def route(self, key: ReplicaKey, leader_epoch: int) -> tuple[Any, str | None]:
        """(the replica's handle or None, its listener if it confirmed leading in `leader_epoch`)."""
        r = self.replicas.get(key)
        if r is None:
            return None, None
        return r.handle, (r.listener if r.listener is not None and r.leading == leader_epoch else None)

    # ---- gateways and brokers ------------------------------------------------------------
    def supervise_gateway(self, broker_id: int, handle: Any) -> None:
        if broker_id not in self.supervised:
            self.supervised[broker_id] = GatewaySupervision(handle)

    def gateway_started(self, action: ServeGateway) -> None:
        """Its start answered: the broker serves (its start ends with broker_ready answered, by this
        controller or, for a gateway adopted after a controller restart, by an earlier one, which
        this incarnation never hears of: without this, deploy_brokers would wait for it forever)."""
        g = self.supervised.get(action.broker_id)
        if g is not None and g.handle is action.handle:
            g.delay_s, g.started = RETRY_S, True
            if action.broker_id in self.registered and action.broker_id not in self.serving:
                self.serving.add(action.broker_id)
                self.changed = True

    def gateway_stopped(self, action: ServeGateway) -> None:
        g = self.supervised.get(action.broker_id)
        if g is not None and g.handle is action.handle:
            g.serving, g.stopped = False, True

    def gateway_failed(self, action: ServeGateway, listen_error: str | None, now: float) -> None:
        """Its gateway failed or restarted (`listen_error`: it could not open its listener)."""
        g = self.supervised.get(action.broker_id)
        if g is None or g.handle is not action.handle:
            return
        self.serving.discard(action.broker_id)
        g.started = False
        if listen_error is not None:
            self.broker_failures[action.broker_id] = listen_error
        self.changed = True
        g.serving, g.retry_at = False, now + g.delay_s
        g.delay_s = min(g.delay_s * 2, RETRY_S_MAX)

    def broker_registered(self, broker_id: int, node_id: str, host: str, port: int, broker_epoch: int,
                          previous_node_id: str | None = None) -> list:
        """A gateway registered its broker (a new broker epoch) from Ray node `node_id`
        (`previous_node_id`: where it had registered from before). A gateway an earlier controller
        started, on a node this one has not claimed yet, is that node's broker now (else the node
        watcher would start a second gateway for it). A broker that moved to another node has
        its shards there: those on the old node (started or adopted while it was believed there)
        are killed and its replicas forgotten, to start again on the new node."""
        if node_id and node_id not in self.node_brokers and node_id not in self.lost_nodes \
                and broker_id not in self.node_brokers.values():
            self.node_brokers[node_id] = broker_id
        said: list = []
        if previous_node_id and node_id and previous_node_id != node_id:
            for shard in [s for s in self.shards if s[0] == broker_id]:
                said.append(Kill(("shard", *shard), self.shards.pop(shard)))
            for key in [k for k in self.replicas if k[2] == broker_id]:
                del self.replicas[key]
        if broker_id in self.ever_registered:
            said.append(Say(f"broker {broker_id} back: registered again at {host}:{port} (broker epoch "
                            f"{broker_epoch}); its replicas catch up and rejoin the ISRs"))
        self.ever_registered.add(broker_id)
        self.registered.add(broker_id)
        g = self.supervised.get(broker_id)
        if g is not None and g.started:  # its start answered before it registered with this controller
            self.serving.add(broker_id)
        self.broker_failures.pop(broker_id, None)
        self.changed = True
        return said

    def broker_serving(self, broker_id: int) -> None:
        self.serving.add(broker_id)
        self.changed = True

    # ---- Ray nodes -----------------------------------------------------------------------
    def nodes_seen(self, nodes: list[NodeView]) -> tuple[list, list[NodeView]]:
        """Ray's node table as it is now: actions for the broker nodes that died, and the new nodes
        that host a broker (each to be given its broker id, then `claim`ed). A node another took
        over (`replaces`) stays retired while Ray still lists it."""
        alive = {node.node_id for node in nodes if node.alive}
        actions: list = []
        for node_id in [n for n in self.node_brokers if n not in alive]:
            actions += self.node_lost(node_id)
        new = []
        for node in nodes:
            if not node.alive or node.node_id in self.node_brokers or node.node_id in self.lost_nodes:
                continue
            if not node.hosts_broker:
                self.node_brokers[node.node_id] = None
                continue
            new.append(node)
        return actions, new

    def proposed_broker_id(self, configured: int) -> int:
        """The id an unlabelled new node is offered (it keeps the one its meta.properties holds)."""
        return proposed_broker_id(configured, {b for b in self.node_brokers.values() if b is not None})

    def claim(self, node: NodeView, broker_id: int, nodes: list[NodeView]) -> list:
        """New node `node` is broker `broker_id`: its gateway starts, unless a live node elsewhere
        has that id (a configuration error, said once); a node on the same host takes the place of
        the one there (started again before Ray declared it dead)."""
        views = {n.node_id: n for n in nodes}
        holder = next((n for n, b in self.node_brokers.items() if b == broker_id), None)
        actions: list = []
        if holder is not None:
            if holder in self.confirmed_nodes and replaces(views.get(holder), node):
                return actions  # (the older node of that host: it goes once Ray declares it dead)
            if not replaces(views.get(holder), node):
                if (node.node_id, holder) not in self.id_conflicts:
                    self.id_conflicts.add((node.node_id, holder))
                    actions.append(Say(
                        f"Ray node {node.node_id[:12]} at {node.address} claims broker id {broker_id}, which live "
                        f"node {holder[:12]} at {views[holder].address} has: it runs no broker (give each node "
                        f"its own kray-broker-id label)"))
                return actions
            actions += self.node_lost(holder, replaced_by=node)
        self.node_brokers[node.node_id] = broker_id
        actions.append(StartGateway(broker_id, node))
        if broker_id in self.ever_registered:  # lost with its node before, or restarted
            actions.append(Say(f"broker {broker_id} returns on a new Ray node {node.node_id[:12]} at {node.address} "
                               f"(its node was started again): its replicas recover from its data directory"))
        return actions

    def gateway_located(self, broker_id: int, node_id: str) -> None:
        """A gateway a StartGateway found running already (started by an earlier controller) says
        where it runs: if not on the node that claimed its broker, that claimant was an older node
        of the host that Ray has not declared dead yet; it is retired, and the gateway's node is
        the broker's."""
        holder = next((n for n, b in self.node_brokers.items() if b == broker_id), None)
        if holder is None or holder == node_id:
            return
        del self.node_brokers[holder]
        self.lost_nodes.add(holder)
        self.node_brokers[node_id] = broker_id
        self.confirmed_nodes.add(node_id)

    def gateway_deployed(self, broker_id: int, handle: Any) -> None:
        self.gateways[broker_id] = handle
        self.supervised.pop(broker_id, None)
        self.supervise_gateway(broker_id, handle)

    def node_lost(self, node_id: str, replaced_by: NodeView | None = None) -> list:
        """A broker's Ray node died: its gateway and the replicas it hosted died with it (Ray can't
        restart them elsewhere: they are pinned to the node that holds their data). The broker is
        fenced at once; its actors are forgotten (and killed, freeing their names), so that the
        node that returns with the same broker id gets a gateway and its replicas again, recovered
        from its data directory. `replaced_by`: a new node on the same host claims the broker
        before Ray declared this one dead (nodes.replaces)."""
        broker_id = self.node_brokers.pop(node_id)
        self.lost_nodes.add(node_id)
        self.confirmed_nodes.discard(node_id)
        if broker_id is None:
            return []
        if replaced_by is None:
            said = Say(f"broker {broker_id} lost: Ray declared its node {node_id[:12]} dead (the machine stopped, or "
                       f"was cut off longer than Ray's health checks allow); it returns when its node does")
        else:
            said = Say(f"broker {broker_id} lost: a new Ray node {replaced_by.node_id[:12]} on its host "
                       f"{replaced_by.address} takes its place (the node {node_id[:12]} there was started again "
                       f"before Ray declared it dead)")
        actions: list = [said, Fence(broker_id)]
        self.serving.discard(broker_id)
        self.registered.discard(broker_id)
        self.broker_failures.pop(broker_id, None)  # its gateway failing on a dead node: not a listener problem
        self.supervised.pop(broker_id, None)
        gateway = self.gateways.pop(broker_id, None)
        if gateway is not None:
            actions.append(Kill(("gateway", broker_id), gateway))
        for shard in [s for s in self.shards if s[0] == broker_id]:
            actions.append(Kill(("shard", *shard), self.shards.pop(shard)))
        for key in [k for k in self.replicas if k[2] == broker_id]:
            del self.replicas[key]  # died with its shard
        self.changed = True
        return actions

    def broker_retired(self, broker_id: int) -> tuple[Any, list[Any]]:
        """A drained broker leaves (kray remove-broker, a node Ray drains): its node runs no broker from now on
        (a gateway left there may not register again, as on a lost node), and its gateway and shards are
        forgotten, returned (gateway or None, shards) for the shell to stop. A node started again (a new Ray
        node id) is a new broker node."""
        for node_id in [n for n, b in self.node_brokers.items() if b == broker_id]:
            del self.node_brokers[node_id]
            self.lost_nodes.add(node_id)
            self.retired_nodes.add(node_id)
            self.confirmed_nodes.discard(node_id)
        self.registered.discard(broker_id)
        self.serving.discard(broker_id)
        self.broker_failures.pop(broker_id, None)
        self.supervised.pop(broker_id, None)
        gateway = self.gateways.pop(broker_id, None)
        shards = [self.shards.pop(s) for s in [s for s in self.shards if s[0] == broker_id]]
        for key in [k for k in self.replicas if k[2] == broker_id]:
            del self.replicas[key]
        self.changed = True
        return gateway, shards

    # ---- a controller that starts while the actors run -----------------------------------
    def adopt(self, core, shards: dict[ShardKey, tuple[Any, list | None]], gateways: dict[int, tuple[Any, str, bool]],
              replica_handle: Callable[[Any, Any, int, int], Any]) -> None:
        """After Ray restarts the controller (or a standby takes over), the actors started before
        are still running under their names: adopt them instead of starting twins. `shards`: each
        found shard with the (topic id, partition)s it says it hosts (None: it did not answer);
        `gateways`: each found gateway with the Ray node it runs on (and whether it said so, or
        that is the node its broker registered from). A hosted replica of a partition that exists
        is adopted (hosted again, idempotently, and told its state), with the handle
        `replica_handle(shard, topic, partition, broker id)` makes; one no longer placed there (a
        reassignment completed while no controller ran) too, for `unwanted` to stop it; gateways
        are supervised, and their brokers count as registered where they registered from."""
        for (broker_id, index), (shard, hosted) in shards.items():
            self.shards[(broker_id, index)] = shard
            for topic_id, partition in hosted or ():
                topic = core.topics_by_id.get(topic_id)
                if topic is None or partition >= len(topic.partitions):
                    continue
                self.replicas[(topic_id, partition, broker_id)] = Replica(
                    replica_handle(shard, topic, partition, broker_id), (broker_id, index))
        for broker_id, (gateway, node_id, answered) in gateways.items():
            self.gateways[broker_id] = gateway
            self.node_brokers[node_id] = broker_id
            if answered:
                self.confirmed_nodes.add(node_id)
            self.supervise_gateway(broker_id, gateway)
        # (a gateway that says it runs on another node than its broker registered from, or that
        # never registered, gets replicas once it registers: else they would start on the old node)
        self.registered = {b for b, (_, node_id, answered) in gateways.items()
                           if b in core.brokers and (not answered or core.brokers[b].node_id == node_id)}



class SessionTicks:
    """The controller's session tick, by the clocks passed in (wall ms for sessions, monotonic s
    for the rebalance interval): a tick much later than due means the controller itself stalled
    (CPU starved, paused), and every broker gets a fresh session rather than the blame (heartbeats
    may be waiting in its queue); else the core fences brokers whose session expired, and every
    `rebalance_interval_s` (None: never) leaders go back to their preferred replicas."""

    def __init__(self, now_ms: int, now_s: float, tick_ms: int, stall_grace_ms: int,
                 rebalance_interval_s: float | None):
        self.last_tick_ms, self.last_balance_s = now_ms, now_s
        self.tick_ms, self.stall_grace_ms = tick_ms, stall_grace_ms
        self.rebalance_interval_s = rebalance_interval_s

    def stalled_ms(self, now_ms: int) -> int:
        """How long the controller stalled before this tick (0: it did not)."""
        stalled_ms, self.last_tick_ms = now_ms - self.last_tick_ms - self.tick_ms, now_ms
        return stalled_ms if stalled_ms > self.stall_grace_ms else 0

    def rebalance_due(self, now_s: float) -> bool:
        if self.rebalance_interval_s is None or now_s - self.last_balance_s < self.rebalance_interval_s:
            return False
        self.last_balance_s = now_s
        return True


def expired_sessions(replication, now_ms: int) -> list[tuple[int, int]]:
    """(broker id, ms since its last heartbeat) of the unfenced brokers whose session expired."""
    return [(b.broker_id, now_ms - b.last_heartbeat_ms) for b in replication.brokers.values()
            if not b.fenced and b.last_heartbeat_ms is not None
            and now_ms - b.last_heartbeat_ms > replication.broker_session_timeout_ms]
