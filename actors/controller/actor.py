"""The controller's Ray shell: persists what the core decides, starts and stops partition replica
actors, tells each replica its partition's state, and serves metadata images to gateways
(long-polled, so every gateway learns of a change at once).

Liveness: a gateway registers its broker (a new broker epoch) and heartbeats; a broker whose Ray
node dies is fenced at once, one that stops heartbeating after `broker.session.timeout.ms`.
Fencing elects new leaders from the ISR (actors/controller/elections.py); every decision is in
the metadata log before any replica or gateway hears of it. What happens to brokers (lost, fenced,
back) is also said in words (`broker_events`), which `kray start` prints.

The metadata log is the metadata quorum's `__cluster_metadata-0` (quorum_metadata.py), whose
voters run in one of two places (actors/controller/quorum_shell/settings.py). By default one
dedicated controller (this actor, on the Ray head, no `voter_id`) runs the quorum's only voter in
its own process: it reads the log once its voter has elected itself and is the only controller.
With combined voters (controller.quorum.voters names brokers) the voters run in the voting
brokers' gateways, and each voting broker's node runs a controller of its own (`voter_id`): the
one whose voter leads reads the log and is active, the others stand by (answering NotController;
callers hold an ActiveController that finds the active one) and keep handles to the running
actors, so that a turn which comes while Ray's GCS is cut off (the Ray head's host isolated)
adopts them without it. An active controller whose voter stops
leading exits; Ray starts it again as a standby. Nothing it decided leaves it (an answer, a
replica's state, a new replica's files) before the records are committed (answers_once_committed).

Calls to replicas have a timeout too: an `update` that gets no answer (its broker cut off) is
told again a little later, so a broker that returns learns its partitions' state within
about reconciler.RETELL_S of the heal, not when TCP gives up on a broken connection.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import ray

from actors import internal_topics, log_to_stderr
from actors.controller.core import BrokerInfo, ControllerCore, Outcome, TopicState
from actors.controller.elections import DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS
from actors.controller.events import BrokerEvents
from actors.controller.image import MetadataImage
from actors.controller.quorum_metadata import QuorumMetadataLog
from actors.controller_client import ActiveController, NotController
from actors.controller.quorum_shell.node import monotonic_ms
from actors.controller.quorum_shell.settings import DEDICATED_CONTROLLER_ID, combined_voters
from actors.controller.quorum_shell.voter import LocalVoter, build_dedicated_voter
from actors.controller.metadata_log import MetadataLog
from actors.controller.nodes import NodeView, read_broker_id, recorded_broker_id
from actors.controller.reconciler import (Fence, Host, Kill, Reconciler, Say, ServeGateway, StartGateway, Tell,
                                          desired_replicas, partition_state, placed_replicas)
from actors.shard.hosted import HostedReplica, shard_index
from actors import composition
from actors.names import NAMESPACE, controller_name, gateway_name, shard_name
from actors.config_schema import TopicConfig
from protocol.errors import ErrorCode

log = logging.getLogger("kray.controller")
METADATA_WAIT_S_MAX = 30.0
# changes come in bursts (a topic of 1,000 partitions is 1,000 replicas confirming one by one):
# an image, or a round of telling replicas, waits this long for more, so a burst costs a few
# rounds instead of one per change (each image is O(partitions) to build and to send)
CHANGES_COALESCE_S = 0.02
PARTITION_START_TIMEOUT_S = 60.0
SHARDS_PER_BROKER_MAX = 64
ADOPT_TIMEOUT_S = 10.0
# a new active controller fences the broker whose voter led before no sooner than this many of its
# heartbeat intervals after taking over (see _continue_predecessor_session)
SUCCESSOR_GRACE_HEARTBEATS = 2
# an active controller of the metadata quorum answers heartbeats only until this long after its
# voter's last contact with a majority of the voters (followers fetch every replica.fetch.wait.max.ms)
CONTROLLER_LEASE_MS = 1000
# how much later than a follower last heard from the leader the leader may have last heard from a
# majority (the other follower's fetch, up to one replica.fetch.wait.max.ms later, and transit)
LEASE_SKEW_MS = 500
# a standby taking over: shards of a host cut off (the one whose controller it replaces, often)
# answer nothing, and every broker waits meanwhile (the takeover's wait delays fencing that host,
# whose session starts when the new controller is active); a shard that answers later has its
# replicas hosted again (idempotent) and told their state
ADOPT_TIMEOUT_S_STANDBY = 1.0
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
BROKER_EVENTS_WAIT_S_MAX = 30.0
NAMED_ACTORS_REFRESH_S = 5.0     # a standby controller refreshes its handles to the running actors
NAMED_ACTOR_WARM_TIMEOUT_S = 5.0
NAMED_ACTORS_FRESH_S = 15.0       # a standby taking over asks Ray's GCS again only if its handles are older
LEADERSHIP_CHECK_S = 0.5          # an active controller checks this often that its voter still leads
LEADERSHIP_CHECK_TIMEOUT_S = 5.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def listen_failure(e: BaseException) -> bool:
    """Whether a gateway's failure is its listener's (the port taken, an address it may not bind:
    `kray start` says "cannot listen" with the fix), not an unreachable or dead node's, nor a
    controller that did not answer in time."""
    cause = getattr(e, "cause", None) or e
    return isinstance(cause, OSError) and not isinstance(cause, (TimeoutError, ConnectionError,
                                                                  ray.exceptions.RayError))


class ReplicaCallFailed(RuntimeError):
    pass



class GcsCalls:
    """Calls that ask Ray's GCS (the node table, named actors), off the event loop and bounded: a
    node cut off from the Ray head gets no answer, and the controller must keep turning. One at a
    time, on a thread of their own: a call still stuck makes the next one fail at once."""

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kray-gcs")
        self._busy: concurrent.futures.Future | None = None

    async def __call__(self, fn, *args):
        if self._busy is not None and not self._busy.done():
            raise TimeoutError("Ray's GCS has not answered the previous call yet")
        self._busy = self._pool.submit(fn, *args)
        return await asyncio.wait_for(asyncio.wrap_future(self._busy), self.timeout_s)


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
        self.quorum_voters = combined_voters(broker_config)
        self.voter_id = voter_id
        self.dedicated = None if self.quorum_voters else build_dedicated_voter(broker_config)
        self.dedicated_run: asyncio.Task | None = None
        if self.quorum_voters:
            self.log = QuorumMetadataLog(self.quorum_voters, on_failure=self._quorum_failed, only=voter_id)
        else:
            self.log = QuorumMetadataLog((DEDICATED_CONTROLLER_ID,), on_failure=self._quorum_failed,
                                         only=DEDICATED_CONTROLLER_ID, local=LocalVoter(self.dedicated))
        self.core: ControllerCore | None = None  # once the metadata is read
        self.loaded = asyncio.Event()
        self.loading: asyncio.Task | None = None
        # what runs where, what each replica was told, and what to do next: decided by the reconciler
        self.rec = Reconciler()
        self.tasks: set[asyncio.Task] = set()  # the reconciler's actions under way (calls to actors)
        self.wake = asyncio.Event()  # a result came back: the reconciler steps again
        self.reconciling: asyncio.Task | None = None
        self.shard_watchers: dict[tuple[int, int], asyncio.Task] = {}  # one per shard: fails when it dies
        # control calls to replicas, gathered per shard while the event loop turns (see _shard_call)
        self.shard_batches: dict[Any, list] = {}
        self.own_handle = None
        self.node_cpus: dict[str, int] = {}  # Ray node id -> its CPU count (the default shard count)
        self.changed = asyncio.Event()
        self.node_watcher: asyncio.Task | None = None
        self.nodes_suspect_until = 0.0  # loop time until which ray.nodes() is polled fast
        self.node_poll_wake = asyncio.Event()
        self.ticker: asyncio.Task | None = None
        self.events = BrokerEvents()
        self.events_changed = asyncio.Event()
        self.leadership_watch: asyncio.Task | None = None
        self.lease_until_ms = 0  # (monotonic ms) heartbeats are answered until then: _renew_lease
        # (monotonic ms) when its voter last heard from a majority of the voters, None with one voter
        self.majority_contact_ms: int | None = None
        self.shutting_down = False
        self.gcs = GcsCalls()
        self.named_actors: dict[str, Any] = {}  # Kray's named actors by name (a standby keeps them)
        self.named_actors_at = float("-inf")     # (monotonic) when they were listed last
        if voter_id is not None or not self.quorum_voters:
            try:  # reading (a standby: its wait for its voter to lead) starts at once (Ray runs __init__ in its loop)
                asyncio.get_running_loop()
                self._resume_supervision()
            except RuntimeError:
                pass

    def _load(self, records: list[dict[str, Any]], found: tuple[dict, dict] | None = None) -> None:
        """The state the metadata log's records make, and the actors still running from before
        (`found`: found already, else found here), adopted."""
        if self.core is None:
            self._replay(records)
        shards, gateways = found if found is not None else self._find_running_actors()
        self.rec.adopt(self.core, shards, gateways,
                       lambda shard, topic, p, b: HostedReplica(shard, self._replica_spec(topic, p, b)))
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
        """Combined voters run in the voting brokers' gateways: start those first (or find them
        running); the dedicated voter runs here. Then read the metadata from the quorum's leader."""
        if self.dedicated is not None and self.dedicated_run is None:
            self.dedicated_run = asyncio.ensure_future(self._run_dedicated_voter())
        cache = asyncio.ensure_future(self._keep_named_actors()) if self.voter_id is not None else None
        started = self.dedicated is not None
        while True:
            try:
                if not started:  # (at the start only: a standby's turn may come while Ray's GCS is cut off)
                    await self._start_voting_gateways()
                    started = True
                records = await self.log.open()
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the metadata from the quorum failed; trying again")
                await asyncio.sleep(1.0)
        if cache is not None:
            cache.cancel()
        if not records:
            records = await self._import_file_log()
        self._replay(records)
        if self.dedicated is not None:
            # the one controller (started again by Ray, or new): Ray's GCS is on this node; the
            # actors it had started are asked for by name (off the event loop)
            predecessor = None
            self._load(records, await asyncio.to_thread(self._find_running_actors))
        else:
            if time.monotonic() - self.named_actors_at > NAMED_ACTORS_FRESH_S:
                try:
                    await self._refresh_named_actors()
                except Exception as e:  # Ray's GCS is cut off from this node: the actors known from standing by
                    log.warning("Ray's named actors could not be listed (%s): adopting the %d known from standing by",
                                e, len(self.named_actors))
            predecessor = await self._predecessor_heard()  # (its answer renews the lease too)
            # (shards of a dead node take a while to not answer: the event loop keeps turning meanwhile)
            self._load(records, await asyncio.to_thread(self._find_running_actors, dict(self.named_actors),
                                                         ADOPT_TIMEOUT_S_STANDBY))
        if self.voter_id is not None:
            log.warning("controller of broker %d: its voter leads the metadata quorum; this controller is active",
                        self.voter_id)
            self._say(f"the controller on broker {self.voter_id} is active (its voter leads the metadata quorum)")
            self.leadership_watch = asyncio.ensure_future(self._watch_leadership())
        self._resume_supervision()
        self._continue_predecessor_session(predecessor)
        # replicas whose shard did not answer in time (a host cut off) are hosted (idempotent) and
        # told their state once it answers: a leader cut off learns it follows now
        for topic in list(self.core.topics.values()):
            self._start_partitions(topic)

    async def _run_dedicated_voter(self) -> None:
        """The dedicated controller's voter, until the controller stops. Its disk failing (or its state
        not what the quorum says) stops this process: Ray starts the controller again from what is on
        disk, as Kafka halts on a metadata log failure."""
        try:
            await self.dedicated.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.shutting_down:
                return
            log.critical("the dedicated controller's voter of the metadata quorum failed; the controller stops",
                         exc_info=True)
            os._exit(1)

    async def _predecessor_heard(self) -> tuple[int, int] | None:
        """(the broker whose voter led before this one's, when this one last heard from it, by
        time.monotonic in ms) from this controller's voter, None if it does not know."""
        if self.voter_id is None:
            return None
        try:
            answer = await asyncio.wait_for(self.log.own_status(), LEADERSHIP_CHECK_TIMEOUT_S)
        except Exception as e:
            log.info("controller of broker %d: its voter did not say who led before (%s)", self.voter_id, e)
            return None
        if answer is None:
            return None
        self._renew_lease(answer[0])
        heard = answer[0].leader_heard
        return None if heard is None or heard[0] == self.voter_id else heard

    def _continue_predecessor_session(self, predecessor: tuple[int, int] | None) -> None:
        """A new active controller gives every broker a fresh session (Kafka's does too), except the
        one whose voter led before it: that broker's session continues from when this controller's
        voter last heard from that leader (plus a skew), since the election means it went silent
        (its host cut off, most often, with the old controller on it). So a cut-off host is fenced
        a session (and the skew) after it went silent, not a session after the election and the
        takeover; but no sooner than
        SUCCESSOR_GRACE_HEARTBEATS heartbeat intervals from now, time for a broker that lost only its
        controller to find this one."""
        if predecessor is None:
            return
        broker_id, heard_at_ms = predecessor
        # (the voter runs in this node's gateway: time.monotonic is the same clock in both processes)
        silent_ms = max(0, monotonic_ms() - heard_at_ms)
        replication = self.core.replication
        b = replication.brokers.get(broker_id)
        if b is None or b.fenced or b.last_heartbeat_ms is None:
            return
        grace_ms = SUCCESSOR_GRACE_HEARTBEATS * int(self.core.broker_config.get(
            "broker.heartbeat.interval.ms", DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS))
        # every broker counts its session from no later than the predecessor's last contact with a
        # majority (a heartbeat's send time less that contact's age: `heartbeat`), which may have
        # come a little after this voter last heard from it (LEASE_SKEW_MS); so the cut-off broker
        # stops leading before this controller names new leaders
        credited_ms = min(max(0, silent_ms - LEASE_SKEW_MS),
                          max(0, replication.broker_session_timeout_ms - grace_ms))
        b.last_heartbeat_ms -= credited_ms
        log.warning("broker %d, whose voter led before, was last heard from %d ms ago: its session counts %d ms "
                    "of that", broker_id, silent_ms, credited_ms)

    async def _import_file_log(self) -> list[dict[str, Any]]:
        """A cluster's metadata kept before the quorum (a file on the controller's node), moved into
        the empty quorum log once: the records are committed first, then the file is renamed, so a
        failure in between imports it again (into a log whose controller failed: read afresh)."""
        path = self.data_dir / "__cluster_metadata" / "metadata.log"
        if not path.exists():
            return []
        file_log = MetadataLog(path)
        records = list(file_log.replay())
        file_log.close()
        if records:
            self.log.append(records)
            await self.log.durable(self.log.appended)
            log.warning("the metadata of %s (%d records) is now in the metadata quorum's log", path, len(records))
        path.rename(path.with_name("metadata.log.imported"))
        return records

    async def _watch_leadership(self) -> None:
        """An active controller whose voter no longer leads (cut off, deposed) stops at once: its
        records could no longer commit, and another controller becomes active."""
        while True:
            await asyncio.sleep(LEADERSHIP_CHECK_S)
            try:
                answer = await asyncio.wait_for(self.log.own_status(), LEADERSHIP_CHECK_TIMEOUT_S)
            except asyncio.TimeoutError:  # its own node's gateway, busy: only a clear answer counts
                log.warning("controller of broker %d: its voter did not answer within %.0f s", self.voter_id,
                            LEADERSHIP_CHECK_TIMEOUT_S)
                continue
            except Exception as e:
                answer = None
                log.warning("controller of broker %d: its voter did not answer (%s)", self.voter_id, e)
            if answer is None or answer[0].role != "leader":
                self._quorum_failed(f"the voter of broker {self.voter_id} no longer leads the metadata quorum")
            elif answer[0].epoch != self.log.epoch:  # deposed and elected again: others' records not read
                self._quorum_failed(f"the voter of broker {self.voter_id} leads epoch {answer[0].epoch}, not "
                                    f"{self.log.epoch} that the metadata was read in")
            else:
                self._renew_lease(answer[0])

    def _renew_lease(self, status) -> None:
        """Heartbeats are answered only while a majority of voters was in touch with this
        controller's voter within CONTROLLER_LEASE_MS: a controller cut off from the others stops
        renewing its own host's broker sessions at once, not when its voter resigns (1.5 quorum
        fetch timeouts later). The contact's time goes with every heartbeat's answer (`heartbeat`)."""
        if len(status.voters) <= 1:  # a single voter: no one else could take over
            self.lease_until_ms = float("inf")
            return
        contact_ms = status.majority_contact_ms(monotonic_ms())
        if contact_ms is not None:
            self.majority_contact_ms = max(self.majority_contact_ms or contact_ms, contact_ms)
            self.lease_until_ms = max(self.lease_until_ms, contact_ms + CONTROLLER_LEASE_MS)

    async def _keep_named_actors(self) -> None:
        """While standing by: keep handles to Kray's named actors (gateways, shards, controllers),
        each called once so Ray has resolved where it runs. A standby's turn can come while Ray's
        GCS (on the Ray head) is cut off from its node: it then adopts these without asking the GCS."""
        while True:
            try:
                await self._refresh_named_actors()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("refreshing the named actors failed: %s", e)
            await asyncio.sleep(NAMED_ACTORS_REFRESH_S)

    async def _refresh_named_actors(self) -> None:
        self._learn_node_cpus(await self.gcs(ray.nodes))
        names = await self.gcs(lambda: [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                                        if a.get("namespace") == NAMESPACE])
        fresh = {name: self.named_actors[name] for name in names if name in self.named_actors}
        found = {}
        for name in names:
            if name not in fresh:
                try:
                    found[name] = await self.gcs(ray.get_actor, name, NAMESPACE)
                except ValueError:
                    continue

        async def warm(name, handle):  # one call: Ray resolves the actor's address now
            call = handle.hosted.remote() if name.startswith("shard-") else handle.inter_broker_endpoint.remote()
            try:
                await asyncio.wait_for(call, NAMED_ACTOR_WARM_TIMEOUT_S)
            except Exception:  # (cut off, or starting: asked again at the next refresh)
                return
            fresh[name] = handle
        # all at once: the actors of a host cut off cost one wait, not one each (a controller
        # started again by Ray takes over only after this)
        await asyncio.gather(*(warm(name, handle) for name, handle in found.items()
                               if name.startswith(("shard-", "gateway-"))))
        fresh.update({name: handle for name, handle in found.items() if not name.startswith(("shard-", "gateway-"))})
        # a known actor whose call did not answer this time (cut off, busy) stays known
        fresh = {**{n: h for n, h in self.named_actors.items() if n not in fresh and n in names}, **fresh}
        self.named_actors = fresh
        self.named_actors_at = time.monotonic()

    def _learn_node_cpus(self, nodes: list[dict]) -> None:
        """Each live node's CPU count (the default shard count of its broker), from ray.nodes()."""
        for node in nodes:
            if node.get("Alive") and node["NodeID"] not in self.node_cpus:
                cpus = node.get("Resources", {}).get("CPU", 1)
                self.node_cpus[node["NodeID"]] = max(1, min(int(cpus), SHARDS_PER_BROKER_MAX))

    async def _start_voting_gateways(self) -> None:
        """Each voter's gateway, on the node with its broker id (its label, or its meta.properties,
        where `kray start` recorded it), started (if it is not running) and asked to listen: it
        answers only once the metadata is read."""
        labelled = {}
        nodes = [n for n in map(NodeView.of, ray.nodes()) if n.alive and n.hosts_broker]
        unlabelled = [n for n in nodes if n.labelled_broker_id is None]
        recorded = await asyncio.gather(*(composition.run_on_node(n.node_id, read_broker_id, str(self.data_dir))
                                          for n in unlabelled), return_exceptions=True)
        for node, broker_id in [(n, n.labelled_broker_id) for n in nodes if n.labelled_broker_id is not None] + \
                list(zip(unlabelled, recorded)):
            if broker_id in self.quorum_voters:
                labelled[broker_id] = node
        for broker_id, node in sorted(labelled.items()):
            gateway = self._running_gateway(broker_id)
            if gateway is None:
                try:
                    gateway = composition.start_gateway(self.broker_config, broker_id, node.node_id,
                                                        self._own_handle(), node.port)
                except ray.exceptions.ActorAlreadyExistsError:  # another voter's controller just started it
                    continue
                log.info("broker %d (a voter of the metadata quorum) starting on Ray node %s", broker_id,
                         node.node_id[:12])
            gateway.start.remote()  # (its supervisor, once the metadata is read, awaits the same start)
        missing = sorted(set(self.quorum_voters) - set(labelled))
        if missing:
            log.warning("voters %s of the metadata quorum have no live Ray node yet", missing)

    @staticmethod
    def _running_gateway(broker_id: int):
        try:
            return ray.get_actor(gateway_name(broker_id), namespace=NAMESPACE)
        except ValueError:
            return None

    def _quorum_failed(self, why: str) -> None:
        """Records may be lost that this controller's state already holds: start again from the log."""
        if self.shutting_down:
            log.info("the controller stops (%s)", why)
            return
        log.error("the controller restarts to read the metadata again (%s)", why)
        os._exit(1)  # Ray starts the controller again (max_restarts=-1); its actors keep running

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

    def _find_running_actors(self, named: dict[str, Any] | None = None,
                             timeout_s: float = ADOPT_TIMEOUT_S) -> tuple[dict, dict]:
        """After Ray restarts the controller, the actors it had started are still running under
        their names: find them (the reconciler adopts them instead of starting twins). Each shard
        says which replicas it hosts (where they really are, whatever the shard count is now), each
        gateway where it runs. `named`: the handles by name, known already (a standby's, when the
        GCS may be cut off), else asked of Ray. Runs off the event loop."""
        def running(name):
            if named is not None:
                return named.get(name)
            try:
                return ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                return None
        names = set(named) if named is not None else {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                                                      if a.get("namespace") == NAMESPACE}
        asked = []
        for broker_id in self.core.brokers:
            for index in range(SHARDS_PER_BROKER_MAX):
                name = shard_name(broker_id, index)
                shard = running(name) if name in names else None
                if shard is not None:
                    asked.append(((broker_id, index), name, shard, shard.hosted.remote()))
        shards = {}
        deadline = time.monotonic() + timeout_s  # all asked at once: a dead node's shards cost one wait
        for key, name, shard, answer in asked:
            try:
                shards[key] = (shard, ray.get(answer, timeout=max(0.0, deadline - time.monotonic())))
            except Exception as e:  # restarting: its replicas are started again when needed
                log.info("shard %s did not say what it hosts: %s", name, e)
                shards[key] = (shard, None)
        # every broker's gateway, also one an earlier controller started that has not registered yet
        brokers = set(self.core.brokers) | {int(n.split("-", 1)[1]) for n in names
                                            if n.startswith("gateway-") and n.split("-", 1)[1].isdigit()}
        gateways = {b: running(gateway_name(b)) for b in brokers}
        gateways = {b: g for b, g in gateways.items() if g is not None}
        # where each runs: the node its registration recorded, unless it says another (the voting
        # brokers' gateways of a restarted cluster, started on new nodes before the metadata was read)
        where = {b: g.node_id.remote() for b, g in gateways.items()}
        found = {}
        for broker_id, gateway in gateways.items():
            registered = self.core.brokers.get(broker_id)
            node_id, answered = registered.node_id if registered is not None else None, False
            try:
                node_id, answered = ray.get(where[broker_id], timeout=max(0.1, deadline - time.monotonic())), True
            except Exception as e:  # cut off, or restarting: as registered
                log.info("broker %d's gateway did not say where it runs: %s", broker_id, e)
            if node_id is not None:
                found[broker_id] = (gateway, node_id, answered)
        return shards, found

    def _resume_supervision(self) -> None:
        """The reconciler's loop and the node watcher are asyncio tasks: start them from the first
        async call (in quorum mode, once the metadata is read)."""
        if not self.loaded.is_set():  # (the core may exist already: replayed, its actors being adopted)
            if self.loading is None:
                self.loading = asyncio.ensure_future(self._load_from_quorum())
            return
        if self.node_watcher is None:
            # sessions are judged from now on: adopting the running actors, and the first call
            # after a restart, can take longer than a broker session
            self.core.replication.finish_replay(now_ms())
            self.node_watcher = asyncio.ensure_future(self._watch_nodes())
            self.ticker = asyncio.ensure_future(self._tick())
            self.reconciling = asyncio.ensure_future(self._keep_reconciling())

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
                raise TimeoutError(f"{len(serving)} of {expected} brokers serve clients after {timeout_s:.0f} s; "
                                   f"Ray nodes: {len(ray.nodes())} (is every broker node up?)")

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
        ray_nodes = await self.gcs(ray.nodes)
        self._learn_node_cpus(ray_nodes)
        nodes = list(map(NodeView.of, ray_nodes))
        actions, new = self.rec.nodes_seen(nodes)
        self._execute(actions)
        for node in new:
            broker_id = node.labelled_broker_id
            if broker_id is None:
                proposed = self.rec.proposed_broker_id(int(self.core.broker_config["broker.id"]))
                broker_id = await composition.run_on_node(node.node_id, recorded_broker_id, str(self.data_dir),
                                                          proposed)
            self._execute(self.rec.claim(node, broker_id, nodes))

    def _execute(self, actions: list) -> None:
        """Carry out the reconciler's actions: the quick ones here, calls to actors as tasks that
        report their results back to it."""
        for action in actions:
            if isinstance(action, Say):
                self._say(action.text)
            elif isinstance(action, Fence):
                log.warning("broker %d is gone with its Ray node", action.broker_id)
                self._persist(self.core.replication_outcome(self.core.replication.broker_died(action.broker_id).records))
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
            else:
                raise TypeError(f"the controller does not carry out {action!r}")
        self._note_changes()

    def _start_gateway(self, broker_id: int, node: NodeView) -> None:
        try:
            gateway = (self._running_gateway(broker_id) if self.quorum_voters else None) or \
                composition.start_gateway(self.core.broker_config, broker_id, node.node_id, self._own_handle(),
                                          node.port)
        except ray.exceptions.ActorAlreadyExistsError:  # an earlier controller started it: adopt it
            gateway = ray.get_actor(gateway_name(broker_id), namespace=NAMESPACE)
            self._spawn(self._locate_gateway(broker_id, gateway))
        if self.voter_id is not None and broker_id in self.quorum_voters:
            self._ensure_controller(broker_id, node.node_id)
        self.rec.gateway_deployed(broker_id, gateway)
        log.info("broker %d starting on Ray node %s", broker_id, node.node_id[:12])
        self._wake()

    async def _locate_gateway(self, broker_id: int, gateway) -> None:
        try:
            self.rec.gateway_located(broker_id, await gateway.node_id.remote())
        except Exception as e:  # (dead, or cut off: its node is lost or found by the node watcher)
            log.info("broker %d's running gateway did not say where it runs: %s", broker_id, e)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _note_changes(self) -> None:
        """What the reconciler learnt changed the image: a new version."""
        if self.rec.take_changed():
            self._bump()

    def _wake(self) -> None:
        """The reconciler has news (a result): it steps again."""
        self.wake.set()

    # ---- metadata --------------------------------------------------------------------------
    def image(self) -> MetadataImage:
        """The metadata as gateways need it. Only gateways follow it (a few per cluster): every
        actor handle in an image is deserialized, and reference counted, by every receiver.
        Brokers: registered with this controller and unfenced (Kafka leaves fenced ones out).
        Partition actors and listeners: each partition's leader replica; a listener only once that
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
                             {e: dict(values) for e, values in c.client_quotas.items()})

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
    def broker_configs(self) -> dict[str, Any]:
        return dict(self.core.broker_config)

    # ---- commands --------------------------------------------------------------------------
    @answers_once_committed
    async def register_broker(self, info: BrokerInfo, gateway=None) -> tuple[MetadataImage, int]:
        """A gateway (re)starts its broker: a new broker epoch, unfenced, and its replicas start.
        Returns at once with the image and the broker epoch its heartbeats carry (replicas may
        take longer to start than a broker session lasts); `broker_ready` then waits for them."""
        if info.node_id in self.rec.lost_nodes:
            raise ValueError(f"broker {info.broker_id}: its Ray node {info.node_id[:12]} was declared dead; the "
                             f"broker starts again on the node that replaces it")
        previous = self.core.brokers.get(info.broker_id)
        outcome = self.core.register_broker(info, now_ms())
        self._persist(outcome)
        log.info("broker %d registered (broker epoch %d) at %s:%d", info.broker_id, outcome.broker_epoch,
                 info.host, info.port)
        self._execute(self.rec.broker_registered(info.broker_id, info.node_id, info.host, info.port,
                                                   outcome.broker_epoch, previous and previous.node_id))
        if gateway is not None:
            self.rec.supervise_gateway(info.broker_id, gateway)
        for topic in list(self.core.topics.values()):
            self._start_partitions(topic)
        self._wake()
        return self.image(), outcome.broker_epoch

    @answers_once_committed
    async def broker_ready(self, broker_id: int) -> MetadataImage:
        """Answer once the replicas on this broker listen and know their partitions' state; the
        broker then counts as serving."""
        await self._await_listening([key for topic in list(self.core.topics.values())
                                     for key in self._start_partitions(topic) if key[2] == broker_id])
        self.rec.broker_serving(broker_id)  # ready: its partitions listen and it knows it is published
        self._note_changes()
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
        now = monotonic_ms()
        if self.voter_id is not None and now >= self.lease_until_ms:
            raise NotController(f"the controller on broker {self.voter_id} has not heard from a majority of the "
                                f"voters within {CONTROLLER_LEASE_MS} ms")
        contact_age_ms = 0 if self.majority_contact_ms is None else max(0, now - self.majority_contact_ms)
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
        keys = self._start_partitions(self.core.topics[name])
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
        await self._await_listening(self._start_partitions(topic))
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
        self._note_changes()
        # (a replica cut off from the controller is not waited for: it deletes its files when told
        # again, or when its broker returns without the topic)
        await self._await_replicas([stop.handle.delete.remote() for stop in stops])
        return 0, None, topic.topic_id

    @answers_once_committed
    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.create_partitions(name, count, validate_only=validate_only)
        self._persist(outcome)
        if not outcome.error_code and not validate_only:
            await self._await_listening(self._start_partitions(self.core.topics[name]))
        return outcome.error_code, outcome.message

    @answers_once_committed
    async def alter_topic_configs(self, name: str, configs: dict[str, Any], incremental: bool,
                                  validate_only: bool = False) -> tuple[int, str | None]:
        outcome = self.core.alter_topic_configs(name, configs, incremental=incremental, validate_only=validate_only)
        self._persist(outcome)
        if not outcome.error_code and not validate_only:
            await self._durable()
            topic = self.core.topics[name]
            config = TopicConfig.from_kafka(self.core.effective_configs(topic))
            await self._await_replicas([actor.reconfigure.remote(config) for actor in self.rec.handles(topic.topic_id)])
        return outcome.error_code, outcome.message

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
    def allocate_producer_id(self) -> int:
        producer_id, outcome = self.core.allocate_producer_id()
        self._persist(outcome)
        return producer_id

    async def shutdown(self) -> None:
        """Stop the gateways, close every partition actor this controller started (flushing their
        logs), then kill them."""
        self.shutting_down = True  # its voter stops with its gateway: that is no reason to restart
        for task in [*self.tasks, *self.shard_watchers.values(), self.node_watcher, self.ticker,
                     self.reconciling, self.leadership_watch]:
            if task is not None:
                task.cancel()
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
        self.log.close()
        if self.dedicated is not None:
            self.dedicated.stop()

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

    async def _keep_reconciling(self) -> None:
        """Step the reconciler after every change (coalesced), every result it waits for, and when
        its next retry is due; carry out what it decides."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._execute(self.rec.step(loop.time(), lambda key: partition_state(self.core, key)))
            except Exception:
                log.exception("reconciling the controller's actors failed")
            wake_at = self.rec.next_wake()
            deadline = loop.time() + METADATA_WAIT_S_MAX
            if await self._await_change_or_wake(deadline if wake_at is None else min(deadline, wake_at)):
                await asyncio.sleep(CHANGES_COALESCE_S)

    async def _await_change_or_wake(self, deadline: float) -> bool:
        wake = asyncio.ensure_future(self.wake.wait())
        change = asyncio.ensure_future(self._await_change(deadline))
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
            await self._durable()  # its partition (a new topic's) is committed before it has files
            address = await self._shard_call(action.handle, "host")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("%s failed or restarted (%s); asking it to serve again", action.key, type(e).__name__)
            self.rec.host_failed(action, loop.time())
        else:
            self.rec.hosted(action, address, loop.time())
        self._note_changes()
        self._wake()

    async def _tell(self, action: Tell) -> None:
        """Send a replica its partition's state (only committed state), at most
        REPLICA_UPDATE_TIMEOUT_S: one cut off is told again after reconciler.RETELL_S."""
        try:
            await self._durable()
            await asyncio.wait_for(self._shard_call(action.handle, "update", *self._update_args(action.state)),
                                   REPLICA_UPDATE_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # died (hosted again once its shard is back), or cut off
            log.debug("could not tell %s its partition state: %s", action.key, e)
            self.rec.tell_failed(action, asyncio.get_running_loop().time())
        else:
            self.rec.told(action)
        self._note_changes()
        self._wake()

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
        self._note_changes()
        self._wake()

    def _hosting_spec(self, actor: HostedReplica) -> dict:
        """What a replica is hosted with now: its spec with its topic's configs as they are now. A
        shard that Ray restarted hosts its replicas again from their specs, and a config altered
        since the replica first started (AlterConfigs reaches hosted replicas only, and not one
        whose shard is restarting) must be in force after the restart too."""
        topic = self.core.topics_by_id.get(actor.spec["topic_id"])
        if topic is not None:
            actor.spec["config"] = TopicConfig.from_kafka(self.core.effective_configs(topic))
        return actor.spec

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
                self._note_changes()
                self._wake()
                await asyncio.sleep(SUPERVISE_RETRY_S)

    def _watch_shard(self, key: tuple[int, int]) -> None:
        """One watcher per shard: a pending call that fails when the shard dies (Ray then restarts
        it empty), which the reconciler hears (it hosts the shard's replicas again)."""
        watcher = self.shard_watchers.get(key)
        if watcher is None or watcher.done():
            self.shard_watchers[key] = asyncio.ensure_future(self._watch_shard_life(key, self.rec.shards[key]))

    async def _await_listening(self, keys: list) -> None:
        """Answer only once new replicas listen and know their partition's state, so a client's
        first produce after a create finds the leader reachable from its gateway."""
        deadline = asyncio.get_running_loop().time() + PARTITION_START_TIMEOUT_S
        waiting = [key for key in keys if not self.rec.serving_replica(key, self.core)]
        while waiting and await self._await_change(deadline):
            waiting = [key for key in waiting if not self.rec.serving_replica(key, self.core)]  # those not ready yet

    # ---- telling replicas their partition's state --------------------------------------------
    @staticmethod
    def _update_args(state: tuple) -> list:
        """A replica's `update` arguments for partition state `state` (reconciler.partition_state)."""
        leader, leader_epoch, partition_epoch, replicas, isr, endpoint, broker_epoch, fenced = state
        return [{"leader": leader, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
                 "replicas": list(replicas), "isr": list(isr)}, endpoint, broker_epoch, list(fenced)]

    def _shard_call(self, replica: HostedReplica, method: str, *args) -> asyncio.Future:
        """A control call to a hosted replica ("host": have its shard host it). Calls to one shard
        made while the event loop turns travel as one Ray call (`ShardActor.call_many`): creating
        1,000 partitions, or a broker's loss moving hundreds, is a few Ray calls per shard, not two
        per replica (each costs the controller ~1-2 ms of CPU). A "host" takes no arguments: the
        replica's spec is read when the batch is sent (`_hosting_spec`), so that a config altered
        before then is in it even if the alter's own call to the replica came first and missed it."""
        loop = asyncio.get_running_loop()
        shard_id = replica.shard._actor_id
        batch = self.shard_batches.get(shard_id)
        if batch is None:
            batch = self.shard_batches[shard_id] = []
            loop.call_soon(self._send_shard_batch, shard_id, replica.shard)
        answer = loop.create_future()
        batch.append((replica, method, list(args), answer))
        return answer

    def _send_shard_batch(self, shard_id, shard) -> None:
        batch = self.shard_batches.pop(shard_id)
        sent = shard.call_many.remote([(replica.key, method, [self._hosting_spec(replica)] if method == "host" else args)
                                       for replica, method, args, _ in batch])
        asyncio.ensure_future(self._answer_shard_batch(sent, batch))

    @staticmethod
    async def _answer_shard_batch(sent, batch: list) -> None:
        try:
            results = await sent
        except Exception as e:  # the shard died: every call of the batch failed
            results = [(False, e)] * len(batch)
        for (replica, method, _, answer), (ok, result) in zip(batch, results):
            if answer.done():
                continue
            if ok:
                answer.set_result(result)
            else:
                answer.set_exception(result if isinstance(result, Exception) else
                                     ReplicaCallFailed(f"{method} of {replica.key}: {result}"))

    async def _tick(self) -> None:
        """Fence brokers whose session expired; now and then, give partitions back to their
        preferred leaders (auto.leader.rebalance.enable)."""
        config = self.core.broker_config
        rebalance = str(config.get("auto.leader.rebalance.enable", True)).lower() == "true"
        interval_s = float(config.get("leader.imbalance.check.interval.seconds", LEADER_IMBALANCE_CHECK_INTERVAL_S_DEFAULT))
        last_balance = asyncio.get_running_loop().time()
        last_tick_ms = now_ms()
        while True:
            await asyncio.sleep(REPLICATION_TICK_S)
            try:
                now = now_ms()
                stalled_ms, last_tick_ms = now - last_tick_ms - REPLICATION_TICK_S * 1000, now
                if stalled_ms > STALL_GRACE_MS:
                    # this process did not run for a while (CPU starved, paused): heartbeats may be
                    # waiting in its queue; a broker is not to blame for the controller's silence
                    log.warning("the controller stalled for %d ms: every broker gets a fresh session", stalled_ms)
                    self.core.replication.finish_replay(now)
                    continue
                expired = [(b.broker_id, now - b.last_heartbeat_ms) for b in self.core.replication.brokers.values()
                           if not b.fenced and b.last_heartbeat_ms is not None
                           and now - b.last_heartbeat_ms > self.core.replication.broker_session_timeout_ms]
                for broker_id, silent_ms in expired:
                    log.warning("broker %d is fenced: no heartbeat for %d ms (broker.session.timeout.ms)",
                                broker_id, silent_ms)
                    self._say(f"broker {broker_id} fenced: no heartbeat for {silent_ms} ms (broker.session.timeout.ms="
                              f"{self.core.replication.broker_session_timeout_ms}); other replicas lead its "
                              f"partitions until it is back")
                self._persist(self.core.replication_outcome(self.core.replication.tick(now).records))
                if rebalance and asyncio.get_running_loop().time() - last_balance >= interval_s:
                    last_balance = asyncio.get_running_loop().time()
                    self._persist(self.core.replication_outcome(self.core.replication.balance_leaders().records))
            except Exception:
                log.exception("the controller's replication tick failed")

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

    def _ensure_controller(self, broker_id: int, node_id: str) -> None:
        """A voting broker's node (back) has its controller, standing by."""
        if broker_id == self.voter_id:
            return
        try:
            ray.get_actor(controller_name(broker_id), namespace=NAMESPACE)
        except ValueError:
            composition.start_controller(ControllerActor, self.broker_config, node_id, broker_id)
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
            if self.quorum_voters:  # (never a GCS call on the event loop: the Ray head may be cut off)
                raise LookupError(f"the CPU count of broker {broker.broker_id}'s node is not known yet")
            self._learn_node_cpus(ray.nodes())
        return self.node_cpus.get(broker.node_id, 1)

    def _start_partitions(self, topic: TopicState) -> list:
        """Start the missing replicas of a topic that the reconciler wants, each in a shard on its
        broker's node (it hosts them and tells them their state, again after Ray restarts their
        shard); return the keys of all its wanted replicas that run or start."""
        config = TopicConfig.from_kafka(self.core.effective_configs(topic))
        listening, starts = self.rec.missing(desired_replicas(self.core, self.rec.registered, [topic]))
        for start in starts:
            _, index, broker_id = start.key
            try:
                replica, shard = self._start_replica(self._replica_spec(topic, index, broker_id, config),
                                                     self.core.brokers[broker_id])
            except LookupError as e:  # started later: when the node watcher has seen the node
                log.info("replica %s-%d on broker %d waits: %s", topic.name, index, broker_id, e)
                continue
            self.rec.replica_started(start.key, replica, shard)
            listening.append(start.key)
        if starts:
            self._note_changes()
        return listening

