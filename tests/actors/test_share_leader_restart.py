"""Killing the actor that hosts a share-partition leader loses no acknowledgement: the restarted
leader rebuilds its state from the share coordinator and never redelivers accepted records."""
import time

import ray
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cluster import composition
from tests.actors.restarts import kill_and_await_restart

RECORDS = 400


def test_acknowledged_records_survive_a_share_partition_leader_kill(broker):
    bootstrap, topic, group = broker.bootstrap, "durable-queue", "durable-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 20})
    for i in range(RECORDS):
        p.produce(topic, key=b"%d" % i, value=b"v", partition=0)
    assert p.flush(30) == 0

    first = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    first.subscribe([topic])
    accepted = set()
    deadline = time.monotonic() + 60
    while len(accepted) < RECORDS // 2 and time.monotonic() < deadline:
        for m in first.poll(1.0):
            if m.error() is None:
                accepted.add(int(m.key()))
                first.acknowledge(m, AcknowledgeType.ACCEPT)
        first.commit_sync()  # answered only once the share coordinator holds the acknowledgement
    assert len(accepted) >= RECORDS // 2
    first.close()

    topic_id = ray.get(broker.controller.wait_for_metadata.remote(-1, 0)).topics[topic].topic_id
    kill_and_await_restart(ray.get_actor(composition.partition_name(topic_id, 0), namespace=composition.NAMESPACE))

    second = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    second.subscribe([topic])
    rest = set()
    deadline = time.monotonic() + 90
    while len(accepted) + len(rest) < RECORDS and time.monotonic() < deadline:
        for m in second.poll(1.0):
            if m.error() is None:
                key = int(m.key())
                assert key not in accepted, f"record {key} was accepted before the kill and came back"
                rest.add(key)
                second.acknowledge(m, AcknowledgeType.ACCEPT)
        second.commit_sync()
    second.close()
    assert accepted | rest == set(range(RECORDS))
