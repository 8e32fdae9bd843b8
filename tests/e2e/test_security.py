"""Security with real clients against a real `kray start` (issue 18): four listeners on one broker,
PLAINTEXT (the inter-broker one), SSL with client certificates required, SASL_PLAINTEXT and
SASL_SSL with PLAIN (SASL_SSL also asks clients to re-authenticate, KIP-368). Certificates are
made here, in a temporary directory."""
from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from protocol.errors import ErrorCode
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader, decode_response_header, encode_request
from protocol.messages import (ApiVersionsRequest, DescribeClusterRequest, MetadataRequest, SaslAuthenticateRequest,
                               SaslHandshakeRequest)
from protocol.apis import API_BY_KEY
from tests.kray_process import KrayProcess, free_port
from tests.tls_certs import make_pki

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
REAUTH_MS = 4000
FAILED_AUTH_DELAY_MS = 300


class Secured:
    def __init__(self, pki, ports, bootstrap):
        self.pki, self.ports, self.plaintext = pki, ports, bootstrap

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    ports = {name: free_port() for name in ("SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    overrides = (
        "listeners=PLAINTEXT://127.0.0.1:0," + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_keystore}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca_file}",
        "listener.name.ssl.ssl.client.auth=required",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.connections.max.reauth.ms={REAUTH_MS}",
        f"connection.failed.authentication.delay.ms={FAILED_AUTH_DELAY_MS}",
        "num.partitions=1",
    )
    server = KrayProcess(tmp_path_factory.mktemp("kray-secure-data"), overrides=overrides)
    bootstrap = server.start()
    yield Secured(pki, ports, bootstrap)
    server.stop()


# ---- clients ------------------------------------------------------------------------------------
def sasl_ssl_config(secured, user="alice", password=None) -> dict:
    return {"bootstrap.servers": secured.address("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password or USERS[user],
            "ssl.ca.location": str(secured.pki.ca_file)}


def ssl_config(secured) -> dict:
    return {"bootstrap.servers": secured.address("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(secured.pki.ca_file), "ssl.certificate.location": str(secured.pki.client_cert),
            "ssl.key.location": str(secured.pki.client_key)}


def roundtrip_confluent(config: dict, count: int = 50) -> list[bytes]:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    producer = Producer(config | {"linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer(config | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    return values


class Raw:
    """A bare Kafka connection (plain or TLS) speaking typed requests."""

    def __init__(self, address: str, *, tls: ssl.SSLContext | None = None):
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock = tls.wrap_socket(sock, server_hostname="localhost") if tls else sock
        self.decoder = FrameDecoder(10 * 1024 * 1024)
        self.frames: list = []
        self.correlation_id = 0

    def send(self, request, version: int):
        self.correlation_id += 1
        self.sock.sendall(encode_request(RequestHeader(request.API_KEY, version, self.correlation_id, "raw"),
                                         request.encode(version)))

    def receive(self):
        while not self.frames:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the broker")
            self.frames.extend(self.decoder.feed(chunk))
        return self.frames.pop(0)

    def call(self, request, version: int):
        self.send(request, version)
        body = self.receive()
        _, offset = decode_response_header(body, request.API_KEY, version)
        return API_BY_KEY[request.API_KEY].response.decode(body[offset:], version)

    def login(self, user: str, password: str, *, authenticate_version: int = 2):
        handshake = self.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert handshake.error_code == 0 and handshake.mechanisms == ["PLAIN"]
        return self.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), authenticate_version)

    def closed(self, timeout_s: float = 10) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return True

    def close(self):
        self.sock.close()


def client_tls(secured, cert=None, key=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(secured.pki.ca_file))
    if cert:
        context.load_cert_chain(str(cert), str(key))
    return context


# ---- real clients -------------------------------------------------------------------------------
def test_confluent_over_sasl_ssl_with_plain(secured):
    assert roundtrip_confluent(sasl_ssl_config(secured)) == [f"v{i}".encode() for i in range(50)]


def test_confluent_over_ssl_with_a_client_certificate(secured):
    assert roundtrip_confluent(ssl_config(secured)) == [f"v{i}".encode() for i in range(50)]


def roundtrip_kafka_python(topic: str, group: str, producer_config: dict, consumer_config: dict) -> list[bytes]:
    """20 records through kafka-python's KafkaProducer, then read back by a KafkaConsumer."""
    from kafka import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(**producer_config)
    for i in range(20):
        producer.send(topic, f"k{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=20000,
                             **consumer_config)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 20:
            break
    consumer.close()
    return values


def test_kafka_python_over_sasl_plaintext_with_plain(secured):
    common = dict(bootstrap_servers=secured.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-secret")
    topic = f"sec-kp-{uuid.uuid4().hex[:8]}"
    assert roundtrip_kafka_python(topic, f"g-{topic}", common, common) == [f"k{i}".encode() for i in range(20)]


def test_metadata_names_the_addresses_of_the_listener_the_client_came_in_on(secured):
    admin = AdminClient(sasl_ssl_config(secured))
    brokers = admin.list_topics(timeout=30).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secured.ports["SASL_SSL"])]
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    assert raw.login("alice", "alice-secret").error_code == 0
    assert [b.port for b in raw.call(MetadataRequest(topics=[]), 12).brokers] == [secured.ports["SASL_PLAINTEXT"]]
    assert [b.port for b in raw.call(DescribeClusterRequest(), 1).brokers] == [secured.ports["SASL_PLAINTEXT"]]
    raw.close()
    plain = Raw(secured.plaintext)
    assert [f"{b.host}:{b.port}" for b in plain.call(MetadataRequest(topics=[]), 12).brokers] == [secured.plaintext]
    plain.close()


# ---- refused, and nobody else harmed --------------------------------------------------------------
def test_a_wrong_password_is_refused_and_other_clients_go_on(secured):
    good = Producer(sasl_ssl_config(secured))
    topic = f"sec-good-{uuid.uuid4().hex[:8]}"
    good.produce(topic, b"before")
    assert good.flush(30) == 0
    errors = []
    bad = Producer(sasl_ssl_config(secured, password="wrong") | {"error_cb": errors.append})
    bad.produce(topic, b"never")
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        bad.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Invalid username or password" in errors[0].str()
    good.produce(topic, b"after")  # the same connection as before
    assert good.flush(30) == 0
    assert bad.flush(0) == 1  # never delivered


def test_a_failed_login_is_answered_with_kafkas_error_after_the_delay_then_closed(secured):
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    assert raw.call(ApiVersionsRequest(), 0).error_code == 0  # allowed before authentication
    started = time.monotonic()
    answer = raw.login("alice", "not-her-password", authenticate_version=1)
    assert time.monotonic() - started >= FAILED_AUTH_DELAY_MS / 1000 * 0.9
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message == "Authentication failed: Invalid username or password"
    assert raw.closed()


def test_an_unknown_mechanism_answers_the_enabled_ones(secured):
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    answer = raw.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and answer.mechanisms == ["PLAIN"]
    assert raw.closed()


def test_a_request_before_authentication_closes_the_connection(secured):
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    raw.send(MetadataRequest(topics=None), 12)
    assert raw.closed()
    handshaken = Raw(secured.address("SASL_PLAINTEXT"))
    assert handshaken.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    handshaken.send(MetadataRequest(topics=None), 12)  # after the handshake, only SaslAuthenticate
    assert handshaken.closed()


def test_handshake_v0_then_a_raw_plain_token(secured):
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    assert raw.call(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
    token = b"\0alice\0alice-secret"
    raw.sock.sendall(struct.pack(">i", len(token)) + token)
    assert bytes(raw.receive()) == b""  # an empty server token: authenticated
    assert raw.call(MetadataRequest(topics=[]), 12).brokers
    raw.close()


def test_garbage_instead_of_a_tls_hello_closes_only_that_connection(secured):
    survivor = Raw(secured.address("SSL"), tls=client_tls(secured, secured.pki.client_cert, secured.pki.client_key))
    assert survivor.call(ApiVersionsRequest(), 3).error_code == 0
    garbage = socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=10)
    garbage.sendall(b"GET / HTTP/1.1\r\nHost: kray\r\n\r\n" + bytes(range(256)))
    garbage.settimeout(10)
    try:
        while garbage.recv(4096):  # a TLS alert may come first, then the close
            pass
    except ConnectionResetError:
        pass
    assert survivor.call(MetadataRequest(topics=[]), 12).brokers  # the TLS client next to it goes on
    survivor.close()


def test_an_untrusted_client_certificate_is_refused_when_client_auth_is_required(secured):
    for cert, key in ((secured.pki.untrusted_cert, secured.pki.untrusted_key), (None, None)):
        try:
            raw = Raw(secured.address("SSL"), tls=client_tls(secured, cert, key))
            raw.send(ApiVersionsRequest(), 3)  # TLS 1.3: the client learns of the refusal on reading
            with pytest.raises((ConnectionError, ssl.SSLError)):
                raw.receive()
        except ssl.SSLError:
            pass
    trusted = Raw(secured.address("SSL"), tls=client_tls(secured, secured.pki.client_cert, secured.pki.client_key))
    assert trusted.call(ApiVersionsRequest(), 3).error_code == 0
    trusted.close()


# ---- re-authentication (KIP-368) -------------------------------------------------------------------
def test_reauthentication_keeps_a_connection_and_its_absence_closes_it(secured):
    tls = client_tls(secured)
    raw = Raw(secured.address("SASL_SSL"), tls=tls)
    answer = raw.login("alice", "alice-secret")
    assert answer.error_code == 0 and answer.session_lifetime_ms == REAUTH_MS
    time.sleep(REAUTH_MS / 1000 * 0.6)
    again = raw.login("alice", "alice-secret")  # re-authenticate on the same connection
    assert again.error_code == 0 and again.session_lifetime_ms == REAUTH_MS
    time.sleep(REAUTH_MS / 1000 * 0.6)  # past the first session's end, inside the second's
    assert raw.call(MetadataRequest(topics=[]), 12).brokers
    as_bob = raw.login("bob", "bob-secret")  # a re-authentication may not change the principal
    assert as_bob.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and raw.closed()
    idle = Raw(secured.address("SASL_SSL"), tls=tls)
    assert idle.login("alice", "alice-secret").error_code == 0
    started = time.monotonic()
    assert idle.closed(timeout_s=REAUTH_MS / 1000 + 5)  # no re-authentication: closed at the session's end
    assert time.monotonic() - started >= REAUTH_MS / 1000 * 0.8


def test_confluent_keeps_producing_across_several_session_lifetimes(secured):
    """librdkafka re-authenticates (KIP-368) when told a session lifetime; a failed re-authentication
    would surface as an _AUTHENTICATION error."""
    topic = f"sec-reauth-{uuid.uuid4().hex[:8]}"
    errors = []
    producer = Producer(sasl_ssl_config(secured) | {"error_cb": errors.append})
    deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, f"r{sent}".encode())
        sent += 1
        producer.poll(0.2)
    assert producer.flush(30) == 0
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
