"""Records land in send order from a topic's first write (Kafka's per-partition ordering).

Kafka lets a producer's records land out of send order only after a failed send. On a topic
created a moment before, Kray used to fail the first requests and take later ones: the metadata
named a partition's leader before that leader could append (a produce answered
NOT_LEADER_OR_FOLLOWER, the next one was taken). These tests start producers of three clients
while a topic is still being created, and probe Metadata against Produce at the moment a leader
is named.
"""
import asyncio
import threading
import time
import uuid

from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

from cluster.admin import KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import CreateTopicsRequest, MetadataRequest
from tests.cluster.raw import produce_one

PARTITIONS = 3
RECORDS_PER_PRODUCER = 600
ROUNDS_TIME_S = 20   # the loop of fresh topics stops starting rounds after this (the probe test below aims at the race itself)
ROUNDS_MIN = 3


def create_topic_in_background(bootstrap: str, topic: str, partitions: int) -> threading.Thread:
    """CreateTopics without waiting for its answer: clients see the topic while it starts."""
    def create():
        with KafkaConnection(bootstrap, timeout_s=120) as c:
            c.send(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name=topic, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
                timeout_ms=60000, validate_only=False), 5)
    thread = threading.Thread(target=create, daemon=True)
    thread.start()
    return thread


def metadata(connection: KafkaConnection, topic: str):
    return connection.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                           allow_auto_topic_creation=False), 9).topics[0]


def wait_until_the_topic_exists(bootstrap: str, topic: str, timeout_s: float = 60):
    with KafkaConnection(bootstrap) as c:
        deadline = time.monotonic() + timeout_s
        while metadata(c, topic).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            assert time.monotonic() < deadline, f"{topic} was not created"
            time.sleep(0.005)


def test_metadata_names_a_leader_only_once_it_takes_writes(kray):
    """The moment Metadata names a partition's leader, a produce to it is appended (before, a
    just-created topic's leaders were named while their replicas still started, and refused)."""
    for _ in range(2):
        topic = f"named-{uuid.uuid4().hex[:8]}"
        creating = create_topic_in_background(kray, topic, 6)
        answers = {}
        deadline = time.monotonic() + 60
        with KafkaConnection(kray) as meta:
            while len(answers) < 6 and time.monotonic() < deadline:
                for p in metadata(meta, topic).partitions:
                    if p.leader_id >= 0 and p.partition_index not in answers:
                        answers[p.partition_index] = produce_one(kray, topic, p.partition_index)
                time.sleep(0.002)
        creating.join(60)
        assert answers == {p: ErrorCode.NONE for p in range(6)}
        delete_topic(kray, topic)


def produce_confluent(bootstrap, topic, name, config):
    failures = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "max.in.flight.requests.per.connection": 5,
                  "allow.auto.create.topics": False, **config})
    for i in range(RECORDS_PER_PRODUCER):
        p.produce(topic, value=f"{name}:{i}".encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: err and failures.append(err))
        p.poll(0)
        time.sleep(0.002)
    assert p.flush(60) == 0
    assert failures == []


def produce_kafka_python(bootstrap, topic, name):
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, enable_idempotence=True, acks="all",
                      max_in_flight_requests_per_connection=5)
    futures = []
    for i in range(RECORDS_PER_PRODUCER):
        futures.append(p.send(topic, value=f"{name}:{i}".encode(), partition=i % PARTITIONS))
        time.sleep(0.002)
    p.flush(60)
    for f in futures:
        f.get(timeout=60)
    p.close()


def produce_aiokafka(bootstrap, topic, name):
    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, enable_idempotence=True)
        await p.start()
        try:
            sent = []
            for i in range(RECORDS_PER_PRODUCER):
                sent.append(await p.send(topic, value=f"{name}:{i}".encode(), partition=i % PARTITIONS))
                await asyncio.sleep(0.002)
            await asyncio.gather(*sent)
        finally:
            await p.stop()
    asyncio.run(run())


PRODUCERS = {
    "librdkafka-idempotent": lambda b, t: produce_confluent(b, t, "librdkafka-idempotent",
                                                            {"enable.idempotence": True}),
    "librdkafka-acks1": lambda b, t: produce_confluent(b, t, "librdkafka-acks1", {"acks": 1}),
    "kafka-python-idempotent": lambda b, t: produce_kafka_python(b, t, "kafka-python-idempotent"),
    "aiokafka-idempotent": lambda b, t: produce_aiokafka(b, t, "aiokafka-idempotent"),
}


def read_partitions(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "send-order", "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in range(PARTITIONS)}
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        records = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(len(records[p]) < ends[p] for p in records) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                records[m.partition()].append((m.offset(), m.value().decode()))
        return {p: [v for _, v in sorted(rs)] for p, rs in records.items()}
    finally:
        c.close()


def test_producers_keep_send_order_on_fresh_topics(kray):
    """A loop of fresh topics: four producers (idempotent librdkafka, kafka-python and aiokafka,
    5 requests in flight, linger 0; a plain acks=1 librdkafka) start while the topic is created.
    Each partition holds every producer's records once each, in the order it sent them."""
    started = time.monotonic()
    rounds = 0
    while rounds < ROUNDS_MIN or time.monotonic() - started < ROUNDS_TIME_S:
        topic = f"send-order-{uuid.uuid4().hex[:8]}"
        creating = create_topic_in_background(kray, topic, PARTITIONS)
        wait_until_the_topic_exists(kray, topic)
        errors = []

        def run(produce):
            try:
                produce(kray, topic)
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)
        threads = [threading.Thread(target=run, args=(produce,)) for produce in PRODUCERS.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        creating.join(60)
        assert errors == [], f"round {rounds} ({topic}): a producer failed: {errors!r}"
        for partition, values in read_partitions(kray, topic).items():
            for name in PRODUCERS:
                mine = [int(v.split(":")[1]) for v in values if v.split(":")[0] == name]
                expected = list(range(partition, RECORDS_PER_PRODUCER, PARTITIONS))
                assert mine == expected, (f"round {rounds} ({topic}): {name}'s records on partition {partition} are "
                                          f"not its send order once each: first differences at "
                                          f"{next(i for i, (a, b) in enumerate(zip(mine + [None] * len(expected), expected)) if a != b)}")
        rounds += 1
        delete_topic(kray, topic)


def delete_topic(bootstrap, topic):
    """Each partition is a process: free them for the tests that follow."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: a dropped client is destroyed
    admin.delete_topics([topic])[topic].result(60)
