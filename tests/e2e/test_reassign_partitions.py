"""Partition reassignment and leader election on a real `kray start --nodes 3`, driven by Kray's tools and by
Apache Kafka 4.4's own kafka-reassign-partitions / kafka-leader-election (their main classes, from
tests/kafka/lib): replicas move between brokers, a throttled move stays in progress and can be cancelled, the
throttles are removed by --verify, every record produced before is read back after, and the replicas moved away
are deleted from their brokers' disks."""
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.kafka.broker import java, missing
from tests.kray_process import NodesProcess, wait_for

KRAY = str(Path(sys.executable).parent / "kray")
RECORDS = 3000
VALUE = b"r" * 1000  # 3 MB a partition: more than one follower fetch (replica.fetch.max.bytes 1 MiB)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("reassign") / "data"
    server = NodesProcess(data)
    try:
        yield {"bootstrap": server.start(), "data": data}
    finally:
        server.stop()


def kray(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([KRAY, *args], capture_output=True, text=True, timeout=timeout_s)


def topic_with_records(bootstrap: str, replicas: dict[int, list[int]]) -> str:
    name = f"mv-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka.admin import NewTopic
    admin.create_topics([NewTopic(name, num_partitions=len(replicas), replica_assignment=[replicas[p] for p in sorted(replicas)])])[name].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(name, key=str(i).encode(), value=VALUE, partition=i % len(replicas))
    assert producer.flush(120) == 0
    return name


def assignment(bootstrap: str, topic: str) -> dict[int, tuple[list[int], list[int], int]]:
    """partition -> (replicas, isr, leader) as Metadata says."""
    t = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return {p: (list(m.replicas), sorted(m.isrs), m.leader) for p, m in t.partitions.items()}


def read_all(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen, deadline = set(), time.monotonic() + 90
    while len(seen) < RECORDS and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and not m.error():
            seen.add(m.key())
    consumer.close()
    return len(seen)


def replica_dirs(data: Path, topic: str) -> set[tuple[int, int]]:
    """(broker, partition) of the replica directories of `topic` on disk."""
    return {(int(d.parent.name.split("-")[1]), int(d.name.rsplit("-", 1)[1]))
            for d in data.glob(f"broker-*/{topic}-*") if not d.name.endswith("-delete")}


def broker_throttles(bootstrap: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for broker in (1, 2, 3):
        resource = ConfigResource("BROKER", str(broker))
        entries = admin.describe_configs([resource])[resource].result(30)
        for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
            if getattr(entries[key].source, "value", entries[key].source) == 2:  # DYNAMIC_BROKER_CONFIG
                out[f"{broker}:{key}"] = entries[key].value
    return out


def test_kray_tool_moves_throttles_cancels_and_verifies(cluster, tmp_path):
    bootstrap = cluster["bootstrap"]
    topic = topic_with_records(bootstrap, {0: [1, 2], 1: [2, 3]})
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = kray("reassign-partitions", "--bootstrap-server", bootstrap, "--generate",
                     "--topics-to-move-json-file", str(tmp_path / "topics.json"), "--broker-list", "1,3")
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[3] == "Proposed partition reassignment " \
                                                                              "configuration"
    proposed = json.loads(lines[4])
    assert [p["replicas"] for p in proposed["partitions"]] == [[1, 3], [3, 1]]

    # a throttled move of partition 0 from {1,2} to {1,3}: broker 3 fetches at most 50 kB/s, so 1.5 MB take long
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 3]}]}))
    started = kray("reassign-partitions", "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file",
                   str(plan), "--throttle", "50000")
    assert started.returncode == 0, started.stderr
    assert "The inter-broker throttle limit was set to 50000 B/s" in started.stdout
    assert started.stdout.strip().endswith(f"Successfully started partition reassignment for {topic}-0")
    listed = kray("reassign-partitions", "--bootstrap-server", bootstrap, "--list")
    assert f"{topic}-0: replicas: 1,3,2. adding: 3. removing: 2." in listed.stdout, listed.stdout
    assert assignment(bootstrap, topic)[0][0] == [1, 3, 2], "Metadata shows the full replica set during the move"
    assert broker_throttles(bootstrap) == {f"{b}:{k}.replication.throttled.rate": "50000"
                                           for b in (1, 2, 3) for k in ("leader", "follower")}
    time.sleep(3)
    verify = kray("reassign-partitions", "--bootstrap-server", bootstrap, "--verify", "--reassignment-json-file",
                  str(plan))
    assert f"Reassignment of partition {topic}-0 is still in progress." in verify.stdout, verify.stdout
    assert "Clearing" not in verify.stdout, "throttles stay while a move runs"

    cancelled = kray("reassign-partitions", "--bootstrap-server", bootstrap, "--cancel", "--reassignment-json-file",
                     str(plan))
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"Successfully cancelled partition reassignment for: {topic}-0" in cancelled.stdout
    assert "Clearing broker-level throttles on brokers 1,2,3" in cancelled.stdout
    assert assignment(bootstrap, topic)[0][0] == [1, 2]
    assert broker_throttles(bootstrap) == {}
    assert wait_for(lambda: (3, 0) not in replica_dirs(cluster["data"], topic), 30), "the cancelled replica is deleted"

    # the whole proposal, unthrottled: both partitions move, leadership leaves broker 2
    plan.write_text(json.dumps(proposed))
    assert kray("reassign-partitions", "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file",
                str(plan)).returncode == 0

    def done():
        out = kray("reassign-partitions", "--bootstrap-server", bootstrap, "--verify", "--reassignment-json-file",
                   str(plan)).stdout
        return f"Reassignment of partition {topic}-0 is completed." in out and \
            f"Reassignment of partition {topic}-1 is completed." in out
    assert wait_for(done, 120, 2)
    now = assignment(bootstrap, topic)
    assert {p: (r, isr) for p, (r, isr, _) in now.items()} == {0: ([1, 3], [1, 3]), 1: ([3, 1], [1, 3])}
    assert now[1][2] == 3, "the leader moved off broker 2, to the target's first replica"
    assert read_all(bootstrap, topic) == RECORDS
    assert wait_for(lambda: replica_dirs(cluster["data"], topic) == {(1, 0), (3, 0), (1, 1), (3, 1)}, 30)


def test_leader_election_tool(cluster, tmp_path):
    bootstrap = cluster["bootstrap"]
    topic = topic_with_records(bootstrap, {0: [1, 2]})
    # a reordering completes at once; the leader stays until a preferred election moves it to the new first
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 1]}]}))
    assert kray("reassign-partitions", "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file",
                str(plan)).returncode == 0
    assert wait_for(lambda: assignment(bootstrap, topic)[0][0] == [2, 1], 30)
    assert assignment(bootstrap, topic)[0][2] == 1
    elected = kray("leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred", "--topic",
                   topic, "--partition", "0")
    assert (elected.returncode, elected.stdout.strip()) == (
        0, f"Successfully completed leader election (PREFERRED) for partitions {topic}-0"), elected.stderr
    assert wait_for(lambda: assignment(bootstrap, topic)[0][2] == 2, 30)
    again = kray("leader-election", "--bootstrap-server", bootstrap, "--election-type", "PREFERRED", "--topic", topic,
                 "--partition", "0")
    assert (again.returncode, again.stdout.strip()) == (0, f"Valid replica already elected for partitions {topic}-0")
    unclean = kray("leader-election", "--bootstrap-server", bootstrap, "--election-type", "UNCLEAN", "--topic", topic,
                   "--partition", "0")
    assert unclean.stdout.strip() == f"Valid replica already elected for partitions {topic}-0"
    unknown = kray("leader-election", "--bootstrap-server", bootstrap, "--election-type", "PREFERRED", "--topic",
                   "nope", "--partition", "0")
    assert unknown.returncode == 1 and "Error completing leader election (PREFERRED) for partition: nope-0: " \
                                       "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stdout
    assert read_all(bootstrap, topic) == RECORDS


@pytest.mark.skipif(missing() is not None, reason=str(missing()))
def test_kafkas_own_tools_move_a_partition_on_kray(cluster, tmp_path):
    """kafka-reassign-partitions.sh and kafka-leader-election.sh of Kafka 4.4, unchanged, against Kray."""
    bootstrap = cluster["bootstrap"]
    topic = topic_with_records(bootstrap, {0: [2, 3]})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}))

    def tool(cls, *args):
        run = subprocess.run(java(cls, "--bootstrap-server", bootstrap, *args), capture_output=True, text=True,
                             timeout=180)
        return run.returncode, run.stdout.strip(), run.stderr
    reassign = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    code, out, err = tool(reassign, "--execute", "--reassignment-json-file", str(plan), "--throttle", "50000000")
    assert code == 0, out + err
    assert out.endswith(f"Successfully started partition reassignment for {topic}-0"), out
    # (the current replicas with their log directories, from Kray's DescribeLogDirs)
    assert f'{{"topic":"{topic}","partition":0,"replicas":[2,3],"log_dirs":["' in out and "/broker-2" in out
    assert "The inter-broker throttle limit was set to 50000000 B/s" in out

    def verified():
        code, out, err = tool(reassign, "--verify", "--reassignment-json-file", str(plan))
        assert code == 0, out + err
        return f"Reassignment of partition {topic}-0 is completed." in out and \
            "Clearing broker-level throttles on brokers 1,2,3" in out and \
            f"Clearing topic-level throttles on topic {topic}" in out
    assert wait_for(verified, 120, 2)
    assert assignment(bootstrap, topic)[0][:2] == ([1, 2], [1, 2])
    assert broker_throttles(bootstrap) == {}
    code, out, err = tool("org.apache.kafka.tools.LeaderElectionCommand", "--election-type", "preferred", "--topic",
                          topic, "--partition", "0")
    assert code == 0, out + err
    assert out == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0", out
    assert wait_for(lambda: assignment(bootstrap, topic)[0][2] == 1, 30)
    assert read_all(bootstrap, topic) == RECORDS
