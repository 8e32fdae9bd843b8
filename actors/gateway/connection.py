"""One client connection: frames in, requests dispatched concurrently, responses out in order.

Kafka clients pipeline (librdkafka keeps up to 5 produce requests in flight per connection), so
requests are handled concurrently while answers leave in request order. Requests that change
state where order matters (produce, share acknowledgements, offset commits) also take effect in
request order: their handlers route and send their parts while holding the connection's turn
(`in_request_order`), one request after the other, and wait for the answers after passing the
turn on. Malformed bytes close this connection and nothing else; domain errors travel inside
responses.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Awaitable, Callable

from protocol.framing import FrameDecoder, FrameTooLarge, MalformedFrame
from protocol.errors import MalformedMessage
from actors.gateway.file_region import write_frame

log = logging.getLogger("kray.gateway")

READ_CHUNK_BYTES = 256 * 1024
INFLIGHT_REQUESTS_PER_CONNECTION_MAX = 16


class CloseConnection(Exception):
    """Raised by a handler when the only right answer is to drop the connection."""


class ClientConnection:
    """What handlers may know of the connection a request came on: an id, and cleanups to run
    when it closes (share sessions release what they hold)."""
    _ids = itertools.count(1)

    def __init__(self, peer, abort: Callable[[], None] | None = None):
        self.connection_id = next(self._ids)
        self.peer = peer
        self.on_close: list[Callable[[], Awaitable[None]]] = []
        self.turn = asyncio.Lock()  # FIFO: waiters get it in the order they asked
        self.broken: str | None = None
        self._abort = abort

    @contextlib.asynccontextmanager
    async def in_request_order(self):
        """Held while a request routes and sends what changes state: the requests of this
        connection do so one after the other, in the order they arrived."""
        async with self.turn:
            if self.broken is not None:
                raise CloseConnection(self.broken)
            yield

    def abort(self, reason: str) -> None:
        """A request's outcome is unknown (the data path failed after it may have been applied):
        close the connection at once, as a failed Kafka broker's connection closes, so that no
        later request of it is applied either. The client retries what was in flight."""
        if self.broken is None:
            self.broken = reason
            log.warning("closing connection from %s: %s", self.peer, reason)
            if self._abort is not None:
                self._abort()

    async def closed(self) -> None:
        for cleanup in self.on_close:
            try:
                await cleanup()
            except Exception:
                log.exception("cleanup after closing a connection from %s failed", self.peer)


def in_request_order(connection: ClientConnection | None):
    """`connection.in_request_order()`, or nothing where a handler is called without a connection."""
    return connection.in_request_order() if connection is not None else contextlib.nullcontext()


# A dispatcher takes one frame body and returns an awaitable of the response frame (or None: no answer).
Dispatch = Callable[[memoryview, ClientConnection], Awaitable[bytes | None]]


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dispatch: Dispatch,
                           *, frame_bytes_max: int, idle_timeout_s: float) -> None:
    peer = writer.get_extra_info("peername")
    connection = ClientConnection(peer, writer.transport.abort)
    decoder = FrameDecoder(frame_bytes_max)
    pending: asyncio.Queue[asyncio.Task | None] = asyncio.Queue(INFLIGHT_REQUESTS_PER_CONNECTION_MAX)
    responder = asyncio.create_task(_respond_in_order(pending, writer))
    try:
        while not responder.done():
            try:
                data = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES), idle_timeout_s)
            except asyncio.TimeoutError:
                log.info("closing idle connection from %s", peer)
                break
            if not data:
                break
            try:
                frames = decoder.feed(data)
            except (FrameTooLarge, MalformedFrame) as e:
                log.warning("closing connection from %s: %s", peer, e)
                break
            for body in frames:
                await pending.put(asyncio.create_task(dispatch(body, connection)))
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        if not responder.done():
            await pending.put(None)
            try:
                await responder
            except Exception:
                pass
        writer.close()
        try:
            await writer.wait_closed()
        except Exception:
            pass
        await connection.closed()


async def _respond_in_order(pending: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
    while True:
        task = await pending.get()
        if task is None:
            return
        try:
            frame = await task
        except (CloseConnection, MalformedMessage) as e:
            log.warning("closing connection from %s: %s", writer.get_extra_info("peername"), e)
            _cancel_rest(pending)
            writer.transport.abort()
            return
        except Exception:
            log.exception("unexpected error handling a request; closing the connection")
            _cancel_rest(pending)
            writer.transport.abort()
            return
        if frame is not None:
            try:
                await write_frame(writer, frame)
            except (ConnectionError, OSError) as e:
                log.warning("closing connection to %s: %s", writer.get_extra_info("peername"), e)
                _cancel_rest(pending)
                writer.transport.abort()
                return


def _cancel_rest(pending: asyncio.Queue) -> None:
    while not pending.empty():
        task = pending.get_nowait()
        if task is not None:
            task.cancel()
