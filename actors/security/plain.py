"""SASL/PLAIN (RFC 4616) checked against the users of Kafka's PlainLoginModule JAAS config.

A PLAIN message is `[authzid] NUL authcid NUL passwd` in UTF-8. The accepted users are the
`user_NAME="password"` options of the `org.apache.kafka.common.security.plain.PlainLoginModule`
entry, as Kafka's PlainServerCallbackHandler reads them (its `username`/`password` options are the
broker's own login as a client, not an accepted user unless also listed as `user_…`). Passwords
are compared in constant time; an unknown user costs the same compare as a known one.
Failures use Kafka's texts, which say nothing about which users exist.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Mapping

from protocol.errors import ErrorCode

from actors.security.jaas import parse_jaas_config
from actors.security.outcome import SaslFailure, visible_failure

PLAIN_MECHANISM = "PLAIN"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS_USER_PREFIX = "user_"
PLAIN_MESSAGE_BYTES_MAX = 4096  # RFC 4616 asks for 3 x 255 octets + 2 separators; room beyond that
_ABSENT_PASSWORD = b"\x00" * 32  # compared against when the user is unknown, so timing says nothing


def plain_users_from_jaas(jaas_config: str) -> dict[str, str]:
    """The accepted users (name -> password) of a PlainLoginModule JAAS config string."""
    entries = [e for e in parse_jaas_config(jaas_config) if e.login_module == PLAIN_LOGIN_MODULE]
    if not entries:
        raise ValueError(f"JAAS config: no {PLAIN_LOGIN_MODULE} entry")
    users: dict[str, str] = {}
    for entry in entries:
        for key, value in entry.options.items():
            if key.startswith(JAAS_USER_PREFIX) and len(key) > len(JAAS_USER_PREFIX):
                users.setdefault(key[len(JAAS_USER_PREFIX):], value)
    return users


@dataclass(frozen=True)
class PlainMessage:
    authzid: str
    username: str
    password: str = ""

    def __repr__(self) -> str:
        return f"PlainMessage(authzid={self.authzid!r}, username={self.username!r}, password=<hidden>)"


def parse_plain(message: bytes) -> PlainMessage:
    """Split a PLAIN message; ValueError (with Kafka's text where Kafka has one) when malformed."""
    if len(message) > PLAIN_MESSAGE_BYTES_MAX:
        raise ValueError(f"Invalid SASL/PLAIN response: {len(message)} bytes exceed {PLAIN_MESSAGE_BYTES_MAX}")
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("Invalid SASL/PLAIN response: not UTF-8") from None
    tokens = text.split("\x00")
    if len(tokens) != 3:
        raise ValueError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(tokens), 4)}")
    return PlainMessage(*tokens)


def password_matches(given: str, expected: str | None) -> bool:
    reference = expected.encode("utf-8") if expected is not None else _ABSENT_PASSWORD
    return hmac.compare_digest(given.encode("utf-8"), reference) and expected is not None


@dataclass(frozen=True)
class PlainStep:
    complete: bool
    challenge: bytes | None = None  # empty on success: PLAIN has no server data
    failure: SaslFailure | None = None


class PlainServer:
    """One PLAIN exchange: a single client message, then complete or failed."""

    def __init__(self, users: Mapping[str, str]):
        self.users = users
        self.username: str | None = None
        self.done = False

    @property
    def complete(self) -> bool:
        return self.username is not None

    def step(self, message: bytes) -> PlainStep:
        if self.done:
            reason = "a PLAIN message arrived after the exchange ended"
            return PlainStep(self.complete, failure=SaslFailure(reason, f"Unexpected SASL message: {reason}",
                                                               ErrorCode.ILLEGAL_SASL_STATE))
        self.done = True
        try:
            plain = parse_plain(message)
        except ValueError as e:
            return PlainStep(False, failure=SaslFailure(str(e), str(e)))
        if not plain.username:
            return PlainStep(False, failure=visible_failure("username not specified"))
        if not plain.password:
            return PlainStep(False, failure=visible_failure("password not specified"))
        if not password_matches(plain.password, self.users.get(plain.username)):
            return PlainStep(False, failure=visible_failure("Invalid username or password"))
        if plain.authzid and plain.authzid != plain.username:
            return PlainStep(False, failure=visible_failure(
                "Client requested an authorization id that is different from username"))
        self.username = plain.username
        return PlainStep(True, challenge=b"")
