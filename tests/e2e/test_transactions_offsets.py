"""Exactly-once read-process-write with confluent-kafka against a real `kray start` (issue 19, TxnOffsetCommit): a
read_committed consumer without auto-commit reads an input topic, a transactional producer writes the transformed
records to an output topic and sends the consumer's positions in the same transaction
(`send_offsets_to_transaction`). The group's committed offsets move only when the transaction commits; an aborted
transaction leaves them at the previous commit and its output invisible to read_committed readers."""
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.test_transactions import read_values

PARTITIONS = 2


def new_topics(kray, *names) -> list[str]:
    topics = [f"{n}-{uuid.uuid4().hex[:8]}" for n in names]
    admin = AdminClient({"bootstrap.servers": kray})
    for topic, future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).items():
        future.result(30)
    return topics


def produce_input(kray, topic, values):
    p = Producer({"bootstrap.servers": kray})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % PARTITIONS)
    assert p.flush(30) == 0


def consume(consumer, count, timeout_s=30) -> list:
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for m in consumer.consume(count - len(out), timeout=0.5):
            if m.error() is None:
                out.append(m)
    assert len(out) == count, f"read {len(out)} of {count}"
    return out


def group_offsets(kray, group, topic) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": kray})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group].result(30)
    assert all(tp.error is None for tp in result.topic_partitions), result.topic_partitions
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def await_group_offsets(kray, group, topic, expected: dict[int, int], timeout_s=15) -> None:
    """The transaction coordinator writes the markers after it answers EndTxn (as Kafka's): the offsets move once
    the marker reaches the group's __consumer_offsets partition, a moment later."""
    deadline = time.monotonic() + timeout_s
    while (found := group_offsets(kray, group, topic)) != expected:
        assert time.monotonic() < deadline, f"committed offsets {found}, expected {expected}"
        time.sleep(0.2)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])  # the member's generation, or its KIP-848 epoch
def test_read_process_write_commits_the_offsets_with_the_transaction_and_not_with_an_abort(kray, protocol):
    source, sink = new_topics(kray, "eos-in", "eos-out")
    group = f"eos-{uuid.uuid4().hex[:8]}"
    produce_input(kray, source, [b"in-%d" % i for i in range(10)])
    consumer = Consumer({"bootstrap.servers": kray, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "group.protocol": protocol})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": kray, "transactional.id": f"eos-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)

    def process(records, commit: bool):
        producer.begin_transaction()
        for m in records:
            producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
        return {tp.partition: tp.offset for tp in positions if tp.topic == source}

    # a committed transaction: the group's offsets are the processed position, its output readable
    processed = process(consume(consumer, 10), commit=True)
    assert sum(processed.values()) == 10
    await_group_offsets(kray, group, source, {p: processed.get(p, -1001) for p in range(PARTITIONS)})

    # an open transaction with offsets sent: the committed offsets stay where they were until it ends
    produce_input(kray, source, [b"more-%d" % i for i in range(4)])
    records = consume(consumer, 4)
    producer.begin_transaction()
    producer.produce(sink, value=b"pending", partition=0)
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
    assert group_offsets(kray, group, source) == {p: processed.get(p, -1001) for p in range(PARTITIONS)}
    producer.abort_transaction(60)

    # an aborted transaction: offsets unchanged, its output never seen by read_committed readers
    process(records, commit=False)
    time.sleep(1)  # (its abort marker written meanwhile)
    assert group_offsets(kray, group, source) == {p: processed.get(p, -1001) for p in range(PARTITIONS)}
    consumer.close()

    # a consumer of the group starting now resumes at the committed position: it reads the 4 records again
    again = Consumer({"bootstrap.servers": kray, "group.id": group, "isolation.level": "read_committed",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "group.protocol": protocol})
    again.subscribe([source])
    assert sorted(m.value() for m in consume(again, 4)) == sorted(b"more-%d" % i for i in range(4))
    again.close()
    producer.flush(10)
    out = read_values(kray, sink, "read_committed", expect=10)
    assert sorted(out) == sorted(b"out-in-%d" % i for i in range(10))


def test_kafka_python_sends_offsets_to_its_transaction(kray):
    """kafka-python's transactional producer with a bare group id (no member, no generation: a simple group)."""
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KafkaTopicPartition
    source, sink = new_topics(kray, "kp-in", "kp-out")
    group = f"kp-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(bootstrap_servers=kray, transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    p.init_transactions()
    for offset, commit in ((4, True), (9, False)):
        p.begin_transaction()
        p.send(sink, value=b"out-%d" % offset, partition=0)
        p.send_offsets_to_transaction({KafkaTopicPartition(source, 0): OffsetAndMetadata(offset, "", -1)}, group)
        if commit:
            p.commit_transaction()
            await_group_offsets(kray, group, source, {0: 4, 1: -1001})
        else:
            p.abort_transaction()
    p.close()
    time.sleep(1)  # (the abort marker written meanwhile)
    assert group_offsets(kray, group, source) == {0: 4, 1: -1001}
    assert read_values(kray, sink, "read_committed", expect=1) == [b"out-4"]


def test_txn_offset_commit_outside_the_transaction_or_from_a_zombie_is_refused(kray):
    """Raw TxnOffsetCommit: the group's partition must be in the producer's transaction (AddOffsetsToTxn; KIP-890's
    verification answers INVALID_TXN_STATE before v4, TRANSACTION_ABORTABLE from v4), and a producer whose epoch was
    bumped by a successor is refused (INVALID_PRODUCER_EPOCH); nothing is committed."""
    from protocol.errors import ErrorCode as E
    from protocol.messages import AddOffsetsToTxnRequest, TxnOffsetCommitRequest as R
    from tests.e2e.test_transactions_coordinator import _coordinator, _init
    [source] = new_topics(kray, "raw-in")
    tid, group = f"raw-{uuid.uuid4().hex[:8]}", f"raw-{uuid.uuid4().hex[:8]}"
    conn = _coordinator(kray, tid)  # (one broker: also the group's coordinator)
    first = _init(conn, tid)
    assert first.error_code == 0

    def commit(version, epoch=first.producer_epoch):
        deadline = time.monotonic() + 30
        while True:
            r = conn.send(R(transactional_id=tid, group_id=group, producer_id=first.producer_id, producer_epoch=epoch,
                            topics=[R.TxnOffsetCommitRequestTopic(name=source, partitions=[
                                R.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=3,
                                                                  committed_metadata="")])]), version)
            error = r.topics[0].partitions[0].error_code
            if error not in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR) or \
                    time.monotonic() > deadline:
                return error
            time.sleep(0.3)
    assert commit(3) == E.INVALID_TXN_STATE
    assert commit(4) == E.TRANSACTION_ABORTABLE
    assert conn.send(AddOffsetsToTxnRequest(transactional_id=tid, producer_id=first.producer_id,
                                            producer_epoch=first.producer_epoch, group_id=group), 3).error_code == 0
    assert commit(3) == 0
    successor = _init(conn, tid)  # fences the open transaction (aborted) and bumps the epoch
    assert successor.error_code == 0 and successor.producer_epoch > first.producer_epoch
    assert commit(3) == E.INVALID_PRODUCER_EPOCH
    time.sleep(1)
    assert group_offsets(kray, group, source) == {0: -1001, 1: -1001}
    conn.close()
