"""`kray consumer-groups` (like kafka-consumer-groups.sh) against a real `kray start`, with confluent-kafka
consumers in classic and KIP-848 groups."""
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

KRAY = str(Path(sys.executable).parent / "kray")
PARTITIONS, PER_PARTITION = 3, 10


def kray_tool(bootstrap, *args, timeout_s=90):
    return subprocess.run([KRAY, *args, "--bootstrap-server", bootstrap], capture_output=True, text=True,
                          timeout=timeout_s)


def groups_tool(bootstrap, *args):
    return kray_tool(bootstrap, "consumer-groups", *args)


def topic_with_records(bootstrap):
    topic = f"cg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(PARTITIONS * PER_PARTITION):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    return topic


def live_consumer(bootstrap, group, topic, **extra):
    """A subscribed consumer that has its assignment and has received at least one record."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "cg-e2e",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **extra})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            return c
    c.close()
    raise AssertionError(f"the consumer of group {group} got no record in 60 s")


def rows(stdout, group):
    """The tab-separated data rows of one group, header left out."""
    return [line.split("\t") for line in stdout.splitlines() if line.startswith(group + "\t")]


def offsets(bootstrap, group):
    """partition -> (current, log end, lag, consumer id) from --describe --offsets."""
    r = groups_tool(bootstrap, "--describe", "--group", group, "--offsets")
    assert r.returncode == 0, r.stdout + r.stderr
    return {int(row[2]): (row[3], row[4], row[5], row[6]) for row in rows(r.stdout, group) if row[2] != "-"}


def wait_for_state(bootstrap, group, state, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while True:
        r = groups_tool(bootstrap, "--describe", "--group", group, "--state")
        got = [row[3] for row in rows(r.stdout, group)]
        if got == [state] or time.monotonic() > deadline:
            assert got == [state], r.stdout + r.stderr
            return r.stdout
        time.sleep(0.5)


def test_classic_group_list_describe_reset_delete(kray):
    topic, group = topic_with_records(kray), f"app-{uuid.uuid4().hex[:8]}"
    c = live_consumer(kray, group, topic)
    try:
        c.commit(offsets=[TopicPartition(topic, p, 4 + p) for p in range(PARTITIONS)], asynchronous=False)

        r = groups_tool(kray, "--list")
        assert r.returncode == 0 and group in r.stdout.split(), r.stdout + r.stderr
        assert [group, "Stable"] in rows(groups_tool(kray, "--list", "--state", "Stable").stdout, group)

        described = offsets(kray, group)
        assert {p: v[:3] for p, v in described.items()} == {p: (str(4 + p), "10", str(6 - p)) for p in range(3)}
        member_ids = {v[3] for v in described.values()}
        assert len(member_ids) == 1 and "-" not in member_ids, described

        members = groups_tool(kray, "--describe", "--group", group, "--members", "--verbose")
        assert members.returncode == 0, members.stderr
        (row,) = rows(members.stdout, group)
        assert row[1] in member_ids and row[3] == "cg-e2e" and row[4] == "3", row
        assert row[5] == f"{topic}(0,1,2)", row
        state = rows(wait_for_state(kray, group, "Stable"), group)[0]
        assert state[2] == "range" and state[4] == "1", state

        refused = groups_tool(kray, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert refused.returncode == 1
        assert f"Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable." \
            in refused.stderr
        cannot = groups_tool(kray, "--delete", "--group", group)
        assert cannot.returncode == 1 and "not empty" in cannot.stderr, cannot.stdout + cannot.stderr
    finally:
        c.close()

    wait_for_state(kray, group, "Empty")
    dry = groups_tool(kray, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert dry.returncode == 0 and rows(dry.stdout, group) == [[group, topic, str(p), "0"] for p in range(3)]
    assert {p: v[0] for p, v in offsets(kray, group).items()} == {0: "4", 1: "5", 2: "6"}, "a dry run changes nothing"

    r = groups_tool(kray, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert r.returncode == 0, r.stdout + r.stderr
    assert offsets(kray, group) == {p: ("0", "10", "10", "-") for p in range(3)}

    r = groups_tool(kray, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", "99",
                    "--execute")
    assert r.returncode == 0 and "Value will be set to 10" in r.stderr, r.stdout + r.stderr
    r = groups_tool(kray, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "3", "--execute")
    assert r.returncode == 0, r.stdout + r.stderr
    r = groups_tool(kray, "--reset-offsets", "--group", group, "--topic", f"{topic}:2", "--to-datetime",
                    "2000-01-01T00:00:00.000", "--execute")
    assert r.returncode == 0, r.stdout + r.stderr
    assert {p: v[0] for p, v in offsets(kray, group).items()} == {0: "3", 1: "10", 2: "0"}

    r = groups_tool(kray, "--delete-offsets", "--group", group, "--topic", f"{topic}:2")
    assert r.returncode == 0 and f"{topic}\t2\tSuccessful" in r.stdout, r.stdout + r.stderr
    assert sorted(offsets(kray, group)) == [0, 1]

    r = groups_tool(kray, "--delete", "--group", group)
    assert r.returncode == 0 and f"('{group}') was successful" in r.stdout, r.stdout + r.stderr
    assert group not in groups_tool(kray, "--list").stdout.split()
    gone = groups_tool(kray, "--describe", "--group", group)
    assert gone.returncode == 1 and f"Consumer group '{group}' does not exist." in gone.stderr


def test_kip848_group_is_described_with_consumer_group_describe(kray):
    topic, group = topic_with_records(kray), f"next-{uuid.uuid4().hex[:8]}"
    c = live_consumer(kray, group, topic, **{"group.protocol": "consumer"})
    try:
        c.commit(offsets=[TopicPartition(topic, p, 2) for p in range(PARTITIONS)], asynchronous=False)
        assert group in groups_tool(kray, "--list").stdout.split()
        deadline = time.monotonic() + 30
        while True:  # the member owns all three partitions once it has reconciled
            members = groups_tool(kray, "--describe", "--group", group, "--members", "--verbose")
            got = rows(members.stdout, group)
            if (got and got[0][4] == "3") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert members.returncode == 0, members.stderr
        assert len(got) == 1 and got[0][3] == "cg-e2e" and got[0][4] == "3", members.stdout + members.stderr
        assert {p: v[:3] for p, v in offsets(kray, group).items()} == {p: ("2", "10", "8") for p in range(3)}
        refused = groups_tool(kray, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--execute")
        assert refused.returncode == 1 and "is inactive, but the current state is" in refused.stderr
    finally:
        c.close()
    wait_for_state(kray, group, "Empty")
    r = groups_tool(kray, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--execute")
    assert r.returncode == 0, r.stdout + r.stderr
    assert {p: v[2] for p, v in offsets(kray, group).items()} == {0: "0", 1: "0", 2: "0"}
    assert groups_tool(kray, "--delete", "--group", group).returncode == 0


@pytest.mark.parametrize("args, says", [
    (("--describe", "--group", "never-seen"), "Consumer group 'never-seen' does not exist."),
    (("--reset-offsets", "--group", "g", "--topic", "no-such-topic", "--to-earliest"), "does not exist"),
])
def test_errors_say_what_is_wrong(kray, args, says):
    r = groups_tool(kray, *args)
    assert r.returncode == 1 and says in r.stderr, r.stdout + r.stderr
