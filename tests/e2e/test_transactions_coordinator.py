"""The transaction coordinator against a real `kray start` (issue 19), over raw Kafka requests: what a transactional
producer's first steps get (FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn) and what an operator sees
(DescribeTransactions, ListTransactions, `kray transactions`).

The requests name their versions; a transaction that ends is in Prepare* until the partition leaders have
written its markers (then Complete*), so the tests accept either where they end one.
"""
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.admin import KafkaConnection
from protocol.errors import ErrorCode
from actors import internal_topics
from protocol.messages import (AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeTransactionsRequest,
                               EndTxnRequest,
                               FindCoordinatorRequest, InitProducerIdRequest, ListTransactionsRequest)

KEY_TYPE_TRANSACTION = 1
E = ErrorCode


@pytest.fixture(scope="module")
def topic(kray):
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kray})
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])[name].result(30)
    return name


def _coordinator(kray: str, transactional_id: str) -> KafkaConnection:
    """A connection to the transactional id's coordinator, found as a producer finds it (FindCoordinator v4)."""
    with KafkaConnection(kray, client_id="txn-test") as conn:
        deadline = time.monotonic() + 60
        while True:
            [c] = conn.send(FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=[transactional_id]),
                            4).coordinators
            if c.error_code not in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert (c.key, c.error_code) == (transactional_id, 0)
    return KafkaConnection(f"{c.host}:{c.port}", client_id="txn-test")


def _init(conn, transactional_id: str, timeout_ms: int = 60000, version: int = 4):
    deadline = time.monotonic() + 30
    while True:  # the coordinator may still be loading its partition, or fencing an open transaction
        r = conn.send(InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=timeout_ms),
                      version)
        if r.error_code not in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS) or \
                time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def _add(conn, transactional_id, producer_id, producer_epoch, partitions, version=3) -> dict:
    topics = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    r = conn.send(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch, v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()]),
        version)
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def _describe(conn, transactional_id):
    [state] = conn.send(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0).transaction_states
    return state


def test_find_coordinator_names_a_broker_for_a_transactional_id(kray):
    with KafkaConnection(kray, client_id="txn-test") as conn:
        r = conn.send(FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=["a", "b"]), 4)
        deadline = time.monotonic() + 60
        while any(c.error_code for c in r.coordinators) and time.monotonic() < deadline:
            time.sleep(0.5)
            r = conn.send(FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=["a", "b"]), 4)
        assert [(c.key, c.error_code) for c in r.coordinators] == [("a", 0), ("b", 0)]
        assert all(c.node_id >= 0 and c.port > 0 for c in r.coordinators)
        old = conn.send(FindCoordinatorRequest(key="a", key_type=KEY_TYPE_TRANSACTION), 2)  # one key, before v4
        assert (old.error_code, old.node_id) == (0, r.coordinators[0].node_id)


def test_init_producer_id_gives_an_id_and_a_second_init_fences_the_first(kray, topic):
    txn = f"fence-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, txn) as conn:
        first = _init(conn, txn)
        assert first.error_code == 0 and first.producer_id >= 0 and first.producer_epoch == 0
        second = _init(conn, txn)
        assert (second.error_code, second.producer_id, second.producer_epoch) == (0, first.producer_id, 1)
        # the zombie (the first producer) is fenced: PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH before v2
        assert _add(conn, txn, first.producer_id, 0, [(topic, 0)]) == {(topic, 0): E.PRODUCER_FENCED}
        assert _add(conn, txn, first.producer_id, 0, [(topic, 0)], version=1) == {
            (topic, 0): E.INVALID_PRODUCER_EPOCH}
        assert _add(conn, txn, second.producer_id, 1, [(topic, 0)]) == {(topic, 0): 0}


def test_add_partitions_of_an_unknown_topic_adds_nothing(kray, topic):
    txn = f"unknown-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, txn) as conn:
        p = _init(conn, txn)
        assert _add(conn, txn, p.producer_id, p.producer_epoch, [(topic, 0), ("no-such-topic", 0), (topic, 7)]) == {
            (topic, 0): E.OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
            (topic, 7): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert _describe(conn, txn).transaction_state == "Empty"


def test_transaction_timeout_above_the_maximum_is_refused(kray):
    txn = f"timeout-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, txn) as conn:
        r = _init(conn, txn, timeout_ms=900_001)  # transaction.max.timeout.ms is 900000 by default
        assert (r.error_code, r.producer_id) == (E.INVALID_TRANSACTION_TIMEOUT, -1)


def test_an_ongoing_transaction_is_listed_and_described(kray, topic):
    txn = f"listed-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, txn) as conn:
        p = _init(conn, txn)
        assert _add(conn, txn, p.producer_id, p.producer_epoch, [(topic, 0), (topic, 1)]) == {
            (topic, 0): 0, (topic, 1): 0}
        state = _describe(conn, txn)
        assert (state.error_code, state.transaction_state, state.producer_id, state.producer_epoch) == (
            0, "Ongoing", p.producer_id, p.producer_epoch)
        assert state.transaction_timeout_ms == 60000 and state.transaction_start_time_ms > 0
        assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [(topic, [0, 1])]
        listed = conn.send(ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[]), 1)
        assert listed.error_code == 0
        assert (txn, p.producer_id, "Ongoing") in {(t.transactional_id, t.producer_id, t.transaction_state)
                                                   for t in listed.transaction_states}
        unknown = _describe(conn, f"never-{uuid.uuid4().hex[:6]}")
        assert unknown.error_code == E.TRANSACTIONAL_ID_NOT_FOUND


def test_end_txn_commits_and_a_retry_of_it_is_answered_alike(kray, topic):
    txn = f"commit-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, txn) as conn:
        p = _init(conn, txn)
        assert _add(conn, txn, p.producer_id, p.producer_epoch, [(topic, 0)]) == {(topic, 0): 0}
        end = conn.send(EndTxnRequest(transactional_id=txn, producer_id=p.producer_id,
                                      producer_epoch=p.producer_epoch, committed=True), 3)
        assert end.error_code == 0
        # until the partition leaders write the marker the transaction is PrepareCommit; a retry of the same
        # EndTxn meanwhile is CONCURRENT_TRANSACTIONS, after it NONE; an abort now is INVALID_TXN_STATE
        assert _describe(conn, txn).transaction_state in ("PrepareCommit", "CompleteCommit")
        abort = conn.send(EndTxnRequest(transactional_id=txn, producer_id=p.producer_id,
                                        producer_epoch=p.producer_epoch, committed=False), 3)
        assert abort.error_code in (E.INVALID_TXN_STATE, E.CONCURRENT_TRANSACTIONS)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(kray, topic):
    txn = f"expires-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, txn) as conn:
        p = _init(conn, txn, timeout_ms=1000)
        assert _add(conn, txn, p.producer_id, p.producer_epoch, [(topic, 1)]) == {(topic, 1): 0}
        deadline = time.monotonic() + 20
        while _describe(conn, txn).transaction_state == "Ongoing" and time.monotonic() < deadline:
            time.sleep(0.3)
        state = _describe(conn, txn)
        assert state.transaction_state in ("PrepareAbort", "CompleteAbort")
        assert state.producer_epoch == p.producer_epoch + 1  # the abort bumped the epoch: the producer is fenced
        assert _add(conn, txn, p.producer_id, p.producer_epoch, [(topic, 1)]) == {(topic, 1): E.PRODUCER_FENCED}



def test_brokers_batched_requests_verify_and_add_per_transaction(kray, topic):
    """AddPartitionsToTxn v4+ (KIP-890 part 1): a partition leader asks whether its partition is in a transaction
    (verify_only: nothing added; TRANSACTION_ABORTABLE when it is not); several transactions in one request."""
    ongoing, other = f"verify-{uuid.uuid4().hex[:6]}", f"batched-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, ongoing) as conn:
        p = _init(conn, ongoing)
        assert _add(conn, ongoing, p.producer_id, p.producer_epoch, [(topic, 0)]) == {(topic, 0): 0}
    with _coordinator(kray, other) as conn:
        q = _init(conn, other)
    R = AddPartitionsToTxnRequest
    request = R(transactions=[
        R.AddPartitionsToTxnTransaction(transactional_id=ongoing, producer_id=p.producer_id,
                                        producer_epoch=p.producer_epoch, verify_only=True, topics=[
                                            R.AddPartitionsToTxnTopic(name=topic, partitions=[0, 1])]),
        R.AddPartitionsToTxnTransaction(transactional_id=other, producer_id=q.producer_id,
                                        producer_epoch=q.producer_epoch, verify_only=False, topics=[
                                            R.AddPartitionsToTxnTopic(name=topic, partitions=[1])])])
    with KafkaConnection(kray, client_id="txn-test") as conn:  # one broker: it coordinates both ids
        r = conn.send(request, 5)
        assert r.error_code == 0
        results = {t.transactional_id: {(tr.name, pr.partition_index): pr.partition_error_code
                                        for tr in t.topic_results for pr in tr.results_by_partition}
                   for t in r.results_by_transaction}
        assert results == {ongoing: {(topic, 0): 0, (topic, 1): E.TRANSACTION_ABORTABLE}, other: {(topic, 1): 0}}
        assert [(t.topic, t.partitions) for t in _describe(conn, ongoing).topics] == [(topic, [0])]  # nothing added
        assert [(t.topic, t.partitions) for t in _describe(conn, other).topics] == [(topic, [1])]


def test_add_offsets_to_txn_adds_the_groups_offsets_partition(kray):
    txn, group = f"offsets-{uuid.uuid4().hex[:6]}", "txn-readers"
    with _coordinator(kray, txn) as conn:
        p = _init(conn, txn)
        r = conn.send(AddOffsetsToTxnRequest(transactional_id=txn, producer_id=p.producer_id,
                                             producer_epoch=p.producer_epoch, group_id=group), 3)
        assert r.error_code == 0
        state = _describe(conn, txn)
        assert state.transaction_state == "Ongoing"
        assert [(t.topic, t.partitions) for t in state.topics] == [
            (internal_topics.CONSUMER_OFFSETS, [internal_topics.group_partition(group, 50)])]
        fenced = conn.send(AddOffsetsToTxnRequest(transactional_id=txn, producer_id=p.producer_id,
                                                  producer_epoch=p.producer_epoch + 7, group_id=group), 3)
        assert fenced.error_code == E.PRODUCER_FENCED


def test_kray_transactions_lists_and_describes(kray, topic):
    txn = f"cli-{uuid.uuid4().hex[:6]}"
    with _coordinator(kray, txn) as conn:
        p = _init(conn, txn)
        assert _add(conn, txn, p.producer_id, p.producer_epoch, [(topic, 0)]) == {(topic, 0): 0}
    kray_bin = str(Path(sys.executable).parent / "kray")
    listed = subprocess.run([kray_bin, "transactions", "--bootstrap-server", kray, "--list"], capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:1] == [txn] and "Ongoing" in line.split() for line in listed.stdout.splitlines())
    described = subprocess.run([kray_bin, "transactions", "--bootstrap-server", kray, "--describe",
                                "--transactional-id", txn], capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    header, row = described.stdout.splitlines()[:2]
    fields = dict(zip(header.split("\t"), row.split("\t")))
    assert (fields["TransactionalId"], fields["ProducerId"], fields["TransactionState"]) == (
        txn, str(p.producer_id), "Ongoing")
    assert f"{topic}-0" in fields["TopicPartitions"]
    missing = subprocess.run([kray_bin, "transactions", "--bootstrap-server", kray, "--describe",
                              "--transactional-id", f"never-{uuid.uuid4().hex[:6]}"], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
