"""Group metrics reach Ray's Prometheus endpoint: acknowledgements by type, group counts by type and
state, consumer lag."""
import time
import urllib.request

import ray
from confluent_kafka import AcknowledgeType, ShareConsumer

from actors.metrics import counter_deltas
from tests.actors.queues import queue_with_records


def test_counter_deltas():
    assert counter_deltas({1: 3, 2: 0}, {1: 5, 2: 0, 3: 1}) == {1: 2, 3: 1}


def scrape() -> str:
    port = ray._private.worker.global_worker.node.metrics_export_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def test_acknowledgements_are_counted_by_type(broker):
    topic, group = "metered", "metered-group"
    queue_with_records(broker.bootstrap, topic, group, 10)
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    done, deadline = 0, time.monotonic() + 60
    while done < 10 and time.monotonic() < deadline:
        for m in c.poll(1.0):
            if m.error() is None:
                c.acknowledge(m, AcknowledgeType.REJECT if int(m.value()) < 3 else AcknowledgeType.ACCEPT)
                done += 1
        c.commit_sync()
    c.close()
    assert done == 10
    text, deadline = "", time.monotonic() + 60  # Ray exports metrics every few seconds
    while time.monotonic() < deadline:
        text = scrape()
        if 'ack_type="reject"' in text and 'ack_type="accept"' in text and "kray_group_count" in text:
            break
        time.sleep(2)
    # Ray prefixes its exports with ray_ and suffixes counters with _total; one line per worker
    lines = [line for line in text.splitlines() if line.startswith("ray_kray_record_acknowledgement_count")]
    values = {}
    for line in lines:
        for ack_type in ("reject", "accept"):
            if f'ack_type="{ack_type}"' in line:
                values[ack_type] = values.get(ack_type, 0) + float(line.rsplit(" ", 1)[1])
    assert values.get("reject", 0) >= 3 and values.get("accept", 0) >= 7, lines
    assert "ray_kray_share_partition_load_time_ms" in text


def test_consumer_groups_are_counted_and_their_lag_exported(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    topic, group = "lagging", "lagging-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        p.produce(topic, value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 40)], asynchronous=False)  # 60 records behind the end
    c.close()
    text, deadline = "", time.monotonic() + 60
    tags = (f'group="{group}"', 'partition="0"', f'topic="{topic}"')  # among Ray's own tags, sorted by name

    def lag_lines():
        return [line for line in text.splitlines()
                if line.startswith("ray_kray_consumer_group_lag") and all(t in line for t in tags)]
    while time.monotonic() < deadline:
        text = scrape()
        if lag_lines() and 'type="classic"' in text:
            break
        time.sleep(2)
    lag = lag_lines()
    assert lag and float(lag[0].rsplit(" ", 1)[1]) == 60, lag
    counts = [line for line in text.splitlines() if line.startswith("ray_kray_group_count")
              and 'type="classic"' in line and 'state="Empty"' in line]  # one series per coordinator
    assert counts and sum(float(line.rsplit(" ", 1)[1]) for line in counts) >= 1, counts
