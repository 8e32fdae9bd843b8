"""DeleteRecords (AdminClient.delete_records, kafka-delete-records.sh) against a real `kray start`:
the log start offset moves, consumers and share groups start there, and bad requests get Kafka's
errors."""
import time
import uuid

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, ShareConsumer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType


def topic_with(kray, records: int, partitions: int = 1, config=None) -> str:
    topic = f"dr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kray})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(30)
    p = Producer({"bootstrap.servers": kray})
    for i in range(records):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0
    return topic


def delete(kray, topic, offsets: dict[int, int]):
    """{partition: offset} -> {partition: low watermark or the KafkaError}."""
    admin = AdminClient({"bootstrap.servers": kray})
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()], request_timeout=30)
    out = {}
    for tp, f in futures.items():
        try:
            out[tp.partition] = f.result(30).low_watermark
        except KafkaException as e:
            out[tp.partition] = e.args[0]
    return out


def read_values(kray, topic, count, timeout_s=20):
    c = Consumer({"bootstrap.servers": kray, "group.id": f"r-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += [(m.offset(), m.value()) for m in c.consume(100, timeout=0.5) if m.error() is None]
    c.close()
    return got


def test_records_below_the_new_log_start_are_gone_for_consumers(kray):
    topic = topic_with(kray, 10)
    assert delete(kray, topic, {0: 4}) == {0: 4}
    c = Consumer({"bootstrap.servers": kray, "group.id": "dr-wm"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, 10)
    c.close()
    assert read_values(kray, topic, 6) == [(o, b"%d" % o) for o in range(4, 10)]
    assert delete(kray, topic, {0: 2}) == {0: 4}, "an offset below the log start changes nothing"
    assert delete(kray, topic, {0: -1}) == {0: 10}, "-1: up to the high watermark"


def test_bad_delete_records_get_kafkas_errors(kray):
    topic = topic_with(kray, 3)
    out = delete(kray, topic, {0: 100})
    assert out[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    compacted = topic_with(kray, 0, config={"cleanup.policy": "compact"})
    assert delete(kray, compacted, {0: 0})[0].code() == KafkaError.POLICY_VIOLATION


def test_a_share_group_starts_at_the_new_log_start(kray):
    topic, group = topic_with(kray, 10), f"dr-share-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kray})
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    assert delete(kray, topic, {0: 7}) == {0: 7}
    c = ShareConsumer({"bootstrap.servers": kray, "group.id": group})
    c.subscribe([topic])
    got, deadline = set(), time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        got |= {m.offset() for m in c.poll(0.5) if m.error() is None}
    c.close()
    assert got == {7, 8, 9}


def test_kray_delete_records_reads_kafkas_offset_file(kray, tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path
    topic = topic_with(kray, 6, partitions=2)                 # 3 records in each partition
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 2},
                                               {"topic": topic, "partition": 1, "offset": -1}], "version": 1}))
    run = subprocess.run([str(Path(sys.executable).parent / "kray"), "delete-records", "--bootstrap-server", kray,
                          "--offset-json-file", str(plan)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                       f"partition: {topic}-0\tlow_watermark: 2", f"partition: {topic}-1\tlow_watermark: 3"]
    plan.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 99}]}))
    run = subprocess.run([str(Path(sys.executable).parent / "kray"), "delete-records", "--bootstrap-server", kray,
                          "--offset-json-file", str(plan)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and f"partition: {topic}-0\terror: OFFSET_OUT_OF_RANGE" in run.stdout

