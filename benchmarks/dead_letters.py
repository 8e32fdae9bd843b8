#!/usr/bin/env python3
"""Dead-letter queue benchmark (issue 20, KIP-1191): how fast rejected records reach a share
group's dead-letter topic, with errors.deadletterqueue.copy.record.enable off and on, beside the
same rejections without a DLQ topic.

One `kray start` (launched here, throughput.py's broker start/stop). Per mode and repeat: a fresh
topic (--partitions partitions) of --records records of --value-bytes bytes, a DLQ topic of as many
partitions (errors.deadletterqueue.group.enable=true) and a group using it; one confluent-kafka
ShareConsumer (explicit acknowledgement) REJECTs every record it gets. Measured: the rejection
rate (first record polled to the last REJECT committed) and the DLQ rate (first record polled to
the DLQ topic's end offsets summing to --records: every DLQ record durable, acks=all). Run from the
repo root:

    python -m benchmarks.dead_letters                    # ~2 min
Results: benchmarks/results/dead-letters.{json,md,png} (see --out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks import throughput as tp

MODES = ("no DLQ", "DLQ, copy off", "DLQ, copy on")
OVERRIDES = ["group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_once(bootstrap: str, mode: str, args) -> dict:
    from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    name = uuid.uuid4().hex[:8]
    topic, dlq, group = f"bench-{name}", f"dlq.bench-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, args.partitions, 1), NewTopic(
            dlq, args.partitions, 1, config={"errors.deadletterqueue.group.enable": "true"})]).values():
        f.result(60)
    configs = {"share.auto.offset.reset": "earliest"}
    if mode != "no DLQ":
        configs |= {"errors.deadletterqueue.topic.name": dlq,
                    "errors.deadletterqueue.copy.record.enable": "true" if mode.endswith("on") else "false"}
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = os.urandom(args.value_bytes)
    for i in range(args.records):
        p.produce(topic, key=b"%d" % i, value=value, partition=i % args.partitions)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(60) == 0

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    watch = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{name}"})
    rejected, started, rejected_s, dlq_s = 0, None, None, None
    deadline = time.monotonic() + args.phase_timeout
    while time.monotonic() < deadline and (rejected < args.records or (mode != "no DLQ" and dlq_s is None)):
        if rejected < args.records:
            got = [m for m in c.poll(0.5) if m.error() is None]
            if got and started is None:
                started = time.perf_counter()
            for m in got:
                c.acknowledge(m, AcknowledgeType.REJECT)
            rejected += len(got)
            if got:
                c.commit_sync()
            if rejected >= args.records:
                rejected_s = time.perf_counter() - started
        if mode != "no DLQ" and rejected >= args.records:  # then wait for the DLQ to hold them all
            held = sum(watch.get_watermark_offsets(TopicPartition(dlq, i), timeout=10)[1]
                       for i in range(args.partitions))
            if held >= args.records:
                dlq_s = time.perf_counter() - started
            else:
                time.sleep(0.02)
    c.close()
    watch.close()
    row = {"mode": mode, "records": args.records, "rejected": rejected,
           "reject_s": rejected_s and round(rejected_s, 3), "dlq_s": dlq_s and round(dlq_s, 3)}
    row["reject_rate"] = round(args.records / rejected_s) if rejected_s else None
    row["dlq_rate"] = round(args.records / dlq_s) if dlq_s else None
    log(f"{mode}: {row}")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--phase-timeout", type=float, default=180)
    ap.add_argument("--kray-bin", default=None)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="kray-dlq-"))
    port = tp.free_port()
    broker = tp.make_kray(port, tmp, tmp / "data", OVERRIDES, args.kray_bin)
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python -m benchmarks.dead_letters " + " ".join(sys.argv[1:] if argv is None else argv),
           "machine": tp.machine_info(["kray"]), "params": vars(args), "runs": []}
    log("starting kray")
    broker.start(120)
    try:
        bootstrap = f"127.0.0.1:{port}"
        for _ in range(args.repeats):
            for mode in MODES:
                row = run_once(bootstrap, mode, args)
                row["loadavg"] = [round(x, 2) for x in os.getloadavg()]
                doc["runs"].append(row)
    finally:
        broker.stop(30)
    doc["summary"] = summarize(doc["runs"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dead-letters.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "dead-letters.md").write_text(render(doc))
    plot(doc, out / "dead-letters.png")
    print(render(doc))
    return 0


def summarize(runs: list[dict]) -> dict:
    """Per mode: the median rates over the repeats."""
    out = {}
    for mode in MODES:
        rows = [r for r in runs if r["mode"] == mode]
        values = lambda key: [r[key] for r in rows if r[key]]
        out[mode] = {"runs": len(rows)}
        for key in ("reject_rate", "dlq_rate"):
            v = values(key)
            out[mode][key] = round(statistics.median(v)) if v else None
            out[mode][key + "_range"] = [min(v), max(v)] if v else None
    return out


def render(doc: dict) -> str:
    m, p = doc["machine"], doc["params"]
    lines = ["# Kray dead-letter queue benchmark (KIP-1191)", "",
             f"{doc['date']} · {m.get('nproc')} CPU · `{doc['command'].strip()}`", "",
             f"One `kray start`. {p['records']:,} records of {p['value_bytes']} B in {p['partitions']} partitions; one "
             "confluent-kafka ShareConsumer (explicit acknowledgement) REJECTs every record. Rejected/s: first "
             "record polled to the last REJECT committed. DLQ/s: first record polled to the DLQ topic "
             f"({p['partitions']} partitions, RF 1) holding them all (acks=all writes). Median of "
             f"{p['repeats']} runs (min–max beside it: the machine is shared, so runs vary).", "",
             "| mode | rejected records/s | DLQ records/s |", "|---|---:|---:|"]
    cell = lambda s, key: (f"{s[key]:,} ({s[key + '_range'][0]:,}–{s[key + '_range'][1]:,})" if s[key] else "–")
    for mode, s in doc["summary"].items():
        lines.append(f"| {mode} | {cell(s, 'reject_rate')} | {cell(s, 'dlq_rate')} |")
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
    modes = list(doc["summary"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(modes))
    ax.bar([x - 0.2 for x in xs], [doc["summary"][k]["reject_rate"] or 0 for k in modes], 0.4, label="rejected/s")
    ax.bar([x + 0.2 for x in xs], [doc["summary"][k]["dlq_rate"] or 0 for k in modes], 0.4, label="in the DLQ/s")
    ax.set_xticks(list(xs), modes)
    ax.set_ylabel("records/s")
    ax.set_title("Share-group rejections into a dead-letter topic")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
