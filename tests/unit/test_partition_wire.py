"""The gateway -> partition data path (actors/partition/wire.py): frames round-trip with record
bytes untouched, and malformed frames are refused with MalformedMessage (which closes that one
internal connection) instead of crashing or being misread."""
import random
import uuid

import msgpack
import pytest

from actors.partition import wire
from protocol.errors import MalformedMessage
from protocol.framing import FrameDecoder


def _body(chunks) -> memoryview:
    [body] = FrameDecoder(1 << 30).feed(b"".join(chunks))
    return memoryview(body)


KEY = (uuid.UUID("0123456789abcdef0123456789abcdef"), 7)


def test_request_round_trips_naming_its_partition_with_blobs_as_sent():
    records = bytes(range(256)) * 40
    api_key, correlation_id, key, args, blobs = wire.decode_request(_body(
        wire.encode_request(wire.PRODUCE, 77, KEY, [3, -1, 30000], (records,))))
    assert (api_key, correlation_id, key, args) == (wire.PRODUCE, 77, KEY, [3, -1, 30000])
    assert [bytes(b) for b in blobs] == [records]


def test_response_round_trips_and_empty_blobs_stay_empty():
    body = _body(wire.encode_response(9, [0, 10, 10, 0, None], (b"",)))
    assert body[:4].tobytes() == (9).to_bytes(4, "big")
    status, args, blobs = wire.decode_response(body[4:])
    assert status == wire.ANSWERED
    assert args == [0, 10, 10, 0, None] and [bytes(b) for b in blobs] == [b""]


def test_a_partition_not_hosted_behind_the_listener_is_answered_so():
    status, args, blobs = wire.decode_response(_body(wire.encode_response(3, [], (), status=wire.NOT_HOSTED))[4:])
    assert (status, args, blobs) == (wire.NOT_HOSTED, [], [])


def test_a_request_whose_partition_is_not_a_topic_id_and_index_is_refused():
    for key in ([b"short", 0], [KEY[0].bytes, -1], ["a string", 0]):
        meta = msgpack.packb([*key, [], []])
        body = wire._REQUEST_HEADER.pack(wire.FETCH, 0, 1, wire.NO_CLIENT_ID) + wire._U32.pack(len(meta)) + meta
        with pytest.raises(MalformedMessage):
            wire.decode_request(memoryview(body))


@pytest.mark.parametrize("mangle", [
    lambda b: b[:8],                                   # shorter than its header
    lambda b: b"\x00\x00" + b[2:],                     # a Kafka api key (Produce), not an internal one
    lambda b: b[:10] + b"\xff\xff\xff\xff" + b[14:],  # a meta size past the end
    lambda b: b + b"junk",                             # bytes after the last blob
    lambda b: b[:-1],                                  # a blob cut short
])
def test_malformed_requests_are_refused(mangle):
    good = bytes(_body(wire.encode_request(wire.FETCH, 1, KEY, [0, 1024, 0, 0], (b"abc",))))
    with pytest.raises(MalformedMessage):
        wire.decode_request(memoryview(mangle(good)))


def test_random_bytes_never_escape_as_other_errors():
    rng = random.Random(932)
    good = bytes(_body(wire.encode_request(wire.SHARE_FETCH, 5, KEY, ["g", "m", None, 500, 500, 1 << 20, True,
                                                                       False, [30000, 5, 2000, True]])))
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            wire.decode_request(memoryview(bytes(data[:rng.randint(0, len(data))])))
        except MalformedMessage:
            pass
