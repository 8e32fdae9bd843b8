"""The gateway's Ray shell: an asyncio TCP server speaking Kafka, inside an async Ray actor.

One gateway per Ray node: it is that node's broker. The controller starts it (see
actors/controller/nodes.py for broker ids); it registers itself and keeps its metadata image
fresh by long-polling the controller, and heartbeats so that the controller knows it is alive.
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
from cluster.config import listener_address
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
        self.server: asyncio.AbstractServer | None = None
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
        host, port = listener_address(self.config)
        port = port if self.port is None else self.port
        self.ctx.set_metadata(await self.ctx.controller.wait_for_metadata(-1, 0))  # before the first client
        if self.server is None:  # a retried start keeps the socket it already bound
            self.server = await start_frontend(self.ctx, host, port)
        port = self.server.sockets[0].getsockname()[1]
        node_id = ray.get_runtime_context().get_node_id()
        if host in ANY_ADDRESS:  # listening on every interface: advertise the node's own address
            host = ray.util.get_node_ip_address()
        # follow the metadata before registering: registration publishes this broker at once, but
        # answers only after the partitions it leads listen (seconds, when logs recover), and
        # clients may already connect; they must not see a cluster without this broker meanwhile
        if self.watcher is None:
            self.watcher = asyncio.create_task(follow_metadata(self.ctx))
        self.info = BrokerInfo(self.ctx.broker_id, host, port, None, node_id)
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
        if self.server:
            self.server.close()
