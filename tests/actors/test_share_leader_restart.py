"""Killing an actor that share-group state lives in loses no acknowledgement: a restarted
share-partition leader rebuilds its state from the share coordinator, a restarted share (or group)
coordinator replays its internal partition, and accepted records are never redelivered."""
import time

import pytest
import ray
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer

from actors import internal_topics
from tests.actors.queues import queue_with_records
from tests.actors.restarts import host_of, kill_and_await_restart, leader_replica
from tests.coordinators import group_coordinator_partition, share_state_partition

RECORDS = 400
# what a ShareFetch may answer for a partition while its share-partition leader or share coordinator moves
RETRIABLE_WHILE_MOVING = {KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                          KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                          KafkaError.NOT_COORDINATOR}


# which actors die, in order: the leader's partition replica, or an internal partition's leader (the
# coordinator); after the share coordinator the leader dies too, so its state must come back from
# the coordinator's replay of __share_group_state
VICTIMS = {"share-partition leader": ["topic"],
           "share coordinator": [internal_topics.SHARE_GROUP_STATE, "topic"],
           "group coordinator": [internal_topics.CONSUMER_OFFSETS]}


@pytest.mark.parametrize("victim", list(VICTIMS))
def test_acknowledged_records_survive_a_kill(broker, victim):
    slug = victim.replace(" ", "-")
    bootstrap, topic, group = broker.bootstrap, f"durable-queue-{slug}", f"durable-group-{slug}"
    queue_with_records(bootstrap, topic, group, RECORDS, batch_records=20)

    # small polls, so that the kill falls between acknowledged records and records still to deliver
    first = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                           "max.poll.records": 50})
    first.subscribe([topic])
    accepted = set()
    deadline = time.monotonic() + 60
    while len(accepted) < RECORDS // 2 and time.monotonic() < deadline:
        for m in first.poll(1.0):
            if m.error() is None:
                accepted.add(int(m.key()))
                first.acknowledge(m, AcknowledgeType.ACCEPT)
        first.commit_sync()  # answered only once the share coordinator holds the acknowledgement
    assert RECORDS // 2 <= len(accepted) < RECORDS
    first.close()

    image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    partitions = range(len(image.topics[topic].partitions))
    where = {"topic": [(topic, p) for p in partitions],  # each partition's coordinator: the group's own
             internal_topics.SHARE_GROUP_STATE: [(internal_topics.SHARE_GROUP_STATE,
                                                  share_state_partition(image, group, topic, p)) for p in partitions],
             internal_topics.CONSUMER_OFFSETS: [(internal_topics.CONSUMER_OFFSETS,
                                                 group_coordinator_partition(image, group))]}
    victims = {host_of(leader_replica(broker.controller, *at)) for name in VICTIMS[victim] for at in where[name]}
    for host in victims:  # in the shard layout, one shard may host several of them
        kill_and_await_restart(host)

    second = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    second.subscribe([topic])
    rest = set()
    deadline = time.monotonic() + 90
    while len(accepted) + len(rest) < RECORDS and time.monotonic() < deadline:
        try:
            polled = second.poll(1.0)
        except KafkaException as e:  # while the killed state's partition has no leader yet: Kafka's retriable
            if e.args[0].code() not in RETRIABLE_WHILE_MOVING:  # answer, which the client surfaces; poll again
                raise
            continue
        for m in polled:
            if m.error() is None:
                key = int(m.key())
                assert key not in accepted, f"record {key} was accepted before the kill and came back"
                rest.add(key)
                second.acknowledge(m, AcknowledgeType.ACCEPT)
        second.commit_sync()
    second.close()
    assert accepted | rest == set(range(RECORDS))
