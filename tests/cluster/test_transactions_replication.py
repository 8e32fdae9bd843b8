"""Transactions on replicated partitions (issue 19, the log side): markers replicate like any batch
and are acknowledged once min.insync.replicas hold them; a follower derives open transactions, the
aborted-transaction index and the coordinator epochs from the batches it appends, so that after
its leader's node dies it serves read_committed readers and fences markers as the old leader did, and
DescribeProducers on the new leader shows the producers (epochs, sequences, coordinator epochs, open
transactions) the old one showed."""
import time
import uuid

import pytest
import ray
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.admin import KafkaConnection
from cluster.local import LocalCluster
from protocol.errors import ErrorCode
from protocol.messages import DescribeProducersRequest
from tests.cluster.raw import Transactions

FAST_LIVENESS = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
                 "replica.lag.time.max.ms": 5000}
PID = 9_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-txn-replication"), overrides=FAST_LIVENESS)
    c.start()
    yield c
    c.stop()


def _wait(predicate, timeout_s: float = 60, what: str = ""):
    deadline, last = time.monotonic() + timeout_s, None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:
            last = e
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {last!r}"
        time.sleep(0.25)


def _read_committed(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.time() + 60
        while len(got) < expect and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        extra = c.poll(2)
        if extra is not None and not extra.error():
            got.append(extra.value())
        return got
    finally:
        c.close()


def _producers(bootstrap: str, topic: str) -> tuple[int, dict]:
    """DescribeProducers v0 of partition 0 on one gateway: (error, producer id -> (epoch, last sequence,
    coordinator epoch, current transaction start offset))."""
    with KafkaConnection(bootstrap, client_id="describe-producers") as conn:
        [t] = conn.send(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
            name=topic, partition_indexes=[0])]), 0).topics
    [p] = t.partitions
    return p.error_code, {s.producer_id: (s.producer_epoch, s.last_sequence, s.coordinator_epoch,
                                          s.current_txn_start_offset) for s in p.active_producers}


def test_a_new_leader_keeps_the_transactions_its_old_leader_wrote(cluster):
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    _wait(lambda: sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs) == [1, 2, 3],
          what="a full ISR")
    gateways = dict(zip(cluster.brokers, cluster.bootstrap.split(",")))
    old_leader = cluster.leader(topic, 0)
    t = Transactions(gateways[old_leader], topic)
    assert t.send(PID, [b"aborted"]) == (0, 0)
    assert t.end(PID, committed=False, coordinator_epoch=2) == [0]      # offset 1, held by min.insync.replicas
    assert t.send(PID + 1, [b"committed"]) == (0, 2)
    assert t.end(PID + 1, committed=True, coordinator_epoch=2) == [0]  # offset 3
    assert t.send(PID + 2, [b"open"]) == (0, 4)
    assert t.send(-1, [b"plain"], transactional=False) == (0, 5)
    t.close()
    producers = {PID: (0, 0, 2, -1), PID + 1: (0, 0, 2, -1), PID + 2: (0, 0, -1, 4)}  # no entry for the plain batch
    assert _producers(gateways[old_leader], topic) == (0, producers)
    follower = next(b for b in cluster.brokers if b != old_leader)
    assert _producers(gateways[follower], topic) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, {})

    cluster.kill_node(old_leader)
    try:
        new_leader = _wait(lambda: (lambda b: b if b not in (old_leader, -1) else None)(cluster.leader(topic, 0)),
                           what="a new leader")
        t = Transactions(gateways[new_leader], topic)
        # the coordinator epoch the follower learnt from the replicated marker still fences
        # (retried while the new leader's broker has not heard it leads yet, as a coordinator retries)
        fenced = _wait(lambda: (lambda r: r if r != [ErrorCode.NOT_LEADER_OR_FOLLOWER] else None)(
            t.end(PID, committed=True, coordinator_epoch=1)), what="the new leader")
        assert fenced == [ErrorCode.TRANSACTION_COORDINATOR_FENCED]
        assert _producers(gateways[new_leader], topic) == (0, producers)  # what the follower derived
        live = ",".join(g for b, g in gateways.items() if b != old_leader)
        c = Consumer({"bootstrap.servers": live, "group.id": "lso", "isolation.level": "read_committed",
                      "topic.metadata.refresh.interval.ms": 1000})
        c.assign([TopicPartition(topic, 0, 0)])   # so that its metadata covers the topic
        try:
            assert _wait(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False),
                         what="the watermarks") == (0, 4), "the open transaction holds the last stable offset"
        finally:
            c.close()
        assert t.end(PID + 2, committed=True, coordinator_epoch=2) == [0]
        t.close()
        assert _producers(gateways[new_leader], topic) == (0, producers | {PID + 2: (0, 0, 2, -1)})
        assert _read_committed(live, topic, 3) == [b"committed", b"open", b"plain"]
    finally:
        cluster.restart_node(old_leader)
