#!/usr/bin/env python3
"""Transactions benchmark (issue 19): what exactly-once costs on Kray, with confluent-kafka's
default settings, beside the same work without transactions, in one run.

One `kray start` (launched here, throughput.py's broker start/stop). Phases, each --repeats times:

- produce: --records records of --value-bytes bytes into a 3-partition topic by an idempotent
  producer (no transactions), and by a transactional producer committing a transaction every 1, 10
  and 100 records (1 record per transaction is bounded by --txn1-records: each commit is a round
  trip to the transaction coordinator and markers to every partition of the transaction).
- fetch: the topic written 100 records per transaction, read from offset 0 by a consumer with
  isolation.level read_uncommitted and by one with read_committed.
- share: the same topic consumed by a share group with share.isolation.level read_uncommitted and
  by one with read_committed (one ShareConsumer, implicit acknowledgement).
- pipeline: confluent-kafka's exactly-once read-process-write loop (a read_committed group member
  without auto-commit, a transactional producer, send_offsets_to_transaction per poll batch)
  copying the idempotent phase's topic into another, beside the same loop without transactions
  (a plain producer and a synchronous offset commit per batch: at-least-once).

Run from the repo root:

    python -m benchmarks.transactions                    # ~3 min
Results: benchmarks/results/transactions.{json,md,png} (see --out).
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

PARTITIONS = 3
OVERRIDES = ["group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: a dropped client cancels it
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(60)


def produce(bootstrap: str, topic: str, records: int, value_bytes: int, per_txn: int | None) -> dict:
    """`records` records; per_txn None: idempotent, no transactions; else a transaction per `per_txn`."""
    from confluent_kafka import Producer
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True}
    if per_txn:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(config)
    if per_txn:
        p.init_transactions(60)
    value = os.urandom(value_bytes)
    started = time.perf_counter()
    for start in range(0, records, per_txn or records):
        if per_txn:
            p.begin_transaction()
        for i in range(start, min(start + (per_txn or records), records)):
            while True:
                try:
                    p.produce(topic, key=b"%d" % i, value=value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 1000 == 0:
                p.poll(0)
        if per_txn:
            p.commit_transaction(60)
    assert p.flush(60) == 0
    elapsed = time.perf_counter() - started
    return {"records": records, "s": round(elapsed, 3), "records_per_s": round(records / elapsed),
            "mb_per_s": round(records * value_bytes / elapsed / 1e6, 2)}


def fetch(bootstrap: str, topic: str, records: int, isolation: str) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"f-{uuid.uuid4().hex[:8]}", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(PARTITIONS)])
    try:
        return timed_read(lambda: c.consume(1000, timeout=0.5), records)
    finally:
        c.close()


def timed_read(poll, records: int) -> dict:
    """Poll until `records` records came (at most 120 s), timed from the first one."""
    got, started, deadline = 0, None, time.monotonic() + 120
    while got < records and time.monotonic() < deadline:
        batch = [m for m in poll() if m.error() is None]
        if batch and started is None:
            started = time.perf_counter()
        got += len(batch)
    elapsed = time.perf_counter() - started
    return {"records": got, "s": round(elapsed, 3), "records_per_s": round(got / elapsed)}


def share(bootstrap: str, topic: str, records: int, isolation: str) -> dict:
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    group = f"s-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in {"share.auto.offset.reset": "earliest", "share.isolation.level": isolation}.items()])]).values():
        f.result(30)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        return timed_read(lambda: c.poll(0.5), records)
    finally:
        c.close()


def pipeline(bootstrap: str, source: str, records: int, transactional: bool) -> dict:
    """Copy `source` into a new topic: exactly-once (transactions) or at-least-once (commit per batch)."""
    from confluent_kafka import Consumer, Producer
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, sink)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"p-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe([source])
    config = {"bootstrap.servers": bootstrap}
    if transactional:
        config["transactional.id"] = f"pipe-{uuid.uuid4().hex[:8]}"
    p = Producer(config)
    if transactional:
        p.init_transactions(60)
    done, started, deadline = 0, None, time.monotonic() + 180
    while done < records and time.monotonic() < deadline:
        batch = [m for m in c.consume(500, timeout=0.5) if m.error() is None]
        if not batch:
            continue
        if started is None:
            started = time.perf_counter()
        if transactional:
            p.begin_transaction()
        for m in batch:
            p.produce(sink, key=m.key(), value=m.value(), partition=m.partition())
        if transactional:
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
            p.commit_transaction(60)
        else:
            assert p.flush(60) == 0
            c.commit(asynchronous=False)
        done += len(batch)
    elapsed = time.perf_counter() - started
    c.close()
    return {"records": done, "s": round(elapsed, 3), "records_per_s": round(done / elapsed)}


def run_once(bootstrap: str, args) -> list[dict]:
    rows = []

    def row(phase, mode, result):
        result = {"phase": phase, "mode": mode, **result, "loadavg": [round(x, 2) for x in os.getloadavg()]}
        log(f"{phase} / {mode}: {result}")
        rows.append(result)

    topics = {}
    for mode, per_txn, n in (("idempotent, no transactions", None, args.records),
                             ("100 records per transaction", 100, args.records),
                             ("10 records per transaction", 10, args.records),
                             ("1 record per transaction", 1, min(args.records, args.txn1_records))):
        topic = f"txn-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic)
        topics[mode] = topic
        row("produce", mode, produce(bootstrap, topic, n, args.value_bytes, per_txn))
    written = topics["100 records per transaction"]
    for isolation in ("read_uncommitted", "read_committed"):
        row("fetch", isolation, fetch(bootstrap, written, args.records, isolation))
    for isolation in ("read_uncommitted", "read_committed"):
        row("share", isolation, share(bootstrap, written, args.records, isolation))
    for transactional, mode in ((False, "at-least-once (commit per batch)"), (True, "exactly-once (transactions)")):
        row("pipeline", mode, pipeline(bootstrap, topics["idempotent, no transactions"], args.records, transactional))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--txn1-records", type=int, default=2000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--kray-bin", default=None)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="kray-txn-bench-"))
    port = tp.free_port()
    broker = tp.make_kray(port, tmp, tmp / "data", OVERRIDES, args.kray_bin)
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python -m benchmarks.transactions " + " ".join(sys.argv[1:] if argv is None else argv),
           "machine": tp.machine_info(["kray"]), "params": vars(args), "runs": []}
    log("starting kray")
    broker.start(120)
    try:
        for _ in range(args.repeats):
            doc["runs"] += run_once(f"127.0.0.1:{port}", args)
    finally:
        broker.stop(30)
    doc["summary"] = summarize(doc["runs"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "transactions.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "transactions.md").write_text(render(doc))
    plot(doc, out / "transactions.png")
    print(render(doc))
    return 0


def summarize(runs: list[dict]) -> list[dict]:
    """Per (phase, mode), in the order run: median records/s (and MB/s) with their range."""
    keys = list(dict.fromkeys((r["phase"], r["mode"]) for r in runs))
    out = []
    for phase, mode in keys:
        rows = [r for r in runs if (r["phase"], r["mode"]) == (phase, mode)]
        rates = [r["records_per_s"] for r in rows]
        s = {"phase": phase, "mode": mode, "runs": len(rows), "records_per_s": round(statistics.median(rates)),
             "range": [min(rates), max(rates)], "records": rows[0]["records"]}
        if "mb_per_s" in rows[0]:
            s["mb_per_s"] = round(statistics.median(r["mb_per_s"] for r in rows), 2)
        out.append(s)
    return out


def render(doc: dict) -> str:
    m, p = doc["machine"], doc["params"]
    lines = ["# Kray transactions benchmark", "",
             f"{doc['date']} · {m.get('nproc')} CPU · `{doc['command'].strip()}`", "",
             f"One `kray start`; confluent-kafka with its default settings; topics of {PARTITIONS} partitions, RF 1; "
             f"records of {p['value_bytes']} B. Produce: {p['records']:,} records ({p['txn1_records']:,} at 1 per "
             "transaction) from one producer, first send to the last commit (or flush). Fetch and share: the "
             "topic written 100 records per transaction, from its start, one consumer. Pipeline: one group member "
             "and one producer copying the idempotent topic into a new one, a transaction (or an offset commit) "
             f"per poll batch of up to 500. Median of {p['repeats']} runs (min–max beside it: the machine is "
             "shared, so runs vary).", "",
             "| phase | mode | records | records/s | MB/s |", "|---|---|---:|---:|---:|"]
    for s in doc["summary"]:
        rate = f"{s['records_per_s']:,} ({s['range'][0]:,}–{s['range'][1]:,})"
        lines.append(f"| {s['phase']} | {s['mode']} | {s['records']:,} | {rate} | {s.get('mb_per_s', '–')} |")
    loads = [r["loadavg"][0] for r in doc["runs"]]
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
    rows = doc["summary"]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{s['phase']}\n{s['mode']}" for s in rows]
    colors = {"produce": "tab:blue", "fetch": "tab:green", "share": "tab:orange", "pipeline": "tab:purple"}
    ax.barh(range(len(rows)), [s["records_per_s"] for s in rows], color=[colors[s["phase"]] for s in rows])
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("records/s (log scale)")
    ax.set_title("Transactions on Kray: throughput beside the same work without them")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
