"""Splitting a byte stream into Kafka frames (int32 big-endian size prefix, then that many bytes)."""

from collections import deque

from protocol.errors import FrameTooLarge, MalformedFrame
from protocol.primitives import INT32

SIZE_PREFIX_BYTES = 4


def frame(body) -> bytes:
    """Prefix ``body`` (bytes-like) with its int32 size."""
    return INT32.pack(len(body)) + bytes(body)


class FrameDecoder:
    """Incremental frame splitter.

    ``feed`` returns the complete frame bodies seen so far, size prefix stripped: a zero-copy memoryview when a body
    lies inside one fed chunk, else ``bytes`` joined once from the chunks holding it. Buffered data is kept as a list
    of chunks, so a large frame arriving in many pieces is copied only once. The size is checked as soon as its 4
    bytes are in: ``FrameTooLarge`` above ``frame_bytes_max``, ``MalformedFrame`` if negative. After either error
    the stream is unusable (frames already completed in that ``feed`` call are not returned).
    Fed data is referenced, not copied: pass immutable ``bytes`` (other buffer types are copied once).
    """

    def __init__(self, frame_bytes_max: int):
        self.frame_bytes_max = frame_bytes_max
        self._chunks: deque[memoryview] = deque()
        self._buffered_bytes = 0
        self._head_offset = 0  # bytes of _chunks[0] already consumed
        self._body_bytes: int | None = None  # size of the frame being read, once its prefix is in

    def feed(self, data) -> list:
        if type(data) is not bytes:
            data = bytes(data)
        if data:
            self._chunks.append(memoryview(data))
            self._buffered_bytes += len(data)
        bodies = []
        while True:
            if self._body_bytes is None:
                if self._buffered_bytes < SIZE_PREFIX_BYTES:
                    break
                size = INT32.unpack(self._take(SIZE_PREFIX_BYTES))[0]
                if size < 0:
                    raise MalformedFrame(f"negative frame size {size}")
                if size > self.frame_bytes_max:
                    raise FrameTooLarge(size, self.frame_bytes_max)
                self._body_bytes = size
            if self._buffered_bytes < self._body_bytes:
                break
            bodies.append(self._take(self._body_bytes))
            self._body_bytes = None
        return bodies

    def _take(self, n: int):
        """Remove and return the next n buffered bytes (n <= buffered)."""
        if n == 0:
            return b""
        self._buffered_bytes -= n
        head, start = self._chunks[0], self._head_offset
        if len(head) - start >= n:
            self._advance(n)
            return head[start:start + n]
        parts = []
        while n:
            head, start = self._chunks[0], self._head_offset
            k = min(n, len(head) - start)
            parts.append(head[start:start + k])
            self._advance(k)
            n -= k
        return b"".join(parts)

    def _advance(self, n: int) -> None:
        self._head_offset += n
        if self._head_offset == len(self._chunks[0]):
            self._chunks.popleft()
            self._head_offset = 0
