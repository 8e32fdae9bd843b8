"""Three broker nodes on one machine (LocalCluster on ray.cluster_utils): clients see one broker
per Ray node, partitions spread over them, and produce, fetch and share groups work through every
gateway. The Ray head runs the controller only."""
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import ray
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.local import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-cluster"), overrides={
        "group.share.heartbeat.interval.ms": 1000, "group.share.min.heartbeat.interval.ms": 500})
    c.start()
    yield c
    c.stop()


def test_one_broker_per_node_and_partitions_spread(cluster):
    assert cluster.brokers == [1, 2, 3] and len(cluster.bootstrap.split(",")) == 3
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("spread", 6, 1)])["spread"].result(30)
    for gateway in cluster.bootstrap.split(","):  # any gateway describes the whole cluster
        deadline = time.monotonic() + 30
        while True:  # as Kafka's own tests wait for partition metadata after CreateTopics: leaders may be -1 briefly
            md = AdminClient({"bootstrap.servers": gateway}).list_topics(timeout=30)
            leaders = [md.topics["spread"].partitions[i].leader for i in range(6)]
            if -1 not in leaders or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert sorted(md.brokers) == [1, 2, 3]
        assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
        assert leaders == [cluster.leader("spread", i) for i in range(6)]
    nodes = {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n["Alive"]}
    image = cluster.metadata()
    for (topic_id, index), handle in image.partition_replicas.items():
        topic = image.topic_by_id(topic_id)
        if topic.name == "spread":  # each leader actor really runs on its broker's node
            node = ray.get(handle.node_id.remote())
            assert nodes[node].get("kray-broker-id") == str(topic.partitions[index].leader)
    assert not any(l.get("kray-broker-id") for l in nodes.values() if l.get("kray-role") == "controller")


def test_a_broker_answers_not_leader_for_partitions_it_does_not_lead(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("elsewhere", 1, 1)])["elsewhere"].result(30)
    leader = cluster.leader("elsewhere", 0)
    other = next(g for b, g in zip(cluster.brokers, cluster.bootstrap.split(",")) if b != leader)
    from tests.cluster.raw import produce_one
    assert produce_one(other, "elsewhere", 0) == 6  # NOT_LEADER_OR_FOLLOWER


def test_produce_fetch_and_share_groups_through_every_gateway(cluster):
    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    kray = Path(sys.executable).parent / "kray"
    subprocess.run([str(kray), "share-groups", "--bootstrap-server", cluster.bootstrap, "--reset-offsets",
                    "--group", group, "--topic", topic, "--to-earliest", "--execute"], check=True, capture_output=True)
    sent = 0
    for gateway in cluster.bootstrap.split(","):  # each producer bootstraps from one gateway only
        p = Producer({"bootstrap.servers": gateway, "acks": "all"})
        for i in range(1000):
            p.produce(topic, key=b"%d" % (sent + i), value=b"v", partition=i % 3)
        assert p.flush(30) == 0
        sent += 1000
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "plain"})
    c.assign([TopicPartition(topic, i, 0) for i in range(3)])
    got, deadline = 0, time.monotonic() + 30
    while got < sent and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(1000, timeout=1.0) if m.error() is None)
    c.close()
    assert got == sent

    consumers = [ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group}) for _ in range(2)]
    for s in consumers:
        s.subscribe([topic])
    keys, deadline = [], time.monotonic() + 60
    while len(keys) < sent and time.monotonic() < deadline:
        for s in consumers:
            keys += [int(m.key()) for m in s.poll(0.5) if m.error() is None]
    for s in consumers:
        s.close()
    assert sorted(keys) == list(range(sent)), "every record once, from partitions on all three brokers"
