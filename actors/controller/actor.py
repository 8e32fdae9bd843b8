"""The controller's Ray shell: the Ray API of the metadata (brokers, topics, configs, ACLs,
credentials, images long-polled by gateways), persisting what the core decides, and carrying out
what the reconciler decides (actors/controller/reconciler.py: start, host and tell replicas,
start and serve gateways, fence and kill what a lost node took along), as Ray Serve's controller
is a thin actor around its deployment state manager. Its place in the metadata quorum (its turn,
its lease, what it takes over) is actors/controller/leadership.py; its calls to Ray and to shards
are actors/controller/ray_calls.py.

Liveness: a gateway registers its broker (a new broker epoch) and heartbeats; a broker whose Ray
node dies is fenced at once, one that stops heartbeating after `broker.session.timeout.ms`.
Fencing elects new leaders from the ISR (actors/controller/elections.py); every decision is in
the metadata log before any replica or gateway hears of it, and nothing it decided leaves it (an
answer, a replica's state, a new replica's files) before the records are committed
(answers_once_committed). What happens to brokers (lost, fenced, back) is also said in words
(`broker_events`), which `kray start` prints. Calls to replicas have a timeout too: an `update`
that gets no answer (its broker cut off) is told again a little later (reconciler.RETELL_S), so a
broker that returns learns its partitions' state soon after the heal, not when TCP gives up.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import ray

from actors import internal_topics, log_to_stderr, quotas
from actors.config_schema import TopicConfig
from actors.controller.balancing import Balancing
from actors.controller.core import BrokerInfo, ControllerCore, ControllerResult, TopicState
from actors.controller.events import BrokerEvents
from actors.controller.image import MetadataImage
from actors.controller.leadership import Leadership
from actors.controller.quorum_shell.node import monotonic_ms
from actors.controller.ray_calls import listen_failure
from actors.controller.reconciler import Reconciler, placed_replicas
from actors.controller.supervision import Supervision, now_ms
from actors.controller_client import ActiveController, NotController
from actors.shard.hosted import HostedReplica
from protocol.errors import ErrorCode

__all__ = ["ControllerActor", "listen_failure"]
log = logging.getLogger("kray.controller")
METADATA_WAIT_S_MAX = 30.0
# changes come in bursts: an image waits this long for more (each is O(partitions) to build and send)
CHANGES_COALESCE_S = 0.02
PARTITION_START_TIMEOUT_S = 60.0
REPLICA_UPDATE_TIMEOUT_S = 5.0  # an admin command waits this long for replicas (one may be cut off)
BROKER_EVENTS_WAIT_S_MAX = 30.0


def answers_once_committed(method):
    """A public method of the controller: it runs once the metadata is read, and answers only once
    the records it (or anything before it) persisted are committed: a decision is seen by no one
    before a majority of the metadata quorum's voters has it (the dedicated controller's single
    voter: once its own write is durable)."""
    @functools.wraps(method)
    async def call(self, *args, **kwargs):
        if self.voter_id is not None and not self.loaded.is_set():
            self._resume_supervision()
            raise NotController(f"the controller on broker {self.voter_id} stands by")
        await self._ready()
        result = method(self, *args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        await self._durable()
        return result
    return call


class ControllerActor:
    def __init__(self, broker_config: dict[str, Any], voter_id: int | None = None):
        log_to_stderr()
        self.broker_config = broker_config
        self.data_dir = Path(broker_config["log.dirs"]).resolve()
        # the metadata log: the metadata quorum's, read once a voter leads (`_load_from_quorum`).
        # Combined voters (`quorum_voters`, brokers): with a `voter_id` this is the controller of
        # that voting broker's node, active only while that broker's voter leads the quorum (it
        # reads the log then), standing by otherwise. Else this is the dedicated controller, and
        # the quorum's single voter runs here (`dedicated`, started with the event loop).
        self.leadership = Leadership(broker_config, voter_id)
        self.quorum_voters, self.voter_id = self.leadership.quorum_voters, voter_id
        self.dedicated = self.leadership.dedicated
        self.log = self.leadership.log
        self.core: ControllerCore | None = None  # once the metadata is read
        self.loaded = asyncio.Event()
        self.loading: asyncio.Task | None = None
        # what runs where, what each replica was told, and what to do next: decided by the reconciler,
        # carried out by the supervision (which also watches shards and nodes, and ticks sessions)
        self.rec = Reconciler()
        self.supervision = Supervision(self)
        self.balancing = Balancing(self)  # the balancer (kray.balancer.*) and drains (kray remove-broker)
        # controller_mutation_rate's buckets (KIP-599), for the whole cluster as Kafka's active controller keeps them
        # (a new active controller starts them full, as Kafka's does)
        self.mutation_quotas = quotas.MutationQuotas(
            int(broker_config.get("controller.quota.window.num", 11)),
            int(broker_config.get("controller.quota.window.size.seconds", 1)) * 1000)
        self.leadership.on_ray_nodes = self.supervision.learn_node_cpus
        self.own_handle = None
        self.changed = asyncio.Event()
        self.events = BrokerEvents()
        self.events_changed = asyncio.Event()
        if voter_id is not None or not self.quorum_voters:
            try:  # reading (a standby: its wait for its voter to lead) starts at once (Ray runs __init__ in its loop)
                asyncio.get_running_loop()
                self._resume_supervision()
            except RuntimeError:
                pass

    def _load(self, records: list[dict[str, Any]], found: tuple[dict, dict]) -> None:
        """The state the metadata log's records make, and the actors still running from before
        (ray_calls.find_running_actors), adopted."""
        if self.core is None:
            self._replay(records)
        shards, gateways = found
        self.rec.adopt(self.core, shards, gateways,
                       lambda shard, topic, p, b: HostedReplica(shard, self._replica_spec(topic, p, b)))
        # replicas that a reassignment moved away while no controller ran are stopped
        self.core.placement_changed.update(self.core.topics_by_id)
        for broker_id in set(self.core.brokers) - self.rec.registered:  # gone while no controller ran
            self._persist(self.core.replication_outcome(self.core.replication.broker_died(broker_id).records))
        self.loaded.set()

    def _replay(self, records: list[dict[str, Any]]) -> None:
        cluster_id = next((r["cluster_id"] for r in records if r["type"] == "cluster"), None)
        if cluster_id is None:
            cluster_id = self.broker_config.get("cluster.id") or uuid.uuid4().hex[:22]
            self.log.append([{"type": "cluster", "cluster_id": cluster_id}])
        self.core = ControllerCore(self.broker_config, cluster_id)
        for record in records:
            if record["type"] != "cluster":
                self.core.apply(record)
        self.core.finish_replay(now_ms())
        # metadata versions must keep growing across controller restarts (gateways ignore older
        # images): start each incarnation at the clock, in microseconds, above any earlier version
        self.core.metadata_version = max(self.core.metadata_version, time.time_ns() // 1000)

    async def _load_from_quorum(self) -> None:
        """Read the metadata once this controller's turn comes (leadership.py), adopt the actors
        running from before, and start reconciling."""
        records, found, predecessor = await self.leadership.read_metadata(self.data_dir, self._own_handle,
                                                                          self._replay_core)
        self._load(records, found)
        if self.voter_id is not None:
            log.warning("controller of broker %d: its voter leads the metadata quorum; this controller is active",
                        self.voter_id)
            self._say(f"the controller on broker {self.voter_id} is active (its voter leads the metadata quorum)")
            self.leadership.watch()
        self._resume_supervision()
        self.leadership.continue_predecessor_session(self.core, predecessor)
        # replicas whose shard did not answer in time (a host cut off) are hosted (idempotent) and
        # told their state once it answers: a leader cut off learns it follows now
        for topic in list(self.core.topics.values()):
            self.supervision.start_partitions(topic)

    def _replay_core(self, records: list[dict[str, Any]]) -> ControllerCore:
        self._replay(records)
        return self.core

    async def quorum_status(self):
        """The dedicated controller's voter's view (QuorumStatus), for DescribeQuorum at a broker;
        None with combined voters (the voting brokers answer it themselves)."""
        return None if self.dedicated is None else self.dedicated.status()

    async def is_active(self) -> bool:
        """Whether this controller serves (with the metadata quorum: its voter leads, and it has
        read the metadata); a standby starts waiting for its turn if it was not yet."""
        if not self.loaded.is_set():
            self._resume_supervision()
        return self.loaded.is_set()

    async def _ready(self) -> None:
        """Until the metadata is read (the dedicated controller: once its own voter elected itself)."""
        if not self.loaded.is_set():
            self._resume_supervision()
            await self.loaded.wait()

    async def _durable(self) -> None:
        """Until every record persisted so far is committed: before anything learns of it."""
        await self.log.durable(self.log.appended)

    def _resume_supervision(self) -> None:
        """The reconciler's loop and the node watcher are asyncio tasks: start them from the first
        async call (in quorum mode, once the metadata is read)."""
        if not self.loaded.is_set():  # (the core may exist already: replayed, its actors being adopted)
            if self.loading is None:
                self.loading = asyncio.ensure_future(self._load_from_quorum())
            return
        if self.supervision.node_watcher is None:
            # sessions are judged from now on: adopting the running actors, and the first call
            # after a restart, can take longer than a broker session
            self.core.replication.finish_replay(now_ms())
            self.supervision.start()
            self.balancing.start()

    # ---- brokers: one per Ray node -----------------------------------------------------------
    @answers_once_committed
    async def deploy_brokers(self, expected: int, timeout_s: float) -> list[BrokerInfo]:
        """Run a broker (gateway) on every broker node of the Ray cluster, nodes that join later
        included; answer once at least `expected` of them serve clients and the internal topics
        exist with their leaders ready (so a consumer group's first FindCoordinator does not wait
        for 50 partitions to be created while it reads). Raises OSError when a gateway cannot
        listen (its port is taken), TimeoutError when too few brokers come up."""
        self._resume_supervision()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            serving = [self.core.brokers[b] for b in sorted(self.rec.serving)]
            if len(serving) >= expected:
                for name in internal_topics.NAMES:
                    await self.ensure_internal_topic(name)
                return serving
            if self.rec.broker_failures:
                raise OSError("; ".join(f"broker {b}: {why}" for b, why in sorted(self.rec.broker_failures.items())))
            if not await self._await_change(deadline):  # registrations and failures both bump
                waiting = {b: what for b, what in (self.deploy_progress() or {"brokers": {}})["brokers"].items()
                           if what != "serving"}
                raise TimeoutError(f"{len(serving)} of {expected} brokers serve clients after {timeout_s:.0f} s; "
                                   f"Ray nodes: {len(ray.nodes())} (is every broker node up?); not serving: "
                                   + (", ".join(f"broker {b} ({what})" for b, what in sorted(waiting.items()))
                                      or "no broker node known yet"))

    def deploy_progress(self) -> dict[str, Any] | None:
        """What deploy_brokers waits for, for `kray start`'s progress lines: each broker known to
        this controller (a node's, or registered) as "serving", "registered" (its replicas recover
        and start listening), "starting" (its gateway starts: it has not registered), or "cannot
        listen"; and the internal topics not created yet. None from a standby, or one still
        reading the metadata (an answer, not an error: the caller asks every voter's controller)."""
        if not self.loaded.is_set() or self.core is None:
            self._resume_supervision()
            return None
        known = {b for b in self.rec.node_brokers.values() if b is not None} | self.rec.registered | self.rec.serving
        brokers = {b: ("serving" if b in self.rec.serving else "cannot listen" if b in self.rec.broker_failures
                       else "registered" if b in self.rec.registered else "starting") for b in sorted(known)}
        return {"brokers": brokers, "voter_id": self.voter_id,
                "internal_topics_missing": [n for n in internal_topics.NAMES if n not in self.core.topics]}

    # ---- metadata --------------------------------------------------------------------------
    def image(self) -> MetadataImage:
        """The metadata as gateways need it. Only gateways and shard processes that host a group
        coordinator follow it (one long poll per process, actors/metadata_follower.py): every actor
        handle in an image is deserialized, and reference counted, by every receiver.
        Brokers: registered with this controller and unfenced (Kafka leaves fenced ones out).
        Partition replicas and listeners: each partition's leader replica; a listener only once that
        replica listens and has confirmed that it leads in the current leader epoch, so whatever
        the image routes to a leader, the leader can append (a partition without one answers
        LEADER_NOT_AVAILABLE in Metadata, and clients wait instead of failing a first send)."""
        c = self.core
        live = {b: info for b, info in c.brokers.items() if b in self.rec.registered and c.replication.is_live(b)}
        leaders, listeners, coordinators = {}, {}, {}
        for topic in c.topics.values():
            for p in topic.partitions:
                actor, listener = self.rec.route((topic.topic_id, p.index, p.leader), p.leader_epoch)
                if actor is None:
                    continue
                leaders[(topic.topic_id, p.index)] = actor
                if listener is not None:
                    listeners[(topic.topic_id, p.index)] = listener
                if topic.internal:  # the leader of an internal-topic partition is its coordinator
                    coordinators[(topic.name, p.index)] = actor
        return MetadataImage(c.metadata_version, c.cluster_id, c.controller_id(), live, dict(c.topics),
                             leaders, listeners, coordinators,
                             {g: dict(cfg) for g, cfg in c.group_configs.items()}, tuple(c.acls), c.acl_version,
                             dict(c.scram_credentials), c.scram_version,
                             {e: dict(values) for e, values in c.client_quotas.items()},
                             {b: dict(values) for b, values in c.dynamic_broker_configs.items()})

    @answers_once_committed
    async def wait_for_metadata(self, known_version: int, timeout_s: float) -> MetadataImage:
        """Answer as soon as the metadata is newer than `known_version`, or at the timeout."""
        self._resume_supervision()
        deadline = asyncio.get_running_loop().time() + min(timeout_s, METADATA_WAIT_S_MAX)
        waited = False
        while self.core.metadata_version <= known_version and await self._await_change(deadline):
            waited = True
        if waited:
            await asyncio.sleep(CHANGES_COALESCE_S)
        return self.image()

    @answers_once_committed
    def topic_configs(self, name: str) -> dict[str, Any] | None:
        topic = self.core.topics.get(name)
        return None if topic is None else {"effective": self.core.effective_configs(topic),
                                           "overrides": dict(topic.configs)}

    @answers_once_committed
    def group_configs(self, group_id: str) -> dict[str, Any]:
        """A group's config overrides (KIP-932 share group configs)."""
        return dict(self.core.group_configs.get(group_id, {}))

    @answers_once_committed
    def alter_group_configs(self, group_id: str, configs: dict[str, Any], incremental: bool,
                            validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.alter_group_configs(group_id, configs, incremental=incremental, validate_only=validate_only)
        self._persist(outcome)
        return outcome.error_code, outcome.message

    @answers_once_committed
    def create_acls(self, bindings: list) -> list[tuple[int, str | None]]:
        """CreateAcls (AclBinding objects): per binding (error code, message)."""
        results, outcome = self.core.create_acls(bindings)
        self._persist(outcome)
        return results

    @answers_once_committed
    def delete_acls(self, filters: list) -> list[tuple[int, str | None, list]]:
        """DeleteAcls (AclBindingFilter objects): per filter (error code, message, removed bindings)."""
        results, outcome = self.core.delete_acls(filters)
        self._persist(outcome)
        return results

    @answers_once_committed
    def alter_user_scram_credentials(self, deletions: list, upsertions: list) -> list:
        """AlterUserScramCredentials (scram_credentials.Deletion / Upsertion): per user an AlterResult."""
        results, outcome = self.core.alter_user_scram_credentials(deletions, upsertions)
        self._persist(outcome)
        return results

    @answers_once_committed
    def alter_client_quotas(self, entries: list, validate_only: bool) -> list[tuple[int, str | None]]:
        """AlterClientQuotas: per entry (error code, message)."""
        results, outcome = self.core.alter_client_quotas(entries, validate_only)
        self._persist(outcome)
        return results

    @answers_once_committed
    def controller_mutation_throttle_ms(self, user: str, client_id: str) -> int:
        """controller_mutation_rate: how long this user and client id must wait before their next topic or partition
        creation or deletion is let through (0: now), over the whole cluster."""
        return self.mutation_quotas.throttle_ms(self.core.client_quotas, user, client_id, monotonic_ms())

    @answers_once_committed
    def record_controller_mutations(self, user: str, client_id: str, partitions: int) -> None:
        """controller_mutation_rate: `partitions` created or deleted by this user and client id."""
        self.mutation_quotas.record(self.core.client_quotas, user, client_id, partitions, monotonic_ms())

    @answers_once_committed
    def broker_configs(self) -> dict[str, Any]:
        return dict(self.core.broker_config)

    # ---- commands --------------------------------------------------------------------------
    @answers_once_committed
    async def register_broker(self, info: BrokerInfo, gateway=None) -> tuple[MetadataImage, int]:
        """A gateway (re)starts its broker: a new broker epoch, unfenced, and its replicas start.
        Returns at once with the image and the broker epoch its heartbeats carry (replicas may
        take longer to start than a broker session lasts); `broker_ready` then waits for them."""
        if info.node_id in self.rec.retired_nodes:
            raise ValueError(f"broker {info.broker_id} was removed (kray remove-broker, or its node drained by Ray): "
                             f"its Ray node {info.node_id[:12]} runs no broker; start the node again to add a broker")
        if info.node_id in self.rec.lost_nodes:
            raise ValueError(f"broker {info.broker_id}: its Ray node {info.node_id[:12]} was declared dead; the "
                             f"broker starts again on the node that replaces it")
        previous = self.core.brokers.get(info.broker_id)
        outcome = self.core.register_broker(info, now_ms())
        self._persist(outcome)
        log.info("broker %d registered (broker epoch %d) at %s:%d", info.broker_id, outcome.broker_epoch,
                 info.host, info.port)
        self.supervision.execute(self.rec.broker_registered(info.broker_id, info.node_id, info.host, info.port,
                                                   outcome.broker_epoch, previous and previous.node_id))
        if gateway is not None:
            self.rec.supervise_gateway(info.broker_id, gateway)
        for topic in list(self.core.topics.values()):
            self.supervision.start_partitions(topic)
        self.supervision.wake_up()
        return self.image(), outcome.broker_epoch

    @answers_once_committed
    async def broker_ready(self, broker_id: int) -> MetadataImage:
        """Answer once the replicas on this broker listen and know their partitions' state; the
        broker then counts as serving."""
        await self._await_listening([key for topic in list(self.core.topics.values())
                                     for key in self.supervision.start_partitions(topic) if key[2] == broker_id])
        self.rec.broker_serving(broker_id)  # ready: its partitions listen and it knows it is published
        self.supervision.note_changes()
        return self.image()

    def listen_failures(self) -> dict[int, tuple[str, str | None]]:
        """Brokers whose gateway could not start (its listener could not open) and has not
        registered since: broker id -> (why, its Ray node id or None). `kray start` reports them."""
        nodes = {b: node_id for node_id, b in self.rec.node_brokers.items() if b is not None}
        return {b: (why, nodes.get(b)) for b, why in self.rec.broker_failures.items()}

    @answers_once_committed
    def heartbeat(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """A broker is alive (broker.heartbeat.interval.ms): (error code, contact age in ms).
        STALE_BROKER_EPOCH: register again. A broker whose node was declared dead is not unfenced by
        a last heartbeat of its old gateway (woken from a stall just before its raylet exits).

        The contact age is how long ago this controller's voter last heard from a majority of the
        voters (0 with one voter): the broker counts its session from the heartbeat's send time less
        that, so from no later than that contact, and a successor elected after this controller was
        cut off fences the broker a session after it last heard from this voter (and a skew), not a
        session after this controller's lease ran out."""
        if broker_id not in self.rec.registered:
            return ErrorCode.STALE_BROKER_EPOCH, 0
        contact_age_ms = self.leadership.contact_age_ms()  # (NotController once its lease ran out)
        decision = self.core.replication.heartbeat(broker_id, broker_epoch, now_ms())
        self._persist(self.core.replication_outcome(decision.records))
        if any(r["type"] == "unfence_broker" for r in decision.records):
            self._say(f"broker {broker_id} back: its heartbeats reach the controller again (broker epoch "
                      f"{broker_epoch}); its replicas catch up and rejoin the ISRs")
        return decision.error_code, contact_age_ms

    async def broker_events(self, after_seq: int | None, timeout_s: float) -> tuple[int, list[tuple[int, str]]]:
        """What happened to brokers since event `after_seq` (None: from now on), as (wall-clock ms,
        sentence); answers at the first new event or after `timeout_s`. Returns the number to ask
        from next time. A standby controller says nothing (NotController): follow the active one."""
        if self.voter_id is not None and not self.loaded.is_set():
            self._resume_supervision()
            raise NotController(f"the controller on broker {self.voter_id} stands by")
        if after_seq is None:
            return self.events.next_seq, []
        deadline = asyncio.get_running_loop().time() + min(timeout_s, BROKER_EVENTS_WAIT_S_MAX)
        while self.events.next_seq <= after_seq:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self.events_changed.wait(), remaining)
            except asyncio.TimeoutError:
                break
        return self.events.next_seq, [(e.at_ms, e.text) for e in self.events.after(after_seq)]

    def _say(self, text: str) -> None:
        self.events.add(text, now_ms())
        self.events_changed.set()
        self.events_changed = asyncio.Event()

    @answers_once_committed
    def alter_partition(self, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, index: int,
                        leader_epoch: int, partition_epoch: int, new_isr: list[int],
                        proposal_id: int) -> tuple[int, dict | None]:
        """A leader proposes a new ISR (Kafka's AlterPartition). The decision is in the metadata
        log before the answer leaves."""
        decision = self.core.replication.alter_partition(
            broker_id, broker_epoch, (topic_id.bytes, index), leader_epoch=leader_epoch,
            partition_epoch=partition_epoch, new_isr=new_isr, proposal_id=proposal_id)
        self._persist(self.core.replication_outcome(decision.records))
        return decision.error_code, decision.partition

    @answers_once_committed
    async def ensure_internal_topic(self, name: str) -> MetadataImage:
        """Create `__consumer_offsets`, `__share_group_state` or `__transaction_state` on first use;
        the leaders of its partitions are its coordinators. The answer waits for a new topic's
        replicas to listen; for an existing topic it is the metadata as it is (a coordinator
        whose leader is not ready yet answers so, and is asked again): a replica cut off from this
        controller must not hold up where the coordinators are (a share-partition leader asks
        while its state load or write waits)."""
        created = name not in self.core.topics
        if created:
            config = self.core.broker_config
            partitions = int(config[internal_topics.PARTITION_COUNT_CONFIG[name]])
            replication = min(int(config[internal_topics.REPLICATION_FACTOR_CONFIG[name]]),
                              max(1, len(self.core.live_brokers())))
            outcome = self.core.create_topic(name, partitions, replication,
                                             internal_topics.topic_configs(name, config, replication), internal=True)
            self._persist(outcome)
            if outcome.error_code and outcome.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"cannot create {name}: {outcome.message}")
        keys = self.supervision.start_partitions(self.core.topics[name])
        if created:
            await self._await_listening(keys)
        return self.image()

    @answers_once_committed
    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, Any], validate_only: bool = False,
                     assignments: dict[int, list[int]] | None = None,
                     creation_id: str | None = None) -> tuple[int, str | None, dict | None]:
        outcome = self.core.create_topic(name, num_partitions, replication_factor, configs, assignments=assignments,
                                         validate_only=validate_only, creation_id=creation_id)
        self._persist(outcome)
        topic = self.core.topics.get(name)
        if validate_only and outcome.validated is not None:
            return 0, None, {"topic_id": uuid.UUID(int=0), **outcome.validated}
        if outcome.error_code or topic is None:
            return outcome.error_code, outcome.message, None
        created = {"topic_id": topic.topic_id, "num_partitions": len(topic.partitions),
                   "replication_factor": len(topic.partitions[0].replicas),
                   "configs": self.core.effective_configs(topic)}
        await self._await_listening(self.supervision.start_partitions(topic))
        return 0, None, created

    @answers_once_committed
    async def delete_topic(self, name: str) -> tuple[int, str | None, uuid.UUID | None]:
        topic = self.core.topics.get(name)
        outcome = self.core.delete_topic(name)
        self._persist(outcome)
        if outcome.error_code:
            return outcome.error_code, outcome.message, None
        await self._durable()  # before any replica deletes its files
        stops = self.rec.unwanted(placed_replicas(self.core, []), {topic.topic_id})
        self.supervision.note_changes()
        # (a replica cut off from the controller is not waited for: it deletes its files when told
        # again, or when its broker returns without the topic)
        await self._await_replicas([stop.handle.delete.remote() for stop in stops])
        return 0, None, topic.topic_id

    @answers_once_committed
    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.create_partitions(name, count, validate_only=validate_only)
        self._persist(outcome)
        if not outcome.error_code and not validate_only:
            await self._await_listening(self.supervision.start_partitions(self.core.topics[name]))
        return outcome.error_code, outcome.message

    @answers_once_committed
    async def alter_topic_configs(self, name: str, configs: dict[str, Any], incremental: bool,
                                  validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.alter_topic_configs(name, configs, incremental=incremental, validate_only=validate_only)
        self._persist(outcome)
        if not outcome.error_code and not validate_only:
            await self.reconfigure_replicas(name)
        return outcome.error_code, outcome.message

    async def reconfigure_replicas(self, name: str) -> None:
        """Once committed, a topic's running replicas take its configs as they are now."""
        await self._durable()
        topic = self.core.topics.get(name)
        if topic is not None:
            config = TopicConfig.from_kafka(self.core.effective_configs(topic))
            await self._await_replicas([actor.reconfigure.remote(config) for actor in self.rec.handles(topic.topic_id)])

    @staticmethod
    async def _await_replicas(calls: list) -> None:
        """Wait for control calls to replicas, at most REPLICA_UPDATE_TIMEOUT_S: one cut off from
        the controller must not hold up an admin command (whatever failed is left to the replica)."""
        tasks = [asyncio.ensure_future(c) for c in calls]
        for task in tasks:  # failures are the replica's to recover from: retrieved, not raised
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if tasks:
            await asyncio.wait(tasks, timeout=REPLICA_UPDATE_TIMEOUT_S)

    @answers_once_committed
    def alter_partition_reassignments(self, topics: list, allow_replication_factor_change: bool = True) -> list:
        """AlterPartitionReassignments: per topic [(partition, error code, message)]. The adding
        replicas start at once (the supervision's loop starts and stops replicas as placements change)."""
        results, outcome = self.core.alter_partition_reassignments(topics, allow_replication_factor_change)
        self._persist(outcome)
        self.supervision.follow_placements()
        return results

    @answers_once_committed
    def alter_broker_configs(self, broker: str, configs: dict[str, Any], validate_only: bool = False
                             ) -> tuple[int, str | None]:
        """Dynamic broker configs (the replication throttles); the shards of the brokers concerned apply the
        new rates at once."""
        outcome = self.core.alter_broker_configs(broker, configs, validate_only=validate_only)
        self._persist(outcome)
        if outcome.records:
            self.supervision.push_replication_throttles()
        return outcome.error_code, outcome.message

    @answers_once_committed
    def list_partition_reassignments(self, topics: list | None) -> list:
        """ListPartitionReassignments: per topic being reassigned [(partition, replicas, adding, removing)]."""
        return self.core.list_partition_reassignments(topics)

    @answers_once_committed
    def elect_leaders(self, election_type: int, partitions: list | None) -> list:
        """ElectLeaders (PREFERRED 0, UNCLEAN 1): per topic [(partition, error code, message)]."""
        results, outcome = self.core.elect_leaders(election_type, partitions)
        self._persist(outcome)
        return results

    @answers_once_committed
    def allocate_producer_id(self) -> int:
        producer_id, outcome = self.core.allocate_producer_id()
        self._persist(outcome)
        return producer_id

    async def shutdown(self) -> None:
        """Stop the gateways, close every partition replica this controller started (flushing their
        logs), then kill them."""
        self.leadership.stopping = True  # its voter stops with its gateway: that is no reason to restart
        self.supervision.stop()
        self.balancing.stop()
        if self.leadership.watching is not None:
            self.leadership.watching.cancel()
        gateways = list(self.rec.gateways.values())
        self.rec.gateways.clear()
        await asyncio.gather(*(g.stop.remote() for g in gateways), return_exceptions=True)
        for g in gateways:
            ray.kill(g, no_restart=True)
        actors = self.rec.handles()
        self.rec.replicas.clear()
        await asyncio.gather(*(a.close.remote() for a in actors), return_exceptions=True)
        shards = list(self.rec.shards.values())
        self.rec.shards.clear()
        await asyncio.gather(*(s.close.remote() for s in shards), return_exceptions=True)
        for shard in shards:
            ray.kill(shard, no_restart=True)
        self.leadership.stop()

    # ---- internals -------------------------------------------------------------------------
    def _persist(self, outcome: ControllerResult) -> None:
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

    async def _await_listening(self, keys: list) -> None:
        """Answer only once new replicas listen and know their partition's state, so a client's
        first produce after a create finds the leader reachable from its gateway."""
        deadline = asyncio.get_running_loop().time() + PARTITION_START_TIMEOUT_S
        waiting = [key for key in keys if not self.rec.serving_replica(key, self.core)]
        while waiting and await self._await_change(deadline):
            waiting = [key for key in waiting if not self.rec.serving_replica(key, self.core)]  # those not ready yet

    # ---- telling replicas their partition's state --------------------------------------------
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

    def _replica_spec(self, topic: TopicState, index: int, broker_id: int, config: TopicConfig | None = None) -> dict:
        """What a replica is started (or hosted) with."""
        return {"topic": topic.name, "topic_id": topic.topic_id, "partition": index, "broker_id": broker_id,
                "config": config or TopicConfig.from_kafka(self.core.effective_configs(topic)),
                "broker_config": self.core.broker_config,
                "log_dir": str(self.data_dir / f"broker-{broker_id}"), "internal": topic.internal,
                "controller": self._own_handle()}

    def _own_handle(self):
        """The controller as other actors call it, one object for every spec (pickled once per
        message, not per spec): this actor, or with the quorum's controllers whichever is active."""
        if self.own_handle is None:
            current = ray.get_runtime_context().current_actor
            self.own_handle = (ActiveController(self.quorum_voters, {self.voter_id: current})
                               if self.voter_id is not None else current)
        return self.own_handle

