"""Kray's own replication traffic authenticated (issue 18): three brokers whose only listener,
the inter-broker one, is SASL_PLAINTEXT, with ACLs on and no ACL at all for the brokers. Followers
fetch from leaders as User:kray-broker (SCRAM-SHA-512 with the cluster's secret); anything that
does not log in is closed before its first request. So an acks=all produce that needs every
replica in the ISR (min.insync.replicas=3) is acknowledged only if the followers' logins worked.
And nobody else can become the broker: a login as kray-broker without the secret is refused, and
AlterUserScramCredentials refuses to make a credential under that name. Share state rides on the
same listener: share-partition leaders write it to coordinators on other brokers logged in as the
broker, and a user without CLUSTER_ACTION who sends those APIs is refused. (A leader killed and
restarted on a secured cluster, its followers logging in again: tests/cluster/test_secured_failover.py.)"""
import socket
import struct
import time
import uuid

import pytest
import ray
from confluent_kafka import AcknowledgeType, Consumer, KafkaError, Producer, ShareConsumer, TopicCollection, \
    TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from actors import internal_topics
from actors.security.principal import BROKER_USER
from actors.share_coordinator import state_partition_for
from cluster.admin import KafkaConnection
from cluster.local import LocalCluster
from protocol.errors import ErrorCode
from protocol.messages import WriteShareGroupStateRequest as W

ADMIN_PASSWORD = "admin-plain-secret"
CAROL_PASSWORD = "carol-plain-secret"  # a user with no ACL at all
OVERRIDES = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "security.inter.broker.protocol": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
    "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                        f'user_admin="{ADMIN_PASSWORD}" user_carol="{CAROL_PASSWORD}";',
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "connection.failed.authentication.delay.ms": 100,
    "group.share.heartbeat.interval.ms": 1000, "group.share.min.heartbeat.interval.ms": 500,
}


def client(bootstrap: str, user: str = "admin", password: str = ADMIN_PASSWORD, mechanism: str = "PLAIN",
           **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **extra}


def read_keys(config: dict, topic: str, partitions: int, count: int) -> list[int]:
    """The keys of `topic`'s records from offset 0, read until `count` distinct ones (or 60 s)."""
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    keys, deadline = [], time.monotonic() + 60
    while len(set(keys)) < count and time.monotonic() < deadline:
        keys += [int(m.key()) for m in consumer.consume(count, timeout=1.0) if m.error() is None]
    consumer.close()
    return keys


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-secured"), overrides=OVERRIDES)
    c.start()
    yield c
    c.stop()


def test_followers_log_in_as_the_broker_and_acks_all_needs_them(cluster):
    admin = AdminClient(client(cluster.bootstrap))
    topic = f"secured-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "3"})])[topic].result(60)
    producer = Producer(client(cluster.bootstrap, acks="all", **{"enable.idempotence": True,
                                                                 "message.timeout.ms": 60000}))
    delivered, failed = [], []
    for i in range(300):
        producer.produce(topic, key=b"%d" % i, value=b"v" * 100, partition=i % 3,
                         on_delivery=lambda err, m: (failed if err else delivered).append(err or m.offset()))
    assert producer.flush(90) == 0
    assert not failed and len(delivered) == 300  # every replica of every partition fetched: logged in
    for p in admin.describe_topics(TopicCollection([topic]))[topic].result(30).partitions:
        assert len(p.isr) == 3, f"partition {p.id}: ISR {p.isr}"
    assert set(read_keys(client(cluster.bootstrap), topic, 3, 300)) == set(range(300))


def test_no_one_else_logs_in_as_the_broker(cluster):
    admin = AdminClient(client(cluster.bootstrap))
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        BROKER_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"guessed", b"salt-salt")])
    with pytest.raises(Exception, match="UNACCEPTABLE_CREDENTIAL|kray's own brokers|Kray's own brokers"):
        futures[BROKER_USER].result(30)
    errors = []
    impostor = Producer(client(cluster.bootstrap, BROKER_USER, "guessed", "SCRAM-SHA-512", error_cb=errors.append))
    with pytest.raises(Exception):
        impostor.list_topics(timeout=5)
    impostor.poll(1)  # (error callbacks are served by poll)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_a_connection_that_does_not_log_in_gets_no_answer(cluster):
    """What a follower of an unsecured broker would send (a Fetch, no SASL): closed unanswered."""
    host, port = cluster.bootstrap.split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        body = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0 (allowed before SASL) ...
        s.sendall(struct.pack(">i", len(body)) + body)
        assert len(s.recv(4)) == 4
        s.recv(65536)
        body = struct.pack(">hhih", 3, 1, 2, -1) + struct.pack(">i", 0)  # ... Metadata v1: not before SASL
        s.sendall(struct.pack(">i", len(body)) + body)
        s.settimeout(10)
        assert s.recv(65536) == b""  # closed


def test_share_state_crosses_brokers_as_the_broker_and_no_one_else_may_send_it(cluster):
    """A share group on a topic whose partitions lead on all three brokers, and a group whose
    share-state coordinator (a __share_group_state leader) is on another broker than the
    partition's leader: the share-partition leader writes the state to that broker's SASL listener
    as User:kray-broker (no ACL for it), so every acknowledgement is durable there (the coordinator's
    state moves past the accepted records). Carol, a user without CLUSTER_ACTION, sending
    WriteShareGroupState to the same listener is answered CLUSTER_AUTHORIZATION_FAILED and changes
    nothing."""
    admin = AdminClient(client(cluster.bootstrap))
    topic = f"secured-share-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(60)
    image = ray.get(cluster.controller.ensure_internal_topic.remote(internal_topics.SHARE_GROUP_STATE))
    state = image.topics[internal_topics.SHARE_GROUP_STATE]
    topic_id = image.topics[topic].topic_id
    leaders = [cluster.leader(topic, p) for p in range(3)]
    assert sorted(leaders) == [1, 2, 3]

    def coordinator_broker(group, p):
        return state.partitions[state_partition_for(group, topic_id, p, len(state.partitions))].leader
    group = next(g for g in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(1000))
                 if all(coordinator_broker(g, p) != leaders[p] for p in range(3)))  # every write crosses brokers
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    producer = Producer(client(cluster.bootstrap, acks="all"))
    for i in range(90):
        producer.produce(topic, key=b"%d" % i, value=b"v", partition=i % 3)
    assert producer.flush(60) == 0

    consumer = ShareConsumer(client(cluster.bootstrap, **{"group.id": group,
                                                          "share.acknowledgement.mode": "explicit"}))
    consumer.subscribe([topic])
    keys, deadline = [], time.monotonic() + 90
    while len(set(keys)) < 90 and time.monotonic() < deadline:
        for m in consumer.poll(1.0):
            if m.error() is None:
                keys.append(int(m.key()))
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    consumer.close()
    assert sorted(keys) == list(range(90)), "every record once"

    def start_offsets():
        out = []
        for p in range(3):
            index = state_partition_for(group, topic_id, p, len(state.partitions))
            summary = ray.get(image.coordinators[(internal_topics.SHARE_GROUP_STATE, index)]
                              .read_state_summary.remote(group, topic_id, p))
            out.append((summary.error_code, summary.start_offset))
        return out
    assert start_offsets() == [(0, 30)] * 3, "every acknowledgement durable at a coordinator on another broker"

    p = 0
    host = next(b for b in cluster.bootstrap.split(",") if b.endswith(f":{image.brokers[coordinator_broker(group, p)].port}"))
    carol = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "carol",
             "sasl.password": CAROL_PASSWORD}
    with KafkaConnection(host, properties=carol) as conn:
        request = W(group_id=group, topics=[W.WriteStateData(topic_id=topic_id, partitions=[W.PartitionData(
            partition=p, state_epoch=0, leader_epoch=0, start_offset=0, delivery_complete_count=-1,
            state_batches=[])])])
        refused = conn.send(request, 1).results[0].partitions[0]
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert start_offsets() == [(0, 30)] * 3, "carol's write changed nothing"
