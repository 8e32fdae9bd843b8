"""Kafka requests from one of Kray's actors to another broker's inter-broker listener, over one
pipelined connection (actors/pipelined.py): each request waits only for its own answer, and
requests are written in the order their callers send. `open` connects (TLS with `ssl_context`,
where the listener uses it) and logs in with `login` (where it uses SASL: see
actors/security/inter_broker.py `broker_transport`). A subclass names its client id."""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from actors.pipelined import PipelinedConnection
from protocol.apis import API_BY_KEY
from protocol.headers import RequestHeader, encode_request, response_header_version
from protocol.primitives import read_tagged_fields


class BrokerConnection:
    CLIENT_ID = "kray-broker"
    RESPONSE_BYTES_MAX = 64 * 1024 * 1024

    def __init__(self, connection: PipelinedConnection):
        self.connection = connection

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float, ssl_context=None,
                   login: Callable[[PipelinedConnection], Awaitable[None]] | None = None):
        connection = await PipelinedConnection.open_tcp(host, port, timeout_s=timeout_s,
                                                        response_bytes_max=cls.RESPONSE_BYTES_MAX,
                                                        ssl_context=ssl_context)
        if login is not None:
            try:
                await login(connection)
            except BaseException:
                connection.close()
                raise
        return cls(connection)

    @property
    def usable(self) -> bool:
        return self.connection.usable

    def send(self, request: Any, version: int, timeout_s: float) -> Awaitable[bytes]:
        """Write `request` now; an awaitable of its response body (after the header)."""
        api_key = request.API_KEY
        return self.connection.send(lambda correlation_id: [encode_request(
            RequestHeader(api_key, version, correlation_id, self.CLIENT_ID), request.encode(version))], timeout_s)

    @staticmethod
    def decode(api_key: int, version: int, body: bytes) -> Any:
        # the body follows the correlation id, and in flexible versions tagged fields
        offset = read_tagged_fields(body, 0)[1] if response_header_version(api_key, version) == 1 else 0
        return API_BY_KEY[api_key].response.decode(body[offset:], version)

    async def call(self, request: Any, version: int, timeout_s: float) -> Any:
        return self.decode(request.API_KEY, version, await self.send(request, version, timeout_s))

    def close(self) -> None:
        self.connection.close()
