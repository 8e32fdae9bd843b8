"""A broker is a Ray node: on one node, clients see one broker (the node's gateway, its only
client listener), which leads every partition and reaches the partition replicas over their
data-path sockets."""
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from tests.kray_process import KrayProcess


@pytest.fixture(scope="module")
def kray_gateway_only(tmp_path_factory):
    server = KrayProcess(tmp_path_factory.mktemp("kray-gw"), overrides=(
        "group.share.heartbeat.interval.ms=1000",
        "group.share.min.heartbeat.interval.ms=500"))
    yield server.start()
    server.stop()


def test_metadata_and_describe_cluster_name_the_node_broker_only(kray_gateway_only):
    admin = AdminClient({"bootstrap.servers": kray_gateway_only})
    admin.create_topics([NewTopic("gw-topic", 3, 1)])["gw-topic"].result(30)
    md = admin.list_topics(timeout=30)
    host, port = kray_gateway_only.split(":")
    assert {b: (x.host, x.port) for b, x in md.brokers.items()} == {0: (host, int(port))}
    assert {p.leader for p in md.topics["gw-topic"].partitions.values()} == {0}
    assert {tuple(p.replicas) for p in md.topics["gw-topic"].partitions.values()} == {(0,)}
    described = admin.describe_cluster().result(30)
    assert [n.id for n in described.nodes] == [0] and described.controller.id == 0


def test_produce_fetch_and_share_consume_through_the_gateway(kray_gateway_only):
    bootstrap, topic, group = kray_gateway_only, f"gw-{uuid.uuid4().hex[:6]}", f"gwg-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.num.messages": 50})
    for i in range(2000):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "gw-plain"})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got, deadline = 0, time.monotonic() + 30
    while got < 2000 and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(500, timeout=1.0) if m.error() is None)
    c.close()
    assert got == 2000

    s = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    s.subscribe([topic])
    accepted, released, deadline = set(), set(), time.monotonic() + 60
    while len(accepted) < 2000 and time.monotonic() < deadline:
        for m in s.poll(1.0):
            if m.error() is not None:
                continue
            i = int(m.key())
            if i % 100 == 0 and i not in released:
                released.add(i)
                s.acknowledge(m, AcknowledgeType.RELEASE)
            else:
                assert i not in accepted
                accepted.add(i)
                s.acknowledge(m, AcknowledgeType.ACCEPT)
        s.commit_sync()
    s.close()
    assert accepted == set(range(2000)) and len(released) == 20
