"""SASL/PLAIN (actors/security/plain.py) and Kafka's JAAS config strings (jaas.py)."""
import pytest

from protocol.errors import ErrorCode

from actors.security.jaas import parse_jaas_config
from actors.security.plain import (
    PLAIN_MESSAGE_BYTES_MAX, PlainServer, parse_plain, password_matches, plain_users_from_jaas)

BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
               'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def users():
    return plain_users_from_jaas(BROKER_JAAS)


def test_the_user_options_are_the_accepted_users():
    assert users() == {"admin": "admin-secret", "alice": "alice-secret"}


def test_jaas_entries_flags_options_quotes_and_comments():
    text = """
        // the broker's users
        org.apache.kafka.common.security.plain.PlainLoginModule Required
            username='admin' /* its own login */ password="a \\"quoted\\" \\\\ pw"
            user_bob-1=bare_word$x.y;
        com.example.Other optional;
    """
    first, second = parse_jaas_config(text)
    assert first.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert first.control_flag == "required"
    assert first.options == {"username": "admin", "password": 'a "quoted" \\ pw', "user_bob-1": "bare_word$x.y"}
    assert second.login_module == "com.example.Other" and second.options == {}


def test_user_prefix_alone_is_not_a_user_and_only_the_plain_module_counts():
    text = ('com.example.Other required user_eve="x"; '
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_="y" user_carol="z";')
    assert plain_users_from_jaas(text) == {"carol": "z"}
    with pytest.raises(ValueError, match="no org.apache.kafka.common.security.plain.PlainLoginModule"):
        plain_users_from_jaas('com.example.Other required user_eve="x";')


@pytest.mark.parametrize("text, message", [
    ("", "login module not specified"),
    ("   // nothing\n", "login module not specified"),
    ("org.Module", "control flag not specified"),
    ("org.Module mandatory;", "invalid login module control flag 'mandatory'"),
    ('org.Module required user_a="x"', "not terminated by a semicolon"),
    ("org.Module required user_a=;", "value not specified for key 'user_a'"),
    ('org.Module required user_a "x";', "value not specified for key 'user_a'"),
    ('org.Module required ="x";', "expected an option name"),
    ('org.Module required user_a="x;', "not closed"),
    ("org.Module required /* open", "comment is not closed"),
    ('"org.Module" required;', "expected a login module class name"),
])
def test_bad_jaas_configs_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_jaas_config(text)


def test_a_good_password_completes_with_the_user_name():
    server = PlainServer(users())
    step = server.step(b"\x00alice\x00alice-secret")
    assert step.complete and step.failure is None and step.challenge == b""
    assert server.complete and server.username == "alice"


def test_an_authzid_equal_to_the_user_is_accepted_another_refused():
    assert PlainServer(users()).step(b"alice\x00alice\x00alice-secret").complete
    step = PlainServer(users()).step(b"admin\x00alice\x00alice-secret")
    assert not step.complete
    assert step.failure.client_message == ("Authentication failed: Client requested an authorization id "
                                           "that is different from username")


@pytest.mark.parametrize("message", [b"\x00alice\x00wrong", b"\x00mallory\x00alice-secret",
                                     b"\x00alice\x00alice-secret2", b"\x00alice\x00alice-secre"])
def test_wrong_password_and_unknown_user_get_the_same_answer(message):
    server = PlainServer(users())
    step = server.step(message)
    assert not step.complete and server.username is None
    assert step.failure.client_message == "Authentication failed: Invalid username or password"
    assert step.failure.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


@pytest.mark.parametrize("message, text", [
    (b"alice-secret", "expected 3 tokens, got 1"),
    (b"alice\x00alice-secret", "expected 3 tokens, got 2"),
    (b"\x00alice\x00pw\x00extra", "expected 3 tokens, got 4"),
    (b"\x00alice\x00pw\x00a\x00b", "expected 3 tokens, got 4"),
    (b"\x00\x00pw", "username not specified"),
    (b"\x00alice\x00", "password not specified"),
    (b"\x00al\xffice\x00pw", "not UTF-8"),
    (b"\x00alice\x00" + b"p" * PLAIN_MESSAGE_BYTES_MAX, "exceed"),
])
def test_malformed_messages(message, text):
    step = PlainServer(users()).step(message)
    assert not step.complete and text in step.failure.client_message


def test_the_largest_message_rfc4616_requires_is_accepted():
    name, password = "u" * 255, "p" * 255
    server = PlainServer({name: password})
    assert server.step(("\x00" + name + "\x00" + password).encode()).complete


def test_non_ascii_credentials():
    server = PlainServer({"zoë": "pässwörd"})
    assert server.step("\x00zoë\x00pässwörd".encode()).complete


def test_one_message_per_exchange():
    server = PlainServer(users())
    server.step(b"\x00alice\x00alice-secret")
    again = server.step(b"\x00admin\x00admin-secret")
    assert again.failure.error_code == ErrorCode.ILLEGAL_SASL_STATE and server.username == "alice"
    failed = PlainServer(users())
    failed.step(b"\x00alice\x00nope")
    assert failed.step(b"\x00alice\x00alice-secret").failure.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert not failed.complete


def test_password_compare_and_repr():
    assert password_matches("x", "x") and not password_matches("x", "y") and not password_matches("x", None)
    assert not password_matches("\x00" * 32, None)
    assert "alice-secret" not in repr(parse_plain(b"\x00alice\x00alice-secret"))
