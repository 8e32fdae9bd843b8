"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server's exchange.

Credentials are kept as Kafka keeps them: a salt, an iteration count and two keys derived from
the salted password (StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
HMAC(SaltedPassword, "Server Key")); the password itself is never kept. Kafka's
AlterUserScramCredentials sends the salted password, so a credential can be built from it too.

`ScramServer` is the server side of one exchange, sans-IO: `step(client message)` returns the
state reached and either the challenge to send or a failure. Its states and their moves are the
table `TRANSITIONS`:

    receive-client-first --accepted--> receive-client-final --accepted--> complete
            |                                   |
            +--------------refused--------------+--------------> failed

Client-first is `n,[a=authzid],n=user,r=nonce[,ext=value...]` (no channel binding: gs2 flag `n`);
client-final is `c=<base64 of the gs2 header>,r=<client nonce + server nonce>[,...],p=proof`.
Kafka's `tokenauth` extension (delegation tokens) is refused; other extensions are ignored, as
Kafka ignores them; a mandatory extension (`m=`) is refused, as RFC 5802 asks.
"""
from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Mapping

from protocol.errors import ErrorCode

from actors.security.outcome import SaslFailure, hidden_failure, visible_failure

ITERATIONS_MIN = 4096  # Kafka's ScramMechanism.minIterations, for both mechanisms
ITERATIONS_MAX = 16384  # Kafka's ScramMechanism.maxIterations (AlterUserScramCredentials)
SALT_BYTES_DEFAULT = 32
SERVER_NONCE_BYTES = 24  # random bytes behind the server's part of the nonce
SCRAM_MESSAGE_BYTES_MAX = 8192  # a SCRAM message holds a name, a nonce and a proof: far less


class ScramMechanism(enum.Enum):
    """The two SCRAM mechanisms Kafka speaks; `type_id` is Kafka's byte for it in KIP-554."""
    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, type_id: int):
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.type_id = type_id

    @property
    def digest_bytes(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    @classmethod
    def from_name(cls, mechanism_name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == mechanism_name), None)

    @classmethod
    def from_type_id(cls, type_id: int) -> ScramMechanism | None:
        return next((m for m in cls if m.type_id == type_id), None)


@dataclass(frozen=True)
class ScramCredential:
    mechanism: ScramMechanism
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def iterations_problem(iterations: int) -> str | None:
    """Why an iteration count is refused (Kafka's bounds), or None when it is fine."""
    if iterations < ITERATIONS_MIN:
        return f"iterations {iterations} is less than the minimum {ITERATIONS_MIN}"
    if iterations > ITERATIONS_MAX:
        return f"iterations {iterations} is more than the maximum {ITERATIONS_MAX}"
    return None


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash.
    The password is taken as UTF-8 without SASLprep, as Kafka's ScramFormatter does."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, mechanism.hash_name)


def _hash(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential KIP-554's AlterUserScramCredentials asks for. A salted password of a length
    other than the hash's is kept, as Kafka keeps it (no client's PBKDF2 output will match it)."""
    problem = iterations_problem(iterations)
    if problem:
        raise ValueError(f"{mechanism.mechanism_name}: {problem}")
    if not salted:
        raise ValueError(f"{mechanism.mechanism_name}: the salted password is empty")
    if not salt:
        raise ValueError(f"{mechanism.mechanism_name}: the salt is empty")
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(mechanism=mechanism, salt=bytes(salt), stored_key=_hash(mechanism, client_key),
                           server_key=_hmac(mechanism, salted, b"Server Key"), iterations=iterations)


def make_credential(mechanism: ScramMechanism, password: str, *, iterations: int = ITERATIONS_MIN,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for a password (a random salt unless one is given)."""
    salt = secrets.token_bytes(SALT_BYTES_DEFAULT) if salt is None else salt
    problem = iterations_problem(iterations)
    if problem:
        raise ValueError(f"{mechanism.mechanism_name}: {problem}")
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


# --- the messages -------------------------------------------------------------------------------

class MalformedScram(ValueError):
    """A client message that does not follow RFC 5802's grammar."""


class RefusedScram(ValueError):
    """A well-formed client message asking for something this server does not do."""


@dataclass(frozen=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=authzid,", echoed base64-encoded in client-final
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare, part of the AuthMessage


@dataclass(frozen=True)
class ClientFinal:
    channel_binding: str  # base64 text as sent
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof, part of the AuthMessage


def _text(message: bytes) -> str:
    if len(message) > SCRAM_MESSAGE_BYTES_MAX:
        raise MalformedScram(f"a SCRAM message of {len(message)} bytes exceeds {SCRAM_MESSAGE_BYTES_MAX}")
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedScram("the message is not UTF-8") from None
    if "\x00" in text:
        raise MalformedScram("the message contains a NUL character")
    return text


def decode_saslname(saslname: str) -> str:
    """RFC 5802 saslname: ',' travels as '=2C' and '=' as '=3D'; any other '=' is malformed."""
    if not saslname:
        raise MalformedScram("the user name is empty")
    out, i = [], 0
    while i < len(saslname):
        if saslname[i] == "=":
            code = saslname[i:i + 3]
            if code not in ("=2C", "=3D"):
                raise MalformedScram(f"'=' in a name must be '=2C' or '=3D', not {code!r}")
            out.append("," if code == "=2C" else "=")
            i += 3
        else:
            out.append(saslname[i])
            i += 1
    return "".join(out)


def encode_saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _check_nonce(nonce: str) -> str:
    if not nonce:
        raise MalformedScram("the nonce is empty")
    if any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in nonce):
        raise MalformedScram("the nonce has characters outside printable ASCII")
    return nonce


def _attribute(part: str, name: str, where: str) -> str:
    if not part.startswith(name + "="):
        raise MalformedScram(f"{where}: expected '{name}=' but found {part[:16]!r}")
    return part[len(name) + 1:]


def _extensions(parts: list[str], where: str) -> dict[str, str]:
    extensions = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not key.isascii() or not key.isalpha() or not value:
            raise MalformedScram(f"{where}: malformed extension {part[:16]!r}")
        extensions[key] = value
    return extensions


def parse_client_first(message: bytes) -> ClientFirst:
    text = _text(message)
    flag, sep1, rest = text.partition(",")
    authz_part, sep2, bare = rest.partition(",")
    if not (sep1 and sep2):
        raise MalformedScram("client-first: no gs2 header ('n,,')")
    if flag in ("y", "p") or flag.startswith("p="):
        raise RefusedScram("channel binding is not supported: the gs2 header must start with 'n'")
    if flag != "n":
        raise MalformedScram(f"client-first: unknown gs2 flag {flag[:8]!r}")
    authzid = decode_saslname(_attribute(authz_part, "a", "client-first authzid")) if authz_part else ""
    if bare.startswith("m="):
        raise RefusedScram("mandatory extension 'm=' is not supported")
    parts = bare.split(",")
    if len(parts) < 2:
        raise MalformedScram("client-first: expected 'n=user,r=nonce'")
    username = decode_saslname(_attribute(parts[0], "n", "client-first"))
    nonce = _check_nonce(_attribute(parts[1], "r", "client-first"))
    return ClientFirst(gs2_header=f"{flag},{authz_part},", authzid=authzid, username=username, nonce=nonce,
                       extensions=_extensions(parts[2:], "client-first"), bare=bare)


def parse_client_final(message: bytes) -> ClientFinal:
    text = _text(message)
    parts = text.split(",")
    if len(parts) < 3:
        raise MalformedScram("client-final: expected 'c=...,r=...,p=...'")
    channel_binding = _attribute(parts[0], "c", "client-final")
    nonce = _check_nonce(_attribute(parts[1], "r", "client-final"))
    _extensions(parts[2:-1], "client-final")
    proof_text = _attribute(parts[-1], "p", "client-final")
    try:
        proof = base64.b64decode(proof_text, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedScram("client-final: the proof is not base64") from None
    return ClientFinal(channel_binding=channel_binding, nonce=nonce, proof=proof,
                       without_proof=text[:len(text) - len(parts[-1]) - 1])


def server_first_message(nonce: str, salt: bytes, iterations: int) -> str:
    return f"r={nonce},s={base64.b64encode(salt).decode('ascii')},i={iterations}"


def auth_message(client_first_bare: str, server_first: str, client_final_without_proof: str) -> bytes:
    return f"{client_first_bare},{server_first},{client_final_without_proof}".encode("utf-8")


# --- the exchange ---------------------------------------------------------------------------------

class ScramState(enum.Enum):
    RECEIVE_CLIENT_FIRST = "receive-client-first"
    RECEIVE_CLIENT_FINAL = "receive-client-final"
    COMPLETE = "complete"
    FAILED = "failed"


ACCEPTED, REFUSED = "accepted", "refused"

TRANSITIONS: dict[tuple[ScramState, str], ScramState] = {
    (ScramState.RECEIVE_CLIENT_FIRST, ACCEPTED): ScramState.RECEIVE_CLIENT_FINAL,
    (ScramState.RECEIVE_CLIENT_FIRST, REFUSED): ScramState.FAILED,
    (ScramState.RECEIVE_CLIENT_FINAL, ACCEPTED): ScramState.COMPLETE,
    (ScramState.RECEIVE_CLIENT_FINAL, REFUSED): ScramState.FAILED,
}


def next_state(state: ScramState, event: str) -> ScramState | None:
    """The one place that says which moves exist; None for a message the state cannot take."""
    return TRANSITIONS.get((state, event))


@dataclass(frozen=True)
class ScramStep:
    state: ScramState
    challenge: bytes | None = None  # server-first or server-final, to send to the client
    failure: SaslFailure | None = None

    @property
    def complete(self) -> bool:
        return self.state is ScramState.COMPLETE


class ScramServer:
    """One server-side SCRAM exchange. `credentials` maps user names to this mechanism's
    credentials (a snapshot of the controller's); `server_nonce` is injected by tests."""

    def __init__(self, mechanism: ScramMechanism, credentials: Mapping[str, ScramCredential], *,
                 server_nonce: str | None = None):
        self.mechanism = mechanism
        self.credentials = credentials
        self.server_nonce = _check_nonce(server_nonce) if server_nonce is not None else \
            secrets.token_urlsafe(SERVER_NONCE_BYTES)
        self.state = ScramState.RECEIVE_CLIENT_FIRST
        self.username: str | None = None  # the authenticated user, once complete
        self._first: ClientFirst | None = None
        self._server_first: str | None = None
        self._credential: ScramCredential | None = None

    @property
    def complete(self) -> bool:
        return self.state is ScramState.COMPLETE

    def step(self, message: bytes) -> ScramStep:
        if self.state is ScramState.RECEIVE_CLIENT_FIRST:
            handler = self._client_first
        elif self.state is ScramState.RECEIVE_CLIENT_FINAL:
            handler = self._client_final
        else:
            reason = f"a SCRAM message arrived in state {self.state.value}"
            return ScramStep(self.state, failure=SaslFailure(reason, f"Unexpected SASL message: {reason}",
                                                              ErrorCode.ILLEGAL_SASL_STATE))
        try:
            challenge = handler(message)
        except (MalformedScram, RefusedScram) as e:
            return self._refuse(hidden_failure(self.mechanism.mechanism_name, str(e)))
        except _VisibleRefusal as e:
            return self._refuse(visible_failure(str(e)))
        self.state = next_state(self.state, ACCEPTED)
        return ScramStep(self.state, challenge=challenge)

    def _refuse(self, failure: SaslFailure) -> ScramStep:
        self.state = next_state(self.state, REFUSED)
        self._forget()
        return ScramStep(self.state, failure=failure)

    def _forget(self) -> None:
        self._first = self._server_first = self._credential = None

    def _client_first(self, message: bytes) -> bytes:
        first = parse_client_first(message)
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise RefusedScram("delegation token authentication (tokenauth) is not supported")
        credential = self.credentials.get(first.username)
        if credential is None or credential.mechanism is not self.mechanism:
            raise RefusedScram(f"no {self.mechanism.mechanism_name} credential for user {first.username!r}")
        if first.authzid and first.authzid != first.username:
            raise _VisibleRefusal("Client requested an authorization id that is different from username")
        if credential.iterations < ITERATIONS_MIN:
            raise RefusedScram(f"the stored credential has {credential.iterations} iterations, "
                               f"less than the minimum {ITERATIONS_MIN}")
        self._first, self._credential = first, credential
        self._server_first = server_first_message(first.nonce + self.server_nonce, credential.salt,
                                                  credential.iterations)
        return self._server_first.encode("ascii")

    def _client_final(self, message: bytes) -> bytes:
        final = parse_client_final(message)
        first, credential = self._first, self._credential
        expected_binding = base64.b64encode(first.gs2_header.encode("utf-8")).decode("ascii")
        if final.channel_binding != expected_binding:
            raise RefusedScram("client-final: the channel binding does not repeat the gs2 header")
        if not hmac.compare_digest(final.nonce.encode(), (first.nonce + self.server_nonce).encode()):
            raise RefusedScram("client-final: the nonce is not the one of this exchange")
        if len(final.proof) != self.mechanism.digest_bytes:
            raise MalformedScram(f"client-final: a proof has {self.mechanism.digest_bytes} bytes, "
                                 f"not {len(final.proof)}")
        message_to_sign = auth_message(first.bare, self._server_first, final.without_proof)
        client_signature = _hmac(self.mechanism, credential.stored_key, message_to_sign)
        client_key = bytes(p ^ s for p, s in zip(final.proof, client_signature))
        if not hmac.compare_digest(_hash(self.mechanism, client_key), credential.stored_key):
            raise RefusedScram(f"wrong proof for user {first.username!r}")
        server_signature = _hmac(self.mechanism, credential.server_key, message_to_sign)
        self.username = first.username
        self._forget()
        return b"v=" + base64.b64encode(server_signature)


class _VisibleRefusal(ValueError):
    """A refusal whose reason the client may read (it reveals nothing about stored users)."""


# --- the client side (Kray's tools) --------------------------------------------------------------

class ScramClientError(ValueError):
    """The server's SCRAM messages cannot be trusted: a foreign nonce, too few iterations, a bad
    signature, or an error (`e=`) it sent."""


class ScramClient:
    """The client side of one exchange, sans-IO, for Kray's own tools: `first_message()`, then
    `final_message(server first)`, then `verify(server final)`, each raising ScramClientError when
    the server's message is wrong. Like Kafka's client, iterations below 4096 are refused."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None):
        self.mechanism, self.username, self._password = mechanism, username, password
        self.nonce = _check_nonce(nonce) if nonce is not None else secrets.token_urlsafe(SERVER_NONCE_BYTES)
        self._bare = f"n={encode_saslname(username)},r={self.nonce}"
        self._server_signature: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism.mechanism_name}, {self.username!r}, password=<hidden>)"

    def first_message(self) -> bytes:
        return f"n,,{self._bare}".encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        try:
            text = _text(server_first)
            fields = dict(part.split("=", 1) for part in text.split(","))
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"], validate=True), int(fields["i"])
        except (MalformedScram, KeyError, ValueError, binascii.Error):
            raise ScramClientError(f"malformed server-first message {bytes(server_first)[:64]!r}") from None
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise ScramClientError("the server's nonce does not extend the client's")
        if iterations < ITERATIONS_MIN:
            raise ScramClientError(f"the server asks for {iterations} iterations, less than the minimum "
                                   f"{ITERATIONS_MIN}")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        without_proof = f"c={base64.b64encode(b'n,,').decode('ascii')},r={nonce}"
        message = auth_message(self._bare, text, without_proof)
        signature = _hmac(self.mechanism, _hash(self.mechanism, client_key), message)
        proof = bytes(k ^ s for k, s in zip(client_key, signature))
        self._server_signature = _hmac(self.mechanism, _hmac(self.mechanism, salted, b"Server Key"), message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("ascii")

    def verify(self, server_final: bytes) -> None:
        text = bytes(server_final).decode("utf-8", "replace")
        if text.startswith("e="):
            raise ScramClientError(f"the server refused: {text[2:]}")
        if self._server_signature is None or not text.startswith("v=") or not hmac.compare_digest(
                text[2:].encode("ascii", "replace"), base64.b64encode(self._server_signature)):
            raise ScramClientError("the server's signature is wrong: it does not know this user's credential")
