"""ACLs with real clients against a real `kray start` (issue 18, part 3): an authorizer on
(Kafka's StandardAuthorizer name), `super.users=User:admin`, a SASL_PLAINTEXT listener with users
admin, alice and bob, an SSL listener that requires client certificates (the subject mapped to
the principal by `ssl.principal.mapping.rules`), and the PLAINTEXT (inter-broker) listener whose
clients are User:ANONYMOUS. One broker for the module; each test uses topics and groups of its own."""
from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (AcknowledgeType, Consumer, KafkaError, KafkaException, Producer, ShareConsumer,
                             TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourcePatternType,
                                   ResourceType)

from tests.kray_process import KrayProcess, free_port
from tests.tls_certs import make_pki

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
KRAY = str(Path(sys.executable).parent / "kray")
TIMEOUT_S = 30


class Secured:
    def __init__(self, sasl: str, plaintext: str, ssl: str = "", pki=None):
        self.sasl, self.plaintext, self.ssl, self.pki = sasl, plaintext, ssl, pki

    def config(self, user: str, **extra) -> dict:
        return {"bootstrap.servers": self.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": USERS[user], **extra}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    port, ssl_port = free_port(), free_port()
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    overrides = (
        f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_keystore}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca_file}",
        "listener.name.ssl.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",  # CN=alice-client,O=... -> alice-client
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "num.partitions=1",
        "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=1000",
        # the transactional produce below has no coordinator behind it (its ACLs are the point): KIP-890's
        # verification, which would refuse it, is off here with Kafka's switch
        "transaction.partition.verification.enable=false",
    )
    server = KrayProcess(tmp_path_factory.mktemp("kray-acls-data"), overrides=overrides)
    plaintext = server.start()
    yield Secured(f"127.0.0.1:{port}", plaintext, f"127.0.0.1:{ssl_port}", pki)
    server.stop()


@pytest.fixture(scope="module")
def admin(secured):
    return AdminClient(secured.config("admin"))


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allow(principal, operation, resource_type, resource, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource_type, resource, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def add_acls(admin, *bindings):
    for f in admin.create_acls(list(bindings)).values():
        f.result(TIMEOUT_S)


def new_topic(admin, prefix="t") -> str:
    topic = name(prefix)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    return topic


def produce(config: dict, topic: str, values: list[bytes]) -> list:
    """Produce and flush; the delivery errors (None for each record delivered)."""
    producer = Producer(config | {"linger.ms": 0, "retries": 0})
    errors = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    return errors


# ---- the ACL admin APIs with confluent-kafka's AdminClient ----------------------------------------
def test_admin_client_creates_describes_and_deletes_acls(secured, admin):
    topic, group = name("acl-t"), name("acl-g")
    bindings = [allow("User:alice", AclOperation.READ, ResourceType.TOPIC, topic),
                allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic[:6], ResourcePatternType.PREFIXED),
                allow("User:bob", AclOperation.DESCRIBE, ResourceType.GROUP, group)]
    add_acls(admin, *bindings)
    described = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                     AclOperation.ANY, AclPermissionType.ANY)).result(TIMEOUT_S)
    assert set(bindings) <= set(described)
    on_topic = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None,
                                                    AclOperation.ANY, AclPermissionType.ANY)).result(TIMEOUT_S)
    assert set(on_topic) >= set(bindings[:2]) and bindings[2] not in on_topic, "MATCH: literal and prefixes"

    # alice may not administer ACLs: CLUSTER_AUTHORIZATION_FAILED, nothing changes
    alice = AdminClient(secured.config("alice"))
    # the broker answers CLUSTER_AUTHORIZATION_FAILED (see the kray acls test); librdkafka 2.16 drops a
    # DescribeAcls response's top-level error and returns no bindings
    assert alice.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(TIMEOUT_S) == []
    with pytest.raises(KafkaException) as refused:
        list(alice.create_acls([allow("User:alice", AclOperation.ALL, ResourceType.BROKER, "kafka-cluster")])
             .values())[0].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    deleted = admin.delete_acls([AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                                  None, AclOperation.ANY, AclPermissionType.ANY)])
    gone = list(deleted.values())[0].result(TIMEOUT_S)
    assert set(bindings[:2]) <= set(gone) and bindings[2] not in gone
    left = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(TIMEOUT_S)
    assert bindings[2] in left and not set(bindings[:2]) & set(left)


# ---- produce, consume, Metadata ----------------------------------------------------------------------
def test_producer_refused_without_write_then_allowed_on_its_live_connection(secured, admin):
    topic = new_topic(admin)
    add_acls(admin, allow("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, topic))
    # librdkafka remembers a topic's authorization error until its next metadata refresh
    producer = Producer(secured.config("alice", **{"linger.ms": 0, "retries": 0,
                                                   "topic.metadata.refresh.interval.ms": 500}))
    errors = []
    producer.produce(topic, b"refused", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    add_acls(admin, allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic))
    deadline, delivered = time.monotonic() + TIMEOUT_S, False
    while not delivered and time.monotonic() < deadline:  # the same producer, the same connection
        errors.clear()
        try:
            producer.produce(topic, b"allowed", on_delivery=lambda err, _msg: errors.append(err))
        except KafkaException as e:  # refused in the client until it refreshes the topic's metadata
            assert e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            time.sleep(0.2)
            continue
        assert producer.flush(TIMEOUT_S) == 0
        delivered = errors == [None]
    assert delivered, errors

    consumer = Consumer(secured.config("admin", **{"group.id": name("g"), "auto.offset.reset": "earliest"}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    values, deadline = [], time.monotonic() + TIMEOUT_S
    while not values and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
    consumer.close()
    assert values == [b"allowed"], "the refused record was not appended"


def test_consumer_that_may_describe_but_not_read(secured, admin):
    topic, group = new_topic(admin), name("g")
    assert produce(secured.config("admin"), topic, [b"secret"]) == [None]
    add_acls(admin, allow("User:bob", AclOperation.DESCRIBE, ResourceType.TOPIC, topic),
             allow("User:bob", AclOperation.READ, ResourceType.GROUP, group))
    consumer = Consumer(secured.config("bob", **{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        metadata = consumer.list_topics(topic, timeout=TIMEOUT_S)
        assert metadata.topics[topic].error is None, "bob may describe the topic"
        consumer.assign([TopicPartition(topic, 0, 0)])
        errors, values, deadline = [], [], time.monotonic() + TIMEOUT_S
        while not errors and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                (errors if m.error() else values).append(m.error() or m.value())
        assert values == []
        assert [e.code() for e in errors][:1] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    finally:
        consumer.close()


def test_metadata_lists_only_topics_the_principal_may_describe(secured, admin):
    seen, hidden = new_topic(admin, "seen"), new_topic(admin, "hidden")
    add_acls(admin, allow("User:alice", AclOperation.READ, ResourceType.TOPIC, seen))
    listed = AdminClient(secured.config("alice")).list_topics(timeout=TIMEOUT_S).topics
    assert seen in listed and hidden not in listed
    assert {seen, hidden} <= set(admin.list_topics(timeout=TIMEOUT_S).topics), "a super user sees every topic"
    named = AdminClient(secured.config("alice")).list_topics(hidden, timeout=TIMEOUT_S).topics[hidden]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    missing = name("missing")
    named = AdminClient(secured.config("alice")).list_topics(missing, timeout=TIMEOUT_S).topics[missing]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, "nothing disclosed about what exists"
    assert missing not in admin.list_topics(timeout=TIMEOUT_S).topics, "and no topic was auto-created"
    # PLAINTEXT clients are User:ANONYMOUS: no ACLs, no topics
    assert not set(AdminClient({"bootstrap.servers": secured.plaintext}).list_topics(timeout=TIMEOUT_S).topics) \
        & {seen, hidden}


def test_an_ssl_clients_certificate_subject_is_its_principal_for_acls(secured, admin):
    """mTLS end to end: the client certificate's subject (CN=alice-client,O=Kray tests) mapped by
    ssl.principal.mapping.rules to User:alice-client is what the authorizer checks."""
    mine, other = new_topic(admin, "mtls"), new_topic(admin, "mtls-other")
    add_acls(admin, allow("User:alice-client", AclOperation.WRITE, ResourceType.TOPIC, mine),
             allow("User:CN=alice-client,O=Kray tests", AclOperation.WRITE, ResourceType.TOPIC, other))
    config = {"bootstrap.servers": secured.ssl, "security.protocol": "SSL", "ssl.ca.location": str(secured.pki.ca_file),
              "ssl.certificate.location": str(secured.pki.client_cert), "ssl.key.location": str(secured.pki.client_key)}
    assert produce(config, mine, [b"mtls"]) == [None]
    [refused] = produce(config, other, [b"unmapped"])  # an ACL for the unmapped subject does not apply
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    listed = AdminClient(config).list_topics(timeout=TIMEOUT_S).topics
    assert mine in listed and other not in listed, "WRITE implies DESCRIBE on its topic only"


def test_super_users_bypass_acls(secured, admin):
    topic = new_topic(admin)
    add_acls(admin, AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:*", "*",
                               AclOperation.ALL, AclPermissionType.DENY))
    assert produce(secured.config("admin"), topic, [b"a", b"b"]) == [None, None]
    assert [e.code() for e in produce(secured.config("alice"), topic, [b"c"])] == \
        [KafkaError.TOPIC_AUTHORIZATION_FAILED]


# ---- share groups (KIP-932) ---------------------------------------------------------------------------
def test_share_consumer_allowed_on_one_group_and_refused_on_another(secured, admin):
    topic, allowed_group, refused_group = new_topic(admin, "q"), name("share-ok"), name("share-no")
    for f in admin.incremental_alter_configs([ConfigResource("GROUP", g, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
            for g in (allowed_group, refused_group)]).values():
        f.result(TIMEOUT_S)
    assert produce(secured.config("admin"), topic, [b"%d" % i for i in range(5)]) == [None] * 5
    add_acls(admin, allow("User:alice", AclOperation.READ, ResourceType.TOPIC, topic),
             allow("User:alice", AclOperation.READ, ResourceType.GROUP, allowed_group))

    def consume(group, wanted, timeout_s):
        consumer = ShareConsumer(secured.config("alice", **{"group.id": group,
                                                            "share.acknowledgement.mode": "explicit"}))
        consumer.subscribe([topic])
        values, errors, deadline = [], [], time.monotonic() + timeout_s
        try:
            while len(values) < wanted and not errors and time.monotonic() < deadline:
                try:
                    for m in consumer.poll(0.5):
                        if m.error():
                            errors.append(m.error())
                        else:
                            values.append(m.value())
                            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                except KafkaException as e:
                    errors.append(e.args[0])
            if values:
                consumer.commit_sync()
        finally:
            consumer.close()
        return values, errors

    values, errors = consume(allowed_group, 5, TIMEOUT_S)
    assert sorted(values) == [b"%d" % i for i in range(5)] and errors == []
    values, errors = consume(refused_group, 1, 10)
    assert values == []
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in [e.code() for e in errors], errors


# ---- kray acls ------------------------------------------------------------------------------------------
def kray_acls(bootstrap, *args, command_config=None):
    extra = ["--command-config", str(command_config)] if command_config else []
    return subprocess.run([KRAY, "acls", "--bootstrap-server", bootstrap, *extra, *args],
                          capture_output=True, text=True, timeout=60)


def test_kray_acls_add_list_remove(secured, tmp_path):
    properties = tmp_path / "admin.properties"
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                          f'    username="admin" password="{USERS["admin"]}";\n')
    topic, group = name("cli-t"), name("cli-g")
    added = kray_acls(secured.sasl, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                      "--operation", "Describe", "--topic", topic, "--group", group, command_config=properties)
    assert added.returncode == 0, added.stderr
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in added.stdout
    listed = kray_acls(secured.sasl, "--list", "--topic", topic, command_config=properties)
    assert listed.returncode == 0, listed.stderr
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
    assert "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed.stdout
    assert group not in listed.stdout
    every = kray_acls(secured.sasl, "--list", "--principal", "User:alice", command_config=properties).stdout
    assert topic in every and group in every

    # the PLAINTEXT listener's User:ANONYMOUS may not: CLUSTER_AUTHORIZATION_FAILED
    anonymous = kray_acls(secured.plaintext, "--list")
    assert anonymous.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in anonymous.stderr

    removed = kray_acls(secured.sasl, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
                        "--topic", topic, "--force", command_config=properties)
    assert removed.returncode == 0, removed.stderr
    listed = kray_acls(secured.sasl, "--list", "--topic", topic, command_config=properties).stdout
    assert "operation=READ" not in listed and "operation=DESCRIBE" in listed
    assert kray_acls(secured.sasl, "--remove", "--topic", topic, "--group", group, "--force",
                     command_config=properties).returncode == 0
    assert kray_acls(secured.sasl, "--list", "--topic", topic, "--group", group,
                     command_config=properties).stdout.strip() == ""


def test_transactional_produce_and_markers_need_their_acls(secured, admin):
    """A transactional produce needs WRITE on its transactional id (else nothing of it is written);
    WriteTxnMarkers needs CLUSTER_ACTION, which only the brokers (and super users) have."""
    from cluster.admin import KafkaConnection
    from protocol.messages import ProduceRequest, WriteTxnMarkersRequest
    from protocol.record_batch import build_batch

    topic = new_topic(admin)
    add_acls(admin, allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic))
    pid = 8_000_000_001

    def produce_txn(conn, transactional_id):
        records = build_batch([(b"k", b"v", [], int(time.time() * 1000))], producer_id=pid, producer_epoch=0,
                              base_sequence=0, is_transactional=True)
        request = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=10000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=records)])])
        return conn.send(request, 9).responses[0].partition_responses[0].error_code

    def end_txn(conn):
        request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
        return conn.send(request, 1).markers[0].topics[0].partitions[0].error_code

    alice = {k: v for k, v in secured.config("alice").items() if k != "bootstrap.servers"}
    with KafkaConnection(secured.sasl, properties=alice) as conn:
        assert produce_txn(conn, "alice-txn") == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        add_acls(admin, allow("User:alice", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "alice-txn"))
        deadline, error = time.monotonic() + TIMEOUT_S, None
        while time.monotonic() < deadline:   # the ACL reaches this broker's authorizer
            error = produce_txn(conn, "alice-txn")
            if error != KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                break
            time.sleep(0.2)
        assert error == 0
        assert end_txn(conn) == KafkaError.CLUSTER_AUTHORIZATION_FAILED   # alice is not a broker
    admin_properties = {k: v for k, v in secured.config("admin").items() if k != "bootstrap.servers"}
    with KafkaConnection(secured.sasl, properties=admin_properties) as conn:
        assert end_txn(conn) == 0
