"""Throughput with 20 ms ± 5 ms between hosts (issue 17): Kray on three hosts of their own
(cluster/hosts: network namespaces on one machine, `ray start` + `kray start --address`), acks=all
produce and fetch, with no latency added and with latency between every two hosts, each with
librdkafka's default settings and with tuned ones (those of benchmarks/throughput.py).

    python -m benchmarks.latency [--seconds 12] [--repeats 2] [--delay-ms 20 --jitter-ms 5]   (root)

Latency "between hosts" is made by degrading every host's link by delay/2 ± jitter/2 each way
(HostNetwork.degrade: tc netem, or cluster/hosts/delay_relay.py where the kernel has no netem):
a packet from one host to another crosses two degraded links, so it is held 2 x U[7.5, 12.5] ms
(15-25 ms, mean 20, triangular); a client here crosses one (10 ± 2.5 ms each way). So acks=all
writes pay the latency twice over (client -> leader, leader <- follower's fetch), as on machines
20 ms apart with clients beside none of them.

Each cell: a fresh topic (3 partitions, replication factor 3, min.insync.replicas 2), one producer
process writing 1 KiB random values as fast as it can for --seconds then flushing (MB/s = value
bytes acknowledged / time from the first produce to the last acknowledgement), then one consumer
process reading them all back from offset 0 (MB/s over the time from its start to the last
record). Cells are interleaved (none/defaults, none/tuned, latency/defaults, latency/tuned, per
repeat) so the machine's noise spreads over all of them; the table shows the median over repeats,
the JSON every run with the 1-minute load average before and after it. MB = 10**6 bytes.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from benchmarks.partition_heal import OVERRIDES, log

MB = 1_000_000
RECORD_BYTES = 1024
PARTITIONS = 3
TUNED_PRODUCER = {"linger.ms": 5, "batch.size": 1 << 20, "compression.type": "none",
                  "queue.buffering.max.kbytes": 16 * 1024, "queue.buffering.max.messages": 1_000_000}
TUNED_CONSUMER = {"fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 4 << 20, "fetch.wait.max.ms": 100,
                  "queued.max.messages.kbytes": 256 * 1024, "queued.min.messages": 1_000_000}
WORKER_TIMEOUT_S = 300


# ---- the clients, each in a process of its own ------------------------------------------------
def worker_produce(p: dict) -> dict:
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": p["bootstrap"], "acks": "all", "message.timeout.ms": 120_000}
    if p["tuned"]:
        conf |= TUNED_PRODUCER
    prod = Producer(conf)
    rng = random.Random(1)
    pool = [rng.randbytes(RECORD_BYTES) for _ in range(256)]
    state = {"acked": 0, "failed": 0, "last": None}

    def done(err, _msg):
        if err is None:
            state["acked"] += 1
            state["last"] = time.monotonic()
        else:
            state["failed"] += 1
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < p["seconds"]:
        try:
            prod.produce(p["topic"], value=pool[n % 256], partition=n % PARTITIONS, on_delivery=done)
            n += 1
        except BufferError:
            prod.poll(0.01)
            continue
        if n % 1000 == 0:
            prod.poll(0)
    unflushed = prod.flush(120)
    wall = (state["last"] or time.monotonic()) - t0
    return {"sent": n, "acked": state["acked"], "failed": state["failed"], "unflushed": unflushed,
            "wall_s": round(wall, 3), "mb_s": round(state["acked"] * RECORD_BYTES / wall / MB, 2)}


def worker_fetch(p: dict) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    conf = {"bootstrap.servers": p["bootstrap"], "group.id": f"lat-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "enable.partition.eof": False}
    if p["tuned"]:
        conf |= TUNED_CONSUMER
    c = Consumer(conf)
    t0 = time.monotonic()
    c.assign([TopicPartition(p["topic"], i, 0) for i in range(PARTITIONS)])
    got = 0
    last = t0
    deadline = t0 + p["timeout_s"]
    while got < p["records"] and time.monotonic() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
                last = time.monotonic()
    c.close()
    wall = last - t0
    return {"records": got, "wall_s": round(wall, 3), "mb_s": round(got * RECORD_BYTES / wall / MB, 2) if wall else None}


def run_worker(kind: str, params: dict) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.latency", "worker", kind, json.dumps(params)],
                          capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} worker failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the run ----------------------------------------------------------------------------------
def connect_ms(hosts, src: int, dst: int, count: int = 9) -> float:
    """Median TCP connect time from host `src` to broker `dst` (one round trip), ms."""
    code = ("import socket,statistics,sys,time\nout=[]\nfor _ in range(int(sys.argv[3])):\n"
            " t=time.perf_counter(); socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=5).close()\n"
            " out.append((time.perf_counter()-t)*1000)\nprint(statistics.median(out))")
    return round(float(hosts.net.run(src, [sys.executable, "-c", code, hosts.address(dst), "9092", str(count)])), 2)


def set_latency(hosts, delay_ms: float, jitter_ms: float) -> dict:
    for h in (1, 2, 3):
        if delay_ms:
            hosts.degrade(h, delay_ms=delay_ms / 2, jitter_ms=jitter_ms / 2, seed=h)
        else:
            hosts.restore(h)
    time.sleep(1)
    return {"connect_h1_h2_ms": connect_ms(hosts, 1, 2), "connect_h3_h1_ms": connect_ms(hosts, 3, 1)}


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


def relay_summary(hosts) -> dict:
    from cluster.hosts.delay_relay import percentile
    out = {}
    for h in (1, 2, 3):
        s = hosts.net.relay_stats(h)
        if s:
            out[f"h{h}"] = {"scheduling": s["scheduling"], "cpu_s": cpu_s(hosts.net.relays[f"h{h}"][0].pid),
                            "packets": s["received"], "dropped": s["dropped"],
                            "held_ms_p50": percentile(s["held_ms"], 0.5), "held_ms_p99": percentile(s["held_ms"], 0.99),
                            "late_ms_p99": percentile(s["late_ms"], 0.99), "late_ms_max": s["late_ms_max"],
                            "netlink_errors": s["netlink_errors"]}
    return out


def cell(hosts, latency: str, tuned: bool, seconds: float) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = f"lat-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": hosts.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    time.sleep(1)
    load_before = round(os.getloadavg()[0], 2)
    params = {"bootstrap": hosts.bootstrap, "topic": topic, "tuned": tuned}
    produced = run_worker("produce", params | {"seconds": seconds})
    fetched = run_worker("fetch", params | {"records": produced["acked"], "timeout_s": 120})
    row = {"latency": latency, "clients": "tuned" if tuned else "defaults", "topic": topic,
           "produce": produced, "fetch": fetched, "load_1min_before": load_before,
           "load_1min_after": round(os.getloadavg()[0], 2)}
    log(f"{latency:>9} {row['clients']:>8}: produce {produced['mb_s']} MB/s ({produced['acked']} acked, "
        f"{produced['failed']} failed), fetch {fetched['mb_s']} MB/s ({fetched['records']} records); "
        f"load {load_before} -> {row['load_1min_after']}")
    return row


def markdown(result: dict) -> str:
    rows = result["runs"]
    lat = result["latency_label"]
    lines = ["# Throughput with latency between hosts (issue 17)", "",
             f"Kray on three hosts (network namespaces on one 2-core machine, `ray start` + `kray start --address`), "
             f"acks=all, 1 KiB records, 3 partitions, replication factor 3, min.insync.replicas 2; one producer "
             f"process for {result['seconds']:g} s then one consumer reading everything back; clients in the root "
             f"namespace. *{lat}*: every host's link degraded by half of it each way "
             f"({result['mechanism']}), so host to host 15-25 ms (mean 20) one way, client to host "
             f"{result['delay_ms'] / 2:g} ± {result['jitter_ms'] / 2:g} ms. *defaults*: librdkafka's own settings "
             "(acks=all only); *tuned*: benchmarks/throughput.py's (producer linger.ms 5, batch.size 1 MiB, "
             "16 MiB queue; consumer fetch.max.bytes 50 MiB, max.partition.fetch.bytes 4 MiB, fetch.wait.max.ms 100). "
             f"Median over {result['repeats']} interleaved repeats (MB = 10^6 bytes of record values); load = "
             "1-minute load average before each cell (other engineers' runs shared the machine).", "",
             f"Command: `{result['command']}` ({result['when']}). Connect round trip h1 -> h2 (median of 9): "
             f"{result['connect']['none']['connect_h1_h2_ms']} ms without, "
             f"{statistics.median(c['connect_h1_h2_ms'] for c in result['connect_degraded'])} ms with latency.", "",
             "| latency | clients | produce MB/s (runs) | fetch MB/s (runs) | load before (runs) |", "|---|---|---|---|---|"]
    for latency in ("none", lat):
        for clients in ("defaults", "tuned"):
            cells = [r for r in rows if r["latency"] == latency and r["clients"] == clients]
            if not cells:
                continue
            prod = [r["produce"]["mb_s"] for r in cells]
            fetch = [r["fetch"]["mb_s"] or 0 for r in cells]
            lines.append(f"| {latency} | {clients} | **{statistics.median(prod):.1f}** ({', '.join(f'{x:.1f}' for x in prod)}) "
                         f"| **{statistics.median(fetch):.1f}** ({', '.join(f'{x:.1f}' for x in fetch)}) "
                         f"| {', '.join(str(r['load_1min_before']) for r in cells)} |")
    relays = [(r["latency"], r["clients"], h, s) for r in rows for h, s in (r.get("relays") or {}).items()]
    if relays:
        late99 = max(s["late_ms_p99"] or 0 for *_, s in relays)
        late_max = max(s["late_ms_max"] for *_, s in relays)
        held = sorted({s["held_ms_p50"] for *_, s in relays})
        per_repeat = [round(sum(s["cpu_s"] or 0 for s in r["relays"].values()), 1)
                      for r in rows if r.get("relays") and r["clients"] == "tuned"]  # cumulative over both cells
        lines += ["", f"The delay relay (per host, {relays[0][3]['scheduling']}): CPU seconds of the three relays over "
                      f"both degraded cells of a repeat: {', '.join(map(str, per_repeat))}"
                      + (f" (over {', '.join(str(r['relay_wall_s']) for r in rows if r.get('relay_wall_s') and r['clients'] == 'tuned')} s)"
                         if any(r.get("relay_wall_s") for r in rows) else "")
                      + f"; each packet held p50 "
                      f"{'/'.join(map(str, held))} ms (whole ms, per queue point), verdicts late p99 <= {late99} ms, "
                      f"max {late_max:.1f} ms; netlink errors: "
                      f"{sum(sum(s['netlink_errors'].values()) for *_, s in relays) or 'none'}."]
    lost = [r for r in rows if r["fetch"]["records"] < r["produce"]["acked"] or r["produce"]["failed"]]
    lines += ["", "Every acknowledged record was read back." if not lost else
              f"{len(lost)} cells read back fewer records than were acknowledged, or had failed deliveries: see the JSON."]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lat = result["latency_label"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, phase in zip(axes, ("produce", "fetch")):
        labels, values = [], []
        for latency in ("none", lat):
            for clients in ("defaults", "tuned"):
                cells = [r[phase]["mb_s"] or 0 for r in result["runs"] if r["latency"] == latency and r["clients"] == clients]
                if cells:
                    labels.append(f"{latency}\n{clients}")
                    values.append(statistics.median(cells))
        ax.bar(labels, values, color=["#4c72b0", "#4c72b0", "#dd8452", "#dd8452"][:len(values)])
        ax.set_title(f"acks=all {phase}" if phase == "produce" else "fetch")
        ax.set_ylabel("MB/s (median)")
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle("Kray on 3 hosts: no added latency vs " + lat + " between hosts", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---- the mechanism alone: two bare hosts, no Kray ------------------------------------------------
PROBE = """
import socket, statistics, sys, threading, time
ECHO, SINK = 7100, 7101
if sys.argv[1] == "serve":
    def echo(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while (d := c.recv(64)):
            c.sendall(d)
    def sink(c):
        n = 0
        while (d := c.recv(1 << 20)):
            n += len(d)
        c.sendall(str(n).encode()); c.close()
    for port, fn in ((ECHO, echo), (SINK, sink)):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", port)); s.listen(16)
        threading.Thread(target=lambda s=s, fn=fn: [threading.Thread(target=fn, args=(s.accept()[0],), daemon=True).start()
                                                    for _ in iter(int, 1)], daemon=True).start()
    time.sleep(3600)
elif sys.argv[1] == "rtt":
    c = socket.create_connection((sys.argv[2], ECHO)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(int(sys.argv[3])):
        t = time.perf_counter(); c.sendall(b"x"); c.recv(1); out.append((time.perf_counter() - t) * 1000); time.sleep(0.005)
    print(" ".join(f"{x:.3f}" for x in out))
else:
    c = socket.create_connection((sys.argv[2], SINK)); buf = bytes(1 << 20); t = time.perf_counter()
    while time.perf_counter() - t < float(sys.argv[3]):
        c.sendall(buf)
    c.shutdown(socket.SHUT_WR); got = int(c.recv(100)); print(got / (time.perf_counter() - t) / 1e6)
"""


def mechanism(out: Path, rtts: int = 300, bulk_s: float = 5.0) -> dict:
    """The latency mechanism's own cost and honesty on two bare hosts: TCP round trips (1 byte
    echoed) and a bulk TCP transfer h1 -> h2, with h2's link not degraded, degraded by 0 ms (the
    relay's cost alone) and by 20 ± 5 ms; and the delays the relay recorded."""
    from cluster.hosts.delay_relay import percentile
    from cluster.hosts.net import HostNetwork
    result = {"when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m benchmarks.latency --mechanism", "load_1min_at_start": round(os.getloadavg()[0], 2),
              "cases": []}
    with HostNetwork(2) as net:
        for h in net.plan.hosts:
            net.popen(h.name, [sys.executable, "-c", PROBE, "serve"])
        time.sleep(1)
        result["mechanism"] = net.latency_mechanism()
        a2 = net.plan.host(2).address
        for name, delay, jitter in (("not degraded", None, 0), ("degraded 0 ms", 0.0, 0.0), ("degraded 20 ± 5 ms", 20.0, 5.0)):
            if delay is None:
                net.restore(2)
            elif delay == 0:
                net.degrade(2, delay_ms=0.001, seed=1)  # the relay with (almost) nothing to wait for
            else:
                net.degrade(2, delay_ms=delay, jitter_ms=jitter, seed=1)
            time.sleep(0.5)
            rtt = sorted(float(x) for x in net.run(1, [sys.executable, "-c", PROBE, "rtt", a2, str(rtts)]).split())
            bulk = float(net.run(1, [sys.executable, "-c", PROBE, "bulk", a2, str(bulk_s)]))
            case = {"case": name, "rtt_ms": {"min": rtt[0], "p50": rtt[len(rtt) // 2], "p90": rtt[int(len(rtt) * .9)],
                                             "p99": rtt[int(len(rtt) * .99)], "max": rtt[-1],
                                             "mean": round(statistics.mean(rtt), 3)},
                    "bulk_h1_to_h2_mb_s": round(bulk, 1), "load_1min": round(os.getloadavg()[0], 2)}
            if delay is not None and net.latency_mechanism() == "relay":
                cpu = cpu_s(net.relays["h2"][0].pid)
                time.sleep(1.2)
                st = net.relay_stats(2)
                case["relay"] = {"packets": st["received"], "cpu_s": cpu, "scheduling": st["scheduling"],
                                 "held_ms": st["held_ms"], "held_ms_p50": percentile(st["held_ms"], 0.5),
                                 "late_ms_p99": percentile(st["late_ms"], 0.99), "late_ms_max": st["late_ms_max"],
                                 "netlink_errors": st["netlink_errors"]}
            result["cases"].append(case)
            log(f"{name}: rtt {case['rtt_ms']}, bulk {case['bulk_h1_to_h2_mb_s']} MB/s"
                + (f", relay {dict((k, v) for k, v in case['relay'].items() if k != 'held_ms')}" if "relay" in case else ""))
        net.restore(2)
    lines = ["# The latency mechanism alone (issue 17)", "",
             f"Two bare hosts (network namespaces, no Kray), h2's link degraded by `HostNetwork.degrade` "
             f"({result['mechanism']}: {'tc netem' if result['mechanism'] == 'netem' else 'the NFQUEUE delay relay, cluster/hosts/delay_relay.py'}). "
             f"Round trip: {rtts} 1-byte TCP echoes h1 -> h2 (TCP_NODELAY); bulk: {bulk_s:g} s of 1 MiB sendall h1 -> h2. "
             "A round trip crosses h2's link twice (in and out), so 20 ± 5 ms makes it 30-50 ms. "
             f"Command: `{result['command']}` ({result['when']}).", "",
             "| h2's link | RTT min | p50 | p90 | p99 | max ms | bulk MB/s | relay CPU s | late p99 / max ms | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["cases"]:
        r, rel = c["rtt_ms"], c.get("relay")
        late = f"{rel['late_ms_p99']} / {rel['late_ms_max']:.1f}" if rel else "-"
        lines.append(f"| {c['case']} | {r['min']:.2f} | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} | {r['max']:.2f} "
                     f"| {c['bulk_h1_to_h2_mb_s']} | {rel['cpu_s'] if rel else '-'} "
                     f"| {late} | {c['load_1min']} |")
    deg = next((c for c in result["cases"] if c["case"].startswith("degraded 20") and "relay" in c), None)
    if deg:
        hist = {int(k): v for k, v in deg["relay"]["held_ms"].items()}
        total = sum(hist.values())
        lines += ["", "Delays the relay applied at 20 ± 5 ms (whole ms: packets), all packets of the run: "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(hist.items()))
                  + f" ({total} packets; under bulk load a flow's packets lean to the top of the range: "
                    "a packet never leaves before an earlier one of its flow)."]
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        result = (worker_produce if argv[1] == "produce" else worker_fetch)(json.loads(argv[2]))
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=12.0, help="seconds each producer writes")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--delay-ms", type=float, default=20.0, help="one-way latency between two hosts")
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--out", default="benchmarks/results/latency", help="results path, without .json/.md/.png")
    parser.add_argument("--mechanism", action="store_true",
                        help="measure the latency mechanism alone on two bare hosts (to --out + '-mechanism')")
    parser.add_argument("--markdown-from", help="only rewrite the .md of a results JSON (e.g. after a format change)")
    args = parser.parse_args(argv)
    if args.markdown_from:
        src = Path(args.markdown_from)
        src.with_suffix(".md").write_text(markdown(json.loads(src.read_text())))
        return 0
    if args.mechanism:
        out = Path(args.out + "-mechanism")
        out.parent.mkdir(parents=True, exist_ok=True)
        mechanism(out)
        return 0
    from cluster.hosts.deploy import KrayHosts
    label = f"{args.delay_ms:g} ± {args.jitter_ms:g} ms"
    result = {"when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m benchmarks.latency " + " ".join(argv), "seconds": args.seconds,
              "repeats": args.repeats, "delay_ms": args.delay_ms, "jitter_ms": args.jitter_ms, "latency_label": label,
              "record_bytes": RECORD_BYTES, "partitions": PARTITIONS, "cpus": os.cpu_count(),
              "load_1min_at_start": round(os.getloadavg()[0], 2), "runs": [], "connect_degraded": []}
    hosts = KrayHosts(3, overrides=OVERRIDES)
    log(f"starting 3 hosts (load {result['load_1min_at_start']})")
    with hosts:
        log(f"up: {hosts.bootstrap}; " + ", ".join(f"{k} {v:.1f}" for k, v in hosts.timings.items()))
        result["deploy_s"] = {k: round(v, 1) for k, v in hosts.timings.items()}
        result["connect"] = {"none": set_latency(hosts, 0, 0)}
        result["mechanism"] = {"netem": "tc netem", "relay": "the NFQUEUE delay relay, cluster/hosts/delay_relay.py"}[
            hosts.net.latency_mechanism()]
        for r in range(args.repeats):
            for latency in ("none", label):
                connect = set_latency(hosts, args.delay_ms if latency != "none" else 0, args.jitter_ms)
                t_set = time.monotonic()
                log(f"repeat {r + 1}, latency {latency}: connect h1->h2 {connect['connect_h1_h2_ms']} ms, "
                    f"h3->h1 {connect['connect_h3_h1_ms']} ms")
                if latency != "none":
                    result["connect_degraded"].append(connect)
                for tuned in (False, True):
                    row = cell(hosts, latency, tuned, args.seconds)
                    row["connect"] = connect
                    if latency != "none" and hosts.net.latency_mechanism() == "relay":
                        row["relays"] = relay_summary(hosts)  # cumulative since this latency was set
                        row["relay_wall_s"] = round(time.monotonic() - t_set, 1)
                    result["runs"].append(row)
        set_latency(hosts, 0, 0)
    result["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    try:
        plot(result, out.with_suffix(".png"))
    except ImportError:
        log("no matplotlib: no PNG")
    log(f"written {out}.json, .md, .png")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
