"""Kafka clients in other languages, with protocol code of their own, against a real `kray start`:
kafkajs (JavaScript, Node.js) consumer groups. `./dev test` installs it with npm from
tests/clients/node/package-lock.json; without Node.js these tests are skipped, saying why."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.e2e.test_consumer_groups import PARTITIONS, PER_PARTITION, make_topic

NODE_CLIENTS = Path(__file__).resolve().parent.parent / "clients" / "node"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_CLIENTS / "node_modules" / "kafkajs").is_dir(),
    reason="Node.js or kafkajs missing: install Node.js and run ./dev test (it runs npm ci in tests/clients/node)")


def test_kafkajs_group_splits_a_topic_and_commits(kray):
    topic = make_topic(kray)
    group = f"g-{topic}"
    total = PARTITIONS * PER_PARTITION
    run = subprocess.run(["node", str(NODE_CLIENTS / "consumer_group.js"), kray, topic, group, str(total)],
                         capture_output=True, text=True, timeout=150)
    assert run.returncode == 0, run.stderr[-2000:]
    members = json.loads(run.stdout.strip().splitlines()[-1])
    assigned = [set(m["partitions"]) for m in members]
    assert all(assigned) and not assigned[0] & assigned[1] and assigned[0] | assigned[1] == set(range(PARTITIONS))
    seen = {tuple(map(int, r.split(":"))) for m in members for r in m["records"]}
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    c = Consumer({"bootstrap.servers": kray, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    c.close()
    assert {tp.partition: tp.offset for tp in committed} == {p: PER_PARTITION for p in range(PARTITIONS)}
