"""Transactions end to end with real clients against a real `kray start` (issue 19): confluent-kafka's and
kafka-python's transactional producers commit and abort, read_committed consumers see exactly the committed
records once, read_uncommitted consumers see everything, and a second producer with the same transactional.id
fences the first (KIP-98's zombie fencing). The coordinator's and the log's parts are tested on their own in
test_transactions_coordinator.py and test_transactions_log.py.

The read-process-write loop (sendOffsetsToTransaction) is in test_transactions_offsets.py."""
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 2


def new_topic(kray) -> str:
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kray})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    return topic


def read_values(kray, topic, isolation: str, expect: int, timeout_s: float = 20) -> list[bytes]:
    """Every value of `topic` (from the start) a confluent-kafka consumer with `isolation` reads; waits for
    `expect` of them, then a little longer for any that should not be there."""
    c = Consumer({"bootstrap.servers": kray, "group.id": f"r-{uuid.uuid4().hex[:8]}", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values, deadline, settle = [], time.monotonic() + timeout_s, None
    while time.monotonic() < (settle or deadline):
        for m in c.consume(100, timeout=0.5):
            if m.error() is None:
                values.append(m.value())
        if len(values) >= expect and settle is None:
            settle = time.monotonic() + 1.5
    c.close()
    return values


def test_confluent_commit_and_abort_as_read_committed_and_uncommitted_readers_see_them(kray):
    topic = new_topic(kray)
    p = Producer({"bootstrap.servers": kray, "transactional.id": f"tid-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"committed-%d" % i, partition=i % PARTITIONS)
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"aborted-%d" % i, partition=i % PARTITIONS)
    p.flush(30)
    p.abort_transaction(60)
    p.begin_transaction()
    p.produce(topic, value=b"last", partition=0)
    p.commit_transaction(60)

    committed = sorted(read_values(kray, topic, "read_committed", expect=11))
    assert committed == sorted([b"committed-%d" % i for i in range(10)] + [b"last"])
    everything = read_values(kray, topic, "read_uncommitted", expect=16)
    assert sorted(everything) == sorted(committed + [b"aborted-%d" % i for i in range(5)])


def test_an_open_transaction_is_invisible_to_read_committed_until_its_commit(kray):
    topic = new_topic(kray)
    p = Producer({"bootstrap.servers": kray, "transactional.id": f"tid-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"pending", partition=0)
    p.flush(30)
    assert read_values(kray, topic, "read_committed", expect=1, timeout_s=3) == []
    assert read_values(kray, topic, "read_uncommitted", expect=1) == [b"pending"]
    p.commit_transaction(60)
    assert read_values(kray, topic, "read_committed", expect=1) == [b"pending"]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kray):
    topic, tid = new_topic(kray), f"tid-{uuid.uuid4().hex[:8]}"
    zombie = Producer({"bootstrap.servers": kray, "transactional.id": tid})
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(30)
    successor = Producer({"bootstrap.servers": kray, "transactional.id": tid})
    successor.init_transactions(60)  # aborts the zombie's open transaction and bumps the epoch
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=1)
    successor.commit_transaction(60)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    assert read_values(kray, topic, "read_committed", expect=1) == [b"successor"]


def test_kafka_python_transactional_producer(kray):
    from kafka import KafkaProducer
    topic = new_topic(kray)
    p = KafkaProducer(bootstrap_servers=kray, transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    p.init_transactions()
    p.begin_transaction()
    for i in range(4):
        p.send(topic, value=b"kp-committed-%d" % i, partition=i % PARTITIONS)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, value=b"kp-aborted", partition=0)
    p.flush()
    p.abort_transaction()
    p.close()
    assert sorted(read_values(kray, topic, "read_committed", expect=4)) == [b"kp-committed-%d" % i for i in range(4)]
