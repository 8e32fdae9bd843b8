"""Replication over TLS (issue 18): three brokers whose only listener, the inter-broker one, is
SASL_SSL (PEM keystore and truststore, ACLs on, no ACL for the brokers). Followers connect to their
leaders as TLS clients that check the leader's certificate against the truststore and its host
name, then log in as User:kray-broker; an acks=all produce that needs every replica
(min.insync.replicas=3) is acknowledged only if all of that worked."""
import uuid

import pytest
import ray
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.local import LocalCluster
from tests.cluster.test_secured_replication import read_keys
from tests.tls_certs import make_pki

ADMIN_PASSWORD = "admin-plain-secret"


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
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-tls"), overrides=overrides)
    c.start()
    yield c, pki
    c.stop()


def test_followers_fetch_over_tls_and_log_in(secured):
    cluster, pki = secured
    config = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
              "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD, "ssl.ca.location": str(pki.ca_file)}
    admin = AdminClient(config)
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "3"})])[topic].result(60)
    producer = Producer({**config, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60000})
    for i in range(150):
        producer.produce(topic, key=b"%d" % i, value=b"v" * 100, partition=i % 3)
    assert producer.flush(90) == 0  # every follower fetched over TLS, logged in
    for p in admin.describe_topics(TopicCollection([topic]))[topic].result(30).partitions:
        assert len(p.isr) == 3, f"partition {p.id}: ISR {p.isr}"
    assert set(read_keys(config, topic, 3, 150)) == set(range(150))
