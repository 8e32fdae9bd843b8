"""Per-listener security read from a broker config (actors/security/settings.py), the
config keys Kray accepts for it (actors/config_schema.py), and file regions sent over TLS."""
import asyncio
import os
import ssl

import pytest

from actors.gateway.file_region import FileRegion, write_frame
from actors.security.listeners import SecurityProtocol
from actors.security.settings import security_settings
from actors.security.tls import SecurityConfigError, listener_value
from actors.config_schema import BROKER_DEFAULTS, ConfigError, is_sensitive, with_listener
from cluster.config import load_broker_config
from tests.tls_certs import make_pki

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def config(**keys):
    return dict(BROKER_DEFAULTS) | {k.replace("_", "."): v for k, v in keys.items()}


def secured(pki, **extra):
    return dict(BROKER_DEFAULTS) | {
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "listener.name.ssl.ssl.client.auth": "required", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS, "connections.max.reauth.ms": 60000} | extra


def test_the_default_config_is_one_plaintext_listener():
    settings = security_settings(BROKER_DEFAULTS)
    assert [lst.connection_string for lst in settings.listeners.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    security = settings.by_listener["PLAINTEXT"]
    assert security.ssl_context is None and security.mechanisms == ()


def test_each_listener_gets_its_protocols_settings(pki):
    settings = security_settings(secured(pki))
    ssl_listener, sasl_ssl = settings.by_listener["SSL"], settings.by_listener["SASL_SSL"]
    assert ssl_listener.protocol is SecurityProtocol.SSL and ssl_listener.client_auth == "required"
    assert ssl_listener.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert sasl_ssl.client_auth == "none" and sasl_ssl.ssl_context.verify_mode == ssl.CERT_NONE
    assert sasl_ssl.mechanisms == ("PLAIN",) and sasl_ssl.plain_users == {"alice": "alice-secret"}
    assert sasl_ssl.reauth_ms == 60000 and sasl_ssl.failed_auth_delay_ms == 100
    assert settings.primary.name == "PLAINTEXT"


def test_inline_pem_and_an_encrypted_key(pki):
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(pki.server_key, None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"key-pass")).decode()
    settings = security_settings(secured(pki, **{
        "ssl.keystore.location": None, "ssl.keystore.certificate.chain": pki.server_cert.decode(),
        "ssl.keystore.key": encrypted, "ssl.key.password": "key-pass", "ssl.truststore.location": None,
        "ssl.truststore.certificates": pki.ca_file.read_text()}))
    assert settings.by_listener["SSL"].ssl_context is not None
    with pytest.raises(ssl.SSLError):
        security_settings(secured(pki, **{"ssl.keystore.location": None,
                                          "ssl.keystore.certificate.chain": pki.server_cert.decode(),
                                          "ssl.keystore.key": encrypted, "ssl.key.password": "wrong"}))


def test_listener_prefixed_keys_win_key_by_key():
    cfg = {"ssl.client.auth": "none", "listener.name.internal.ssl.client.auth": "required",
           "listener.name.INTERNAL.ssl.keystore.type": "PEM"}
    assert listener_value(cfg, "INTERNAL", "ssl.client.auth") == "required"
    assert listener_value(cfg, "internal", "ssl.keystore.type") == "PEM"
    assert listener_value(cfg, "EXTERNAL", "ssl.client.auth") == "none"
    assert listener_value(cfg, "EXTERNAL", "ssl.keystore.type", "JKS") == "JKS"


@pytest.mark.parametrize("extra, words", [
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type=PEM"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN"),
    ({"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}, "serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"listener.name.sasl_ssl.plain.sasl.jaas.config": None}, "plain.sasl.jaas.config"),
    ({"listener.name.ssl.ssl.client.auth": "sometimes"}, "ssl.client.auth must be"),
    ({"inter.broker.listener.name": "SASL_SSL"}, "listener.name.sasl_ssl.sasl.enabled.mechanisms"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094,"
                   "SASL_PLAINTEXT://127.0.0.1:9095", "inter.broker.listener.name": "SASL_PLAINTEXT",
      "sasl.jaas.config": JAAS}, "listener.name.sasl_plaintext.sasl.enabled.mechanisms"),
    ({"listener.name.sasl_ssl.plain.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
      'required user_kray-broker="x";'}, "Kray's own brokers"),
    ({"ssl.keystore.location": None}, "ssl.keystore.location"),
])
def test_configs_kray_cannot_serve_say_what_to_set(pki, extra, words):
    with pytest.raises(SecurityConfigError, match=words.replace(".", r"\.").replace("=", "=")):
        security_settings(secured(pki, **extra))


def test_a_tls_inter_broker_listener_gives_followers_a_checking_client(pki):
    from actors.security.tls import broker_client_ssl_context
    config = secured(pki, **{"inter.broker.listener.name": "SSL"})
    assert security_settings(config).listeners.inter_broker_listener.name == "SSL"
    client = broker_client_ssl_context(config, "SSL")
    assert client.check_hostname and client.verify_mode.name == "CERT_REQUIRED"
    assert not broker_client_ssl_context(config | {"ssl.endpoint.identification.algorithm": ""}, "SSL").check_hostname


def test_the_unprefixed_jaas_config_is_a_fallback(pki):
    settings = security_settings(secured(pki, **{"listener.name.sasl_ssl.plain.sasl.jaas.config": None,
                                                 "sasl.jaas.config": JAAS}))
    assert settings.by_listener["SASL_SSL"].plain_users == {"alice": "alice-secret"}


def test_security_keys_load_from_overrides_and_secrets_are_sensitive():
    loaded = load_broker_config(None, ["listeners=PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2",
                                       f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
                                       "listener.name.sasl_plaintext.connections.max.reauth.ms=5000",
                                       "sasl.enabled.mechanisms=PLAIN"])
    assert loaded["listener.name.sasl_plaintext.connections.max.reauth.ms"] == 5000
    assert security_settings(loaded).by_listener["SASL_PLAINTEXT"].reauth_ms == 5000
    with pytest.raises(ConfigError, match="unknown broker config"):
        load_broker_config(None, ["listener.name.x.not.a.key=1"])
    assert is_sensitive("sasl.jaas.config") and is_sensitive("listener.name.x.plain.sasl.jaas.config")
    assert is_sensitive("listener.name.ssl.ssl.key.password") and not is_sensitive("ssl.client.auth")


def test_port_and_host_flags_with_several_listeners():
    cfg = config(listeners="SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092")
    moved = with_listener(cfg, "0.0.0.0", 19092)
    assert moved["listeners"] == "SSL://0.0.0.0:9093,PLAINTEXT://0.0.0.0:19092"  # --port: the primary one
    assert with_listener(cfg, None, None, all_ports=0)["listeners"] == "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"


def test_a_file_region_over_tls_is_read_and_written_whole(pki, tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(data)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(pki.server_keystore))
    client_context = ssl.create_default_context(cafile=str(pki.ca_file))
    frame = [b"head", FileRegion.open(str(segment), 5, len(data) - 5), b"tail"]
    expected = b"head" + data[5:] + b"tail"

    async def run():
        sent = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            try:
                await write_frame(writer, frame)
                sent.set_result(True)
            except BaseException as e:
                sent.set_exception(e)
            finally:
                writer.close()
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context,
                                                       server_hostname="localhost")
        received = await reader.readexactly(len(expected))
        await sent
        writer.close()
        server.close()
        return received
    assert asyncio.run(run()) == expected
    assert frame[1].file.closed


def test_scram_mechanisms_are_enabled_and_need_no_jaas_users(pki):
    settings = security_settings(secured(pki, **{"sasl.enabled.mechanisms": "SCRAM-SHA-512,scram-sha-256",
                                                 "listener.name.sasl_ssl.plain.sasl.jaas.config": None}))
    sasl_ssl = settings.by_listener["SASL_SSL"]
    assert sasl_ssl.mechanisms == ("SCRAM-SHA-512", "SCRAM-SHA-256") and sasl_ssl.plain_users == {}
