"""A group coordinator's shard killed and restarted by Ray: its members wait, they are not failed.

The coordinator keeps `__consumer_offsets` as short as its live state: after many commits of the
same offsets it rewrites the live records and deletes the rest, and a coordinator killed after
that replays the short log to the same committed offsets and groups. While the shard restarts
and is given its replicas again, the broker answers COORDINATOR_LOAD_IN_PROGRESS (clients ask
again), not COORDINATOR_NOT_AVAILABLE (which librdkafka hands to `Consumer.committed` at once)."""
import time

import ray
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from actors import internal_topics
from tests.actors.restarts import host_of, inspect_replica, kill_and_await_restart, leader_replica, process_id
from tests.coordinators import group_coordinator_partition

COMMITS = 1500


def test_compaction_drops_superseded_offsets_and_survives_a_restart(broker):
    topic, group = "compacted", "compacted-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    coordinator = leader_replica(broker.controller, internal_topics.CONSUMER_OFFSETS,
                                 group_coordinator_partition(image, group))
    start_before = inspect_replica(coordinator, lambda replica: replica.core.log_start_offset)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    for i in range(COMMITS):  # the same two keys, committed over and over (a simple group: assign() users)
        c.commit(offsets=[TopicPartition(topic, 0, i), TopicPartition(topic, 1, 2 * i)], asynchronous=False)
    c.close()
    # the coordinator's own loop (every 30 s) may have compacted while a slow machine committed: one more pass
    # for whatever came after it, which runs unless that loop just left the log as short as its live records
    ray.get(coordinator.compact.remote(1))
    start_after, end = inspect_replica(coordinator, lambda replica: (replica.core.log_start_offset,
                                                                     replica.group_log.next_offset))
    assert start_after > start_before + COMMITS  # two records per commit, all but the last superseded
    assert end - start_after < 100, "only the live records (and any written since) remain"

    kill_and_await_restart(host_of(coordinator))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
    c.close()
    assert [tp.offset for tp in committed] == [COMMITS - 1, 2 * (COMMITS - 1)]


def test_committed_offsets_asked_while_the_coordinator_restarts_are_answered_not_failed(broker):
    topic, group = "restarting", "restarting-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    shard = host_of(leader_replica(broker.controller, internal_topics.CONSUMER_OFFSETS,
                                   group_coordinator_partition(image, group)))
    before = process_id(shard, 10)
    ray.kill(shard, no_restart=False)
    answers_after_restart, deadline = 0, time.monotonic() + 60
    while answers_after_restart < 3:  # asked all through the restart (~2 s), then a few times after it
        assert time.monotonic() < deadline, "the coordinator's shard did not come back within 60 s"
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=30)  # raises on an error answer
        assert tp.error is None and tp.offset == 5
        try:
            answers_after_restart += process_id(shard, 1) != before
        except Exception:  # unavailable while Ray restarts it
            pass
        time.sleep(0.05)
    c.close()
