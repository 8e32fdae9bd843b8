"""A share-partition leader's connection to a share coordinator's state listener: Kafka's
share-state requests over one kept-open, pipelined connection (actors/pipelined.py), each
waiting only for its own answer. Any failure closes the connection and fails every request
waiting on it; the caller decides what to do (the leaders answer with a retriable error and
resend whole state). A connection logs in as the broker before its first request (the state
listener serves brokers only: actors/gateway/security/inter_broker.py).
"""
from __future__ import annotations

from typing import Any

from actors.gateway.security.inter_broker import login
from actors.pipelined import ConnectionClosed, PipelinedConnection
from protocol.apis import API_BY_KEY
from protocol.headers import RequestHeader, encode_request, response_header_version
from protocol.primitives import read_tagged_fields

RESPONSE_BYTES_MAX = 64 * 1024 * 1024
CLIENT_ID = "kray-share-partition-leader"

StateConnectionError = ConnectionClosed


class StateConnection:
    def __init__(self, connection: PipelinedConnection):
        self.connection = connection

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float, config: dict) -> "StateConnection":
        """Connect and log in as the broker with the secret in `config` (the broker config)."""
        connection = await PipelinedConnection.open_tcp(host, port, timeout_s=timeout_s,
                                                        response_bytes_max=RESPONSE_BYTES_MAX)
        try:
            await login(connection, config, timeout_s)
        except BaseException:
            connection.close()
            raise
        return cls(connection)

    @property
    def usable(self) -> bool:
        return self.connection.usable

    async def call(self, request: Any, version: int, timeout_s: float) -> Any:
        api_key = request.API_KEY
        body = await self.connection.call(lambda correlation_id: [encode_request(
            RequestHeader(api_key, version, correlation_id, CLIENT_ID), request.encode(version))], timeout_s)
        offset = 0  # the body follows the correlation id, and in flexible versions tagged fields
        if response_header_version(api_key, version) == 1:
            offset = read_tagged_fields(body, 0)[1]
        return API_BY_KEY[api_key].response.decode(body[offset:], version)

    def close(self) -> None:
        self.connection.close()
