"""Key-ordered sharing (share.key.ordering.enable) across a leader's death on a 3-node LocalCluster:
the node leading the partition (its share-partition leader with it) is hard-killed while
confluent-kafka ShareConsumers consume a key-ordered group; the new leader rebuilds the state from
the share coordinator and learns the keys again from the log. Per key, records are first processed
in offset order across the move, none is lost, and no record is delivered (even again) after a
later record of its key was: a key is free only once its record's new state is durable. Records in
a consumer's hands when their leader died may be delivered again (at least once)."""
import threading
import time
import uuid
from collections import defaultdict

import pytest
import ray
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cluster.local import LocalCluster

FAST_LIVENESS = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
                 "replica.lag.time.max.ms": 5000}
RECORDS, KEYS = 4000, 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-key-order"), overrides=FAST_LIVENESS)
    c.start()
    yield c
    c.stop()


def test_key_order_holds_across_a_killed_leader(cluster):
    name = uuid.uuid4().hex[:6]
    topic, group = f"keyed-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource("group", group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in {"share.auto.offset.reset": "earliest", "share.key.ordering.enable": "true"}.items()])]).values():
        f.result(30)
    offsets = defaultdict(list)

    def delivered(err, msg):
        assert err is None, err
        offsets[msg.key()].append(msg.offset())

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 10})
    for i in range(RECORDS):
        p.produce(topic, key=b"key-%d" % (i % KEYS), value=b"%d" % i, partition=0, on_delivery=delivered)
        p.poll(0)
    assert p.flush(60) == 0
    expected = {k: sorted(v) for k, v in offsets.items()}

    lock = threading.Lock()
    first_accepted = defaultdict(list)   # key -> offsets in the order they were first accepted
    last_delivered: dict = {}            # key -> the highest offset delivered so far
    accepted: set = set()
    violations: list = []
    stop = threading.Event()

    def consume():
        c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        while not stop.is_set():
            try:
                got = [m for m in c.poll(0.5) if m.error() is None]
                for m in got:
                    key, o = m.key(), m.offset()
                    with lock:
                        if o < last_delivered.get(key, -1):
                            violations.append(f"{key!r} at {o} delivered after {last_delivered[key]}")
                        last_delivered[key] = max(o, last_delivered.get(key, -1))
                        if o not in accepted:
                            missing = [x for x in expected[key] if x < o and x not in accepted]
                            if missing:
                                violations.append(f"{key!r} at {o} delivered before {missing[0]} was processed")
                            accepted.add(o)
                            first_accepted[key].append(o)
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if got:
                    c.commit_sync()
            except KafkaException:
                time.sleep(0.1)
        c.close()

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    down = None
    try:
        deadline = time.monotonic() + 60
        while len(accepted) < RECORDS // 4:
            assert time.monotonic() < deadline, f"the share consumers do not consume ({len(accepted)})"
            time.sleep(0.1)
        victim = cluster.leader(topic, 0)
        at_kill = len(accepted)
        cluster.kill_node(victim)
        down = victim
        killed_at = time.monotonic()
        while len(accepted) < RECORDS:
            assert time.monotonic() < killed_at + 120, \
                f"{RECORDS - len(accepted)} records not processed 120 s after the kill ({at_kill} before it)"
            time.sleep(0.2)
        cluster.restart_node(victim)
        down = None
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        if down is not None:
            cluster.restart_node(down)
    assert not violations, violations[:10]
    assert at_kill < RECORDS, "the leader was killed mid-way"
    for key, offs in expected.items():
        assert first_accepted[key] == offs, f"{key!r} first processed out of offset order"
