"""The gateway's Ray shell: an asyncio TCP server speaking Kafka, inside an async Ray actor.

One gateway per Ray node: it is that node's broker. The controller starts it (see
actors/controller/nodes.py for broker ids); it registers itself and keeps its metadata image
fresh by long-polling the controller, and heartbeats so that the controller knows it is alive.

It opens one front end per entry of `listeners` (Kafka's syntax; TLS and SASL per listener, see
actors/gateway/security/settings.py) and registers every advertised listener's address, so that
Metadata answers a client with the addresses of the listener it came in on. The inter-broker
listener is the broker's primary address (BrokerInfo.host/port: followers fetch from it). Where
several brokers share a machine, a node's port (its `kray-port` label) sets its primary listener's
port, and its other listeners' configured ports move by the same offset.
"""
from __future__ import annotations

import asyncio
import logging

import ray

from actors import log_to_stderr
from actors.controller.core import BrokerInfo
from actors.gateway.context import GatewayContext, RayController
from actors.gateway.frontend import follow_metadata, start_frontend
from actors.startup import start_unless_started
from actors.gateway.security.settings import security_settings
from protocol.errors import ErrorCode

log = logging.getLogger("kray.gateway")
ANY_ADDRESS = ("0.0.0.0", "::", "")
BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT = 2000  # broker.heartbeat.interval.ms


class GatewayActor:
    def __init__(self, broker_config: dict, broker_id: int, controller, port: int | None = None):
        log_to_stderr()
        self.config = broker_config
        self.port = port  # this node's listener port, where it differs from the `listeners` config
        self.controller = controller
        self.ctx = GatewayContext(broker_id, broker_config, RayController(controller))
        self.servers: dict[str, asyncio.AbstractServer] = {}  # listener name -> its front end
        self.watcher: asyncio.Task | None = None
        self.starting: asyncio.Future | None = None
        self.info: BrokerInfo | None = None
        self.broker_epoch = -1
        self.heartbeats: asyncio.Task | None = None
        self.stopped = asyncio.Event()

    async def start(self) -> tuple[str, int]:
        self.starting = start_unless_started(self.starting, self._start)
        return await asyncio.shield(self.starting)

    async def _start(self) -> tuple[str, int]:
        settings = security_settings(self.config)
        listeners, primary = settings.listeners, settings.primary
        # a node's own port (several brokers on one machine) moves every configured port alike
        offset = self.port - primary.port if self.port is not None and primary.port > 0 else 0
        self.ctx.set_metadata(await self.ctx.controller.wait_for_metadata(-1, 0))  # before the first client
        for listener in listeners.listeners:
            if listener.name in self.servers:  # a retried start keeps the sockets it already bound
                continue
            if listener.name == primary.name and self.port is not None:
                port = self.port
            else:
                port = listener.port + offset if listener.port else 0
            host = None if listener.binds_every_interface and listener.host != "0.0.0.0" else listener.host
            self.servers[listener.name] = await start_frontend(self.ctx, host, port,
                                                               security=settings.by_listener[listener.name])
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
        node_id = ray.get_runtime_context().get_node_id()
        # follow the metadata before registering: registration publishes this broker at once, but
        # answers only after the partitions it leads listen (seconds, when logs recover), and
        # clients may already connect; they must not see a cluster without this broker meanwhile
        if self.watcher is None:
            self.watcher = asyncio.create_task(follow_metadata(self.ctx))
        self.info = BrokerInfo(self.ctx.broker_id, host, port, None, node_id, endpoints)
        await self._register()
        if self.heartbeats is None:
            self.heartbeats = asyncio.create_task(self._heartbeat())
        image = await self.controller.broker_ready.remote(self.ctx.broker_id)  # its replicas listen
        if image.version > self.ctx.metadata.version:
            self.ctx.set_metadata(image)
        return host, port

    async def _register(self) -> None:
        image, self.broker_epoch = await self.controller.register_broker.remote(
            self.info, ray.get_runtime_context().current_actor)
        if image.version > self.ctx.metadata.version:
            self.ctx.set_metadata(image)

    async def _heartbeat(self) -> None:
        """Tell the controller this broker is alive, every broker.heartbeat.interval.ms; a broker
        the controller no longer knows under this epoch (it was declared dead and came back)
        registers again."""
        interval_s = int(self.config.get("broker.heartbeat.interval.ms", BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT)) / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                error = await self.ctx.controller.heartbeat(self.ctx.broker_id, self.broker_epoch)
                if error == ErrorCode.STALE_BROKER_EPOCH:
                    log.warning("broker %d: the controller has a newer incarnation of it; registering again",
                                self.ctx.broker_id)
                    await self._register()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("broker %d: heartbeat failed: %s", self.ctx.broker_id, e)

    async def until_stopped(self) -> None:
        """Returns when the gateway stops; raises in the caller if it dies (the controller's cue to
        have the restarted gateway serve again)."""
        await self.stopped.wait()

    async def stop(self) -> None:
        self.stopped.set()
        for task in (self.watcher, self.heartbeats):
            if task:
                task.cancel()
        for server in self.servers.values():
            server.close()
