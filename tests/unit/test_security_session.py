"""A connection's authentication state machine (actors/security/session.py): which
requests it admits in each state, SaslHandshake v0/v1, PLAIN, failures and KIP-368 re-auth."""
from protocol.errors import ErrorCode

from actors.security.plain import PlainServer
from actors.security.principal import ANONYMOUS, KafkaPrincipal
from actors.security.session import (API_API_VERSIONS, API_SASL_AUTHENTICATE, API_SASL_HANDSHAKE, Action,
                                     ConnectionSession, State)

PRODUCE, METADATA = 0, 3
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def session(reauth_ms: int = 0) -> ConnectionSession:
    return ConnectionSession(sasl=True, mechanisms={"PLAIN": lambda: PlainServer(USERS)}, enabled=("PLAIN",),
                             reauth_ms=reauth_ms)


def plain(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def logged_in(s: ConnectionSession, now_ms: int = 0, user: str = "alice"):
    assert s.admit(API_SASL_HANDSHAKE, now_ms).action is Action.SASL
    assert s.handshake("PLAIN", 1).error_code == 0
    assert s.admit(API_SASL_AUTHENTICATE, now_ms).action is Action.SASL
    return s.authenticate(plain(user, USERS[user]), now_ms)


def test_a_listener_without_sasl_serves_everything_as_its_principal():
    s = ConnectionSession(sasl=False)
    assert s.authenticated and s.principal == ANONYMOUS
    for api in (PRODUCE, METADATA, API_API_VERSIONS, API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE):
        assert s.admit(api, 0).action is Action.SERVE  # SASL APIs go to handlers answering ILLEGAL_SASL_STATE
    cert = KafkaPrincipal.user("CN=client")
    assert ConnectionSession(sasl=False, principal=cert).principal == cert


def test_before_authentication_only_api_versions_and_the_handshake_are_admitted():
    s = session()
    assert s.principal is None and not s.authenticated
    assert s.admit(API_API_VERSIONS, 0).action is Action.SERVE
    assert s.admit(API_API_VERSIONS, 0).action is Action.SERVE  # a client may ask again (v0 fallback)
    for api in (PRODUCE, METADATA, API_SASL_AUTHENTICATE):
        admission = session().admit(api, 0)
        assert admission.action is Action.CLOSE and "during SASL handshake" in admission.reason


def test_after_the_handshake_only_sasl_authenticate_is_admitted():
    s = session()
    s.handshake("PLAIN", 1)
    assert s.state is State.AUTHENTICATE
    for api in (PRODUCE, API_API_VERSIONS, API_SASL_HANDSHAKE):
        assert s.admit(api, 0).action is Action.CLOSE


def test_plain_login_then_every_request_is_served_as_the_user():
    s = session()
    answer = logged_in(s)
    assert answer.error_code == 0 and not answer.close and answer.auth_bytes == b""
    assert answer.session_lifetime_ms == 0 and s.expires_at_ms is None
    assert s.authenticated and s.principal == KafkaPrincipal.user("alice")
    assert s.admit(PRODUCE, 10**12).action is Action.SERVE  # no re-authentication asked: never expires
    assert s.admit(API_SASL_AUTHENTICATE, 0).action is Action.CLOSE  # without a new handshake


def test_a_wrong_password_fails_with_kafkas_message_and_closes():
    s = session()
    s.handshake("PLAIN", 1)
    answer = s.authenticate(plain("alice", "wrong"), 0)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and answer.close
    assert answer.error_message == "Authentication failed: Invalid username or password"
    assert s.state is State.FAILED and s.principal is None
    assert s.admit(API_API_VERSIONS, 0).action is Action.CLOSE
    unknown = session()
    unknown.handshake("PLAIN", 1)
    assert unknown.authenticate(plain("mallory", "x"), 0).error_message == answer.error_message  # no user oracle


def test_an_unsupported_mechanism_answers_the_enabled_list_and_closes():
    s = session()
    answer = s.handshake("SCRAM-SHA-512", 1)
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and answer.mechanisms == ["PLAIN"]
    assert answer.close and s.state is State.FAILED


def test_handshake_v0_takes_a_raw_token():
    s = session()
    assert s.handshake("PLAIN", 0).error_code == 0
    assert s.expects_raw_token and s.admit(PRODUCE, 0).action is Action.CLOSE
    answer = s.authenticate(plain("bob", "bob-secret"), 0)
    assert answer.error_code == 0 and s.principal == KafkaPrincipal.user("bob")
    bad = session()
    bad.handshake("PLAIN", 0)
    assert bad.authenticate(b"garbage", 0).close


def test_reauthentication_extends_the_session_kip_368():
    s = session(reauth_ms=1000)
    answer = logged_in(s, now_ms=0)
    assert answer.session_lifetime_ms == 1000 and s.expires_at_ms == 1000
    assert s.admit(PRODUCE, 999).action is Action.SERVE
    closed = s.admit(PRODUCE, 1000)
    assert closed.action is Action.CLOSE and "expired" in closed.reason
    again = logged_in(s, now_ms=1200)  # a handshake is admitted after expiry: re-authentication
    assert again.error_code == 0 and again.session_lifetime_ms == 1000 and s.expires_at_ms == 2200
    assert s.admit(PRODUCE, 1300).action is Action.SERVE and s.principal == KafkaPrincipal.user("alice")


def test_reauthentication_may_change_neither_principal_nor_mechanism():
    s = session(reauth_ms=1000)
    logged_in(s)
    s.handshake("PLAIN", 1)
    answer = s.authenticate(plain("bob", "bob-secret"), 10)
    assert answer.close and answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals during re-authentication" in answer.error_message
    other = ConnectionSession(sasl=True, mechanisms={"PLAIN": lambda: PlainServer(USERS), "OTHER": lambda: None},
                              enabled=("PLAIN", "OTHER"))
    logged_in(other)
    assert other.handshake("OTHER", 1).error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_reauthentication_needs_handshake_v1():
    s = session(reauth_ms=1000)
    logged_in(s)
    assert s.handshake("PLAIN", 0).close and s.state is State.FAILED


def test_a_failed_reauthentication_says_re_authentication():
    class Refusing:
        def step(self, message):
            from actors.security.outcome import hidden_failure
            from actors.security.plain import PlainStep
            return PlainStep(False, failure=hidden_failure("PLAIN", "no"))
    calls = []

    def factory():
        calls.append(1)
        return PlainServer(USERS) if len(calls) == 1 else Refusing()
    s = ConnectionSession(sasl=True, mechanisms={"PLAIN": factory}, enabled=("PLAIN",), reauth_ms=100)
    logged_in(s)
    s.handshake("PLAIN", 1)
    answer = s.authenticate(plain("alice", "alice-secret"), 0)
    assert answer.close and "during re-authentication" in answer.error_message
