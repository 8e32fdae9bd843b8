"""A Kafka front end: a TCP listener whose connections run one dispatcher and its handlers: one per
listener of the node's gateway, which serves clients and the other brokers (followers' fetches,
share-state requests) on them. Nothing else in Kray listens on TCP.
"""
from __future__ import annotations

import asyncio
import logging

from actors import tcp_backoff
from actors.gateway.connection import serve_connection
from actors.gateway.dispatch import Dispatcher
from actors.gateway.handlers import ROUTES
from actors.gateway.quota_throttles import connection_throttle_ms
from actors.security.tls import TLS_HANDSHAKE_TIMEOUT_S

log = logging.getLogger("kray.gateway")
LISTEN_BACKLOG = 1024
METADATA_POLL_S = 10.0


async def start_frontend(ctx, host: str | None, port: int, routes=ROUTES, security=None) -> asyncio.AbstractServer:
    """Listen on host:port (host None: every interface). `security` is the listener's
    ListenerSecurity (TLS context, SASL settings), None for a PLAINTEXT front end without one."""
    dispatch = Dispatcher(ctx, routes)
    ctx.advertised = dispatch.advertised()
    frame_bytes_max = int(ctx.config["socket.request.max.bytes"])
    idle_timeout_s = int(ctx.config["connections.max.idle.ms"]) / 1000

    async def serve(reader, writer):
        throttle_ms = connection_throttle_ms(ctx, writer.get_extra_info("peername"))
        if throttle_ms:  # its address is over its connection_creation_rate: not served, closed after the wait
            writer.transport.pause_reading()
            await asyncio.sleep(throttle_ms / 1000)
            writer.transport.abort()
            return
        tcp_backoff.cap(writer.get_extra_info("socket"))  # resumes within ~1 s of a network cut's heal
        await serve_connection(reader, writer, dispatch, frame_bytes_max=frame_bytes_max, idle_timeout_s=idle_timeout_s,
                               security=security, credentials=getattr(ctx, "scram_credentials", None))

    ssl_context = security.ssl_context if security is not None else None
    return await asyncio.start_server(serve, host, port, backlog=LISTEN_BACKLOG, reuse_address=True, ssl=ssl_context,
                                      ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if ssl_context else None)


async def follow_metadata(ctx) -> None:
    """Keep ctx.metadata current by long-polling the controller (returns at once on a change)."""
    while True:
        try:
            image = await ctx.controller.wait_for_metadata(ctx.metadata.version, METADATA_POLL_S)
            if image.version > ctx.metadata.version:
                ctx.set_metadata(image)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the controller is restarting: try again shortly
            log.warning("metadata refresh failed: %s", e)
            await asyncio.sleep(1.0)
