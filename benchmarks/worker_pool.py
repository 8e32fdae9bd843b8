#!/usr/bin/env python3
"""A Ray worker pool's response to a load step (cluster.workers.ShareWorkerPool).

Run from the repo root:

    python -m benchmarks.worker_pool                       # defaults: about two minutes on 2 cores
    python -m benchmarks.worker_pool --burst 6000 --handler-ms 10 --max-workers 8
    python -m benchmarks.worker_pool --lag-target-s 15 20          # one run per target, one after the other

One process: Ray (--ray-cpus), a LocalBroker on it (heartbeats 1 s), a topic of --partitions
partitions and a share group at earliest. The pool starts idle with --min-workers; after
--idle-s a burst of --burst records (100-byte values) is produced at once. The handler sleeps
--handler-ms per record, so one worker drains the burst in burst x handler time; the pool is asked
to drain it within --lag-target-s (several: one run each, a new topic and group each). Its stats() are sampled every --interval-s (lag from
DescribeShareGroupOffsets, workers serving and draining, records/s) until the lag is 0 and the pool
is back at --min-workers, then --tail-s more.

Reported: time from the burst to the first scale-up and to the peak, the peak workers, the drain
time (burst to lag 0) beside the target and beside one worker's time, time back to min workers,
and what the handler saw more than once (redeliveries: 0 expected, scale-down drains cleanly).
Beside them, what the pool measured and planned with: a new worker's start-up (ask -> first
records) and the records/s one busy worker finished, and from those the best drain this machine
allows with --max-workers (min workers serving from the burst, the others from one start-up after
it) and the workers the target would need: whether a missed target is the policy's or the machine's.

Results: benchmarks/results/worker_pool.{json,md,png}.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
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


def capacity(burst: int, rate: float | None, start_s: float | None, warm: int, workers: int,
             target_s: float) -> tuple[float | None, int | None]:
    """The earliest drain with `workers` at `rate` records/s each, `warm` of them serving from the
    burst and the others from `start_s` after it; and the workers needed to drain within target_s."""
    if not rate or start_s is None:
        return None, None
    if warm * rate * start_s >= burst or workers <= warm:
        best = burst / (max(warm, 1) * rate)
    else:
        best = (burst + (workers - warm) * rate * start_s) / (workers * rate)
    left = burst - warm * rate * target_s
    need = warm if left <= 0 else (None if target_s <= start_s else warm + -(-left // (rate * (target_s - start_s))))
    return round(best, 1), None if need is None else int(need)


def summarize(samples: list[dict], burst_at_s: float, args, lag_target_s: float) -> dict:
    peak = max(s["workers"] + s["draining"] for s in samples)
    serving_peak = max(s["workers"] for s in samples)
    up = first_time(samples, burst_at_s, lambda s: s["workers"] > args.min_workers)
    at_peak = first_time(samples, burst_at_s, lambda s: s["workers"] == serving_peak)
    drained = first_time(samples, burst_at_s, lambda s: s["lag"] == 0 and s["accepted"] >= args.burst)
    back = first_time(samples, drained or burst_at_s,
                      lambda s: s["workers"] == args.min_workers and s["draining"] == 0) if drained else None
    rel = lambda t: None if t is None else round(t - burst_at_s, 1)  # noqa: E731
    end_s = drained if drained is not None else math.inf
    rates = sorted(s["worker_rate"] for s in samples if burst_at_s <= s["time_s"] <= end_s and s.get("worker_rate"))
    worker_rate = rates[len(rates) // 2] if rates else None  # the median of the pool's average while draining
    start_s = samples[-1].get("start_time_s") if samples and samples[-1].get("starts_timed") else None
    best, need = capacity(args.burst, worker_rate, start_s, args.min_workers, args.max_workers, lag_target_s)
    return {"scale_up_after_s": rel(up), "peak_after_s": rel(at_peak), "peak_workers": serving_peak,
            "peak_workers_with_draining": peak, "drain_s": rel(drained), "lag_target_s": lag_target_s,
            "one_worker_s": round(args.burst * args.handler_ms / 1000, 1), "back_to_min_after_s": rel(back),
            "start_time_s": None if start_s is None else round(start_s, 2),
            "starts_timed": samples[-1].get("starts_timed", 0) if samples else 0,
            "worker_rate": worker_rate, "handler_worker_rate": round(1000 / args.handler_ms, 1),
            "best_drain_s": best, "workers_needed_for_target": need}


def write_results(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "worker_pool.json").write_text(json.dumps(result, indent=2) + "\n")
    a, runs = result["settings"], result["runs"]
    fmt = lambda v: "–" if v is None else f"{v:g}" if isinstance(v, (int, float)) else str(v)  # noqa: E731
    lines = ["# Ray worker pool: response to a load step", "",
             f"`{result['command']}` ({result['date']}; {result['machine']['nproc']} cores, "
             f"load average before {result['loadavg_before']}, after {result.get('loadavg_after')})", "",
             f"{a['burst']:,} records produced at once into {a['partitions']} partitions of an idle share group; "
             f"the handler sleeps {a['handler_ms']:g} ms per record; pool {a['min_workers']}..{a['max_workers']} "
             f"workers, sampled every {a['interval_s']:g} s; one run per lag target, one after the other "
             "(a topic and a group each).", "",
             "| lag target s | drained after s | best drain here s | first scale-up after s | peak workers "
             "| peak after s | back to min after s | records seen twice | acknowledgement errors | load before |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        s = r["summary"]
        lines.append(f"| {fmt(s['lag_target_s'])} | {fmt(s['drain_s'])} | {fmt(s.get('best_drain_s'))} "
                     f"| {fmt(s['scale_up_after_s'])} | {s['peak_workers']} | {fmt(s['peak_after_s'])} "
                     f"| {fmt(s['back_to_min_after_s'])} | {r['redelivered']} | {r['final']['ack_errors']} "
                     f"| {r['loadavg_before'][0]:g} |")
    lines += ["", f"Times count from the burst; one worker would take {fmt(runs[0]['summary']['one_worker_s'])} s. "
              "Drained: lag 0 (DescribeShareGroupOffsets) with every record accepted.", "",
              "What the pool measured, and what that allows on this machine:", "",
              "| lag target s | new worker's start-up s (starts timed) | records/s per busy worker (handler allows) "
              f"| best drain with {a['max_workers']} workers s | workers the target needs |",
              "|---:|---:|---:|---:|---:|"]
    for r in runs:
        s = r["summary"]
        lines.append(f"| {fmt(s['lag_target_s'])} | {fmt(s.get('start_time_s'))} ({s.get('starts_timed', 0)}) "
                     f"| {fmt(s.get('worker_rate'))} ({fmt(s.get('handler_worker_rate'))}) "
                     f"| {fmt(s.get('best_drain_s'))} | {fmt(s.get('workers_needed_for_target'))} |")
    lines += ["", f"Best drain: {a['min_workers']} worker(s) serving from the burst, the others from one measured "
              "start-up after it, all at the measured per-busy-worker rate (the median of the pool's average while "
              "draining), the decision itself taking no time. Workers the target needs: the same arithmetic "
              "solved for the workers."]
    for r in runs:
        lines += ["", f"Lag target {r['summary']['lag_target_s']:g} s over time (every 3rd sample):", "",
                  "| t s | lag | workers | draining | desired | records/s | per busy worker | start-up s | why |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for x in r["samples"][::3]:
            lines.append(f"| {x['time_s'] - r['burst_at_s']:.0f} | {fmt(x['lag'])} | {x['workers']} | "
                         f"{x['draining']} | {fmt(x.get('desired'))} | {x['rate']:.0f} | {fmt(x.get('worker_rate'))} "
                         f"| {fmt(x.get('start_time_s'))} | {x.get('reason', '')} |")
    (out / "worker_pool.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, len(runs), figsize=(6.5 * len(runs), 5.5), sharex="col", squeeze=False)
        for i, r in enumerate(runs):
            top, bottom, s = axes[0][i], axes[1][i], r["summary"]
            t = [x["time_s"] - r["burst_at_s"] for x in r["samples"]]
            top.plot(t, [x["lag"] if x["lag"] is not None else float("nan") for x in r["samples"]], color="C3",
                     label="lag")
            top.axvline(s["lag_target_s"], color="grey", linestyle="--", label=f"lag target ({s['lag_target_s']:g} s)")
            if s.get("best_drain_s"):
                top.axvline(s["best_drain_s"], color="C2", linestyle=":",
                            label=f"best with {a['max_workers']} workers here ({s['best_drain_s']:g} s)")
            if s.get("drain_s") is not None:
                top.axvline(s["drain_s"], color="C3", linestyle="-.", label=f"drained ({s['drain_s']:g} s)")
            top.set_ylabel("lag (records)")
            top.legend(loc="upper right", fontsize=8)
            top.set_title(f"{a['burst']:,} records x {a['handler_ms']:g} ms, target {s['lag_target_s']:g} s",
                          fontsize=10)
            bottom.step(t, [x["workers"] for x in r["samples"]], where="post", label="serving")
            bottom.step(t, [x["workers"] + x["draining"] for x in r["samples"]], where="post", linestyle=":",
                        label="with draining")
            bottom.set_ylabel("workers")
            bottom.set_xlabel("seconds after the burst")
            bottom.set_ylim(0, a["max_workers"] + 1)
            bottom.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "worker_pool.png", dpi=110)
    except Exception as e:  # the numbers matter more than the picture
        log(f"no PNG: {e}")


def without_out(argv: list[str]) -> list[str]:
    """The command line minus --out (where the results went is no setting of the run)."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            kept.append(a)
    return kept


def run_once(args, bootstrap: str, lag_target_s: float, counts) -> dict:
    """One load step against a new topic and group; its samples and summary."""
    import ray
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    from cluster.workers import ShareWorkerPool

    loadavg = [round(x, 2) for x in os.getloadavg()]
    stamp = f"{int(time.time())}-{lag_target_s:g}"
    topic, group = f"bench-jobs-{stamp}", f"bench-pool-{stamp}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    pool = ShareWorkerPool(bootstrap, group, [topic], make_handler(args.handler_ms / 1000, counts),
                           min_workers=args.min_workers, max_workers=args.max_workers,
                           num_cpus=args.worker_cpus, lag_target_s=lag_target_s, interval_s=args.interval_s,
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
    log(f"{args.burst:,} records produced (lag target {lag_target_s:g} s)")
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
    return {"lag_target_s": lag_target_s, "loadavg_before": loadavg, "burst_at_s": round(burst_at_s, 3),
            "summary": summarize(samples, burst_at_s, args, lag_target_s),
            "redelivered": ray.get(counts.get.remote()), "final": final, "samples": samples}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burst", type=int, default=4000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--handler-ms", type=float, default=20.0)
    ap.add_argument("--min-workers", type=int, default=1)
    ap.add_argument("--max-workers", type=int, default=8)
    ap.add_argument("--lag-target-s", type=float, nargs="+", default=[15.0],
                    help="one run per target, one after the other")
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

    from cluster.cli import DEFAULT_LOCAL_CONFIG
    from cluster.config import load_broker_config
    from cluster.local import LocalBroker

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

    runs = []
    try:
        bootstrap = broker.start()
        log(f"broker at {bootstrap}")
        for target_s in args.lag_target_s:
            runs.append(run_once(args, bootstrap, target_s, Counts.remote()))
    finally:
        broker.stop()
        ray.shutdown()
    result = {
        "command": "python -m benchmarks.worker_pool " + shlex.join(without_out(argv if argv is not None else sys.argv[1:])),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(["kray"]), "loadavg_before": [round(x, 2) for x in loadavg],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "settings": {k: v for k, v in vars(args).items() if k != "out"}, "runs": runs,
    }
    write_results(Path(args.out), result)
    for r in runs:
        log(f"summary {r['summary']}; seen twice {r['redelivered']}")
    log(f"results in {args.out}/worker_pool.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
