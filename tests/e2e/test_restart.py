"""Restarting `kray start` on the same data dir brings back what users rely on: every topic with its
configs and acknowledged records, a share group's acknowledgements, consumer groups' committed
offsets, and transactions (an aborted one stays invisible, an open one stays open).

Each `kray start` costs tens of seconds, so one clean restart serves every test here: the module's
fixture starts one `kray start`, does each test's part before the restart, stops it with SIGTERM
(it must exit 0), starts it again on the same data dir and port, and each test checks its part
after the restart. A step that fails before the restart fails its own test only. The kill -9 case is
test_transactions_log.py::test_transactions_survive_a_restart (recovery without a clean stop)."""
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

from protocol.errors import ErrorCode
from tests.cluster.raw import Transactions
from tests.e2e.test_consumer_groups import PER_PARTITION, confluent, consume, make_topic
from tests.e2e.test_transactions_log import PID_BASE, confluent_values, read_committed_watermarks
from tests.kray_process import KrayProcess

RECORDS = 5000
SHARE_RECORDS, SHARE_FIRST = 1000, 400
SHARE_GROUP = "durable-workers"
TXN_TOPIC, TXN_PID = "txn-restart", PID_BASE + 50
# the share consumers' heartbeats, fast for the whole server (the other groups do not use them)
# (and KIP-890's verification off: the transactions here are written without a coordinator, tests.cluster.raw)
FAST_SHARE_HEARTBEATS = ("group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500",
                         "transaction.partition.verification.enable=false")


# --- before the restart: each returns what its test checks after it

def write_durable_topic(bootstrap) -> list:
    """A 2-partition topic with retention.ms set, and RECORDS records written with acks=all:
    the (partition, offset, key) of each acknowledged one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("durable", 2, 1, config={"retention.ms": "86400000"})])["durable"].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    acked = []
    for i in range(RECORDS):
        p.produce("durable", key=b"%d" % i, value=b"v%d" % i, partition=i % 2,
                  on_delivery=lambda e, m: acked.append((m.partition(), m.offset(), m.key())) if e is None else None)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == RECORDS
    return acked


def share_consume(bootstrap, accept, forbidden=frozenset()) -> set[int]:
    """Accept (explicit acknowledgement) `accept` records of "jobs" in SHARE_GROUP, releasing any
    others delivered with them (they are to be delivered again): the accepted records' keys. A key in
    `forbidden` coming back fails."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": SHARE_GROUP,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe(["jobs"])
    accepted, deadline = set(), time.monotonic() + 60
    while len(accepted) < accept and time.monotonic() < deadline:
        for m in c.poll(1.0):
            if m.error() is None:
                assert int(m.key()) not in forbidden, "an acknowledged record came back after the restart"
                if len(accepted) < accept:
                    accepted.add(int(m.key()))
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                else:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync()
    c.close()
    return accepted


def accept_first_share_records(bootstrap) -> set[int]:
    """SHARE_RECORDS jobs, of which a share group accepts SHARE_FIRST and releases any others it was
    delivered: the accepted records' keys. (Accepting whole polls would accept all SHARE_RECORDS at
    once, leaving nothing to deliver after the restart.)"""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("jobs", 2, 1)])["jobs"].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, SHARE_GROUP,
            incremental_configs=[ConfigEntry("share.auto.offset.reset", "earliest",
                                             incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 25})
    for i in range(SHARE_RECORDS):
        p.produce("jobs", key=b"%d" % i, value=b"job", partition=i % 2)
    assert p.flush(30) == 0
    first = share_consume(bootstrap, SHARE_FIRST)
    assert len(first) == SHARE_FIRST
    return first


def commit_group_offsets(bootstrap) -> tuple[str, list]:
    """A KIP-848 consumer group reads and commits half of a 2-partition topic, and an assign() user
    (no subscription) commits offset 7 of partition 0 in a group of its own: the topic and the
    records the group read."""
    topic = make_topic(bootstrap, partitions=2)
    c = confluent(bootstrap, f"g-{topic}", topic, **{"group.protocol": "consumer"})
    first = consume(c, PER_PARTITION)
    c.commit(asynchronous=False)
    c.close()
    simple = Consumer({"bootstrap.servers": bootstrap, "group.id": f"assign-{topic}", "enable.auto.commit": False})
    simple.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)  # assign() users commit too
    simple.close()
    return topic, first


def leave_transactions(bootstrap) -> None:
    """On TXN_TOPIC: an aborted transaction (offset 0, its marker at 1), an open one (offset 2) and a
    plain record after it (offset 3)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TXN_TOPIC, 1, 1)])[TXN_TOPIC].result(30)
    t = Transactions(bootstrap, TXN_TOPIC)
    try:
        assert t.send(TXN_PID, [b"aborted"])[0] == 0
        assert t.end(TXN_PID, committed=False) == [0]
        assert t.send(TXN_PID + 1, [b"open"])[0] == 0
        assert t.send(-1, [b"after-open"], transactional=False)[0] == 0
    finally:
        t.close()


BEFORE_THE_RESTART = {"durable": write_durable_topic, "share": accept_first_share_records,
                      "groups": commit_group_offsets, "transactions": leave_transactions}


@dataclass
class Restarted:
    bootstrap: str
    done: dict = field(default_factory=dict)   # step name -> its result, or the exception it raised

    def before(self, step: str):
        """What `step` left before the restart; its failure, raised here, fails only its own test."""
        result = self.done[step]
        if isinstance(result, BaseException):
            raise result
        return result


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """One `kray start` that did every test's part, was stopped with SIGTERM (exit code 0) and
    started again on the same data dir and port."""
    data = tmp_path_factory.mktemp("restart-data")
    server = KrayProcess(data, overrides=FAST_SHARE_HEARTBEATS)
    bootstrap = server.start()
    done = {}
    try:
        for name, step in BEFORE_THE_RESTART.items():
            try:
                done[name] = step(bootstrap)
            except Exception as e:
                done[name] = e
    finally:
        exit_code = server.stop()
    assert exit_code == 0, "kray start exits 0 on SIGTERM"

    server = KrayProcess(data, port=server.port, overrides=FAST_SHARE_HEARTBEATS)
    try:
        yield Restarted(server.start(), done)
    finally:
        server.stop()


# --- after the restart

def read_all(bootstrap, topic, partitions, count):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, empty = [], 0
    while len(got) < count and empty < 30:
        batch = [m for m in c.consume(1000, timeout=1.0) if m.error() is None]
        empty = 0 if batch else empty + 1
        got += batch
    c.close()
    return got


def test_topics_and_acknowledged_records_survive_a_restart(restarted):
    acked = restarted.before("durable")
    bootstrap = restarted.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=30)
    assert "durable" in md.topics and len(md.topics["durable"].partitions) == 2
    configs = admin.describe_configs([ConfigResource("topic", "durable")])
    described = list(configs.values())[0].result(30)
    assert described["retention.ms"].value == "86400000"
    got = read_all(bootstrap, "durable", 2, RECORDS)
    assert sorted((m.partition(), m.offset(), m.key()) for m in got) == sorted(acked)
    # appends continue after the recovered end
    p = Producer({"bootstrap.servers": bootstrap})
    offsets = []
    p.produce("durable", value=b"after", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
    p.flush(30)
    assert offsets == [RECORDS // 2]


def test_share_group_acknowledgements_survive_a_restart(restarted):
    """No record accepted before the restart is delivered again after it, and every other record
    (released or never delivered before it) is."""
    first = restarted.before("share")
    rest = share_consume(restarted.bootstrap, SHARE_RECORDS - len(first), forbidden=first)
    assert first | rest == set(range(SHARE_RECORDS))


def test_committed_offsets_survive_a_broker_restart(restarted):
    """The group resumes after what it committed (no record read twice), and the assign() user's
    commit is still there."""
    topic, first = restarted.before("groups")
    bootstrap = restarted.bootstrap
    c = confluent(bootstrap, f"g-{topic}", topic, **{"group.protocol": "consumer"})
    rest = consume(c, PER_PARTITION)
    c.close()
    assert len(first) == len(rest) == PER_PARTITION
    assert not {(m.partition(), m.offset()) for m in first} & {(m.partition(), m.offset()) for m in rest}
    simple = Consumer({"bootstrap.servers": bootstrap, "group.id": f"assign-{topic}"})
    assert simple.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 7
    simple.close()


def test_transactions_survive_a_restart(restarted):
    """After a clean stop: an aborted transaction stays invisible to read_committed readers, an open
    one still holds the last stable offset and its marker still ends it."""
    restarted.before("transactions")
    bootstrap = restarted.bootstrap
    assert read_committed_watermarks(bootstrap, TXN_TOPIC) == (0, 2)   # latest: the open transaction's first offset
    t = Transactions(bootstrap, TXN_TOPIC)
    assert t.send(TXN_PID + 1, [b"open"]) == (0, 2)   # a retry is still known as the duplicate it is
    t.sequences[(TXN_PID + 1, 0)] = 1
    assert t.send(TXN_PID + 1, [b"still-plain"], transactional=False)[0] == ErrorCode.INVALID_TXN_STATE
    assert t.end(TXN_PID + 1, committed=True) == [0]
    t.close()
    assert confluent_values(bootstrap, TXN_TOPIC, "read_committed", expect=2) == [b"open", b"after-open"]
