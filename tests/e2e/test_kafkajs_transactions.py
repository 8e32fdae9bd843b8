"""kafkajs transactions against a real `kray start` (issue 19): a client with protocol code of its own
(InitProducerId v1, AddPartitionsToTxn v1, AddOffsetsToTxn v1, EndTxn v1, TxnOffsetCommit v1, transactional
Produce v7, Fetch v11 read_committed with the aborted transactions), run by tests/clients/node/transactions.js.
Its transactional producer (`transactionalId`, `idempotent: true`, `maxInFlightRequests: 1`) commits and aborts
over two partitions; read_committed readers (kafkajs and confluent-kafka) see exactly the committed records,
read_uncommitted ones the aborted too. In a consume-transform-produce loop kafkajs's `sendOffsets` moves the
group's committed offsets (read with confluent-kafka's admin) only when its transaction commits, never with an
abort. Skipped without Node.js or kafkajs, as test_other_clients.py."""
from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
import uuid

import pytest

from tests.e2e.test_other_clients import NODE_CLIENTS
from tests.e2e.test_transactions import new_topic, read_values
from tests.e2e.test_transactions_offsets import await_group_offsets, group_offsets, new_topics, produce_input

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_CLIENTS / "node_modules" / "kafkajs").is_dir(),
    reason="Node.js or kafkajs missing: install Node.js and run ./dev test (it runs npm ci in tests/clients/node)")
SCRIPT = NODE_CLIENTS / "transactions.js"
NO_OFFSET = -1001


def test_kafkajs_commits_and_aborts_and_read_committed_readers_see_only_the_commit(kray):
    topic = new_topic(kray)  # 2 partitions
    run = subprocess.run(["node", str(SCRIPT), "commit-abort", kray, topic], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr[-2000:]
    read = json.loads(run.stdout.strip().splitlines()[-1])
    committed = [f"committed-{i}" for i in range(6)]
    aborted = [f"aborted-{i}" for i in range(4)]
    # kafkajs's own readers (sorted by partition and offset): read_committed drops the aborted transaction
    assert sorted(read["committed"]) == committed, read
    assert sorted(read["uncommitted"]) == sorted(committed + aborted), read
    # and confluent-kafka's (librdkafka's own aborted-transaction filtering) on the same log
    assert sorted(read_values(kray, topic, "read_committed", expect=6)) == [v.encode() for v in committed]
    assert sorted(read_values(kray, topic, "read_uncommitted", expect=10)) == sorted(
        v.encode() for v in committed + aborted)


class Pipeline:
    """The node script's pipeline mode, one JSON step at a time over its stdout, commands over its stdin."""

    def __init__(self, kray, source, sink, group, stderr_path):
        self.stderr = open(stderr_path, "w+")
        self.proc = subprocess.Popen(["node", str(SCRIPT), "pipeline", kray, source, sink, group],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.steps: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.steps.put(line)
        self.steps.put(None)

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def expect(self, step: str, timeout_s: float = 45) -> dict:
        try:
            line = self.steps.get(timeout=timeout_s)
        except queue.Empty:
            line = None
        if line is None:
            self.stderr.seek(0)
            raise AssertionError(f"no step {step!r} from kafkajs: {self.stderr.read()[-2000:]}")
        got = json.loads(line)
        assert got["step"] == step, got
        return got

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.stderr.close()


def test_kafkajs_send_offsets_commits_the_groups_offsets_only_with_its_transaction(kray, tmp_path):
    source, sink = new_topics(kray, "kjs-in", "kjs-out")  # 2 partitions each
    group = f"kjs-{uuid.uuid4().hex[:8]}"
    produce_input(kray, source, [b"in-%d" % i for i in range(10)])  # 5 per partition
    pipeline = Pipeline(kray, source, sink, group, tmp_path / "kafkajs.stderr")
    try:
        # a transaction with the consumer's positions sent: nothing committed for the group until it commits
        pipeline.send("10")
        sent = pipeline.expect("offsets-sent")
        assert sent["offsets"] == {"0": 5, "1": 5}, sent
        assert group_offsets(kray, group, source) == {0: NO_OFFSET, 1: NO_OFFSET}
        pipeline.send("commit")
        pipeline.expect("committed")
        await_group_offsets(kray, group, source, {0: 5, 1: 5})

        # an aborted transaction over 4 more records: the offsets stay at the first commit
        produce_input(kray, source, [b"more-%d" % i for i in range(4)])
        pipeline.send("14")
        sent = pipeline.expect("offsets-sent")
        assert sent["offsets"] == {"0": 7, "1": 7}, sent
        assert group_offsets(kray, group, source) == {0: 5, 1: 5}
        pipeline.send("abort")
        pipeline.expect("aborted")
        pipeline.send("exit")
        pipeline.expect("done")
        assert pipeline.proc.wait(15) == 0
    finally:
        pipeline.close()
    time.sleep(1)  # (the abort marker reaches the group's __consumer_offsets partition meanwhile)
    assert group_offsets(kray, group, source) == {0: 5, 1: 5}
    out = [f"out-in-{i}".encode() for i in range(10)]
    assert sorted(read_values(kray, sink, "read_committed", expect=10)) == sorted(out)
    assert sorted(read_values(kray, sink, "read_uncommitted", expect=14)) == sorted(
        out + [f"out-more-{i}".encode() for i in range(4)])
