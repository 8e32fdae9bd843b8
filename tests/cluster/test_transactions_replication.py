"""Transactions on replicated partitions (issue 19, the log side): markers replicate like any batch
and are acknowledged once min.insync.replicas hold them; a follower derives open transactions, the
aborted-transaction index and the coordinator epochs from the batches it appends, so that after
its leader's node dies it serves read_committed readers and fences markers as the old leader did, and
DescribeProducers on the new leader shows the producers (epochs, sequences, coordinator epochs, open
transactions) the old one showed. And confluent-kafka's exactly-once read-process-write pipeline
produces each input record once across the kill of its transaction coordinator's node."""
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import ray
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from actors import internal_topics
from cluster.admin import KafkaConnection
from cluster.local import LocalCluster
from protocol.errors import ErrorCode
from protocol.messages import DescribeProducersRequest, DescribeTransactionsRequest, FindCoordinatorRequest
from tests.cluster.raw import Transactions

# (KIP-890's verification off: the first test writes transactions without a coordinator, tests.cluster.raw; the
# confluent pipeline below runs without it too; the Java one, transaction version 2, adds its partitions anyway)
FAST_LIVENESS = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
                 "replica.lag.time.max.ms": 5000, "transaction.partition.verification.enable": False}
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


# ---- an exactly-once pipeline across a node kill --------------------------------------------------------------------
EOS_RECORDS = 3000
EOS_BATCH = 100  # records per transaction


def _transaction_coordinator(cluster, transactional_id: str) -> int:
    """The broker leading the `__transaction_state` partition of `transactional_id`."""
    image = cluster.metadata()
    state = image.topics[internal_topics.TRANSACTION_STATE]
    return state.partitions[internal_topics.transaction_partition(transactional_id, len(state.partitions))].leader


def _pipeline_topics(cluster, prefix: str) -> tuple[str, str, str, str, str]:
    """(run name, source, sink, group, transactional id): two topics of 3 partitions, RF 3, min.insync.replicas 2,
    the source holding EOS_RECORDS records keyed 0..EOS_RECORDS-1."""
    name = uuid.uuid4().hex[:6]
    source, sink, group = f"{prefix}-in-{name}", f"{prefix}-out-{name}", f"{prefix}-{name}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(t, 3, 3, config={"min.insync.replicas": "2"})
                                  for t in (source, sink)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 10})
    for i in range(EOS_RECORDS):
        p.produce(source, key=b"%d" % i, value=b"%d" % i, partition=i % 3)
        p.poll(0)
    assert p.flush(60) == 0
    return name, source, sink, group, f"{prefix}-{name}"


def _output_keys(cluster, sink: str, name: str) -> Counter:
    """How many times a read_committed reader sees each input key in the sink (read until quiet for 3 s)."""
    out = Counter()
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{name}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(sink, i, 0) for i in range(3)])
    deadline, quiet_since = time.monotonic() + 60, time.monotonic()
    while time.monotonic() < deadline and (len(out) < EOS_RECORDS or time.monotonic() - quiet_since < 3):
        got = [m for m in c.consume(1000, timeout=0.5) if m.error() is None]
        out.update(int(m.key()) for m in got)
        quiet_since = time.monotonic() if got else quiet_since
    c.close()
    return out


class Pipeline(threading.Thread):
    """confluent-kafka's exactly-once read-process-write loop, as its documentation writes it: a
    read_committed group member without auto-commit, a transactional producer; per transaction up
    to EOS_BATCH records copied from `source` to `sink` and the consumer's positions sent with
    them. A transaction that fails is aborted (a fatal error: a new producer) and the member
    starts again from the group's committed offsets (a new consumer), so that what the aborted
    transaction read is read again. With `hold` set, the next transaction stops after its records
    and offsets are sent, sets `holding` and waits for `resume` before it commits."""

    def __init__(self, bootstrap: str, source: str, sink: str, group: str, transactional_id: str):
        super().__init__(daemon=True)
        self.bootstrap, self.source, self.sink, self.group = bootstrap, source, sink, group
        self.transactional_id = transactional_id
        self.committed_records = 0  # records of transactions whose commit_transaction returned
        self.aborts: list[str] = []
        self.hold, self.holding, self.resume, self.stop = (threading.Event() for _ in range(4))
        self.failure: BaseException | None = None

    def _consumer(self) -> Consumer:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "isolation.level": "read_committed",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.subscribe([self.source])
        return c

    def _producer(self) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id})
        p.init_transactions(60)
        return p

    def run(self) -> None:
        try:
            consumer, producer = self._consumer(), self._producer()
            while not self.stop.is_set():
                records = [m for m in consumer.consume(EOS_BATCH, timeout=0.5) if m.error() is None]
                if not records:
                    continue
                try:
                    producer.begin_transaction()
                    for m in records:
                        producer.produce(self.sink, key=m.key(), value=m.value(), partition=m.partition())
                    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                         consumer.consumer_group_metadata(), 30)
                    if self.hold.is_set():
                        self.hold.clear()
                        self.holding.set()
                        self.resume.wait(60)
                    self._retrying(producer.commit_transaction)
                    self.committed_records += len(records)
                except KafkaException as e:
                    error = e.args[0]
                    self.aborts.append(str(error)[:120])
                    if error.fatal():
                        producer = self._producer()
                    else:
                        self._retrying(producer.abort_transaction)
                    consumer.close()
                    consumer = self._consumer()
            consumer.close()
        except BaseException as e:  # said by the test, not lost in the thread
            self.failure = e

    @staticmethod
    def _retrying(call) -> None:
        """commit_transaction / abort_transaction, asked again while the error is retriable (the
        outcome is not known yet: the coordinator moved, the call timed out)."""
        deadline = time.monotonic() + 120
        while True:
            try:
                return call(30)
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise


def test_a_read_process_write_pipeline_produces_exactly_once_across_a_node_kill(cluster):
    """The node of the pipeline's transaction coordinator is killed while a transaction is open
    (records and offsets sent, EndTxn not yet): the new coordinator, loaded from the replicated
    `__transaction_state`, completes or aborts it; markers reach partition leaders that moved. A
    read_committed reader of the output sees every input record exactly once."""
    name, source, sink, group, transactional_id = _pipeline_topics(cluster, "eos")
    pipeline = Pipeline(cluster.bootstrap, source, sink, group, transactional_id)
    pipeline.start()
    down = None
    try:
        _wait(lambda: pipeline.committed_records >= EOS_RECORDS // 3 or pipeline.failure, 90,
              "a third of the input through the pipeline")
        assert pipeline.failure is None, pipeline.failure
        victim = _transaction_coordinator(cluster, transactional_id)
        pipeline.hold.set()
        assert pipeline.holding.wait(60), "the pipeline opened no transaction"
        at_kill = pipeline.committed_records
        cluster.kill_node(victim)
        down, killed_at = victim, time.monotonic()
        pipeline.resume.set()
        _wait(lambda: pipeline.committed_records >= EOS_RECORDS or pipeline.failure, 120,
              "the whole input through the pipeline")
        assert pipeline.failure is None, pipeline.failure
        recovered_s = time.monotonic() - killed_at
        cluster.restart_node(victim)
        down = None
    finally:
        pipeline.stop.set()
        pipeline.resume.set()
        pipeline.join(60)
        if down is not None:
            cluster.restart_node(down)
    out = _output_keys(cluster, sink, name)
    print(f"exactly-once pipeline across the kill of broker {victim} (its transaction coordinator): {at_kill} "
          f"records committed before it, all {EOS_RECORDS} {recovered_s:.1f} s after it; aborted transactions "
          f"{len(pipeline.aborts)} {pipeline.aborts[:3]}")
    missing = sorted(set(range(EOS_RECORDS)) - set(out))
    twice = sorted(k for k, n in out.items() if n > 1)
    assert not missing, f"{len(missing)} input records missing from the output: {missing[:10]}"
    assert not twice, f"{len(twice)} input records in the output more than once: {twice[:10]}"
    assert set(out) == set(range(EOS_RECORDS))


# ---- the same across a node kill with Apache Kafka's Java clients: transaction version 2 ----------------------------
JAVA = Path(__file__).resolve().parents[1] / "clients" / "java"
KAFKA_LIB = Path(__file__).resolve().parents[1] / "kafka" / "lib"


def _describe_transaction(bootstrap: str, transactional_id: str):
    """DescribeTransactions at the id's coordinator (found with FindCoordinator, as an admin client does)."""
    def described():
        with KafkaConnection(bootstrap, client_id="describe-transactions") as conn:
            found = conn.send(FindCoordinatorRequest(key=transactional_id, key_type=1,
                                                     coordinator_keys=[transactional_id]))
            coordinator = found.coordinators[0] if found.coordinators else found
        if coordinator.error_code:
            return None
        with KafkaConnection(f"{coordinator.host}:{coordinator.port}", client_id="describe-transactions") as conn:
            [state] = conn.send(DescribeTransactionsRequest(transactional_ids=[transactional_id])).transaction_states
        return state if state.error_code == 0 else None
    return _wait(described, 60, "the transaction's coordinator")


class JavaPipeline:
    """tests/clients/java/EosPipeline.java in a JVM: committed records counted from its output, `hold` as above."""

    def __init__(self, classes, bootstrap, source, sink, group, transactional_id):
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", f"-Dlog4j2.configurationFile={JAVA / 'log4j2.properties'}", "-cp",
             f"{KAFKA_LIB}/*:{classes}", "EosPipeline", bootstrap, source, sink, group, transactional_id,
             str(EOS_RECORDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.committed_records, self.lines = 0, []
        self.holding = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line.strip())
            if line.startswith("committed "):
                self.committed_records = int(line.split()[1])
            elif line.startswith("holding"):
                self.holding.set()

    def tell(self, command: str):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def summary(self) -> dict:
        return next((json.loads(line) for line in reversed(self.lines) if line.startswith("{")), {})


@pytest.mark.skipif(shutil.which("javac") is None or not (KAFKA_LIB / "kafka-clients-4.4.0.jar").is_file(),
                    reason="javac or Apache Kafka's Java client missing: ./dev test installs it (JDK 17+, mvn)")
def test_the_java_clients_pipeline_runs_transaction_version_2_exactly_once_across_a_node_kill(cluster, tmp_path):
    """Kafka's Java producer runs transaction version 2 on Kray (an epoch bump at every end, partitions added by the
    broker, TxnOffsetCommit without AddOffsetsToTxn); its transaction coordinator's node is killed while a
    transaction is open: every input record reaches the output once, and the epoch shows one bump per transaction."""
    compiled = subprocess.run(["javac", "-cp", f"{KAFKA_LIB}/*", "-d", str(tmp_path), str(JAVA / "EosPipeline.java")],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    name, source, sink, group, transactional_id = _pipeline_topics(cluster, "eos2")
    pipeline = JavaPipeline(tmp_path, cluster.bootstrap, source, sink, group, transactional_id)
    down = None
    try:
        _wait(lambda: pipeline.committed_records >= EOS_RECORDS // 3 or pipeline.process.poll() is not None, 120,
              "a third of the input through the Java pipeline")
        assert pipeline.process.poll() is None, pipeline.lines[-5:]
        victim = _transaction_coordinator(cluster, transactional_id)
        pipeline.tell("hold")
        assert pipeline.holding.wait(60), "the pipeline opened no transaction"
        at_kill = pipeline.committed_records
        cluster.kill_node(victim)
        down, killed_at = victim, time.monotonic()
        pipeline.tell("resume")
        assert pipeline.process.wait(240) == 0, pipeline.lines[-5:]
        recovered_s = time.monotonic() - killed_at
        state = _describe_transaction(cluster.bootstrap, transactional_id)
        cluster.restart_node(victim)
        down = None
    finally:
        if pipeline.process.poll() is None:
            pipeline.process.kill()
        if down is not None:
            cluster.restart_node(down)
    out = _output_keys(cluster, sink, name)
    transactions = sum(1 for line in pipeline.lines if line.startswith("committed "))
    aborts = pipeline.summary().get("aborts", [])
    print(f"Java exactly-once pipeline across the kill of broker {victim} (its transaction coordinator): "
          f"{at_kill} records committed before it, all {EOS_RECORDS} {recovered_s:.1f} s after it; "
          f"{transactions} transactions committed, {len(aborts)} aborted {aborts[:3]}; epoch now "
          f"{state.producer_epoch}")
    missing = sorted(set(range(EOS_RECORDS)) - set(out))
    twice = sorted(k for k, n in out.items() if n > 1)
    assert not missing, f"{len(missing)} input records missing from the output: {missing[:10]}"
    assert not twice, f"{len(twice)} input records in the output more than once: {twice[:10]}"
    # version 2: every end bumps the epoch (as do an abort and a new producer's InitProducerId; none lowers it), so
    # the epoch is at least the number of commits (version 1 would have kept it at the number of new producers)
    assert state.error_code == 0 and state.transaction_state == "CompleteCommit"
    assert state.producer_epoch >= transactions > 10, (state, transactions)
