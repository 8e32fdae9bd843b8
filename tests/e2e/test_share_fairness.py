"""Share groups stay fair and lose nothing (issue 7, items 5 and 6a), with confluent-kafka 2.16.1's
ShareConsumer against a real `kray start` that keeps Kafka's default acquisition lock (30 s), so a
record held by a member that stopped polling stays held for 30 s."""
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cluster.admin import KafkaConnection
from cluster.tools.share_groups import _coordinator
from protocol.messages import ShareGroupDescribeRequest
from tests.kray_process import KrayProcess

LOCK_MS = 30_000  # group.share.record.lock.duration.ms, Kafka's default
# fast heartbeats so that joining takes ~1 s, not ~5 s; everything else at Kafka's defaults
OVERRIDES = ("group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500")


@pytest.fixture(scope="module")
def kray_fair(tmp_path_factory):
    server = KrayProcess(tmp_path_factory.mktemp("kray-fair"), overrides=OVERRIDES)
    yield server.start()
    server.stop()


def create_topic(bootstrap, partitions, group=None, reset=None):
    topic = f"fair-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    if reset is not None:
        for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
                ConfigEntry("share.auto.offset.reset", reset, incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(30)
    return topic


def share_consumer(bootstrap, group, topic):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def assignments(bootstrap, group) -> dict[str, int]:
    """member id -> how many partitions the group coordinator has assigned it (ShareGroupDescribe)."""
    with KafkaConnection(bootstrap, client_id="fairness-test") as conn:
        coordinator = _coordinator(conn, group)
        try:
            described = coordinator.send(ShareGroupDescribeRequest(group_ids=[group])).groups[0]
        finally:
            if coordinator is not conn:
                coordinator.close()
    if described.error_code:
        return {}
    return {m.member_id: sum(len(t.partitions) for t in m.assignment.topic_partitions) for m in described.members}


def wait_for(condition, timeout_s, what, step=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if step is not None:
            step()
        else:
            time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def produce(bootstrap, topic, partitions, count, first=0):
    """Small records (keys first.. first+count-1) from a producer with librdkafka's default batching
    (up to 10,000 records a batch; a 20 ms linger makes it ~1,000 a partition here)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(first, first + count):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def drain(consumer, keys, want, timeout_s):
    deadline = time.monotonic() + timeout_s
    while len(keys) < want and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            keys.append(int(m.key()))
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
    consumer.commit_sync()
    return keys


def test_latest_reset_keeps_every_record_produced_after_the_assignment(kray_fair):
    """share.auto.offset.reset=latest (the default) is resolved when the group coordinator initializes the
    share-partition (KIP-932 InitializeShareGroupState), not when the share-partition leader is first asked
    for records: a consumer that has its assignment and then waits gets every record produced afterwards."""
    group = f"latest-{uuid.uuid4().hex[:8]}"
    topic = create_topic(kray_fair, 3)
    produce(kray_fair, topic, 3, 30)            # before the group exists: latest skips these
    c = share_consumer(kray_fair, group, topic)
    try:
        # subscribed, not fetching yet: the heartbeats run in librdkafka's background thread
        wait_for(lambda: sum(assignments(kray_fair, group).values()) == 3, 30, "the member's assignment")
        produce(kray_fair, topic, 3, 300, first=1000)
        keys = drain(c, [], 300, 30)
    finally:
        c.close()
    assert sorted(keys) == list(range(1000, 1300)), f"{len(keys)} of 300 records produced after the assignment"


def test_a_joining_member_gets_work_while_idle_members_hold_fetches(kray_fair):
    """Three members poll an empty 3-partition topic and stop polling; 3,000 small records arrive; a fourth
    member joins and polls. The idle members' waiting ShareFetches may acquire at most MaxRecords (500)
    each, so the newcomer gets records at once, not when the others' locks expire 30 s later."""
    group = f"fair-{uuid.uuid4().hex[:8]}"
    topic = create_topic(kray_fair, 3, group, "earliest")
    idle = [share_consumer(kray_fair, group, topic) for _ in range(3)]
    newcomer = None
    try:
        def poll_idle():
            for c in idle:
                assert list(c.poll(0.2)) == []
        wait_for(lambda: len(assignments(kray_fair, group)) == 3 and all(assignments(kray_fair, group).values()),
                 30, "three members with assignments", step=poll_idle)
        for _ in range(5):   # a few more rounds, so every member has a ShareFetch waiting on the brokers
            poll_idle()
        produce(kray_fair, topic, 3, 3000)
        joined = time.monotonic()
        newcomer = share_consumer(kray_fair, group, topic)
        keys = []
        while not keys and time.monotonic() - joined < LOCK_MS / 1000 + 10:
            for m in newcomer.poll(0.5):
                assert m.error() is None, m.error()
                keys.append(int(m.key()))
                newcomer.acknowledge(m, AcknowledgeType.ACCEPT)
        waited_s = time.monotonic() - joined
        print(f"the newcomer's first poll with records: {len(keys)} records, {waited_s:.2f} s after it joined")
        newcomer.commit_sync()
        assert keys, "the newcomer got nothing"
        assert waited_s < 10, f"the newcomer's first records came {waited_s:.1f} s after it joined (locks: 30 s)"
    finally:
        for c in idle + ([newcomer] if newcomer else []):
            c.close()


def test_a_first_delivery_is_delivery_one_while_partitions_move(kray_fair):
    """Members join one by one while records arrive, so partitions move between them and long
    polls are given up on mid-wait; records may only be redelivered after a delivery, so no
    first delivery may carry a delivery count above 1 (issue 7, item 6b: a cancelled waiting
    ShareFetch used to acquire records nobody received, and their first delivery said 2)."""
    group = f"first-{uuid.uuid4().hex[:6]}"
    topic = create_topic(kray_fair, 3, group, "earliest")
    producer = Producer({"bootstrap.servers": kray_fair, "linger.ms": 1, "batch.num.messages": 20})
    members, seen, sent = [], {}, 0
    deadline = time.monotonic() + 60
    for round_ in range(12):
        if round_ % 4 == 0:  # a new member at rounds 0, 4, 8: partitions move
            members.append(share_consumer(kray_fair, group, topic))
        for i in range(250):
            producer.produce(topic, key=b"%d" % sent, value=b"v", partition=sent % 3)
            sent += 1
        producer.poll(0)
        for c in members:
            for m in c.poll(0.3):
                if m.error() is None:
                    seen.setdefault(int(m.key()), []).append(m.delivery_count())
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
    assert producer.flush(30) == 0
    while len(seen) < sent and time.monotonic() < deadline:
        for c in members:
            for m in c.poll(0.3):
                if m.error() is None:
                    seen.setdefault(int(m.key()), []).append(m.delivery_count())
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
    for c in members:
        c.commit_sync()
        c.close()
    assert sorted(seen) == list(range(sent))
    first_counts = [counts[0] for counts in seen.values()]
    assert first_counts.count(1) == sent, f"{sent - first_counts.count(1)} first deliveries carried a count > 1"
