"""The controller's Ray shell: persists what the core decides, starts and stops partition actors,
and serves metadata images to gateways (long-polled, so every gateway learns of a change at once).
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from actors import internal_topics
from actors.controller.core import BrokerInfo, ControllerCore, Outcome, TopicState
from actors.controller.metadata_log import MetadataLog
from actors.controller.nodes import NodeView, proposed_broker_id, recorded_broker_id
from cluster import composition
from cluster.config import TopicConfig
from protocol.errors import ErrorCode

log = logging.getLogger("kray.controller")
METADATA_WAIT_S_MAX = 30.0
PARTITION_START_TIMEOUT_S = 60.0
SUPERVISE_RETRY_S = 0.2
SUPERVISE_RETRY_S_MAX = 5.0
NODE_POLL_S = 1.0


@dataclass
class MetadataImage:
    """What a gateway needs to route requests: a versioned copy of the controller's state."""
    version: int
    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicState]
    partition_actors: dict[tuple[uuid.UUID, int], Any] = field(default_factory=dict)
    # where each partition leader's data-path listener is, on its own node (keyed like partition_actors)
    partition_listeners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    # coordinators, keyed by (internal topic name, partition): the leader actors of those partitions
    coordinators: dict[tuple[str, int], Any] = field(default_factory=dict)
    group_configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # overrides only

    def __post_init__(self):
        self.topics_by_id = {t.topic_id: t for t in self.topics.values()}

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        return self.topics_by_id.get(topic_id)

    def leader_id(self, topic: TopicState, index: int) -> int:
        """The broker clients send this partition's produce and fetch requests to: the broker of
        the node that hosts its leader actor."""
        return topic.partitions[index].leader


class ControllerActor:
    def __init__(self, broker_config: dict[str, Any]):
        self.data_dir = Path(broker_config["log.dirs"]).resolve()
        self.log = MetadataLog(self.data_dir / "__cluster_metadata" / "metadata.log")
        records = list(self.log.replay())
        cluster_id = next((r["cluster_id"] for r in records if r["type"] == "cluster"), None)
        if cluster_id is None:
            cluster_id = broker_config.get("cluster.id") or uuid.uuid4().hex[:22]
            self.log.append([{"type": "cluster", "cluster_id": cluster_id}])
        self.core = ControllerCore(broker_config, cluster_id)
        for record in records:
            if record["type"] != "cluster":
                self.core.apply(record)
        self.core.finish_replay()
        # metadata versions must keep growing across controller restarts (gateways ignore older
        # images): start each incarnation at the clock, in microseconds, above any earlier version
        self.core.metadata_version = max(self.core.metadata_version, time.time_ns() // 1000)
        self.partition_actors: dict[tuple[uuid.UUID, int], Any] = {}
        self.partition_listeners: dict[tuple[uuid.UUID, int], str] = {}
        self.supervisors: dict[tuple[uuid.UUID, int], asyncio.Task] = {}
        self.changed = asyncio.Event()
        self.node_brokers: dict[str, int | None] = {}  # Ray node id -> its broker id (None: no broker there)
        self.gateways: dict[int, Any] = {}
        self.serving: set[int] = set()  # brokers whose gateway registered in this incarnation
        self.broker_failures: dict[int, str] = {}  # broker id -> why its gateway could not start
        self.node_watcher: asyncio.Task | None = None
        self.to_supervise = self._adopt_running_actors()
        # brokers the log knows but whose gateway isn't running (yet): left out of Metadata, as
        # Kafka leaves out fenced brokers, until they register again
        self.lost_brokers: set[int] = set(self.core.brokers) - set(self.gateways)

    def _adopt_running_actors(self) -> list[tuple]:
        """After Ray restarts the controller, the actors it had started are still running under
        their names: find them again (the log says which should exist) instead of starting twins."""
        def running(name):
            try:
                return ray.get_actor(name, namespace=composition.NAMESPACE)
            except ValueError:
                return None
        found = []
        for topic in self.core.topics.values():
            for p in topic.partitions:
                key = (topic.topic_id, p.index)
                actor = running(composition.partition_name(topic.topic_id, p.index))
                if actor is not None:
                    self.partition_actors[key] = actor
                    found.append((key, actor, "listen", "until_closed"))
        for broker_id, broker in self.core.brokers.items():
            gateway = running(composition.gateway_name(broker_id))
            if gateway is not None:
                self.gateways[broker_id] = gateway
                self.node_brokers[broker.node_id] = broker_id
                found.append((("gateway", broker_id), gateway, "start", "until_stopped"))
        return found

    def _resume_supervision(self) -> None:
        """Supervisors and the node watcher are asyncio tasks: start them from the first async call."""
        for key, actor, serve, until in self.to_supervise:
            self.supervisors[key] = asyncio.ensure_future(self._supervise(key, actor, serve, until))
        self.to_supervise = []
        if self.node_watcher is None:
            self.node_watcher = asyncio.ensure_future(self._watch_nodes())

    # ---- brokers: one per Ray node -----------------------------------------------------------
    async def deploy_brokers(self, expected: int, timeout_s: float) -> list[BrokerInfo]:
        """Run a broker (gateway) on every broker node of the Ray cluster, nodes that join later
        included; answer once at least `expected` of them serve clients. Raises OSError when a
        gateway cannot listen (its port is taken), TimeoutError when too few brokers come up."""
        self._resume_supervision()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            serving = [self.core.brokers[b] for b in sorted(self.serving)]
            if len(serving) >= expected:
                return serving
            if self.broker_failures:
                raise OSError("; ".join(f"broker {b}: {why}" for b, why in sorted(self.broker_failures.items())))
            if not await self._await_change(deadline):  # registrations and failures both bump
                raise TimeoutError(f"{len(serving)} of {expected} brokers serve clients after {timeout_s:.0f} s; "
                                   f"Ray nodes: {len(ray.nodes())} (is every broker node up?)")

    async def _watch_nodes(self) -> None:
        while True:
            try:
                await self._deploy_new_nodes()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("starting brokers on new Ray nodes failed; trying again")
            await asyncio.sleep(NODE_POLL_S)

    async def _deploy_new_nodes(self) -> None:
        nodes = list(map(NodeView.of, ray.nodes()))
        alive = {node.node_id for node in nodes if node.alive}
        for node_id in [n for n in self.node_brokers if n not in alive]:
            self._node_lost(node_id)
        for node in nodes:
            if not node.alive or node.node_id in self.node_brokers:
                continue
            if not node.hosts_broker:
                self.node_brokers[node.node_id] = None
                continue
            broker_id = node.labelled_broker_id
            if broker_id is None:
                taken = {b for b in self.node_brokers.values() if b is not None}
                proposed = proposed_broker_id(int(self.core.broker_config["broker.id"]), taken)
                broker_id = await composition.run_on_node(node.node_id, recorded_broker_id, str(self.data_dir),
                                                          proposed)
            gateway = composition.start_gateway(self.core.broker_config, broker_id, node.node_id,
                                                ray.get_runtime_context().current_actor, node.port)
            self.node_brokers[node.node_id] = broker_id
            self.gateways[broker_id] = gateway
            key = ("gateway", broker_id)
            self.supervisors[key] = asyncio.ensure_future(self._supervise(key, gateway, "start", "until_stopped"))
            log.info("broker %d starting on Ray node %s", broker_id, node.node_id[:12])

    def _node_lost(self, node_id: str) -> None:
        """A broker's Ray node died: its gateway and the partition actors it hosted died with it
        (Ray can't restart them elsewhere: they are pinned to the node that holds their data).
        Forget them, so the broker's partitions show no leader, and so the node that returns with
        the same broker id (its label, or meta.properties beside its logs) gets a gateway and
        its partitions again, recovered from its data directory."""
        broker_id = self.node_brokers.pop(node_id)
        if broker_id is None:
            return
        log.warning("broker %d is gone with its Ray node %s", broker_id, node_id[:12])
        self.serving.discard(broker_id)
        self.lost_brokers.add(broker_id)
        doomed = [(("gateway", broker_id), self.gateways.pop(broker_id, None))]
        for topic in self.core.topics.values():
            for p in topic.partitions:
                key = (topic.topic_id, p.index)
                if p.leader == broker_id and key in self.partition_actors:
                    doomed.append((key, self.partition_actors.pop(key)))
                    self.partition_listeners.pop(key, None)
        for key, actor in doomed:
            supervisor = self.supervisors.pop(key, None)
            if supervisor is not None:
                supervisor.cancel()
            if actor is not None:
                try:
                    ray.kill(actor, no_restart=True)  # frees its name for the node that returns
                except Exception as e:
                    log.debug("could not kill %s: %s", key, e)
        self._bump()

    # ---- metadata --------------------------------------------------------------------------
    def image(self) -> MetadataImage:
        """The metadata as gateways need it. Only gateways follow it (a few per cluster): every
        actor handle in an image is deserialized, and reference counted, by every receiver."""
        c = self.core
        live = {b: info for b, info in c.brokers.items() if b not in self.lost_brokers}
        return MetadataImage(c.metadata_version, c.cluster_id, c.controller_id(), live,
                             dict(c.topics), dict(self.partition_actors), dict(self.partition_listeners),
                             self._coordinators(), {g: dict(cfg) for g, cfg in c.group_configs.items()})

    def _coordinators(self) -> dict[tuple[str, int], Any]:
        """(internal topic, partition) -> its leader actor, which is that partition's coordinator."""
        return {(topic.name, p.index): self.partition_actors[(topic.topic_id, p.index)]
                for topic in self.core.topics.values() if topic.internal
                for p in topic.partitions if (topic.topic_id, p.index) in self.partition_actors}

    async def wait_for_metadata(self, known_version: int, timeout_s: float) -> MetadataImage:
        """Answer as soon as the metadata is newer than `known_version`, or at the timeout."""
        self._resume_supervision()
        deadline = asyncio.get_running_loop().time() + min(timeout_s, METADATA_WAIT_S_MAX)
        while self.core.metadata_version <= known_version and await self._await_change(deadline):
            pass
        return self.image()

    def topic_configs(self, name: str) -> dict[str, Any] | None:
        topic = self.core.topics.get(name)
        return None if topic is None else {"effective": self.core.effective_configs(topic),
                                           "overrides": dict(topic.configs)}

    def group_configs(self, group_id: str) -> dict[str, Any]:
        """A group's config overrides (KIP-932 share group configs)."""
        return dict(self.core.group_configs.get(group_id, {}))

    def alter_group_configs(self, group_id: str, configs: dict[str, Any], incremental: bool,
                            validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.alter_group_configs(group_id, configs, incremental=incremental, validate_only=validate_only)
        self._persist(outcome)
        return outcome.error_code, outcome.message

    def broker_configs(self) -> dict[str, Any]:
        return dict(self.core.broker_config)

    # ---- commands --------------------------------------------------------------------------
    async def register_broker(self, info: BrokerInfo, gateway=None) -> MetadataImage:
        self._persist(self.core.register_broker(info))
        self.lost_brokers.discard(info.broker_id)
        self.broker_failures.pop(info.broker_id, None)
        self._bump()
        if gateway is not None and ("gateway", info.broker_id) not in self.supervisors:
            self.supervisors[("gateway", info.broker_id)] = asyncio.ensure_future(
                self._supervise(("gateway", info.broker_id), gateway, "start", "until_stopped"))
        await self._await_listening([ref for topic in list(self.core.topics.values())
                                     for ref in self._start_partitions(topic)])
        self.serving.add(info.broker_id)  # ready: its partitions listen and it knows it is published
        self._bump()
        return self.image()

    async def ensure_internal_topic(self, name: str) -> MetadataImage:
        """Create `__consumer_offsets` or `__share_group_state` on first use; the leaders of its
        partitions are its coordinators."""
        if name not in self.core.topics:
            config = self.core.broker_config
            partitions = int(config[internal_topics.PARTITION_COUNT_CONFIG[name]])
            replication = min(int(config[internal_topics.REPLICATION_FACTOR_CONFIG[name]]), len(self.core.brokers))
            outcome = self.core.create_topic(name, partitions, replication, internal_topics.TOPIC_CONFIGS[name],
                                             internal=True)
            self._persist(outcome)
            if outcome.error_code and outcome.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"cannot create {name}: {outcome.message}")
        self._start_partitions(self.core.topics[name])
        return self.image()

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, Any], validate_only: bool = False,
                     assignments: dict[int, list[int]] | None = None) -> tuple[int, str | None, dict | None]:
        outcome = self.core.create_topic(name, num_partitions, replication_factor, configs,
                                         assignments=assignments, validate_only=validate_only)
        self._persist(outcome)
        topic = self.core.topics.get(name)
        if outcome.error_code or topic is None:
            return outcome.error_code, outcome.message, None
        created = {"topic_id": topic.topic_id, "num_partitions": len(topic.partitions),
                   "replication_factor": len(topic.partitions[0].replicas),
                   "configs": self.core.effective_configs(topic)}
        await self._await_listening(self._start_partitions(topic))
        return 0, None, created

    async def delete_topic(self, name: str) -> tuple[int, str | None, uuid.UUID | None]:
        topic = self.core.topics.get(name)
        outcome = self.core.delete_topic(name)
        self._persist(outcome)
        if outcome.error_code:
            return outcome.error_code, outcome.message, None
        actors = [self.partition_actors.pop((topic.topic_id, p.index), None) for p in topic.partitions]
        for p in topic.partitions:
            self.partition_listeners.pop((topic.topic_id, p.index), None)
        await asyncio.gather(*(a.delete.remote() for a in actors if a is not None), return_exceptions=True)
        for a in actors:
            if a is not None:
                ray.kill(a, no_restart=True)  # its log is gone; so is its process
        return 0, None, topic.topic_id

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.create_partitions(name, count, validate_only=validate_only)
        self._persist(outcome)
        if not outcome.error_code and not validate_only:
            await self._await_listening(self._start_partitions(self.core.topics[name]))
        return outcome.error_code, outcome.message

    async def alter_topic_configs(self, name: str, configs: dict[str, Any], incremental: bool,
                                  validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.alter_topic_configs(name, configs, incremental=incremental, validate_only=validate_only)
        self._persist(outcome)
        if not outcome.error_code and not validate_only:
            topic = self.core.topics[name]
            config = TopicConfig.from_kafka(self.core.effective_configs(topic))
            await asyncio.gather(*(self.partition_actors[(topic.topic_id, p.index)].reconfigure.remote(config)
                                   for p in topic.partitions if (topic.topic_id, p.index) in self.partition_actors))
        return outcome.error_code, outcome.message

    def register_listener(self, topic_id: uuid.UUID, index: int, address: str) -> None:
        """A partition leader's data-path listener is up: its node's gateway may connect."""
        if (topic_id, index) in self.partition_actors and self.partition_listeners.get((topic_id, index)) != address:
            self.partition_listeners[(topic_id, index)] = address
            self._bump()

    def allocate_producer_id(self) -> int:
        producer_id, outcome = self.core.allocate_producer_id()
        self._persist(outcome)
        return producer_id

    async def shutdown(self) -> None:
        """Stop the gateways, close every partition actor this controller started (flushing their
        logs), then kill them."""
        for task in [*self.supervisors.values(), self.node_watcher]:
            if task is not None:
                task.cancel()
        gateways = list(self.gateways.values())
        self.gateways.clear()
        await asyncio.gather(*(g.stop.remote() for g in gateways), return_exceptions=True)
        for g in gateways:
            ray.kill(g, no_restart=True)
        actors = list(self.partition_actors.values())
        self.partition_actors.clear()
        await asyncio.gather(*(a.close.remote() for a in actors), return_exceptions=True)
        for a in actors:
            ray.kill(a, no_restart=True)
        self.log.close()

    # ---- internals -------------------------------------------------------------------------
    def _persist(self, outcome: Outcome) -> None:
        """Write the records the core applied; wake metadata waiters. No await in between."""
        if outcome.records:
            self.log.append(outcome.records)
            self.changed.set()
            self.changed = asyncio.Event()

    def _bump(self) -> None:
        """Actor handles or endpoints changed: a new image version, without a log record."""
        self.core.metadata_version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    async def _supervise(self, key, actor, serve: str = "listen", until: str = "until_closed") -> None:
        """Keep a partition leader (or a gateway) serving: when Ray restarts it (the pending `until`
        call fails), call `serve` again, so it listens and the metadata names its new address."""
        delay_s = SUPERVISE_RETRY_S
        while key[0] == "gateway" or self.partition_actors.get(key) is actor:
            try:
                address = await getattr(actor, serve).remote()
                delay_s = SUPERVISE_RETRY_S
                if key[0] != "gateway":
                    self.register_listener(key[0], key[1], address)
                await getattr(actor, until).remote()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if key[0] == "gateway":
                    self.serving.discard(key[1])
                    self.broker_failures[key[1]] = str(getattr(e, "cause", None) or e).splitlines()[-1]
                    self._bump()
                log.info("%s failed or restarted (%s); asking it to serve again", key, type(e).__name__)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, SUPERVISE_RETRY_S_MAX)

    async def _await_listening(self, keys: list) -> None:
        """Answer only once new partition leaders listen, so a client's first produce after a
        create finds the leader reachable from its gateway."""
        deadline = asyncio.get_running_loop().time() + PARTITION_START_TIMEOUT_S
        while any(key not in self.partition_listeners for key in keys) and await self._await_change(deadline):
            pass

    async def _await_change(self, deadline: float) -> bool:
        """Wait for the next change (a persisted record or a bump); False once `deadline` (loop
        time) passes without one."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(self.changed.wait(), remaining)
        except asyncio.TimeoutError:
            return False
        return True

    def _start_partitions(self, topic: TopicState) -> list:
        """Start the missing partition actors of a topic (each supervised: asked to listen, and
        again after Ray restarts it); return their keys."""
        config = TopicConfig.from_kafka(self.core.effective_configs(topic))
        listening, started = [], False
        for p in topic.partitions:
            key = (topic.topic_id, p.index)
            broker = self.core.brokers.get(p.leader)
            # a broker that has not registered in this incarnation may name a dead Ray node: its
            # partitions start when it registers (an actor pinned to a dead node never starts)
            if key in self.partition_actors or broker is None or not broker.node_id or p.leader in self.lost_brokers:
                continue
            spec = {"topic": topic.name, "topic_id": topic.topic_id, "partition": p.index,
                    "leader_epoch": p.leader_epoch, "config": config, "broker_config": self.core.broker_config,
                    "log_dir": str(self.data_dir / f"broker-{p.leader}"), "internal": topic.internal,
                    "controller": ray.get_runtime_context().current_actor, "listen_host": broker.host,
                    "retention_check_interval_ms": int(self.core.broker_config["log.retention.check.interval.ms"])}
            actor = composition.start_partition(spec, broker.node_id)
            self.partition_actors[key] = actor
            self.supervisors[key] = asyncio.ensure_future(self._supervise(key, actor))
            listening.append(key)
            started = True
        if started:
            self._bump()
        return listening
