"""Fetch responses that send records from segment files (sendfile) write exactly the frame."""
import asyncio
import os
import socket

import pytest

from actors.gateway.file_region import FileRegion, write_frame


async def _exchange(frame, expected_bytes: int):
    left, right = socket.socketpair()
    reader, reader_side = await asyncio.open_connection(sock=right)  # keep both writers: a
    _, writer = await asyncio.open_connection(sock=left)               # dropped one closes its socket
    try:
        sending = asyncio.ensure_future(write_frame(writer, frame))
        received = await reader.readexactly(expected_bytes)
        await sending
        return received
    finally:
        writer.close()
        reader_side.close()


def test_a_frame_mixes_bytes_and_file_regions(tmp_path):
    data = os.urandom(3 * 1024 * 1024)  # larger than a socket buffer: sendfile runs in steps
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(data)
    frame = [b"head", FileRegion.open(str(segment), 1000, 2_000_000), b"mid", memoryview(b"view"),
             FileRegion.open(str(segment), 0, 10), b"tail"]
    expected = b"head" + data[1000:2_001_000] + b"midview" + data[:10] + b"tail"
    assert asyncio.run(_exchange(frame, len(expected))) == expected
    assert all(c.file.closed for c in frame if isinstance(c, FileRegion))


def test_a_segment_deleted_after_the_fetch_is_still_sent_whole(tmp_path):
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"x" * 5000)
    region = FileRegion.open(str(segment), 100, 4000)
    segment.unlink()  # retention removes the segment while the response waits its turn
    assert asyncio.run(_exchange([b"h", region], 4001)) == b"h" + b"x" * 4000


def test_a_segment_cut_below_the_region_fails_the_frame_and_closes_what_is_left(tmp_path):
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"y" * 5000)
    region = FileRegion.open(str(segment), 0, 5000)
    later = FileRegion.open(str(segment), 0, 10)
    os.truncate(segment, 3000)

    async def run():
        left, right = socket.socketpair()
        _, writer = await asyncio.open_connection(sock=left)
        try:
            with pytest.raises(ConnectionError, match="shrank"):
                await write_frame(writer, [b"h", region, later])
        finally:
            writer.close()
            right.close()
    asyncio.run(run())
    assert region.file.closed and later.file.closed


def test_a_vanished_segment_is_reported_at_open(tmp_path):
    with pytest.raises(FileNotFoundError):
        FileRegion.open(str(tmp_path / "gone.log"), 0, 1)
