"""One connection's authentication, sans-IO: which requests it may send, and the SASL exchange.

The connection shell asks `admit(api_key, now_ms)` for every request, in the order they arrive,
before dispatching it, and hands SaslHandshake / SaslAuthenticate (and, after a SaslHandshake
v0, the raw tokens) to this object, which answers synchronously. States and their moves:

    HANDSHAKE_OR_VERSIONS --SaslHandshake v1--> AUTHENTICATE --SaslAuthenticate ok--> AUTHENTICATED
          |   (ApiVersions served)  \\--SaslHandshake v0--> RAW_TOKEN --raw token ok---^      |
          |                                                                                   |
          +-- any other request: close            AUTHENTICATED --SaslHandshake v1--> AUTHENTICATE
                                                  (re-authentication, KIP-368; same mechanism and
                                                   principal, else failed)
    a refused mechanism or credential --> FAILED (the shell answers after
    connection.failed.authentication.delay.ms, then closes)

A listener without SASL starts AUTHENTICATED and stays there (its principal is ANONYMOUS or the
client certificate's). In AUTHENTICATED, a session past its lifetime (`connections.max.reauth.ms`)
may only start a re-authentication: any other request closes the connection, as in Kafka.
Beyond Kafka, ApiVersions may be repeated before the handshake (a client retrying ApiVersions at
v0 after an UNSUPPORTED_VERSION answer is not refused).

SaslHandshake v0 means raw SASL tokens follow (length-prefixed frames without Kafka headers; a
failure closes the connection, with no answer, as Kafka does); v1 means SaslAuthenticate.
Re-authentication needs v1, as KIP-368 says.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from protocol.errors import ErrorCode

from actors.security.outcome import SaslFailure
from actors.security.principal import ANONYMOUS, KafkaPrincipal

API_SASL_HANDSHAKE = 17
API_API_VERSIONS = 18
API_SASL_AUTHENTICATE = 36


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake-or-versions"
    AUTHENTICATE = "authenticate"  # after SaslHandshake v1: SaslAuthenticate only
    RAW_TOKEN = "raw-token"  # after SaslHandshake v0: a raw SASL token only
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Action(enum.Enum):
    SERVE = "serve"  # dispatch the request as usual
    SASL = "sasl"  # a SaslHandshake or SaslAuthenticate: the shell calls handshake()/authenticate()
    CLOSE = "close"  # not allowed now: close the connection without an answer


@dataclass(frozen=True)
class Admission:
    action: Action
    reason: str = ""


@dataclass(frozen=True)
class HandshakeAnswer:
    error_code: int
    mechanisms: list[str]
    close: bool = False  # answer after the failed-authentication delay, then close


@dataclass(frozen=True)
class AuthenticateAnswer:
    error_code: int = 0
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False  # answer after the failed-authentication delay, then close
    log_reason: str | None = None  # why it failed, for the broker's log only


# a mechanism's server side: step(client message) -> object with .complete, .challenge, .failure;
# .username once complete (PlainServer, ScramServer)
ExchangeFactory = Callable[[], Any]


class ConnectionSession:
    def __init__(self, *, sasl: bool, mechanisms: Mapping[str, ExchangeFactory] | None = None,
                 enabled: tuple[str, ...] = (), reauth_ms: int = 0, principal: KafkaPrincipal = ANONYMOUS):
        self.sasl = sasl
        self.factories = dict(mechanisms or {})
        self.enabled = list(enabled or self.factories)
        self.reauth_ms = reauth_ms
        self.state = State.HANDSHAKE_OR_VERSIONS if sasl else State.AUTHENTICATED
        self.principal: KafkaPrincipal | None = None if sasl else principal
        self.mechanism: str | None = None  # of the last successful authentication
        self.expires_at_ms: int | None = None
        self.reauthenticating = False
        self._pending_mechanism: str | None = None
        self._exchange: Any = None

    # ---- which requests may come -------------------------------------------------------------
    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    @property
    def expects_raw_token(self) -> bool:
        return self.state is State.RAW_TOKEN

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms

    def admit(self, api_key: int, now_ms: int) -> Admission:
        state = self.state
        if state is State.AUTHENTICATED:
            if api_key == API_SASL_HANDSHAKE and self.sasl:
                return Admission(Action.SASL)
            if self.expired(now_ms):
                return Admission(Action.CLOSE, "the SASL session expired (connections.max.reauth.ms) without "
                                               "re-authentication")
            if api_key == API_SASL_AUTHENTICATE and self.sasl:
                return Admission(Action.CLOSE, "SaslAuthenticate without a SaslHandshake first")
            return Admission(Action.SERVE)
        if state is State.HANDSHAKE_OR_VERSIONS:
            if api_key == API_API_VERSIONS:
                return Admission(Action.SERVE)
            if api_key == API_SASL_HANDSHAKE:
                return Admission(Action.SASL)
            return Admission(Action.CLOSE, f"Unexpected Kafka request of type {api_key} during SASL handshake")
        if state is State.AUTHENTICATE:
            if api_key == API_SASL_AUTHENTICATE:
                return Admission(Action.SASL)
            return Admission(Action.CLOSE, f"Unexpected Kafka request of type {api_key} during SASL authentication")
        if state is State.RAW_TOKEN:
            return Admission(Action.CLOSE, "a Kafka request where a raw SASL token was expected")
        return Admission(Action.CLOSE, "authentication failed")

    # ---- the exchange ---------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int) -> HandshakeAnswer:
        """A SaslHandshake (admit() said SASL)."""
        reauth = self.state is State.AUTHENTICATED
        if reauth and version < 1:
            self.state = State.FAILED
            return HandshakeAnswer(ErrorCode.ILLEGAL_SASL_STATE, list(self.enabled), close=True)
        if mechanism not in self.factories or (reauth and mechanism != self.mechanism):
            self.state = State.FAILED
            return HandshakeAnswer(ErrorCode.UNSUPPORTED_SASL_MECHANISM, list(self.enabled), close=True)
        self.reauthenticating = reauth
        self._pending_mechanism = mechanism
        self._exchange = self.factories[mechanism]()
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW_TOKEN
        return HandshakeAnswer(0, list(self.enabled))

    def authenticate(self, auth_bytes: bytes, now_ms: int) -> AuthenticateAnswer:
        """A SaslAuthenticate's bytes, or (after SaslHandshake v0) a raw token."""
        if self.state not in (State.AUTHENTICATE, State.RAW_TOKEN):
            self.state = State.FAILED
            return AuthenticateAnswer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SASL request", close=True,
                                      log_reason="SaslAuthenticate out of turn")
        step = self._exchange.step(bytes(auth_bytes))
        if step.failure is not None:
            return self._fail(step.failure)
        if not step.complete:
            return AuthenticateAnswer(auth_bytes=step.challenge or b"")
        principal = KafkaPrincipal.user(self._exchange.username)
        if self.reauthenticating and principal != self.principal:
            return self._fail(SaslFailure(
                f"re-authentication as {principal} on a connection of {self.principal}",
                f"Cannot change principals during re-authentication from {self.principal}: {principal}"))
        self.principal, self.mechanism = principal, self._pending_mechanism
        self.state, self.reauthenticating, self._exchange = State.AUTHENTICATED, False, None
        lifetime_ms = self.reauth_ms if self.reauth_ms > 0 else 0
        self.expires_at_ms = now_ms + lifetime_ms if lifetime_ms else None
        return AuthenticateAnswer(auth_bytes=step.challenge or b"", session_lifetime_ms=lifetime_ms)

    def _fail(self, failure: SaslFailure) -> AuthenticateAnswer:
        self.state, self._exchange = State.FAILED, None
        message = failure.client_message
        if self.reauthenticating and message.startswith("Authentication failed during authentication"):
            message = message.replace("during authentication", "during re-authentication", 1)
        return AuthenticateAnswer(failure.error_code, message, close=True, log_reason=failure.reason)
