"""A share-partition leader's connection to a share coordinator's state listener: Kafka requests
over one kept-open connection, pipelined (each request waits only for its own answer, matched by
correlation id). Any failure closes the connection and fails every request waiting on it; the
caller decides what to do (the leaders answer with a retriable error and resend whole state).
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Any

from protocol.apis import API_BY_KEY
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader, decode_response_header, encode_request

RESPONSE_BYTES_MAX = 64 * 1024 * 1024
READ_CHUNK_BYTES = 256 * 1024
CLIENT_ID = "kray-share-partition-leader"


class StateConnectionError(ConnectionError):
    pass


class StateConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.correlation_ids = itertools.count(1)
        self.waiting: dict[int, tuple[asyncio.Future, int, int]] = {}  # id -> (future, api key, version)
        self.failure: Exception | None = None
        self.receiver = asyncio.ensure_future(self._receive())

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float) -> "StateConnection":
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        return cls(reader, writer)

    @property
    def usable(self) -> bool:
        return self.failure is None

    async def call(self, request: Any, version: int, timeout_s: float) -> Any:
        if self.failure is not None:
            raise StateConnectionError(f"connection closed: {self.failure}")
        correlation_id = next(self.correlation_ids)
        future = asyncio.get_running_loop().create_future()
        self.waiting[correlation_id] = (future, request.API_KEY, version)
        self.writer.write(encode_request(RequestHeader(request.API_KEY, version, correlation_id, CLIENT_ID),
                                         request.encode(version)))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            self._fail(StateConnectionError(f"no answer within {timeout_s} s"))
            raise StateConnectionError(f"no answer within {timeout_s} s") from None

    async def _receive(self) -> None:
        decoder = FrameDecoder(RESPONSE_BYTES_MAX)
        try:
            while True:
                data = await self.reader.read(READ_CHUNK_BYTES)
                if not data:
                    raise StateConnectionError("the coordinator closed the connection")
                for body in decoder.feed(data):
                    body = memoryview(body)
                    correlation_id = int.from_bytes(body[:4], "big", signed=True)
                    future, api_key, version = self.waiting.pop(correlation_id, (None, 0, 0))
                    if future is None:
                        raise StateConnectionError(f"an answer to unknown request {correlation_id}")
                    _, offset = decode_response_header(body, api_key, version)
                    if not future.done():
                        future.set_result(API_BY_KEY[api_key].response.decode(body[offset:], version))
        except asyncio.CancelledError:
            self._fail(StateConnectionError("closed"))
        except Exception as e:
            self._fail(e)

    def _fail(self, error: Exception) -> None:
        if self.failure is None:
            self.failure = error
        for future, _, _ in self.waiting.values():
            if not future.done():
                future.set_exception(StateConnectionError(str(error)))
        self.waiting.clear()
        self.writer.close()

    def close(self) -> None:
        self.receiver.cancel()
        self._fail(StateConnectionError("closed"))
