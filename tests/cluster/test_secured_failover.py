"""A secured Kray passes the failover test (issue 18's "Done when"): three brokers whose only
listener, the inter-broker one, is SASL_SSL (PEM keystore and truststore: followers check the
leader's certificate and host name), ACLs on, and brokers that log in to each other as the
operator chose, as in Kafka: `sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512` with the username
and password of `listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`, `User:broker` in
`super.users` (its SCRAM credential made by the start check, cluster/inter_broker_login.py, as
`kafka-storage format --add-scram` would). Clients log in with SCRAM-SHA-512 as a user who has only
the ACLs it needs.

- acks=all into three replicas (min.insync.replicas=3) is acknowledged only if every follower
  fetched over TLS, logged in;
- tests/cluster/test_replication.py's most important failover test, secured: the node leading a
  busy partition and the share coordinator is killed under an idempotent acks=all producer and
  share consumers; nothing acknowledged is lost, no committed acceptance comes back, and the
  broker returns, logs in and rejoins the ISR;
- the failover tests of test_replication and test_failover in which a broker logs in again,
  imported, with clients logged in over SASL_SSL: a follower killed rejoins the ISR; a killed broker
  returns with its id, port and records; min.insync.replicas refuses acks=all with two replicas
  gone. (The others, a paused leader fenced, a restarted controller, a group's coordinator moving,
  the chaos schedule, exercise no login or TLS path these do not, and run on the plain cluster
  only: they cost a minute of CI here);
- a wrong inter-broker password (the broker user's credential changed under the configured
  password) is what the start check reports, saying what to fix."""
import time
import uuid

import pytest
import ray
from confluent_kafka import KafkaError, Producer, TopicCollection
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from actors.security.inter_broker import broker_identity
from cluster import inter_broker_login
from cluster.local import LocalCluster
from cluster.start_errors import InterBrokerLoginFailed
from tests.cluster.test_failover import (  # noqa: F401 (a failover test, run here on this secured cluster)
    test_a_killed_broker_returns_with_its_id_port_and_records,
)
from tests.cluster.test_replication import (  # noqa: F401 (the failover tests, run here on this secured cluster)
    FAST_LIVENESS, kill_leader_under_producer_and_share_consumers, test_a_follower_killed_rejoins_the_isr,
    test_min_insync_replicas_refuses_acks_all_writes,
)
from tests.cluster.test_secured_replication import read_keys
from tests.tls_certs import make_pki

ADMIN_PASSWORD = "admin-plain-secret"
BROKER_PASSWORD = "broker-scram-secret"
ALICE_PASSWORD = "alice-scram-secret"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    overrides = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "security.inter.broker.protocol": "SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'user_admin="{ADMIN_PASSWORD}";',
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            f'{SCRAM} required username="broker" password="{BROKER_PASSWORD}";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:broker",
        **FAST_LIVENESS,
    }
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-secured-failover"), overrides=overrides)
    c.start()
    yield c, pki
    c.stop()


@pytest.fixture(scope="module")
def cluster(secured):
    """The secured cluster, for test_replication's failover tests imported above."""
    return secured[0]


@pytest.fixture(scope="module")
def client(secured) -> dict:
    """Those tests' clients log in over SASL_SSL as the admin (a super user: they make topics and
    groups of any name); the leader-kill test below uses a user with only its ACLs."""
    c, pki = secured
    return {k: v for k, v in admin_login(c, pki).items() if k != "bootstrap.servers"}


def tls(cluster, pki) -> dict:
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca_file)}


def admin_login(cluster, pki) -> dict:
    return {**tls(cluster, pki), "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD}


def scram_login(cluster, pki, user: str, password: str) -> dict:
    return {**tls(cluster, pki), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password}


def set_password(admin: AdminClient, user: str, password: str) -> None:
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())])[user].result(30)


def test_the_start_check_made_the_brokers_credential_and_followers_fetch_over_tls_as_it(secured):
    cluster, pki = secured
    assert any("made User:broker's SCRAM-SHA-512 credential" in note for note in cluster.notes), cluster.notes
    config = {k: v for k, v in admin_login(cluster, pki).items() if k != "bootstrap.servers"}
    admin = AdminClient(admin_login(cluster, pki))
    described = admin.describe_user_scram_credentials(["broker"])["broker"].result(30)
    assert [i.mechanism for i in described.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_512]
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "3"})])[topic].result(60)
    producer = Producer({**admin_login(cluster, pki), "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000})
    for i in range(150):
        producer.produce(topic, key=b"%d" % i, value=b"v" * 100, partition=i % 3)
    assert producer.flush(90) == 0  # every follower fetched over TLS, logged in as User:broker
    for p in admin.describe_topics(TopicCollection([topic]))[topic].result(30).partitions:
        assert len(p.isr) == 3, f"partition {p.id}: ISR {p.isr}"
    assert set(read_keys({**config, "bootstrap.servers": cluster.bootstrap}, topic, 3, 150)) == set(range(150))


def test_a_leader_killed_under_a_scram_producer_and_share_consumers_loses_nothing(secured):
    cluster, pki = secured
    admin = AdminClient(admin_login(cluster, pki))
    set_password(admin, "alice", ALICE_PASSWORD)
    topic, group = f"busy-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    allow = [(ResourceType.TOPIC, topic, op) for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    allow += [(ResourceType.GROUP, group, AclOperation.READ),
              (ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)]
    for f in admin.create_acls([AclBinding(t, name, ResourcePatternType.LITERAL, "User:alice", "*", op,
                                           AclPermissionType.ALLOW) for t, name, op in allow]).values():
        f.result(30)
    alice = {k: v for k, v in scram_login(cluster, pki, "alice", ALICE_PASSWORD).items() if k != "bootstrap.servers"}
    # the ACLs hold: alice may not write elsewhere
    refused = []
    p = Producer({**alice, "bootstrap.servers": cluster.bootstrap,
                  "enable.idempotence": False, "message.timeout.ms": 10000})
    p.produce(f"other-{topic}", b"x", on_delivery=lambda err, m: refused.append(err))
    p.flush(15)
    assert refused and refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    admin_config = {k: v for k, v in admin_login(cluster, pki).items() if k != "bootstrap.servers"}
    kill_leader_under_producer_and_share_consumers(cluster, alice, admin_config, topic=topic, group=group)


def test_a_wrong_inter_broker_password_is_what_the_start_check_reports(secured):
    """The broker user's credential changed to another password: the next start would stop with
    what to fix (`kray start` prints InterBrokerLoginFailed's message and exits 1), and the brokers
    themselves refuse the configured login. Live connections stay logged in meanwhile."""
    cluster, pki = secured
    admin = AdminClient(admin_login(cluster, pki))
    set_password(admin, "broker", "rotated-elsewhere")
    try:
        with pytest.raises(InterBrokerLoginFailed) as e:
            inter_broker_login.prepare(cluster.controller, cluster.config, cluster._brokers)
        message = str(e.value)
        assert "the inter-broker password is wrong" in message
        assert "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" in message
        assert "kray configs --bootstrap-server" in message and "--entity-name broker" in message
        assert BROKER_PASSWORD not in message and "rotated-elsewhere" not in message
        brokers = [(b.broker_id, b.host, b.port) for b in cluster._brokers]
        deadline = time.monotonic() + 30
        while True:  # each broker refuses the configured login once the new credential reaches it
            try:
                inter_broker_login.check_logins(cluster.config, broker_identity(cluster.config), brokers[:1],
                                                timeout_s=0)
            except InterBrokerLoginFailed as refusal:
                assert "refused User:broker with SCRAM-SHA-512" in str(refusal)
                break
            assert time.monotonic() < deadline, "the brokers still accept the old password 30 s later"
            time.sleep(0.5)
    finally:
        set_password(admin, "broker", BROKER_PASSWORD)
    assert inter_broker_login.prepare(cluster.controller, cluster.config, cluster._brokers) == []
