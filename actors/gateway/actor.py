"""The gateway's Ray shell: an asyncio TCP server speaking Kafka, inside an async Ray actor.

One gateway per Ray node; it registers itself with the controller as that node's broker and
keeps its metadata image fresh by long-polling the controller.
"""
from __future__ import annotations

import asyncio
import logging

import ray

from actors.controller.core import BrokerInfo
from cluster.config import listener_address
from actors.gateway.connection import serve_connection
from actors.gateway.context import GatewayContext, RayController
from actors.gateway.dispatch import Dispatcher
from actors.gateway.handlers import ROUTES

log = logging.getLogger("kray.gateway")
METADATA_POLL_S = 10.0
LISTEN_BACKLOG = 1024


class GatewayActor:
    def __init__(self, broker_config: dict, broker_id: int, controller):
        logging.basicConfig(level=logging.INFO)
        self.config = broker_config
        self.ctx = GatewayContext(broker_id, broker_config, RayController(controller))
        self.dispatch = Dispatcher(self.ctx, ROUTES)
        self.ctx.advertised = self.dispatch.advertised()
        self.controller = controller
        self.server: asyncio.AbstractServer | None = None
        self.watcher: asyncio.Task | None = None

    async def start(self) -> tuple[str, int]:
        host, port = listener_address(self.config)
        self.server = await asyncio.start_server(self._serve, host, port, backlog=LISTEN_BACKLOG, reuse_address=True)
        port = self.server.sockets[0].getsockname()[1]
        node_id = ray.get_runtime_context().get_node_id()
        image = await self.controller.register_broker.remote(BrokerInfo(self.ctx.broker_id, host, port, None, node_id))
        self.ctx.set_metadata(image)
        self.watcher = asyncio.create_task(self._watch_metadata())
        return host, port

    async def ready(self) -> bool:
        return self.server is not None

    async def stop(self) -> None:
        if self.watcher:
            self.watcher.cancel()
        if self.server:
            self.server.close()

    async def _serve(self, reader, writer) -> None:
        await serve_connection(reader, writer, self.dispatch,
                               frame_bytes_max=int(self.config["socket.request.max.bytes"]),
                               idle_timeout_s=int(self.config["connections.max.idle.ms"]) / 1000)

    async def _watch_metadata(self) -> None:
        while True:
            try:
                image = await self.ctx.controller.wait_for_metadata(self.ctx.metadata.version, METADATA_POLL_S)
                if image.version > self.ctx.metadata.version:
                    self.ctx.set_metadata(image)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the controller is restarting: try again shortly
                log.warning("metadata refresh failed: %s", e)
                await asyncio.sleep(1.0)
