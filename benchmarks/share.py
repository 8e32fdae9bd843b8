#!/usr/bin/env python3
"""Share-group (KIP-932) benchmark for Kray: share consumption vs plain fetch, and scaling past
the partition count.

Run from the repo root:

    python -m benchmarks.share                            # defaults: a few minutes on 2 cores
    python -m benchmarks.share --records 50000 --scale-consumers 1,2,4

One `kray start` (on a free 127.0.0.1 port, with share heartbeats shortened to 1 s so that joining
a group takes ~1 s, not ~5 s), then:

1. Share vs plain fetch. A topic with --partitions partitions gets --records keyed records
   (keys "0".."N-1", random values of --record-size bytes) from one confluent-kafka producer
   (linger.ms=5, batch.size=1 MiB, batch.num.messages=--batch-num-messages: a share-partition
   leader acquires whole log batches, so the batch size is the unit of work distribution).
   (a) Plain fetch: one Consumer, assign() from offset 0, reads all N (benchmarks.throughput's
   fetch worker).  (b) Share consume: --consumers ShareConsumers (default: one per partition),
   each in its own process, one fresh share group with share.auto.offset.reset=earliest set first
   (IncrementalAlterConfigs on the GROUP resource) and its share-partitions initialized at the
   earliest offsets by `kray share-groups --reset-offsets --execute` before anyone joins (so every
   member is assigned on its first heartbeat), share.acknowledgement.mode=implicit; they poll
   until the group has seen N distinct keys (a shared counter), then commit_sync() and close().
   Throughput counts from the first record any member received to the moment the N-th distinct
   key arrived; the time from subscribe() to the first record (join + assignment) is reported
   apart.  Every key is counted: missing keys and duplicate deliveries are reported (share groups
   are at-least-once; with no failures there should be none).  Finally a fresh member of the same
   group polls for --drain-check-s seconds: it must get nothing (every acknowledgement landed).
2. Scaling. For each C in --scale-consumers: a fresh topic with --scale-partitions partitions,
   C share consumers (processes, explicit ACCEPT per record) join and poll the empty topic for
   --scale-warmup-s, then --scale-records records are produced in small batches
   (batch.num.messages=--scale-batch-num-messages) and each record costs --scale-delay-ms of
   simulated processing (time.sleep).  Records/s from the first record received to the last one
   processed; the ideal is C / delay.

Results: benchmarks/results/share.{json,md,png} (see --out).  Every phase has a timeout; kray and
every child process are always stopped at the end.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import queue
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.throughput import (MB, MIB, REPO, HERE, fmt, free_port, kray_bin, log, machine_info,  # noqa: E402
                                   make_kray, run_worker)

_BROKER_CPU = None  # set by main(): the broker process tree's CPU seconds so far


def broker_cpu() -> float | None:
    return _BROKER_CPU() if _BROKER_CPU else None


def with_broker_cpu(res: dict, cpu0: float | None) -> dict:
    cpu1 = broker_cpu()
    if cpu0 is not None and cpu1 is not None:
        res["broker_cpu_s"] = round(cpu1 - cpu0, 2)
    return res


SHARE_OVERRIDES = ["group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500"]


# --------------------------------------------------------------------------------------------
# Child processes (multiprocessing, spawn).  They report through `events`: (kind, idx, dict)
# with kind in progress / result / error.
# --------------------------------------------------------------------------------------------

def _cpu_self() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _child(fn, idx, events, *a):
    try:
        events.put(("result", idx, fn(idx, events, *a)))
    except BaseException as e:  # noqa: BLE001 - report, the parent decides
        events.put(("error", idx, {"error": f"{type(e).__name__}: {e}",
                                   "where": traceback.format_exc().strip().splitlines()[-3:]}))


def produce_keyed(idx, events, p: dict) -> dict:
    """Records with keys b"0".."N-1" (round-robin over partitions), random values from a pool."""
    from confluent_kafka import Producer

    topic, n, size, parts = p["topic"], p["records"], p["size"], p["partitions"]
    deadline = time.monotonic() + p["timeout"]
    state = {"ok": 0, "err": 0, "first_err": None}

    def on_dr(err, msg):
        if err is None:
            state["ok"] += 1
        else:
            state["err"] += 1
            state["first_err"] = state["first_err"] or str(err)

    prod = Producer({"bootstrap.servers": p["bootstrap"], "acks": p["acks"], "linger.ms": p["linger_ms"],
                     "batch.size": p["batch_size"], "batch.num.messages": p["batch_num_messages"],
                     "compression.type": "none", "enable.idempotence": False,
                     "queue.buffering.max.kbytes": 16 * 1024, "queue.buffering.max.messages": 1_000_000,
                     "message.timeout.ms": int(p["timeout"] * 1000), "on_delivery": on_dr})
    prod.list_topics(topic=topic, timeout=30)
    rng = random.Random(0x5EED)
    pool = [rng.randbytes(size) for _ in range(1024)]
    cpu0, t0 = _cpu_self(), time.perf_counter()
    next_report = time.monotonic() + p["progress_every"]
    i = 0
    while i < n:
        try:
            prod.produce(topic, pool[i & 1023], key=b"%d" % i, partition=i % parts)
        except BufferError:
            prod.poll(0.01)
            continue
        i += 1
        if (i & 1023) == 0:
            prod.poll(0)
            now = time.monotonic()
            if now >= next_report:
                events.put(("progress", idx, {"msg": f"sent {i}/{n}, acked {state['ok']}"}))
                next_report = now + p["progress_every"]
            if now > deadline:
                raise TimeoutError(f"produce timed out after {i} records")
    while prod.flush(1.0):
        if time.monotonic() > deadline:
            raise TimeoutError("flush timed out")
    wall = time.perf_counter() - t0
    if state["err"] or state["ok"] != n:
        raise RuntimeError(f"delivered {state['ok']}/{n}, {state['err']} errors, first: {state['first_err']}")
    return {"records": n, "bytes": n * size, "wall_s": round(wall, 3), "rec_s": round(n / wall, 1),
            "mb_s": round(n * size / wall / MB, 2), "client_cpu_s": round(_cpu_self() - cpu0, 2)}


class ClientLog:
    """librdkafka's log lines (config "logger"): counted instead of printed; the share consumer's
    "Preview" warning is dropped.  Disconnects and request failures are what we look for."""

    def __init__(self, name: str):
        import logging

        class _H(logging.Handler):
            def emit(h, rec):  # noqa: N805
                self.on(rec.getMessage())

        self.lines: list[str] = []
        self.disconnects = self.request_errors = 0
        self.logger = logging.getLogger(name)
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(_H())

    def on(self, msg: str) -> None:
        if "Preview" in msg:
            return
        if "Disconnected" in msg:
            self.disconnects += 1
        elif "reply error" in msg or "failed" in msg.lower():
            self.request_errors += 1
        if len(self.lines) < 10:
            self.lines.append(msg)

    def report(self) -> dict:
        return {"disconnects": self.disconnects, "request_errors": self.request_errors, "log_sample": self.lines}


def share_consume(idx, events, p: dict, counts, distinct, lock, stop, barrier) -> dict:
    """One share-group member: poll until the group has seen p["records"] distinct keys."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    n, explicit, delay = p["records"], p["ack_mode"] == "explicit", p["delay_s"]
    clog = ClientLog(f"share-{idx}")
    conf = {"bootstrap.servers": p["bootstrap"], "group.id": p["group"], "client.id": f"share-bench-{idx}",
            "share.acknowledgement.mode": p["ack_mode"], "logger": clog.logger}
    if p.get("max_poll_records"):
        conf["max.poll.records"] = p["max_poll_records"]
    c = ShareConsumer(conf)
    mono = time.monotonic
    deliveries = new = nbytes = errors = polls = empty_polls = redelivered = 0
    first_err = None
    t_first = t_last_new = t_done = None
    try:
        barrier.wait(p["barrier_timeout"])
        deadline = mono() + p["timeout"]
        t_sub = mono()
        c.subscribe([p["topic"]])
        cpu0 = _cpu_self()
        while not stop.value and distinct.value < n:
            if mono() > deadline:
                raise TimeoutError(f"member {idx}: {distinct.value}/{n} distinct records after {p['timeout']:.0f}s")
            msgs = c.poll(p["poll_timeout"])
            polls += 1
            t_recv = mono()
            keys = []
            for m in msgs:
                if m.error() is not None:
                    errors += 1
                    first_err = first_err or str(m.error())
                    continue
                keys.append(int(m.key()))
                nbytes += len(m.value())
                if m.delivery_count() > 1:
                    redelivered += 1
                if delay:
                    time.sleep(delay)
                if explicit:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            if not keys:
                empty_polls += 1
                continue
            if t_first is None:
                t_first = t_recv
            deliveries += len(keys)
            fresh = 0
            with lock:
                for k in keys:
                    v = counts[k]
                    counts[k] = v + 1
                    if v == 0:
                        fresh += 1
                if fresh:
                    distinct.value += fresh
                    t_last_new = mono()
                    if distinct.value >= n:
                        t_done = t_last_new
            new += fresh
        cpu = _cpu_self() - cpu0
        t0 = mono()
        commit = c.commit_sync(30)  # implicit: accepts the last poll; explicit: sends pending ACCEPTs
        commit_errors = {f"{tp.topic}[{tp.partition}]": str(e) for tp, e in (commit or {}).items() if e is not None}
        commit_s = mono() - t0
    finally:
        t0 = mono()
        c.close()
        close_s = mono() - t0
    return {"member": idx, "deliveries": deliveries, "new": new, "bytes": nbytes, "errors": errors,
            "redelivered": redelivered, **clog.report(),
            "first_error": first_err, "polls": polls, "empty_polls": empty_polls, "t_sub": t_sub,
            "t_first": t_first, "t_last_new": t_last_new, "t_done": t_done,
            "first_record_s": None if t_first is None else round(t_first - t_sub, 3),
            "client_cpu_s": round(cpu, 2), "commit_s": round(commit_s, 3), "close_s": round(close_s, 3),
            "commit_errors": commit_errors}


def drain_check(idx, events, p: dict) -> dict:
    """A fresh member of the group polls for a while; it should get nothing."""
    from confluent_kafka import ShareConsumer
    clog = ClientLog("drain")
    c = ShareConsumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"],
                       "share.acknowledgement.mode": "implicit", "logger": clog.logger})
    got = errors = 0
    keys = []
    try:
        c.subscribe([p["topic"]])
        end = time.monotonic() + p["seconds"]
        while time.monotonic() < end:
            for m in c.poll(0.5):
                if m.error() is None:
                    got += 1
                    if len(keys) < 20:
                        keys.append(int(m.key()))
                else:
                    errors += 1
        c.commit_sync(30)
    finally:
        c.close()
    return {"redelivered": got, "sample_keys": keys, "errors": errors, "seconds": p["seconds"], **clog.report()}


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------

class Procs:
    """A set of spawned children reporting on one queue; always killed (by pid) when done."""

    def __init__(self, ctx, label: str, fn, n: int, *args):
        self.label, self.events = label, ctx.Queue()
        self.procs = [ctx.Process(target=_child, args=(fn, i, self.events, *args), daemon=True,
                                  name=f"{label}-{i}") for i in range(n)]
        for pr in self.procs:
            pr.start()

    def collect(self, timeout: float, progress=None, every: float = 3.0, stall=None) -> list[dict]:
        """Results by index; raise on a child error, a timeout, or stall() returning a message."""
        deadline = time.monotonic() + timeout
        results: dict[int, dict] = {}
        next_report = time.monotonic() + every
        while len(results) < len(self.procs):
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{self.label}: {len(results)}/{len(self.procs)} results after {timeout:.0f}s")
            try:
                kind, idx, body = self.events.get(timeout=0.2)
            except queue.Empty:
                kind = None
            if kind == "result":
                results[idx] = body
            elif kind == "error":
                raise RuntimeError(f"{self.label}[{idx}]: {body['error']}")
            elif kind == "progress":
                log(f"{self.label}[{idx}]: {body['msg']}")
            if kind is None:
                dead = [pr for i, pr in enumerate(self.procs) if i not in results and not pr.is_alive()
                        and pr.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"{self.label}: child {dead[0].name} died with exit code {dead[0].exitcode}")
            if now >= next_report:
                next_report = now + every
                if progress:
                    log(f"{self.label}: {progress()}")
                if stall:
                    msg = stall()
                    if msg:
                        raise TimeoutError(f"{self.label}: {msg}")
        return [results[i] for i in range(len(self.procs))]

    def close(self, grace: float = 10.0) -> None:
        end = time.monotonic() + grace
        for pr in self.procs:
            pr.join(max(0.0, end - time.monotonic()))
        for pr in self.procs:
            if pr.is_alive():
                log(f"{self.label}: killing {pr.name} (pid {pr.pid})")
                pr.kill()
                pr.join(5)


def run_one(ctx, label: str, fn, params: dict, timeout: float, every: float) -> dict:
    procs = Procs(ctx, label, fn, 1, params)
    try:
        return procs.collect(timeout + 15, every=every)[0]
    finally:
        procs.close()


def admin_setup(bootstrap: str, topic: str, partitions: int, group: str | None, timeout: float) -> None:
    """Create the topic, wait for leaders, set share.auto.offset.reset=earliest on the group."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                       ResourceType)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                 operation_timeout=30, request_timeout=60).values():
        f.result(timeout=timeout)
    while True:
        md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and \
                all(pm.leader >= 0 for pm in md.partitions.values()):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic}: metadata not ready after {timeout:.0f}s")
        time.sleep(0.2)
    if group:
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(timeout=timeout)


def count_report(counts, n: int) -> dict:
    missing = dup_records = dup_deliveries = 0
    for v in counts:
        if v == 0:
            missing += 1
        elif v > 1:
            dup_records += 1
            dup_deliveries += v - 1
    return {"missing": missing, "duplicated_records": dup_records, "duplicate_deliveries": dup_deliveries,
            "exactly_once": missing == 0 and dup_deliveries == 0}


def run_share_group(ctx, bootstrap: str, label: str, topic: str, group: str, n: int, consumers: int,
                    ack_mode: str, delay_s: float, args, before_collect=None) -> dict:
    """C members in C processes consume until n distinct keys; returns aggregate + per member."""
    counts = ctx.RawArray("H", n)
    distinct = ctx.RawValue("q", 0)
    stop = ctx.RawValue("i", 0)
    lock = ctx.Lock()
    barrier = ctx.Barrier(consumers + 1)
    params = {"bootstrap": bootstrap, "topic": topic, "group": group, "records": n, "ack_mode": ack_mode,
              "delay_s": delay_s, "poll_timeout": 0.25, "timeout": args.phase_timeout,
              "barrier_timeout": 120, "max_poll_records": args.max_poll_records}
    procs = Procs(ctx, label, share_consume, consumers, params, counts, distinct, lock, stop, barrier)
    try:
        barrier.wait(120)  # every member has its ShareConsumer; they subscribe now
        t_go = time.monotonic()
        cpu0 = broker_cpu()
        extra = before_collect() if before_collect else {}
        last = {"v": -1, "t": time.monotonic()}

        def progress():
            el = time.monotonic() - t_go
            return f"{distinct.value:,}/{n:,} distinct records, t={el:.1f}s"

        def stall():
            v = distinct.value
            if v != last["v"]:
                last.update(v=v, t=time.monotonic())
            elif time.monotonic() - last["t"] > args.stall_timeout:
                return f"stalled at {v:,}/{n:,} distinct records for {args.stall_timeout:.0f}s"
            return None

        try:
            members = procs.collect(args.phase_timeout + 45, progress, args.progress_every, stall)
            cpu1 = broker_cpu()
        except BaseException:
            stop.value = 1  # let members commit and close; Procs.close() kills what does not exit
            raise
    finally:
        procs.close(grace=35)
    firsts = [m["t_first"] for m in members if m["t_first"] is not None]
    dones = [m["t_done"] for m in members if m["t_done"] is not None]
    t_first, t_done = min(firsts), (dones[0] if dones else max(m["t_last_new"] or 0 for m in members))
    wall = t_done - t_first
    size = args.record_size
    out = {"topic": topic, "group": group, "consumers": consumers, "ack_mode": ack_mode,
           "delay_ms": delay_s * 1000, "records": n, "wall_s": round(wall, 3),
           "rec_s": round(n / wall, 1) if wall > 0 else None,
           "mb_s": round(n * size / wall / MB, 2) if wall > 0 else None,
           "first_record_s": round(t_first - t_go, 3),
           "all_members_busy_s": round(max(firsts) - t_go, 3) if len(firsts) == consumers else None,
           "deliveries": sum(m["deliveries"] for m in members),
           "per_member_records": [m["deliveries"] for m in members],
           "members_with_work": len(firsts), "errors": sum(m["errors"] for m in members),
           "delivery_count_gt1": sum(m["redelivered"] for m in members),
           "client_disconnects": sum(m["disconnects"] for m in members),
           "client_request_errors": sum(m["request_errors"] for m in members),
           "commit_errors": {k: v for m in members for k, v in m["commit_errors"].items()},
           "client_cpu_s": round(sum(m["client_cpu_s"] for m in members), 2),
           "broker_cpu_s": round(cpu1 - cpu0, 2) if cpu0 is not None else None,
           "phase_s": round(max(m["t_done"] or m["t_last_new"] or 0 for m in members) - t_go, 2),
           **count_report(counts, n), **extra}
    for m in members:
        for k in ("t_sub", "t_first", "t_last_new", "t_done"):
            m[k] = None if m[k] is None else round(m[k] - t_go, 3)
    out["members"] = members
    return out


def produce_inline(bootstrap: str, topic: str, n: int, parts: int, size: int, batch_num: int) -> float:
    """Small produce from the parent (scaling phase); returns the wall time."""
    from confluent_kafka import Producer
    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": batch_num,
                     "acks": "1", "compression.type": "none", "enable.idempotence": False})
    value = random.Random(1).randbytes(size)
    t0 = time.monotonic()
    for i in range(n):
        prod.produce(topic, value, key=b"%d" % i, partition=i % parts)
        if (i & 255) == 0:
            prod.poll(0)
    left = prod.flush(60)
    if left:
        raise RuntimeError(f"scaling produce: {left} records not delivered")
    return time.monotonic() - t0


def phase_first_group(ctx, bootstrap: str, args, stamp: str, res: dict) -> None:
    """The first share group on a fresh broker (its coordinators' first group: the internal topics
    exist from the start), timed apart, once."""
    topic = group = f"share-first-{stamp}"
    log(f"phase 0: first share group on this broker (1 record on topic {topic})")
    admin_setup(bootstrap, topic, 1, group, args.phase_timeout)
    produce_inline(bootstrap, topic, 1, 1, args.record_size, 1)
    r = run_share_group(ctx, bootstrap, "first group", topic, group, 1, 1, "implicit", 0.0, args)
    res["first_group"] = {k: r[k] for k in ("topic", "first_record_s", "missing", "duplicate_deliveries",
                                            "client_disconnects", "client_request_errors")}
    log(f"first share group: first record {r['first_record_s']}s after subscribe()")


def phase_share_vs_fetch(ctx, bootstrap: str, args, stamp: str, res: dict) -> None:
    topic = f"share-bench-{stamp}"
    group = f"share-bench-{stamp}"
    log(f"phase 1: topic {topic} ({args.partitions} partitions), {args.records:,} x {args.record_size} B, "
        f"batch.num.messages={args.batch_num_messages}")
    admin_setup(bootstrap, topic, args.partitions, group, args.phase_timeout)
    cpu0 = broker_cpu()
    res["produce"] = run_one(ctx, "produce", produce_keyed, {
        "bootstrap": bootstrap, "topic": topic, "records": args.records, "size": args.record_size,
        "partitions": args.partitions, "acks": args.acks, "linger_ms": args.linger_ms,
        "batch_size": args.batch_size, "batch_num_messages": args.batch_num_messages,
        "timeout": args.phase_timeout, "progress_every": args.progress_every}, args.phase_timeout, args.progress_every)
    p = with_broker_cpu(res["produce"], cpu0)
    log(f"produce: {p['rec_s']:,.0f} rec/s, {p['mb_s']} MB/s in {p['wall_s']}s")

    log(f"phase 1a: plain fetch (one Consumer, assign() from offset 0)")
    cpu0 = broker_cpu()
    res["plain_fetch"] = run_worker({
        "phase": "fetch", "bootstrap": bootstrap, "topic": topic, "records": args.records,
        "size": args.record_size, "partitions": args.partitions, "timeout": args.phase_timeout,
        "stall_timeout": args.stall_timeout, "progress_every": args.progress_every,
        "group": f"plain-{stamp}", "fetch_max_bytes": 50 * MIB, "max_partition_fetch_bytes": 4 * MIB,
        "queued_kbytes": 256 * 1024}, args.phase_timeout, "plain fetch")
    f = with_broker_cpu(res["plain_fetch"], cpu0)
    log(f"plain fetch: {f['rec_s']:,.0f} rec/s, {f['mb_s']} MB/s in {f['wall_s']}s, broker CPU {f.get('broker_cpu_s')}s")

    # KIP-932: resetting offsets may initialize a share group. Done before anyone joins, every member
    # is assigned on its first heartbeat; otherwise the first heartbeats start the initialization
    # and some members wait up to a heartbeat interval for their partitions, which this phase
    # would count against consumption throughput (time to first record reports joining apart).
    reset = subprocess.run([kray_bin(args.kray_bin), "share-groups", "--bootstrap-server", bootstrap, "--reset-offsets",
                            "--group", group, "--topic", topic, "--to-earliest", "--execute"],
                           capture_output=True, text=True, timeout=120)
    if reset.returncode != 0:
        raise RuntimeError(f"kray share-groups --reset-offsets failed: {reset.stdout}{reset.stderr}")
    log(f"group {group} initialized at the earliest offsets (kray share-groups --reset-offsets --execute)")

    c = args.consumers or args.partitions
    log(f"phase 1b: share consume, {c} ShareConsumer process(es), group {group}, "
        f"share.acknowledgement.mode={args.ack_mode}")
    s = run_share_group(ctx, bootstrap, "share", topic, group, args.records, c, args.ack_mode, 0.0, args)
    res["share"] = s
    log(f"share: {s['rec_s']:,.0f} rec/s, {s['mb_s']} MB/s in {s['wall_s']}s; first record after "
        f"{s['first_record_s']}s; per member {s['per_member_records']}; missing {s['missing']}, "
        f"duplicate deliveries {s['duplicate_deliveries']}, delivery count > 1: {s['delivery_count_gt1']}, "
        f"client-seen disconnects {s['client_disconnects']}; broker CPU {s['broker_cpu_s']}s over "
        f"{s['phase_s']}s (join included), client CPU {s['client_cpu_s']}s")
    if args.drain_check_s > 0:
        log(f"drain check: a fresh member of {group} polls for {args.drain_check_s:.0f}s")
        d = run_one(ctx, "drain-check", drain_check, {"bootstrap": bootstrap, "topic": topic, "group": group,
                                                       "seconds": args.drain_check_s},
                    args.drain_check_s + 60, args.progress_every)
        s["drain_check"] = d
        log(f"drain check: {d['redelivered']} record(s) redelivered {d['sample_keys'][:10]}")


def phase_scaling(ctx, bootstrap: str, args, stamp: str, res: dict) -> None:
    runs = res.setdefault("scaling", [])
    delay = args.scale_delay_ms / 1000
    for c in args.scale_consumers:
        topic = group = f"share-scale-{stamp}-c{c}"
        log(f"phase 2: C={c}: topic {topic} ({args.scale_partitions} partitions), {args.scale_records:,} records, "
            f"{args.scale_delay_ms} ms/record, ack mode {args.scale_ack_mode}")
        admin_setup(bootstrap, topic, args.scale_partitions, group, args.phase_timeout)

        def warm_then_produce():
            log(f"scale C={c}: members joining; producing after {args.scale_warmup_s:.0f}s warm-up")
            time.sleep(args.scale_warmup_s)
            t = produce_inline(bootstrap, topic, args.scale_records, args.scale_partitions, args.record_size,
                               args.scale_batch_num_messages)
            return {"produce_s": round(t, 3)}

        try:
            r = run_share_group(ctx, bootstrap, f"scale C={c}", topic, group, args.scale_records, c,
                                args.scale_ack_mode, delay, args, before_collect=warm_then_produce)
        except Exception as e:
            log(f"scale C={c}: FAILED: {e}")
            runs.append({"consumers": c, "error": str(e)})
            continue
        r["ideal_rec_s"] = round(c / delay, 1) if delay else None
        runs.append(r)
        log(f"scale C={c}: {r['rec_s']:,.0f} rec/s (ideal {r['ideal_rec_s']}) in {r['wall_s']}s; per member "
            f"{r['per_member_records']}; missing {r['missing']}, duplicates {r['duplicate_deliveries']}, "
            f"delivery count > 1: {r['delivery_count_gt1']}, client-seen disconnects {r['client_disconnects']}")


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def write_outputs(doc: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "share.json").write_text(json.dumps(doc, indent=2) + "\n")
    m, w, r, b = doc["machine"], doc["workload"], doc["results"], doc.get("broker", {})
    lines = ["# Kray share-group benchmark", "",
             f"{doc['date']} · {m['nproc']} CPU ({m['cpu']}), {m['mem_gib']} GiB RAM · confluent-kafka "
             f"{m.get('confluent_kafka')} / librdkafka {m.get('librdkafka')} · Python {m['python']} · "
             f"git {m.get('git_commit')} · load average (1/5/15 min) {m.get('loadavg_start')} at start, "
             f"{m.get('loadavg_end')} at end", "",
             f"One `kray start` on 127.0.0.1 with `{' '.join('--override ' + o for o in doc['kray_overrides'])}` "
             f"(share heartbeat 1 s instead of Kray's default 5 s, so joining a group takes ~1 s). "
             f"Broker peak RSS {fmt(b.get('peak_rss_mib'))} MiB (idle {fmt(b.get('idle_rss_mib'))} MiB) "
             f"over up to {fmt(b.get('processes'))} processes (the broker's process tree). "
             f"MB = 10⁶ B of record values.", ""]
    f, s, p = r.get("plain_fetch"), r.get("share"), r.get("produce")
    lines += [f"## Share consumption vs plain fetch", "",
              f"{w['records']:,} records × {w['record_size']} B, keys 0..N-1, {w['partitions']} partitions, "
              f"produced once (linger.ms={w['linger_ms']}, batch.size={w['batch_size']}, "
              f"batch.num.messages={w['batch_num_messages']}"
              + (f": {p['rec_s']:,.0f} rec/s, {p['mb_s']} MB/s" if p else "") + "). "
              f"Plain fetch: one Consumer, assign() from offset 0. Share: {w['consumers']} ShareConsumer "
              f"processes, one fresh group (share.auto.offset.reset=earliest), initialized at the earliest offsets "
              f"by `kray share-groups --reset-offsets --to-earliest --execute` before the members join, "
              f"share.acknowledgement.mode={w['ack_mode']}; rate from the first record received to the "
              f"N-th distinct one.", "",
              "| mode | consumers | records/s | MB/s | wall s | time to first record s | per-consumer records | missing | duplicate deliveries | delivery count > 1 | client-seen disconnects | broker CPU s |",
              "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    if f:
        lines.append(f"| plain fetch (assign) | 1 | {fmt(f['rec_s'], 0)} | {fmt(f['mb_s'])} | {fmt(f['wall_s'], 2)} "
                     f"| – | – | – | – | – | – | {fmt(f.get('broker_cpu_s'), 2)} |")
    if s:
        lines.append(f"| share group ({s['ack_mode']} ack) | {s['consumers']} | {fmt(s['rec_s'], 0)} | {fmt(s['mb_s'])} "
                     f"| {fmt(s['wall_s'], 2)} | {fmt(s['first_record_s'], 2)} "
                     f"| {', '.join(f'{x:,}' for x in s['per_member_records'])} | {s['missing']} "
                     f"| {s['duplicate_deliveries']} | {s['delivery_count_gt1']} | {s['client_disconnects']} "
                     f"| {fmt(s.get('broker_cpu_s'), 2)} |")
    if f and s:
        lines += ["", f"Share / plain fetch: **{s['rec_s'] / f['rec_s']:.2f}×** records/s. "
                      f"Time to first record = subscribe() → first record (group join + assignment + first "
                      f"ShareFetch); all members had records after {fmt(s.get('all_members_busy_s'), 2)} s."]
    fg = r.get("first_group")
    if fg:
        lines.append(f"The very first share group on the fresh broker (1 record, measured before this table) "
                     f"waited {fmt(fg['first_record_s'], 2)} s for its first record (the internal topics exist from "
                     f"`kray start` on; the join waits for the group's first heartbeat interval).")
    if s:
        d = s.get("drain_check")
        if d:
            lines.append(f"Drain check: a fresh member of the group polled {d['seconds']:.0f} s afterwards and got "
                         f"{d['redelivered']} record(s).")
        lines.append("Delivery count > 1 = records delivered again after a release (lock expiry, member or "
                     "connection gone); client-seen disconnects = librdkafka \"Disconnected\" log lines in the "
                     "share consumers; broker CPU = CPU seconds of the broker's process tree during the phase "
                     "(for share groups: from subscribe() to the last member's result, join and close included).")
    for key in ("phase1_error",):
        if doc.get(key):
            lines += ["", f"**Phase 1 FAILED**: {doc[key]}"]
    sc = r.get("scaling") or []
    lines += ["", "## Scaling past the partition count", "",
              f"{w['scale_partitions']} partitions, {w['scale_records']:,} records per run "
              f"(batch.num.messages={w['scale_batch_num_messages']}), {w['scale_delay_ms']} ms of `time.sleep` "
              f"per record, share.acknowledgement.mode={w['scale_ack_mode']} (ACCEPT per record). Each C: a fresh "
              f"topic and group; the C member processes join and poll the empty topic for "
              f"{w['scale_warmup_s']:.0f} s, then the records are produced. Rate from the first record received "
              f"to the last processed; ideal = C / delay.", "",
              "| consumers C | records/s | ideal records/s | efficiency | wall s | per-consumer records | missing | duplicate deliveries | delivery count > 1 | client-seen disconnects | broker CPU s |",
              "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for x in sc:
        if "error" in x:
            lines.append(f"| {x['consumers']} | FAILED: {x['error']} | | | | | | | | | |")
            continue
        eff = f"{x['rec_s'] / x['ideal_rec_s'] * 100:.0f}%" if x.get("ideal_rec_s") else "–"
        lines.append(f"| {x['consumers']} | {fmt(x['rec_s'], 0)} | {fmt(x['ideal_rec_s'], 0)} | {eff} "
                     f"| {fmt(x['wall_s'], 2)} | {', '.join(f'{v:,}' for v in x['per_member_records'])} "
                     f"| {x['missing']} | {x['duplicate_deliveries']} | {x['delivery_count_gt1']} "
                     f"| {x['client_disconnects']} | {fmt(x.get('broker_cpu_s'), 2)} |")
    if doc.get("error"):
        lines += ["", f"**FAILED**: {doc['error']}"]
    lines += ["", f"Kray: `{doc.get('kray_command', '')}`", "", "Made by:", "", "```", doc["command"], "```", ""]
    (outdir / "share.md").write_text("\n".join(lines))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: skipping share.png")
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    names, vals = [], []
    if f:
        names.append("plain fetch\n(1 consumer)")
        vals.append(f["rec_s"])
    if s:
        names.append(f"share group\n({s['consumers']} consumers)")
        vals.append(s["rec_s"])
    bars = a1.bar(names, vals, color=["tab:blue", "tab:orange"][:len(vals)])
    a1.bar_label(bars, labels=[f"{v:,.0f}" for v in vals])
    a1.set_ylabel("records/s")
    a1.set_title(f"{w['records']:,} × {w['record_size']} B, {w['partitions']} partitions")
    a1.margins(y=0.15)
    ok = [x for x in sc if "error" not in x]
    if ok:
        cs = [x["consumers"] for x in ok]
        a2.plot(cs, [x["rec_s"] for x in ok], "o-", label="measured")
        if ok[0].get("ideal_rec_s"):
            a2.plot(cs, [x["ideal_rec_s"] for x in ok], "--", color="gray", label="ideal (C / delay)")
        a2.axvline(w["scale_partitions"], color="red", ls=":", label=f"{w['scale_partitions']} partitions")
        a2.set_xscale("log", base=2)
        a2.set_xticks(cs, [str(c) for c in cs])
        a2.set_xlabel("share consumers (processes)")
        a2.set_ylabel("records/s")
        a2.set_title(f"{w['scale_delay_ms']} ms/record, {w['scale_records']:,} records")
        a2.legend()
    fig.suptitle(f"Kray share groups, {m['nproc']} CPU")
    fig.tight_layout()
    fig.savefig(outdir / "share.png", dpi=110)
    plt.close(fig)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000, help="phase 1 records")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3, help="phase 1 partitions")
    ap.add_argument("--consumers", type=int, default=0, help="phase 1 share consumers (0: one per partition)")
    ap.add_argument("--ack-mode", default="implicit", choices=["implicit", "explicit"], help="phase 1")
    ap.add_argument("--batch-num-messages", type=int, default=500, help="phase 1 producer batch.num.messages")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=1 << 20)
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--max-poll-records", type=int, default=0, help="ShareConsumer max.poll.records (0: client default)")
    ap.add_argument("--drain-check-s", type=float, default=5, help="0 disables the post-run redelivery check")
    ap.add_argument("--scale-partitions", type=int, default=2)
    ap.add_argument("--scale-records", type=int, default=4000)
    ap.add_argument("--scale-consumers", default="1,2,4,8",
                    type=lambda s: [int(x) for x in s.split(",") if x.strip()])
    ap.add_argument("--scale-delay-ms", type=float, default=2.0)
    ap.add_argument("--scale-batch-num-messages", type=int, default=50)
    ap.add_argument("--scale-ack-mode", default="explicit", choices=["implicit", "explicit"])
    ap.add_argument("--scale-warmup-s", type=float, default=4.0,
                    help="members poll the empty topic this long before the records are produced")
    ap.add_argument("--skip-phase1", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--phase-timeout", type=float, default=180)
    ap.add_argument("--stall-timeout", type=float, default=60)
    ap.add_argument("--startup-timeout", type=float, default=120)
    ap.add_argument("--stop-grace", type=float, default=30)
    ap.add_argument("--progress-every", type=float, default=3)
    ap.add_argument("--kray-bin", help="kray executable (default: next to this python, then PATH)")
    ap.add_argument("--kray-override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra `kray start --override KEY=VALUE` (after the share heartbeat ones)")
    ap.add_argument("--out", default=str(HERE / "results"), help="output directory")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    outdir = Path(args.out)
    cmdline = ("python -m benchmarks.share " + shlex.join(argv)).strip()
    overrides = SHARE_OVERRIDES + args.kray_override
    doc = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": cmdline, "machine": machine_info(["kray"]), "kray_overrides": overrides,
        "workload": {"records": args.records, "record_size": args.record_size, "partitions": args.partitions,
                     "consumers": args.consumers or args.partitions, "ack_mode": args.ack_mode,
                     "batch_num_messages": args.batch_num_messages, "linger_ms": args.linger_ms,
                     "batch_size": args.batch_size, "acks": args.acks, "max_poll_records": args.max_poll_records or None,
                     "scale_partitions": args.scale_partitions, "scale_records": args.scale_records,
                     "scale_consumers": args.scale_consumers, "scale_delay_ms": args.scale_delay_ms,
                     "scale_batch_num_messages": args.scale_batch_num_messages,
                     "scale_ack_mode": args.scale_ack_mode, "scale_warmup_s": args.scale_warmup_s},
        "results": {}, "ok": True,
    }
    doc["machine"]["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    log(f"machine: {doc['machine']}")
    log("kray gets --override " + " --override ".join(SHARE_OVERRIDES)
        + " (share heartbeat 1 s instead of the default 5 s: group joins take ~1 s)")
    ctx = mp.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="kray-share-bench-"))
    broker = None
    stamp = f"{int(time.time())}-{os.getpid()}"
    try:
        data = tmp / "kray-data"
        data.mkdir()
        broker = make_kray(free_port(), tmp, data, overrides, args.kray_bin)
        doc["kray_command"] = shlex.join(broker.cmd)
        broker.start(args.startup_timeout)
        global _BROKER_CPU
        _BROKER_CPU = lambda: broker.sampler.sample()["cpu_s"]  # noqa: E731
        doc["broker"] = {"startup_s": round(broker.startup_s, 2)}
        idle = broker.sampler.sample()
        doc["broker"].update(idle_rss_mib=round(idle["rss"] / MIB, 1), idle_procs=idle["procs"])
        log(f"kray: idle RSS {doc['broker']['idle_rss_mib']} MiB in {idle['procs']} processes")
        if not args.skip_phase1:
            try:
                phase_first_group(ctx, broker.bootstrap, args, stamp, doc["results"])
                phase_share_vs_fetch(ctx, broker.bootstrap, args, stamp, doc["results"])
            except Exception as e:
                log(f"phase 1 FAILED: {e}")
                doc["ok"], doc["phase1_error"] = False, str(e)
            write_outputs(doc, outdir)
        if not args.skip_scaling:
            phase_scaling(ctx, broker.bootstrap, args, stamp, doc["results"])
            if any("error" in x for x in doc["results"]["scaling"]):
                doc["ok"] = False
    except BaseException as e:
        log(f"FAILED: {type(e).__name__}: {e}")
        doc["ok"], doc["error"] = False, f"{type(e).__name__}: {e}"
        if broker is not None:
            doc["kray_log_tail"] = broker.log_tail()
        if isinstance(e, KeyboardInterrupt):
            raise
    finally:
        if broker is not None:
            s = broker.sampler.sample() if broker.sampler else None
            b = doc.setdefault("broker", {})
            if broker.sampler:
                b.update(peak_rss_mib=round(broker.sampler.peak_rss / MIB, 1),
                         peak_pss_mib=round(broker.sampler.peak_pss / MIB, 1),
                         processes=broker.sampler.max_procs,
                         end_rss_mib=round(s["rss"] / MIB, 1) if s else None)
                log(f"kray: peak RSS {b['peak_rss_mib']} MiB (PSS {b['peak_pss_mib']} MiB) in up to "
                    f"{b['processes']} processes")
            b["stop"] = broker.stop(args.stop_grace)
        for ch in mp.active_children():  # nothing should be left; never leave a client behind
            log(f"killing leftover child {ch.name} (pid {ch.pid})")
            ch.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        doc["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        write_outputs(doc, outdir)
    log(f"wrote {outdir}/share.json, share.md, share.png")
    print()
    print((outdir / "share.md").read_text())
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
