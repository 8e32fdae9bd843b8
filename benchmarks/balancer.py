#!/usr/bin/env python3
"""The balancer (issue 36, item 2): a 3-broker LocalCluster under a steady produce and share-consume load grows
to 4 brokers and shrinks back to 3.

LocalCluster(nodes=3) with kray.balancer.enable (check every 1 s, 8 moves in flight, unthrottled), small internal
topics (6, 6 and 3 partitions, as tests/cluster/test_balancer.py) and a 6-partition topic with 2 replicas filled
with --fill-mb MB beforehand. Load: an idempotent acks=all producer at --rate records/s of 1 KiB, and a share
consumer accepting every record. Then:

1. steady for --phase-s seconds (before);
2. a Ray node joins (broker 4): time until broker 4 serves, and until the placement is balanced (replica and
   leader counts at most 1 apart over 4 brokers, every ISR full, no move running); bytes moved = broker 4's data
   directory once balanced (what was copied onto it);
3. steady for --phase-s seconds (grown);
4. `kray remove-broker --broker 4 --wait`: time until it returns (every replica moved off, broker 4
   unregistered); bytes moved = broker 4's data directory when the removal starts; then its node goes;
5. steady for --phase-s seconds (after).

Latency: the producer's send-to-acknowledgement (librdkafka's per-message latency), and the share consumer's
end-to-end (the record's create time to its delivery), each p50/p99 per phase, and per second for the PNG.

    python -m benchmarks.balancer                 # a few minutes; appends to benchmarks/results/balancer.json
    python -m benchmarks.balancer --weights       # the same, weighing partitions by size and produce rate

Read /work/NOTES.log first on a shared machine: other work skews every number here.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
JSON_OUT, MD_OUT, PNG_OUT = RESULTS / "balancer.json", RESULTS / "balancer.md", RESULTS / "balancer.png"
PARTITIONS = 6
OVERRIDES = {"kray.balancer.enable": True, "kray.balancer.check.interval.ms": 1000,
             "kray.balancer.max.moves.in.flight": 8, "offsets.topic.num.partitions": 6,
             "share.coordinator.state.topic.num.partitions": 6, "transaction.state.log.num.partitions": 3}
BALANCE_TIMEOUT_S = 600
# --weights: partitions weighed by their size and produce rate (kray.balancer.load.weights.enable), sampled every 5 s;
# "balanced" is then the placement settled (in sync, nothing moved for SETTLED_S), as counts may differ by design
WEIGHTS = {"kray.balancer.load.weights.enable": True, "kray.balancer.load.sample.interval.ms": 5000}
SETTLED_S = 15.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


class Load:
    """A steady acks=all producer and a share consumer, each latency recorded with its wall-clock time."""

    def __init__(self, bootstrap: str, topic: str, group: str, rate: float):
        self.bootstrap, self.topic, self.group, self.rate = bootstrap, topic, group, rate
        self.stop = threading.Event()
        self.produced: list[tuple[float, float]] = []  # (wall s, latency ms)
        self.delivered: list[tuple[float, float]] = []
        self.failures = 0
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)

    def _produce(self) -> None:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "delivery.timeout.ms": 300000})

        def done(err, msg):
            if err is None:
                self.produced.append((time.time(), msg.latency() * 1000))
            else:
                self.failures += 1

        gap_s, next_s, n = 1.0 / self.rate, time.monotonic(), 0
        value = b"x" * 1024
        while not self.stop.is_set():
            try:
                p.produce(self.topic, value=value, partition=n % PARTITIONS, on_delivery=done)
                n += 1
            except BufferError:
                pass
            next_s += gap_s
            p.poll(max(0.0, next_s - time.monotonic()))
        p.flush(60)

    def _consume(self) -> None:
        from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                try:
                    got = [m for m in c.poll(0.5) if m.error() is None]
                except KafkaException:
                    continue
                now = time.time()
                for m in got:
                    self.delivered.append((now, now * 1000 - m.timestamp()[1]))
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if got:
                    try:
                        c.commit_sync(10.0)
                    except KafkaException:
                        pass
        finally:
            c.close()


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def _phase(samples: list[tuple[float, float]], start: float, end: float) -> dict:
    window = [ms for t, ms in samples if start <= t < end]
    return {"count": len(window), "p50_ms": _pct(window, 0.5), "p99_ms": _pct(window, 0.99)}


def _per_second(samples: list[tuple[float, float]], t0: float) -> list[tuple[int, float]]:
    """(second since t0, p99 ms of that second)."""
    buckets: dict[int, list[float]] = {}
    for t, ms in samples:
        if t >= t0:
            buckets.setdefault(int(t - t0), []).append(ms)
    return [(x, _pct(buckets[x], 0.99)) for x in sorted(buckets)]


def _placement(cluster) -> tuple[Counter, Counter, bool]:
    image = cluster.metadata()
    replicas, leaders, in_sync = Counter(), Counter(), True
    for topic in image.topics.values():
        for p in topic.partitions:
            replicas.update(p.replicas)
            leaders[p.leader] += 1
            in_sync &= sorted(p.replicas) == sorted(p.isr) and not p.adding and not p.removing
    return replicas, leaders, in_sync


def _balanced(cluster, brokers) -> bool:
    replicas, leaders, in_sync = _placement(cluster)
    counts, lead = [replicas[b] for b in brokers], [leaders[b] for b in brokers]
    return in_sync and max(counts) - min(counts) <= 1 and max(lead) - min(lead) <= 1


def _settled(cluster, brokers, quiet_s: float = SETTLED_S):
    """A condition: every replica in sync, each broker holding some, and the placement unchanged for `quiet_s`."""
    last = {"placement": None, "since": time.monotonic()}

    def check() -> bool:
        image = cluster.metadata()
        placement = tuple(sorted((t.name, p.index, tuple(p.replicas), p.leader) for t in image.topics.values()
                                 for p in t.partitions))
        replicas, _, in_sync = _placement(cluster)
        if placement != last["placement"] or not in_sync:
            last["placement"], last["since"] = placement, time.monotonic()
        check.settled_at = last["since"]   # (time.monotonic) when the placement last changed
        return in_sync and all(replicas[b] for b in brokers) and time.monotonic() - last["since"] >= quiet_s
    return check


def _broker_bytes(data_dir: Path, brokers) -> dict[str, int]:
    return {str(b): _dir_bytes(data_dir / f"broker-{b}") for b in brokers}


def _wait(condition, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(what)
        time.sleep(0.5)
    return time.monotonic() - start


def _fill(bootstrap: str, topic: str, megabytes: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for n in range(megabytes * 1024):
        p.produce(topic, value=b"f" * 1024, partition=n % PARTITIONS)
        p.poll(0)
    p.flush(300)


def run(phase_s: float, rate: float, fill_mb: int, weights: bool = False) -> dict:
    import ray
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, \
        ResourceType
    from cluster.local import LocalCluster
    if ray.is_initialized():
        ray.shutdown()
    data_dir = Path(tempfile.mkdtemp(prefix="kray-bench-balancer-"))
    cluster = LocalCluster(nodes=3, data_dir=data_dir, overrides=OVERRIDES | (WEIGHTS if weights else {}))
    log(f"starting a 3-broker LocalCluster with the balancer on{' (weighing partitions)' if weights else ''}")
    cluster.start()
    events: dict[str, float] = {}
    try:
        bootstrap = cluster.bootstrap
        topic, group = f"bal-{uuid.uuid4().hex[:6]}", f"bal-share-{uuid.uuid4().hex[:4]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=2)])[topic].result(60)
        for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
                ConfigEntry("share.auto.offset.reset", "latest", incremental_operation=AlterConfigOpType.SET)
        ])]).values():
            f.result(60)
        log(f"filling {topic} with {fill_mb} MB")
        _fill(bootstrap, topic, fill_mb)
        load = Load(bootstrap, topic, group, rate)
        load.start()
        _wait(lambda: load.delivered, 120, "no share delivery in 120 s")
        events["before"] = time.time()
        time.sleep(phase_s)

        log("a Ray node joins: broker 4")
        events["node 4 joins"] = time.time()
        cluster.add_node(4)
        serving_s = _wait(lambda: 4 in cluster.metadata().brokers, 180, "broker 4 did not register")
        balanced = _settled(cluster, [1, 2, 3, 4]) if weights else (lambda: _balanced(cluster, [1, 2, 3, 4]))
        serving_at = time.monotonic()
        balance_s = _wait(balanced, BALANCE_TIMEOUT_S, "not balanced")
        events["balanced over 4"] = time.time()
        if weights:  # (the quiet time that tells it settled is not part of it)
            events["balanced over 4"] -= time.monotonic() - balanced.settled_at
            balance_s = balanced.settled_at - serving_at
        bytes_by_broker = _broker_bytes(data_dir, [1, 2, 3, 4])
        grown = _placement(cluster)
        moved_onto_bytes = _dir_bytes(data_dir / "broker-4")
        log(f"balanced {balance_s:.1f} s after broker 4 served: replicas {dict(grown[0])}, leaders {dict(grown[1])}")
        time.sleep(phase_s)

        log("kray remove-broker --broker 4 --wait")
        moved_off_bytes = _dir_bytes(data_dir / "broker-4")
        events["remove-broker 4"] = time.time()
        start = time.monotonic()
        done = subprocess.run([str(Path(sys.executable).parent / "kray"), "remove-broker", "--bootstrap-server",
                               bootstrap, "--broker", "4", "--wait", "--timeout", str(BALANCE_TIMEOUT_S)],
                              capture_output=True, text=True, timeout=BALANCE_TIMEOUT_S + 60)
        drain_s = time.monotonic() - start
        if done.returncode:
            raise RuntimeError(f"kray remove-broker failed: {done.stdout} {done.stderr}")
        events["broker 4 removed"] = time.time()
        cluster.kill_node(4, graceful=True)
        shrunk = _placement(cluster)
        log(f"broker 4 removed in {drain_s:.1f} s: replicas {dict(shrunk[0])}, leaders {dict(shrunk[1])}")
        time.sleep(phase_s)
        events["end"] = time.time()
        load.end()
    finally:
        cluster.stop()
    phases = {"before": (events["before"], events["node 4 joins"]),
              "growing (3 -> 4)": (events["node 4 joins"], events["balanced over 4"]),
              "grown (4)": (events["balanced over 4"], events["remove-broker 4"]),
              "draining (4 -> 3)": (events["remove-broker 4"], events["broker 4 removed"]),
              "after (3)": (events["broker 4 removed"], events["end"])}
    t0 = events["before"]
    return {
        "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_average": os.getloadavg()[0], "rate_per_s": rate, "fill_mb": fill_mb, "phase_s": phase_s,
        "broker_4_serving_s": round(serving_s, 1), "balance_s": round(balance_s, 1), "drain_s": round(drain_s, 1),
        "bytes_moved_onto_4": moved_onto_bytes, "bytes_moved_off_4": moved_off_bytes, "weights": weights,
        "grown_bytes": bytes_by_broker,
        "grown_replicas": {str(b): n for b, n in sorted(grown[0].items())},
        "grown_leaders": {str(b): n for b, n in sorted(grown[1].items())},
        "shrunk_replicas": {str(b): n for b, n in sorted(shrunk[0].items())},
        "produce_failures": load.failures,
        "phases": {name: {"produce": _phase(load.produced, a, b), "share": _phase(load.delivered, a, b),
                          "seconds": round(b - a, 1)} for name, (a, b) in phases.items()},
        "events_s": {name: round(t - t0, 1) for name, t in events.items()},
        "p99_per_s": {"produce": _per_second(load.produced, t0), "share": _per_second(load.delivered, t0)},
        "remove_broker_output": done.stdout.splitlines()[:3] + done.stdout.splitlines()[-2:],
    }


def markdown(runs: list[dict]) -> str:
    out = ["# The balancer: 3 -> 4 -> 3 brokers under load\n\n",
           "`python -m benchmarks.balancer` (see its docstring). Latencies in ms: the producer's send to "
           "acknowledgement (acks=all), the share consumer's record create time to delivery.\n\n"]
    for r in runs:
        out.append(f"## {r['at']}{' (' + r['label'] + ')' if r.get('label') else ''}, load average "
                   f"{r['load_average']:.1f} at the end\n\n")
        out.append(f"{r['rate_per_s']:.0f} records/s of 1 KiB, {r['fill_mb']} MB in the topic beforehand. Broker 4 "
                   f"served {r['broker_4_serving_s']} s after its node joined; balanced {r['balance_s']} s after "
                   f"that ({r['bytes_moved_onto_4'] / 1e6:.1f} MB copied onto it; replicas "
                   f"{r['grown_replicas']}, leaders {r['grown_leaders']}); `kray remove-broker --wait` took "
                   f"{r['drain_s']} s ({r['bytes_moved_off_4'] / 1e6:.1f} MB moved off; replicas after "
                   f"{r['shrunk_replicas']}). Produce failures: {r['produce_failures']}.")
        if "grown_bytes" in r:
            out.append(f" Balanced {'by weight (bytes and produce rate)' if r.get('weights') else 'by count'}: MB on "
                       f"each broker once balanced " + ", ".join(f"{b}: {n / 1e6:.1f}" for b, n in
                                                                 r["grown_bytes"].items()) + ".")
        out.append("\n\n")
        out.append("| phase | s | produce p50 | produce p99 | share p50 | share p99 |\n|---|---:|---:|---:|---:|---:|\n")
        for name, p in r["phases"].items():
            out.append(f"| {name} | {p['seconds']} | {p['produce']['p50_ms']} | {p['produce']['p99_ms']} | "
                       f"{p['share']['p50_ms']} | {p['share']['p99_ms']} |\n")
        out.append("\n")
    return "".join(out)


def plot(run: dict) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: skipping the PNG")
        return
    fig, ax = plt.subplots(figsize=(12, 4.8))
    for name, color in (("produce", "tab:blue"), ("share", "tab:orange")):
        points = run["p99_per_s"][name]
        ax.plot([x for x, _ in points], [y for _, y in points], color=color, linewidth=1,
                label={"produce": "producer p99 (send to ack)", "share": "share consumer p99 (create to delivery)"}[name])
    for name, t in run["events_s"].items():
        if name not in ("before", "end"):
            ax.axvline(t, color="grey", linestyle="--", linewidth=0.8)
            ax.text(t, ax.get_ylim()[1] * 0.95, f" {name}", fontsize=8, rotation=90, va="top")
    ax.set_yscale("log")
    ax.set_xlabel("seconds")
    ax.set_ylabel("p99 latency per second (ms, log)")
    ax.set_title("3 -> 4 -> 3 brokers with the balancer, under a steady load")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(PNG_OUT, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-s", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0, help="records/s (1 KiB each)")
    parser.add_argument("--fill-mb", type=int, default=30)
    parser.add_argument("--label", help="what this run is (kept with it)")
    parser.add_argument("--weights", action="store_true", help="weigh partitions by size and produce rate "
                                                               "(kray.balancer.load.weights.enable)")
    parser.add_argument("--plot-only", action="store_true", help="draw the PNG of the last run in the JSON")
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads(JSON_OUT.read_text())[-1])
        return 0
    result = run(args.phase_s, args.rate, args.fill_mb, args.weights)
    if args.label:
        result["label"] = args.label
    runs = json.loads(JSON_OUT.read_text()) if JSON_OUT.exists() else []
    runs.append(result)
    JSON_OUT.write_text(json.dumps(runs, indent=1))
    MD_OUT.write_text(markdown(runs))
    plot(result)
    print(markdown([result]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
