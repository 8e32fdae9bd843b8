"""Kept-open, pipelined connections between Kray's own processes (the data path).

Both ends speak Kafka's framing: an int32 size, then a request whose header starts with the api
key, version and correlation id, and a response that starts with the correlation id.

- `PipelinedConnection` (client): many requests in flight on one connection; each caller waits
  only for its own answer, matched by correlation id. Any failure closes the connection and fails
  every request waiting on it; the caller decides what to do (open a new one, answer a retriable
  error).
- `serve_multiplexed` (server): every request is handled as soon as it arrives and answered as
  soon as it is done, so a long poll never holds up a produce behind it (a Kafka broker answers
  in request order; between our own processes nothing depends on that). Malformed bytes close the
  connection and nothing else.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import Awaitable, Callable

from actors import tcp_backoff
from protocol.framing import FrameDecoder, FrameTooLarge, MalformedFrame
from protocol.primitives import INT32

log = logging.getLogger("kray.pipelined")
# a fetch answer is up to max.partition.fetch.bytes (1 MiB by default): read it in few pieces
READ_CHUNK_BYTES = 1024 * 1024
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024  # SO_SNDBUF / SO_RCVBUF of data-path sockets
LARGE_CHUNK_BYTES = 64 * 1024  # a chunk this large is written as it is, not joined with others
COALESCE_BYTES_MAX = 256 * 1024  # small frames waiting to be sent together are flushed at this size


class ConnectionClosed(ConnectionError):
    pass


def widen_socket_buffers(writer: asyncio.StreamWriter) -> None:
    """Socket buffers that hold a whole record batch (the kernel caps them at net.core.wmem_max /
    rmem_max): a large frame then goes out in one send instead of being copied into the
    transport's buffer and trickled out 200 KiB at a time."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        except OSError:
            pass


class PipelinedConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response_bytes_max: int):
        self.reader, self.writer = reader, writer
        self.frames = FrameWriter(writer)
        widen_socket_buffers(writer)
        self.response_bytes_max = response_bytes_max
        self.correlation_ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future] = {}
        self.failure: Exception | None = None
        self.receiver = asyncio.ensure_future(self._receive())

    @classmethod
    async def open_unix(cls, path: str, *, timeout_s: float, response_bytes_max: int) -> "PipelinedConnection":
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path, limit=READ_CHUNK_BYTES), timeout_s)
        return cls(reader, writer, response_bytes_max)

    @classmethod
    async def open_tcp(cls, host: str, port: int, *, timeout_s: float, response_bytes_max: int,
                       ssl_context=None) -> "PipelinedConnection":
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=ssl_context, server_hostname=host if ssl_context is not None else None), timeout_s)
        tcp_backoff.cap(writer.get_extra_info("socket"))  # resumes within ~1 s of a network cut's heal
        return cls(reader, writer, response_bytes_max)

    @property
    def usable(self) -> bool:
        return self.failure is None

    async def call(self, build: Callable[[int], list], timeout_s: float | None) -> memoryview:
        """Send the frame `build(correlation_id)` returns (a list of byte chunks, size prefix
        included); return the response body after its correlation id."""
        return await self.send(build, timeout_s)

    def send(self, build: Callable[[int], list], timeout_s: float | None) -> Awaitable[memoryview]:
        """`call` in two steps: the frame is queued now, before this returns (so frames leave in
        the order their callers sent them, together at the end of the loop's turn); the answer
        is awaited from what it returns."""
        if self.failure is not None:
            raise ConnectionClosed(f"connection closed: {self.failure}")
        correlation_id = next(self.correlation_ids) & 0x7FFFFFFF
        future = asyncio.get_running_loop().create_future()
        self.waiting[correlation_id] = future
        self.frames.write(build(correlation_id))
        return self._answer(correlation_id, future, timeout_s)

    async def _answer(self, correlation_id: int, future: asyncio.Future, timeout_s: float | None) -> memoryview:
        try:
            return await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            self._fail(ConnectionClosed(f"no answer within {timeout_s} s"))
            raise ConnectionClosed(f"no answer within {timeout_s} s") from None
        except asyncio.CancelledError:
            self.waiting.pop(correlation_id, None)  # the answer, when it comes, is dropped
            raise

    async def _receive(self) -> None:
        decoder = FrameDecoder(self.response_bytes_max)
        try:
            while True:
                data = await self.reader.read(READ_CHUNK_BYTES)
                if not data:
                    raise ConnectionClosed("the peer closed the connection")
                for body in decoder.feed(data):
                    body = memoryview(body)
                    if len(body) < 4:
                        raise ConnectionClosed("a response shorter than its correlation id")
                    future = self.waiting.pop(INT32.unpack_from(body, 0)[0], None)
                    if future is not None and not future.done():
                        future.set_result(body[4:])
        except asyncio.CancelledError:
            self._fail(ConnectionClosed("closed"))
        except Exception as e:
            self._fail(e)

    def _fail(self, error: Exception) -> None:
        if self.failure is None:
            self.failure = error
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(ConnectionClosed(str(error)))
        self.waiting.clear()
        self.writer.close()

    def close(self) -> None:
        self.receiver.cancel()
        self._fail(ConnectionClosed("closed"))


class FrameWriter:
    """Writes frames to a stream, coalescing the small ones: the frames written while the event
    loop turns go out in one send (a produce to 1,000 partitions is ~500 frames per shard, and a
    send each cost the gateway a sixth of its time), flushed at the end of the turn or once
    COALESCE_BYTES_MAX are waiting. Large chunks (record batches) are not copied to be joined:
    what waits goes first, then the chunk as it is, so frames keep their order."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.pending: list = []
        self.pending_bytes = 0
        self.flush_scheduled = False

    def write(self, chunks: list) -> None:
        for chunk in chunks:
            if len(chunk) >= LARGE_CHUNK_BYTES:
                self.flush()
                self.writer.write(chunk)
            else:
                self.pending.append(chunk)
                self.pending_bytes += len(chunk)
        if self.pending_bytes >= COALESCE_BYTES_MAX:
            self.flush()
        elif self.pending and not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self.flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        if self.pending:
            data = self.pending[0] if len(self.pending) == 1 else b"".join(self.pending)
            self.pending.clear()
            self.pending_bytes = 0
            if not self.writer.is_closing():
                self.writer.write(data)

    async def drain(self) -> None:
        """Wait while the transport's buffer is over its high-water mark (what waits here goes
        out at the end of the turn: at most COALESCE_BYTES_MAX)."""
        await self.writer.drain()


# A handler takes one request frame body and returns the response frame (a list of byte chunks,
# size prefix included), or raises to close the connection.
Handle = Callable[[memoryview], Awaitable[list]]


async def serve_multiplexed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handle: Handle, *,
                            frame_bytes_max: int, inflight_requests_max: int) -> None:
    widen_socket_buffers(writer)
    out = FrameWriter(writer)
    decoder = FrameDecoder(frame_bytes_max)
    slots = asyncio.Semaphore(inflight_requests_max)
    tasks: set[asyncio.Task] = set()
    broken = asyncio.Event()

    async def answer(body: memoryview) -> None:
        try:
            frame = await handle(body)
            out.write(frame)
            await out.drain()
        except ConnectionError:
            broken.set()
        except Exception as e:
            log.warning("closing an internal connection: %s", e)
            broken.set()
            writer.transport.abort()
        finally:
            slots.release()

    try:
        while not broken.is_set():
            data = await reader.read(READ_CHUNK_BYTES)
            if not data:
                break
            try:
                frames = decoder.feed(data)
            except (FrameTooLarge, MalformedFrame) as e:
                log.warning("closing an internal connection: %s", e)
                break
            for body in frames:
                await slots.acquire()
                task = asyncio.ensure_future(answer(memoryview(body)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        # requests already started run to their end (a share fetch may have acquired records by
        # now: its leader keeps them locked until released or expired); their answers are dropped
        writer.close()
