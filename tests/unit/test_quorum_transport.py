"""PeerTransport over a real TCP listener on 127.0.0.1: requests as Kafka frames, answers mapped
back to the core's messages, a timed-out request closes its connection and the next one opens a
fresh one (actors/controller/quorum_shell/transport.py)."""
import asyncio

from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.headers import decode_request_header, encode_response_chunks

from actors.controller.quorum import BeginQuorumEpochRequest, BeginQuorumEpochResponse, VoteRequest
from actors.controller.quorum_shell import wire
from actors.controller.quorum_shell.transport import PeerTransport
from actors.pipelined import serve_multiplexed

CLASSES = {52: m.VoteRequest, 53: m.BeginQuorumEpochRequest}


async def _scenario():
    accepted = []
    stall = asyncio.Event()

    async def handle(body):
        header, offset = decode_request_header(body)
        request = CLASSES[header.api_key].decode(body[offset:], header.api_version)
        if header.api_key == 52:
            await stall.wait()          # a peer behind a cut: never answers
        core = wire.begin_request_from_wire(request)
        answer = wire.begin_response_to_wire(BeginQuorumEpochResponse(2, ErrorCode.NONE, core.epoch, core.leader_id))
        return encode_response_chunks(header.api_key, header.api_version, header.correlation_id,
                                      answer.encode(header.api_version))

    async def on_connect(reader, writer):
        accepted.append(writer)
        await serve_multiplexed(reader, writer, handle, frame_bytes_max=1 << 20, inflight_requests_max=16)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = PeerTransport(1, "c", lambda node: ("127.0.0.1", port), request_timeout_ms=200)
    try:
        answer = await transport.request(2, BeginQuorumEpochRequest(src=1, epoch=3, leader_id=1))
        assert answer == BeginQuorumEpochResponse(2, ErrorCode.NONE, 3, 1)
        assert len(accepted) == 1
        again = await transport.request(2, BeginQuorumEpochRequest(src=1, epoch=3, leader_id=1))
        assert again == answer and len(accepted) == 1          # kept open while it works
        started = asyncio.get_running_loop().time()
        assert await transport.request(2, VoteRequest(1, 4, 3, 9, False)) is None
        assert asyncio.get_running_loop().time() - started < 1.0
        answer = await transport.request(2, BeginQuorumEpochRequest(src=1, epoch=4, leader_id=1))
        assert answer == BeginQuorumEpochResponse(2, ErrorCode.NONE, 4, 1)
        assert len(accepted) == 2                                # a fresh connection after the timeout
        unknown = PeerTransport(1, "c", lambda node: None, request_timeout_ms=200)
        assert await unknown.request(3, BeginQuorumEpochRequest(src=1, epoch=4, leader_id=1)) is None
    finally:
        stall.set()
        transport.close()
        server.close()


def test_requests_timeouts_and_fresh_connections():
    asyncio.run(_scenario())
