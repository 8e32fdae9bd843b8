"""The quorum's outgoing half: one PipelinedConnection per peer voter to its inter-broker listener
(TLS and SASL as actors/security/inter_broker.py's `broker_transport` says), carrying the
core's requests as Kafka's Vote / BeginQuorumEpoch / EndQuorumEpoch / Fetch(__cluster_metadata-0).

Every request has a timeout (controller.quorum.request.timeout.ms). A connection whose request
failed or timed out is closed and a fresh one opened for the next request: after a network cut
heals, a socket stuck in TCP retransmission backoff must not hold the quorum up (new SYN, at once;
actors/tcp_backoff.py caps the backoff of the ones that stay). A failure answers None: the core
retries on its own timers.

Peers' addresses come from `resolve(node_id) -> (host, port) | None` (the cluster metadata's
inter-broker endpoints), asked at every connect, so a broker that moved is found.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from protocol import messages as m
from protocol.headers import RequestHeader, encode_request, response_header_version
from protocol.primitives import read_tagged_fields

from actors.controller.quorum import (
    BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, Message, VoteRequest,
)
from actors.pipelined import PipelinedConnection

from . import wire

log = logging.getLogger("kray.quorum")
CLIENT_ID = "kray-quorum"
RESPONSE_BYTES_MAX = wire.FETCH_MAX_BYTES + 1024 * 1024
VOTE_VERSION, VOTE_PRE_VOTE_VERSION, BEGIN_VERSION, END_VERSION, FETCH_VERSION = 1, 2, 1, 1, 16


class PeerTransport:
    def __init__(self, node_id: int, cluster_id: str | None, resolve: Callable[[int], tuple[str, int] | None], *,
                 request_timeout_ms: int, ssl_context=None,
                 broker_login: Callable[[PipelinedConnection], Awaitable[None]] | None = None):
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.resolve = resolve
        self.request_timeout_s = request_timeout_ms / 1000
        self.ssl_context = ssl_context
        self.broker_login = broker_login
        self._connections: dict[int, PipelinedConnection] = {}
        self._opening: dict[int, asyncio.Lock] = {}

    def _encode(self, dst: int, msg: Message) -> tuple[Any, int, Callable[[Any], Message]]:
        """(wire request, version, response -> core message)."""
        if isinstance(msg, VoteRequest):
            version = VOTE_PRE_VOTE_VERSION if msg.pre_vote else VOTE_VERSION
            return (wire.vote_request_to_wire(msg, dst=dst, cluster_id=self.cluster_id, version=version), version,
                    lambda r: wire.vote_response_from_wire(r, src=dst, request=msg))
        if isinstance(msg, BeginQuorumEpochRequest):
            return (wire.begin_request_to_wire(msg, dst=dst, cluster_id=self.cluster_id, version=BEGIN_VERSION),
                    BEGIN_VERSION, lambda r: wire.begin_response_from_wire(r, src=dst, request=msg))
        if isinstance(msg, EndQuorumEpochRequest):
            return (wire.end_request_to_wire(msg, cluster_id=self.cluster_id, version=END_VERSION), END_VERSION,
                    lambda r: wire.end_response_from_wire(r, src=dst, request=msg))
        if isinstance(msg, FetchRequest):
            return (wire.fetch_request_to_wire(msg, cluster_id=self.cluster_id, version=FETCH_VERSION),
                    FETCH_VERSION, lambda r: wire.fetch_response_from_wire(r, src=dst, request=msg))
        raise TypeError(f"not a quorum request: {msg!r}")

    async def request(self, dst: int, msg: Message) -> Message | None:
        request, version, to_core = self._encode(dst, msg)
        response_class = {52: m.VoteResponse, 53: m.BeginQuorumEpochResponse, 54: m.EndQuorumEpochResponse,
                          1: m.FetchResponse}[request.API_KEY]
        # a held Fetch answers after up to its max wait: the timeout counts from then
        timeout_s = self.request_timeout_s + (msg.max_wait_ms / 1000 if isinstance(msg, FetchRequest) else 0)
        connection = None
        try:
            connection = await asyncio.wait_for(self._connection(dst), self.request_timeout_s)
            if connection is None:
                return None
            body = await connection.call(lambda correlation_id: [encode_request(
                RequestHeader(request.API_KEY, version, correlation_id, CLIENT_ID), request.encode(version))],
                timeout_s)
            offset = read_tagged_fields(body, 0)[1] if response_header_version(request.API_KEY, version) == 1 else 0
            return to_core(response_class.decode(body[offset:], version))
        except (asyncio.TimeoutError, OSError, ConnectionError, wire.BadQuorumMessage, ValueError) as e:
            log.info("quorum %s to %d failed (%s): the next one opens a new connection", type(msg).__name__, dst,
                     type(e).__name__)
            self._drop(dst, connection)
            return None

    async def _connection(self, dst: int) -> PipelinedConnection | None:
        connection = self._connections.get(dst)
        if connection is not None and connection.usable:
            return connection
        async with self._opening.setdefault(dst, asyncio.Lock()):
            connection = self._connections.get(dst)
            if connection is not None and connection.usable:
                return connection
            address = self.resolve(dst)
            if address is None:
                return None
            connection = await PipelinedConnection.open_tcp(address[0], address[1], timeout_s=self.request_timeout_s,
                                                            response_bytes_max=RESPONSE_BYTES_MAX,
                                                            ssl_context=self.ssl_context)
            if self.broker_login is not None:
                try:
                    await self.broker_login(connection)
                except BaseException:
                    connection.close()
                    raise
            self._connections[dst] = connection
            return connection

    def _drop(self, dst: int, connection: PipelinedConnection | None) -> None:
        current = self._connections.get(dst)
        if current is not None and (connection is None or current is connection):
            del self._connections[dst]
            current.close()

    def close(self) -> None:
        for dst in list(self._connections):
            self._drop(dst, None)
