"""From a frame body to a response frame: header, version checks, body decode, handler, encode.

The table of handlers is the single source of what the gateway advertises in ApiVersions: an API
that has no handler here is never advertised (nor one whose route says `advertised=False`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from protocol.apis import API_BY_KEY
from protocol.errors import ErrorCode, MalformedMessage
from protocol.headers import RequestHeader, decode_request_header, encode_response, encode_response_chunks

from actors.gateway.connection import CloseConnection
from actors.gateway.file_region import FileRegion
from actors.gateway.quota_throttles import quota_applies, request_quotas_on, request_throttle, timed

log = logging.getLogger("kray.gateway")

Handler = Callable[[Any, RequestHeader, Any, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Route:
    handler: Handler
    min_version: int
    max_version: int
    no_response: Callable[[Any], bool] | None = None  # e.g. Produce with acks=0
    advertised: bool = True  # False: served, but left out of ApiVersions (an API whose whole path is not built yet)
    # ApiVersions' lowest version where it is below the lowest served (a request below min_version closes the
    # connection): Produce from v0, as Kafka 4.4 advertises it for old clients' feature detection (KIP-896)
    advertised_min_version: int | None = None


class Dispatcher:
    def __init__(self, ctx: Any, routes: dict[int, Route]):
        self.ctx = ctx
        self.routes = routes

    def quota_applies(self, body, connection) -> bool:
        """Whether a client quota applies to this request's client (connection.py then takes the connection's
        requests one at a time)."""
        return quota_applies(self.ctx, connection, body)

    def advertised(self) -> list[tuple[int, int, int]]:
        return sorted((key, r.min_version if r.advertised_min_version is None else r.advertised_min_version,
                       r.max_version) for key, r in self.routes.items() if r.advertised)

    async def __call__(self, body: memoryview, connection=None) -> bytes | list | None:
        header, offset = decode_request_header(body)
        route = self.routes.get(header.api_key)
        spec = API_BY_KEY.get(header.api_key)
        if route is None or spec is None:
            raise CloseConnection(f"api key {header.api_key} is not supported")
        if not route.min_version <= header.api_version <= route.max_version:
            if header.api_key == 18:  # ApiVersions: answer in v0 so any client can read it
                return self._unsupported_api_versions(header)
            raise CloseConnection(f"{spec.name} v{header.api_version} is not supported "
                                  f"(supported {route.min_version}-{route.max_version})")
        timing = request_quotas_on(self.ctx, connection)  # request_percentage: the time spent here counts
        started_ns = time.perf_counter_ns() if timing else 0
        request = spec.request.decode(body[offset:], header.api_version)
        # every handler takes the ClientConnection: its principal and host (the authorizer), its
        # listener (addresses), its share sessions and request order
        handling = route.handler(self.ctx, header, request, connection)
        if timing:
            spent_ns = [time.perf_counter_ns() - started_ns]
            response = await timed(handling, spent_ns)
            throttle_ms = request_throttle(self.ctx, connection, header.client_id, spent_ns[0])
            if throttle_ms and getattr(response, "throttle_time_ms", None) is not None:
                response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
        else:
            response = await handling
        if route.no_response is not None and route.no_response(request):
            return None
        chunks = response.encode_chunks(header.api_version)
        if any(type(c) is FileRegion for c in chunks):  # a Fetch with records to send from files
            return encode_response_chunks(header.api_key, header.api_version, header.correlation_id, chunks)
        return encode_response(header.api_key, header.api_version, header.correlation_id, chunks)

    def _unsupported_api_versions(self, header: RequestHeader) -> bytes:
        from protocol.messages import ApiVersionsResponse
        response = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in self.advertised()])
        return encode_response(18, 0, header.correlation_id, response.encode(0))


__all__ = ["Dispatcher", "Route", "MalformedMessage"]
