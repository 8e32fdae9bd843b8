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


GREEDY_QUOTA_BYTES_PER_S = 200_000
GREEDY_RECORD_BYTES = 20_000
SIDE_BY_SIDE_S = 12.0


def _polite_latencies(bootstrap: str, topic: str, client: str, duration_s: float) -> list[float]:
    """A polite producer (acks=all, one small record every 50 ms, each flushed): each record's round trip, s."""
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client, "acks": "all", "linger.ms": 0})
    out, end = [], time.monotonic() + duration_s
    while time.monotonic() < end:
        started = time.monotonic()
        p.produce(topic, value=b"polite")
        assert p.flush(30) == 0
        out.append(time.monotonic() - started)
        time.sleep(0.05)
    return out


def _p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def greedy_beside_polite(bootstrap: str, configure) -> dict:
    """A greedy producer (as fast as it can, producer_byte_rate GREEDY_QUOTA_BYTES_PER_S on its client id, set by
    `configure(client_id, quota)`) beside a polite one (no quota; one small record every 50 ms): the greedy one's
    acknowledged bytes per second, the throttle times it was told, and the polite one's round trips alone and
    beside it (s)."""
    import threading
    s = uuid.uuid4().hex[:6]
    greedy_client, topic = f"greedy-{s}", f"quotas-side-by-side-{s}"
    configure(greedy_client, GREEDY_QUOTA_BYTES_PER_S)
    alone = _polite_latencies(bootstrap, topic, f"polite-{s}", 4.0)   # (creates the topic, and warms up)
    throttles, acked = [], [0]

    def greedy(stop: threading.Event) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "client.id": greedy_client, "acks": "all", "linger.ms": 5,
                      "statistics.interval.ms": 500, "queue.buffering.max.kbytes": 4096,
                      "stats_cb": lambda stats: throttles.extend(
                          b["throttle"]["max"] for b in json.loads(stats)["brokers"].values() if b.get("throttle")),
                      "on_delivery": lambda err, msg: acked.__setitem__(0, acked[0] + (0 if err else len(msg)))})
        while not stop.is_set():
            try:
                p.produce(topic, value=b"g" * GREEDY_RECORD_BYTES)
            except BufferError:      # its queue is full: it waits on the broker, as a greedy client does
                p.poll(0.05)
            p.poll(0)
        p.flush(0)

    stop = threading.Event()
    runner = threading.Thread(target=greedy, args=(stop,), daemon=True)
    started = time.monotonic()
    runner.start()
    try:
        time.sleep(1.0)
        beside = _polite_latencies(bootstrap, topic, f"polite-{s}", SIDE_BY_SIDE_S)
    finally:
        stop.set()
        elapsed_s = time.monotonic() - started
        runner.join(60)
    return {"greedy_bytes_per_s": acked[0] / elapsed_s, "elapsed_s": elapsed_s, "throttles_ms": throttles,
            "alone_s": alone, "beside_s": beside}


def say(name: str, r: dict) -> str:
    a, b = r["alone_s"], r["beside_s"]
    return (f"{name}: greedy {r['greedy_bytes_per_s'] / 1000:.0f} KB/s acknowledged over {r['elapsed_s']:.1f} s "
            f"(quota {GREEDY_QUOTA_BYTES_PER_S / 1000:.0f} KB/s), throttle up to {max(r['throttles_ms'], default=0)} "
            f"ms; polite round trips alone p50 {_p(a, .5) * 1000:.1f} / p90 {_p(a, .9) * 1000:.1f} ms, beside it "
            f"p50 {_p(b, .5) * 1000:.1f} / p90 {_p(b, .9) * 1000:.1f} ms ({len(b)} records)")


def test_a_greedy_producer_is_held_to_its_quota_and_a_polite_one_keeps_its_latency(kray):
    """Issue 36 item 3: the greedy one's acknowledged bytes stay near its quota (Kafka's window lets it start a
    window's worth ahead), it is told to wait, and the polite one's round trips stay as they were without it."""
    def configure(client, quota):
        assert kray_configs(kray, "--entity-type", "clients", "--entity-name", client, "--alter", "--add-config",
                            f"producer_byte_rate={quota}").returncode == 0
    r = greedy_beside_polite(kray, configure)
    print(say("kray", r))
    window_bytes = GREEDY_QUOTA_BYTES_PER_S * 11    # quota.window.num (11) x 1 s: what it may be ahead at most
    assert r["greedy_bytes_per_s"] * r["elapsed_s"] <= GREEDY_QUOTA_BYTES_PER_S * r["elapsed_s"] + window_bytes, \
        "the greedy producer was not held to its quota"
    assert max(r["throttles_ms"], default=0) > 0, "the greedy producer was never told to wait"
    a, b = r["alone_s"], r["beside_s"]
    assert _p(b, .5) <= 2 * _p(a, .5) + 0.02, "the polite producer's round trips slowed beside the greedy one"
    assert _p(b, .9) <= 3 * _p(a, .9) + 0.05, "the polite producer's round trips slowed beside the greedy one"
