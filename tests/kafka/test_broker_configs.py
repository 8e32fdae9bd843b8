"""Broker configs as Apache Kafka 4.4 reads them: Kray's list of Kafka's broker config names and
types (cluster/kafka_broker_configs.py), its integer ranges (actors/config_schema.BROKER_INT_RANGES)
and its verdict on a server.properties file, each beside Kafka 4.4's own (KafkaConfig's ConfigDef and
KafkaConfig.fromProps, run from tests/kafka/lib by tests/kafka/java/BrokerConfigDef.java). No broker
needs to run. Deliberate differences: Kray refuses a key neither it nor Kafka knows (Kafka only logs
a warning), and the ranges listed in KRAY_OWN_RANGES."""
import re
import subprocess

import pytest

from actors.config_schema import BROKER_INT_RANGES, INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, SHORT_MAX, ConfigError, \
    with_listener
from cluster.config import load_broker_config
from cluster.kafka_broker_configs import KAFKA_BROKER_CONFIG_TYPES
from tests.kafka.broker import HERE, LIB, missing

WIDTHS = {"INT": (INT_MIN, INT_MAX), "LONG": (LONG_MIN, LONG_MAX), "SHORT": (-SHORT_MAX - 1, SHORT_MAX)}
KRAY_OWN_RANGES = {"log.segment.bytes": "the pre-4.0 floor of 14 bytes, as the topic config segment.bytes",
                   "broker.id": "Kray's broker.id is Kafka's node.id: at least 0"}
BASE = """process.roles=broker,controller
node.id=0
controller.quorum.voters=0@127.0.0.1:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
"""
CASES = ["num.partitions=three", "num.partitions=0", "num.partitions=2", "compression.gzip.level=10",
         "compression.gzip.level=-1", "log.retention.hours=abc", "log.retention.hours=1", "log.retention.minutes=x",
         "inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=PLAINTEXT",
         "inter.broker.listener.name=PLAINTEXT\nsecurity.inter.broker.protocol=PLAINTEXT", "broker.id=3",
         "broker.id=0", "group.share.max.size=1001", "log.cleaner.min.cleanable.ratio=1.5",
         "auto.create.topics.enable=yes", "auto.create.topics.enable=TRUE", "message.max.bytes=-1",
         "num.io.threads=eight", "num.io.threads=8", "offsets.topic.replication.factor=40000",
         "log.message.timestamp.type=Create", "log.dir=/tmp/somewhere"]


@pytest.fixture(scope="module")
def kafka_java():
    why = missing()
    if why:
        pytest.skip(why)

    def run(*args: str, stdin: str = "") -> list[str]:
        done = subprocess.run(["java", "-cp", f"{LIB}/*", str(HERE / "java" / "BrokerConfigDef.java"), *args],
                              input=stdin, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line.strip()]
    return run


def test_kray_lists_kafka_44s_broker_configs_with_their_types(kafka_java):
    kafka = {name: kind for name, kind, _default, _valid in (line.split("\t") for line in kafka_java())}
    assert KAFKA_BROKER_CONFIG_TYPES == kafka


def test_kray_checks_integer_broker_configs_with_kafka_44s_ranges(kafka_java):
    differ = {}
    for name, kind, _default, valid in (line.split("\t") for line in kafka_java()):
        if name not in BROKER_INT_RANGES or name in KRAY_OWN_RANGES:
            continue
        least, most = WIDTHS[kind]
        if m := re.match(r"\[(-?\d+),\.\.\.(?:,(-?\d+))?\]", valid):
            least, most = int(m.group(1)), int(m.group(2)) if m.group(2) else most
        if BROKER_INT_RANGES[name] != (least, most):
            differ[name] = (BROKER_INT_RANGES[name], (least, most))
    assert not differ, f"Kray's range, Kafka 4.4's: {differ}"


def test_kray_accepts_and_refuses_a_server_properties_file_as_kafka_44_does(kafka_java, tmp_path):
    kafka = kafka_java("check", stdin="\n---\n".join(BASE + case for case in CASES))
    assert len(kafka) == len(CASES)
    differ = []
    for case, verdict in zip(CASES, kafka):
        path = tmp_path / "server.properties"
        path.write_text(BASE + case + "\n")
        try:
            with_listener(load_broker_config(path), None, None)
            kray = "OK"
        except ConfigError as e:
            kray = f"REFUSED {e}"
        if kray.split()[0] != verdict.split()[0]:
            differ.append(f"{case!r}: Kafka 4.4 {verdict}; Kray {kray}")
    assert not differ, "\n".join(differ)
