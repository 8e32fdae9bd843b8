"""The part of the controller's shell that carries out what its reconciler decides
(actors/controller/reconciler.py), and feeds it what happens: one loop steps the reconciler after
every change and when a retry is due; a host, a tell or a gateway's serve call runs as a task that
reports its result back; one watcher per shard reports its death; the node watcher polls Ray's
node table (fast for a while after a shard died) and deploys a broker on every new broker node;
the session tick fences brokers whose heartbeats stopped. Starting a replica (its shard on its
broker's node) and a gateway are Ray calls made here.
"""
from __future__ import annotations

import asyncio
import logging
import time

import ray

from actors import composition
from actors.config_schema import TopicConfig, effective_dynamic_broker_config
from actors.controller.core import TopicState
from actors.controller.leadership import running_gateway
from actors.controller.nodes import NodeView, recorded_broker_id
from actors.controller.ray_calls import SHARDS_PER_BROKER_MAX, ShardCalls, listen_failure
from actors.controller.reconciler import (Fence, Host, Kill, Say, ServeGateway, SessionTicks, StartGateway,
                                          StopReplica, Tell, desired_replicas, expired_sessions, partition_state,
                                          placed_replicas)
from actors.names import NAMESPACE, controller_name, gateway_name, shard_name
from actors.shard.hosted import HostedReplica, shard_index

log = logging.getLogger("kray.controller")
RECONCILE_EVERY_S_MAX = 30.0  # the reconciler steps at least this often, with no change
# changes come in bursts (a topic of 1,000 partitions is 1,000 replicas confirming one by one): a
# round of telling replicas waits this long for more, so a burst costs a few rounds, not one each
CHANGES_COALESCE_S = 0.02
SUPERVISE_RETRY_S = 0.2
NODE_POLL_S = 1.0
# after a shard died (its node may have): ray.nodes() is polled this often for a while, so a lost
# node's partitions move as soon as Ray declares it dead, not up to NODE_POLL_S later
NODE_POLL_S_SUSPECT = 0.1
NODE_SUSPECT_S = 5.0
REPLICATION_TICK_S = 0.25  # session expiry checks
STALL_GRACE_MS = 1000  # a tick this late means the controller itself stalled
LEADER_IMBALANCE_CHECK_INTERVAL_S_DEFAULT = 300  # leader.imbalance.check.interval.seconds
REPLICA_UPDATE_TIMEOUT_S = 5.0  # a replica that does not take its partition state in this long is told again


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def draining_ray_nodes() -> set[str]:
    """The nodes Ray drains (its DrainNode API: `ray drain-node`, the autoscaler), by node id. Ray's Python API
    has it only in ray._private.state (Ray 2.60); without it, none."""
    try:
        from ray._private.state import state
        return set(state.get_draining_nodes())
    except (ImportError, AttributeError):
        return set()


class Supervision:
    def __init__(self, shell):
        self.shell = shell  # the ControllerActor: its core, metadata log, events and images
        self.rec = shell.rec
        self.tasks: set[asyncio.Task] = set()  # the reconciler's actions under way (calls to actors)
        self.wake = asyncio.Event()  # a result came back: the reconciler steps again
        self.reconciling: asyncio.Task | None = None
        self.shard_watchers: dict[tuple[int, int], asyncio.Task] = {}  # one per shard: fails when it dies
        self.shard_call = ShardCalls(self._hosting_spec)  # control calls to replicas, batched per shard
        self.node_cpus: dict[str, int] = {}  # Ray node id -> its CPU count (the default shard count)
        self.node_watcher: asyncio.Task | None = None
        self.nodes_suspect_until = 0.0  # loop time until which ray.nodes() is polled fast
        self.node_poll_wake = asyncio.Event()
        self.ticker: asyncio.Task | None = None

    @property
    def core(self):
        return self.shell.core

    def start(self) -> None:
        """Once the metadata is read: the reconciler's loop, the node watcher and the session tick."""
        if self.node_watcher is None:
            self.node_watcher = asyncio.ensure_future(self._watch_nodes())
            self.ticker = asyncio.ensure_future(self._tick())
            self.reconciling = asyncio.ensure_future(self._keep_reconciling())

    def stop(self) -> None:
        for task in [*self.tasks, *self.shard_watchers.values(), self.node_watcher, self.ticker, self.reconciling]:
            if task is not None:
                task.cancel()

    def learn_node_cpus(self, nodes: list[dict]) -> None:
        """Each live node's CPU count (the default shard count of its broker), from ray.nodes()."""
        for node in nodes:
            if node.get("Alive") and node["NodeID"] not in self.node_cpus:
                cpus = node.get("Resources", {}).get("CPU", 1)
                self.node_cpus[node["NodeID"]] = max(1, min(int(cpus), SHARDS_PER_BROKER_MAX))

    async def _watch_nodes(self) -> None:
        loop = asyncio.get_running_loop()
        gcs_silent_since = None
        while True:
            try:
                await self._deploy_new_nodes()
                if gcs_silent_since is not None:
                    log.warning("Ray's GCS answers again (after %.0f s)", loop.time() - gcs_silent_since)
                    gcs_silent_since = None
            except asyncio.CancelledError:
                raise
            except TimeoutError:  # (GcsCalls) the Ray head is cut off from this node: said once
                if gcs_silent_since is None:
                    gcs_silent_since = loop.time()
                    log.warning("Ray's GCS does not answer (the Ray head cut off?): new and lost Ray nodes are "
                                "noticed once it does; brokers are fenced by their heartbeats meanwhile")
            except Exception:
                log.exception("starting brokers on new Ray nodes failed; trying again")
            wait_s = NODE_POLL_S_SUSPECT if loop.time() < self.nodes_suspect_until else NODE_POLL_S
            self.node_poll_wake.clear()
            try:
                await asyncio.wait_for(self.node_poll_wake.wait(), wait_s)
            except asyncio.TimeoutError:
                pass

    def _suspect_nodes(self) -> None:
        """A shard died: perhaps with its node. Poll Ray's node table fast for a while."""
        self.nodes_suspect_until = asyncio.get_running_loop().time() + NODE_SUSPECT_S
        self.node_poll_wake.set()

    async def _deploy_new_nodes(self) -> None:
        ray_nodes = await self.shell.leadership.gcs(ray.nodes)
        self.learn_node_cpus(ray_nodes)
        nodes = list(map(NodeView.of, ray_nodes))
        actions, new = self.rec.nodes_seen(nodes)
        self.execute(actions)
        self.drain_brokers_of(await self.shell.leadership.gcs(draining_ray_nodes))
        for node in new:
            broker_id = node.labelled_broker_id
            if broker_id is None:
                proposed = self.rec.proposed_broker_id(int(self.core.broker_config["broker.id"]))
                broker_id = await composition.run_on_node(node.node_id, recorded_broker_id, str(self.shell.data_dir),
                                                          proposed)
            self.execute(self.rec.claim(node, broker_id, nodes))

    def drain_brokers_of(self, nodes: set[str]) -> None:
        """Ray drains these nodes (`ray drain-node`, an autoscaler taking a node down): their brokers are
        drained as kray remove-broker drains one (the dynamic broker config kray.broker.draining)."""
        for node_id in sorted(nodes):
            broker_id = self.rec.node_brokers.get(node_id)
            if broker_id is None or broker_id not in self.core.brokers or broker_id in self.core.draining_brokers():
                continue
            outcome = self.core.alter_broker_configs(str(broker_id), {"kray.broker.draining": True})
            self.shell._persist(outcome)
            if not outcome.error_code:
                self.shell._say(f"broker {broker_id} is drained: Ray drains its node {node_id[:12]}; its replicas "
                                f"move to the other brokers, then it unregisters")

    def execute(self, actions: list) -> None:
        """Carry out the reconciler's actions: the quick ones here, calls to actors as tasks that
        report their results back to it."""
        for action in actions:
            if isinstance(action, Say):
                self.shell._say(action.text)
            elif isinstance(action, Fence):
                log.warning("broker %d is gone with its Ray node", action.broker_id)
                fenced = self.core.replication.broker_died(action.broker_id)
                self.shell._persist(self.core.replication_outcome(fenced.records))
            elif isinstance(action, Kill):
                try:
                    ray.kill(action.handle, no_restart=True)  # frees its name for the node that returns
                except Exception as e:
                    log.debug("could not kill %s: %s", action.what, e)
            elif isinstance(action, StartGateway):
                self._start_gateway(action.broker_id, action.node)
            elif isinstance(action, Host):
                self._spawn(self._host(action))
            elif isinstance(action, Tell):
                self._spawn(self._tell(action))
            elif isinstance(action, ServeGateway):
                self._spawn(self._serve_gateway(action))
            elif isinstance(action, StopReplica):
                self._spawn(self._stop_replica(action))
            else:
                raise TypeError(f"the controller does not carry out {action!r}")
        self.note_changes()

    async def _locate_gateway(self, broker_id: int, gateway) -> None:
        try:
            self.rec.gateway_located(broker_id, await gateway.node_id.remote())
        except Exception as e:  # (dead, or cut off: its node is lost or found by the node watcher)
            log.info("broker %d's running gateway did not say where it runs: %s", broker_id, e)

    def _start_gateway(self, broker_id: int, node: NodeView) -> None:
        try:
            gateway = (running_gateway(broker_id) if self.shell.quorum_voters else None) or \
                composition.start_gateway(self.core.broker_config, broker_id, node.node_id, self.shell._own_handle(),
                                          node.port)
        except ray.exceptions.ActorAlreadyExistsError:  # an earlier controller started it: adopt it
            gateway = ray.get_actor(gateway_name(broker_id), namespace=NAMESPACE)
            self._spawn(self._locate_gateway(broker_id, gateway))
        if self.shell.voter_id is not None and broker_id in self.shell.quorum_voters:
            self._ensure_controller(broker_id, node.node_id)
        self.rec.gateway_deployed(broker_id, gateway)
        log.info("broker %d starting on Ray node %s", broker_id, node.node_id[:12])
        self.wake_up()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def note_changes(self) -> None:
        """What the reconciler learnt changed the image: a new version."""
        if self.rec.take_changed():
            self.shell._bump()

    def wake_up(self) -> None:
        """The reconciler has news (a result): it steps again."""
        self.wake.set()

    async def _keep_reconciling(self) -> None:
        """Step the reconciler after every change (coalesced), every result it waits for, and when
        its next retry is due; carry out what it decides."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                self.follow_placements()
                self.execute(self.rec.step(loop.time(), lambda key: partition_state(self.core, key)))
            except Exception:
                log.exception("reconciling the controller's actors failed")
            wake_at = self.rec.next_wake()
            deadline = loop.time() + RECONCILE_EVERY_S_MAX
            if await self._await_change_or_wake(deadline if wake_at is None else min(deadline, wake_at)):
                await asyncio.sleep(CHANGES_COALESCE_S)

    async def _await_change_or_wake(self, deadline: float) -> bool:
        wake = asyncio.ensure_future(self.wake.wait())
        change = asyncio.ensure_future(self.shell._await_change(deadline))
        done, pending = await asyncio.wait({wake, change}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if wake in done:
            self.wake.clear()
            return True
        return change.result()

    async def _host(self, action: Host) -> None:
        """Have a replica's shard host it (idempotent) and learn its listener's address."""
        loop = asyncio.get_running_loop()
        try:
            self._watch_shard(action.shard)
            await self.shell._durable()  # its partition (a new topic's) is committed before it has files
            address = await self.shard_call(action.handle, "host")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("%s failed or restarted (%s); asking it to serve again", action.key, type(e).__name__)
            self.rec.host_failed(action, loop.time())
        else:
            self.rec.hosted(action, address, loop.time())
        self.note_changes()
        self.wake_up()

    async def _tell(self, action: Tell) -> None:
        """Send a replica its partition's state (only committed state), at most
        REPLICA_UPDATE_TIMEOUT_S: one cut off is told again after reconciler.RETELL_S."""
        try:
            await self.shell._durable()
            await asyncio.wait_for(self.shard_call(action.handle, "update", *self._update_args(action.state)),
                                   REPLICA_UPDATE_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # died (hosted again once its shard is back), or cut off
            log.debug("could not tell %s its partition state: %s", action.key, e)
            self.rec.tell_failed(action, asyncio.get_running_loop().time())
        else:
            self.rec.told(action)
        self.note_changes()
        self.wake_up()

    def follow_placements(self) -> None:
        """Replicas follow their partitions' placement (a reassignment): the replicas a move adds
        start (hosted, told their state: they fetch from the leader and join the ISR once caught
        up), and those it removed (the move completed, or was cancelled) stop and delete their files."""
        for topic in self.core.take_placement_changes():
            self.start_partitions(topic)
            self.execute(self.rec.unwanted(placed_replicas(self.core, [topic]), {topic.topic_id}))

    async def _stop_replica(self, action: StopReplica) -> None:
        """A replica no longer placed on its broker: deleted once the change is committed (a cut
        off one deletes its files when its broker returns and finds it no longer placed there)."""
        try:
            await self.shell._durable()
            await asyncio.wait_for(action.handle.delete.remote(), REPLICA_UPDATE_TIMEOUT_S)
            log.info("replica %s stopped and deleted: no longer placed on its broker", action.key)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("could not stop replica %s (%s): its broker deletes it when it next starts", action.key,
                     type(e).__name__)

    async def _serve_gateway(self, action: ServeGateway) -> None:
        """Keep a gateway serving: ask it to start, wait until it stops; when Ray restarts it (the
        call fails), ask again."""
        try:
            await action.handle.start.remote()
            self.rec.gateway_started(action)
            await action.handle.until_stopped.remote()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("broker %d's gateway failed or restarted (%s); asking it to serve again", action.broker_id,
                     type(e).__name__)
            # (not a gateway cut off, or on a node Ray declared dead)
            why = str(getattr(e, "cause", None) or e).splitlines()[-1] if listen_failure(e) else None
            self.rec.gateway_failed(action, why, asyncio.get_running_loop().time())
        else:
            self.rec.gateway_stopped(action)
        self.note_changes()
        self.wake_up()

    def _hosting_spec(self, actor: HostedReplica) -> dict:
        """What a replica is hosted with now: its spec with its topic's configs as they are now. A
        shard that Ray restarted hosts its replicas again from their specs, and a config altered
        since the replica first started (AlterConfigs reaches hosted replicas only, and not one
        whose shard is restarting) must be in force after the restart too."""
        topic = self.core.topics_by_id.get(actor.spec["topic_id"])
        if topic is not None:
            actor.spec["config"] = TopicConfig.from_kafka(self.core.effective_configs(topic))
        broker = self.core.brokers.get(actor.spec["broker_id"])
        if broker is not None:  # the shard's part of its broker's replication throttle, as it is now
            actor.spec["follower_throttle_bytes_per_s"] = self._shard_throttle(broker)
        return actor.spec

    def _shard_throttle(self, broker) -> float | None:
        """One shard's part of its broker's follower.replication.throttled.rate (the broker's rate shared by
        its shards, whose fetchers fetch independently); None: no throttle."""
        rate = int(effective_dynamic_broker_config("follower.replication.throttled.rate", broker.broker_id,
                                                   self.core.broker_config, self.core.dynamic_broker_configs))
        if rate >= 2**63 - 1:
            return None
        try:
            shards = self._shard_count(broker)
        except LookupError:
            shards = max(1, sum(1 for b, _ in self.rec.shards if b == broker.broker_id))
        return rate / shards

    def push_replication_throttles(self) -> None:
        """Every shard takes its part of its broker's replication throttle as the dynamic configs say now."""
        for (broker_id, _), shard in list(self.rec.shards.items()):
            broker = self.core.brokers.get(broker_id)
            if broker is not None:
                self._spawn(self._set_throttle(shard, self._shard_throttle(broker)))

    @staticmethod
    async def _set_throttle(shard, rate: float | None) -> None:
        try:
            await asyncio.wait_for(shard.set_replication_throttle.remote(rate), REPLICA_UPDATE_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # (a shard that restarts takes the rate when it hosts its replicas again)
            log.info("could not set a shard's replication throttle: %s", e)

    async def _watch_shard_life(self, key: tuple[int, int], shard) -> None:
        while self.rec.shards.get(key) is shard:
            try:
                await shard.until_stopped.remote()
                return  # closed on purpose
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("shard %s died (%s): its replicas are hosted again", shard_name(*key), type(e).__name__)
                self._suspect_nodes()
                self.rec.shard_died(key, asyncio.get_running_loop().time())
                self.note_changes()
                self.wake_up()
                await asyncio.sleep(SUPERVISE_RETRY_S)

    def _watch_shard(self, key: tuple[int, int]) -> None:
        """One watcher per shard: a pending call that fails when the shard dies (Ray then restarts
        it empty), which the reconciler hears (it hosts the shard's replicas again)."""
        watcher = self.shard_watchers.get(key)
        if watcher is None or watcher.done():
            self.shard_watchers[key] = asyncio.ensure_future(self._watch_shard_life(key, self.rec.shards[key]))

    @staticmethod
    def _update_args(state: tuple) -> list:
        """A replica's `update` arguments for partition state `state` (reconciler.partition_state)."""
        leader, leader_epoch, partition_epoch, replicas, isr, endpoint, broker_epoch, fenced = state
        return [{"leader": leader, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
                 "replicas": list(replicas), "isr": list(isr)}, endpoint, broker_epoch, list(fenced)]

    async def _tick(self) -> None:
        """Fence brokers whose session expired; now and then, give partitions back to their
        preferred leaders (auto.leader.rebalance.enable)."""
        config, loop = self.core.broker_config, asyncio.get_running_loop()
        rebalance = str(config.get("auto.leader.rebalance.enable", True)).lower() == "true"
        interval_s = float(config.get("leader.imbalance.check.interval.seconds", LEADER_IMBALANCE_CHECK_INTERVAL_S_DEFAULT))
        ticks = SessionTicks(now_ms(), loop.time(), int(REPLICATION_TICK_S * 1000), STALL_GRACE_MS,
                             interval_s if rebalance else None)
        replication = self.core.replication
        while True:
            await asyncio.sleep(REPLICATION_TICK_S)
            try:
                now = now_ms()
                stalled_ms = ticks.stalled_ms(now)
                if stalled_ms:
                    log.warning("the controller stalled for %d ms: every broker gets a fresh session", stalled_ms)
                    replication.finish_replay(now)
                    continue
                for broker_id, silent_ms in expired_sessions(replication, now):
                    log.warning("broker %d is fenced: no heartbeat for %d ms (broker.session.timeout.ms)",
                                broker_id, silent_ms)
                    self.shell._say(f"broker {broker_id} fenced: no heartbeat for {silent_ms} ms (broker.session.timeout.ms="
                              f"{replication.broker_session_timeout_ms}); other replicas lead its "
                              f"partitions until it is back")
                self.shell._persist(self.core.replication_outcome(replication.tick(now).records))
                if ticks.rebalance_due(loop.time()):
                    self.shell._persist(self.core.replication_outcome(replication.balance_leaders().records))
            except Exception:
                log.exception("the controller's replication tick failed")

    def _ensure_controller(self, broker_id: int, node_id: str) -> None:
        """A voting broker's node (back) has its controller, standing by."""
        if broker_id == self.shell.voter_id:
            return
        try:
            ray.get_actor(controller_name(broker_id), namespace=NAMESPACE)
        except ValueError:
            composition.start_controller(type(self.shell), self.shell.broker_config, node_id, broker_id)
            log.info("controller of broker %d started on its node %s, standing by", broker_id, node_id[:12])

    def _start_replica(self, spec: dict, broker) -> tuple[HostedReplica, tuple[int, int]]:
        """A replica on its broker's node, in the shard a stable function of its partition picks
        (started if it is not yet); the shard hosts it when the reconciler first asks it to."""
        index = shard_index(spec["topic_id"], spec["partition"], self._shard_count(broker))
        shard = self.rec.shards.get((broker.broker_id, index))
        if shard is None:
            try:
                shard = composition.start_shard(broker.broker_id, index, self.core.broker_config, broker.node_id)
            except ray.exceptions.ActorAlreadyExistsError:  # running, unknown to this controller: adopt it
                shard = ray.get_actor(shard_name(broker.broker_id, index), namespace=NAMESPACE)
            self.rec.shards[(broker.broker_id, index)] = shard
        return HostedReplica(shard, spec), (broker.broker_id, index)

    def _shard_count(self, broker) -> int:
        """num.partition.shards, or (0, the default) the CPUs Ray gives the broker's node."""
        configured = int(self.core.broker_config.get("num.partition.shards", 0))
        if configured > 0:
            return min(configured, SHARDS_PER_BROKER_MAX)
        if broker.node_id not in self.node_cpus:
            if self.shell.quorum_voters:  # (never a GCS call on the event loop: the Ray head may be cut off)
                raise LookupError(f"the CPU count of broker {broker.broker_id}'s node is not known yet")
            self.learn_node_cpus(ray.nodes())
        return self.node_cpus.get(broker.node_id, 1)

    def start_partitions(self, topic: TopicState) -> list:
        """Start the missing replicas of a topic that the reconciler wants, each in a shard on its
        broker's node (it hosts them and tells them their state, again after Ray restarts their
        shard); return the keys of all its wanted replicas that run or start."""
        config = TopicConfig.from_kafka(self.core.effective_configs(topic))
        listening, starts = self.rec.missing(desired_replicas(self.core, self.rec.registered, [topic]))
        for start in starts:
            _, index, broker_id = start.key
            try:
                replica, shard = self._start_replica(self.shell._replica_spec(topic, index, broker_id, config),
                                                     self.core.brokers[broker_id])
            except LookupError as e:  # started later: when the node watcher has seen the node
                log.info("replica %s-%d on broker %d waits: %s", topic.name, index, broker_id, e)
                continue
            self.rec.replica_started(start.key, replica, shard)
            listening.append(start.key)
        if starts:
            self.note_changes()
        return listening
