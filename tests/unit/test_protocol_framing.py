"""FrameDecoder: incremental splitting, size checks before buffering, linear cost for large frames."""

import os
import time

import pytest

from protocol.errors import FrameTooLarge, MalformedFrame
from protocol.framing import FrameDecoder, frame

MIB = 1 << 20


def test_frame_helper():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


def test_one_byte_at_a_time():
    bodies = [b"first", b"", b"x" * 300, b"last"]
    stream = b"".join(map(frame, bodies))
    decoder = FrameDecoder(frame_bytes_max=1000)
    got = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i:i + 1])
    assert [bytes(b) for b in got] == bodies


def test_several_frames_in_one_chunk_are_zero_copy_slices():
    stream = frame(b"aa") + frame(b"bbb") + frame(b"c")[:3]
    decoder = FrameDecoder(frame_bytes_max=100)
    got = decoder.feed(stream)
    assert got == [b"aa", b"bbb"] and all(isinstance(b, memoryview) for b in got)
    assert decoder.feed(b"\x01c") == [b"c"]


def test_oversize_rejected_from_prefix_alone():
    decoder = FrameDecoder(frame_bytes_max=1024)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(b"\x04\x01")
    assert (info.value.size_bytes, info.value.frame_bytes_max) == (1025, 1024)


def test_negative_size_rejected():
    with pytest.raises(MalformedFrame):
        FrameDecoder(frame_bytes_max=1024).feed(b"\xff\xff\xff\xfe")


def test_exactly_max_is_accepted():
    assert FrameDecoder(frame_bytes_max=4).feed(frame(b"abcd")) == [b"abcd"]


def test_large_frames_in_64k_chunks_are_linear():
    body = os.urandom(MIB)
    stream = frame(body) * 8
    chunk_bytes = 64 * 1024
    decoder = FrameDecoder(frame_bytes_max=2 * MIB)
    start = time.perf_counter()
    got = []
    for i in range(0, len(stream), chunk_bytes):
        got += decoder.feed(stream[i:i + chunk_bytes])
    elapsed = time.perf_counter() - start
    assert len(got) == 8 and all(bytes(b) == body for b in got)
    assert elapsed < 0.5, elapsed


def test_bytearray_input_is_copied():
    data = bytearray(frame(b"abc"))
    got = FrameDecoder(frame_bytes_max=10).feed(data)
    data[4:7] = b"zzz"
    assert got == [b"abc"]
