"""Transactional offset commits survive the group coordinator's restart (issue 19, TxnOffsetCommit): its shard
killed and restarted, the coordinator replays `__consumer_offsets` with the producer ids of the transactional
batches and the markers, so a committed transaction's offsets are the group's committed offsets again, an open
transaction's are still pending (and still its own: committed when it commits), an aborted one's are gone."""
import time
import uuid

import ray
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from actors import internal_topics
from tests.actors.restarts import host_of, inspect_replica, kill_and_await_restart, leader_replica
from tests.coordinators import group_coordinator_partition


_askers: dict[tuple, Consumer] = {}


def committed(bootstrap, group, topic, timeout_s=60) -> int:
    """Partition 0's committed offset (-1001: none), asked until the restarted coordinator answers.

    Asked by a consumer of the group (read_uncommitted: an open transaction's offset does not make
    it wait for a stable one), not by AdminClient.list_consumer_group_offsets: librdkafka (2.15,
    2.16) crashes the process (SIGSEGV) when an admin client's OffsetFetch fails with an error that
    makes it look the coordinator up again (NOT_COORDINATOR, a broken connection: a coordinator
    restarting), since it hands that to the consumer group an admin client does not have
    (rd_kafka_handle_OffsetFetch -> rd_kafka_cgrp_op(rk_cgrp = NULL), read in librdkafka's source):
    the likely cause of the SIGSEGV that ended three clean-clone CI runs in this module."""
    asker = _askers.get((bootstrap, group))
    if asker is None:
        asker = _askers[(bootstrap, group)] = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            [tp] = asker.committed([TopicPartition(topic, 0)], timeout=10)
            if tp.error is None:
                return tp.offset
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def test_pending_and_committed_transactional_offsets_are_replayed(broker):
    topic, group = f"txo-{uuid.uuid4().hex[:6]}", f"txo-group-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()  # no generation: a simple group, as Kafka creates
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"txo-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(60)

    def send_offsets(offset):
        producer.begin_transaction()
        producer.produce(topic, value=b"x", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, 60)

    send_offsets(3)
    producer.commit_transaction(60)
    await_committed(broker.bootstrap, group, topic, 3)  # (once the marker, written after EndTxn's answer, is in)
    send_offsets(4)
    producer.abort_transaction(60)
    send_offsets(5)  # left open across the restart
    time.sleep(1)
    assert committed(broker.bootstrap, group, topic) == 3

    image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    coordinator = leader_replica(broker.controller, internal_topics.CONSUMER_OFFSETS,
                                 group_coordinator_partition(image, group))
    kill_and_await_restart(host_of(coordinator))
    assert committed(broker.bootstrap, group, topic) == 3  # the commit replayed with its marker, 5 still pending

    producer.commit_transaction(60)  # its marker reaches the new coordinator, which holds the pending offset
    await_committed(broker.bootstrap, group, topic, 5)
    consumer.close()
    assert producer.flush(30) == 0


def await_committed(bootstrap, group, topic, expected: int, timeout_s=30) -> None:
    deadline = time.monotonic() + timeout_s
    while (found := committed(bootstrap, group, topic)) != expected:
        assert time.monotonic() < deadline, f"committed offset {found}, expected {expected}"
        time.sleep(0.3)


COMMITS = 1200


def test_compaction_keeps_an_open_transactions_offsets(broker):
    """The coordinator's compaction rewrites the committed offsets and deletes what is before them, but never past
    the partition's last stable offset: an open transaction's offset records stay, and after a restart its offset
    is still pending and commits with its transaction."""
    topic, group = f"txc-{uuid.uuid4().hex[:6]}", f"txc-group-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"txc-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(60)
    for i in range(COMMITS):  # plain commits of the other partition, superseding each other, before and after
        if i == COMMITS // 2:
            producer.begin_transaction()
            producer.produce(topic, value=b"x", partition=0)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], consumer.consumer_group_metadata(),
                                                 60)
        consumer.commit(offsets=[TopicPartition(topic, 1, i)], asynchronous=False)
    image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    coordinator = leader_replica(broker.controller, internal_topics.CONSUMER_OFFSETS,
                                 group_coordinator_partition(image, group))
    assert ray.get(coordinator.compact.remote()) is True
    start, lso, end = inspect_replica(coordinator, lambda r: (r.core.log_start_offset, r.core.last_stable_offset,
                                                               r.core.log_end_offset))
    assert 0 < start <= lso < end - COMMITS // 2  # what came before the open transaction is deleted, nothing after

    kill_and_await_restart(host_of(coordinator))
    assert committed(broker.bootstrap, group, topic) == -1001  # partition 0: still pending, nothing committed
    producer.commit_transaction(60)
    await_committed(broker.bootstrap, group, topic, 7)
    consumer.close()
    assert producer.flush(30) == 0
    for asker in _askers.values():
        asker.close()
    _askers.clear()
