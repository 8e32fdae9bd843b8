"""The controller's place in the metadata quorum: where its voter runs, when it may read the
metadata (its turn), the lease within which it answers broker heartbeats, and what it takes over
from the controller before it.

The metadata log is the quorum's `__cluster_metadata-0` (quorum_metadata.py), whose voters run in
one of two places (quorum_shell/settings.py). By default one dedicated controller (on the Ray head,
no `voter_id`) runs the quorum's only voter in its own process: it reads the log once its voter has
elected itself and is the only controller. With combined voters (controller.quorum.voters names
brokers) the voters run in the voting brokers' gateways, and each voting broker's node runs a
controller of its own (`voter_id`): the one whose voter leads reads the log and is active, the
others stand by (answering NotController; callers hold an ActiveController that finds the active
one) and keep handles to the running actors, so that a turn which comes while Ray's GCS is cut off
(the Ray head's host isolated) adopts them without it. An active controller whose voter stops
leading exits; Ray starts it again as a standby.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import ray

from actors import composition
from actors.controller.elections import DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS
from actors.controller.metadata_log import MetadataLog
from actors.controller.nodes import NodeView, read_broker_id
from actors.controller.quorum_metadata import QuorumMetadataLog
from actors.controller.quorum_shell.node import monotonic_ms
from actors.controller.quorum_shell.settings import DEDICATED_CONTROLLER_ID, combined_voters, quorum_config
from actors.controller.quorum_shell.voter import LocalVoter, build_dedicated_voter
from actors.controller.ray_calls import GcsCalls, find_running_actors
from actors.controller_client import NotController
from actors.names import NAMESPACE, gateway_name

log = logging.getLogger("kray.controller")
ADOPT_TIMEOUT_S = 10.0
# a standby taking over: shards of a host cut off (the one whose controller it replaces, often)
# answer nothing, and every broker waits meanwhile (the takeover's wait delays fencing that host,
# whose session starts when the new controller is active); a shard that answers later has its
# replicas hosted again (idempotent) and told their state
ADOPT_TIMEOUT_S_STANDBY = 1.0
# a new active controller fences the broker whose voter led before no sooner than this many of its
# heartbeat intervals after taking over (see continue_predecessor_session)
SUCCESSOR_GRACE_HEARTBEATS = 2
# how much later than a follower last heard from the leader the leader may have last heard from a
# majority (the other follower's fetch, up to one replica.fetch.wait.max.ms later, and transit)
LEASE_SKEW_MS = 500
NAMED_ACTORS_REFRESH_S = 5.0     # a standby controller refreshes its handles to the running actors
NAMED_ACTOR_WARM_TIMEOUT_S = 5.0
NAMED_ACTORS_FRESH_S = 15.0       # a standby taking over asks Ray's GCS again only if its handles are older
LEADERSHIP_CHECK_S = 0.5          # an active controller checks this often that its voter still leads
LEADERSHIP_CHECK_TIMEOUT_S = 5.0


def predecessor_credit_ms(silent_ms: int, session_timeout_ms: int, grace_ms: int) -> int:
    """How much of its session the broker whose voter led before has used up when a new controller
    takes over: the time since this controller's voter last heard from it, less LEASE_SKEW_MS,
    leaving it at least `grace_ms` (time for a broker that lost only its controller to find this
    one)."""
    return min(max(0, silent_ms - LEASE_SKEW_MS), max(0, session_timeout_ms - grace_ms))


def silent_predecessor(status, own_id: int) -> tuple[int, int] | None:
    """From a new leader's voter status: (the voter that led before, when it was last heard from),
    if its session should continue from then (`continue_predecessor_session`); None when there is
    none, it is this voter, or it removed itself from the voters (RemoveRaftVoter): a leader's own
    removal commits with a majority and it then resigns, a planned handover like Kafka's, whose
    broker keeps a fresh session as every other one (it is not cut off)."""
    heard = status.leader_heard
    if heard is None or heard[0] == own_id:
        return None
    if status.voters and heard[0] not in {v.replica_id for v in status.voters}:
        log.warning("broker %d, whose voter led before, removed itself from the voters: a handover, its "
                    "session is fresh", heard[0])
        return None
    return heard


class Leadership:
    def __init__(self, broker_config: dict[str, Any], voter_id: int | None):
        self.broker_config = broker_config
        self.quorum_voters = combined_voters(broker_config)
        self.voter_id = voter_id
        self.dedicated = None if self.quorum_voters else build_dedicated_voter(broker_config)
        self.dedicated_run: asyncio.Task | None = None
        if self.quorum_voters:
            self.log = QuorumMetadataLog(self.quorum_voters, on_failure=self.failed, only=voter_id)
        else:
            self.log = QuorumMetadataLog((DEDICATED_CONTROLLER_ID,), on_failure=self.failed,
                                         only=DEDICATED_CONTROLLER_ID, local=LocalVoter(self.dedicated))
        self.watching: asyncio.Task | None = None
        self.status = None       # an active controller's voter's QuorumStatus, as `_watch` last heard it
        self.lease_until_ms = 0  # (monotonic ms) heartbeats are answered until then: renew_lease
        # heartbeats are answered only until this long after its voter's last contact with a majority
        # of the voters: controller.quorum.fetch.timeout.ms, after which a follower, too, stops counting
        # on its leader. (It was 1 s: with two voters the contact is one follower's fetch, and on a loaded
        # machine those came >1 s apart often enough that heartbeats went unanswered for a whole session
        # and live brokers were fenced. Brokers count their sessions from the contact, not from the
        # answer, so a longer lease fences a cut-off host no later.)
        self.lease_ms = quorum_config(broker_config, self.quorum_voters or (DEDICATED_CONTROLLER_ID,)).fetch_timeout_ms
        # (monotonic ms) when its voter last heard from a majority of the voters, None with one voter
        self.majority_contact_ms: int | None = None
        self.stopping = False
        self.gcs = GcsCalls()
        self.named_actors: dict[str, Any] = {}  # Kray's named actors by name (a standby keeps them)
        self.named_actors_at = float("-inf")     # (monotonic) when they were listed last
        self.on_ray_nodes: Callable[[list[dict]], None] = lambda nodes: None

    # ---- the turn: reading the metadata ----------------------------------------------------
    async def read_metadata(self, data_dir: Path, own_handle: Callable[[], Any],
                            replay: Callable[[list[dict]], Any]) -> tuple[list[dict], tuple[dict, dict], Any]:
        """Combined voters run in the voting brokers' gateways: start those first (or find them
        running); the dedicated voter runs here. Then read the metadata from the quorum's leader
        (`replay` makes the core of it), and find the actors running from before. Returns the
        records, the running actors (ray_calls.find_running_actors) and the predecessor (see
        `predecessor_heard`)."""
        if self.dedicated is not None and self.dedicated_run is None:
            self.dedicated_run = asyncio.ensure_future(self._run_dedicated_voter())
        cache = asyncio.ensure_future(self._keep_named_actors()) if self.voter_id is not None else None
        started = self.dedicated is not None
        while True:
            try:
                if not started:  # (at the start only: a standby's turn may come while Ray's GCS is cut off)
                    await self._start_voting_gateways(data_dir, own_handle)
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
            records = await self._import_file_log(data_dir)
        core = replay(records)
        if self.dedicated is not None:
            # the one controller (started again by Ray, or new): Ray's GCS is on this node; the
            # actors it had started are asked for by name (off the event loop)
            return records, await asyncio.to_thread(find_running_actors, core, None, ADOPT_TIMEOUT_S), None
        if time.monotonic() - self.named_actors_at > NAMED_ACTORS_FRESH_S:
            try:
                await self._refresh_named_actors()
            except Exception as e:  # Ray's GCS is cut off from this node: the actors known from standing by
                log.warning("Ray's named actors could not be listed (%s): adopting the %d known from standing by",
                            e, len(self.named_actors))
        predecessor = await self.predecessor_heard()  # (its answer renews the lease too)
        # (shards of a dead node take a while to not answer: the event loop keeps turning meanwhile)
        found = await asyncio.to_thread(find_running_actors, core, dict(self.named_actors), ADOPT_TIMEOUT_S_STANDBY)
        return records, found, predecessor

    async def _run_dedicated_voter(self) -> None:
        """The dedicated controller's voter, until the controller stops. Its disk failing (or its state
        not what the quorum says) stops this process: Ray starts the controller again from what is on
        disk, as Kafka halts on a metadata log failure."""
        try:
            await self.dedicated.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.stopping:
                return
            log.critical("the dedicated controller's voter of the metadata quorum failed; the controller stops",
                         exc_info=True)
            os._exit(1)

    async def _import_file_log(self, data_dir: Path) -> list[dict[str, Any]]:
        """A cluster's metadata kept before the quorum (a file on the controller's node), moved into
        the empty quorum log once: the records are committed first, then the file is renamed, so a
        failure in between imports it again (into a log whose controller failed: read afresh)."""
        path = data_dir / "__cluster_metadata" / "metadata.log"
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

    async def _start_voting_gateways(self, data_dir: Path, own_handle: Callable[[], Any]) -> None:
        """Each voter's gateway, on the node with its broker id (its label, or its meta.properties,
        where `kray start` recorded it), started (if it is not running) and asked to listen: it
        answers only once the metadata is read."""
        labelled = {}
        nodes = [n for n in map(NodeView.of, ray.nodes()) if n.alive and n.hosts_broker]
        unlabelled = [n for n in nodes if n.labelled_broker_id is None]
        recorded = await asyncio.gather(*(composition.run_on_node(n.node_id, read_broker_id, str(data_dir))
                                          for n in unlabelled), return_exceptions=True)
        for node, broker_id in [(n, n.labelled_broker_id) for n in nodes if n.labelled_broker_id is not None] + \
                list(zip(unlabelled, recorded)):
            if broker_id in self.quorum_voters:
                labelled[broker_id] = node
        for broker_id, node in sorted(labelled.items()):
            gateway = running_gateway(broker_id)
            if gateway is None:
                try:
                    gateway = composition.start_gateway(self.broker_config, broker_id, node.node_id, own_handle(),
                                                        node.port)
                except ray.exceptions.ActorAlreadyExistsError:  # another voter's controller just started it
                    continue
                log.info("broker %d (a voter of the metadata quorum) starting on Ray node %s", broker_id,
                         node.node_id[:12])
            gateway.start.remote()  # (the reconciler, once the metadata is read, awaits the same start)
        missing = sorted(set(self.quorum_voters) - set(labelled))
        if missing:
            log.warning("voters %s of the metadata quorum have no live Ray node yet", missing)

    # ---- standing by -----------------------------------------------------------------------
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
        self.on_ray_nodes(await self.gcs(ray.nodes))
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

    # ---- leading: the predecessor, the lease, the watch ----------------------------------------
    async def predecessor_heard(self) -> tuple[int, int] | None:
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
        self.renew_lease(answer[0])
        return silent_predecessor(answer[0], self.voter_id)

    @staticmethod
    def continue_predecessor_session(core, predecessor: tuple[int, int] | None) -> None:
        """A new active controller gives every broker a fresh session (Kafka's does too), except the
        one whose voter led before it: that broker's session continues from when this controller's
        voter last heard from that leader (plus a skew), since the election means it went silent
        (its host cut off, most often, with the old controller on it). So a cut-off host is fenced
        a session (and the skew) after it went silent, not a session after the election and the
        takeover (`predecessor_credit_ms`)."""
        if predecessor is None:
            return
        broker_id, heard_at_ms = predecessor
        # (the voter runs in this node's gateway: time.monotonic is the same clock in both processes)
        silent_ms = max(0, monotonic_ms() - heard_at_ms)
        replication = core.replication
        b = replication.brokers.get(broker_id)
        if b is None or b.fenced or b.last_heartbeat_ms is None:
            return
        grace_ms = SUCCESSOR_GRACE_HEARTBEATS * int(core.broker_config.get(
            "broker.heartbeat.interval.ms", DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS))
        # every broker counts its session from no later than the predecessor's last contact with a
        # majority (a heartbeat's send time less that contact's age: `heartbeat`), which may have
        # come a little after this voter last heard from it (LEASE_SKEW_MS); so the cut-off broker
        # stops leading before this controller names new leaders
        credited_ms = predecessor_credit_ms(silent_ms, replication.broker_session_timeout_ms, grace_ms)
        b.last_heartbeat_ms -= credited_ms
        log.warning("broker %d, whose voter led before, was last heard from %d ms ago: its session counts %d ms "
                    "of that", broker_id, silent_ms, credited_ms)

    def watch(self) -> None:
        """Start checking that this controller's voter still leads."""
        self.watching = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
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
                self.failed(f"the voter of broker {self.voter_id} no longer leads the metadata quorum")
            elif answer[0].epoch != self.log.epoch:  # deposed and elected again: others' records not read
                self.failed(f"the voter of broker {self.voter_id} leads epoch {answer[0].epoch}, not "
                            f"{self.log.epoch} that the metadata was read in")
            else:
                self.status = answer[0]
                self.renew_lease(answer[0])

    def renew_lease(self, status) -> None:
        """Heartbeats are answered only while a majority of voters was in touch with this
        controller's voter within `lease_ms`: a controller cut off from the others stops
        renewing its own host's broker sessions at once, not when its voter resigns (1.5 quorum
        fetch timeouts later). The contact's time goes with every heartbeat's answer (`contact_age_ms`)."""
        if len(status.voters) <= 1:  # a single voter: no one else could take over
            self.lease_until_ms = float("inf")
            return
        contact_ms = status.majority_contact_ms(monotonic_ms())
        if contact_ms is not None:
            self.majority_contact_ms = max(self.majority_contact_ms or contact_ms, contact_ms)
            self.lease_until_ms = max(self.lease_until_ms, contact_ms + self.lease_ms)

    def contact_age_ms(self) -> int:
        """For a heartbeat's answer: how long ago this controller's voter last heard from a majority
        of the voters (0 with one voter). Raises NotController once the lease ran out."""
        now = monotonic_ms()
        if self.voter_id is not None and now >= self.lease_until_ms:
            raise NotController(f"the controller on broker {self.voter_id} has not heard from a majority of the "
                                f"voters within {self.lease_ms} ms")
        return 0 if self.majority_contact_ms is None else max(0, now - self.majority_contact_ms)

    def failed(self, why: str) -> None:
        """Records may be lost that this controller's state already holds: start again from the log."""
        if self.stopping:
            log.info("the controller stops (%s)", why)
            return
        log.error("the controller restarts to read the metadata again (%s)", why)
        os._exit(1)  # Ray starts the controller again (max_restarts=-1); its actors keep running

    def stop(self) -> None:
        self.stopping = True  # its voter stops with its gateway: that is no reason to restart
        if self.watching is not None:
            self.watching.cancel()
        self.log.close()
        if self.dedicated is not None:
            self.dedicated.stop()


def running_gateway(broker_id: int):
    try:
        return ray.get_actor(gateway_name(broker_id), namespace=NAMESPACE)
    except ValueError:
        return None
