"""confluent-kafka (librdkafka 2.16) against a real `kray start`: create, produce, fetch, offsets."""
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RECORDS = 20000
PARTITIONS = 3


# The records carry timestamps of 2023 and 2025, far past the default retention.ms (7 days): without this, the broker's
# retention check (every log.retention.check.interval.ms, 5 min) deletes them as Kafka's would, and a check that
# came between produce and fetch failed a run (6,667 of 20,000 fetched: two partitions were gone)
KEEP_FOREVER = {"retention.ms": "-1"}


def create_topic(bootstrap, name, partitions=PARTITIONS, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config={**KEEP_FOREVER, **(config or {})})])
    futures[name].result(timeout=60)
    return admin


def expected_record(i):
    key = f"key-{i}".encode()
    value = (f"value-{i}-" + "x" * (i % 200)).encode()
    headers = [("idx", str(i).encode()), ("empty", b"")]
    timestamp_ms = 1_700_000_000_000 + i
    return key, value, headers, timestamp_ms


def produce_all(bootstrap, topic, compression):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": compression,
                         "linger.ms": 5, "enable.idempotence": True})
    delivered, errors = [], []

    def on_delivery(err, msg):
        (errors if err else delivered).append(err or (msg.partition(), msg.offset(), msg.key()))

    for i in range(RECORDS):
        key, value, headers, ts = expected_record(i)
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts,
                                 partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    return delivered, errors


def consume_all(bootstrap, topic, count):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = []
    empty_polls = 0
    while len(got) < count and empty_polls < 60:
        msgs = consumer.consume(1000, timeout=1.0)
        if not msgs:
            empty_polls += 1
        for m in msgs:
            assert m.error() is None or m.error().code() == KafkaError._PARTITION_EOF, m.error()
            if m.error() is None:
                got.append(m)
    consumer.close()
    return got


@pytest.mark.parametrize("compression", ["zstd", "lz4", "gzip", "snappy"])
def test_produce_and_fetch_back_byte_exact(kray, compression):
    topic = f"roundtrip-{compression}"
    create_topic(kray, topic)
    delivered, errors = produce_all(kray, topic, compression)
    assert errors == []
    assert len(delivered) == RECORDS
    offsets_by_partition = {}
    for partition, offset, _ in delivered:
        offsets_by_partition.setdefault(partition, []).append(offset)
    for partition, offsets in offsets_by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {partition} offsets are not dense from 0"

    got = consume_all(kray, topic, RECORDS)
    assert len(got) == RECORDS
    for m in got:
        i = int(m.key().decode().split("-")[1])
        key, value, headers, ts = expected_record(i)
        assert m.partition() == i % PARTITIONS
        assert (m.key(), m.value(), m.headers(), m.timestamp()[1]) == (key, value, headers, ts)
    by_partition = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(m.offset())
    assert all(v == sorted(v) for v in by_partition.values()), "records of a partition come back in offset order"


def test_list_offsets_earliest_latest_and_by_timestamp(kray):
    topic = "offsets-probe"
    create_topic(kray, topic, partitions=1)
    producer = Producer({"bootstrap.servers": kray, "linger.ms": 0})
    errors = []
    base_ts = 1_750_000_000_000  # in the past: Kafka rejects timestamps over an hour ahead
    for i in range(100):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=base_ts + i * 10,
                         on_delivery=lambda e, m: errors.append(e) if e else None)
        producer.flush(30)  # one batch per record, so timestamps map to offsets exactly
    assert errors == []
    consumer = Consumer({"bootstrap.servers": kray, "group.id": "offsets-probe"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
    assert (low, high) == (0, 100)
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base_ts + 505)], timeout=30)
    assert found[0].offset == 51
    beyond = consumer.offsets_for_times([TopicPartition(topic, 0, base_ts + 10_000)], timeout=30)
    assert beyond[0].offset == -1  # no record that late: Kafka answers offset -1 (end)
    consumer.close()


def test_unknown_topic_and_partition_errors(kray):
    consumer = Consumer({"bootstrap.servers": kray, "group.id": "unknown-probe"})
    md = consumer.list_topics("never-created-and-no-autocreate-xyz", timeout=30)
    # librdkafka's metadata request allows auto creation; Kray auto-creates like Kafka's default broker config
    assert "never-created-and-no-autocreate-xyz" in md.topics
    consumer.close()
    producer = Producer({"bootstrap.servers": kray, "message.timeout.ms": 5000})
    errors = []
    producer.produce("offsets-probe", value=b"x", partition=57, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError._UNKNOWN_PARTITION


def test_invalid_topic_name_is_rejected(kray):
    admin = AdminClient({"bootstrap.servers": kray})
    futures = admin.create_topics([NewTopic("bad/name", num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception) as info:
        futures["bad/name"].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
