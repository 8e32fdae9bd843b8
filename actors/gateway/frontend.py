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
from actors.gateway.connection_gate import REJECTED, ConnectionGate
from actors.security.tls import TLS_HANDSHAKE_TIMEOUT_S

log = logging.getLogger("kray.gateway")
LISTEN_BACKLOG = 1024
METADATA_POLL_S = 10.0


async def start_frontend(ctx, host: str | None, port: int, routes=ROUTES, security=None, listener: str = "",
                         protected: bool = False) -> asyncio.AbstractServer:
    """Listen on host:port (host None: every interface). `security` is the listener's
    ListenerSecurity (TLS context, SASL settings), None for a PLAINTEXT front end without one.
    `listener` names it; `protected`: it is the inter-broker listener of a broker that has others
    (exempt from max.connections and max.connection.creation.rate, as on Kafka)."""
    dispatch = Dispatcher(ctx, routes)
    ctx.advertised = dispatch.advertised()
    frame_bytes_max = int(ctx.config["socket.request.max.bytes"])
    idle_timeout_s = int(ctx.config["connections.max.idle.ms"]) / 1000
    gate = getattr(ctx, "connection_gate", None)
    if gate is None:
        gate = ctx.connection_gate = ConnectionGate(ctx)

    async def serve(reader, writer):
        peer = writer.get_extra_info("peername")
        writer.transport.pause_reading()  # (nothing is read while the listener decides)
        verdict = await gate.accept(listener, peer, protected)
        if verdict == REJECTED:  # its address holds its max.connections.per.ip
            writer.transport.abort()
            return
        if verdict:  # its address is over its connection_creation_rate: not served, closed after the wait
            await asyncio.sleep(verdict / 1000)
            writer.transport.abort()
            return
        try:
            writer.transport.resume_reading()
            tcp_backoff.cap(writer.get_extra_info("socket"))  # resumes within ~1 s of a network cut's heal
            await serve_connection(reader, writer, dispatch, frame_bytes_max=frame_bytes_max,
                                   idle_timeout_s=idle_timeout_s, security=security,
                                   credentials=getattr(ctx, "scram_credentials", None))
        finally:
            gate.release(peer)

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
