"""Apache Kafka's Java client (kafka-clients 4.4.0) against a real `kray start` (issue 19), run by
tests/clients/java/KrayTransactions.java (compiled here with javac; one JVM runs every scenario, each printing a
JSON line; the scenarios run side by side). A transactional KafkaProducer commits and aborts over two partitions; read_committed and
read_uncommitted KafkaConsumers see exactly the committed records / all of them. A consume-transform-produce loop
(sendOffsetsToTransaction with consumer.groupMetadata(), group.protocol classic and consumer) moves the group's
committed offsets only when its transaction commits. A second producer with the same transactional.id fences
the first (KIP-98's zombie fencing). The Java Admin lists and describes an open and a committed transaction and
its producers, and fenceProducers ends an open one. A KafkaShareConsumer acknowledges explicitly (ACCEPT,
RELEASE, REJECT) and gets the RELEASEd record back with delivery count 2; one of a share group with
share.isolation.level=read_committed gets the committed transactional records and never the aborted ones. confluent-kafka reads the same topics
and offsets as a second witness.

The client negotiates from Kray's ApiVersions: Produce v13 (v11 for transactional batches: Kray does not
advertise the `transaction.version` feature, so the client uses transaction version 1: AddPartitionsToTxn v3,
EndTxn v4, TxnOffsetCommit v4), Fetch v18, FindCoordinator v6, InitProducerId v5, ShareFetch and
ShareAcknowledge v2. Its jars come from Maven Central (`./dev test` copies Apache Kafka 4.4.0's classpath into
tests/kafka/lib, see tests/kafka/pom.xml); without them or javac these tests are skipped, saying why."""
from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.test_transactions import read_values
from tests.e2e.test_transactions_offsets import group_offsets

JAVA_CLIENTS = Path(__file__).resolve().parent.parent / "clients" / "java"
LIB = JAVA_CLIENTS.parent.parent / "kafka" / "lib"
pytestmark = pytest.mark.skipif(
    shutil.which("javac") is None or shutil.which("java") is None or not (LIB / "kafka-clients-4.4.0.jar").is_file(),
    reason="javac or Apache Kafka's Java client missing: install a JDK (17+) and Maven and run ./dev test "
           "(with mvn it copies Apache Kafka 4.4.0 from Maven Central into tests/kafka/lib)")
SCENARIOS = ["commit-abort", "pipeline-classic", "pipeline-consumer", "fence", "admin", "share",
             "share-read-committed"]
RUN_TIMEOUT_S = 240  # each scenario bounds its own waits at 30 s


@pytest.fixture(scope="module")
def java_run(kray, tmp_path_factory) -> tuple[dict[str, dict], str]:
    """Compiles KrayTransactions.java and runs every scenario once: ({scenario: its JSON line}, stderr)."""
    classes = tmp_path_factory.mktemp("java-classes")
    classpath = f"{LIB}/*"
    compiled = subprocess.run(["javac", "-cp", classpath, "-d", str(classes), str(JAVA_CLIENTS / "KrayTransactions.java")],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    run = subprocess.run(["java", f"-Dlog4j2.configurationFile={JAVA_CLIENTS / 'log4j2.properties'}",
                          "-cp", f"{classpath}:{classes}", "KrayTransactions", kray, *SCENARIOS],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result["scenario"]] = result
    assert set(results) == set(SCENARIOS), (run.returncode, run.stdout[-2000:], run.stderr[-3000:])
    assert (run.returncode == 0) == all(r["ok"] for r in results.values()), (run.returncode, results)
    return results, run.stderr


def read_both(kray, topic, committed: int, everything: int) -> tuple[list[bytes], list[bytes]]:
    """confluent-kafka's read_committed and read_uncommitted values of `topic`, read side by side, sorted."""
    with ThreadPoolExecutor(2) as pool:
        rc = pool.submit(read_values, kray, topic, "read_committed", committed)
        ru = pool.submit(read_values, kray, topic, "read_uncommitted", everything)
        return sorted(rc.result()), sorted(ru.result())


def scenario(java_run, name) -> dict:
    results, stderr = java_run
    result = results[name]
    assert result["ok"], f"{result.get('error')}\n{json.dumps(result)}\n{stderr[-3000:]}"
    return result


def test_java_producer_commits_and_aborts_and_read_committed_readers_see_only_the_commits(java_run, kray):
    result = scenario(java_run, "commit-abort")
    # Kray finalizes transaction.version 2, so the Java producer bumps its epoch at each of the three ends
    assert (result["producer_epoch"], result["transaction_state"]) == (3, "CompleteCommit")
    # by partition and offset (the program checks the same): the aborted transaction sits between two committed ones
    assert result["read_committed"] == ["committed-0", "committed-2", "committed-4", "last-0",
                                        "committed-1", "committed-3", "committed-5", "last-1"]
    assert result["read_uncommitted"] == ["committed-0", "committed-2", "committed-4", "aborted-0", "aborted-2", "last-0",
                                          "committed-1", "committed-3", "committed-5", "aborted-1", "aborted-3", "last-1"]
    # confluent-kafka (librdkafka's own aborted-transaction filtering) on the log the Java producer wrote
    committed, everything = read_both(kray, result["topic"], 8, 12)
    assert committed == sorted(v.encode() for v in result["read_committed"])
    assert everything == sorted(v.encode() for v in result["read_uncommitted"])


@pytest.mark.parametrize("protocol", ["classic", "consumer"])  # the member's generation, or its KIP-848 epoch
def test_java_send_offsets_to_transaction_commits_the_groups_offsets_only_with_its_transaction(java_run, kray, protocol):
    result = scenario(java_run, f"pipeline-{protocol}")
    assert result["first_positions"] == {"0": 5, "1": 5}
    assert result["offsets_before_commit"] == {}  # sent with the transaction, not committed before it
    assert result["offsets_after_commit"] == {"0": 5, "1": 5}
    assert result["second_positions"] == {"0": 7, "1": 7}
    assert result["offsets_after_abort"] == {"0": 5, "1": 5}
    assert group_offsets(kray, result["group"], result["source"]) == {0: 5, 1: 5}
    out = [f"out-in-{i}".encode() for i in range(10)]
    committed, everything = read_both(kray, result["sink"], 10, 14)
    assert committed == sorted(out)
    assert everything == sorted(out + [f"out-more-{i}".encode() for i in range(4)])


def test_a_second_java_producer_with_the_same_transactional_id_fences_the_first(java_run, kray):
    result = scenario(java_run, "fence")
    # as Apache Kafka's TransactionsTest.testFencingOnSend accepts: the partition leader's INVALID_PRODUCER_EPOCH
    # for the zombie's next send, or the coordinator's PRODUCER_FENCED
    assert result["zombie_error"] in ("ProducerFencedException", "InvalidProducerEpochException"), result
    assert result["read_committed"] == ["successor"]
    assert read_values(kray, result["topic"], "read_committed", expect=1) == [b"successor"]


def test_java_share_consumer_acknowledges_and_gets_the_released_record_again(java_run):
    result = scenario(java_run, "share")
    assert result["first_delivery_counts"] == {"accept-me": 1, "reject-me": 1, "release-me": 1}
    assert result["redelivered"] == ["release-me#2"]  # the RELEASEd record, at its offset, delivery count 2
    assert result["deliveries"][-1] == "release-me@1#2"


def test_java_share_consumer_of_a_read_committed_share_group_never_gets_aborted_records(java_run):
    result = scenario(java_run, "share-read-committed")
    # offsets: a committed transaction 0-1 (its marker 2), an aborted one 3-4 (5), a committed one 6-7 (8)
    assert result["seen"] == ["committed-a-0@0", "committed-a-1@1", "committed-b-0@6", "committed-b-1@7"]


def test_java_admin_lists_describes_and_fences_transactions(java_run, kray):
    result = scenario(java_run, "admin")
    assert result["listed_open"] == ["Ongoing"]
    assert result["described_open"] == "Ongoing [0, 1]"
    assert result["described_committed"] == "CompleteCommit"
    assert result["commit_after_fence"] in ("ProducerFencedException", "InvalidProducerEpochException")
    assert sorted(read_values(kray, result["topic"], "read_committed", expect=2)) == [b"open-0", b"open-1"]
