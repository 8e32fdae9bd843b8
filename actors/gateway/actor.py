"""The gateway's Ray shell: an asyncio TCP server speaking Kafka, inside an async Ray actor.

One gateway per Ray node: it is that node's broker. The controller starts it (see
actors/controller/nodes.py for broker ids); it registers itself and keeps its metadata image
fresh by long-polling the controller, and heartbeats so that the controller knows it is alive.

Its session with the controller (actors/gateway/broker_session.py): a heartbeat goes every
`broker.heartbeat.interval.ms` without waiting for the previous answer; every control call has a
timeout (actors/controller_client.py). Once no heartbeat was answered for
`broker.session.timeout.ms` the broker assumes the controller fenced it and serves as leader of
nothing (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR) until the controller answers again and it has
metadata from after that answer.

It opens one front end per entry of `listeners` (Kafka's syntax; TLS and SASL per listener, see
actors/security/settings.py) and registers every advertised listener's address, so that
Metadata answers a client with the addresses of the listener it came in on. The inter-broker
listener is the broker's primary address (BrokerInfo.host/port: followers fetch from it). Where
several brokers share a machine, a node's port (its `kray-port` label) sets its primary listener's
port, and its other listeners' configured ports move by the same offset.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import ray

from actors import log_to_stderr
from actors.controller.image import MetadataImage
from actors.controller.core import BrokerInfo
from actors.controller.elections import DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS, DEFAULT_BROKER_SESSION_TIMEOUT_MS
from actors.controller.quorum_shell.settings import combined_voters
from actors.controller.quorum_shell.voter import build_voter, propose_through, read_through, voter_status
from actors.gateway.broker_session import BrokerSession
from actors.gateway.context import GatewayContext, RayController, monotonic_ms
from actors.gateway.frontend import follow_metadata, start_frontend
from actors.gateway.handlers.log_dirs import led_partition_sizes
from actors.startup import start_unless_started
from actors.security.settings import security_settings
from actors import names
from protocol.errors import ErrorCode

log = logging.getLogger("kray.gateway")
ANY_ADDRESS = ("0.0.0.0", "::", "")
SESSION_RECHECK_S = 0.05  # a session deadline is checked at most this late
VOTERS_POLL_S = 0.5  # how often a voter looks for the other voters' listeners while one is missing
VOTERS_REFRESH_S = 5.0  # ... and then, for a voter that moved
VOTER_LOOKUP_TIMEOUT_S = 5.0


class GatewayActor:
    def __init__(self, broker_config: dict, broker_id: int, controller, port: int | None = None):
        log_to_stderr()
        self.config = broker_config
        self.port = port  # this node's listener port, where it differs from the `listeners` config
        self.controller = controller
        self.ctx = GatewayContext(broker_id, broker_config, RayController(controller, broker_config))
        self.servers: dict[str, asyncio.AbstractServer] = {}  # listener name -> its front end
        self.watcher: asyncio.Task | None = None
        self.releasing: asyncio.Task | None = None  # answering acks=all waits after the session lapsed
        self.starting: asyncio.Future | None = None
        self.info: BrokerInfo | None = None
        self.broker_epoch = -1
        self.heartbeats: asyncio.Task | None = None
        self.session_watch: asyncio.Task | None = None
        self.heartbeat_interval_s = int(broker_config.get("broker.heartbeat.interval.ms",
                                                          DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS)) / 1000
        self.session_timeout_ms = int(broker_config.get("broker.session.timeout.ms", DEFAULT_BROKER_SESSION_TIMEOUT_MS))
        self.in_flight: set[asyncio.Task] = set()  # heartbeats awaiting their answer
        self.taking_up = asyncio.Lock()  # one re-registration or session resumption at a time
        self.unanswered_since_ms: int | None = None  # for the log: when heartbeats stopped being answered
        self.background: asyncio.Task | None = None  # a re-registration or session resumption under way
        self.stopped = asyncio.Event()
        self.voter: asyncio.Task | None = None  # runs this broker's voter of the metadata quorum
        self.voter_addresses: dict[int, tuple[str, int]] = {}  # peer voters' listeners, as last seen
        self.endpoint: tuple[str, int] | None = None  # this broker's inter-broker listener, advertised

    async def start(self) -> tuple[str, int]:
        self.starting = start_unless_started(self.starting, self._start)
        return await asyncio.shield(self.starting)

    async def _start(self) -> tuple[str, int]:
        settings = security_settings(self.config)
        listeners, primary = settings.listeners, settings.primary
        # a node's own port (several brokers on one machine) moves every configured port alike
        offset = self.port - primary.port if self.port is not None and primary.port > 0 else 0
        quorum = bool(combined_voters(self.config))  # this cluster's brokers vote (else: a dedicated controller)
        if not quorum:
            self.ctx.set_metadata(await self.ctx.controller.wait_for_metadata(-1, 0))  # before the first client
        elif self.ctx.metadata is None:
            # the controller's metadata lives in the quorum this broker's voter is part of: listen
            # first (the voters reach each other there), serve an empty cluster until it is read
            self.ctx.set_metadata(MetadataImage.starting())
        for listener in listeners.listeners:
            if listener.name in self.servers:  # a retried start keeps the sockets it already bound
                continue
            if listener.name == primary.name and self.port is not None:
                port = self.port
            else:
                port = listener.port + offset if listener.port else 0
            host = None if listener.binds_every_interface and listener.host != "0.0.0.0" else listener.host
            protected = listener.name == listeners.inter_broker_listener.name and len(listeners.listeners) > 1
            self.servers[listener.name] = await start_frontend(self.ctx, host, port,
                                                               security=settings.by_listener[listener.name],
                                                               listener=listener.name, protected=protected)
        node_ip = None
        endpoints: dict[str, tuple[str, int]] = {}
        explicit = bool(self.config.get("advertised.listeners"))  # else: the bound addresses of `listeners`
        for advertised in listeners.advertised_listeners:
            bound = self.servers[advertised.name].sockets[0].getsockname()[1]
            host = advertised.host
            port = advertised.port if explicit and advertised.port else bound
            if host in ANY_ADDRESS:  # listening on every interface: advertise the node's own address
                node_ip = node_ip or ray.util.get_node_ip_address()
                host = node_ip
            endpoints[advertised.name] = (host, port)
            log.info("broker %d: listener %s (%s) on port %d, advertised as %s:%d", self.ctx.broker_id,
                     advertised.name, advertised.security_protocol.value, bound, host, port)
        host, port = endpoints[primary.name]
        self.endpoint = (host, port)
        if quorum:
            if self.voter is None:
                self.voter = asyncio.create_task(self._run_voter())
            self.ctx.set_metadata(await self.ctx.controller.wait_for_metadata(-1, 0))
        node_id = ray.get_runtime_context().get_node_id()
        # follow the metadata before registering: registration publishes this broker at once, but
        # answers only after the partitions it leads listen (seconds, when logs recover), and
        # clients may already connect; they must not see a cluster without this broker meanwhile
        if self.watcher is None:
            self.watcher = asyncio.create_task(follow_metadata(self.ctx))
        self.info = BrokerInfo(self.ctx.broker_id, host, port, None, node_id, endpoints)
        if self.ctx.session is None:
            self.ctx.session = BrokerSession(self.session_timeout_ms)
        await self._register()
        if self.heartbeats is None:
            self.heartbeats = asyncio.create_task(self._heartbeat())
            self.session_watch = asyncio.create_task(self._watch_session())
        image = await self.ctx.controller.broker_ready(self.ctx.broker_id)  # its replicas listen
        if image.version > self.ctx.metadata.version:
            self.ctx.set_metadata(image)
        return host, port

    async def _register(self) -> None:
        sent_ms = monotonic_ms()
        image, self.broker_epoch = await self.ctx.controller.register_broker(
            self.info, ray.get_runtime_context().current_actor)
        self.ctx.session.renewed(sent_ms)
        if image.version > self.ctx.metadata.version:
            self.ctx.set_metadata(image)

    async def _heartbeat(self) -> None:
        """Tell the controller this broker is alive, every broker.heartbeat.interval.ms. A beat does
        not wait for the previous one's answer (a slow answer still renews the session from its
        own send time); at most a session's worth of beats wait at once."""
        most_in_flight = max(1, int(self.session_timeout_ms / 1000 / self.heartbeat_interval_s) + 1)
        while True:
            if len(self.in_flight) < most_in_flight:
                task = asyncio.create_task(self._beat())
                self.in_flight.add(task)
                task.add_done_callback(self.in_flight.discard)
            await asyncio.sleep(self.heartbeat_interval_s)

    async def _beat(self) -> None:
        epoch, sent_ms = self.broker_epoch, monotonic_ms()
        try:
            error, contact_age_ms = await self.ctx.controller.heartbeat(self.ctx.broker_id, epoch,
                                                                        self.session_timeout_ms / 1000)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if self.unanswered_since_ms is None:
                self.unanswered_since_ms = sent_ms
                log.warning("broker %d: a heartbeat got no answer (%s: %s); trying every %g s",
                            self.ctx.broker_id, type(e).__name__, e, self.heartbeat_interval_s)
            return
        if epoch != self.broker_epoch:
            return  # registered again meanwhile: the registration renewed the session
        if self.unanswered_since_ms is not None:
            log.warning("broker %d: the controller answers heartbeats again (after %d ms)", self.ctx.broker_id,
                        monotonic_ms() - self.unanswered_since_ms)
            self.unanswered_since_ms = None
        if error == ErrorCode.STALE_BROKER_EPOCH:
            if not self.taking_up.locked():  # (apart from the beats: they go on meanwhile)
                self.background = asyncio.create_task(self._register_again(epoch))
            return
        if error == ErrorCode.NONE:
            self.ctx.session.heartbeat_answered(sent_ms, contact_age_ms)
            if self.ctx.session.may_resume(monotonic_ms()) and not self.taking_up.locked():
                self.background = asyncio.create_task(self._take_up_session())

    async def _register_again(self, epoch: int) -> None:
        async with self.taking_up:
            if epoch != self.broker_epoch:
                return
            log.warning("broker %d: the controller has a newer incarnation of it, or forgot it; registering again",
                        self.ctx.broker_id)
            try:
                await self._register()
            except Exception as e:  # the next heartbeat tries again
                log.warning("broker %d: registering again failed: %s", self.ctx.broker_id, e)
                return
        await self._take_up_session()

    async def _watch_session(self) -> None:
        """Stop serving as leader the moment the session would have expired at the controller."""
        session = self.ctx.session
        while True:
            now = monotonic_ms()
            if session.check(now):
                log.warning("broker %d: no heartbeat answered for %d ms (broker.session.timeout.ms): the "
                            "controller may have fenced this broker, so it leads no partition and coordinates "
                            "no group until the controller answers again", self.ctx.broker_id,
                            now - session.renewed_from_ms)
                self.ctx.set_metadata(self.ctx.published)  # advertised without this broker
                self.releasing = asyncio.create_task(self._release_acks_waits())  # kept: not collected mid-way
            expires = session.expires_at_ms()
            wait_s = (expires - now) / 1000 if expires is not None and not session.lost else self.heartbeat_interval_s
            await asyncio.sleep(max(wait_s, SESSION_RECHECK_S))

    async def _release_acks_waits(self) -> None:
        """The session lapsed: the acks=all produces waiting on the replicas this broker leads
        are answered NOT_LEADER_OR_FOLLOWER now. Their producers then ask for metadata and go to
        the leader the controller named meanwhile, instead of keeping those batches in flight here
        until their request timeout (an idempotent producer sends nothing else to that partition
        meanwhile). Nothing is lost: what they wrote is not committed, and a retry that finds it
        committed after all is recognised as a duplicate."""
        clients = self.ctx.led_partitions()
        counts = await asyncio.gather(*(c.release_acks_waits() for c in clients), return_exceptions=True)
        released = sum(n for n in counts if isinstance(n, int))
        if released:
            log.warning("broker %d: answered %d waiting acks=all produce(s) NOT_LEADER_OR_FOLLOWER on %d "
                        "partition(s) it led", self.ctx.broker_id, released, len(clients))

    async def _take_up_session(self) -> None:
        """After the session was lost: once the controller answered again, serve again, with
        metadata asked for after that answer (what it decided meanwhile: new leaders elsewhere)."""
        session = self.ctx.session
        if not session.may_resume(monotonic_ms()):
            return
        async with self.taking_up:
            if not session.may_resume(monotonic_ms()):
                return
            try:
                image = await self.ctx.controller.wait_for_metadata(-1, 0)
            except Exception as e:
                log.info("broker %d: no fresh metadata yet (%s); still fenced", self.ctx.broker_id, e)
                return
            if not session.resumed(monotonic_ms()):
                return
            self.ctx.set_metadata(image)
            log.warning("broker %d: the controller answers again: serving as leader of what it leads now",
                        self.ctx.broker_id)
            if self.watcher is not None:  # its long poll may hang on a connection the cut broke
                self.watcher.cancel()
                self.watcher = asyncio.create_task(follow_metadata(self.ctx))

    # ---- the metadata quorum's voter (combined voters: controller.quorum.voters) -------------------
    async def _run_voter(self) -> None:
        """Run this broker's voter if controller.quorum.voters names it, until the gateway stops."""
        voters = combined_voters(self.config)
        if self.ctx.broker_id not in voters:
            return
        finder = node = None
        try:
            node = build_voter(self.config, self.ctx.broker_id, voters, None, self.voter_addresses.get)
            finder = asyncio.create_task(self._find_voters(voters))
            self.ctx.quorum = node
            await node.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            # the voter's disk failed, or its state is not what the quorum says (QuorumStateError),
            # or its voter set changed: it must not vote on from memory. Stop this broker's
            # process, as Kafka halts on a metadata log failure; Ray starts the gateway again
            # from what is on disk (and a voter set that changed keeps it from starting: said here)
            log.critical("broker %d: its voter of the metadata quorum failed; the gateway stops",
                         self.ctx.broker_id, exc_info=True)
            os._exit(1)
        finally:
            if finder is not None:
                finder.cancel()
            self.ctx.quorum = None
            if node is not None:
                node.stop()

    async def _find_voters(self, voters: tuple[int, ...]) -> None:
        """Where the other voters listen: as their gateways say (asked over Ray, so the quorum can form
        before any metadata exists), then as the metadata says once it names them (a broker that
        returned elsewhere)."""
        while True:
            for broker_id in voters:
                broker = self.ctx.metadata.brokers.get(broker_id) if self.ctx.metadata else None
                if broker is not None:
                    self.voter_addresses[broker_id] = (broker.host, broker.port)
                elif broker_id not in self.voter_addresses and broker_id != self.ctx.broker_id:
                    try:
                        gateway = await asyncio.to_thread(ray.get_actor, names.gateway_name(broker_id),
                                                          namespace=names.NAMESPACE)
                        endpoint = await asyncio.wait_for(gateway.inter_broker_endpoint.remote(), VOTER_LOOKUP_TIMEOUT_S)
                    except Exception as e:  # not started yet, or restarting
                        log.debug("voter %d not found yet: %s", broker_id, e)
                        continue
                    if endpoint is not None:
                        self.voter_addresses[broker_id] = tuple(endpoint)
            missing = set(voters) - set(self.voter_addresses) - {self.ctx.broker_id}
            await asyncio.sleep(VOTERS_POLL_S if missing else VOTERS_REFRESH_S)

    def node_id(self) -> str:
        """The Ray node this broker runs on (a restarted cluster's brokers are on new nodes)."""
        return ray.get_runtime_context().get_node_id()

    def inter_broker_endpoint(self) -> tuple[str, int] | None:
        """Where this broker's inter-broker listener is advertised, once it listens."""
        return self.endpoint

    def led_partition_sizes(self) -> dict[tuple[str, int], int]:
        """Bytes on disk of each partition this broker leads: the balancer's load samples."""
        return led_partition_sizes(self.ctx)

    def quorum_status(self):
        """This broker's voter's view (actors/controller/quorum QuorumStatus) and whether it is
        settled (quorum_shell/voter.py voter_status), or None without one."""
        return voter_status(self.ctx.quorum)

    async def propose_metadata(self, payloads: list[bytes], epoch: int | None = None) -> tuple[str, Any]:
        """The controller's records through this broker's voter (quorum_shell/voter.py propose_through)."""
        return await propose_through(self.ctx.quorum, payloads, epoch)

    def read_metadata(self, from_offset: int) -> tuple[int, bool, list[tuple[int, list[bytes]]]]:
        """The committed metadata records through this broker's voter (quorum_shell/voter.py read_through)."""
        return read_through(self.ctx.quorum, from_offset)

    async def change_raft_voters(self, op: str, voter_id: int, timeout_ms: int) -> tuple[int, str | None]:
        """AddRaftVoter/RemoveRaftVoter forwarded by another broker to this one, whose voter leads
        (handlers/raft_voters.py): (error code, message)."""
        if self.ctx.quorum is None:
            return 6, f"broker {self.ctx.broker_id} runs no voter of the metadata quorum"   # NOT_LEADER_OR_FOLLOWER
        error, message = await self.ctx.quorum.change_voters(op, voter_id, timeout_ms)
        return int(error), message

    async def until_stopped(self) -> None:
        """Returns when the gateway stops; raises in the caller if it dies (the controller's cue to
        have the restarted gateway serve again)."""
        await self.stopped.wait()

    async def stop(self) -> None:
        self.stopped.set()
        for task in (self.watcher, self.heartbeats, self.session_watch, self.background, self.voter,
                     *self.in_flight):
            if task:
                task.cancel()
        for server in self.servers.values():
            server.close()
