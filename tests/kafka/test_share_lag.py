"""DescribeShareGroupOffsets' lag as Kafka 4.4 counts it: records between the start offset and the
high watermark not yet delivered for good. A REJECTed record beyond the start offset is delivered
for good (issue 37: Kray counted it, LAG 5 where Kafka says 4)."""
import time
import uuid

from protocol import messages as m


def lag_after_one_reject(bootstrap: str) -> tuple[int, int]:
    """5 records; the share consumer REJECTs offset 1 and RELEASEs every other delivery; then
    (start offset, lag) once DescribeShareGroupOffsets' answer has settled."""
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    from cluster.admin import KafkaConnection
    name = uuid.uuid4().hex[:6]
    topic, group = f"lag-{name}", f"lag-group-{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    seen, deadline = set(), time.monotonic() + 60
    while len(seen) < 5 and time.monotonic() < deadline:
        got = [msg for msg in c.poll(0.5) if msg.error() is None]
        for msg in got:
            seen.add(msg.offset())
            c.acknowledge(msg, AcknowledgeType.REJECT if msg.offset() == 1 else AcknowledgeType.RELEASE)
        if got:
            c.commit_sync()
    c.close()
    assert seen == set(range(5))
    answers, deadline = [], time.monotonic() + 15
    with KafkaConnection(bootstrap) as conn:
        while time.monotonic() < deadline:
            r = conn.send(m.DescribeShareGroupOffsetsRequest(groups=[
                m.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]))
            (partition,) = [p for t in r.groups[0].topics for p in t.partitions]
            answers.append((partition.start_offset, partition.lag))
            if len(answers) >= 5 and len(set(answers[-5:])) == 1:
                break
            time.sleep(0.3)
    return answers[-1]


def test_a_rejected_record_beyond_the_start_offset_is_not_lag(both):
    kafka, kray = (lag_after_one_reject(both[side]) for side in ("kafka", "kray"))
    assert kafka == (0, 4), kafka  # offsets 0, 2, 3, 4 left to deliver
    assert kray == kafka
