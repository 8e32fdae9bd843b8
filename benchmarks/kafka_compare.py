#!/usr/bin/env python3
"""Kray beside Apache Kafka 4.4.0 on the same machine, in the same run (issue 33, part 3).

Run from the repo root (needs Java 17+ and Kafka's jars in tests/kafka/lib, see tests/kafka/broker.py):

    python -m benchmarks.kafka_compare                          # everything, ~10 min on 2 cores
    python -m benchmarks.kafka_compare --rounds 1 --records 30000 --share-records 10000   # a quick look

Both brokers run at once for the whole run (one Kafka 4.4 KRaft node from tests/kafka/broker.py,
one `kray start`), and every measurement is taken on one and then on the other, alternating which
goes first each round: whatever else loads this shared machine then falls on both alike. The
broker that is not being measured sits idle; its CPU during the other's measurement is recorded
(`idle_other_cpu_s`). Each measurement is repeated --rounds times on fresh topics; the tables show
the median, the JSON has every round with the 1-minute load average before and after it.

Scenarios (record values random, 1 KiB, acks=all, compression none, confluent-kafka):
  produce/fetch   one producer process, then one consumer (assign() from offset 0) — the load
                  clients of benchmarks/throughput.py — with librdkafka's defaults and tuned
                  (linger.ms=5, batch.size=1 MiB, fetch.max.bytes=50 MiB, ...), at 3 partitions
                  (--records) and at --many-partitions partitions (--many-records).
  share           C ShareConsumer processes (explicit acknowledgement, ACCEPT every record) in one
                  fresh group over a fresh topic; they join and poll the empty topic for
                  --share-warmup-s, then (a) --share-records records are produced as fast as a
                  tuned producer goes: records/s from the first record received to the last new
                  one, latency under that backlog; then (b) --share-paced-records at
                  --share-rate records/s: end-to-end latency at a rate both brokers sustain.
                  Latency = consume time − the record's CreateTime (set by the producer client).
Broker CPU = CPU seconds of the broker's process tree over the measurement (/proc: the Kafka JVM;
`kray start` and every process of its session: Ray's GCS, raylet and the actor workers), per record.

Results: benchmarks/results/kafka-compare.{json,md,png}.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.throughput import (HERE, MB, MIB, REPO, fmt, free_port, log, machine_info, make_kray,  # noqa: E402
                                   mem_snapshot, proc_tree, process_role, run_worker)
from benchmarks.share import ClientLog, Procs, _cpu_self, admin_setup, run_one  # noqa: E402

SHARE_HEARTBEAT = ["group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500"]
KAFKA_HEAP = "-Xms1g -Xmx1g"
TUNED = {"linger_ms": 5, "batch_size": 1 << 20, "queue_kbytes": 16 * 1024, "queue_messages": 1_000_000,
         "fetch_max_bytes": 50 * MIB, "max_partition_fetch_bytes": 4 * MIB, "queued_kbytes": 256 * 1024}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------------------------
# Brokers
# --------------------------------------------------------------------------------------------

class Target:
    """A running broker: its bootstrap and a CPU reading of its process tree."""

    def __init__(self, name: str, bootstrap: str, root: int, same_session: bool, stop):
        self.name, self.bootstrap, self.root, self.same_session, self._stop = name, bootstrap, root, same_session, stop

    def cpu(self) -> dict:
        s = mem_snapshot(self.root, self.same_session, with_pss=False)
        return {"cpu_s": s["cpu_s"], "by_pid": s["cpu_by_pid"], "rss": s["rss"], "procs": s["procs"]}

    def stop(self):
        self._stop()


def start_kafka(tmp: Path) -> tuple[Target, dict]:
    sys.path.insert(0, str(REPO))
    import tests.kafka.broker as kb
    kb.HEAP = KAFKA_HEAP  # its java() takes one heap argument: give it both bounds
    extra = "".join(f"{o}\n" for o in SHARE_HEARTBEAT)
    b = kb.KafkaBroker(tmp / "kafka")
    (tmp / "kafka").mkdir()
    orig_java = kb.java

    def java(main_class, *a, heap="-Xmx256m", **kw):  # split "-Xms1g -Xmx1g" into two JVM flags
        cmd = orig_java(main_class, *a, heap=heap, **kw)
        i = cmd.index(heap)
        return cmd[:i] + heap.split() + cmd[i + 1:]

    kb.java = java
    b.extra_properties = extra
    t0 = time.monotonic()
    b.start()
    info = {"version": kb.KAFKA_VERSION, "startup_s": round(time.monotonic() - t0, 2), "heap": KAFKA_HEAP,
            "gc": "G1 (-XX:+UseG1GC)", "server_properties": (tmp / "kafka" / "server.properties").read_text(),
            "format_output": b.format_output.strip(),
            "durability": "Kafka's defaults: log.flush.interval.messages and log.flush.interval.ms unset "
                          "(Long.MAX): no fsync per message or per batch; the OS page cache writes back, "
                          "a rolled segment is flushed in the background. acks=all with one replica = the "
                          "leader's append."}
    log(f"kafka: ready at {b.bootstrap} after {info['startup_s']} s (pid {b.process.pid})")
    return Target("kafka", b.bootstrap, b.process.pid, False, b.stop), info


def start_kray(tmp: Path, niceness: int | None = None) -> tuple[Target, dict]:
    data = tmp / "kray-data"
    data.mkdir()
    broker = make_kray(free_port(), tmp, data, SHARE_HEARTBEAT, None)
    if niceness is not None:  # `kray start` runs its Ray's workers (Kray's actors) at nice 0 unless told otherwise
        broker.env = {**os.environ, "RAY_worker_niceness": str(niceness)}
    broker.start(180)
    broker.sampler.stop()  # we read CPU ourselves; the thread would only add noise

    def stop():
        broker.stop(30)

    info = {"startup_s": round(broker.startup_s, 2), "command": shlex.join(broker.cmd),
            "ray_worker_niceness": int(os.environ.get("RAY_worker_niceness", 0)) if niceness is None else niceness,
            "durability": "Kray's defaults (cluster/config.py, actors/partition/log.py): appends are not "
                          "fsynced (log.flush.interval.* = Long.MAX, as Kafka); a rolled segment is fsynced "
                          "soon after, off the request path. acks=all with one replica = the leader's append."}
    return Target("kray", broker.bootstrap, broker.proc.pid, True, stop), info


def wait_ready(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    """Until ListOffsets(LATEST) answers for every partition: Metadata may show a leader before the
    broker hosts the partition (Kafka: the broker applies the controller's record a little later)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    todo = list(range(partitions))
    while todo:
        futs = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in todo}, request_timeout=30)
        left = []
        for tp, f in futs.items():
            try:
                f.result(timeout=60)
            except Exception:
                left.append(tp.partition)
        todo = left
        if todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(todo)} partitions not answering ListOffsets after {timeout:.0f}s")
            time.sleep(0.2)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the futures resolve
    try:
        for f in admin.delete_topics([topic], operation_timeout=30).values():
            f.result(timeout=60)
    except Exception as e:  # a leftover topic only costs disk
        log(f"delete {topic} on {bootstrap}: {e}")


# --------------------------------------------------------------------------------------------
# Share consumption with end-to-end latency (child processes, spawn)
# --------------------------------------------------------------------------------------------

def produce_stamped(idx, events, p: dict) -> dict:
    """Records keyed p["first_key"].. (round-robin over partitions), acks=all, tuned; paced to
    p["rate"] records/s when set. librdkafka stamps CreateTime at produce()."""
    from confluent_kafka import Producer
    state = {"ok": 0, "err": 0, "first": None}

    def dr(err, msg):
        if err is None:
            state["ok"] += 1
        else:
            state["err"] += 1
            state["first"] = state["first"] or str(err)

    prod = Producer({"bootstrap.servers": p["bootstrap"], "acks": "all", "linger.ms": 5 if not p["rate"] else 1,
                     "batch.size": 1 << 20, "compression.type": "none", "enable.idempotence": False,
                     "queue.buffering.max.kbytes": 16 * 1024, "on_delivery": dr})
    prod.list_topics(topic=p["topic"], timeout=30)
    pool = [random.Random(i).randbytes(p["size"]) for i in range(256)]
    n, k0, parts, rate = p["records"], p["first_key"], p["partitions"], p["rate"]
    t0 = time.perf_counter()
    i = 0
    while i < n:
        if rate:
            due = t0 + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
        try:
            prod.produce(p["topic"], pool[i & 255], key=b"%d" % (k0 + i), partition=i % parts)
        except BufferError:
            prod.poll(0.01)
            continue
        i += 1
        if rate or (i & 1023) == 0:
            prod.poll(0)
    while prod.flush(1.0):
        if time.perf_counter() - t0 > p["timeout"]:
            raise TimeoutError("flush timed out")
    wall = time.perf_counter() - t0
    if state["err"] or state["ok"] != n:
        raise RuntimeError(f"delivered {state['ok']}/{n}, {state['err']} errors: {state['first']}")
    return {"records": n, "wall_s": round(wall, 3), "rec_s": round(n / wall, 1)}


def share_member(idx, events, p: dict, counts, distinct, lock, stop, marks, barrier) -> dict:
    """One ShareConsumer, explicit ACCEPT of every record, until the group has seen every key.
    marks[0]: first receipt (time.time()), marks[1]: when distinct reached the unpaced count."""
    from confluent_kafka import AcknowledgeType, ShareConsumer
    total, n_fast = p["total"], p["n_fast"]
    clog = ClientLog(f"share-{idx}")
    c = ShareConsumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"], "client.id": f"cmp-{idx}",
                       "share.acknowledgement.mode": "explicit", "logger": clog.logger})
    lat_fast, lat_paced = [], []
    deliveries = redelivered = errors = 0
    first_err = None
    now = time.time
    accept = AcknowledgeType.ACCEPT
    try:
        barrier.wait(120)
        c.subscribe([p["topic"]])
        cpu0 = _cpu_self()
        deadline = time.monotonic() + p["timeout"]
        while not stop.value and distinct.value < total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"member {idx}: {distinct.value}/{total} after {p['timeout']:.0f}s")
            msgs = c.poll(0.1)
            t = now()
            keys = []
            for m in msgs:
                if m.error() is not None:
                    errors += 1
                    first_err = first_err or str(m.error())
                    continue
                k = int(m.key())
                keys.append(k)
                (lat_fast if k < n_fast else lat_paced).append(round(t * 1000 - m.timestamp()[1], 2))
                if m.delivery_count() > 1:
                    redelivered += 1
                c.acknowledge(m, accept)
            if not keys:
                continue
            deliveries += len(keys)
            with lock:
                if marks[0] == 0.0:
                    marks[0] = t
                for k in keys:
                    v = counts[k]
                    counts[k] = v + 1
                    if v == 0:
                        distinct.value += 1
                        if distinct.value == n_fast:
                            marks[1] = now()
        cpu = _cpu_self() - cpu0
        commit = c.commit_sync(30)
        commit_errors = {f"{tp.topic}[{tp.partition}]": str(e) for tp, e in (commit or {}).items() if e is not None}
    finally:
        c.close()
    return {"member": idx, "deliveries": deliveries, "redelivered": redelivered, "errors": errors,
            "first_error": first_err, "client_cpu_s": round(cpu, 2), "commit_errors": commit_errors,
            "lat_fast": lat_fast, "lat_paced": lat_paced, **clog.report()}


def pct(xs: list[float], q: float):
    if not xs:
        return None
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def share_run(ctx, t: Target, args, consumers: int, partitions: int, tag: str) -> dict:
    topic = group = f"cmp-share-{tag}"
    admin_setup(t.bootstrap, topic, partitions, group, 120)
    n_fast, n_paced = args.share_records, args.share_paced_records
    total = n_fast + n_paced
    counts = ctx.RawArray("H", total)
    distinct, stop = ctx.RawValue("q", 0), ctx.RawValue("i", 0)
    marks = ctx.RawArray("d", 2)
    lock, barrier = ctx.Lock(), ctx.Barrier(consumers + 1)
    params = {"bootstrap": t.bootstrap, "topic": topic, "group": group, "total": total, "n_fast": n_fast,
              "timeout": args.phase_timeout}
    procs = Procs(ctx, f"{t.name} share C={consumers}", share_member, consumers, params, counts, distinct, lock,
                  stop, marks, barrier)
    out: dict = {"topic": topic, "consumers": consumers, "partitions": partitions}
    try:
        barrier.wait(120)
        time.sleep(args.share_warmup_s)  # members join and poll the empty topic
        c0 = t.cpu()
        prod = {"bootstrap": t.bootstrap, "topic": topic, "size": args.record_size, "partitions": partitions,
                "timeout": args.phase_timeout}
        out["produce_fast"] = run_one(ctx, "produce", produce_stamped, dict(prod, records=n_fast, first_key=0, rate=0),
                                      args.phase_timeout, 5)
        deadline = time.monotonic() + args.phase_timeout
        while distinct.value < n_fast:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{distinct.value}/{n_fast} consumed")
            time.sleep(0.05)
        c1 = t.cpu()
        if n_paced:
            out["produce_paced"] = run_one(ctx, "produce paced", produce_stamped,
                                           dict(prod, records=n_paced, first_key=n_fast, rate=args.share_rate),
                                           args.phase_timeout, 5)
        members = procs.collect(args.phase_timeout + 60, every=5)
    except BaseException:
        stop.value = 1
        raise
    finally:
        procs.close(grace=35)
    wall = marks[1] - marks[0]
    lat_f = [x for m in members for x in m["lat_fast"]]
    lat_p = [x for m in members for x in m["lat_paced"]]
    missing = sum(1 for v in counts if v == 0)
    dup = sum(v - 1 for v in counts if v > 1)
    out.update({
        "records": n_fast, "wall_s": round(wall, 3), "rec_s": round(n_fast / wall, 1) if wall > 0 else None,
        "lat_p50_ms": pct(lat_f, 0.5), "lat_p99_ms": pct(lat_f, 0.99),
        "paced_records": n_paced, "paced_rate": args.share_rate,
        "paced_lat_p50_ms": pct(lat_p, 0.5), "paced_lat_p99_ms": pct(lat_p, 0.99),
        "broker_cpu_s": round(c1["cpu_s"] - c0["cpu_s"], 2),
        "missing": missing, "duplicate_deliveries": dup,
        "delivery_count_gt1": sum(m["redelivered"] for m in members),
        "per_member": [m["deliveries"] for m in members],
        "client_disconnects": sum(m["disconnects"] for m in members),
        "commit_errors": {k: v for m in members for k, v in m["commit_errors"].items()},
        "errors": sum(m["errors"] for m in members),
    })
    out["broker_cpu_us_per_record"] = round(out["broker_cpu_s"] / n_fast * 1e6, 1)
    out["broker_cpu_by_role"] = cpu_roles(t, c0, c1)
    delete_topic(t.bootstrap, topic)
    return out


def cpu_roles(t: Target, c0: dict, c1: dict) -> dict | None:
    if t.name != "kray":
        return None
    out: dict[str, float] = {}
    for pid, (start, cpu) in c1["by_pid"].items():
        was = c0["by_pid"].get(pid)
        spent = cpu - (was[1] if was and was[0] == start else 0.0)
        if spent <= 0:
            continue
        role = process_role(pid)
        if role == "other":
            from benchmarks.throughput import _cmdline
            cmd = _cmdline(pid)
            role = next((r for r in ("raylet", "gcs_server", "dashboard", "log_monitor", "kray start", "ray::")
                         if r in cmd), "other")
        out[role] = round(out.get(role, 0.0) + spent, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# --------------------------------------------------------------------------------------------
# Produce / fetch (benchmarks/throughput.py's load clients)
# --------------------------------------------------------------------------------------------

def pf_run(t: Target, args, partitions: int, records: int, defaults: bool, tag: str) -> dict:
    topic = f"cmp-pf-{tag}"
    common = dict(bootstrap=t.bootstrap, records=records, size=args.record_size, partitions=partitions,
                  timeout=args.phase_timeout, client_defaults=defaults, progress_every=10,
                  stall_timeout=60, client_conf={}, topic=topic)
    out: dict = {"topic": topic}
    t0 = time.monotonic()
    admin_setup(t.bootstrap, topic, partitions, None, 120)  # outside the CPU window: creating 1,000 partitions costs
    wait_ready(t.bootstrap, topic, partitions, 120)
    out["create_topic_s"] = round(time.monotonic() - t0, 2)
    for phase in ("produce", "fetch"):
        params = dict(common, phase=phase)
        if phase == "produce":
            params.update(create=False, acks="all", latency_samples=5000, **{k: TUNED[k] for k in (
                "linger_ms", "batch_size", "queue_kbytes", "queue_messages")})
        else:
            params.update(group=f"g-{topic}", **{k: TUNED[k] for k in (
                "fetch_max_bytes", "max_partition_fetch_bytes", "queued_kbytes")})
        c0 = t.cpu()
        res = run_worker(params, args.phase_timeout, f"{t.name} {tag} {phase}")
        c1 = t.cpu()
        res["broker_cpu_s"] = round(c1["cpu_s"] - c0["cpu_s"], 2)
        res["broker_cpu_us_per_record"] = round(res["broker_cpu_s"] / records * 1e6, 1)
        res["broker_cpu_by_role"] = cpu_roles(t, c0, c1)
        out[phase] = res
    delete_topic(t.bootstrap, topic)
    return out


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def scenarios(args) -> list[dict]:
    out = []
    for defaults in (True, False):
        mode = "defaults" if defaults else "tuned"
        out.append({"id": f"pf-3p-{mode}", "kind": "pf", "partitions": 3, "records": args.records, "defaults": defaults})
    if args.many_partitions:
        for defaults in (True, False):
            mode = "defaults" if defaults else "tuned"
            out.append({"id": f"pf-{args.many_partitions}p-{mode}", "kind": "pf", "partitions": args.many_partitions,
                        "records": args.many_records, "defaults": defaults})
    for spec in args.share:
        c, p = (int(x) for x in spec.split("x"))
        out.append({"id": f"share-{c}c-{p}p", "kind": "share", "consumers": c, "partitions": p})
    return out


def measure(ctx, t: Target, other: Target, sc: dict, args, tag: str) -> dict:
    l0, o0 = loadavg(), other.cpu()["cpu_s"]
    t0 = time.monotonic()
    try:
        if sc["kind"] == "pf":
            res = pf_run(t, args, sc["partitions"], sc["records"], sc["defaults"], tag)
        else:
            res = share_run(ctx, t, args, sc["consumers"], sc["partitions"], tag)
    except Exception as e:
        log(f"{t.name} {sc['id']}: FAILED: {e}")
        res = {"error": f"{type(e).__name__}: {e}", "where": traceback.format_exc().strip().splitlines()[-3:]}
    res.update(load_before=l0, load_after=loadavg(), seconds=round(time.monotonic() - t0, 1),
               idle_other_cpu_s=round(other.cpu()["cpu_s"] - o0, 2))
    return res


METRICS = {  # scenario kind -> (phase, key, label, higher is better)
    "pf": [("produce", "mb_s", "produce MB/s", True), ("produce", "lat_p99_ms", "produce p99 ms", False),
           ("produce", "broker_cpu_us_per_record", "produce broker CPU µs/rec", False),
           ("fetch", "mb_s", "fetch MB/s", True),
           ("fetch", "broker_cpu_us_per_record", "fetch broker CPU µs/rec", False),
           (None, "create_topic_s", "CreateTopics → all leaders s", False)],
    "share": [(None, "rec_s", "records/s", True), (None, "lat_p50_ms", "e2e p50 ms (backlog)", False),
              (None, "lat_p99_ms", "e2e p99 ms (backlog)", False),
              (None, "paced_lat_p50_ms", "e2e p50 ms (paced)", False),
              (None, "paced_lat_p99_ms", "e2e p99 ms (paced)", False),
              (None, "broker_cpu_us_per_record", "broker CPU µs/rec", False)],
}


def value(run: dict, phase, key):
    d = run.get(phase, {}) if phase else run
    return d.get(key) if isinstance(d, dict) else None


def summarize(doc: dict) -> None:
    doc["summary"] = {}
    for sc in doc["scenarios"]:
        rows = []
        for phase, key, label, higher in METRICS[sc["kind"]]:
            row = {"metric": label, "higher_is_better": higher}
            for name in doc["targets"]:
                vals = [value(r, phase, key) for r in doc["runs"].get(sc["id"], {}).get(name, [])]
                vals = [v for v in vals if v is not None]
                row[name] = round(statistics.median(vals), 2) if vals else None
                row[f"{name}_rounds"] = vals
            a, b = row.get("kray"), row.get("kafka")
            row["kray_over_kafka"] = round(a / b, 2) if a and b else None
            rows.append(row)
        doc["summary"][sc["id"]] = rows


def write_outputs(doc: dict, outdir: Path) -> None:
    summarize(doc)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{doc['name']}.json").write_text(json.dumps(doc, indent=2) + "\n")
    m, k, w = doc["machine"], doc.get("kafka", {}), doc["workload"]
    lines = ["# Kray beside Apache Kafka 4.4", "",
             f"{doc['date']} · {m['nproc']} CPU ({m['cpu']}), {m['mem_gib']} GiB RAM · confluent-kafka "
             f"{m.get('confluent_kafka')} / librdkafka {m.get('librdkafka')} · Python {m['python']} · "
             f"git {m.get('git_commit')} · Java: {doc.get('java')} · load average (1/5/15 min) "
             f"{doc.get('load_start')} at start, {doc.get('load_end')} at end. The machine is shared "
             f"(2 cores, other developers' tests ran too): each cell is the median of {w['rounds']} rounds, "
             f"Kafka and Kray alternating which goes first; every round and its load average are in the JSON.", "",
             f"**Kafka {k.get('version')}**: one combined broker+controller (KRaft) on 127.0.0.1 "
             f"(tests/kafka/broker.py), heap `{k.get('heap')}`, {k.get('gc')}, internal topics with one "
             f"replica, group.initial.rebalance.delay.ms=0, share heartbeat 1 s. {k.get('durability')}", "",
             f"**Kray**: `kray start` (one node), share heartbeat 1 s "
             f"(`{' '.join('--override ' + o for o in SHARE_HEARTBEAT)}`, the same on Kafka); Ray runs Kray's actors "
             f"at nice {doc.get('kray', {}).get('ray_worker_niceness', 15)} (RAY_worker_niceness; the Kafka JVM and "
             f"the load clients at nice 0). "
             f"{doc.get('kray', {}).get('durability')}", "",
             f"Workload: record values {w['record_size']} B random, acks=all, compression none. Produce/fetch: "
             f"{w['records']:,} records at 3 partitions"
             + (f", {w['many_records']:,} at {w['many_partitions']} partitions" if w['many_partitions'] else "") + "; "
             f"one producer process then one consumer (assign() from 0); *defaults* = librdkafka's own settings "
             f"(only bootstrap, acks=all), *tuned* = linger.ms=5, batch.size=1 MiB, fetch.max.bytes=50 MiB, "
             f"max.partition.fetch.bytes=4 MiB. Share: C ShareConsumer processes, share.acknowledgement.mode="
             f"explicit, ACCEPT per record; {w['share_records']:,} records produced as fast as a tuned producer "
             f"goes once the members have polled {w['share_warmup_s']} s (records/s from the first record "
             f"received to the last new one; latency = consume time − CreateTime, so it includes the backlog), "
             f"then {w['share_paced_records']:,} records paced at {w['share_rate']:,}/s (latency at a rate both "
             f"sustain). Broker CPU = CPU s of the broker's process tree (the JVM; Kray's `kray start` session: "
             f"GCS, raylet, actor workers) over the phase / records; for share it covers produce + consume. "
             f"MB = 10⁶ B.", ""]
    for sc in doc["scenarios"]:
        rows = doc["summary"].get(sc["id"], [])
        lines += [f"## {sc['id']}", "", "| metric | Kafka 4.4 | Kray | Kray/Kafka | rounds Kafka | rounds Kray |",
                  "|---|---:|---:|---:|---|---|"]
        for r in rows:
            ratio = r.get("kray_over_kafka")
            lines.append(f"| {r['metric']}{'' if r['higher_is_better'] else ' (lower is better)'} | "
                         f"{fmt(r.get('kafka'))} | {fmt(r.get('kray'))} | "
                         f"{'–' if ratio is None else f'{ratio:.2f}×'} | "
                         f"{', '.join(fmt(v) for v in r.get('kafka_rounds', []))} | "
                         f"{', '.join(fmt(v) for v in r.get('kray_rounds', []))} |")
        loads = [(name, r.get("load_before"), r.get("load_after")) for name, rs in doc["runs"].get(sc["id"], {}).items()
                 for r in rs]
        errs = [f"{name}: {r['error']}" for name, rs in doc["runs"].get(sc["id"], {}).items() for r in rs if "error" in r]
        if loads:
            lines += ["", "Load average (1/5/15) before → after each round: " + "; ".join(
                f"{n} {b[0]}→{a[0]}" for n, b, a in loads if b and a) + "."]
        if errs:
            lines += ["", "Failures: " + "; ".join(errs)]
        lines.append("")
    if doc.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in doc["notes"]] + [""]
    lines += ["Made by:", "", "```", doc["command"], "```", ""]
    (outdir / f"{doc['name']}.md").write_text("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        log("matplotlib not installed: no .png (--replot the JSON where it is)")
        return
    labels, ratios = [], []
    for sc in doc["scenarios"]:
        for r in doc["summary"].get(sc["id"], []):
            if r["higher_is_better"] and r.get("kray_over_kafka"):
                labels.append(f"{sc['id']} {r['metric']}")
                ratios.append(r["kray_over_kafka"])
    if not ratios:
        return
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(ratios) + 1.5))
    bars = ax.barh(range(len(ratios)), ratios, color=["tab:green" if x >= 1 else "tab:red" for x in ratios])
    ax.bar_label(bars, fmt="%.2f×")
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xscale("log")  # 0.4x and 20x on one axis
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.set_yticks(range(len(ratios)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("Kray / Kafka 4.4 (throughput, median of rounds; > 1: Kray faster; log scale)")
    ax.set_title(f"Kray vs Apache Kafka 4.4, same machine ({m['nproc']} CPU), acks=all")
    ax.margins(x=0.25)
    fig.tight_layout()
    fig.savefig(outdir / f"{doc['name']}.png", dpi=110)
    plt.close(fig)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=150_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--many-partitions", type=int, default=1000, help="0: skip")
    ap.add_argument("--many-records", type=int, default=50_000)
    ap.add_argument("--share", action="append", default=None, metavar="CxP",
                    help="share scenario: C consumers over P partitions (repeatable; default 1x3, 4x3, 16x12)")
    ap.add_argument("--share-records", type=int, default=50_000)
    ap.add_argument("--share-paced-records", type=int, default=5_000)
    ap.add_argument("--share-rate", type=int, default=1_000, help="paced phase, records/s")
    ap.add_argument("--share-warmup-s", type=float, default=5.0)
    ap.add_argument("--only", default="", help="comma list of scenario ids to run (default all)")
    ap.add_argument("--phase-timeout", type=float, default=150)
    ap.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                    help="one unrecorded produce/fetch (20k records) and share round (2k) on each broker first: "
                         "Kafka's JIT and Kray's Ray workers warm up")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--replot", metavar="JSON", help="only rewrite the .md and .png from this results JSON")
    ap.add_argument("--name", default="kafka-compare", help="output file name (without .json/.md/.png)")
    ap.add_argument("--kray-niceness", type=int, default=None,
                    help="RAY_worker_niceness for `kray start` (Kray's default, used when unset: 0, as the Kafka JVM; "
                         "Ray's own default is 15)")
    a = ap.parse_args(argv)
    a.share = a.share or ["1x3", "4x3", "16x12"]
    return a


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.replot:  # the tables and the plot again from a results JSON (e.g. where matplotlib is installed)
        doc = json.loads(Path(args.replot).read_text())
        doc.setdefault("name", Path(args.replot).stem)
        write_outputs(doc, Path(args.replot).parent)
        log(f"wrote {Path(args.replot).parent}/{doc['name']}.md, .png")
        return 0
    import subprocess
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    scs = scenarios(args)
    if args.only:
        scs = [s for s in scs if s["id"] in args.only.split(",")]
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python -m benchmarks.kafka_compare " + shlex.join(argv), "name": args.name,
           "machine": machine_info(["kray"]), "java": java[0] if java else None,
           "workload": {"rounds": args.rounds, "records": args.records, "record_size": args.record_size,
                        "many_partitions": args.many_partitions, "many_records": args.many_records,
                        "share": args.share, "share_records": args.share_records,
                        "share_paced_records": args.share_paced_records, "share_rate": args.share_rate,
                        "share_warmup_s": args.share_warmup_s, "tuned": TUNED, "acks": "all"},
           "load_start": loadavg(), "scenarios": scs, "targets": ["kafka", "kray"], "runs": {}, "notes": []}
    ctx = mp.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="kafka-compare-"))
    kafka = kray = None
    outdir = Path(args.out)
    try:
        kafka, doc["kafka"] = start_kafka(tmp)
        kray, doc["kray"] = start_kray(tmp, args.kray_niceness)
        idle0 = {t.name: t.cpu() for t in (kafka, kray)}
        time.sleep(10)
        idle1 = {t.name: t.cpu() for t in (kafka, kray)}
        doc["idle"] = {n: {"cpu_s_per_10s": round(idle1[n]["cpu_s"] - idle0[n]["cpu_s"], 2),
                           "rss_mib": round(idle1[n]["rss"] / MIB, 1), "processes": idle1[n]["procs"]}
                       for n in idle0}
        log(f"idle: {doc['idle']}")
        stamp = f"{int(time.time()) % 100000}"
        if args.warmup:
            wa = argparse.Namespace(**{**vars(args), "records": 20_000, "share_records": 2_000,
                                       "share_paced_records": 0, "share_warmup_s": 3.0})
            for t, other in ((kafka, kray), (kray, kafka)):
                for sc in ({"id": "warmup-pf", "kind": "pf", "partitions": 3, "records": 20_000, "defaults": False},
                           {"id": "warmup-share", "kind": "share", "consumers": 1, "partitions": 3}):
                    res = measure(ctx, t, other, sc, wa, f"{stamp}-{sc['id']}-{t.name}")
                    doc.setdefault("warmup", {}).setdefault(t.name, []).append(
                        {"id": sc["id"], "error": res.get("error"), "seconds": res["seconds"]})
                    log(f"warm-up {sc['id']} on {t.name}: {res['seconds']} s {res.get('error') or ''}")
        for r in range(args.rounds):
            for sc in scs:
                order = [(kafka, kray), (kray, kafka)] if (r + scs.index(sc)) % 2 == 0 else [(kray, kafka), (kafka, kray)]
                for t, other in order:
                    log(f"round {r + 1}/{args.rounds} {sc['id']} on {t.name} (load {loadavg()})")
                    res = measure(ctx, t, other, sc, args, f"{stamp}-{sc['id']}-{t.name}-{r}")
                    res["round"] = r
                    doc["runs"].setdefault(sc["id"], {}).setdefault(t.name, []).append(res)
                    brief = {k: v for k, v in (res.get("produce") or res).items()
                             if k in ("mb_s", "rec_s", "lat_p50_ms", "lat_p99_ms", "broker_cpu_s", "error")}
                    log(f"  -> {t.name} {sc['id']}: {brief} fetch {(res.get('fetch') or {}).get('mb_s')} MB/s "
                        f"load {res['load_before'][0]}→{res['load_after'][0]}")
                    write_outputs(doc, outdir)
        doc["end_rss_mib"] = {t.name: round(t.cpu()["rss"] / MIB, 1) for t in (kafka, kray)}
    finally:
        for t in (kray, kafka):
            if t is not None:
                try:
                    t.stop()
                except Exception as e:
                    log(f"stopping {t.name}: {e}")
        shutil.rmtree(tmp, ignore_errors=True)
        doc["load_end"] = loadavg()
        write_outputs(doc, outdir)
    log(f"wrote {outdir}/{args.name}.json, .md, .png")
    print((outdir / f"{doc['name']}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
