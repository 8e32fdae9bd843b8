"""A broker's Ray node dies and comes back (LocalCluster.kill_node / restart_node): with one
replica per partition, the survivors keep serving their partitions and stop naming the dead
broker, and the broker returns under its id, on its port, with every record it had acknowledged;
with three replicas, a seeded chaos schedule of pauses, kills and restarts loses no acknowledged
record (tests/cluster/test_replication.py has the single-fault cases). Both run secured too
(tests/cluster/test_secured_failover.py, with its `cluster` and `client` fixtures)."""
import threading
import time
import uuid

import pytest
import ray
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.local import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-node-loss"))
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def client() -> dict:
    """The clients' security settings: none here (PLAINTEXT)."""
    return {}


def _produce(bootstrap: str, topic: str, partitions, count: int, start: int = 0, client: dict | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", **(client or {})})
    for i in range(start, start + count):
        p.produce(topic, key=b"%d" % i, value=b"v" * 100, partition=partitions[i % len(partitions)])
    assert p.flush(30) == 0


def _read_all(bootstrap: str, topic: str, partitions: int, expected: int, client: dict | None = None) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", **(client or {})})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    keys, deadline = [], time.monotonic() + 60
    while len(keys) < expected and time.monotonic() < deadline:
        keys += [int(m.key()) for m in c.consume(1000, timeout=1.0) if m.error() is None]
    c.close()
    return sorted(keys)


def _brokers_seen(gateway: str, client: dict | None = None) -> list[int]:
    return sorted(AdminClient({"bootstrap.servers": gateway, **(client or {})}).list_topics(timeout=10).brokers)


def test_a_killed_broker_returns_with_its_id_port_and_records(cluster, client):
    topic = f"t-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **client})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    gateways = dict(zip(cluster.brokers, cluster.bootstrap.split(",")))
    _produce(cluster.bootstrap, topic, [0, 1, 2], 3000, client=client)
    victim = cluster.leader(topic, 0)
    survivors = [b for b in cluster.brokers if b != victim]
    on_survivors = [i for i in range(3) if cluster.leader(topic, i) != victim]

    cluster.kill_node(victim)
    deadline = time.monotonic() + 30  # Ray notices in ~2 s (fast health checks), the controller within 1 s more
    while victim in _brokers_seen(gateways[survivors[0]], client):
        assert time.monotonic() < deadline, f"broker {victim} still listed 30 s after its node died"
        time.sleep(0.5)
    md = AdminClient({"bootstrap.servers": gateways[survivors[0]], **client}).list_topics(topic, timeout=10)
    assert md.topics[topic].partitions[0].error.code() == KafkaError.LEADER_NOT_AVAILABLE
    # the partitions on the surviving brokers keep taking writes meanwhile
    _produce(gateways[survivors[0]], topic, on_survivors, 1000, start=3000, client=client)

    cluster.restart_node(victim)
    assert sorted(cluster.metadata().brokers) == [1, 2, 3]
    assert _brokers_seen(gateways[victim], client) == [1, 2, 3], "the same broker id answers on the same port"
    assert cluster.leader(topic, 0) == victim
    assert _read_all(cluster.bootstrap, topic, 3, 4000, client) == list(range(4000)), \
        "every acknowledged record, including those on the node that died"
    _produce(gateways[victim], topic, [0], 10, start=4000, client=client)  # and it takes writes again


def test_a_chaos_schedule_loses_no_acknowledged_record(cluster, client, capsys):
    """Seed 3: broker 2 paused long enough for Ray to declare it dead, then killed with SIGTERM,
    then broker 3 paused. An idempotent producer runs throughout (acks=all into three replicas,
    min.insync.replicas=2, retries until delivered); after the schedule every record it saw
    acknowledged is there, and the cluster is whole."""
    topic = f"chaos-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **client})
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    acknowledged, stop = [], threading.Event()

    def produce():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                      "enable.idempotence": True, **client})
        i = 0
        while not stop.is_set():
            p.produce(topic, key=b"%d" % i, value=b"v", partition=i % 3,
                      on_delivery=lambda err, m: err is None and acknowledged.append(int(m.key())))
            p.poll(0)
            i += 1
            time.sleep(0.002)
        assert p.flush(120) == 0

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        cluster.chaos(seed=3, duration_s=16, mean_gap_s=3, down_s=(2, 5))
    finally:
        stop.set()
        producer.join(180)
    timeline = capsys.readouterr().out
    for line in ("pause broker 2", "resume broker 2", "kill-graceful broker 2", "restart broker 2",
                 "pause broker 3", "resume broker 3", "broker 2 serves clients again", "leadership:"):
        assert line in timeline, f"{line!r} missing from the timeline:\n{timeline}"
    assert sorted(cluster.metadata().brokers) == [1, 2, 3]
    assert len(acknowledged) > 1000
    got = set(_read_all(cluster.bootstrap, topic, 3, len(acknowledged), client))
    assert not set(acknowledged) - got, "acknowledged records lost"
