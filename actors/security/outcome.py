"""What a SASL exchange step returns: a challenge to send back, or a failure with two texts.

A failure carries the reason for the broker's log and the message the client may see. Like Kafka,
the client sees a generic message unless the reason leaks nothing (for example an authorization
id that differs from the user name), so a client cannot learn which users exist.
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ErrorCode


@dataclass(frozen=True)
class SaslFailure:
    reason: str  # for the broker's log
    client_message: str  # for SaslAuthenticateResponse.error_message
    error_code: int = ErrorCode.SASL_AUTHENTICATION_FAILED  # ILLEGAL_SASL_STATE for a message out of turn


def generic_client_message(mechanism: str, *, reauthentication: bool = False) -> str:
    """Kafka's text for a failed SASL exchange, which names neither the user nor the cause."""
    phase = "re-authentication" if reauthentication else "authentication"
    return f"Authentication failed during {phase} due to invalid credentials with SASL mechanism {mechanism}"


def hidden_failure(mechanism: str, reason: str) -> SaslFailure:
    return SaslFailure(reason=reason, client_message=generic_client_message(mechanism))


def visible_failure(reason: str) -> SaslFailure:
    return SaslFailure(reason=reason, client_message=f"Authentication failed: {reason}")
