"""Consumer groups with `subscribe()`, as Kafka's tutorials write them, against a real `kray start`:
confluent-kafka with the classic protocol (eager range and cooperative-sticky) and KIP-848's
consumer protocol, kafka-python and aiokafka (classic). Members split a 6-partition topic, a third
joins and one leaves; committed offsets are where a group resumes; static members come back
without a rebalance. That committed offsets survive a broker restart is in test_restart.py, on the
restart its tests share.
"""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 6
PER_PARTITION = 50
SETTLE_S = 60


def make_topic(bootstrap: str, partitions: int = PARTITIONS, records_per_partition: int = PER_PARTITION) -> str:
    topic = f"cg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(partitions * records_per_partition):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0
    return topic


def confluent(bootstrap: str, group: str, topic: str, **conf) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **conf})
    c.subscribe([topic])
    return c


def owned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def settle(consumers: list[Consumer], want: list[int], timeout_s: float = SETTLE_S) -> list[set[int]]:
    """Poll every consumer until their assignments have the wanted sizes and split the topic."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        parts = [owned(c) for c in consumers]
        if [len(p) for p in parts] == want and len(set().union(*parts)) == sum(want):
            return parts
    raise AssertionError(f"assignments did not settle to {want}: {[sorted(owned(c)) for c in consumers]}")


@pytest.mark.parametrize("conf", [
    pytest.param({"group.protocol": "classic"}, id="classic-range"),
    pytest.param({"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
                 id="classic-cooperative-sticky"),
    pytest.param({"group.protocol": "consumer"}, id="consumer-protocol"),
])
def test_confluent_members_split_join_and_leave(kray, conf):
    topic = make_topic(kray)
    group = f"g-{topic}"
    c1, c2 = confluent(kray, group, topic, **conf), confluent(kray, group, topic, **conf)
    try:
        a, b = settle([c1, c2], [3, 3])
        assert a | b == set(range(PARTITIONS))
        c3 = confluent(kray, group, topic, **conf)
        settle([c1, c2, c3], [2, 2, 2])
        c1.close()
        settle([c2, c3], [3, 3])
        if conf.get("partition.assignment.strategy") == "cooperative-sticky" or conf["group.protocol"] == "consumer":
            # incremental rebalancing keeps what a member had: c2 and c3 kept their two each
            assert len(owned(c2)) == 3
        c3.close()
    finally:
        c2.close()


def consume(c: Consumer, count: int, timeout_s: float = 60) -> list:
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += [m for m in c.consume(count - len(got), timeout=0.5) if m.error() is None]
    return got


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_restarted_group_resumes_where_it_committed(kray, protocol):
    topic = make_topic(kray, partitions=2)
    group = f"g-{topic}"
    c = confluent(kray, group, topic, **{"group.protocol": protocol})
    first = consume(c, PER_PARTITION)  # a part of the 100 records
    assert len(first) == PER_PARTITION
    c.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in c.committed(
        [TopicPartition(topic, p) for p in range(2)], timeout=10)}
    c.close()
    assert sum(max(o, 0) for o in committed.values()) == PER_PARTITION

    c = confluent(kray, group, topic, **{"group.protocol": protocol})
    rest = consume(c, PER_PARTITION)
    c.close()
    seen = {(m.partition(), m.offset()) for m in first}
    assert len(rest) == PER_PARTITION and not seen & {(m.partition(), m.offset()) for m in rest}
    for m in rest:
        assert m.offset() >= max(committed[m.partition()], 0)


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(kray):
    topic = make_topic(kray)
    group = f"g-{topic}"
    revoked = []
    static = {"group.protocol": "classic", "session.timeout.ms": 30000}
    c1 = confluent(kray, group, topic, **static, **{"group.instance.id": "worker-1"})
    c2 = Consumer({"bootstrap.servers": kray, "group.id": group, "auto.offset.reset": "earliest",
                   "enable.auto.commit": False, "group.instance.id": "worker-2", **static})
    c2.subscribe([topic], on_revoke=lambda consumer, parts: revoked.append(len(parts)))
    try:
        before, _ = settle([c1, c2], [3, 3])
        c1.close()  # a static member leaves no LeaveGroup: its place waits for the session timeout
        revoked.clear()
        c1 = confluent(kray, group, topic, **static, **{"group.instance.id": "worker-1"})
        after, _ = settle([c1, c2], [3, 3])
        for _ in range(20):  # a rebalance would have revoked c2's partitions by now
            c2.poll(0.1)
        assert after == before
        assert not [n for n in revoked if n], "the other member's partitions were revoked: a rebalance happened"
    finally:
        c1.close()
        c2.close()


def test_kafka_python_group_splits_and_commits(kray):
    """Each member polls from a thread of its own (a KafkaConsumer is not shared between threads),
    and knows the topic's partitions before its first poll. kafka-python 3.0.12 has a bug that
    this avoids: when a leader rejoins because metadata arrived after its first assignment, it
    computes the new assignment in its I/O thread; if its poll() has already timed out, the next
    poll() sees nothing to rejoin for and never takes the finished join's result, so the member
    neither fetches nor heartbeats until its session expires (45 s) and stays idle after. Seen in
    client logs against Kray with group.initial.rebalance.delay.ms=0 (Kafka's development setting);
    with Kafka's default of 3000 the metadata usually arrives before the first assignment.
    Records are counted by offset: nothing is committed before the end, so a partition that moves
    to the second member after the first read it is read again from the start, as with Kafka (on
    a loaded machine the second member can join after the first read everything)."""
    from kafka import KafkaConsumer, TopicPartition as KTopicPartition
    topic = make_topic(kray)
    group = f"g-{topic}"

    def member():
        return KafkaConsumer(topic, bootstrap_servers=kray, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    c1, c2 = member(), member()
    assert c1.partitions_for_topic(topic) == c2.partitions_for_topic(topic) == set(range(PARTITIONS))
    seen: dict[int, set[int]] = {}  # partition -> offsets read
    lock = threading.Lock()
    settled = threading.Event()

    def settled_now() -> bool:
        return (len(c1.assignment()) == 3 and len(c2.assignment()) == 3
                and sum(map(len, seen.values())) == PARTITIONS * PER_PARTITION)

    def poll_loop(c) -> None:
        deadline = time.monotonic() + SETTLE_S
        while not settled.is_set() and time.monotonic() < deadline:
            polled = c.poll(timeout_ms=100)
            with lock:
                for tp, records in polled.items():
                    seen.setdefault(tp.partition, set()).update(r.offset for r in records)
                if settled_now():
                    settled.set()
    try:
        pollers = [threading.Thread(target=poll_loop, args=(c,)) for c in (c1, c2)]
        for t in pollers:
            t.start()
        for t in pollers:
            t.join()
        assert {tp.partition for tp in c1.assignment() | c2.assignment()} == set(range(PARTITIONS))
        assert {p: len(offsets) for p, offsets in seen.items()} == {p: PER_PARTITION for p in range(PARTITIONS)}
        c1.commit()
        c2.commit()
        tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
        assert {tp.partition: c1.committed(tp) for tp in tps if tp in c1.assignment()} == {
            tp.partition: PER_PARTITION for tp in c1.assignment()}
    finally:
        c1.close()
        c2.close()
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=kray)
    offsets = admin.list_group_offsets({group: None})[group]
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {p: PER_PARTITION for p in range(PARTITIONS)}
    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert (listed[group]["protocol_type"], listed[group]["group_type"]) == ("consumer", "classic")
    assert admin.describe_groups([group])[group]["group_state"] == "Empty"
    admin.close()


def test_aiokafka_group_splits_and_commits(kray):
    from aiokafka import AIOKafkaConsumer
    topic = make_topic(kray)
    group = f"g-{topic}"

    async def run():
        members = [AIOKafkaConsumer(topic, bootstrap_servers=kray, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False) for _ in range(2)]
        for m in members:
            await m.start()
        try:
            seen: set[tuple[int, int]] = set()
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:
                for m in members:
                    for tp, records in (await m.getmany(timeout_ms=100)).items():
                        seen |= {(r.partition, r.offset) for r in records}
                sizes = [len(m.assignment()) for m in members]
                if sizes == [3, 3] and len(seen) == PARTITIONS * PER_PARTITION:
                    break
            assert [len(m.assignment()) for m in members] == [3, 3]
            assert len(seen) == PARTITIONS * PER_PARTITION
            for m in members:
                await m.commit()
            from aiokafka import TopicPartition as ATopicPartition
            assert [await members[0].committed(ATopicPartition(topic, p)) for p in range(PARTITIONS)
                    if ATopicPartition(topic, p) in members[0].assignment()] == [PER_PARTITION] * 3
        finally:
            for m in members:
                await m.stop()

    asyncio.run(run())


def test_admin_client_lists_describes_and_resets_groups(kray):
    topic = make_topic(kray, partitions=2)
    group = f"g-{topic}"
    admin = AdminClient({"bootstrap.servers": kray})
    c = confluent(kray, group, topic)
    consume(c, 2 * PER_PARTITION)
    c.commit(asynchronous=False)
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert len(described.members) == 1 and str(described.state).endswith("STABLE")
    assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == {0, 1}

    # offsets of a live group can't be reset by the admin (UNKNOWN_MEMBER_ID, as Kafka answers)
    reset = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    refused = admin.alter_consumer_group_offsets([reset])[group].result()
    assert {tp.error.code() for tp in refused.topic_partitions} == {KafkaError.UNKNOWN_MEMBER_ID}
    c.close()
    admin.alter_consumer_group_offsets([reset])[group].result()
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 0, 1: 0}

    admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert group not in {g.group_id for g in listed.valid}


def test_an_empty_group_moves_between_the_protocols_and_keeps_its_offsets(kray):
    """KIP-848's upgrade and downgrade of an empty group: classic, then consumer protocol, then classic
    again, each member resuming at the offsets the last one committed."""
    topic = make_topic(kray, partitions=2)
    group = f"g-{topic}"
    seen: set[tuple[int, int]] = set()
    for protocol in ("classic", "consumer", "classic"):
        c = confluent(kray, group, topic, **{"group.protocol": protocol})
        batch = consume(c, 30)
        c.commit(asynchronous=False)
        c.close()
        got = {(m.partition(), m.offset()) for m in batch}
        assert len(got) == 30 and not got & seen, f"{protocol}: records read again or missing"
        seen |= got
    admin = AdminClient({"bootstrap.servers": kray})
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert str(described.type).endswith("CLASSIC") and str(described.state).endswith("EMPTY")


def test_consumer_protocol_regex_subscription_picks_up_a_new_topic(kray):
    """A `^`-pattern subscribe() with group.protocol=consumer is sent as SubscribedTopicRegex; a topic
    created later that matches is assigned without the client asking again."""
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    first = f"{prefix}-a"
    admin = AdminClient({"bootstrap.servers": kray})
    admin.create_topics([NewTopic(first, 2, 1)])[first].result(30)
    c = Consumer({"bootstrap.servers": kray, "group.id": f"g-{prefix}", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([f"^{prefix}-.*"])
    try:
        deadline = time.monotonic() + SETTLE_S
        while {tp.topic for tp in c.assignment()} != {first}:
            assert time.monotonic() < deadline, f"regex assignment: {c.assignment()}"
            c.poll(0.2)
        second = f"{prefix}-b"
        admin.create_topics([NewTopic(second, 1, 1)])[second].result(30)
        while {(tp.topic, tp.partition) for tp in c.assignment()} != {(first, 0), (first, 1), (second, 0)}:
            assert time.monotonic() < deadline + SETTLE_S, f"the new topic was not assigned: {c.assignment()}"
            c.poll(0.2)
    finally:
        c.close()


def test_offsets_of_topics_or_partitions_that_do_not_exist_are_refused(kray):
    """As Kafka's OffsetCommit: UNKNOWN_TOPIC_OR_PARTITION for a topic or a partition index that does not exist;
    the offsets of the partitions that do exist in the same request are committed."""
    from confluent_kafka import KafkaException
    topic, group = f"oc-{uuid.uuid4().hex[:8]}", f"oc-group-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kray})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    c = Consumer({"bootstrap.servers": kray, "group.id": group, "enable.auto.commit": False})
    for offsets in ([TopicPartition(topic, 0, 5), TopicPartition(topic, 3, 5)],
                    [TopicPartition(f"missing-{uuid.uuid4().hex[:6]}", 0, 5)]):
        with pytest.raises(KafkaException) as refused:
            c.commit(offsets=offsets, asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5
    c.close()
