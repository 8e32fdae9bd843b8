"""Transactions against Apache Kafka 4.4 and Kray, compared: transaction version 2 (KIP-890 part 2) step by step
over the wire (tests/kafka/txn_script.py), and Apache Kafka's own Java producer, which uses version 2 only where
the broker finalizes `transaction.version` 2."""
import json
import shutil
import subprocess

import pytest

from tests.kafka import txn_script
from tests.kafka.broker import HERE, LIB

JAVA_TRANSACTIONS = HERE.parent / "clients" / "java"
# step -> why Kray answers otherwise (the test fails on any other difference, and on one listed here that went away)
KNOWN_DIFFERENCES: dict[str, str] = {}


def test_transaction_version_2_answers_step_by_step_as_kafka_does(both):
    answers = {broker: txn_script.run(bootstrap) for broker, bootstrap in both.items()}
    assert [name for name, _ in answers["kafka"]] == [name for name, _ in answers["kray"]]
    differ = {name: (kafka, kray) for (name, kafka), (_, kray) in zip(answers["kafka"], answers["kray"])
              if kafka != kray}
    assert set(differ) == set(KNOWN_DIFFERENCES), json.dumps(
        {name: {"kafka": repr(k), "kray": repr(r)} for name, (k, r) in differ.items()}, indent=1)
    kray = dict(answers["kray"])
    # what the steps mean, said once more on Kray's answers: the epoch is bumped at every end, a zombie of the old
    # epoch is fenced at the partition, an abort with nothing open ends an empty transaction, offsets need no
    # AddOffsetsToTxn
    assert kray["v2 commit: EndTxn v5 answers the bumped epoch"] == (0, "p0", 1)
    assert kray["v2 old epoch produces after the bump"] == 47          # INVALID_PRODUCER_EPOCH
    assert kray["v2 abort with no transaction open"] == (0, "p0", 3)
    assert kray["v2 read_committed p0"][2] == [b"a"]
    assert kray["v2 offsets committed"] == (0, 7)


@pytest.fixture(scope="module")
def transactions_classes(tmp_path_factory):
    if shutil.which("javac") is None:
        pytest.skip("javac not found: the Java client scenarios need a JDK 17+")
    out = tmp_path_factory.mktemp("java-transactions")
    compiled = subprocess.run(["javac", "-cp", f"{LIB}/*", "-d", str(out),
                               str(JAVA_TRANSACTIONS / "KrayTransactions.java")],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    return out


SCENARIOS = ("commit-abort", "pipeline-consumer", "fence")
NAMED = {"topic", "source", "sink", "group", "seconds"}   # names unique to a run, and timings


def test_java_transactions_run_with_version_2_as_on_kafka(both, transactions_classes):
    seen = {}
    for broker, bootstrap in both.items():
        run = subprocess.run(["java", "-Xmx256m", f"-Dlog4j2.configurationFile={JAVA_TRANSACTIONS / 'log4j2.properties'}",
                              "-cp", f"{LIB}/*:{transactions_classes}", "KrayTransactions", bootstrap, *SCENARIOS],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
        results = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        seen[broker] = {r["scenario"]: {k: v for k, v in r.items() if k not in NAMED} for r in results}
        assert run.returncode == 0 and set(seen[broker]) == set(SCENARIOS), (broker, run.stdout[-3000:],
                                                                            run.stderr[-3000:])
    assert seen["kray"] == seen["kafka"]
    # three transactions (commit, abort, commit): version 2 bumped the epoch at each end (version 1 keeps 0)
    assert seen["kray"]["commit-abort"]["producer_epoch"] == 3
