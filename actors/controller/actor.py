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
from cluster import composition
from cluster.config import TopicConfig
from protocol.errors import ErrorCode

log = logging.getLogger("kray.controller")
METADATA_WAIT_S_MAX = 30.0
PARTITION_START_TIMEOUT_S = 60.0
SUPERVISE_RETRY_S = 0.2


@dataclass
class MetadataImage:
    """What a gateway needs to route requests: a versioned copy of the controller's state."""
    version: int
    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicState]
    partition_actors: dict[tuple[uuid.UUID, int], Any] = field(default_factory=dict)
    # partition leaders listening for clients themselves, keyed like partition_actors
    endpoints: dict[tuple[uuid.UUID, int], BrokerInfo] = field(default_factory=dict)
    # coordinators, keyed by (internal topic name, partition): the leader actors of those partitions
    coordinators: dict[tuple[str, int], Any] = field(default_factory=dict)
    group_configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # overrides only

    def __post_init__(self):
        self.topics_by_id = {t.topic_id: t for t in self.topics.values()}

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        return self.topics_by_id.get(topic_id)

    def leader_id(self, topic: TopicState, index: int) -> int:
        """The broker id clients should send this partition's produce and fetch requests to."""
        endpoint = self.endpoints.get((topic.topic_id, index))
        return endpoint.broker_id if endpoint else topic.partitions[index].leader


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
        self.endpoints: dict[tuple[uuid.UUID, int], BrokerInfo] = {}
        self.supervisors: dict[tuple[uuid.UUID, int], asyncio.Task] = {}
        self.changed = asyncio.Event()
        self.to_supervise = self._adopt_running_actors()

    def _adopt_running_actors(self) -> list[tuple]:
        """After Ray restarts the controller, the actors it had started are still running under
        their names: find them again (the log says which should exist) instead of starting twins."""
        def running(name):
            try:
                return ray.get_actor(name, namespace=composition.NAMESPACE)
            except ValueError:
                return None
        direct = self.core.broker_config["kray.partition.direct.listeners"]
        found = []
        for topic in self.core.topics.values():
            for p in topic.partitions:
                key = (topic.topic_id, p.index)
                actor = running(composition.partition_name(topic.topic_id, p.index))
                if actor is not None:
                    self.partition_actors[key] = actor
                    if direct and not topic.internal:
                        found.append((key, actor, "listen", "until_closed"))
        for broker_id in self.core.brokers:
            gateway = running(composition.gateway_name(broker_id))
            if gateway is not None:
                found.append((("gateway", broker_id), gateway, "start", "until_stopped"))
        return found

    def _resume_supervision(self) -> None:
        """Supervisors are asyncio tasks: start the adopted ones from the first async call."""
        for key, actor, serve, until in self.to_supervise:
            self.supervisors[key] = asyncio.ensure_future(self._supervise(key, actor, serve, until))
        self.to_supervise = []

    # ---- metadata --------------------------------------------------------------------------
    def image(self, for_partition: tuple[uuid.UUID, int] | None = None) -> MetadataImage:
        """The metadata as gateways need it; `for_partition`: as that partition's leader needs it,
        with its own actor handle only. Every handle in an image is deserialized, and reference
        counted with this actor, by every receiver: sending all of them to every partition leader
        on every change cost O(partitions²) per change (creating a 1-partition topic took 3.3 s
        with 62 partitions)."""
        c = self.core
        actors = self.partition_actors if for_partition is None else \
            {k: a for k, a in self.partition_actors.items() if k == for_partition}
        return MetadataImage(c.metadata_version, c.cluster_id, c.controller_id(), dict(c.brokers),
                             dict(c.topics), dict(actors), dict(self.endpoints),
                             self._coordinators(), {g: dict(cfg) for g, cfg in c.group_configs.items()})

    def _coordinators(self) -> dict[tuple[str, int], Any]:
        """(internal topic, partition) -> its leader actor, which is that partition's coordinator."""
        return {(topic.name, p.index): self.partition_actors[(topic.topic_id, p.index)]
                for topic in self.core.topics.values() if topic.internal
                for p in topic.partitions if (topic.topic_id, p.index) in self.partition_actors}

    async def wait_for_metadata(self, known_version: int, timeout_s: float,
                                for_partition: tuple[uuid.UUID, int] | None = None) -> MetadataImage:
        """Answer as soon as the metadata is newer than `known_version`, or at the timeout."""
        self._resume_supervision()
        deadline = asyncio.get_running_loop().time() + min(timeout_s, METADATA_WAIT_S_MAX)
        while self.core.metadata_version <= known_version:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except asyncio.TimeoutError:
                break
        return self.image(for_partition)

    def topic_configs(self, name: str) -> dict[str, Any] | None:
        topic = self.core.topics.get(name)
        return None if topic is None else {"effective": self.core.effective_configs(topic),
                                           "overrides": dict(topic.configs)}

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
        if gateway is not None and ("gateway", info.broker_id) not in self.supervisors:
            self.supervisors[("gateway", info.broker_id)] = asyncio.ensure_future(
                self._supervise(("gateway", info.broker_id), gateway, "start", "until_stopped"))
        await self._await_listening([ref for topic in list(self.core.topics.values())
                                     for ref in self._start_partitions(topic)])
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
            self.endpoints.pop((topic.topic_id, p.index), None)
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

    def register_endpoint(self, topic_id: uuid.UUID, index: int, host: str, port: int) -> MetadataImage:
        """A partition leader listens for clients itself: advertise it as a broker of its own."""
        topic = self.core.topics_by_id.get(topic_id)
        if topic is not None and index < len(topic.partitions):
            self.endpoints[(topic_id, index)] = BrokerInfo(topic.partitions[index].endpoint_id, host, port)
            self._bump()
        return self.image((topic_id, index))

    def allocate_producer_id(self) -> int:
        producer_id, outcome = self.core.allocate_producer_id()
        self._persist(outcome)
        return producer_id

    async def shutdown(self) -> None:
        """Close every partition actor this controller started (flushing their logs), then kill them."""
        for task in self.supervisors.values():
            task.cancel()
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
        """Keep a partition leader (or a gateway) serving clients: when Ray restarts it (the pending
        `until` call fails), call `serve` again, so it listens and Metadata names its port."""
        while key[0] == "gateway" or self.partition_actors.get(key) is actor:
            try:
                host, port = await getattr(actor, serve).remote()
                if key[0] != "gateway":
                    self.register_endpoint(key[0], key[1], host, port)
                await getattr(actor, until).remote()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("partition actor %s restarted (%s); asking it to listen again", key, type(e).__name__)
                await asyncio.sleep(SUPERVISE_RETRY_S)

    async def _await_listening(self, refs: list) -> None:
        """Answer only once new partition leaders listen, so the first Metadata a client sees
        already names them (a client that caches the gateway instead would pay the Ray hop)."""
        if refs:
            done, pending = await asyncio.wait([asyncio.ensure_future(r) for r in refs], timeout=PARTITION_START_TIMEOUT_S)
            for task in pending:
                task.cancel()

    def _start_partitions(self, topic: TopicState) -> list:
        """Start the missing partition actors of a topic; return the refs of their listen() calls."""
        config = TopicConfig.from_kafka(self.core.effective_configs(topic))
        listening, started = [], False
        for p in topic.partitions:
            key = (topic.topic_id, p.index)
            broker = self.core.brokers.get(p.leader)
            if key in self.partition_actors or broker is None or not broker.node_id:
                continue
            spec = {"topic": topic.name, "topic_id": topic.topic_id, "partition": p.index,
                    "leader_epoch": p.leader_epoch, "config": config, "broker_config": self.core.broker_config,
                    "log_dir": str(self.data_dir / f"broker-{p.leader}"), "internal": topic.internal,
                    "controller": ray.get_runtime_context().current_actor, "listen_host": broker.host,
                    "retention_check_interval_ms": int(self.core.broker_config["log.retention.check.interval.ms"])}
            actor = composition.start_partition(spec, broker.node_id)
            if self.core.broker_config["kray.partition.direct.listeners"] and not topic.internal:
                listening.append(actor.listen.remote())
                self.supervisors[key] = asyncio.ensure_future(self._supervise(key, actor))
            self.partition_actors[key] = actor
            started = True
        if started:
            self._bump()
        return listening
