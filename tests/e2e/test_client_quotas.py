"""Client quotas with `kray configs`, shaped like kafka-configs.sh, against a real `kray start`: set for a user and
client id, a client id, the default client id; described; removed. And confluent-kafka (librdkafka) told to wait
by a producer_byte_rate it exceeds: its statistics report the broker's throttle time."""
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

KRAY = str(Path(sys.executable).parent / "kray")


def kray_configs(bootstrap, *args):
    return subprocess.run([KRAY, "configs", "--bootstrap-server", bootstrap, *args], capture_output=True, text=True,
                          timeout=60)


def test_kray_configs_sets_describes_and_removes_quotas_as_kafka_configs_does(kray):
    s = uuid.uuid4().hex[:6]
    user, client = f"alice-{s}", f"app-{s}"
    r = kray_configs(kray, "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                     "--entity-name", client, "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    assert r.returncode == 0 and f"Completed updating config for user {user} and client {client}." in r.stdout, r
    r = kray_configs(kray, "--entity-type", "clients", "--entity-default", "--alter",
                     "--add-config", "producer_byte_rate=1048576")
    assert r.returncode == 0, r.stderr
    r = kray_configs(kray, "--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--describe")
    assert f"Quota configs for client-id '{client}', user-principal '{user}' are consumer_byte_rate=2048.0, " \
           f"producer_byte_rate=1024.0" in r.stdout, r
    r = kray_configs(kray, "--entity-type", "clients", "--describe")
    assert "Quota configs for client-id <default> are producer_byte_rate=1048576.0" in r.stdout, r
    bad = kray_configs(kray, "--entity-type", "clients", "--entity-name", client, "--alter",
                       "--add-config", "producer_byte_rate=fast")
    assert bad.returncode == 1 and "a quota is a number" in bad.stderr, bad
    bad = kray_configs(kray, "--entity-type", "clients", "--entity-name", client, "--alter",
                       "--add-config", "no_such_quota=1")
    assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr and "no_such_quota" in bad.stderr, bad
    for args in (("--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", client,
                  "--alter", "--delete-config", "producer_byte_rate,consumer_byte_rate"),
                 ("--entity-type", "clients", "--entity-default", "--alter", "--delete-config", "producer_byte_rate")):
        assert kray_configs(kray, *args).returncode == 0
    r = kray_configs(kray, "--entity-type", "clients", "--describe")
    assert "<default>" not in r.stdout and client not in r.stdout, r.stdout


def test_a_librdkafka_producer_over_its_quota_is_throttled(kray):
    client = f"quota-{uuid.uuid4().hex[:6]}"
    assert kray_configs(kray, "--entity-type", "clients", "--entity-name", client, "--alter",
                        "--add-config", "producer_byte_rate=20480").returncode == 0
    throttles = []
    p = Producer({"bootstrap.servers": kray, "client.id": client, "statistics.interval.ms": 500, "linger.ms": 5,
                  "stats_cb": lambda stats: throttles.extend(
                      b["throttle"]["max"] for b in json.loads(stats)["brokers"].values() if b.get("throttle"))})
    for i in range(40):  # 400 KB at 20 KB/s: well above the quota within its 10 s window
        p.produce(f"quotas-{client}", value=b"x" * 10_000)
        p.poll(0)
    assert p.flush(60) == 0   # answered at once, with the time to wait (KIP-219)
    started = time.monotonic()
    p.produce(f"quotas-{client}", value=b"after")
    assert p.flush(60) == 0
    waited_s = time.monotonic() - started
    p.poll(1.0)
    assert max(throttles, default=0) > 1000, throttles   # librdkafka's statistics: the broker's throttle time
    assert waited_s > 2, waited_s                         # the next produce waited (and the connection was muted)
