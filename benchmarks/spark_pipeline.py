#!/usr/bin/env python3
"""Spark-on-Ray pipeline benchmark: share group -> Spark aggregation -> topic (cluster.spark).

Run from the repo root (needs the spark extra and Java 17):

    python -m benchmarks.spark_pipeline                         # defaults: a few minutes on 2 cores
    python -m benchmarks.spark_pipeline --records 200000 --batch-sizes 5000,100000

One process: Ray (--ray-cpus), a LocalBroker on it (heartbeats 1 s; group.share.partition.max.record.locks
raised to --max-record-locks so a 100,000-record batch can be held at once: Kafka's default 2000
per partition caps what a group holds), and one Spark session (1 executor, 1 core, RayDP).
--records orders (JSON values, ~70 bytes, 100 customers as keys) go to a topic of --partitions
partitions. A warm-up batch runs the aggregation first (JVM and Python workers start), then for
each batch size:

- plain: one confluent-kafka Consumer (assign() from offset 0) reads the records into Arrow
  columns in batches of that size; each batch is handed to Spark (the same Arrow -> DataFrame path),
  aggregated per customer and written to a results topic (write_topic, acks=all). No
  acknowledgements: the baseline of "the same aggregation on a plain consumer's records".
- share: a fresh share group (earliest), ShareGroupReader with --readers reader actors;
  every batch: take (batches()), batch.df, aggregate + write_topic, commit().

records/s counts from the first batch requested to the last batch committed (written, for plain).
Per phase the seconds are summed over batches; the per-batch overhead is the intercept of
batch time against batch size over the two runs (t = overhead + n / rate).

Results: benchmarks/results/spark_pipeline.{json,md,png}.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.throughput import free_port, machine_info  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONFIGS_EXAMPLE = REPO / "configs" / "examples" / "orders_pipeline.py"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("orders_pipeline", CONFIGS_EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plain_batches(bootstrap: str, topic: str, partitions: int, total: int, batch_records: int):
    """Arrow tables of `batch_records` records from a plain assign() consumer."""
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    from cluster.spark.reader_actor import RECORD_SCHEMA

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-plain", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    try:
        while seen < total:
            want = min(batch_records, total - seen)
            cols = {k: [] for k in ("key", "value", "topic", "partition", "offset", "timestamp")}
            got = 0
            while got < want:
                for m in c.consume(num_messages=min(100_000, want - got), timeout=1.0):
                    if m.error():
                        continue
                    cols["key"].append(m.key())
                    cols["value"].append(m.value())
                    cols["topic"].append(m.topic())
                    cols["partition"].append(m.partition())
                    cols["offset"].append(m.offset())
                    cols["timestamp"].append(m.timestamp()[1])
                    got += 1
            n = got
            yield pa.Table.from_arrays([
                pa.array(cols["key"], pa.binary()), pa.array(cols["value"], pa.binary()),
                pa.array(cols["topic"], pa.string()), pa.array(cols["partition"], pa.int32()),
                pa.array(cols["offset"], pa.int64()),
                pa.array(cols["timestamp"], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                pa.array([[]] * n, RECORD_SCHEMA.field("headers").type), pa.array([1] * n, pa.int32())],
                schema=RECORD_SCHEMA)
            seen += n
    finally:
        c.close()


def run_plain(spark, example, bootstrap, topic, partitions, total, batch_records, sink) -> dict:
    from cluster.spark import write_topic
    from cluster.spark.convert import arrow_to_spark

    phases = {"read_s": 0.0, "to_spark_s": 0.0, "aggregate_write_s": 0.0}
    batch_times, sizes = [], []
    started = time.monotonic()
    it = plain_batches(bootstrap, topic, partitions, total, batch_records)
    while True:
        t0 = time.monotonic()
        table = next(it, None)
        if table is None:
            break
        t1 = time.monotonic()
        df = arrow_to_spark(spark, table)
        t2 = time.monotonic()
        write_topic(example.aggregate_orders(df), bootstrap, sink)
        t3 = time.monotonic()
        phases["read_s"] += t1 - t0
        phases["to_spark_s"] += t2 - t1
        phases["aggregate_write_s"] += t3 - t2
        batch_times.append(t3 - t1)
        sizes.append(table.num_rows)
    elapsed = time.monotonic() - started
    return {"mode": "plain", "batch_records": batch_records, "records": sum(sizes), "batches": len(sizes),
            "elapsed_s": elapsed, "records_per_s": sum(sizes) / elapsed, "phases": phases,
            "batch_s_median": sorted(batch_times)[len(batch_times) // 2], "batch_sizes": sizes,
            "batch_times_s": batch_times}


def run_share(spark, example, bootstrap, topic, group, total, batch_records, readers, sink) -> dict:
    from cluster.spark import ShareGroupReader, write_topic

    phases = {"take_s": 0.0, "to_spark_s": 0.0, "aggregate_write_s": 0.0, "commit_s": 0.0}
    batch_times, sizes = [], []
    done = 0
    redelivered = 0
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=readers,
                          prefetch_records=batch_records // readers) as reader:
        t_join = time.monotonic()
        it = reader.batches(max_records=batch_records, timeout_s=2.0, stop_after_idle_s=10.0)
        first = next(it)  # the group join (one heartbeat) is not the pipeline's throughput
        join_s = time.monotonic() - t_join
        started = time.monotonic()
        batch = first
        while batch is not None:
            t1 = time.monotonic()
            df = batch.df
            t2 = time.monotonic()
            write_topic(example.aggregate_orders(df), bootstrap, sink)
            t3 = time.monotonic()
            batch.commit()
            t4 = time.monotonic()
            phases["to_spark_s"] += t2 - t1
            phases["aggregate_write_s"] += t3 - t2
            phases["commit_s"] += t4 - t3
            batch_times.append(t4 - t1)
            sizes.append(batch.count)
            done += batch.count
            if done >= total:
                break
            t0 = time.monotonic()
            batch = next(it, None)
            phases["take_s"] += time.monotonic() - t0
        elapsed = time.monotonic() - started
        stats = reader.stats()
    return {"mode": "share", "batch_records": batch_records, "readers": readers, "records": done,
            "batches": len(sizes), "elapsed_s": elapsed, "records_per_s": done / elapsed, "join_s": join_s,
            "phases": phases, "batch_s_median": sorted(batch_times)[len(batch_times) // 2],
            "batch_sizes": sizes, "batch_times_s": batch_times, "redelivered": redelivered,
            "renewals": sum(s["renewals"] for s in stats)}


def overhead(runs: list[dict]) -> float | None:
    """Intercept of median batch time against batch size between the smallest and largest runs."""
    if len(runs) < 2:
        return None
    a, b = min(runs, key=lambda r: r["batch_records"]), max(runs, key=lambda r: r["batch_records"])
    na, nb = a["records"] / a["batches"], b["records"] / b["batches"]
    ta, tb = sum(a["batch_times_s"]) / a["batches"], sum(b["batch_times_s"]) / b["batches"]
    if nb == na:
        return None
    slope = (tb - ta) / (nb - na)
    return max(0.0, ta - slope * na)


def write_results(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "spark_pipeline.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Spark pipeline: share group -> Spark aggregation -> topic", "",
             f"`{result['command']}` ({result['date']}; {result['machine']['nproc']} cores, "
             f"load average before {result['loadavg_before']})", "",
             "| path | batch records | batches | records/s | median s/batch | to Spark s | aggregate+write s | "
             "take s | commit s | share/plain |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    plain = {r["batch_records"]: r for r in result["runs"] if r["mode"] == "plain"}
    for r in result["runs"]:
        ph = r["phases"]
        ratio = ""
        if r["mode"] == "share" and r["batch_records"] in plain:
            ratio = f"{r['records_per_s'] / plain[r['batch_records']]['records_per_s']:.2f}x"
        lines.append(f"| {r['mode']} | {r['batch_records']:,} | {r['batches']} | {r['records_per_s']:,.0f} | "
                     f"{r['batch_s_median']:.2f} | {ph['to_spark_s']:.1f} | {ph['aggregate_write_s']:.1f} | "
                     f"{ph.get('take_s', ph.get('read_s', 0)):.1f} | {ph.get('commit_s', 0):.1f} | {ratio} |")
    lines += ["", f"Per-batch overhead (intercept of batch time vs size): share "
              f"{fmt_s(result['overhead_s'].get('share'))}, plain {fmt_s(result['overhead_s'].get('plain'))}. "
              f"take s / read s = time waiting for the next batch (share: reader actors; plain: the consumer "
              f"in the driver). {result['records']:,} orders, {result['partitions']} partitions, "
              f"{result['readers']} readers, 1 Spark executor with 1 core; Ray {result['ray_cpus']} CPUs."]
    (out / "spark_pipeline.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        sizes = sorted({r["batch_records"] for r in result["runs"]})
        width = 0.38
        for i, mode in enumerate(("plain", "share")):
            vals = [next((r["records_per_s"] for r in result["runs"] if r["mode"] == mode and r["batch_records"] == s), 0)
                    for s in sizes]
            ax.bar([x + (i - 0.5) * width for x in range(len(sizes))], vals, width, label=mode)
        ax.set_xticks(range(len(sizes)), [f"{s:,} / batch" for s in sizes])
        ax.set_ylabel("records/s")
        ax.set_title("share group -> Spark (RayDP) aggregation -> topic")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "spark_pipeline.png", dpi=110)
    except Exception as e:  # the numbers matter more than the picture
        log(f"no PNG: {e}")


def fmt_s(v):
    return "–" if v is None else f"{v:.2f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--batch-sizes", default="5000,100000")
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--ray-cpus", type=int, default=2)
    ap.add_argument("--max-record-locks", type=int, default=200_000)
    ap.add_argument("--modes", default="plain,share")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    modes = args.modes.split(",")

    import ray

    from cluster.cli import DEFAULT_LOCAL_CONFIG
    from cluster.config import load_broker_config
    from cluster.local import LocalBroker
    from cluster.spark import start_spark, stop_spark
    from cluster.spark.convert import arrow_to_spark

    example = load_example()
    loadavg = os.getloadavg()
    data_dir = tempfile.mkdtemp(prefix="kray-spark-bench-")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
    config = load_broker_config(DEFAULT_LOCAL_CONFIG, overrides=[
        f"log.dirs={data_dir}", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
        "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500",
        f"group.share.partition.max.record.locks={args.max_record_locks}"])
    broker = LocalBroker(config)
    runs = []
    try:
        bootstrap = broker.start()
        log(f"broker at {bootstrap}")
        t = time.monotonic()
        spark = start_spark("kray-spark-bench")
        log(f"Spark up in {time.monotonic() - t:.1f} s")
        source, sink = "bench-orders", "bench-totals"
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(source, args.partitions, 1), NewTopic(sink, args.partitions, 1)]).values():
            f.result(30)
        t = time.monotonic()
        example.seed_orders(bootstrap, args.records, topic=source)
        log(f"{args.records:,} orders produced in {time.monotonic() - t:.1f} s")
        # warm-up: the first Spark job starts the Python workers and compiles the query
        warm = next(plain_batches(bootstrap, source, args.partitions, 2000, 2000))
        from cluster.spark import write_topic
        for _ in range(2):
            write_topic(example.aggregate_orders(arrow_to_spark(spark, warm)), bootstrap, sink)
        for size in sizes:
            if "plain" in modes:
                r = run_plain(spark, example, bootstrap, source, args.partitions, args.records, size, sink)
                log(f"plain  {size:>7,}/batch: {r['records_per_s']:,.0f} records/s {r['phases']}")
                runs.append(r)
            if "share" in modes:
                group = f"bench-{size}-{int(time.time())}"
                example.start_group_at_earliest(bootstrap, group)
                r = run_share(spark, example, bootstrap, source, group, args.records, size, args.readers, sink)
                log(f"share  {size:>7,}/batch: {r['records_per_s']:,.0f} records/s {r['phases']}")
                runs.append(r)
        stop_spark()
    finally:
        broker.stop()
        ray.shutdown()
    result = {
        "command": "python -m benchmarks.spark_pipeline " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(["kray"]), "loadavg_before": [round(x, 2) for x in loadavg],
        "records": args.records, "partitions": args.partitions, "readers": args.readers, "ray_cpus": args.ray_cpus,
        "runs": runs,
        "overhead_s": {m: overhead([r for r in runs if r["mode"] == m]) for m in ("plain", "share")},
    }
    write_results(Path(args.out), result)
    log(f"results in {args.out}/spark_pipeline.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
