"""SCRAM credentials and the server-side exchange (actors/security/scram.py): RFC 7677's
SCRAM-SHA-256 test vector end to end, a SCRAM-SHA-512 round trip against a client computed here,
and every way a client can get it wrong."""
import base64
import hashlib
import hmac

import pytest

from protocol.errors import ErrorCode

from actors.security.scram import (
    ITERATIONS_MAX, ITERATIONS_MIN, SCRAM_MESSAGE_BYTES_MAX, TRANSITIONS, ScramMechanism, ScramServer, ScramState,
    credential_from_salted_password, decode_saslname, encode_saslname, make_credential, salted_password)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677 section 3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server():
    credential = make_credential(SHA256, "pencil", salt=RFC_SALT, iterations=4096)
    return ScramServer(SHA256, {"user": credential}, server_nonce=RFC_SERVER_NONCE)


class Client:
    """A SCRAM client written from RFC 5802 alone, to check the server against."""

    def __init__(self, mechanism, username, password, nonce="fyko+d2lbbFgONRv9qkxdawL", authzid=""):
        self.mechanism, self.password, self.nonce = mechanism, password, nonce
        self.gs2 = f"n,{'a=' + authzid if authzid else ''},"
        self.bare = f"n={username.replace('=', '=3D').replace(',', '=2C')},r={nonce}"

    def first(self) -> bytes:
        return (self.gs2 + self.bare).encode()

    def final(self, server_first: bytes) -> bytes:
        fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
        assert fields["r"].startswith(self.nonce)
        h = self.mechanism.hash_name
        salted = hashlib.pbkdf2_hmac(h, self.password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", h).digest()
        stored_key = hashlib.new(h, client_key).digest()
        without_proof = f"c={base64.b64encode(self.gs2.encode()).decode()},r={fields['r']}"
        self.auth_message = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, self.auth_message, h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.server_key = hmac.new(salted, b"Server Key", h).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verifier(self) -> bytes:
        return b"v=" + base64.b64encode(hmac.new(self.server_key, self.auth_message, self.mechanism.hash_name).digest())


def test_rfc7677_vector_end_to_end():
    server = rfc_server()
    first = server.step(RFC_CLIENT_FIRST)
    assert first.failure is None and first.challenge == RFC_SERVER_FIRST
    assert first.state is ScramState.RECEIVE_CLIENT_FINAL and not server.complete
    final = server.step(RFC_CLIENT_FINAL)
    assert final.failure is None and final.challenge == RFC_SERVER_FINAL
    assert final.state is ScramState.COMPLETE and server.complete and server.username == "user"


def test_our_client_matches_the_rfc_vector():
    client = Client(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.verifier() == RFC_SERVER_FINAL


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_round_trip_with_an_independent_client(mechanism):
    credential = make_credential(mechanism, "s3cr=t,pw", iterations=ITERATIONS_MIN)
    server = ScramServer(mechanism, {"ali,ce=": credential})
    client = Client(mechanism, "ali,ce=", "s3cr=t,pw", authzid="ali=2Cce=3D")
    server_first = server.step(client.first())
    assert server_first.failure is None
    final = server.step(client.final(server_first.challenge))
    assert final.failure is None, final.failure
    assert final.challenge == client.verifier()
    assert server.username == "ali,ce="


def test_credentials_keep_keys_not_the_password():
    credential = make_credential(SHA512, "hunter2", iterations=4096)
    assert len(credential.salt) >= 16 and len(credential.stored_key) == len(credential.server_key) == 64
    assert b"hunter2" not in credential.salt + credential.stored_key + credential.server_key
    assert "hunter2" not in repr(credential) and "stored_key" not in repr(credential)
    again = make_credential(SHA512, "hunter2", iterations=4096)
    assert again.salt != credential.salt and again.stored_key != credential.stored_key


def test_a_credential_from_the_salted_password_kip554_sends():
    salted = salted_password(SHA256, "pencil", RFC_SALT, 4096)
    assert credential_from_salted_password(SHA256, RFC_SALT, salted, 4096) == \
        make_credential(SHA256, "pencil", salt=RFC_SALT, iterations=4096)
    with pytest.raises(ValueError, match="salted password is empty"):
        credential_from_salted_password(SHA256, RFC_SALT, b"", 4096)
    with pytest.raises(ValueError, match="salt is empty"):
        credential_from_salted_password(SHA256, b"", salted, 4096)


def test_iterations_have_kafkas_bounds():
    with pytest.raises(ValueError, match="less than the minimum 4096"):
        make_credential(SHA256, "pw", iterations=4095)
    with pytest.raises(ValueError, match="more than the maximum 16384"):
        make_credential(SHA256, "pw", iterations=ITERATIONS_MAX + 1)


def test_mechanism_names_and_kafka_type_ids():
    assert ScramMechanism.from_name("SCRAM-SHA-512") is SHA512 and ScramMechanism.from_name("PLAIN") is None
    assert ScramMechanism.from_type_id(1) is SHA256 and ScramMechanism.from_type_id(2) is SHA512
    assert SHA256.digest_bytes == 32 and SHA512.digest_bytes == 64


def test_saslname_escapes():
    assert encode_saslname("a,b=c") == "a=2Cb=3Dc"
    assert decode_saslname("a=2Cb=3Dc") == "a,b=c"
    for bad in ("a=2", "a=41", "="):
        with pytest.raises(ValueError):
            decode_saslname(bad)


def test_states_are_a_table():
    assert TRANSITIONS[(ScramState.RECEIVE_CLIENT_FIRST, "accepted")] is ScramState.RECEIVE_CLIENT_FINAL
    assert TRANSITIONS[(ScramState.RECEIVE_CLIENT_FINAL, "accepted")] is ScramState.COMPLETE
    assert {to for (_, event), to in TRANSITIONS.items() if event == "refused"} == {ScramState.FAILED}
    assert not any(state in (ScramState.COMPLETE, ScramState.FAILED) for state, _ in TRANSITIONS)


def failed(step, reason_part):
    assert step.state is ScramState.FAILED and step.challenge is None, step
    assert reason_part in step.failure.reason, step.failure.reason
    assert step.failure.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    return step.failure


def test_wrong_password_fails_with_a_generic_client_message():
    server = ScramServer(SHA256, {"user": make_credential(SHA256, "pencil", iterations=4096)})
    client = Client(SHA256, "user", "crayon")
    failure = failed(server.step(client.final(server.step(client.first()).challenge)), "wrong proof")
    assert failure.client_message == ("Authentication failed during authentication due to invalid credentials "
                                      "with SASL mechanism SCRAM-SHA-256")
    assert "user" not in failure.client_message
    assert server.username is None and not server.complete


def test_unknown_user_and_other_mechanism_look_alike_to_the_client():
    store = {"sha512-only": make_credential(SHA512, "pw", iterations=4096)}
    unknown = failed(ScramServer(SHA256, store).step(Client(SHA256, "nobody", "pw").first()), "no SCRAM-SHA-256")
    other = failed(ScramServer(SHA256, store).step(Client(SHA256, "sha512-only", "pw").first()), "no SCRAM-SHA-256")
    assert unknown.client_message == other.client_message


def test_a_stored_credential_below_the_minimum_iterations_is_refused():
    weak = credential_from_salted_password(SHA256, b"salt", bytes(32), 4096)
    weak = type(weak)(SHA256, weak.salt, weak.stored_key, weak.server_key, 1000)
    failed(ScramServer(SHA256, {"u": weak}).step(b"n,,n=u,r=abc"), "less than the minimum")


def test_an_authzid_other_than_the_user_is_refused_and_the_client_told_why():
    server = ScramServer(SHA256, {"user": make_credential(SHA256, "pencil", iterations=4096)})
    failure = failed(server.step(b"n,a=admin,n=user,r=abc"), "authorization id")
    assert "authorization id that is different from username" in failure.client_message


def test_delegation_tokens_are_refused():
    server = ScramServer(SHA256, {"user": make_credential(SHA256, "pencil", iterations=4096)})
    failed(server.step(b"n,,n=user,r=abc,tokenauth=true"), "tokenauth")


def test_unknown_extensions_are_ignored_as_kafka_does():
    server = rfc_server()
    assert server.step(RFC_CLIENT_FIRST + b",foo=bar").failure is None


@pytest.mark.parametrize("message, reason", [
    (b"", "no gs2 header"),
    (b"n,,", "expected 'n=user,r=nonce'"),
    (b"x,,n=user,r=abc", "unknown gs2 flag"),
    (b"p=tls-unique,,n=user,r=abc", "channel binding is not supported"),
    (b"y,,n=user,r=abc", "channel binding is not supported"),
    (b"n,,m=ext,n=user,r=abc", "mandatory extension"),
    (b"n,,r=abc,n=user", "expected 'n='"),
    (b"n,,n=user,s=abc", "expected 'r='"),
    (b"n,,n=,r=abc", "user name is empty"),
    (b"n,,n=us=er,r=abc", "'=' in a name"),
    (b"n,,n=user,r=", "nonce is empty"),
    (b"n,,n=user,r=ab\x7fc", "printable ASCII"),
    (b"n,,n=user,r=abc,=x", "malformed extension"),
    (b"n,x=y,n=user,r=abc", "expected 'a='"),
    (b"n,,n=user,r=\xff\xfe", "not UTF-8"),
    (b"n,,n=us\x00er,r=abc", "NUL"),
    (b"n,,n=user,r=" + b"a" * SCRAM_MESSAGE_BYTES_MAX, "exceeds"),
])
def test_malformed_client_first(message, reason):
    failure = failed(rfc_server().step(message), reason)
    assert failure.client_message.startswith("Authentication failed during authentication")


@pytest.mark.parametrize("message, reason", [
    (b"c=biws,r=" + RFC_CLIENT_NONCE.encode(), "expected 'c=...,r=...,p=...'"),
    (b"r=x,c=biws,p=abcd", "expected 'c='"),
    (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=***", "not base64"),
    (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA", "32 bytes"),
    (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,x=1", "expected 'p='"),
    (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel binding"),
])
def test_malformed_client_final(message, reason):
    server = rfc_server()
    assert server.step(RFC_CLIENT_FIRST).failure is None
    failed(server.step(message), reason)


def test_a_replayed_or_altered_nonce_is_refused():
    # the RFC's client-final replayed against an exchange with a fresh server nonce
    server = ScramServer(SHA256, {"user": make_credential(SHA256, "pencil", salt=RFC_SALT, iterations=4096)})
    assert server.step(RFC_CLIENT_FIRST).failure is None
    failed(server.step(RFC_CLIENT_FINAL), "nonce is not the one of this exchange")
    # only the client's part of the nonce echoed back (Kafka checks only a suffix; we want all of it)
    server = rfc_server()
    server.step(RFC_CLIENT_FIRST)
    failed(server.step(RFC_CLIENT_FINAL.replace(b"rOprNGfwEbeRWgbNEkqO%", b"%")), "nonce")
    # a proof computed for one nonce does not pass with a nonce altered by one character
    server = rfc_server()
    server.step(RFC_CLIENT_FIRST)
    failed(server.step(RFC_CLIENT_FINAL.replace(b"k0,", b"k1,")), "nonce")


def test_no_message_is_taken_after_the_end():
    server = rfc_server()
    server.step(RFC_CLIENT_FIRST)
    server.step(RFC_CLIENT_FINAL)
    late = server.step(RFC_CLIENT_FINAL)
    assert late.state is ScramState.COMPLETE and late.failure.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert server.username == "user"
    broken = rfc_server()
    broken.step(b"garbage")
    again = broken.step(RFC_CLIENT_FIRST)
    assert again.state is ScramState.FAILED and again.failure.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_server_nonces_are_fresh_and_printable():
    nonces = {ScramServer(SHA256, {}).server_nonce for _ in range(20)}
    assert len(nonces) == 20
    assert all(all(0x21 <= ord(c) <= 0x7E and c != "," for c in n) for n in nonces)
    with pytest.raises(ValueError):
        ScramServer(SHA256, {}, server_nonce="has,comma")


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_the_tools_client_logs_in_and_checks_the_server(mechanism):
    from actors.security.scram import ScramClient, ScramClientError
    credential = make_credential(mechanism, "pw,=é", iterations=4096)
    server = ScramServer(mechanism, {"us,er=": credential})
    client = ScramClient(mechanism, "us,er=", "pw,=é")
    assert "pw" not in repr(client)
    first = server.step(client.first_message())
    final = server.step(client.final_message(first.challenge))
    assert final.complete and server.username == "us,er="
    client.verify(final.challenge)
    with pytest.raises(ScramClientError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"x" * mechanism.digest_bytes))
    with pytest.raises(ScramClientError, match="nonce"):
        ScramClient(mechanism, "u", "p", nonce="abc").final_message(b"r=xyz123,s=AAAA,i=4096")
    with pytest.raises(ScramClientError, match="minimum"):
        ScramClient(mechanism, "u", "p", nonce="abc").final_message(b"r=abc123,s=AAAA,i=1")
    with pytest.raises(ScramClientError, match="malformed"):
        ScramClient(mechanism, "u", "p", nonce="abc").final_message(b"garbage")
