"""Dead-letter topics for share groups (KIP-1191) with confluent-kafka's ShareConsumer against a real
`kray start`: rejected and exhausted records reach the group's DLQ topic with the headers that
say where they came from and why, copied whole or not, and a topic not enabled as a DLQ is refused."""
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Consumer, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from tests.kray_process import KrayProcess

LOCK_MS = 2000
OVERRIDES = (f"group.share.record.lock.duration.ms={LOCK_MS}", "group.share.min.record.lock.duration.ms=1000",
             "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500",
             f"group.share.delivery.count.limit={3}")
DELIVERY_LIMIT = 3


@pytest.fixture(scope="module")
def kray_dlq(tmp_path_factory):
    server = KrayProcess(tmp_path_factory.mktemp("kray-dlq"), overrides=OVERRIDES)
    yield server.start()
    server.stop()


def set_group_configs(bootstrap, group, configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                             incremental_configs=entries)]).values():
        f.result(30)


def setup(bootstrap, records, copy=False, dlq_enabled=True, headers=None, dlq_configs=None, value_bytes=None):
    """A one-partition topic with `records` records, its DLQ topic and a group using it."""
    name = uuid.uuid4().hex[:8]
    topic, dlq, group = f"q-{name}", f"dlq.q-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    dlq_configs = ({"errors.deadletterqueue.group.enable": "true"} if dlq_enabled else {}) | (dlq_configs or {})
    for f in admin.create_topics([NewTopic(topic, 1, 1), NewTopic(dlq, 1, 1, config=dlq_configs)]).values():
        f.result(30)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest",
                                         "errors.deadletterqueue.topic.name": dlq,
                                         "errors.deadletterqueue.copy.record.enable": "true" if copy else "false"})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):
        p.produce(topic, key=b"k%d" % i, value=b"x" * value_bytes if value_bytes else b"v%d" % i, headers=headers)
    assert p.flush(30) == 0
    return topic, dlq, group


def consume(bootstrap, group, topic, decide, expected, timeout_s=40):
    """Share-consume, acknowledging each record as decide(offset, delivery_count) says, until
    `expected` acknowledgements that end a record's deliveries (ACCEPT, REJECT, RELEASE of its last) were made."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    done, deadline = 0, time.monotonic() + timeout_s
    while done < expected and time.monotonic() < deadline:
        got = [m for m in c.poll(0.5) if m.error() is None]
        for m in got:
            kind = decide(m.offset(), m.delivery_count())
            c.acknowledge(m, kind)
            done += kind in (AcknowledgeType.ACCEPT, AcknowledgeType.REJECT) or m.delivery_count() >= DELIVERY_LIMIT
        if got:
            c.commit_sync()
    c.close()
    return done


def read_all(bootstrap, topic, expected, timeout_s=30):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append(m)
    extra = c.poll(1.0)  # nothing beyond what was expected (at-least-once may only add on a failover)
    c.close()
    assert extra is None or extra.error() is not None, "more DLQ records than records dead-lettered"
    return out


def dlq_headers(m):
    return {k: v.decode() for k, v in (m.headers() or []) if k.startswith("__dlq.")}


def test_rejected_records_reach_the_dlq_topic_with_their_coordinates(kray_dlq):
    topic, dlq, group = setup(kray_dlq, 20)
    rejected = {o for o in range(20) if o % 4 == 0}
    decide = lambda offset, _: AcknowledgeType.REJECT if offset in rejected else AcknowledgeType.ACCEPT
    assert consume(kray_dlq, group, topic, decide, 20) == 20
    letters = read_all(kray_dlq, dlq, len(rejected))
    assert {int(dlq_headers(m)["__dlq.errors.offset"]) for m in letters} == rejected
    for m in letters:
        assert m.key() is None and m.value() is None, "copy.record.enable=false: coordinates only"
        h = dlq_headers(m)
        assert (h["__dlq.errors.group"], h["__dlq.errors.topic"], h["__dlq.errors.partition"]) == (group, topic, "0")
        assert (h["__dlq.errors.delivery.count"], h["__dlq.errors.message"]) == ("1", "Offset rejected by client.")
    described = kray_tool(kray_dlq, "share-groups", "--describe", "--group", group)
    assert described.returncode == 0, described.stderr
    # every rejected record written, none left waiting ARCHIVING
    assert f"{group}\t{dlq}\t{len(rejected)}\t0" in described.stdout.splitlines(), described.stdout


def kray_tool(bootstrap, *args, timeout_s=60):
    import subprocess
    import sys
    from pathlib import Path
    return subprocess.run([str(Path(sys.executable).parent / "kray"), *args, "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=timeout_s)


def test_copy_record_carries_the_key_value_and_headers(kray_dlq):
    topic, dlq, group = setup(kray_dlq, 6, copy=True, headers=[("trace", b"t-1")])
    decide = lambda offset, _: AcknowledgeType.REJECT if offset % 2 else AcknowledgeType.ACCEPT
    assert consume(kray_dlq, group, topic, decide, 6) == 6
    letters = sorted(read_all(kray_dlq, dlq, 3), key=lambda m: int(dlq_headers(m)["__dlq.errors.offset"]))
    assert [(m.key(), m.value()) for m in letters] == [(b"k1", b"v1"), (b"k3", b"v3"), (b"k5", b"v5")]
    assert all(("trace", b"t-1") in m.headers() for m in letters)


def test_a_copy_too_large_for_the_dlq_topic_goes_as_its_coordinates(kray_dlq):
    topic, dlq, group = setup(kray_dlq, 2, copy=True, dlq_configs={"max.message.bytes": "1000"}, value_bytes=4000)
    assert consume(kray_dlq, group, topic, lambda *_: AcknowledgeType.REJECT, 2) == 2
    letters = read_all(kray_dlq, dlq, 2)
    assert [(m.key(), m.value()) for m in letters] == [(None, None)] * 2
    assert sorted(dlq_headers(m)["__dlq.errors.offset"] for m in letters) == ["0", "1"]


def test_records_exhausting_their_deliveries_go_to_the_dlq_and_none_is_left_unarchived(kray_dlq):
    topic, dlq, group = setup(kray_dlq, 4)
    # offset 1 is released every time (the broker's delivery limit is 3); the others are accepted
    decide = lambda offset, _: AcknowledgeType.RELEASE if offset == 1 else AcknowledgeType.ACCEPT
    assert consume(kray_dlq, group, topic, decide, 4, timeout_s=30) == 4
    letters = read_all(kray_dlq, dlq, 1)
    assert len(letters) == 1
    h = dlq_headers(letters[0])
    assert (h["__dlq.errors.offset"], h["__dlq.errors.delivery.count"], h["__dlq.errors.message"]) == \
        ("1", "3", "Offset delivery count exceeded the threshold.")
    # archived: a new member of the group gets nothing more
    c = ShareConsumer({"bootstrap.servers": kray_dlq, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    assert [m for m in c.poll(3.0) if m.error() is None] == []
    c.close()


def test_a_topic_without_the_group_enable_config_is_refused_as_a_dlq(kray_dlq):
    name = uuid.uuid4().hex[:8]
    plain = f"dlq.plain-{name}"
    admin = AdminClient({"bootstrap.servers": kray_dlq})
    admin.create_topics([NewTopic(plain, 1, 1)])[plain].result(30)
    for bad in (plain, f"no-prefix-{name}"):
        with pytest.raises(KafkaException) as refused:
            set_group_configs(kray_dlq, f"g-{name}", {"errors.deadletterqueue.topic.name": bad})
        assert "INVALID_CONFIG" in str(refused.value) or "errors.deadletterqueue" in str(refused.value)


def test_records_are_archived_without_a_copy_when_the_dlq_topic_is_no_longer_enabled(kray_dlq):
    topic, dlq, group = setup(kray_dlq, 4)
    admin = AdminClient({"bootstrap.servers": kray_dlq})
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, dlq, incremental_configs=[
            ConfigEntry("errors.deadletterqueue.group.enable", "false",
                        incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    assert consume(kray_dlq, group, topic, lambda *_: AcknowledgeType.REJECT, 4) == 4
    c = ShareConsumer({"bootstrap.servers": kray_dlq, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    assert [m for m in c.poll(3.0) if m.error() is None] == [], "rejected records are archived all the same"
    c.close()
    assert read_all(kray_dlq, dlq, 0, timeout_s=2) == []
