"""A small blocking Kafka client for Kray's tools: one connection, ApiVersions negotiation, and
typed requests from `protocol.messages`. No Python Kafka library speaks the share-group admin APIs,
so Kray's own tools use this.
"""
from __future__ import annotations

import itertools
import socket
from typing import Any

from protocol.apis import API_BY_KEY
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader, decode_response_header, encode_request
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse

RESPONSE_BYTES_MAX = 100 * 1024 * 1024
RECV_CHUNK_BYTES = 256 * 1024


class AdminError(RuntimeError):
    """The broker could not be reached or answered something unusable; the message says what to try."""


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise AdminError(f"--bootstrap-server {bootstrap!r} is not HOST:PORT (example: 127.0.0.1:9092)")
    return host or "127.0.0.1", int(port)


class KafkaConnection:
    def __init__(self, bootstrap: str, *, client_id: str = "kray-admin", timeout_s: float = 30.0):
        self.address = parse_bootstrap(bootstrap)
        self.client_id = client_id
        try:
            self.sock = socket.create_connection(self.address, timeout=timeout_s)
        except OSError as e:
            raise AdminError(f"cannot connect to {bootstrap}: {e}; is the broker running (kray start)?") from None
        self.decoder = FrameDecoder(RESPONSE_BYTES_MAX)
        self.correlation_ids = itertools.count(1)
        self.versions = self._negotiate()

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        response = self._call(ApiVersionsRequest(), 18, 3)
        if response.error_code == 35:  # an older broker: ask again in v0
            response = self._call(ApiVersionsRequest(), 18, 0)
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def version_for(self, api_key: int) -> int:
        spec = API_BY_KEY[api_key]
        if api_key not in self.versions:
            raise AdminError(f"the broker does not support {spec.name}")
        lo, hi = self.versions[api_key]
        version = min(hi, spec.max_version if not spec.latest_version_unstable else spec.max_version - 1)
        if version < max(lo, spec.min_version):
            raise AdminError(f"no common version of {spec.name} with the broker")
        return version

    def send(self, request: Any, version: int | None = None) -> Any:
        version = self.version_for(request.API_KEY) if version is None else version
        return self._call(request, request.API_KEY, version)

    def _call(self, request: Any, api_key: int, version: int) -> Any:
        correlation_id = next(self.correlation_ids)
        header = RequestHeader(api_key, version, correlation_id, self.client_id)
        self.sock.sendall(encode_request(header, request.encode(version)))
        body = self._receive()
        got_id, offset = decode_response_header(body, api_key, version)
        if got_id != correlation_id:
            raise AdminError(f"response correlation id {got_id} does not match request {correlation_id}")
        response_cls = API_BY_KEY[api_key].response
        if api_key == 18 and version > 0 and len(body) - offset >= 2 and body[offset:offset + 2] == b"\x00\x23":
            return ApiVersionsResponse.decode(body[offset:], 0)  # UNSUPPORTED_VERSION comes back as v0
        return response_cls.decode(body[offset:], version)

    def _receive(self) -> memoryview:
        while True:
            chunk = self.sock.recv(RECV_CHUNK_BYTES)
            if not chunk:
                raise AdminError("the broker closed the connection")
            frames = self.decoder.feed(chunk)
            if frames:
                return memoryview(frames[0])

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "KafkaConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
