#!/usr/bin/env python3
"""Key-ordered sharing benchmark (issue 20, share.key.ordering.enable): records/s of a share group
with key ordering on, beside plain sharing, with 1,000 keys and with 10 keys, 4 consumers.

One `kray start` (launched here, throughput.py's broker start/stop). Per mode and repeat: a fresh
topic (--partitions partitions) of --records records of --value-bytes bytes, key i % keys (key k
on partition k % partitions), produced with --compression (the leader decompresses batches to read
keys); a fresh group (share.auto.offset.reset=earliest, and share.key.ordering.enable=true for the
key-ordered modes); --consumers confluent-kafka ShareConsumers with the client's default settings
(implicit acknowledgement), one thread each, consume until every record was delivered. Measured:
records/s (first record polled by any consumer to the last), the broker's CPU seconds (every process
of `kray start`'s session) per 1,000 records, and out-of-order deliveries (a record delivered after
a later record of its key already was: 0 with key ordering). Run from the repo root:

    python -m benchmarks.key_ordering                    # ~2 min
    python -m benchmarks.key_ordering --replot           # the PNG again, where matplotlib is
Results: benchmarks/results/key-ordering.{json,md,png} (see --out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from benchmarks import throughput as tp

MODES = (("plain sharing", False, 1000), ("key-ordered", True, 1000),
         ("plain sharing", False, 10), ("key-ordered", True, 10))
OVERRIDES = ["group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def label(mode) -> str:
    return f"{mode[0]}, {mode[2]:,} keys"


def broker_cpu_s(broker) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(st[3] for st in tp.proc_tree(broker.proc.pid, True).values()) / ticks


def run_once(bootstrap: str, broker, mode, args) -> dict:
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    _, ordered, keys = mode
    name = uuid.uuid4().hex[:8]
    topic, group = f"bench-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
    configs = {"share.auto.offset.reset": "earliest"} | ({"share.key.ordering.enable": "true"} if ordered else {})
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": args.compression})
    value = os.urandom(args.value_bytes)
    for i in range(args.records):
        k = i % keys
        p.produce(topic, key=b"key-%d" % k, value=value, partition=k % args.partitions)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(60) == 0

    consumers = []
    for _ in range(args.consumers):
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        c.subscribe([topic])
        consumers.append(c)
    lock = threading.Lock()
    seen: set = set()
    latest: dict = {}            # (partition, key) -> highest offset delivered so far
    state = {"first": None, "last": None, "deliveries": 0, "out_of_order": 0}
    per_consumer = [0] * args.consumers
    cpu0 = broker_cpu_s(broker)
    deadline = time.monotonic() + args.phase_timeout

    def work(k):
        c = consumers[k]
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= args.records:
                    return
            got = [m for m in c.poll(0.2) if m.error() is None]
            if not got:
                continue
            now = time.perf_counter()
            with lock:
                if state["first"] is None:
                    state["first"] = now
                for m in got:
                    pk, o = (m.partition(), m.key()), m.offset()
                    if latest.get(pk, -1) > o:
                        state["out_of_order"] += 1
                    latest[pk] = max(latest.get(pk, -1), o)
                    seen.add((m.partition(), o))
                state["deliveries"] += len(got)
                per_consumer[k] += len(got)
                if len(seen) >= args.records:
                    state["last"] = now

    threads = [threading.Thread(target=work, args=(k,)) for k in range(args.consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = state["last"] or time.perf_counter()
    cpu = broker_cpu_s(broker) - cpu0
    for c in consumers:
        c.close()
    elapsed = end - state["first"] if state["first"] else None
    row = {"mode": label(mode), "key_ordering": ordered, "keys": keys, "records": args.records,
           "consumed": len(seen), "deliveries": state["deliveries"], "complete": len(seen) >= args.records,
           "seconds": elapsed and round(elapsed, 3),
           "rate": round(len(seen) / elapsed) if elapsed else None,
           "broker_cpu_s_per_1000": round(cpu / max(len(seen), 1) * 1000, 4),
           "out_of_order": state["out_of_order"], "per_consumer": per_consumer}
    log(f"{label(mode)}: {row}")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--compression", default="lz4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--phase-timeout", type=float, default=45)
    ap.add_argument("--kray-bin", default=None)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--only", default=None, help="run only the modes whose name contains this (e.g. '10 keys')")
    ap.add_argument("--replot", action="store_true", help="only write the Markdown and PNG again from --out's JSON")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.replot:
        doc = json.loads((out / "key-ordering.json").read_text())
        (out / "key-ordering.md").write_text(render(doc))
        plot(doc, out / "key-ordering.png")
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="kray-keys-"))
    port = tp.free_port()
    broker = tp.make_kray(port, tmp, tmp / "data", OVERRIDES, args.kray_bin)
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python -m benchmarks.key_ordering " + " ".join(sys.argv[1:] if argv is None else argv),
           "machine": tp.machine_info(["kray"]), "params": vars(args), "runs": []}
    log("starting kray")
    broker.start(120)
    try:
        bootstrap = f"127.0.0.1:{port}"
        for _ in range(args.repeats):
            for mode in [m for m in MODES if not args.only or args.only in label(m)]:
                row = run_once(bootstrap, broker, mode, args)
                row["loadavg"] = [round(x, 2) for x in os.getloadavg()]
                doc["runs"].append(row)
    finally:
        broker.stop(30)
    doc["summary"] = summarize(doc["runs"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "key-ordering.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "key-ordering.md").write_text(render(doc))
    plot(doc, out / "key-ordering.png")
    print(render(doc))
    return 0


def summarize(runs: list[dict]) -> dict:
    """Per mode: the median over the repeats."""
    out = {}
    for mode in MODES:
        rows = [r for r in runs if r["mode"] == label(mode)]
        rates = [r["rate"] for r in rows if r["rate"]]
        cpus = [r["broker_cpu_s_per_1000"] for r in rows]
        out[label(mode)] = {"runs": len(rows), "complete": all(r["complete"] for r in rows),
                            "rate": round(statistics.median(rates)) if rates else None,
                            "rate_range": [min(rates), max(rates)] if rates else None,
                            "broker_cpu_s_per_1000": round(statistics.median(cpus), 4) if cpus else None,
                            "out_of_order": sum(r["out_of_order"] for r in rows)}
    return out


def render(doc: dict) -> str:
    m, p = doc["machine"], doc["params"]
    lines = ["# Kray key-ordered sharing benchmark (share.key.ordering.enable)", "",
             f"{doc['date']} · {m.get('nproc')} CPU · `{doc['command'].strip()}`", "",
             f"One `kray start`. {p['records']:,} records of {p['value_bytes']} B ({p['compression']} batches) in "
             f"{p['partitions']} partitions, key i % keys; {p['consumers']} confluent-kafka ShareConsumers with the "
             "client's default settings (implicit acknowledgement), one thread each, in one process. Records/s: "
             "first record polled to the last record delivered. Broker CPU: every process of `kray start`, "
             "per 1,000 records. Out of order: deliveries of a record after a later record of its key "
             f"(summed over the runs). Median of {p['repeats']} runs (min–max beside it: the machine is shared).",
             "", "| mode | records/s | broker CPU s / 1,000 records | out of order |", "|---|---:|---:|---:|"]
    for mode, s in doc["summary"].items():
        rate = f"{s['rate']:,} ({s['rate_range'][0]:,}–{s['rate_range'][1]:,})" if s["rate"] else "–"
        if not s["complete"]:
            rate += " (not all consumed in time)"
        lines.append(f"| {mode} | {rate} | {s['broker_cpu_s_per_1000']} | {s['out_of_order']:,} |")
    loads = [r["loadavg"][0] for r in doc["runs"] if "loadavg" in r]
    if loads:
        lines += ["", f"1-minute load average during the runs: {min(loads)}–{max(loads)}."]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: skipping the PNG")
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    groups = sorted({mode[2] for mode in MODES}, reverse=True)
    for i, (name, ordered) in enumerate((("plain sharing", False), ("key-ordered", True))):
        values = [doc["summary"][label((name, ordered, keys))]["rate"] or 0 for keys in groups]
        bars = ax.bar([x + (i - 0.5) * 0.4 for x in range(len(groups))], values, 0.4, label=name)
        ax.bar_label(bars, [f"{v:,}" for v in values], fontsize=8)
    ax.set_xticks(list(range(len(groups))), [f"{k:,} keys" for k in groups])
    ax.set_yscale("log")
    ax.set_ylabel("records/s (log scale)")
    ax.set_title(f"Share group, {doc['params']['consumers']} consumers: key-ordered vs plain sharing")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
