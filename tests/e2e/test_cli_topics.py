"""`kray topics` (like kafka-topics.sh) against a real broker, and acks=0 produce."""
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

KRAY = str(Path(sys.executable).parent / "kray")


def kray_topics(bootstrap, *args):
    return subprocess.run([KRAY, "topics", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_topics_tool_create_describe_alter_delete(kray):
    r = kray_topics(kray, "--create", "--topic", "cli-t", "--partitions", "2", "--config", "retention.ms=60000")
    assert r.returncode == 0, r.stderr
    assert "cli-t" in kray_topics(kray, "--list").stdout.split()
    again = kray_topics(kray, "create", "--topic", "cli-t")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert kray_topics(kray, "--create", "--topic", "cli-t", "--if-not-exists").returncode == 0

    assert kray_topics(kray, "--alter", "--topic", "cli-t", "--partitions", "3",
                       "--config", "retention.ms=120000").returncode == 0
    described = kray_topics(kray, "--describe", "--topic", "cli-t").stdout
    assert "PartitionCount: 3" in described and "retention.ms=120000" in described
    assert described.count("Partition: ") == 3

    bad = kray_topics(kray, "--create", "--topic", "cli-bad", "--config", "retention.ms=soon")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr

    assert kray_topics(kray, "--delete", "--topic", "cli-t").returncode == 0
    assert "cli-t" not in kray_topics(kray, "--list").stdout.split()
    assert kray_topics(kray, "--delete", "--topic", "cli-t", "--if-exists").returncode == 0


def test_topics_list_shows_internal_topics_unless_excluded_as_kafka_topics_does(kray):
    assert kray_topics(kray, "--create", "--topic", "cli-internal-t", "--if-not-exists").returncode == 0
    consumer = Consumer({"bootstrap.servers": kray, "group.id": "cli-internal"})
    consumer.commit(offsets=[TopicPartition("cli-internal-t", 0, 0)], asynchronous=False)  # makes __consumer_offsets
    consumer.close()
    listed = kray_topics(kray, "--list").stdout.split()
    assert "__consumer_offsets" in listed and "cli-internal-t" in listed
    excluded = kray_topics(kray, "--list", "--exclude-internal").stdout.split()
    assert "__consumer_offsets" not in excluded and "cli-internal-t" in excluded


def test_topics_tool_says_what_to_do_when_no_broker_listens():
    r = kray_topics("127.0.0.1:1", "--list")
    assert r.returncode == 1 and "kray start" in r.stderr


def test_acks_zero_produce_is_stored_without_responses(kray):
    p = Producer({"bootstrap.servers": kray, "acks": 0, "linger.ms": 5})
    for i in range(1000):
        p.produce("acks-zero", value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kray, "group.id": "acks-zero"})
    deadline = time.monotonic() + 30
    high = 0
    while high < 1000 and time.monotonic() < deadline:
        try:
            high = c.get_watermark_offsets(TopicPartition("acks-zero", 0), timeout=10, cached=False)[1]
        except KafkaException as e:  # the auto-created partition's leader may still be starting
            if e.args[0].code() not in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE):
                raise
        time.sleep(0.2)
    c.close()
    assert high == 1000


def test_topics_tool_uses_the_next_bootstrap_address_when_the_first_has_no_broker(kray):
    r = kray_topics(f"127.0.0.1:1,{kray}", "--create", "--topic", "cli-second-address", "--if-not-exists")
    assert r.returncode == 0, r.stderr
    assert "cli-second-address" in kray_topics(f"127.0.0.1:1,{kray}", "--list").stdout.split()
