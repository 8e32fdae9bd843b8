"""Record bytes that a Fetch response sends straight from a segment file.

A partition replica on this node answers a fetch with where its records lie (a segment file, a
position, a size; see PartitionCore.fetch_slice); the gateway opens that file and, when the
response's turn comes on the client connection, lets the kernel copy the bytes to the socket
(sendfile), as Kafka does. The bytes never pass through Python: not in the partition replica, not
over the Unix socket, not in the gateway.

The region is opened as soon as it is known, so a segment deleted afterwards (retention) is
still read whole from its open file. Batches are never rewritten in place; if the file was cut
below the region before it was sent (a truncation), the frame can't be completed and the
connection is closed: the client reconnects and fetches again.

Over TLS the kernel cannot copy file bytes to the socket (the bytes must be encrypted in user
space; Python has no kernel-TLS offload), so the region is read in TLS_CHUNK_BYTES pieces with
pread and written through the TLS transport, waiting for it to drain between pieces: linear in the
region's size, with at most a piece or two buffered per connection. (asyncio's own sendfile
fallback would swap the connection's protocol while it runs; pipelined requests arriving
meanwhile must not meet that.)
"""
from __future__ import annotations

import asyncio
import os

TLS_CHUNK_BYTES = 256 * 1024


class FileRegion:
    __slots__ = ("file", "position", "size_bytes")

    def __init__(self, file, position: int, size_bytes: int):
        self.file, self.position, self.size_bytes = file, position, size_bytes

    @classmethod
    def open(cls, path: str, position: int, size_bytes: int) -> "FileRegion":
        """Raises FileNotFoundError when the segment is already gone."""
        return cls(open(path, "rb", buffering=0), position, size_bytes)

    def __len__(self) -> int:
        return self.size_bytes

    async def send(self, transport: asyncio.Transport) -> None:
        """Write the region to ``transport`` (after what is already buffered), then close it."""
        try:
            sent = await asyncio.get_running_loop().sendfile(transport, self.file, self.position, self.size_bytes)
        finally:
            self.close()
        if sent != self.size_bytes:
            raise ConnectionError(f"{self.file.name}: sent {sent} of {self.size_bytes} bytes; the segment shrank")

    async def send_through(self, writer: asyncio.StreamWriter) -> None:
        """Write the region by reading it (a TLS transport), piece by piece, then close it."""
        try:
            fd, position, remaining = self.file.fileno(), self.position, self.size_bytes
            while remaining:
                data = os.pread(fd, min(remaining, TLS_CHUNK_BYTES), position)
                if not data:
                    raise ConnectionError(f"{self.file.name}: sent {self.size_bytes - remaining} of "
                                          f"{self.size_bytes} bytes; the segment shrank")
                writer.write(data)
                position += len(data)
                remaining -= len(data)
                await writer.drain()
        finally:
            self.close()

    def close(self) -> None:
        self.file.close()

    def __repr__(self) -> str:
        return f"FileRegion({self.file.name!r}, {self.position}, {self.size_bytes})"


async def write_frame(writer: asyncio.StreamWriter, frame) -> None:
    """Write a response frame: bytes, or a list of bytes-like chunks and FileRegions."""
    if not isinstance(frame, list):
        writer.write(frame)
    else:
        tls = writer.get_extra_info("ssl_object") is not None
        pending = []
        try:
            for i, chunk in enumerate(frame):
                if isinstance(chunk, FileRegion):
                    if pending:
                        writer.write(b"".join(pending))
                        pending = []
                    if tls:
                        await chunk.send_through(writer)
                    else:
                        await chunk.send(writer.transport)
                else:
                    pending.append(chunk)
        except BaseException:
            for chunk in frame[i + 1:]:
                if isinstance(chunk, FileRegion):
                    chunk.close()
            raise
        if pending:
            writer.write(b"".join(pending))
    await writer.drain()
