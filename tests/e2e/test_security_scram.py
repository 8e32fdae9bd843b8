"""SCRAM (KIP-554) with real clients against a real `kray start` (issue 18): one broker with a
SASL_SSL and a SASL_PLAINTEXT listener enabling SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN, the
PLAINTEXT inter-broker listener, ACLs on (`super.users=User:admin`; admin also logs in with PLAIN
from the JAAS config, which is how the first SCRAM credential gets made, as with Kafka's
`kafka-storage format --add-scram` or a PLAIN admin). Users' SCRAM credentials are made with
`kray configs` and confluent-kafka's AdminClient; confluent-kafka, kafka-python and aiokafka log in
with them. The last test restarts the broker: the credentials come back from the metadata log."""
from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (AcknowledgeType, Consumer, KafkaError, KafkaException, Producer, ShareConsumer)
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from actors.security.scram import ScramClient, ScramMechanism as Mechanism
from protocol.errors import ErrorCode
from protocol.messages import MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest
from tests.e2e.test_security import Raw, roundtrip_kafka_python
from tests.kray_process import KrayProcess, free_port
from tests.tls_certs import make_pki

ADMIN_PLAIN = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
               'user_admin="admin-plain-secret";')
PASSWORDS = {"admin": "admin-scram-secret", "alice": "alice-secret", "bob": "bob-secret"}
KRAY = str(Path(sys.executable).parent / "kray")
FAILED_AUTH_DELAY_MS = 300
TIMEOUT_S = 30
PREFIX = "scram-"  # alice and bob may do anything with topics and groups named so


class Secured:
    def __init__(self, pki, ports, data_dir, server):
        self.pki, self.ports, self.data_dir, self.server = pki, ports, data_dir, server

    def address(self, listener: str = "SASL_SSL") -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def config(self, user: str, mechanism: str = "SCRAM-SHA-512", password: str | None = None, **extra) -> dict:
        """confluent-kafka over SASL_SSL."""
        return {"bootstrap.servers": self.address(), "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": password or PASSWORDS[user],
                "ssl.ca.location": str(self.pki.ca_file), **extra}

    def properties(self, tmp_path: Path, user: str, mechanism: str, password: str) -> str:
        """A --command-config file, as for kafka-configs.sh."""
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        path = tmp_path / f"{user}-{mechanism}.properties"
        path.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism={mechanism}\n"
                        f'sasl.jaas.config={module} required username="{user}" password="{password}";\n'
                        f"ssl.truststore.location={self.pki.ca_file}\n")
        return str(path)


def kray(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KRAY, *args], capture_output=True, text=True, timeout=120)


def kray_configs(secured: Secured, properties: str, *args: str) -> subprocess.CompletedProcess:
    return kray("configs", "--bootstrap-server", secured.address(), "--command-config", properties,
                "--entity-type", "users", *args)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    ports = {name: free_port() for name in ("SASL_SSL", "SASL_PLAINTEXT")}
    overrides = (
        "listeners=PLAINTEXT://127.0.0.1:0," + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_keystore}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={ADMIN_PLAIN}",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={ADMIN_PLAIN}",
        f"connection.failed.authentication.delay.ms={FAILED_AUTH_DELAY_MS}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "num.partitions=1",
        "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=1000",
    )
    data_dir = tmp_path_factory.mktemp("kray-scram-data")
    server = KrayProcess(data_dir, overrides=overrides)
    server.start()
    secured = Secured(pki, ports, data_dir, server)
    # the first SCRAM credentials: admin logs in with PLAIN; SHA-512 and SHA-256 in one command
    tmp = tmp_path_factory.mktemp("props")
    plain_admin = secured.properties(tmp, "admin", "PLAIN", "admin-plain-secret")
    for user in PASSWORDS:
        done = kray_configs(secured, plain_admin, "--entity-name", user, "--alter", "--add-config",
                            f"SCRAM-SHA-512=[iterations=8192,password={PASSWORDS[user]}],"
                            f"SCRAM-SHA-256=[password={PASSWORDS[user]}]")
        assert done.returncode == 0 and f"Completed updating config for user {user}." in done.stdout, done.stderr
    admin = AdminClient(secured.config("admin"))
    for user in ("User:alice", "User:bob"):
        for resource_type in (ResourceType.TOPIC, ResourceType.GROUP):
            for f in admin.create_acls([AclBinding(resource_type, PREFIX, ResourcePatternType.PREFIXED, user, "*",
                                                   AclOperation.ALL, AclPermissionType.ALLOW)]).values():
                f.result(TIMEOUT_S)
    yield secured
    if secured.server.proc is not None:
        secured.server.stop()


def name(kind: str) -> str:
    return f"{PREFIX}{kind}-{uuid.uuid4().hex[:8]}"


def roundtrip_confluent(config: dict, count: int = 50) -> list[bytes]:
    topic = name("t")
    producer = Producer(config | {"linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer(config | {"group.id": name("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    return values


def authentication_errors(config: dict, wait_s: float = TIMEOUT_S) -> list:
    """What a producer with this config reports while trying to connect."""
    errors = []
    producer = Producer(config | {"error_cb": errors.append})
    producer.produce(name("never"), b"never")
    deadline = time.monotonic() + wait_s
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert producer.flush(0) == 1, "nothing delivered"
    return errors


def scram_login(raw: Raw, mechanism: Mechanism, user: str, password: str):
    """A SCRAM exchange over SaslHandshake v1 + SaslAuthenticate v2: the last answer."""
    handshake = raw.call(SaslHandshakeRequest(mechanism=mechanism.mechanism_name), 1)
    assert handshake.error_code == 0, handshake
    client = ScramClient(mechanism, user, password)
    first = raw.call(SaslAuthenticateRequest(auth_bytes=client.first_message()), 2)
    if first.error_code:
        return first
    final = raw.call(SaslAuthenticateRequest(auth_bytes=client.final_message(first.auth_bytes)), 2)
    if final.error_code == 0:
        client.verify(final.auth_bytes)  # the broker proves it knows the credential too
    return final


def tls(secured) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(secured.pki.ca_file))


# ---- real clients -------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_confluent_produces_and_consumes_over_sasl_ssl_with_scram(secured, mechanism):
    assert roundtrip_confluent(secured.config("alice", mechanism)) == [f"v{i}".encode() for i in range(50)]


def test_a_share_consumer_logs_in_with_scram(secured):
    topic, group = name("share-t"), name("share-g")
    producer = Producer(secured.config("bob", "SCRAM-SHA-256"))
    for i in range(20):
        producer.produce(topic, f"s{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    admin = AdminClient(secured.config("admin"))
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(TIMEOUT_S)
    consumer = ShareConsumer(secured.config("bob", "SCRAM-SHA-512", **{"group.id": group,
                                                                     "share.acknowledgement.mode": "explicit"}))
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 60
    while len(values) < 20 and time.monotonic() < deadline:
        for message in consumer.poll(1.0) or []:
            if not message.error():
                values.append(message.value())
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
    consumer.close()
    assert sorted(values) == sorted(f"s{i}".encode() for i in range(20))


def test_kafka_python_with_scram_sha_256_and_512(secured):
    common = dict(bootstrap_servers=secured.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                  sasl_plain_username="alice", sasl_plain_password="alice-secret")
    values = roundtrip_kafka_python(name("kp"), name("kp-g"), dict(common, sasl_mechanism="SCRAM-SHA-256"),
                                    dict(common, sasl_mechanism="SCRAM-SHA-512"))
    assert values == [f"k{i}".encode() for i in range(20)]


def test_aiokafka_with_scram_over_sasl_ssl(secured):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    topic = name("aio")
    common = dict(bootstrap_servers=secured.address(), security_protocol="SASL_SSL", ssl_context=tls(secured),
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob", sasl_plain_password="bob-secret")

    async def roundtrip():
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=name("aio-g"), auto_offset_reset="earliest", **common)
        await consumer.start()
        values = []
        try:
            async with asyncio.timeout(60):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 20:
                        break
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(roundtrip()) == [f"a{i}".encode() for i in range(20)]


# ---- refused ------------------------------------------------------------------------------------
NODE_CLIENTS = Path(__file__).resolve().parent.parent / "clients" / "node"
needs_kafkajs = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_CLIENTS / "node_modules" / "kafkajs").is_dir(),
    reason="Node.js or kafkajs missing: install Node.js and run ./dev test (it runs npm ci in tests/clients/node)")


def kafkajs_roundtrip(secured: Secured, mechanism: str, user: str, password: str, records: int = 30):
    topic, group = name("js"), name("js-g")
    return subprocess.run(["node", str(NODE_CLIENTS / "scram_roundtrip.js"), secured.address(),
                           str(secured.pki.ca_file), mechanism, user, password, topic, group, str(records)],
                          capture_output=True, text=True, timeout=150)


@needs_kafkajs
@pytest.mark.parametrize("mechanism", ["scram-sha-512", "scram-sha-256"])
def test_kafkajs_produces_and_consumes_over_sasl_ssl_with_scram(secured, mechanism):
    """kafkajs has SCRAM and TLS code of its own (not librdkafka's)."""
    run = kafkajs_roundtrip(secured, mechanism, "alice", PASSWORDS["alice"])
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(out["consumed"], key=lambda v: int(v[1:])) == [f"v{i}" for i in range(30)]


@needs_kafkajs
def test_kafkajs_with_a_wrong_password_is_refused(secured):
    run = kafkajs_roundtrip(secured, "scram-sha-512", "alice", "not-alices-password")
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "SASL" in run.stderr or "uthenticat" in run.stderr


def test_a_wrong_password_is_refused_after_the_delay_and_closed(secured):
    errors = authentication_errors(secured.config("alice", "SCRAM-SHA-512", password="wrong"))
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    started = time.monotonic()
    answer = scram_login(raw, Mechanism.SCRAM_SHA_256, "alice", "wrong")
    assert time.monotonic() - started >= FAILED_AUTH_DELAY_MS / 1000 * 0.9
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message == ("Authentication failed during authentication due to invalid credentials "
                                    "with SASL mechanism SCRAM-SHA-256")
    assert raw.closed()
    unknown = Raw(secured.address("SASL_PLAINTEXT"))  # an unknown user looks the same, at the first message
    answer = scram_login(unknown, Mechanism.SCRAM_SHA_512, "mallory", "x")
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and unknown.closed()
    good = Raw(secured.address("SASL_PLAINTEXT"))
    assert scram_login(good, Mechanism.SCRAM_SHA_512, "alice", "alice-secret").error_code == 0
    assert good.call(MetadataRequest(topics=[]), 12).brokers
    good.close()


def test_scram_over_handshake_v0_raw_tokens(secured):
    """SaslHandshake v0: the SCRAM messages travel as raw length-prefixed tokens, two of them."""
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    assert raw.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 0).error_code == 0
    client = ScramClient(Mechanism.SCRAM_SHA_256, "bob", "bob-secret")
    raw.sock.sendall(struct.pack(">i", len(client.first_message())) + client.first_message())
    final = client.final_message(bytes(raw.receive()))
    raw.sock.sendall(struct.pack(">i", len(final)) + final)
    client.verify(bytes(raw.receive()))
    assert raw.call(MetadataRequest(topics=[]), 12).brokers
    raw.close()


def test_kray_configs_describes_alters_and_refuses_as_kafka_configs(secured, tmp_path):
    admin = secured.properties(tmp_path, "admin", "SCRAM-SHA-512", PASSWORDS["admin"])  # the tools log in with SCRAM
    described = kray_configs(secured, admin, "--entity-name", "alice", "--describe")
    assert described.returncode == 0, described.stderr
    assert described.stdout.strip() == ("SCRAM credential configs for user-principal 'alice' are "
                                        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192")
    everyone = kray_configs(secured, admin, "--describe")
    assert {line.split("'")[1] for line in everyone.stdout.splitlines()} >= {"admin", "alice", "bob"}
    nobody = kray_configs(secured, admin, "--entity-name", "nobody", "--describe")
    assert nobody.stdout.strip() == "No SCRAM credential configs for user-principal 'nobody'."

    too_many = kray_configs(secured, admin, "--entity-name", "carol", "--alter", "--add-config",
                            "SCRAM-SHA-256=[iterations=20000,password=x]")
    assert too_many.returncode == 1 and "UNACCEPTABLE_CREDENTIAL: Too many iterations" in too_many.stderr
    too_few = kray_configs(secured, admin, "--entity-name", "carol", "--alter", "--add-config",
                           "SCRAM-SHA-256=[iterations=100,password=x]")
    assert too_few.returncode == 1 and "less than the minimum 4096" in too_few.stderr
    missing = kray_configs(secured, admin, "--entity-name", "carol", "--alter", "--delete-config", "SCRAM-SHA-512")
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr
    # a quota goes beside the credentials, as with kafka-configs.sh (client quotas: tests/e2e/test_client_quotas.py)
    quota = kray_configs(secured, admin, "--entity-name", "carol", "--alter", "--add-config", "producer_byte_rate=1")
    assert quota.returncode == 0, quota.stderr
    described = kray_configs(secured, admin, "--entity-name", "carol", "--describe")
    assert "Quota configs for user-principal 'carol' are producer_byte_rate=1.0" in described.stdout, described
    assert kray_configs(secured, admin, "--entity-name", "carol", "--alter", "--delete-config",
                        "producer_byte_rate").returncode == 0

    alice = secured.properties(tmp_path, "alice", "SCRAM-SHA-256", PASSWORDS["alice"])
    refused = kray_configs(secured, alice, "--entity-name", "alice", "--alter", "--add-config",
                           "SCRAM-SHA-256=[password=mine]")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    assert "CLUSTER_AUTHORIZATION_FAILED" in kray_configs(secured, alice, "--describe").stderr
    wrong = secured.properties(tmp_path, "admin", "SCRAM-SHA-256", "wrong")
    failed = kray_configs(secured, wrong, "--describe")
    assert failed.returncode == 1 and "SASL/SCRAM-SHA-256 login as admin failed" in failed.stderr


def test_admin_client_alters_and_describes_credentials_and_a_deleted_one_logs_in_no_more(secured):
    admin = AdminClient(secured.config("admin"))
    user = "dave"
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-pw")
    admin.alter_user_scram_credentials([upsert])[user].result(TIMEOUT_S)
    description = admin.describe_user_scram_credentials([user])[user].result(TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)]
    dave = secured.config(user, "SCRAM-SHA-256", password="dave-pw")
    live = Raw(secured.address(), tls=tls(secured))  # one connection, logged in before the deletion
    assert scram_login(live, Mechanism.SCRAM_SHA_256, user, "dave-pw").error_code == 0

    # one request may change a user once (as Kafka): both mechanisms at once are a DUPLICATE_RESOURCE
    twice = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"x"),
        UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)])
    with pytest.raises(KafkaException) as duplicate:
        twice[user].result(TIMEOUT_S)
    assert duplicate.value.args[0].code() == KafkaError.DUPLICATE_RESOURCE

    admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]
                                       )[user].result(TIMEOUT_S)
    with pytest.raises(KafkaException) as gone:
        admin.describe_user_scram_credentials([user])[user].result(TIMEOUT_S)
    assert gone.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    errors = authentication_errors(dave)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, "new logins are refused"
    assert live.call(MetadataRequest(topics=[]), 12).brokers, "a session already open goes on until it re-authenticates"
    live.close()


def test_a_mechanism_the_listener_does_not_enable_is_refused(secured):
    raw = Raw(secured.address("SASL_PLAINTEXT"))
    answer = raw.call(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
    assert raw.closed()


def test_hundreds_of_failed_logins_do_not_stop_authorized_clients(secured):
    """200 connections fail a SCRAM login at the same time (each answered after the failed-
    authentication delay, then closed) while an authorized producer writes: every bad login is
    refused and closed, and every record is acknowledged meanwhile (nothing of the flood blocks
    the broker: the delay is a wait per connection, not a pause of the listener)."""
    outcomes = []

    def attacker():
        raw = Raw(secured.address("SASL_PLAINTEXT"))
        try:
            answer = scram_login(raw, Mechanism.SCRAM_SHA_512, "alice", "wrong")
            outcomes.append((answer.error_code, raw.closed()))
        finally:
            raw.sock.close()
    attackers = [threading.Thread(target=attacker) for _ in range(200)]
    for t in attackers:
        t.start()
    topic = name("flood")
    producer = Producer(secured.config("alice", acks="all"))
    delivered = []
    for i in range(200):
        producer.produce(topic, f"f{i}".encode(), on_delivery=lambda err, m: err is None and delivered.append(1))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0 and len(delivered) == 200
    for t in attackers:
        t.join(TIMEOUT_S)
    assert outcomes == [(ErrorCode.SASL_AUTHENTICATION_FAILED, True)] * 200


def test_credentials_survive_a_restart(secured):
    secured.server.stop()
    secured.server.start()
    raw = Raw(secured.address(), tls=tls(secured))
    assert scram_login(raw, Mechanism.SCRAM_SHA_512, "alice", "alice-secret").error_code == 0
    raw.close()
    assert roundtrip_confluent(secured.config("bob", "SCRAM-SHA-256"), count=5) == [f"v{i}".encode() for i in range(5)]

