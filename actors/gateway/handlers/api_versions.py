"""ApiVersions: what this gateway speaks, straight from its routing table."""
from __future__ import annotations

from protocol.messages import ApiVersionsResponse


async def handle_api_versions(ctx, header, request, connection=None) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
        for key, lo, hi in ctx.advertised])
