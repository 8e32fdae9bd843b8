"""DescribeProducers against a real `kray start` (issue 19, KIP-664): an idempotent producer (kafka-python) and a
transactional one with an open transaction (confluent-kafka) write to one partition; kafka-python's admin client
(describe_producers, sent to the partition's leader) and `kray transactions --describe-producers` show both producer
ids with their epochs, last sequences and the open transaction's first offset, which is gone (-1 / None) once the
transaction commits. An unknown partition or topic is answered UNKNOWN_TOPIC_OR_PARTITION."""
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition
from kafka.errors import UnknownTopicOrPartitionError

KRAY = str(Path(sys.executable).parent / "kray")


@pytest.fixture()
def topic(kray):
    name = f"producers-{uuid.uuid4().hex[:8]}"
    creator = AdminClient({"bootstrap.servers": kray})  # kept alive until the creation is answered
    creator.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


@pytest.fixture()
def admin(kray):
    a = KafkaAdminClient(bootstrap_servers=kray, client_id="describe-producers-test")
    yield a
    a.close()


def _producers(admin, topic) -> dict:
    """producer id -> kafka-python's ProducerState, as the partition's leader describes them."""
    result = admin.describe_producers([TopicPartition(topic, 0)])
    return {p.producer_id: p for p in result[TopicPartition(topic, 0)].active_producers}


def _cli(kray, *args) -> subprocess.CompletedProcess:
    return subprocess.run([KRAY, "transactions", "--bootstrap-server", kray, "--describe-producers", *args],
                          capture_output=True, text=True, timeout=60)


def _cli_rows(kray, topic) -> dict[str, dict[str, str]]:
    out = _cli(kray, "--topic", topic, "--partition", "0")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split("\t") == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                                  "LastTimestamp", "CurrentTransactionStartOffset"]
    return {row.split("\t")[0]: dict(zip(header.split("\t"), row.split("\t"))) for row in rows}


def test_idempotent_and_open_transactional_producers_are_described_until_the_commit(kray, topic, admin):
    started_ms = int(time.time() * 1000)
    idempotent = KafkaProducer(bootstrap_servers=kray, enable_idempotence=True)
    for i in range(3):
        idempotent.send(topic, value=b"idempotent-%d" % i, partition=0).get(30)
    idem = idempotent._transaction_manager.producer_id_and_epoch
    idempotent.close()

    tid = f"dp-{uuid.uuid4().hex[:8]}"
    txn = Producer({"bootstrap.servers": kray, "transactional.id": tid})
    txn.init_transactions(60)
    txn.begin_transaction()
    offsets = []
    for i in range(2):
        txn.produce(topic, value=b"txn-%d" % i, partition=0,
                    on_delivery=lambda err, m: offsets.append(m.offset() if err is None else err))
    assert txn.flush(30) == 0
    assert len(offsets) == 2 and all(isinstance(o, int) for o in offsets), offsets
    [described] = admin.describe_transactions([tid]).values()
    txn_pid, txn_epoch = described.producer_id, described.producer_epoch
    assert txn_pid != idem.producer_id

    producers = _producers(admin, topic)
    assert set(producers) == {idem.producer_id, txn_pid}
    i, t = producers[idem.producer_id], producers[txn_pid]
    assert (i.producer_epoch, i.last_sequence, i.coordinator_epoch, i.current_transaction_start_offset) == (
        idem.epoch, 2, -1, -1)
    assert (t.producer_epoch, t.last_sequence, t.coordinator_epoch, t.current_transaction_start_offset) == (
        txn_epoch, 1, -1, min(offsets))
    assert min(offsets) == 3  # after the idempotent producer's three records
    now_ms = int(time.time() * 1000)
    assert started_ms - 1000 <= i.last_timestamp <= t.last_timestamp <= now_ms + 1000

    rows = _cli_rows(kray, topic)
    assert set(rows) == {str(idem.producer_id), str(txn_pid)}
    assert rows[str(idem.producer_id)] | {"LastTimestamp": ""} == {
        "ProducerId": str(idem.producer_id), "ProducerEpoch": str(idem.epoch), "LatestCoordinatorEpoch": "-1",
        "LastSequence": "2", "LastTimestamp": "", "CurrentTransactionStartOffset": "None"}
    assert (rows[str(txn_pid)]["LastSequence"], rows[str(txn_pid)]["CurrentTransactionStartOffset"]) == ("1", "3")

    txn.commit_transaction(60)
    deadline = time.monotonic() + 30  # the coordinator writes the COMMIT marker after EndTxn is answered
    while (t := _producers(admin, topic)[txn_pid]).current_transaction_start_offset != -1:
        assert time.monotonic() < deadline, t
        time.sleep(0.2)
    assert (t.producer_epoch, t.last_sequence) == (txn_epoch, 1)
    assert t.coordinator_epoch >= 0  # the marker's coordinator epoch
    assert _cli_rows(kray, topic)[str(txn_pid)]["CurrentTransactionStartOffset"] == "None"
    assert _producers(admin, topic)[idem.producer_id].current_transaction_start_offset == -1


def test_an_unknown_partition_or_topic_is_answered_unknown_topic_or_partition(kray, topic, admin):
    [leader] = [b["broker_id"] for b in admin.describe_cluster()["brokers"]]  # one broker: the leader
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition(topic, 5)], broker_id=leader)   # sent as asked, no metadata check
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition(f"never-{uuid.uuid4().hex[:6]}", 0)], broker_id=leader)
    assert _producers(admin, topic) == {}  # a partition nobody wrote to with a producer id
    out = _cli(kray, "--topic", topic, "--partition", "5")
    assert out.returncode == 1 and "no partition 5" in out.stderr
    out = _cli(kray, "--topic", topic)
    assert out.returncode == 1 and "--partition" in out.stderr
