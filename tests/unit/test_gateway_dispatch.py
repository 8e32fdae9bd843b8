"""The gateway's dispatch and connection loop, driven in-process (no Ray, no partitions)."""
import asyncio
import struct

import pytest

from actors.gateway.connection import serve_connection
from actors.gateway.context import GatewayContext
from actors.gateway.dispatch import Dispatcher
from actors.gateway.handlers import ROUTES
from protocol.apis import API_BY_KEY
from protocol.headers import RequestHeader, decode_response_header, encode_request
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse


def dispatcher():
    ctx = GatewayContext(broker_id=0, config={}, controller=None)
    d = Dispatcher(ctx, ROUTES)
    ctx.advertised = d.advertised()
    return d


def test_advertised_versions_are_within_what_the_codec_supports():
    for key, lo, hi in dispatcher().advertised():
        spec, route = API_BY_KEY[key], ROUTES[key]
        assert spec.request.MIN_VERSION <= route.min_version <= hi <= spec.request.MAX_VERSION, spec.name
        # advertised below what is served only where Kafka does so too (Produce from v0, after KIP-896)
        assert lo == route.min_version or (key, lo) == (0, 0), spec.name


def test_a_produce_below_v3_closes_the_connection():
    """Produce is advertised from v0, as Kafka 4.4 does, and v0-2 close the connection, as on Kafka."""
    from actors.gateway.connection import CloseConnection
    d = dispatcher()
    assert (0, 0, 13) in d.advertised()
    for version in (0, 2):
        with pytest.raises(CloseConnection, match="Produce v%d is not supported" % version):
            asyncio.run(d(memoryview(encode_request(RequestHeader(0, version, 5, "t"), b"\x00\x01")[4:])))


def test_api_versions_lists_exactly_the_routes():
    d = dispatcher()
    frame = asyncio.run(d(memoryview(encode_request(RequestHeader(18, 3, 5, "t"), ApiVersionsRequest(
        client_software_name="t", client_software_version="1").encode(3))[4:])))
    correlation_id, offset = decode_response_header(frame[4:], 18, 3)
    response = ApiVersionsResponse.decode(frame[4 + offset:], 3)
    assert correlation_id == 5 and response.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == d.advertised()


async def _roundtrip(payload: bytes, frame_bytes_max=1 << 20):
    d = dispatcher()
    server = await asyncio.start_server(lambda r, w: serve_connection(r, w, d, frame_bytes_max=frame_bytes_max,
                                                                      idle_timeout_s=5), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    server.close()
    return data


def test_pipelined_requests_are_answered_in_order():
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    payload = b"".join(encode_request(RequestHeader(18, 3, cid, "t"), request.encode(3)) for cid in range(1, 21))

    async def run():
        d = dispatcher()
        server = await asyncio.start_server(lambda r, w: serve_connection(r, w, d, frame_bytes_max=1 << 20,
                                                                          idle_timeout_s=5), "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.write(payload)
        ids = []
        for _ in range(20):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            ids.append(struct.unpack(">i", (await reader.readexactly(size))[:4])[0])
        writer.close()
        server.close()
        return ids

    assert asyncio.run(run()) == list(range(1, 21))


@pytest.mark.parametrize("payload", [
    struct.pack(">i", 1 << 21),                                    # larger than frame_bytes_max
    struct.pack(">i", -5),                                         # negative size
    struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 1) + b"\x00\x00",  # unknown api key
    struct.pack(">i", 10) + struct.pack(">hhi", 0, 2, 1) + b"\x00\x00",    # Produce v2: unsupported
    struct.pack(">i", 8) + struct.pack(">hhi", 3, 12, 1),          # truncated header
])
def test_bad_frames_close_the_connection_without_an_answer(payload):
    assert asyncio.run(_roundtrip(payload)) == b""
