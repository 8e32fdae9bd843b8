"""SaslHandshake and SaslAuthenticate where no SASL exchange is under way.

On a SASL listener the connection's session (actors/security/session.py) answers both
before dispatch; what reaches these handlers came on a listener without SASL, or after
authentication completed. Kafka answers those with ILLEGAL_SASL_STATE, and so do we; the routes
also make ApiVersions advertise both APIs, which clients check before they authenticate.
"""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse


async def handle_sasl_handshake(ctx, header, request, connection=None) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


async def handle_sasl_authenticate(ctx, header, request, connection=None) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate on a connection that does not authenticate "
                                                  "with SASL now", auth_bytes=b"", session_lifetime_ms=0)
