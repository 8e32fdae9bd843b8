"""Restarting `kray start` on the same data dir brings back every topic and acknowledged record."""
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.kray_process import KrayProcess

RECORDS = 5000


def read_all(bootstrap, topic, partitions, count):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, empty = [], 0
    while len(got) < count and empty < 30:
        batch = [m for m in c.consume(1000, timeout=1.0) if m.error() is None]
        empty = 0 if batch else empty + 1
        got += batch
    c.close()
    return got


def test_topics_and_acknowledged_records_survive_a_restart(tmp_path):
    server = KrayProcess(tmp_path / "data")
    bootstrap = server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("durable", 2, 1, config={"retention.ms": "86400000"})])["durable"].result(30)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
        acked = []
        for i in range(RECORDS):
            p.produce("durable", key=b"%d" % i, value=b"v%d" % i, partition=i % 2,
                      on_delivery=lambda e, m: acked.append((m.partition(), m.offset(), m.key())) if e is None else None)
            if i % 1000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        assert len(acked) == RECORDS
    finally:
        assert server.stop() == 0, "kray start exits 0 on SIGTERM"

    server = KrayProcess(tmp_path / "data", port=server.port)
    bootstrap = server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics(timeout=30)
        assert "durable" in md.topics and len(md.topics["durable"].partitions) == 2
        configs = admin.describe_configs([ConfigResource("topic", "durable")])
        described = list(configs.values())[0].result(30)
        assert described["retention.ms"].value == "86400000"
        got = read_all(bootstrap, "durable", 2, RECORDS)
        assert sorted((m.partition(), m.offset(), m.key()) for m in got) == sorted(acked)
        # appends continue after the recovered end
        p = Producer({"bootstrap.servers": bootstrap})
        offsets = []
        p.produce("durable", value=b"after", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
        p.flush(30)
        assert offsets == [RECORDS // 2]
    finally:
        server.stop()


def test_share_group_acknowledgements_survive_a_restart(tmp_path):
    from confluent_kafka import AcknowledgeType, ShareConsumer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ResourceType
    fast = ("group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500")

    def consume(bootstrap, stop_after, forbidden=frozenset()):
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "durable-workers",
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["jobs"])
        accepted, deadline = set(), time.monotonic() + 60
        while len(accepted) < stop_after and time.monotonic() < deadline:
            for m in c.poll(1.0):
                if m.error() is None:
                    assert int(m.key()) not in forbidden, "an acknowledged record came back after the restart"
                    accepted.add(int(m.key()))
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync()
        c.close()
        return accepted

    server = KrayProcess(tmp_path / "data", overrides=fast)
    bootstrap = server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("jobs", 2, 1)])["jobs"].result(30)
        for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, "durable-workers",
                incremental_configs=[ConfigEntry("share.auto.offset.reset", "earliest",
                                                 incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 25})
        for i in range(1000):
            p.produce("jobs", key=b"%d" % i, value=b"job", partition=i % 2)
        assert p.flush(30) == 0
        first = consume(bootstrap, 400)
        assert len(first) >= 400
    finally:
        assert server.stop() == 0

    server = KrayProcess(tmp_path / "data", port=server.port, overrides=fast)
    bootstrap = server.start()
    try:
        rest = consume(bootstrap, 1000 - len(first), forbidden=first)
        assert first | rest == set(range(1000))
    finally:
        server.stop()
