#!/usr/bin/env python3
"""A Ray worker pool's response to a load step (cluster.workers.ShareWorkerPool).

Run from the repo root:

    python -m benchmarks.worker_pool                       # defaults: about two minutes on 2 cores
    python -m benchmarks.worker_pool --burst 6000 --handler-ms 10 --max-workers 8

One process: Ray (--ray-cpus), a LocalBroker on it (heartbeats 1 s), a topic of --partitions
partitions and a share group at earliest. The pool starts idle with --min-workers; after
--idle-s a burst of --burst records (100-byte values) is produced at once. The handler sleeps
--handler-ms per record, so one worker drains the burst in burst x handler time; the pool is asked
to drain it within --lag-target-s. Its stats() are sampled every --interval-s (lag from
DescribeShareGroupOffsets, workers serving and draining, records/s) until the lag is 0 and the pool
is back at --min-workers, then --tail-s more.

Reported: time from the burst to the first scale-up and to the peak, the peak workers, the drain
time (burst to lag 0) beside the target and beside one worker's time, time back to min workers,
and what the handler saw more than once (redeliveries: 0 expected, scale-down drains cleanly).

Results: benchmarks/results/worker_pool.{json,md,png}.
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


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_handler(handler_s: float, counts):
    def handle(record):
        time.sleep(handler_s)
        if record.delivery_count() > 1:
            counts.redelivered.remote()
    return handle


def first_time(samples: list[dict], after_s: float, condition) -> float | None:
    return next((s["time_s"] for s in samples if s["time_s"] >= after_s and condition(s)), None)


def summarize(samples: list[dict], burst_at_s: float, args) -> dict:
    peak = max(s["workers"] + s["draining"] for s in samples)
    serving_peak = max(s["workers"] for s in samples)
    up = first_time(samples, burst_at_s, lambda s: s["workers"] > args.min_workers)
    at_peak = first_time(samples, burst_at_s, lambda s: s["workers"] == serving_peak)
    drained = first_time(samples, burst_at_s, lambda s: s["lag"] == 0 and s["accepted"] >= args.burst)
    back = first_time(samples, drained or burst_at_s,
                      lambda s: s["workers"] == args.min_workers and s["draining"] == 0) if drained else None
    rel = lambda t: None if t is None else round(t - burst_at_s, 1)  # noqa: E731
    return {"scale_up_after_s": rel(up), "peak_after_s": rel(at_peak), "peak_workers": serving_peak,
            "peak_workers_with_draining": peak, "drain_s": rel(drained), "lag_target_s": args.lag_target_s,
            "one_worker_s": round(args.burst * args.handler_ms / 1000, 1), "back_to_min_after_s": rel(back)}


def write_results(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "worker_pool.json").write_text(json.dumps(result, indent=2) + "\n")
    s, a = result["summary"], result["settings"]
    fmt = lambda v: "–" if v is None else f"{v:g}"  # noqa: E731
    lines = ["# Ray worker pool: response to a load step", "",
             f"`{result['command']}` ({result['date']}; {result['machine']['nproc']} cores, "
             f"load average before {result['loadavg_before']})", "",
             f"{a['burst']:,} records produced at once into {a['partitions']} partitions of an idle share group; "
             f"the handler sleeps {a['handler_ms']:g} ms per record; pool {a['min_workers']}..{a['max_workers']} "
             f"workers, lag target {a['lag_target_s']:g} s, sampled every {a['interval_s']:g} s.", "",
             "| burst records | one worker would take s | lag target s | first scale-up after s | peak workers "
             "| peak after s | drained after s | back to min after s | records seen twice | acknowledgement errors |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| {a['burst']:,} | {fmt(s['one_worker_s'])} | {fmt(s['lag_target_s'])} | {fmt(s['scale_up_after_s'])} "
             f"| {s['peak_workers']} | {fmt(s['peak_after_s'])} | {fmt(s['drain_s'])} | {fmt(s['back_to_min_after_s'])} "
             f"| {result['redelivered']} | {result['final']['ack_errors']} |", "",
             "Times count from the burst. Drained: lag 0 (DescribeShareGroupOffsets) with every record accepted.",
             "", "Over time (every 5th sample):", "",
             "| t s | lag | workers | draining | records/s | handler ms |", "|---:|---:|---:|---:|---:|---:|"]
    for x in result["samples"][::5]:
        lines.append(f"| {x['time_s'] - result['burst_at_s']:.0f} | {fmt(x['lag'])} | {x['workers']} | "
                     f"{x['draining']} | {x['rate']:.0f} | {fmt(x['handler_time_ms'])} |")
    (out / "worker_pool.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        t = [x["time_s"] - result["burst_at_s"] for x in result["samples"]]
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
        top.plot(t, [x["lag"] if x["lag"] is not None else float("nan") for x in result["samples"]], color="C3")
        top.axvline(a["lag_target_s"], color="grey", linestyle="--", label=f"lag target ({a['lag_target_s']:g} s)")
        top.set_ylabel("lag (records)")
        top.legend(loc="upper right")
        top.set_title(f"worker pool after a burst of {a['burst']:,} records ({a['handler_ms']:g} ms each)")
        bottom.step(t, [x["workers"] for x in result["samples"]], where="post", label="serving")
        bottom.step(t, [x["workers"] + x["draining"] for x in result["samples"]], where="post", linestyle=":",
                    label="with draining")
        bottom.set_ylabel("workers")
        bottom.set_xlabel("seconds after the burst")
        bottom.set_ylim(0, a["max_workers"] + 1)
        bottom.legend(loc="upper right")
        fig.tight_layout()
        fig.savefig(out / "worker_pool.png", dpi=110)
    except Exception as e:  # the numbers matter more than the picture
        log(f"no PNG: {e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burst", type=int, default=4000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--handler-ms", type=float, default=20.0)
    ap.add_argument("--min-workers", type=int, default=1)
    ap.add_argument("--max-workers", type=int, default=8)
    ap.add_argument("--lag-target-s", type=float, default=15.0)
    ap.add_argument("--worker-cpus", type=float, default=0.2, help="Ray CPUs per worker (the handler sleeps)")
    ap.add_argument("--interval-s", type=float, default=1.0)
    ap.add_argument("--scale-down-window-s", type=float, default=10.0)
    ap.add_argument("--scale-down-cooldown-s", type=float, default=3.0)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--tail-s", type=float, default=5.0)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--ray-cpus", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)

    import ray
    from confluent_kafka import Producer
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                       ResourceType)

    from cluster.cli import DEFAULT_LOCAL_CONFIG
    from cluster.config import load_broker_config
    from cluster.local import LocalBroker
    from cluster.workers import ShareWorkerPool

    loadavg = os.getloadavg()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    config = load_broker_config(DEFAULT_LOCAL_CONFIG, overrides=[
        f"log.dirs={tempfile.mkdtemp(prefix='kray-pool-bench-')}", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
        "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500"])
    broker = LocalBroker(config)

    @ray.remote(num_cpus=0)
    class Counts:
        def __init__(self):
            self.n = 0

        def redelivered(self):
            self.n += 1

        def get(self):
            return self.n

    try:
        bootstrap = broker.start()
        log(f"broker at {bootstrap}")
        topic, group = "bench-jobs", f"bench-pool-{int(time.time())}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
                ConfigEntry("share.auto.offset.reset", "earliest",
                            incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(30)
        counts = Counts.remote()
        pool = ShareWorkerPool(bootstrap, group, [topic], make_handler(args.handler_ms / 1000, counts),
                               min_workers=args.min_workers, max_workers=args.max_workers,
                               num_cpus=args.worker_cpus, lag_target_s=args.lag_target_s, interval_s=args.interval_s,
                               scale_down_window_s=args.scale_down_window_s,
                               scale_down_cooldown_s=args.scale_down_cooldown_s)
        pool.start()
        deadline = time.monotonic() + 60
        while pool.stats().get("lag") != 0:  # the first worker joined and the group's state exists
            if time.monotonic() > deadline:
                raise TimeoutError("the first worker did not join within 60 s")
            time.sleep(0.5)
        time.sleep(args.idle_s)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        burst_at_s = pool.stats()["time_s"] + args.interval_s / 2  # between two samples
        for i in range(args.burst):
            producer.produce(topic, key=str(i).encode(), value=b"x" * 100, partition=i % args.partitions)
        producer.flush(30)
        log(f"{args.burst:,} records produced")
        deadline, done_at = time.monotonic() + args.timeout_s, None
        while time.monotonic() < deadline:
            s = pool.stats()
            log(f"t={s['time_s'] - burst_at_s:5.1f} s lag={s['lag']} workers={s['workers']}+{s['draining']} "
                f"rate={s['rate']:.0f}/s accepted={s['accepted']}")
            if done_at is None and s["lag"] == 0 and s["accepted"] >= args.burst and \
                    s["workers"] == args.min_workers and not s["draining"]:
                done_at = time.monotonic()
            if done_at is not None and time.monotonic() - done_at >= args.tail_s:
                break
            time.sleep(args.interval_s * 2)
        final = pool.stop()
        samples = [x for x in pool.history if x["reason"] != "stopped"]
        redelivered = ray.get(counts.get.remote())
    finally:
        broker.stop()
        ray.shutdown()
    result = {
        "command": "python -m benchmarks.worker_pool " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(["kray"]), "loadavg_before": [round(x, 2) for x in loadavg],
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "burst_at_s": round(burst_at_s, 3), "summary": summarize(samples, burst_at_s, args),
        "redelivered": redelivered, "final": final, "samples": samples,
    }
    write_results(Path(args.out), result)
    log(f"summary {result['summary']}; seen twice {redelivered}")
    log(f"results in {args.out}/worker_pool.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
