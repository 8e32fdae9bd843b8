#!/usr/bin/env python3
"""Scale benchmark (issue 16): partitions on one broker and on three, beside tansu, in one run.

Run from the repo root:

    python -m benchmarks.scale                                   # everything, ~10-15 min on 2 cores
    python -m benchmarks.scale --partitions 10,50 --records 5000 --group-records 5000 \\
        --nodes3-partitions 30 --out /tmp/scale-dev              # a quick development run

Sessions, each on brokers of its own (temp data dirs, always stopped at the end):

1. ``one-node``: one ``kray start`` and tansu, both up for the whole session (tansu idles at no
   CPU). On each, topics are created step by step so that the broker holds --partitions
   partitions in total (default 10, 100, 1,000: a topic of 10, then one of 90, then one of 900;
   replication factor 1). Each step, in a load-client process: an AdminClient with default
   settings sends CreateTopics; timed from the request to its answer, to every partition having a
   leader in Metadata, and to a first produce (one record per partition, librdkafka defaults,
   acks=all) acknowledged on every partition. Then, after --settle-s: the processes of the
   broker's tree (Kray: its Ray session), their PSS (from /proc/PID/smaps_rollup), and the idle
   CPU over --idle-s seconds with nothing produced (utime+stime deltas of every process in /proc,
   divided by the wall time). Kray is measured once more right after `kray start` is ready,
   before any user topic (the baseline). Kray's processes are split into Kray's actors
   (controller, gateway, shards: every ``ray::<Actor>`` of Kray's) and Ray's own (the `kray
   start` driver, GCS, raylet, dashboard, agents, idle workers).
   Then throughput across every partition of those topics, alternating between the targets (Kray
   defaults, tansu defaults, Kray tuned, tansu tuned) so that both see the same outside load:
   --records × --record-size records, round-robin over all partitions, one confluent-kafka
   producer process, then one consumer process that assign()s every partition from the first
   offset the producer wrote, with librdkafka's default settings and then tuned as
   benchmarks/throughput.py's defaults (linger.ms=5, batch.size=1 MiB, a 16 MiB client queue,
   large fetches); acks=--acks in both. A tiny read first lets each consumer group's coordinator
   exist (librdkafka looks it up even with assign()).
2. ``first-group``: per kind of consumer (--first-consumer) a fresh tansu and a fresh ``kray
   start`` each get --group-records records in a topic of --group-partitions partitions
   (throughput.py's tuned producer); then the first consumer with a group.id the broker ever saw
   reads them all, then a second one with another group.id. ``subscribe``: subscribe(),
   librdkafka's default consumer settings and auto.offset.reset=earliest, timed from subscribe()
   (the group join included; the rate after the first record is reported too); ``assign``:
   throughput.py's fetch worker with librdkafka's defaults (assign() from offset 0 with a
   group.id), the measure issue 16 quotes.
3. ``nodes3``: ``kray start --nodes 3`` (three broker nodes and the controller's head node on
   this machine); one topic of --nodes3-partitions partitions with replication factor 3, timed as
   in 1 (first produce with acks=all), plus the time until every partition's ISR holds 3
   replicas (a CreateTopics that librdkafka gives up on after its 60 s request timeout is
   reported as such, and Metadata is watched on until --create-timeout); processes, PSS and
   idle CPU per Ray node (each process is attributed to the node whose raylet is its ancestor;
   GCS, dashboard and the driver sit outside the nodes), at ready and after the topic.

The load average is recorded before every phase. Every phase has a timeout; a failure or a
timeout is reported as such in the table and the run goes on with what still makes sense.
Results: benchmarks/results/scale.{json,md,png} (see --out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (the load-client workers are): make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import throughput as tp  # noqa: E402

HERE = Path(__file__).resolve().parent
MB, MIB = tp.MB, tp.MIB
SCRIPT = Path(__file__).resolve()
RAY_OWN = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")  # Ray's processes named ray::
GOAL_PSS_MIB = 2048
GOAL_IDLE_CORES = 0.1
GOAL_CREATE_S = 10.0
SESSIONS = ("one-node", "first-group", "nodes3")

log = tp.log
_emit = tp._emit


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------------------------
# Load-client workers (each runs in its own process: `scale.py worker '<json params>'`)
# --------------------------------------------------------------------------------------------

def _tuned_producer(p: dict) -> dict:
    """throughput.py's tuned producer settings."""
    return {"linger.ms": 5, "batch.size": 1 << 20, "compression.type": "none",
            "queue.buffering.max.kbytes": 16 * 1024, "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": False}


def _tuned_consumer() -> dict:
    """throughput.py's tuned consumer settings."""
    return {"fetch.max.bytes": 50 * MIB, "max.partition.fetch.bytes": 4 * MIB, "fetch.wait.max.ms": 100,
            "queued.max.messages.kbytes": 256 * 1024, "queued.min.messages": 1_000_000}


def worker_create(p: dict) -> None:
    """CreateTopics with an AdminClient's default settings, then Metadata until every partition has
    a leader, then one record to every partition (a default producer: acks=all) acknowledged."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bs, topic, parts, rf = p["bootstrap"], p["topic"], p["partitions"], p["rf"]
    pc = time.perf_counter
    deadline = time.monotonic() + p["timeout"]
    res: dict = {"topic": topic, "partitions": parts, "rf": rf, "acks": p["acks"]}

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    admin = AdminClient({"bootstrap.servers": bs})
    prod = Producer({"bootstrap.servers": bs, "acks": p["acks"]})
    state = {"ok": 0, "err": 0, "first_err": None}
    try:
        admin.list_topics(timeout=30)  # both clients connected before the clock starts
        prod.list_topics(timeout=30)
        t0 = pc()
        try:
            admin.create_topics([NewTopic(topic, num_partitions=parts, replication_factor=rf)])[topic].result(
                timeout=left())
            res["answer_s"] = round(pc() - t0, 3)
        except Exception as e:
            # The request timed out at the client (socket.timeout.ms, 60 s by default): the broker may
            # still be creating the topic, so watch Metadata on; any other error ends the step.
            res["answer_error"] = f"after {pc() - t0:.1f} s: {type(e).__name__}: {e}"
            err = e.args[0] if e.args else None
            if not (hasattr(err, "code") and err.code() in (-185, 7)):  # _TIMED_OUT, REQUEST_TIMED_OUT
                raise
            _emit("PROGRESS", phase="create: no answer, watching Metadata", acked=0, errors=1,
                  elapsed=round(pc() - t0, 1))
        next_report = time.monotonic() + p["progress_every"]
        led = 0
        while True:
            md = admin.list_topics(topic=topic, timeout=min(10.0, left())).topics.get(topic)
            ok = md is not None and md.error is None and len(md.partitions) == parts
            led = sum(1 for pm in md.partitions.values() if pm.leader >= 0) if ok else 0
            if ok and led == parts:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{led}/{parts} partitions had a leader in Metadata after {pc() - t0:.0f} s")
            if time.monotonic() > next_report:
                _emit("PROGRESS", phase="create: leaders", acked=led, errors=0, elapsed=round(pc() - t0, 1))
                next_report = time.monotonic() + p["progress_every"]
            time.sleep(0.1)
        res["leaders_s"] = round(pc() - t0, 3)

        def on_dr(err, msg):
            if err is None:
                state["ok"] += 1
            else:
                state["err"] += 1
                state["first_err"] = state["first_err"] or str(err)

        t1 = pc()
        for part in range(parts):
            prod.produce(topic, b"first", partition=part, on_delivery=on_dr)
        while state["ok"] + state["err"] < parts:
            prod.poll(0.05)
            if time.monotonic() > deadline:
                raise TimeoutError(f"first produce: {state['ok']}/{parts} partitions acknowledged after "
                                   f"{pc() - t0:.0f} s ({state['err']} errors, first: {state['first_err']})")
            if time.monotonic() > next_report:
                _emit("PROGRESS", phase="create: first produce", acked=state["ok"], errors=state["err"],
                      elapsed=round(pc() - t0, 1))
                next_report = time.monotonic() + p["progress_every"]
        if state["err"]:
            raise RuntimeError(f"first produce: {state['err']} of {parts} partitions failed, "
                               f"first: {state['first_err']}")
        res["first_produce_s"] = round(pc() - t0, 3)
        res["first_produce_only_s"] = round(pc() - t1, 3)
        if rf > 1:  # every ISR full
            while True:
                md = admin.list_topics(topic=topic, timeout=min(10.0, left())).topics[topic]
                full = sum(1 for pm in md.partitions.values() if len(pm.isrs) >= rf)
                if full == parts:
                    res["full_isr_s"] = round(pc() - t0, 3)
                    break
                if time.monotonic() > deadline:
                    res["full_isr_error"] = f"{full}/{parts} partitions with {rf} replicas in the ISR after " \
                                            f"{pc() - t0:.0f} s"
                    break
                time.sleep(0.2)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["first_produce_acked"] = state["ok"]
    if "answer_error" in res and "error" not in res:
        res["error"] = f"CreateTopics got no answer: {res['answer_error']}"
    try:
        md = admin.list_topics(timeout=10)
        res["broker_topics"] = len(md.topics)
        res["broker_partitions"] = sum(len(t.partitions) for t in md.topics.values())
        res["internal_topics"] = sorted(t for t in md.topics if t.startswith("__"))
    except Exception as e:
        res["broker_partitions_error"] = str(e)
    prod.purge()
    _emit("RESULT", **res)


def worker_produce_all(p: dict) -> None:
    """p["records"] records, round-robin over every partition of p["topics"] ({topic: partitions})."""
    from confluent_kafka import Producer

    bs, n, size = p["bootstrap"], p["records"], p["size"]
    deadline = time.monotonic() + p["timeout"]
    conf = {"bootstrap.servers": bs, "acks": p["acks"]}
    if not p["client_defaults"]:
        conf.update(_tuned_producer(p))
    targets = [(t, i) for t, k in p["topics"].items() for i in range(k)]
    pool = [os.urandom(size) for _ in range(256)]
    state = {"ok": 0, "err": 0, "first_err": None}
    first: dict[tuple, int] = {}
    lat: list[float] = []
    pc = time.perf_counter
    sample_every = max(1, n // 10_000)

    def on_dr(err, msg):
        if err is None:
            state["ok"] += 1
            key = (msg.topic(), msg.partition())
            off = msg.offset()
            if key not in first or off < first[key]:
                first[key] = off
        else:
            state["err"] += 1
            state["first_err"] = state["first_err"] or str(err)

    def sampled(t0):
        def cb(err, msg):
            lat.append(pc() - t0)
            on_dr(err, msg)
        return cb

    prod = Producer({**conf, "on_delivery": on_dr})
    for t in p["topics"]:
        prod.list_topics(topic=t, timeout=30)  # connections + metadata before the clock starts
    cpu0 = tp._cpu_self()
    t_start = pc()
    tp.produce_all(prod, targets, pool, n, sampled, state, deadline, p["progress_every"], sample_every, t_start)
    wall = pc() - t_start
    cpu = tp._cpu_self() - cpu0
    if state["err"]:
        raise RuntimeError(f"{state['err']} delivery errors, first: {state['first_err']}")
    lat_ms = sorted(x * 1000 for x in lat)

    def pct(q):
        return round(lat_ms[min(len(lat_ms) - 1, int(q * len(lat_ms)))], 1) if lat_ms else None

    _emit("RESULT", records=n, bytes=n * size, wall_s=round(wall, 3), mb_s=round(n * size / wall / MB, 2),
          rec_s=round(n / wall, 1), lat_p50_ms=pct(0.5), lat_p99_ms=pct(0.99), client_cpu_s=round(cpu, 2),
          partitions=len(targets), first_offsets=[[t, part, off] for (t, part), off in sorted(first.items())])


def worker_fetch_all(p: dict) -> None:
    """One consumer, assign() of every partition in p["starts"] ([topic, partition, offset]), reads
    p["records"] records."""
    from confluent_kafka import Consumer, TopicPartition

    n = p["records"]
    deadline = time.monotonic() + p["timeout"]
    conf = {"bootstrap.servers": p["bootstrap"], "group.id": p["group"], "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "enable.partition.eof": False}
    if not p["client_defaults"]:
        conf.update(_tuned_consumer())
    c = Consumer(conf)
    pc = time.perf_counter
    try:
        for t in sorted({t for t, _, _ in p["starts"]}):
            c.list_topics(topic=t, timeout=30)
        got = nbytes = errs = 0
        first_err = None
        cpu0 = tp._cpu_self()
        t_start = pc()
        c.assign([TopicPartition(t, part, off) for t, part, off in p["starts"]])
        next_report = time.monotonic() + p["progress_every"]
        last_progress, last_got = time.monotonic(), 0
        while got < n:
            for m in c.consume(num_messages=10_000, timeout=0.2):
                if m.error() is not None:
                    errs += 1
                    first_err = first_err or str(m.error())
                    continue
                got += 1
                nbytes += len(m.value())
            now = time.monotonic()
            if now >= next_report:
                _emit("PROGRESS", phase="fetch", consumed=got, errors=errs, elapsed=round(pc() - t_start, 1))
                next_report = now + p["progress_every"]
            if got != last_got:
                last_progress, last_got = now, got
            elif now - last_progress > p["stall_timeout"]:
                raise TimeoutError(f"fetch stalled at {got}/{n} records for {p['stall_timeout']:.0f} s "
                                   f"(errors={errs}, first={first_err})")
            if now > deadline:
                raise TimeoutError(f"fetch timed out after {got}/{n} records (errors={errs}, first={first_err})")
        wall = pc() - t_start
        cpu = tp._cpu_self() - cpu0
    finally:
        c.close()
    _emit("RESULT", records=got, bytes=nbytes, wall_s=round(wall, 3), mb_s=round(nbytes / wall / MB, 2),
          rec_s=round(got / wall, 1), errors=errs, first_error=first_err, client_cpu_s=round(cpu, 2),
          partitions=len(p["starts"]))


def worker_group(p: dict) -> None:
    """A consumer group's only member: subscribe() with librdkafka's default consumer settings
    (auto.offset.reset=earliest, so that it reads what was produced before) until p["records"]."""
    from confluent_kafka import Consumer

    n = p["records"]
    deadline = time.monotonic() + p["timeout"]
    c = Consumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"], "auto.offset.reset": "earliest"})
    pc = time.perf_counter
    got = nbytes = errs = 0
    first_err = None
    t_first = None
    try:
        t0 = pc()
        c.subscribe([p["topic"]])
        next_report = time.monotonic() + p["progress_every"]
        while got < n:
            m = c.poll(0.2)
            now = time.monotonic()
            if m is not None:
                if m.error() is not None:
                    errs += 1
                    first_err = first_err or str(m.error())
                else:
                    if t_first is None:
                        t_first = pc()
                    got += 1
                    nbytes += len(m.value())
            if now >= next_report:
                _emit("PROGRESS", phase="group", consumed=got, errors=errs, elapsed=round(pc() - t0, 1))
                next_report = now + p["progress_every"]
            if now > deadline:
                raise TimeoutError(f"group read {got}/{n} records in {pc() - t0:.0f} s (errors={errs}, "
                                   f"first={first_err}, first record "
                                   f"{'never' if t_first is None else f'after {t_first - t0:.1f} s'})")
        t_end = pc()
    finally:
        c.close()
    _emit("RESULT", records=got, bytes=nbytes, first_record_s=round(t_first - t0, 3), all_s=round(t_end - t0, 3),
          rec_s=round(got / (t_end - t0), 1), mb_s=round(nbytes / (t_end - t0) / MB, 2),
          rec_s_after_first=round((got - 1) / (t_end - t_first), 1) if t_end > t_first else None,
          errors=errs, first_error=first_err)


def worker_main(argv: list[str]) -> int:
    p = json.loads(argv[0])
    rc = 0
    try:
        {"create": worker_create, "produce_all": worker_produce_all, "fetch_all": worker_fetch_all,
         "group": worker_group}[p["phase"]](p)
    except Exception as e:
        _emit("ERROR", phase=p["phase"], error=f"{type(e).__name__}: {e}")
        rc = 1
    sys.stdout.flush()
    os._exit(rc)  # no wait in librdkafka's destructors for what a failed phase left queued


def run(params: dict, timeout: float, label: str) -> dict:
    """One load-client phase of this file in its own process (throughput.py's runner)."""
    return tp.run_worker(params, timeout, label, script=SCRIPT)


# --------------------------------------------------------------------------------------------
# Processes, memory and CPU of a broker's tree, per kind and per Ray node
# --------------------------------------------------------------------------------------------

def _kind(cmd: str, tansu: bool) -> str:
    if tansu:
        return "tansu"
    name = cmd.split(" ", 1)[0]
    return "kray" if name.startswith("ray::") and not name.startswith(RAY_OWN) else "ray"


def _nodes(tree: dict[int, tuple], cmds: dict[int, str]) -> dict[int, str]:
    """pid -> its Ray node's name (throughput.py's labels): the node whose raylet is its ancestor."""
    raylets = {pid for pid, cmd in cmds.items() if "/raylet/raylet " in cmd}
    unlabeled = sorted(pid for pid in raylets if tp._node_label(cmds[pid]) is None)
    names = {pid: tp._node_label(cmds[pid]) or ("Ray node" if len(unlabeled) == 1 else
                                                   f"Ray node {unlabeled.index(pid) + 1}") for pid in raylets}
    out = {}
    for pid in tree:
        up, seen = pid, 0
        while up in tree and up not in raylets and seen < 64:
            up, seen = tree[up][0], seen + 1
        out[pid] = names.get(up, "outside Ray nodes")
    return out


def measure(broker: tp.Broker, idle_s: float, settle_s: float, tansu: bool) -> dict:
    """After settle_s: CPU of every process of the broker's tree over idle_s (nothing produced),
    then processes and PSS, in total, per kind (Kray's actors / Ray's own) and per Ray node."""
    root, same = broker.sampler.root, broker.sampler.same_session
    out = {"loadavg": loadavg(), "settle_s": settle_s, "idle_s": idle_s}
    time.sleep(settle_s)
    t0, before = time.monotonic(), tp.proc_tree(root, same)
    time.sleep(idle_s)
    after = tp.proc_tree(root, same)
    wall = time.monotonic() - t0
    cmds = {pid: tp._cmdline(pid) for pid in after}
    nodes = _nodes(after, cmds)
    procs = []
    for pid, st in after.items():
        b = before.get(pid)
        ticks = st[3] - (b[3] if b is not None and b[2] == st[2] else 0)
        rss, pss = tp._rss_pss(pid, True)
        procs.append({"pid": pid, "name": (cmds[pid].split(" ", 1)[0] if cmds[pid].startswith("ray::")
                                           else cmds[pid][:80]),
                      "kind": _kind(cmds[pid], tansu), "node": nodes[pid], "pss_mib": round(pss / MIB, 1),
                      "rss_mib": round(rss / MIB, 1), "idle_cores": round(ticks / tp.CLK_TCK / wall, 4)})
    gone = [pid for pid in before if pid not in after]

    def total(rows):
        return {"processes": len(rows), "pss_mib": round(sum(r["pss_mib"] for r in rows), 1),
                "rss_mib": round(sum(r["rss_mib"] for r in rows), 1),
                "idle_cores": round(sum(r["idle_cores"] for r in rows), 3)}

    out.update(total(procs))
    out["by_kind"] = {k: total([r for r in procs if r["kind"] == k]) for k in sorted({r["kind"] for r in procs})}
    if not tansu:
        out["by_node"] = {}
        for node in sorted({r["node"] for r in procs}):
            rows = [r for r in procs if r["node"] == node]
            out["by_node"][node] = dict(total(rows), kray=total([r for r in rows if r["kind"] == "kray"]))
    out["exited_during_idle"] = len(gone)
    out["procs"] = sorted(procs, key=lambda r: (r["node"], r["kind"], r["name"]))
    kr = out["by_kind"].get("kray")
    log(f"{broker.name}: {out['processes']} processes, PSS {out['pss_mib']:,.0f} MiB"
        + (f" (Kray's actors {kr['pss_mib']:,.0f} MiB in {kr['processes']})" if kr else "")
        + f", idle {out['idle_cores']:.3f} cores over {wall:.1f} s, load {out['loadavg']}")
    return out


# --------------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------------

def start_broker(name: str, tmp: Path, args, nodes: int | None = None) -> tp.Broker:
    port = tp.free_port()
    if name == "tansu":
        return tp.make_tansu(port, tmp)
    data = Path(tempfile.mkdtemp(prefix=f"{name}-data-", dir=tmp))
    broker = tp.make_kray(port, tmp, data, args.kray_override, args.kray_bin)
    broker.name = name
    broker.logfile = tmp / f"{name}.log"
    if nodes:
        i = broker.cmd.index("--port")
        broker.cmd[i + 1] = "0"  # the others count up from the first: let each pick a free one
        broker.cmd += ["--nodes", str(nodes)]
        broker.ready_re = re.compile(r"bootstrap=(\S+)")
    return broker


def stop_broker(broker: tp.Broker, out: dict, args) -> None:
    try:
        out["stop"] = broker.stop(args.stop_grace)
    except Exception as e:
        out["stop"] = {"error": str(e)}
    if not out.get("ok", True):
        out["log_tail"] = broker.log_tail(40)


def create_step(bootstrap: str, topic: str, parts: int, rf: int, acks: str, args, label: str) -> dict:
    log(f"{label}: CreateTopics {topic} ({parts} partitions, RF {rf}), load {loadavg()}")
    try:
        r = run(dict(phase="create", bootstrap=bootstrap, topic=topic, partitions=parts, rf=rf, acks=acks,
                     timeout=args.create_timeout, progress_every=args.progress_every, records=parts),
                args.create_timeout + 60, label)
    except Exception as e:
        r = {"error": f"load client: {e}"}
    if "error" in r:
        log(f"{label}: FAILED: {r['error']}")
    else:
        log(f"{label}: answer {r['answer_s']} s, leaders {r['leaders_s']} s, first produce to every "
            f"partition acknowledged {r['first_produce_s']} s"
            + (f", full ISR {r.get('full_isr_s')} s" if rf > 1 else "")
            + f"; the broker holds {r.get('broker_partitions')} partitions")
    return r


def throughput_run(name: str, broker: tp.Broker, topics: dict[str, int], mode: str, args, stamp: str) -> dict:
    """One producer then one consumer across every partition of `topics`."""
    label = f"{name} throughput ({mode})"
    r: dict = {"loadavg_before": loadavg()}
    common = dict(bootstrap=broker.bootstrap, records=args.records, size=args.record_size,
                  client_defaults=mode == "defaults", timeout=args.phase_timeout, stall_timeout=args.stall_timeout,
                  progress_every=args.progress_every)
    try:
        cpu0 = broker.sampler.sample(with_pss=False)["cpu_s"]
        log(f"{label}: produce {args.records:,} × {args.record_size} B over {sum(topics.values())} partitions, "
            f"load {r['loadavg_before']}")
        pr = run(dict(common, phase="produce_all", topics=topics, acks=args.acks), args.phase_timeout, label)
        pr["broker_cpu_s"] = round(broker.sampler.sample(with_pss=False)["cpu_s"] - cpu0, 2)
        starts = pr.pop("first_offsets")
        r["produce"] = pr
        log(f"{label}: produce {pr['mb_s']} MB/s, {pr['rec_s']:,.0f} rec/s, p50/p99 "
            f"{pr['lat_p50_ms']}/{pr['lat_p99_ms']} ms, broker CPU {pr['broker_cpu_s']} s")
        r["loadavg_before_fetch"] = loadavg()
        cpu0 = broker.sampler.sample(with_pss=False)["cpu_s"]
        fr = run(dict(common, phase="fetch_all", starts=starts, group=f"fetch-{mode}-{stamp}"),
                 args.phase_timeout, label)
        fr["broker_cpu_s"] = round(broker.sampler.sample(with_pss=False)["cpu_s"] - cpu0, 2)
        r["fetch"] = fr
        log(f"{label}: fetch {fr['mb_s']} MB/s, {fr['rec_s']:,.0f} rec/s, broker CPU {fr['broker_cpu_s']} s")
    except Exception as e:
        r["error"] = str(e)
        log(f"{label}: FAILED: {e}")
    return r


def warm_up_coordinator(name: str, broker: tp.Broker, topics: dict[str, int], args, stamp: str) -> str:
    """The throughput consumers have a group.id, and librdkafka looks up its coordinator even with
    assign(): a tiny read (the first-produce records) does that first, so that no measured run pays
    for Kray creating __consumer_offsets."""
    t = next(iter(topics))
    try:
        run(dict(phase="fetch_all", bootstrap=broker.bootstrap, records=topics[t], client_defaults=True,
                 starts=[[t, i, 0] for i in range(topics[t])], group=f"warm-{stamp}", timeout=120,
                 stall_timeout=60, progress_every=args.progress_every), 120, f"{name} warm-up")
        return "ok"
    except Exception as e:
        return f"failed: {e}"


def partition_steps(name: str, broker: tp.Broker, out: dict, args, stamp: str, save) -> dict[str, int]:
    """Topics step by step up to each total of --partitions; measure after each. Returns the topics made."""
    tansu = name == "tansu"
    if not tansu:
        log(f"{name}: baseline (ready, no user topic)")
        out["ready"] = measure(broker, args.idle_s, args.settle_s, tansu)
    topics: dict[str, int] = {}
    prev = 0
    for total in args.partitions:
        parts = total - prev
        topic = f"scale-{stamp}-{total}"
        step: dict = {"partitions_total": total, "topic": topic, "topic_partitions": parts, "loadavg_before": loadavg()}
        out["steps"].append(step)
        step["create"] = create_step(broker.bootstrap, topic, parts, 1, "all", args, f"{name} {prev}→{total} partitions")
        if "first_produce_s" in step["create"]:
            topics[topic] = parts
        step["measure"] = measure(broker, args.idle_s, args.settle_s, tansu)
        save()
        prev = total
        if "error" in step["create"]:
            out["ok"] = False
            out["error"] = f"{total} partitions: {step['create']['error']}"
            break
    return topics


def session_one_node(tmp: Path, args, stamp: str, save) -> dict:
    """tansu and one `kray start`, both up for the whole session (tansu idles at no CPU): partitions
    step by step on each, then throughput across all of them, alternating between the targets so
    that both see the same load from the rest of the machine."""
    out: dict = {name: {"ok": True, "steps": [], "loadavg_before_start": loadavg()} for name in args.targets}
    brokers: dict[str, tp.Broker] = {}
    topics: dict[str, dict[str, int]] = {}
    try:
        for name in args.targets:
            r = out[name]
            try:
                broker = brokers[name] = start_broker(name, tmp, args)
                broker.start(args.startup_timeout)
                r["startup_s"] = round(broker.startup_s, 2)
                r["command"] = shlex.join(broker.cmd)
                topics[name] = partition_steps(name, broker, r, args, stamp, save)
            except Exception as e:
                r["ok"] = False
                r["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
                log(f"{name}: FAILED: {e}")
        if args.records > 0:
            ready = [n for n in args.targets if out[n]["ok"]]
            for name in args.targets:
                out[name]["throughput"] = {"partitions": sum(topics.get(name, {}).values())} if name in ready else \
                    {"skipped": "a creation step failed"}
            for name in ready:
                out[name]["throughput"]["warm_up"] = warm_up_coordinator(name, brokers[name], topics[name], args, stamp)
            for mode in ("defaults", "tuned"):
                for name in ready:
                    r = out[name]["throughput"][mode] = throughput_run(name, brokers[name], topics[name], mode,
                                                                       args, stamp)
                    if "error" in r:
                        out[name]["ok"] = False
                    save()
    finally:
        for name, broker in brokers.items():
            stop_broker(broker, out[name], args)
    return out


def session_first_group(tmp: Path, args, stamp: str, save) -> dict:
    """On a fresh broker per target and consumer kind: --group-records records produced, then the
    first consumer with a group.id ever reads them all, then a second one (another group.id).
    subscribe: this file's group worker; assign: throughput.py's fetch worker with librdkafka's
    defaults (assign() from offset 0 with a group.id: issue 16's "first consumer" measure)."""
    out: dict = {}
    for kind in args.first_consumer:
        out[kind] = {}
        for name in ("tansu", "kray"):
            r: dict = {"ok": True, "loadavg_before_start": loadavg()}
            out[kind][name] = r
            label = f"{name} ({kind})"
            broker = start_broker(name if name == "tansu" else "kray-fresh", tmp, args)
            try:
                broker.start(args.startup_timeout)
                topic = f"group-{stamp}"
                tp.run_worker(dict(phase="produce", bootstrap=broker.bootstrap, topic=topic,
                                   records=args.group_records, size=args.record_size,
                                   partitions=args.group_partitions, create=True, acks="1",
                                   timeout=args.phase_timeout, client_defaults=False, linger_ms=5,
                                   batch_size=1 << 20, queue_kbytes=16 * 1024, queue_messages=1_000_000,
                                   latency_samples=100, progress_every=args.progress_every),
                              args.phase_timeout, f"{label}: data")
                for g in ("first", "second"):
                    r[f"loadavg_before_{g}"] = loadavg()
                    common = dict(bootstrap=broker.bootstrap, topic=topic, group=f"{g}-{stamp}",
                                  records=args.group_records, timeout=args.phase_timeout,
                                  progress_every=args.progress_every)
                    try:
                        if kind == "subscribe":
                            res = run(dict(common, phase="group"), args.phase_timeout, f"{label}: {g} consumer")
                            log(f"{label}: {g} consumer: first record after {res['first_record_s']} s, all "
                                f"{res['records']:,} after {res['all_s']} s: {res['rec_s']:,.0f} rec/s "
                                f"({res['rec_s_after_first']:,.0f} after the first record)")
                        else:
                            res = tp.run_worker(dict(common, phase="fetch", size=args.record_size,
                                                     partitions=args.group_partitions, client_defaults=True,
                                                     stall_timeout=args.stall_timeout,
                                                     # ignored with client_defaults, read all the same
                                                     fetch_max_bytes=50 * MIB, max_partition_fetch_bytes=4 * MIB,
                                                     queued_kbytes=256 * 1024),
                                                args.phase_timeout, f"{label}: {g} consumer")
                            res.pop("fetch_high_watermarks", None)
                            res.pop("listoffsets_watermarks", None)
                            res["all_s"] = res["wall_s"]
                            log(f"{label}: {g} consumer: {res['records']:,} records in {res['wall_s']} s: "
                                f"{res['rec_s']:,.0f} rec/s")
                    except Exception as e:
                        res = {"error": str(e)}
                        r["ok"] = False
                        log(f"{label}: {g} consumer FAILED: {e}")
                    r[g] = res
            except Exception as e:
                r["ok"] = False
                r["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
                log(f"{label}: first-consumer session FAILED: {e}")
            finally:
                stop_broker(broker, r, args)
            save()
    return out


def session_nodes3(tmp: Path, args, stamp: str, save) -> dict:
    out: dict = {"ok": True, "loadavg_before_start": loadavg()}
    broker = start_broker("kray-3-nodes", tmp, args, nodes=3)
    try:
        broker.start(args.startup_timeout)
        out["startup_s"] = round(broker.startup_s, 2)
        out["command"] = shlex.join(broker.cmd)
        out["bootstrap"] = broker.bootstrap
        log("kray-3-nodes: baseline (ready, no user topic)")
        out["ready"] = measure(broker, args.idle_s, args.settle_s, False)
        save()
        topic = f"scale3-{stamp}"
        out["loadavg_before_create"] = loadavg()
        out["create"] = create_step(broker.bootstrap, topic, args.nodes3_partitions, 3, "all", args,
                                    f"kray-3-nodes 0→{args.nodes3_partitions} partitions RF 3")
        if "error" in out["create"]:
            out["ok"] = False
            out["error"] = out["create"]["error"]
        out["after"] = measure(broker, args.idle_s, args.settle_s, False)
    except Exception as e:
        out["ok"] = False
        out["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
        log(f"kray-3-nodes: FAILED: {e}")
    finally:
        stop_broker(broker, out, args)
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

fmt = tp.fmt


def _s(x, nd=2):
    return "–" if x is None else f"{x:,.{nd}f}"


def _la(x):
    return "–" if not x else f"{x[0]:.1f}"


def _met(ok):
    return "**yes**" if ok else "**no**"


def step_cells(c: dict) -> tuple[str, str, str]:
    """CreateTopics answer / leaders / first produce, with a failure shown where it happened."""
    if not c:
        return "–", "–", "–"
    cells = [_s(c.get("answer_s")), _s(c.get("leaders_s")), _s(c.get("first_produce_s"))]
    if "answer_error" in c:
        cells[0] = "no answer†"
    if "error" in c and "first_produce_s" not in c:
        i = 1 if "leaders_s" not in c else 2
        cells[i] = "FAILED†"
    return tuple(cells)


def write_outputs(doc: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "scale.json").write_text(json.dumps(doc, indent=2) + "\n")
    (outdir / "scale.md").write_text(markdown(doc))
    try:
        plot(doc, outdir / "scale.png")
    except Exception as e:  # the numbers matter more than the picture
        log(f"plot failed: {e}")


def markdown(doc: dict) -> str:
    m, w, s = doc["machine"], doc["workload"], doc["sessions"]
    L = ["# Kray scale benchmark", "",
         f"{doc['date']} · {m['nproc']} CPU ({m['cpu']}), {m['mem_gib']} GiB RAM · ray {m.get('ray')} · "
         f"confluent-kafka {m.get('confluent_kafka')} / librdkafka {m.get('librdkafka')} · {m.get('tansu')} · "
         f"Python {m['python']} · git {m.get('git_commit')} · load average (1/5/15 min) {m.get('loadavg_start')} "
         f"at start, {m.get('loadavg_end')} at end; other work shared the machine, so times are pessimistic "
         "(each row's load is the 1-min average before it).", ""]
    notes: list[str] = []
    single = s.get("one-node") or {}
    if single:
        L += ["## Partitions on one broker", "",
              "Topics created step by step (a topic per step, RF 1, AdminClient defaults). Seconds from "
              "CreateTopics sent to its answer, to every partition having a leader in Metadata, and to a first "
              "produce (one record per partition, acks=all) acknowledged on every partition. Then, after "
              f"{w['settle_s']:g} s, processes and PSS of the broker's whole tree (Kray: its Ray session) and its "
              f"CPU over {w['idle_s']:g} s with nothing produced. *Kray actors* = controller, gateway and shard "
              "actors; *Ray's own* = everything else in the session (the `kray start` driver, GCS, raylet, "
              "dashboard, agents, idle workers).", "",
              "| broker | partitions | CreateTopics answer s | all leaders s | first produce to every partition s "
              "| processes | PSS MiB | Kray actors PSS MiB | Ray's own PSS MiB | idle cores (Kray actors) | load 1m |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, t in single.items():
            rows = []
            if t.get("ready"):
                rows.append(("0 (ready)", {}, t["ready"], t.get("loadavg_before_start")))
            for st in t.get("steps", []):
                label = f"{st['partitions_total']:,} (+{st['topic_partitions']:,})"
                rows.append((label, st.get("create") or {}, st.get("measure") or {}, st.get("loadavg_before")))
            if not rows:
                L.append(f"| {name} | FAILED† | | | | | | | | | |")
            for label, c, me, la in rows:
                kr, ro = (me.get("by_kind") or {}).get("kray"), (me.get("by_kind") or {}).get("ray")
                a, b, f = step_cells(c)
                idle = _s(me.get("idle_cores"), 3) + (f" ({_s(kr['idle_cores'], 3)})" if kr else "")
                L.append(f"| {name} | {label} | {a} | {b} | {f} | {fmt(me.get('processes'))} | "
                         f"{fmt(me.get('pss_mib'), 0)} | {fmt(kr['pss_mib'], 0) if kr else '–'} | "
                         f"{fmt(ro['pss_mib'], 0) if ro else '–'} | {idle} | {_la(la)} |")
            if t.get("error"):
                notes.append(f"† {name}: {t['error']}")
        L.append("")
        k = single.get("kray")
        if k and k.get("ready") and k.get("steps"):
            base = k["ready"]["pss_mib"]
            L.append("Kray's PSS beyond its ready baseline (" + f"{base:,.0f} MiB): " + ", ".join(
                f"{st['partitions_total']:,} partitions +{st['measure']['pss_mib'] - base:,.0f} MiB"
                for st in k["steps"] if st.get("measure")) + ".")
            L.append("")
    tps = {n: t["throughput"] for n, t in single.items() if isinstance(t.get("throughput"), dict)}
    if tps:
        parts = next((t.get("partitions") for t in tps.values() if t.get("partitions")), None)
        L += ["## Produce and fetch across every partition", "",
              f"{w['records']:,} × {w['record_size']} B records round-robin over all {fmt(parts)} partitions, acks="
              f"{w['acks']}, one producer process, then one consumer process (assign() of every partition from the "
              "run's first offset). *defaults*: librdkafka's default settings; *tuned*: linger.ms=5, batch.size=1 MiB, "
              "16 MiB client queue, 50 MiB/4 MiB fetches, fetch.wait.max.ms=100 (throughput.py's). MB = 10⁶ B of "
              "record values; broker CPU = CPU seconds of the broker's whole tree during the phase.", "",
              "| broker | client settings | produce MB/s | produce rec/s | p50/p99 produce latency ms | fetch MB/s "
              "| fetch rec/s | broker CPU s produce / fetch | load 1m |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for mode in ("defaults", "tuned"):
            for name, t in tps.items():
                r = t.get(mode)
                if not r:
                    L.append(f"| {name} | {mode} | skipped: {t.get('skipped', '?')} | | | | | | |")
                    continue
                p, f = r.get("produce", {}), r.get("fetch", {})
                lat = f"{_s(p.get('lat_p50_ms'), 1)} / {_s(p.get('lat_p99_ms'), 1)}" if p else "–"
                L.append(f"| {name} | {mode} | {_s(p.get('mb_s'), 1) if p else 'FAILED†'} | {fmt(p.get('rec_s'), 0)} | "
                         f"{lat} | {_s(f.get('mb_s'), 1) if f else ('FAILED†' if p else '–')} | {fmt(f.get('rec_s'), 0)} | "
                         f"{_s(p.get('broker_cpu_s'), 1)} / {_s(f.get('broker_cpu_s'), 1)} | "
                         f"{_la(r.get('loadavg_before'))} |")
                if r.get("error"):
                    notes.append(f"† {name} throughput ({mode}): {r['error']}")
        if "kray" in tps and "tansu" in tps:
            ratios = []
            for mode in ("defaults", "tuned"):
                for ph in ("produce", "fetch"):
                    try:
                        ratios.append(f"{ph} {mode} {tps['kray'][mode][ph]['mb_s'] / tps['tansu'][mode][ph]['mb_s']:.2f}×")
                    except (KeyError, TypeError, ZeroDivisionError):
                        ratios.append(f"{ph} {mode} n/a")
            L += ["", "Kray/tansu: " + ", ".join(ratios) + "."]
        L.append("")
    fg = s.get("first-group")
    if fg:
        L += ["## The first consumer on a fresh broker", "",
              f"Per row a fresh broker: {w['group_records']:,} × {w['record_size']} B records produced into a "
              f"{w['group_partitions']}-partition topic, then the first consumer with a group.id the broker ever saw "
              "reads them all (librdkafka's default consumer settings), then a second one with another group.id. "
              "*subscribe*: subscribe(), auto.offset.reset=earliest, timed from subscribe(); *assign*: assign() of "
              "every partition from offset 0 (throughput.py's fetch worker, `--client-defaults`: the measure issue 16 "
              "quotes), timed from assign(). Records/s over the whole time and, for subscribe, after the first "
              "record (without the group join).", "",
              "| consumer | broker | which | first record s | all records s | records/s | records/s after the first "
              "| load 1m |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for kind, per in fg.items():
            for name, r in per.items():
                for g in ("first", "second"):
                    x = r.get(g)
                    la = _la(r.get(f"loadavg_before_{g}"))
                    if not x:
                        continue
                    if "error" in x:
                        L.append(f"| {kind} | {name} | {g} | FAILED† | | | | {la} |")
                        notes.append(f"† {kind} {name} {g} consumer: {x['error']}")
                        continue
                    L.append(f"| {kind} | {name} | {g} | {_s(x.get('first_record_s'))} | {_s(x['all_s'])} | "
                             f"{fmt(x['rec_s'], 0)} | {fmt(x.get('rec_s_after_first'), 0)} | {la} |")
                if r.get("error"):
                    L.append(f"| {kind} | {name} | FAILED† | | | | | {_la(r.get('loadavg_before_start'))} |")
                    notes.append(f"† {kind} {name} first-consumer session: {r['error']}")
        L.append("")
        for kind, per in fg.items():
            try:
                k, t = per["kray"], per["tansu"]
                line = (f"{kind}: first consumer Kray/tansu {k['first']['rec_s'] / t['first']['rec_s']:.2f}×, "
                        f"second {k['second']['rec_s'] / t['second']['rec_s']:.2f}× (records/s over the whole time)")
                if kind == "subscribe":
                    line += (f"; after the first record: first {k['first']['rec_s_after_first'] / t['first']['rec_s_after_first']:.2f}×, "
                             f"second {k['second']['rec_s_after_first'] / t['second']['rec_s_after_first']:.2f}×")
                L.append(line + ".  ")
            except (KeyError, TypeError, ZeroDivisionError):
                pass
        L.append("")
    n3 = s.get("nodes3")
    if n3:
        c = n3.get("create") or {}
        L += ["## Three broker nodes (`kray start --nodes 3`)", "",
              f"One topic of {w['nodes3_partitions']:,} partitions, replication factor 3; first produce with acks=all. "
              f"Started in {_s(n3.get('startup_s'), 1)} s; load {_la(n3.get('loadavg_before_create'))} before "
              "CreateTopics.", "",
              "| partitions | CreateTopics answer s | all leaders s | first produce to every partition (acks=all) s "
              "| every ISR full s |", "|---:|---:|---:|---:|---:|"]
        a, b, f = step_cells(c)
        isr = _s(c.get("full_isr_s")) if "full_isr_s" in c else ("FAILED†" if "full_isr_error" in c else "–")
        L += [f"| {w['nodes3_partitions']:,} × RF 3 | {a} | {b} | {f} | {isr} |", ""]
        if c.get("error"):
            notes.append(f"† kray-3-nodes: {c['error']}")
        if c.get("full_isr_error"):
            notes.append(f"† kray-3-nodes ISR: {c['full_isr_error']}")
        if n3.get("error") and not c.get("error"):
            notes.append(f"† kray-3-nodes: {n3['error']}")
        L += ["Per Ray node (each process counted on the node whose raylet is its ancestor; GCS, dashboard and "
              "the `kray start` driver sit outside the nodes):", "",
              "| node | state | processes | PSS MiB | Kray actors: processes / PSS MiB | idle cores (Kray actors) | load 1m |",
              "|---|---|---:|---:|---:|---:|---:|"]
        for state, key in (("ready", "ready"), (f"{w['nodes3_partitions']:,} × RF 3", "after")):
            me = n3.get(key)
            if not me:
                continue
            for node, x in me["by_node"].items():
                kr = x["kray"]
                L.append(f"| {node} | {state} | {x['processes']} | {fmt(x['pss_mib'], 0)} | "
                         f"{kr['processes']} / {fmt(kr['pss_mib'], 0)} | {_s(x['idle_cores'], 3)} "
                         f"({_s(kr['idle_cores'], 3)}) | {_la(me['loadavg'])} |")
            L.append(f"| **total** | {state} | {me['processes']} | {fmt(me['pss_mib'], 0)} | "
                     f"{me['by_kind'].get('kray', {}).get('processes', 0)} / "
                     f"{fmt(me['by_kind'].get('kray', {}).get('pss_mib', 0.0), 0)} | {_s(me['idle_cores'], 3)} "
                     f"({_s(me['by_kind'].get('kray', {}).get('idle_cores'), 3)}) | {_la(me['loadavg'])} |")
        L.append("")
    L += goals(doc)
    if notes:
        L += ["Failures and timeouts:", ""] + [f"- {n}" for n in notes] + [""]
    L += ["Made by:", "", "```", doc["command"], "```", ""]
    return "\n".join(L)


def create_summary(c: dict) -> str:
    parts = [f"answer {c['answer_s']:.2f} s" if "answer_s" in c else "CreateTopics got no answer "
             f"({c.get('answer_error', '?').split(':')[0]})"]
    if "leaders_s" in c:
        parts.append(f"every leader in Metadata {c['leaders_s']:.2f} s")
    if "first_produce_s" in c:
        parts.append(f"first produce acknowledged on every partition {c['first_produce_s']:.2f} s")
    if "error" in c and "first_produce_s" not in c:
        parts.append(f"then failed: {c['error']}")
    return ", ".join(parts)


def goals(doc: dict) -> list[str]:
    s = doc["sessions"]
    rows = []
    k = (s.get("one-node") or {}).get("kray") or {}
    last = next((st for st in reversed(k.get("steps", [])) if st.get("measure")), None)
    if last and k.get("ready"):
        me, base = last["measure"], k["ready"]
        kr = me["by_kind"].get("kray", {})
        n = last["partitions_total"]
        rows.append((f"{n:,} partition replicas on one node: ≤ {GOAL_PSS_MIB:,} MiB PSS beyond Ray's own processes",
                     f"Kray actors {kr.get('pss_mib', 0):,.0f} MiB; the whole tree {me['pss_mib']:,.0f} MiB, "
                     f"{me['pss_mib'] - base['pss_mib']:+,.0f} MiB beyond the ready baseline",
                     max(kr.get("pss_mib", 1e9), me["pss_mib"] - base["pss_mib"]) <= GOAL_PSS_MIB))
        ka, whole = kr.get("idle_cores", 1e9) <= GOAL_IDLE_CORES, me["idle_cores"] <= GOAL_IDLE_CORES
        rows.append((f"{n:,} partition replicas on one node: ≤ {GOAL_IDLE_CORES} cores idle",
                     f"Kray actors {kr.get('idle_cores', 0):.3f} cores; the whole tree {me['idle_cores']:.3f} "
                     f"(Ray's own {me['by_kind'].get('ray', {}).get('idle_cores', 0):.3f}); ready baseline "
                     f"{base['idle_cores']:.3f}",
                     ka if ka == whole else f"{_met(ka)} (Kray actors), {_met(whole)} (the whole tree)"))
        c = last.get("create") or {}
        rows.append((f"a large topic created in ≤ {GOAL_CREATE_S:g} s (one node, RF 1: the step's topic of "
                     f"{last['topic_partitions']:,} partitions)", create_summary(c),
                     c.get("first_produce_s", 1e9) <= GOAL_CREATE_S and "answer_s" in c))
    c = (s.get("nodes3") or {}).get("create")
    if c is not None:
        n = doc["workload"]["nodes3_partitions"]
        rows.append((f"a {n:,}-partition topic created in ≤ {GOAL_CREATE_S:g} s (3 nodes, RF 3, first produce "
                      "with acks=all)", create_summary(c),
                     c.get("first_produce_s", 1e9) <= GOAL_CREATE_S and "answer_s" in c))
    for kind, per in (s.get("first-group") or {}).items():
        try:
            ratio = per["kray"]["first"]["rec_s"] / per["tansu"]["first"]["rec_s"]
        except (KeyError, TypeError, ZeroDivisionError):
            continue
        how = {"subscribe": "subscribe(), records/s from subscribe() to the last record, the group join included",
               "assign": "assign() with a group.id, records/s from assign() to the last record"}[kind]
        rows.append((f"the first consumer on a fresh broker reads at ≥ 0.9× tansu ({kind})",
                     f"{ratio:.2f}× ({how})", ratio >= 0.9))
    if not rows:
        return []
    return ["## Goals (issue 16)", "", "| goal | measured | met |", "|---|---|---|"] + \
        [f"| {g} | {v} | {ok if isinstance(ok, str) else _met(ok)} |" for g, v, ok in rows] + [""]


def plot(doc: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = doc["sessions"]
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    colors = {"kray": "tab:blue", "tansu": "tab:orange"}
    one = s.get("one-node") or {}
    for name in ("kray", "tansu"):
        t = one.get(name)
        if not t:
            continue
        steps = [st for st in t.get("steps", []) if st.get("measure")]
        xs = [st["partitions_total"] for st in steps]
        ok = [st for st in steps if "first_produce_s" in (st.get("create") or {})]
        ax[0, 0].plot([st["partitions_total"] for st in ok], [st["create"]["first_produce_s"] for st in ok], "o-",
                      color=colors[name], label=f"{name}: a topic of the step's size, to first produce everywhere")
        ax[0, 1].plot(xs, [st["measure"]["pss_mib"] for st in steps], "o-", color=colors[name],
                      label=f"{name}: whole tree")
        ax[1, 0].plot(xs, [st["measure"]["idle_cores"] for st in steps], "o-", color=colors[name],
                      label=f"{name}: whole tree")
        if name == "kray":
            ax[0, 1].plot(xs, [st["measure"]["by_kind"].get("kray", {}).get("pss_mib", 0) for st in steps], "s--",
                          color=colors[name], label="kray: Kray actors only")
            ax[1, 0].plot(xs, [st["measure"]["by_kind"].get("kray", {}).get("idle_cores", 0) for st in steps], "s--",
                          color=colors[name], label="kray: Kray actors only")
    c = (s.get("nodes3") or {}).get("create") or {}
    if "first_produce_s" in c:
        ax[0, 0].plot([doc["workload"]["nodes3_partitions"]], [c["first_produce_s"]], "^", color="tab:green",
                      markersize=9, label="kray 3 nodes, RF 3, acks=all")
    ax[0, 0].axhline(GOAL_CREATE_S, color="gray", ls=":", label=f"goal {GOAL_CREATE_S:g} s")
    ax[0, 0].set(xscale="log", yscale="log", xlabel="partitions on the broker", ylabel="seconds (log)",
                 title="CreateTopics → first produce acknowledged on every partition")
    ax[0, 1].axhline(GOAL_PSS_MIB, color="gray", ls=":", label="goal 2 GiB beyond Ray's own")
    ax[0, 1].set(xscale="log", xlabel="partitions on the broker", ylabel="PSS MiB", title="memory (PSS)")
    ax[1, 0].axhline(GOAL_IDLE_CORES, color="gray", ls=":", label=f"goal {GOAL_IDLE_CORES} cores")
    ax[1, 0].set(xscale="log", xlabel="partitions on the broker", ylabel="cores",
                 title=f"idle CPU over {doc['workload']['idle_s']:g} s")
    labels, vals = [], {"produce": [], "fetch": []}
    for mode in ("defaults", "tuned"):
        for name in ("kray", "tansu"):
            r = ((one.get(name) or {}).get("throughput") or {}).get(mode)
            if not isinstance(r, dict):
                continue
            labels.append(f"{name}\n{mode}\nload {_la(r.get('loadavg_before'))}")
            for ph in vals:
                vals[ph].append((r.get(ph) or {}).get("mb_s", 0))
    if labels:
        x = range(len(labels))
        b1 = ax[1, 1].bar([i - 0.2 for i in x], vals["produce"], 0.4, label="produce")
        b2 = ax[1, 1].bar([i + 0.2 for i in x], vals["fetch"], 0.4, label="fetch")
        ax[1, 1].bar_label(b1, fmt="%.0f")
        ax[1, 1].bar_label(b2, fmt="%.0f")
        ax[1, 1].set_xticks(list(x), labels)
    ax[1, 1].set(ylabel="MB/s", title="throughput across all partitions")
    ax[1, 1].margins(y=0.15)
    steps = sorted({st["partitions_total"] for n in ("kray", "tansu") for st in (one.get(n) or {}).get("steps", [])}
                   | ({doc["workload"]["nodes3_partitions"]} if "first_produce_s" in c else set()))
    for a in ax.flat:
        if a is not ax[1, 1] and steps:
            a.set_xticks(steps, [f"{x:,}" for x in steps])
            a.minorticks_off()
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.suptitle(f"Kray scale benchmark, {doc['machine']['nproc']} CPU, {doc['date'][:10]} "
                 f"(load {doc['machine'].get('loadavg_start')})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sessions", default=",".join(SESSIONS), help=f"comma list of: {', '.join(SESSIONS)}")
    ap.add_argument("--targets", default="kray,tansu", help="one-node session: comma list of tansu, kray")
    ap.add_argument("--partitions", default="10,100,1000",
                    help="partitions the broker holds after each step (a topic of the difference per step)")
    ap.add_argument("--records", type=int, default=200_000, help="records per throughput run (0: no throughput)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"], help="acks of the throughput producer")
    ap.add_argument("--group-records", type=int, default=150_000, help="records the first consumer groups read")
    ap.add_argument("--group-partitions", type=int, default=3)
    ap.add_argument("--first-consumer", default="subscribe,assign",
                    help="first-group session: which first consumers, each on fresh brokers (subscribe, assign)")
    ap.add_argument("--nodes3-partitions", type=int, default=1000)
    ap.add_argument("--idle-s", type=float, default=10, help="idle CPU window")
    ap.add_argument("--settle-s", type=float, default=3, help="wait before each idle measurement")
    ap.add_argument("--create-timeout", type=float, default=180,
                    help="per step: CreateTopics → leaders → first produce everywhere")
    ap.add_argument("--phase-timeout", type=float, default=240)
    ap.add_argument("--stall-timeout", type=float, default=60)
    ap.add_argument("--startup-timeout", type=float, default=180)
    ap.add_argument("--stop-grace", type=float, default=30)
    ap.add_argument("--progress-every", type=float, default=5)
    ap.add_argument("--kray-bin", help="kray executable (default: next to this python, then PATH)")
    ap.add_argument("--kray-override", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to `kray start` as --override KEY=VALUE (repeatable)")
    ap.add_argument("--out", default=str(HERE / "results"), help="output directory")
    ap.add_argument("--render", metavar="JSON", help="run nothing: write scale.md and scale.png again from a "
                                                     "scale.json into --out")
    args = ap.parse_args(argv)
    args.partitions = [int(x) for x in args.partitions.split(",")]
    if args.partitions != sorted(set(args.partitions)) or args.partitions[0] <= 0:
        ap.error("--partitions: increasing totals, e.g. 10,100,1000")
    args.sessions = [x.strip() for x in args.sessions.split(",") if x.strip()]
    args.targets = [x.strip() for x in args.targets.split(",") if x.strip()]
    if not args.targets or not set(args.targets) <= {"tansu", "kray"}:
        ap.error("--targets: tansu and/or kray")
    args.first_consumer = [x.strip() for x in args.first_consumer.split(",") if x.strip()]
    if not set(args.first_consumer) <= {"subscribe", "assign"}:
        ap.error("--first-consumer: subscribe and/or assign")
    for x in args.sessions:
        if x not in SESSIONS:
            ap.error(f"unknown session {x!r}")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker_main(argv[1:])
    args = parse_args(argv)
    outdir = Path(args.out)
    if args.render:  # the report again from a run's JSON (after a change to the report's layout)
        write_outputs(json.loads(Path(args.render).read_text()), outdir)
        print((outdir / "scale.md").read_text())
        return 0
    stamp = f"{int(time.time())}"
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join(["python -m benchmarks.scale"] + ([shlex.join(argv)] if argv else [])),
           "machine": tp.machine_info(["tansu"]),
           "workload": {"partitions": args.partitions, "records": args.records, "record_size": args.record_size,
                        "acks": args.acks, "group_records": args.group_records,
                        "group_partitions": args.group_partitions, "targets": args.targets, "first_consumer": args.first_consumer, "nodes3_partitions": args.nodes3_partitions,
                        "idle_s": args.idle_s, "settle_s": args.settle_s, "create_timeout_s": args.create_timeout,
                        "phase_timeout_s": args.phase_timeout, "kray_overrides": args.kray_override,
                        "sessions": args.sessions},
           "goals": {"pss_mib_beyond_ray": GOAL_PSS_MIB, "idle_cores": GOAL_IDLE_CORES, "create_s": GOAL_CREATE_S},
           "sessions": {}}
    doc["machine"]["loadavg_start"] = loadavg()
    log(f"machine: {doc['machine']}")
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="kray-bench-scale-"))

    def save():
        write_outputs(doc, outdir)

    try:
        for name in args.sessions:
            log(f"=== session {name}, load {loadavg()}")
            if name == "one-node":
                doc["sessions"][name] = session_one_node(tmp, args, stamp, save)
            elif name == "first-group":
                doc["sessions"][name] = session_first_group(tmp, args, stamp, save)
            else:
                doc["sessions"][name] = session_nodes3(tmp, args, stamp, save)
            save()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        doc["machine"]["loadavg_end"] = loadavg()
        doc["wall_s"] = round(time.monotonic() - t0, 1)
        save()
    log(f"wrote {outdir}/scale.json, scale.md, scale.png in {doc['wall_s']:.0f} s")
    print()
    print((outdir / "scale.md").read_text())
    ss = doc["sessions"]
    oks = [(ss.get("nodes3") or {}).get("ok", True)] + [x.get("ok", True) for x in (ss.get("one-node") or {}).values()] + [
        x.get("ok", True) for per in (ss.get("first-group") or {}).values() for x in per.values()]
    return 0 if all(oks) else 1


if __name__ == "__main__":
    sys.exit(main())
