"""Replication benchmark: what three replicas and acks=all cost, and how long a leader's loss stalls
producers and share consumers.

1. Throughput, one run: a 3-broker `kray start --nodes 3` on this machine; per series a fresh
   3-partition topic (deleted after its run, so that every run has the same actors beside it),
   produce then fetch (throughput.py's load workers), replication factor 1 with acks=1 beside
   replication factor 3 with acks=all and min.insync.replicas=2, with tuned clients and with
   librdkafka's defaults. Processes and memory per Ray node, and per replica actor, at the end
   (the warm-up topic, the last topic and the coordinators' partitions still there).
2. Failover, on a LocalCluster (3 broker nodes, in this process, so it can kill them): an
   idempotent acks=all producer (steady rate) and a ShareConsumer on a 1-partition topic with
   three replicas; the leader's node is hard-killed; measured from the kill to the first
   acknowledged produce, to the new leader in the metadata, and to the first record produced
   after the kill that the share consumer receives (served by the new leader's share-partition
   leader). Beside it, a topic of --failover-partitions partitions (300 by default, 3 replicas):
   at each kill, the time until every one of them that the killed broker led has a new leader in
   the metadata (issue 16: hundreds of partitions moved within 3 s). The broker is restarted and
   rejoins the ISR before the next kill.

    python -m benchmarks.replication                  # both parts, results in benchmarks/results/replication/
    python -m benchmarks.replication --kills 5 --records 200000
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from benchmarks import throughput as tp

HERE = Path(__file__).resolve().parent
SERIES = [  # (name, replication factor, acks, topic configs)
    ("RF 1, acks=1", 1, "1", {}),
    ("RF 3, acks=all", 3, "all", {"min.insync.replicas": "2"}),
]
REPLICA_CLASSES = ("ray::ShardActor",)  # every replica (user partitions and coordinators) lives in one


def log(msg: str) -> None:
    tp.log(msg)


# ---- part 1: throughput --------------------------------------------------------------------
def replica_memory(root: int) -> dict:
    """PSS of each shard actor process (hosting the replicas: user partitions and coordinators) in the
    broker's tree."""
    pss = []
    for pid in tp.proc_tree(root, True):
        if tp._cmdline(pid).startswith(REPLICA_CLASSES):
            pss.append(tp._rss_pss(pid, True)[1] / tp.MIB)
    return {"replica_actors": len(pss), "pss_mib_median": round(statistics.median(pss), 1) if pss else None,
            "pss_mib_total": round(sum(pss), 1)}


def create_topic(bootstrap: str, topic: str, rf: int, configs: dict) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, rf, config=configs)])[topic].result(60)
    deadline = time.monotonic() + 60
    while True:  # every partition has a leader and (for RF 3) its full ISR
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if md.error is None and len(md.partitions) == 3 and all(
                p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: partitions without a leader or full ISR after 60 s")
        time.sleep(0.2)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(60)


def throughput_part(args) -> dict:
    out: dict = {"series": {}}
    tmp = Path(tempfile.mkdtemp(prefix="kray-bench-repl-"))
    port = tp.free_port()
    broker = tp.make_kray(port, tmp, tmp / "data", [], args.kray_bin)
    broker.cmd += ["--nodes", "3"]
    try:
        broker.start(args.startup_timeout)
        out["startup_s"] = round(broker.startup_s, 1)
        out["command"] = " ".join(broker.cmd)
        stamp = f"{int(time.time())}"
        # warm-up, not measured: the first consumer group creates the coordinators' partitions
        create_topic(broker.bootstrap, f"warm-up-{stamp}", 3, {})
        for phase in ("produce", "fetch"):
            tp.run_worker(dict(bootstrap=broker.bootstrap, records=1000, size=100, stall_timeout=60, partitions=3,
                               timeout=args.phase_timeout, client_defaults=True, progress_every=3, phase=phase,
                               topic=f"warm-up-{stamp}", create=False, acks="all", latency_samples=100,
                               linger_ms=5, batch_size=1 << 20, queue_kbytes=16 * 1024, queue_messages=100_000,
                               group=f"warm-up-{stamp}", fetch_max_bytes=50 * tp.MIB,
                               max_partition_fetch_bytes=4 * tp.MIB, queued_kbytes=256 * 1024),
                          args.phase_timeout, "warm-up")
        for defaults in (False, True):
            for name, rf, acks, configs in SERIES:
                label = f"{name}{', client defaults' if defaults else ''}"
                runs = []
                for r in range(args.repeats):
                    topic = f"repl-{rf}-{'d' if defaults else 't'}-{stamp}-{r}"
                    create_topic(broker.bootstrap, topic, rf, configs)
                    time.sleep(2)  # the new replicas settle (follower fetchers connect)
                    run = {}
                    for phase in ("produce", "fetch"):
                        params = dict(bootstrap=broker.bootstrap, records=args.records, size=args.record_size,
                                      stall_timeout=60, partitions=3, timeout=args.phase_timeout,
                                      client_defaults=defaults, progress_every=3, phase=phase, topic=topic)
                        if phase == "produce":
                            params.update(create=False, acks=acks, linger_ms=5, batch_size=1 << 20,
                                          queue_kbytes=16 * 1024, queue_messages=1_000_000, latency_samples=10_000)
                        else:
                            params.update(group=f"f-{topic}", fetch_max_bytes=50 * tp.MIB,
                                          max_partition_fetch_bytes=4 * tp.MIB, queued_kbytes=256 * 1024)
                        cpu0 = broker.sampler.sample(with_pss=False)["cpu_s"]
                        res = tp.run_worker(params, args.phase_timeout, f"{label} run {r + 1}")
                        res["broker_cpu_s"] = round(broker.sampler.sample(with_pss=False)["cpu_s"] - cpu0, 2)
                        run[phase] = res
                        log(f"{label} run {r + 1}: {phase} {res['mb_s']} MB/s"
                            + (f", p50/p99 {res['lat_p50_ms']}/{res['lat_p99_ms']} ms" if phase == "produce" else ""))
                    runs.append(run)
                    if r < args.repeats - 1 or (name, defaults) != (SERIES[-1][0], True):
                        # every series runs beside the same number of replica actors (each costs
                        # CPU even idle: a 2-core machine slows as they pile up)
                        delete_topic(broker.bootstrap, topic)
                shown = {phase: sorted((r[phase] for r in runs), key=lambda x: x["mb_s"])[len(runs) // 2]
                         for phase in ("produce", "fetch")}
                out["series"][label] = {"rf": rf, "acks": acks, "client_defaults": defaults, "configs": configs,
                                        "runs": runs, "median": shown}
        out["per_node"] = tp.per_node(tp.proc_tree(broker.sampler.root, True))
        out["replicas"] = replica_memory(broker.sampler.root)
    finally:
        out["stop"] = broker.stop(30)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ---- part 2: failover ----------------------------------------------------------------------
def failover_part(args) -> dict:
    import ray
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    from actors import internal_topics
    from cluster.local import LocalCluster

    if ray.is_initialized():
        ray.shutdown()
    kills = []
    with LocalCluster(nodes=3) as cluster:
        for name in (internal_topics.CONSUMER_OFFSETS, internal_topics.SHARE_GROUP_STATE):
            ray.get(cluster.controller.ensure_internal_topic.remote(name))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic, group = f"failover-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
        bulk = f"failover-bulk-{uuid.uuid4().hex[:6]}"
        if args.failover_partitions:
            admin.create_topics([NewTopic(bulk, args.failover_partitions, 3)])[bulk].result(120)

        def bulk_leaders() -> dict[int, int]:
            if not args.failover_partitions:
                return {}
            return {p: m.leader for p, m in admin.list_topics(bulk, timeout=10).topics[bulk].partitions.items()}
        for f in admin.incremental_alter_configs([ConfigResource("group", group, incremental_configs=[
                ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(60)
        sent: dict[int, float] = {}
        acked: dict[int, float] = {}
        received: dict[int, float] = {}
        stop, consumed = threading.Event(), threading.Event()

        def produce():
            p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"})
            i = 0
            while not stop.is_set():
                sent[i] = time.monotonic()
                p.produce(topic, key=b"%d" % i, value=b"v" * 100,
                          on_delivery=lambda err, m: err is None and acked.setdefault(int(m.key()), time.monotonic()))
                p.poll(0)
                i += 1
                time.sleep(1 / args.rate)
            p.flush(60)

        def consume():
            c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
            c.subscribe([topic])
            while not consumed.is_set():
                for m in c.poll(0.2):
                    if m.error() is None:
                        received.setdefault(int(m.key()), time.monotonic())
            c.close()

        threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
        for t in threads:
            t.start()
        try:
            time.sleep(5)
            for k in range(args.kills):
                victim = cluster.leader(topic, 0)
                moved = [p for p, leader in bulk_leaders().items() if leader == victim]
                killed = time.monotonic()
                cluster.kill_node(victim)
                deadline = killed + 60
                leader_s = ack_s = share_s = None
                all_moved_s = None if moved else 0.0
                while time.monotonic() < deadline and None in (leader_s, ack_s, share_s, all_moved_s):
                    now = time.monotonic()
                    if all_moved_s is None:
                        leaders = bulk_leaders()
                        if all(leaders.get(p) not in (victim, -1, None) for p in moved):
                            all_moved_s = time.monotonic() - killed
                    if leader_s is None and cluster.leader(topic, 0) not in (victim, -1):
                        leader_s = now - killed
                    # records sent after the kill: when the first was acknowledged, and consumed
                    after = [t for key, t in list(acked.items()) if sent[key] > killed]
                    if ack_s is None and after:
                        ack_s = min(after) - killed
                    late = [t for key, t in list(received.items()) if sent[key] > killed]
                    if share_s is None and late:
                        share_s = min(late) - killed
                    time.sleep(0.02)
                kills.append({"victim": victim, "new_leader_s": _r(leader_s), "first_ack_s": _r(ack_s),
                              "first_share_record_s": _r(share_s), "moved_partitions": len(moved),
                              "all_moved_s": _r(all_moved_s)})
                log(f"kill {k + 1}/{args.kills} of broker {victim}: new leader after {_r(leader_s)} s, first acked "
                    f"produce after {_r(ack_s)} s, first new record to the share consumer after {_r(share_s)} s, "
                    f"all {len(moved)} partitions it led in the bulk topic led again after {_r(all_moved_s)} s")
                cluster.restart_node(victim)
                isr_deadline = time.monotonic() + 60
                while len(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs) < 3:
                    if time.monotonic() > isr_deadline:
                        raise TimeoutError(f"broker {victim} did not rejoin the ISR within 60 s")
                    time.sleep(0.2)
                time.sleep(3)
        finally:
            stop.set()
            threads[0].join(90)
            drain_deadline = time.monotonic() + 60  # the consumer reads what was acknowledged last
            while set(acked) - set(received) and time.monotonic() < drain_deadline:
                time.sleep(0.2)
            consumed.set()
            threads[1].join(90)
        lost = sorted(set(acked) - set(received))
    return {"kills": kills, "rate_per_s": args.rate, "acked": len(acked), "received": len(received),
            "acked_not_received": len(lost), "bulk_partitions": args.failover_partitions,
            "median": {key: _median([k[key] for k in kills]) for key in ("new_leader_s", "first_ack_s",
                                                                         "first_share_record_s", "all_moved_s")}}


def _r(x):
    return None if x is None else round(x, 2)


def _median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


# ---- outputs -------------------------------------------------------------------------------
def write_outputs(doc: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "replication.json").write_text(json.dumps(doc, indent=2) + "\n")
    m = doc["machine"]
    lines = ["# Kray replication benchmark", "",
             f"{doc['date']} · {m['nproc']} CPU, {m['mem_gib']} GiB RAM · confluent-kafka {m.get('confluent_kafka')} "
             f"· `{doc['command']}`", ""]
    t = doc.get("throughput")
    if t:
        w = doc["workload"]
        lines += [f"Three brokers (`kray start --nodes 3`, one machine). Per series: a fresh 3-partition topic, "
                  f"{w['records']:,} × {w['record_size']} B records from one producer, then one consumer; median "
                  f"of {w['repeats']} runs by MB/s (MB = 10⁶ B of values). Tuned: linger.ms=5, batch.size=1 MiB.", "",
                  "| series | produce MB/s | p50/p99 produce latency ms | fetch MB/s | broker CPU s (produce) |",
                  "|---|---:|---:|---:|---:|"]
        for label, s in t["series"].items():
            p, f = s["median"]["produce"], s["median"]["fetch"]
            lines.append(f"| {label} | {p['mb_s']} | {p['lat_p50_ms']} / {p['lat_p99_ms']} | {f['mb_s']} | "
                         f"{p.get('broker_cpu_s')} |")
        r = t.get("replicas") or {}
        lines += ["", f"Shard actors (hosting every replica): {r.get('replica_actors')} processes, median PSS {r.get('pss_mib_median')} MiB "
                      f"each ({r.get('pss_mib_total')} MiB in all).", "",
                  "| Ray node | processes | PSS MiB |", "|---|---:|---:|"]
        for node, n in t.get("per_node", {}).items():
            lines.append(f"| {node} | {n['processes']} | {n['pss_mib']} |")
    fo = doc.get("failover")
    if fo:
        lines += ["", f"Failover (LocalCluster, 3 brokers; 1 partition, 3 replicas, min.insync.replicas=2; an "
                      f"idempotent acks=all producer at {fo['rate_per_s']} records/s and one ShareConsumer; the "
                      f"leader's node hard-killed {len(fo['kills'])} times, restarted between kills; beside it a "
                      f"topic of {fo.get('bulk_partitions', 0)} partitions with 3 replicas, of which the killed "
                      f"broker led the *moved* ones):", "",
                  "| kill | victim | new leader s | first acked produce s | first new record to the share consumer s "
                  "| moved partitions | every moved partition led again s |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for i, k in enumerate(fo["kills"], 1):
            lines.append(f"| {i} | {k['victim']} | {k['new_leader_s']} | {k['first_ack_s']} | {k['first_share_record_s']} "
                         f"| {k.get('moved_partitions', '–')} | {k.get('all_moved_s', '–')} |")
        md = fo["median"]
        lines.append(f"| median | | {md['new_leader_s']} | {md['first_ack_s']} | {md['first_share_record_s']} | "
                     f"| {md.get('all_moved_s', '–')} |")
        lines += ["", f"Acknowledged {fo['acked']:,} records; the share consumer received {fo['received']:,}; "
                      f"acknowledged but never received: {fo['acked_not_received']}."]
    (outdir / "replication.md").write_text("\n".join(lines) + "\n")
    _plot(doc, outdir / "replication.png")


def _plot(doc: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    t = doc.get("throughput")
    if t:
        labels = list(t["series"])
        produce = [t["series"][k]["median"]["produce"]["mb_s"] for k in labels]
        fetch = [t["series"][k]["median"]["fetch"]["mb_s"] for k in labels]
        x = range(len(labels))
        axes[0].bar([i - 0.2 for i in x], produce, 0.4, label="produce")
        axes[0].bar([i + 0.2 for i in x], fetch, 0.4, label="fetch")
        axes[0].set_xticks(list(x), [k.replace(", client", "\nclient") for k in labels], fontsize=7)
        axes[0].set_ylabel("MB/s")
        axes[0].set_title("3 brokers on one machine")
        axes[0].legend()
    fo = doc.get("failover")
    if fo:
        keys = [("new_leader_s", "new leader"), ("first_ack_s", "first acked produce"),
                ("first_share_record_s", "first new share record")]
        for key, label in keys:
            axes[1].plot(range(1, len(fo["kills"]) + 1), [k[key] for k in fo["kills"]], marker="o", label=label)
        axes[1].set_xlabel("kill")
        axes[1].set_ylabel("seconds after the hard kill")
        axes[1].set_title("leader node hard-killed")
        axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--failover-partitions", type=int, default=300,
                    help="partitions (3 replicas) of the topic beside the failover topic, moved by each kill")
    ap.add_argument("--rate", type=float, default=500, help="failover producer records/s")
    ap.add_argument("--parts", default="throughput,failover")
    ap.add_argument("--phase-timeout", type=float, default=300)
    ap.add_argument("--startup-timeout", type=float, default=180)
    ap.add_argument("--kray-bin")
    ap.add_argument("--out", default=str(HERE / "results" / "replication"))
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python -m benchmarks.replication " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": tp.machine_info(["kray"]),
           "workload": {"records": args.records, "record_size": args.record_size, "repeats": args.repeats}}
    if "throughput" in parts:
        doc["throughput"] = throughput_part(args)
        write_outputs(doc, Path(args.out))
    if "failover" in parts:
        doc["failover"] = failover_part(args)
    write_outputs(doc, Path(args.out))
    print((Path(args.out) / "replication.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
