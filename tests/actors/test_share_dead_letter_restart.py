"""Dead letters (KIP-1191) survive a share-partition leader that dies mid-way: records persisted as
ARCHIVING (their DLQ write could not complete) are written to the DLQ topic by the leader that
comes back, none is lost, and none is delivered again."""
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, AcknowledgeType, Consumer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from tests.actors.queues import queue_with_records
from tests.actors.restarts import host_of, kill_and_await_restart, leader_replica
from tests.actors.test_share_metrics import scrape

RECORDS = 60


def alter(bootstrap, resource_type, name, configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.incremental_alter_configs([ConfigResource(resource_type, name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])]).values():
        f.result(30)


def dlq_offsets(bootstrap, dlq, expected, timeout_s):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}"})
    c.assign([TopicPartition(dlq, 0, OFFSET_BEGINNING)])
    seen, deadline = [], time.monotonic() + timeout_s
    while len(set(seen)) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(int(dict(m.headers())["__dlq.errors.offset"]))
    c.close()
    return seen


def archiving(bootstrap, group, dlq) -> int:
    """The ARCHIVING count `kray share-groups --describe` prints for the group (records waiting for
    their DLQ write)."""
    described = subprocess.run([str(Path(sys.executable).parent / "kray"), "share-groups", "--describe", "--group",
                                group, "--bootstrap-server", bootstrap], capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    header = lines.index("GROUP\tDLQ-TOPIC\tDLQ-RECORDS\tARCHIVING")
    name, topic, _, count = lines[header + 1].split("\t")
    assert (name, topic) == (group, dlq)
    return int(count)


def archiving_gauge(group, timeout_s=30) -> float | None:
    """kray_share_archiving_record_count of the group, as Ray's metrics endpoint exports it (every
    few seconds): once it shows the group."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [float(line.rsplit(" ", 1)[1]) for line in scrape().splitlines()
                 if line.startswith("ray_kray_share_archiving_record_count") and f'group="{group}"' in line]
        if found:
            return max(found)
        time.sleep(1)
    return None


def test_archiving_records_are_written_by_the_leader_that_comes_back(broker):
    bootstrap, name = broker.bootstrap, uuid.uuid4().hex[:6]
    topic, dlq, group = f"dlq-src-{name}", f"dlq.dlq-src-{name}", f"dlq-group-{name}"
    queue_with_records(bootstrap, topic, group, RECORDS)
    # max.message.bytes=64: every DLQ batch is refused (MESSAGE_TOO_LARGE), so rejected records stay
    # ARCHIVING, persisted, their writes retried, until the leader dies
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(dlq, 1, 1, config={
        "errors.deadletterqueue.group.enable": "true", "max.message.bytes": "64"})])[dlq].result(30)
    alter(bootstrap, ResourceType.GROUP, group, {"errors.deadletterqueue.topic.name": dlq})

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    rejected, deadline = set(), time.monotonic() + 60
    while len(rejected) < RECORDS and time.monotonic() < deadline:
        got = [m for m in c.poll(0.5) if m.error() is None]
        for m in got:
            assert m.offset() not in rejected, "a rejected record came back"
            rejected.add(m.offset())
            c.acknowledge(m, AcknowledgeType.REJECT)
        if got:
            c.commit_sync()  # answered once the coordinator holds them as ARCHIVING
    c.close()
    assert rejected == set(range(RECORDS))
    assert dlq_offsets(bootstrap, dlq, 1, timeout_s=2) == [], "no DLQ write could be durable yet"
    assert archiving(bootstrap, group, dlq) == RECORDS, "kray share-groups --describe shows the stuck records"
    assert archiving_gauge(group) == RECORDS, "the kray_share_archiving_record_count metric shows them"

    kill_and_await_restart(host_of(leader_replica(broker.controller, topic)))
    alter(bootstrap, ResourceType.TOPIC, dlq, {"max.message.bytes": "1048588"})  # the DLQ takes writes again

    # the share-partition is loaded again at the group's next fetch: its ARCHIVING records are re-sent
    again = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    again.subscribe([topic])
    seen, deadline = [], time.monotonic() + 60
    while len(set(seen)) < RECORDS and time.monotonic() < deadline:
        assert [m for m in again.poll(0.5) if m.error() is None] == [], "a rejected record came back"
        seen = dlq_offsets(bootstrap, dlq, RECORDS, timeout_s=1)
    again.close()
    assert set(seen) == rejected, "every rejected record is in the DLQ (at least once)"
    deadline = time.monotonic() + 10  # (Archived is persisted right after the DLQ write)
    while archiving(bootstrap, group, dlq) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert archiving(bootstrap, group, dlq) == 0, "no record left ARCHIVING once its DLQ record is durable"
