"""Apache Kafka 4.4's own command-line tools (their main classes, from tests/kafka/lib) pointed at Kafka 4.4
and at Kray: the same commands, their output compared line by line once what legitimately differs is
masked (topic ids, group names, ports). What Kray prints otherwise is listed below with why."""
import re
import subprocess
import uuid

import pytest

from tests.kafka.broker import java
from tests.kafka.test_clients import share_round

TOOLS = "org.apache.kafka.tools."

pytestmark = pytest.mark.reference_full  # pytest -m reference_full tests/kafka


def tool(cls: str, *args: str) -> tuple[int, str]:
    run = subprocess.run(java(TOOLS + cls, *args), capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout.strip()


def masked(text: str, names: dict[str, str]) -> str:
    for real, alias in names.items():
        text = text.replace(real, alias)
    text = re.sub(r"TopicId: \S+", "TopicId: <id>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    # Kafka 4.4 describes partitions with DescribeTopicPartitions (KIP-966), Kray's answer comes from Metadata:
    # the tool prints N/A for the eligible leader replicas then (Kray has no ELR, DIFFERENCES.md)
    text = re.sub(r"\tElr:.*$", "\tElr: <elr>", text, flags=re.M)
    # Kafka 4.4 formats with ELR on, which sets a cluster-wide min.insync.replicas that topics then list
    text = text.replace("Configs: min.insync.replicas=1,", "Configs: ")
    return re.sub(r"[ \t]+", " ", text)


@pytest.fixture(scope="module")
def outputs(both):
    out = {}
    for side, bootstrap in both.items():
        topic = f"tools-{uuid.uuid4().hex[:6]}"
        server = ("--bootstrap-server", bootstrap)
        runs = {
            "create": tool("TopicCommand", *server, "--create", "--topic", topic, "--partitions", "3",
                           "--config", "retention.ms=3600000"),
            "describe": tool("TopicCommand", *server, "--describe", "--topic", topic),
            "create-again": tool("TopicCommand", *server, "--create", "--topic", topic, "--partitions", "3"),
            "describe-missing": tool("TopicCommand", *server, "--describe", "--topic", f"{topic}-missing"),
            "alter-partitions": tool("TopicCommand", *server, "--alter", "--topic", topic, "--partitions", "4"),
        }
        shared = share_round(bootstrap)
        group = shared["group"]
        runs["share-describe-state"] = tool("consumer.group.ShareGroupCommand", *server, "--describe", "--group",
                                            group, "--state")
        runs["share-describe-offsets"] = tool("consumer.group.ShareGroupCommand", *server, "--describe", "--group",
                                              group)
        runs["share-describe-missing"] = tool("consumer.group.ShareGroupCommand", *server, "--describe", "--group",
                                              f"{group}-missing")
        names = {topic: "<topic>", group: "<group>", shared["topic"]: "<share-topic>"}
        out[side] = {k: (code, masked(text, names)) for k, (code, text) in runs.items()}
    return out


COMMANDS = ["create", "describe", "create-again", "describe-missing", "alter-partitions", "share-describe-state",
            "share-describe-missing"]


@pytest.mark.parametrize("command", COMMANDS)
def test_kafkas_tools_print_the_same_for_kray(outputs, command):
    assert outputs["kray"][command] == outputs["kafka"][command]


def test_kafka_share_groups_describe_shows_the_same_lag(outputs):
    """kafka-share-groups --describe: the same group, topic, partition and lag (0: all delivered); the start
    offset differs as DescribeShareGroupOffsets' does (test_clients: Kafka's persisted start offset lags)."""
    code = {side: out["share-describe-offsets"][0] for side, out in outputs.items()}
    rows = {side: out["share-describe-offsets"][1].splitlines() for side, out in outputs.items()}
    assert code == {"kafka": 0, "kray": 0}
    header = {side: r[0] for side, r in rows.items()}
    assert header["kray"] == header["kafka"] == "GROUP TOPIC PARTITION START-OFFSET LAG"
    fields = {side: r[1].split(" ") for side, r in rows.items()}
    assert [fields["kray"][i] for i in (0, 1, 2, 4)] == [fields["kafka"][i] for i in (0, 1, 2, 4)] == \
        ["<group>", "<share-topic>", "0", "0"]
