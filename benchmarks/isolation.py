#!/usr/bin/env python3
"""Isolation benchmark (issue 16): does one partition's heavy work hold up its neighbours?

A broker's partition replicas share a few shard processes, each with one event loop. This run
measures what a small, latency-sensitive producer sees on two partitions, one hosted by the same
shard as a *noisy* partition and one by another shard, while the noisy partition:

1. ``idle``: does nothing (the baseline);
2. ``writes``: takes 1 MiB record batches as fast as one producer sends them, with
   segment.bytes=8 MiB, so that its log rolls (and fsyncs the rolled segment) every few batches;
3. ``long polls``: is long-polled by --pollers consumers (fetch.wait.max.ms=500) that get nothing;
4. ``retention``: has retention.ms set to 1 ms after the writes, so that the next retention pass
   (log.retention.check.interval.ms=1000 here) deletes every segment the writes made.

The probe: one confluent-kafka producer (acks=1, linger.ms=0) sends a 100 B record to each of
the two quiet partitions every --probe-interval-ms; latency = produce() to its delivery callback.
Each partition has a producer (a connection) of its own, in the same process, so what differs
between them is the shard. Run from the repo root:

    python -m benchmarks.isolation                      # ~1.5 min
Results: benchmarks/results/isolation.{json,md} (see --out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks import throughput as tp

MIB = 1024 * 1024
NOISY_SEGMENT_BYTES = 8 * MIB


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def probe(bootstrap: str, topic: str, interval_ms: float, seconds: float, out) -> None:
    """Produce to partitions 0 and 1 of `topic` in turn; put [(partition, seconds since the start,
    latency ms)] on `out`. A producer (a connection) per partition: a Kafka connection answers in
    request order, so one connection for both would make each wait for the other. Between sends
    the producers are polled (not slept), so that a delivery callback runs as soon as its answer
    is in."""
    from confluent_kafka import Producer
    producers = [Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0}) for _ in range(2)]
    samples = []
    start = time.perf_counter()

    def sent(partition, t0):
        return lambda err, msg: err is None and samples.append(
            (partition, round(t0 - start, 3), (time.perf_counter() - t0) * 1000))
    i = 0
    while time.perf_counter() - start < seconds:
        partition = i % 2
        t0 = time.perf_counter()
        producers[partition].produce(topic, value=b"x" * 100, partition=partition, on_delivery=sent(partition, t0))
        i += 1
        while (left := t0 + interval_ms / 1000 - time.perf_counter()) > 0:
            for p in producers:
                p.poll(0)
            time.sleep(min(left, 0.0002))
    for p in producers:
        p.flush(30)
    out.put(samples)


def noisy_writes(bootstrap: str, topic: str, seconds: float, out) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": MIB,
                  "queue.buffering.max.kbytes": 64 * 1024})
    value = b"n" * 1000
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        try:
            p.produce(topic, value=value, partition=0)
            sent += 1
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(60)
    out.put(sent * len(value))


def long_polls(bootstrap: str, topic: str, pollers: int, seconds: float, out) -> None:
    from confluent_kafka import Consumer, TopicPartition
    consumers = []
    for i in range(pollers):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"poller-{uuid.uuid4().hex[:6]}",
                      "fetch.wait.max.ms": 500, "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, -1)])  # from the end: nothing to read, every fetch waits
        consumers.append(c)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in consumers:
            c.poll(0.01)
    for c in consumers:
        c.close()
    out.put(pollers)


def _stats(latencies: list[float]) -> dict:
    if not latencies:
        return {"count": 0}
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
    return {"count": len(latencies), "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2),
            "max_ms": round(max(latencies), 2)}


def run_phase(name: str, bootstrap: str, quiet: str, noisy: str, args, same_shard_partition: int,
              background=None) -> dict:
    ctx = mp.get_context("spawn")
    out_probe, out_bg = ctx.Queue(), ctx.Queue()
    procs = []
    if background is not None:
        fn, extra = background
        procs.append(ctx.Process(target=fn, args=(bootstrap, noisy, *extra, args.phase_s + 1, out_bg)))
        procs[-1].start()
        time.sleep(1)  # the noise first
    probe_proc = ctx.Process(target=probe, args=(bootstrap, quiet, args.probe_interval_ms, args.phase_s, out_probe))
    probe_proc.start()
    samples = out_probe.get(timeout=args.phase_s + 120)
    background_result = out_bg.get(timeout=120) if background is not None else None
    for p in [probe_proc, *procs]:
        p.join(60)
    same = [ms for part, _, ms in samples if part == same_shard_partition]
    other = [ms for part, _, ms in samples if part != same_shard_partition]
    row = {"phase": name, "same_shard": _stats(same), "other_shard": _stats(other), "background": background_result,
           "loadavg": [round(x, 2) for x in os.getloadavg()],
           "slowest": sorted(samples, key=lambda x: -x[2])[:5]}  # (partition, s into the phase, ms)
    log(f"{name}: same shard {row['same_shard']}, other shard {row['other_shard']}; slowest {row['slowest']}")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--phase-s", type=float, default=10.0)
    ap.add_argument("--probe-interval-ms", type=float, default=5.0)
    ap.add_argument("--pollers", type=int, default=20)
    ap.add_argument("--kray-bin")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)

    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    from actors.shard.hosted import shard_index

    tmp = Path(tempfile.mkdtemp(prefix="kray-isolation-"))
    port = tp.free_port()
    broker = tp.make_kray(port, tmp, tmp / "data", ["log.retention.check.interval.ms=1000"], args.kray_bin)
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python -m benchmarks.isolation " + " ".join(argv or []),
           "machine": tp.machine_info(["kray"]), "phases": []}
    log("starting kray")
    broker.start(120)
    try:
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        quiet, noisy = f"quiet-{uuid.uuid4().hex[:6]}", f"noisy-{uuid.uuid4().hex[:6]}"
        for f in admin.create_topics([NewTopic(quiet, 2, 1), NewTopic(noisy, 1, 1, config={
                "segment.bytes": str(NOISY_SEGMENT_BYTES)})]).values():
            f.result(60)
        ids = {}
        for name, f in admin.describe_topics(TopicCollection([quiet, noisy])).items():
            u = f.result(30).topic_id
            ids[name] = uuid.UUID(int=((u.get_most_significant_bits() & (2**64 - 1)) << 64)
                                  | (u.get_least_significant_bits() & (2**64 - 1)))
        shards = os.cpu_count()  # num.partition.shards=0: one shard per CPU of the node
        noisy_shard = shard_index(ids[noisy], 0, shards)
        same = next(p for p in (0, 1) if shard_index(ids[quiet], p, shards) == noisy_shard)
        doc["layout"] = {"shards": shards, "noisy_shard": noisy_shard, "quiet_partition_on_noisy_shard": same}
        log(f"{shards} shards; {noisy}-0 on shard {noisy_shard}, beside {quiet}-{same}")
        phases = doc["phases"]
        phases.append(run_phase("idle", bootstrap, quiet, noisy, args, same))
        phases.append(run_phase("writes", bootstrap, quiet, noisy, args, same, (noisy_writes, ())))
        phases.append(run_phase("long polls", bootstrap, quiet, noisy, args, same, (long_polls, (args.pollers,))))
        segments = len(list((tmp / "data").rglob(f"{noisy}-0/*.log")))
        for f in admin.incremental_alter_configs([ConfigResource("topic", noisy, incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(30)
        row = run_phase("retention", bootstrap, quiet, noisy, args, same)
        row["background"] = {"segments_before": segments,
                             "segments_after": len(list((tmp / "data").rglob(f"{noisy}-0/*.log")))}
        phases.append(row)
    finally:
        broker.stop(30)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "isolation.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "isolation.md").write_text(render(doc))
    print(render(doc))
    return 0


def render(doc: dict) -> str:
    m = doc["machine"]
    lines = ["# Kray isolation benchmark", "",
             f"{doc['date']} · {m.get('nproc')} CPU · `{doc['command'].strip()}`", "",
             "One `kray start` (log.retention.check.interval.ms=1000). Probe producers (acks=1, linger.ms=0, one "
             "connection per partition) send a 100 B record to each of two partitions in turn, one hosted by the same shard as a "
             "*noisy* partition, the other by another shard; latency = produce() to delivery. Per phase, "
             "the noisy partition: idle; taking 1 MiB batches from one producer as fast as it can "
             "(segment.bytes=8 MiB: a roll, with an fsync of the rolled segment, every 8 batches); "
             "long-polled by consumers that get nothing; losing every segment to retention.ms=1.", "",
             "| noisy partition | same shard p50 / p99 / max ms | other shard p50 / p99 / max ms | samples | "
             "noise | load 1m |", "|---|---:|---:|---:|---|---:|"]
    for r in doc["phases"]:
        s, o, b = r["same_shard"], r["other_shard"], r["background"]
        noise = ("–" if b is None else f"{b / 1e6:.0f} MB written" if r["phase"] == "writes" else
                 f"{b} consumers" if r["phase"] == "long polls" else
                 f"{b['segments_before']} → {b['segments_after']} segments")
        lines.append(f"| {r['phase']} | {s.get('p50_ms')} / {s.get('p99_ms')} / {s.get('max_ms')} | "
                     f"{o.get('p50_ms')} / {o.get('p99_ms')} / {o.get('max_ms')} | {s['count']} + {o['count']} | "
                     f"{noise} | {r['loadavg'][0]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
