"""The gateway's Ray shell: an asyncio TCP server speaking Kafka, inside an async Ray actor.

One gateway per Ray node: it is that node's broker. The controller starts it (see
actors/controller/nodes.py for broker ids); it registers itself and keeps its metadata image
fresh by long-polling the controller.
"""
from __future__ import annotations

import asyncio

import ray

from actors.controller.core import BrokerInfo
from actors.gateway.context import GatewayContext, RayController
from actors.gateway.frontend import follow_metadata, start_frontend
from actors.startup import start_unless_started
from cluster.config import listener_address

ANY_ADDRESS = ("0.0.0.0", "::", "")


class GatewayActor:
    def __init__(self, broker_config: dict, broker_id: int, controller, port: int | None = None):
        self.config = broker_config
        self.port = port  # this node's listener port, where it differs from the `listeners` config
        self.controller = controller
        self.ctx = GatewayContext(broker_id, broker_config, RayController(controller))
        self.server: asyncio.AbstractServer | None = None
        self.watcher: asyncio.Task | None = None
        self.starting: asyncio.Future | None = None
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
        image = await self.controller.register_broker.remote(BrokerInfo(self.ctx.broker_id, host, port, None, node_id),
                                                             ray.get_runtime_context().current_actor)
        if image.version > self.ctx.metadata.version:
            self.ctx.set_metadata(image)
        return host, port

    async def until_stopped(self) -> None:
        """Returns when the gateway stops; raises in the caller if it dies (the controller's cue to
        have the restarted gateway serve again)."""
        await self.stopped.wait()

    async def stop(self) -> None:
        self.stopped.set()
        if self.watcher:
            self.watcher.cancel()
        if self.server:
            self.server.close()
