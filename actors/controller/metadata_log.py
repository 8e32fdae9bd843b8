"""The file Kray's controller kept its metadata in before the metadata quorum (on the Ray head,
`<log.dirs>/__cluster_metadata/metadata.log`): msgpack records framed as
[u32 length][u32 crc32c][payload]. No controller writes it any more: one that finds the quorum's
log empty imports it once (ControllerActor._import_file_log). The unit tests replay controller
state through it (append, then replay).

Replay stops at the first torn or corrupt frame and truncates the file there, like a Kafka log's
recovery of its active segment.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, Iterator

import crc32c
import msgpack

FRAME_HEADER = struct.Struct(">II")
RECORD_BYTES_MAX = 16 * 1024 * 1024


class MetadataLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.appended = 0  # append calls so far: all durable when append returns

    def replay(self) -> Iterator[dict[str, Any]]:
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        pos = 0
        while pos + FRAME_HEADER.size <= len(data):
            size, crc = FRAME_HEADER.unpack_from(data, pos)
            end = pos + FRAME_HEADER.size + size
            if size > RECORD_BYTES_MAX or end > len(data):
                break
            payload = data[pos + FRAME_HEADER.size:end]
            if crc32c.crc32c(payload) != crc:
                break
            yield msgpack.unpackb(payload, raw=False, strict_map_key=False)
            pos = end
        if pos != len(data):
            os.ftruncate(self._fd, pos)
        os.lseek(self._fd, pos, os.SEEK_SET)

    def append(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        out = bytearray()
        for record in records:
            payload = msgpack.packb(record, use_bin_type=True)
            out += FRAME_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload
        os.write(self._fd, out)
        os.fsync(self._fd)
        self.appended += 1

    def close(self) -> None:
        os.close(self._fd)
