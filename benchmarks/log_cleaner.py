#!/usr/bin/env python3
"""Log cleaner benchmark (issue 19, compacted topics): how fast one round cleans, in MB/s of log
read, on one partition's log in this process (no Ray, no broker): PartitionCore.plan_cleaning on
the calling thread, log.build_cleaned (offset map + rewrite, the part a shard runs on its cleaner
thread), Log.swap_cleaned.

Per case: --megabytes of updates (values of --value-bytes, keys drawn from --keys, batches of
--batch-records as a client's linger makes them), segment.bytes 16 MiB, then one round over every
closed segment. Reported: MB read per second over the whole round, MB and records before and
after, the swap's time (what the shard's event loop spends). Run from the repo root:

    python -m benchmarks.log_cleaner                    # ~1-2 min
Results: benchmarks/results/log-cleaner.{json,md,png} (see --out).

With --broker: what a round costs its neighbours in a real `kray start`. A compacted topic
(segment.bytes 8 MiB, min.compaction.lag.ms one day: nothing is cleaned yet) is filled with
--megabytes of 100 B updates to 1000 keys; then benchmarks/isolation.py's probe (two producers,
acks=1, linger.ms=0, a 100 B record every 5 ms to a partition on the compacted partition's shard
and to one on another shard) runs in three phases: idle; a consumer reading the compacted topic
from offset 0 (fetch); the same reader while the cleaner cleans it (min.compaction.lag.ms set to 0
by IncrementalAlterConfigs; log.cleaner.backoff.ms=500). Results: benchmarks/results/
log-cleaner-broker.{json,md}.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import tempfile
import time
from pathlib import Path

from actors.partition.core import PartitionConfig, PartitionCore
from actors.partition.log import build_cleaned
from protocol.record_batch import COMPRESSION_NAMES, COMPRESSION_NONE, COMPRESSION_ZSTD, build_batch

MIB = 1024 * 1024
SEGMENT_BYTES = 16 * MIB
NOW = 1_800_000_000_000


def run_case(directory: Path, *, megabytes: int, keys: int, value_bytes: int, batch_records: int,
             compression: int, seed: int = 7) -> dict:
    core = PartitionCore.open(directory, PartitionConfig(cleanup_policy="compact", segment_bytes=SEGMENT_BYTES),
                              now_ms=NOW)
    rng = random.Random(seed)
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    written = records = 0
    started = time.perf_counter()
    while written < megabytes * MIB:
        rows = [(b"key-%d" % rng.randrange(keys), value, [], NOW) for _ in range(batch_records)]
        data = build_batch(rows, compression=compression)
        result = core.produce(memoryview(data), now_ms=NOW, leader_epoch=0)
        assert result.error_code == 0, result
        written += len(data)
        records += batch_records
    core.produce(memoryview(build_batch([(b"tail", b"t", [], NOW)])), now_ms=NOW, leader_epoch=0)
    core.log.high_watermark = core.log_end_offset
    write_s = time.perf_counter() - started
    before_bytes = core.log.size_bytes
    dirt = core.cleanable(NOW)
    t0 = time.perf_counter()
    plan = core.plan_cleaning(dirt, now_ms=NOW, io_max_bytes_per_second=1e308)
    t1 = time.perf_counter()
    result = build_cleaned(plan)
    t2 = time.perf_counter()
    assert core.swap_cleaned(result)
    t3 = time.perf_counter()
    stats = result.stats
    out = {
        "megabytes_written": round(written / MIB, 1), "records_produced": records, "keys": keys,
        "value_bytes": value_bytes, "batch_records": batch_records, "compression": COMPRESSION_NAMES[compression],
        "write_s": round(write_s, 2),
        "log_bytes_before": before_bytes, "log_bytes_after": core.log.size_bytes,
        "bytes_read": stats.bytes_read, "bytes_written": stats.bytes_written,
        "records_read": stats.records_read, "records_written": stats.records_written,
        "plan_ms": round((t1 - t0) * 1000, 2), "build_s": round(t2 - t1, 2), "swap_ms": round((t3 - t2) * 1000, 2),
        # the offset map reads the dirty section once, the rewrite reads every closed segment once
        "cleaned_mb_per_s": round(stats.bytes_read / MIB / (t3 - t0), 2),
    }
    core.close()
    return out


def fill(bootstrap: str, topic: str, megabytes: int) -> int:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 512 * 1024,
                  "queue.buffering.max.kbytes": 64 * 1024})
    value, sent, n = b"u" * 100, 0, 0
    while sent < megabytes * MIB:
        try:
            p.produce(topic, key=b"key-%d" % (n % 1000), value=value, partition=0)
            sent += 110
            n += 1
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    assert p.flush(120) == 0
    return n


def noisy_reads(bootstrap: str, topic: str, seconds: float, out) -> None:
    """Read `topic` from offset 0 for `seconds` (again from 0 at its end): bytes of values read."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    end = time.monotonic() + seconds
    read = errors = 0
    while time.monotonic() < end:
        m = c.poll(0.1)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == -191:   # _PARTITION_EOF: again from the start
                c.assign([TopicPartition(topic, 0, 0)])
            else:
                errors += 1
            continue
        read += len(m.value() or b"")
    c.close()
    out.put({"mb_read": round(read / 1e6, 1), "errors": errors})


def run_broker(args) -> None:
    import uuid
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    from actors.shard.hosted import shard_index
    from benchmarks import isolation
    from benchmarks import throughput as tp

    tmp = Path(tempfile.mkdtemp(prefix="kray-cleaner-"))
    port = tp.free_port()
    broker = tp.make_kray(port, tmp, tmp / "data", ["log.cleaner.backoff.ms=500"], None)
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": f"python -m benchmarks.log_cleaner --broker --megabytes {args.megabytes}",
           "machine": tp.machine_info(["kray"]), "phases": []}
    broker.start(120)
    try:
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        quiet, noisy = f"quiet-{uuid.uuid4().hex[:6]}", f"compacted-{uuid.uuid4().hex[:6]}"
        for f in admin.create_topics([NewTopic(quiet, 2, 1), NewTopic(noisy, 1, 1, config={
                "cleanup.policy": "compact", "segment.bytes": str(8 * MIB),
                "min.compaction.lag.ms": "86400000"})]).values():
            f.result(60)
        ids = {}
        for name, f in admin.describe_topics(TopicCollection([quiet, noisy])).items():
            u = f.result(30).topic_id
            ids[name] = uuid.UUID(int=((u.get_most_significant_bits() & (2**64 - 1)) << 64)
                                  | (u.get_least_significant_bits() & (2**64 - 1)))
        shards = os.cpu_count()
        noisy_shard = shard_index(ids[noisy], 0, shards)
        same = next(p for p in (0, 1) if shard_index(ids[quiet], p, shards) == noisy_shard)
        t0 = time.perf_counter()
        records = fill(bootstrap, noisy, args.megabytes)
        doc["fill"] = {"records": records, "s": round(time.perf_counter() - t0, 1)}
        partition_dir = next((tmp / "data").rglob(f"{noisy}-0"))

        def log_mb():
            return round(sum(p.stat().st_size for p in partition_dir.glob("*.log")) / MIB, 1)
        ns = argparse.Namespace(phase_s=args.phase_s, probe_interval_ms=5.0)
        doc["phases"].append(isolation.run_phase("idle", bootstrap, quiet, noisy, ns, same))
        doc["phases"].append(isolation.run_phase("fetch", bootstrap, quiet, noisy, ns, same, (noisy_reads, ())))
        before = log_mb()
        for f in admin.incremental_alter_configs([ConfigResource("topic", noisy, incremental_configs=[
                ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(30)
        row = isolation.run_phase("fetch + cleaning", bootstrap, quiet, noisy, ns, same, (noisy_reads, ()))
        row["log_mb"] = [before, log_mb()]
        doc["phases"].append(row)
    finally:
        broker.stop(30)
    out = Path(args.out + "-broker")
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["# Kray log cleaner beside produce and fetch", "",
             f"{doc['date']} · {doc['machine'].get('nproc')} CPU · `{doc['command']}`", "",
             f"One `kray start` (log.cleaner.backoff.ms=500). A compacted topic (segment.bytes 8 MiB) filled with "
             f"{records} updates of 100 B to 1000 keys ({args.megabytes} MiB, {doc['fill']['s']} s), not cleaned "
             "yet (min.compaction.lag.ms one day). Probe producers (acks=1, linger.ms=0) send 100 B to a partition "
             "on the compacted partition's shard and to one on another shard every 5 ms; latency = produce() to "
             "delivery. Phases: idle; a consumer reading the compacted topic from offset 0 over and over; the same "
             "while the cleaner cleans it (min.compaction.lag.ms set to 0).", "",
             "| phase | same shard p50 / p99 / max ms | other shard p50 / p99 / max ms | samples | reader | "
             "compacted log MB | load 1m |", "|---|---:|---:|---:|---|---|---:|"]
    for r in doc["phases"]:
        s_, o, b = r["same_shard"], r["other_shard"], r["background"]
        reader = "–" if b is None else f"{b['mb_read']} MB read, {b['errors']} errors"
        logs = f"{r['log_mb'][0]} → {r['log_mb'][1]}" if "log_mb" in r else "–"
        lines.append(f"| {r['phase']} | {s_.get('p50_ms')} / {s_.get('p99_ms')} / {s_.get('max_ms')} | "
                     f"{o.get('p50_ms')} / {o.get('p99_ms')} / {o.get('max_ms')} | {s_['count']} + {o['count']} | "
                     f"{reader} | {logs} | {r['loadavg'][0]} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--broker", action="store_true", help="the effect on produce and fetch in a kray start")
    parser.add_argument("--phase-s", type=float, default=10.0)
    parser.add_argument("--out", default="benchmarks/results/log-cleaner")
    args = parser.parse_args()
    if args.broker:
        run_broker(args)
        return
    cases = [
        dict(keys=1000, value_bytes=1000, batch_records=16, compression=COMPRESSION_NONE),
        dict(keys=100_000, value_bytes=1000, batch_records=16, compression=COMPRESSION_NONE),
        dict(keys=1000, value_bytes=100, batch_records=160, compression=COMPRESSION_NONE),
        dict(keys=1000, value_bytes=1000, batch_records=16, compression=COMPRESSION_ZSTD),
    ]
    results = []
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="kray-cleaner-bench-") as d:
            r = run_case(Path(d), megabytes=args.megabytes, **case)
        print(json.dumps(r), flush=True)
        results.append(r)
    doc = {"benchmark": "log_cleaner", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "cpus": os.cpu_count(), "command": f"python -m benchmarks.log_cleaner --megabytes {args.megabytes}",
           "segment_bytes": SEGMENT_BYTES, "results": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        "# Kray log cleaner benchmark", "",
        f"{doc['date']} · {doc['cpus']} CPU · `{doc['command']}`", "",
        "One round of the log cleaner over a compacted partition's closed segments, in one process "
        "(no broker): plan (the partition's thread), build (offset map + rewrite: what a shard runs on "
        "its cleaner thread), swap (the partition's thread). segment.bytes 16 MiB; keys drawn "
        "uniformly; MB/s = bytes of log read / round time.", "",
        "| keys | value B | records/batch | codec | log before → after MB | records read → kept | round s | "
        "cleaned MB/s | swap ms |",
        "|---:|---:|---:|---|---|---|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['keys']} | {r['value_bytes']} | {r['batch_records']} | {r['compression']} | "
            f"{r['log_bytes_before'] / MIB:.1f} → {r['log_bytes_after'] / MIB:.2f} | "
            f"{r['records_read']} → {r['records_written']} | {r['build_s']} | {r['cleaned_mb_per_s']} | "
            f"{r['swap_ms']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels = [f"{r['keys']} keys\n{r['value_bytes']} B\n{r['compression']}" for r in results]
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.bar(labels, [r["cleaned_mb_per_s"] for r in results])
        ax.set_ylabel("MB of log cleaned per s")
        ax.set_title("Kray log cleaner: one round, one partition")
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=100)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
