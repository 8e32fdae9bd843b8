#!/usr/bin/env python3
"""The Ray head dies (issue 36, item 5), measured on hosts of their own.

Kray on three hosts (network namespaces: cluster/hosts) deployed as on machines of one's own, with
Ray's GCS fault tolerance: a redis-server outside every host (on the bridge, as an HA Redis on
machines of its own), `RAY_REDIS_ADDRESS=... RAY_external_storage_namespace=... ray start --head`
on h1, `ray start --address` under the node supervisor on h2 and h3 (Ray's system config with
gcs_rpc_server_reconnect_timeout_s=180: their raylets wait that long for a GCS), `kray start
--address ... --config configs/multinode.toml` on h1 (the metadata quorum's voters on brokers
1-3). Clients run outside the hosts: an idempotent acks=all producer, a consumer group member, a
share consumer (cluster/jepsen.py's, recorded for cluster/checker.py).

Then every process on h1 is SIGKILLed at once (a machine losing its power: the GCS, the head's
raylet, broker 1, its controller, `kray start`); after --down seconds a new head is started on h1
with the same Redis (the same `ray start --head` command), and `kray start --address` is run
again on h1, as an operator would. Measured:

- writes: the longest time without an acknowledged record (any partition) from the kill on, and
  when acks=all produce resumed on every partition (the checker's window);
- share deliveries: the longest time without one from the kill on;
- the new head: how long `ray start --head` took, when h2's and h3's nodes are alive in the new
  GCS's node table (and whether they are the same Ray nodes as before, or were started again by
  their supervisors), when the deployment is whole again (every broker at its address, every
  partition led with a full ISR), and what the second `kray start` said;
- the checker's safety counts (acknowledged records lost, divergence, share redeliveries ...).

    python -m benchmarks.head_failure --down 20          # as root, from the repo root

Each run is appended to benchmarks/results/head_failure.json; head_failure.md is rewritten.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import threading
import time
import uuid
from pathlib import Path

from benchmarks.partition_heal import OVERRIDES, QUORUM, RAY_HEALTH
from cluster import checker, jepsen
from cluster.checker import Fault

RESULTS = Path(__file__).resolve().parent / "results"
JSON_OUT = RESULTS / "head_failure.json"
MD_OUT = RESULTS / "head_failure.md"
PARTITIONS = 6
RATE_PER_S = 40
WARM_TIMEOUT_S = 120
WHOLE_TIMEOUT_S = 240    # from the new head's start until the deployment is whole again
NODES_TIMEOUT_S = 120    # until h2's and h3's nodes are alive in the new GCS
SETTLE_S = 60


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def longest_gap(times: list[float], start_s: float, end_s: float) -> tuple[float, float]:
    """(longest gap, where it began) between `start_s`, the sorted `times` after it, and `end_s`."""
    points = [start_s] + sorted(t for t in times if start_s < t < end_s) + [end_s]
    gaps = [(b - a, a) for a, b in zip(points, points[1:])]
    return max(gaps) if gaps else (0.0, start_s)


def _ray_processes(hosts, host) -> list[str]:
    """The Ray processes running on `host` (their command names)."""
    from cluster.hosts.net import netns_pids
    names = []
    for pid in netns_pids(hosts.plan.host(host).netns):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        names.append(os.path.basename(cmd) if not cmd.startswith("ray::") else cmd)
    return sorted(names)


def _raylet_lines(hosts, host, words=("GCS", "gcs", "Failed to connect", "exit", "dead")) -> list[str]:
    """What the raylet of `host` logged about its GCS (its raylet.out, the current session)."""
    logs = hosts.home(host) / "ray" / "session_latest" / "logs"
    out = []
    for path in sorted(logs.glob("raylet*.out")) if logs.exists() else ():
        for line in path.read_text(errors="replace").splitlines():
            if any(w in line for w in words) and not line.startswith("[state-dump]"):
                out.append(line[:300])
    return out[-25:]


def _create_and_write(hosts) -> dict:
    """A topic created (3 partitions, 2 replicas: 2 brokers live) and one record written to it
    (acks=all) while the Ray head is down: does the controller decide without Ray's GCS?"""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    name = f"during-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    try:
        admin = AdminClient({"bootstrap.servers": hosts.bootstrap})  # (kept: a dropped client fails its futures)
        admin.create_topics([NewTopic(name, 3, 2)], request_timeout=60)[name].result(60)
        created_s = time.monotonic() - t0
        p = Producer({"bootstrap.servers": hosts.bootstrap, "acks": "all", "message.timeout.ms": 30000})
        errors = []
        p.produce(name, b"x", on_delivery=lambda err, msg: errors.append(err))
        p.flush(35)
        return {"created_s": round(created_s, 1), "written": errors == [None],
                "write_error": None if errors == [None] else str(errors[:1])}
    except Exception as e:
        return {"failed_after_s": round(time.monotonic() - t0, 1), "error": str(e)[:300]}


def run(down_s: float = 20.0, *, reconnect_timeout_s: float | None = None, say=log) -> dict:
    """`reconnect_timeout_s`: Ray's gcs_rpc_server_reconnect_timeout_s (None: 180, RAY_HEALTH["broker"]'s):
    how long the other nodes' raylets wait for a GCS; a `down_s` longer than it is past what Ray survives."""
    from cluster.hosts.deploy import KrayHosts
    system_config = dict(RAY_HEALTH["broker"])  # gcs_rpc_server_reconnect_timeout_s 180, health threshold 10
    if reconnect_timeout_s is not None:
        system_config["gcs_rpc_server_reconnect_timeout_s"] = reconnect_timeout_s
    hosts = KrayHosts(3, overrides=OVERRIDES + QUORUM, ray_system_config=system_config, gcs_redis=True)
    result: dict = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "down_s": down_s,
                    "ray_system_config": system_config, "load_at_start": os.getloadavg()[0]}
    say("making 3 hosts, Redis on the bridge, Ray with GCS fault tolerance, kray start --address ...")
    hosts.start()
    result["deploy_s"] = {k: round(v, 1) for k, v in hosts.timings.items()}
    result["redis_address"] = hosts.redis_address
    say(f"Kray is ready at {hosts.bootstrap} ({result['deploy_s']}); Redis at {hosts.redis_address}")
    topic, group, share_group = f"head-{uuid.uuid4().hex[:6]}", "head-group", "head-share"
    h = jepsen.History()
    stop_producer, stop_consumers = threading.Event(), threading.Event()
    try:
        jepsen._setup(hosts.bootstrap, topic, PARTITIONS, share_group)
        nodes_before = {n["NodeManagerAddress"]: n["NodeID"] for n in hosts.ray_nodes_seen_from(2) if n["Alive"]}
        result["ray_nodes_before"] = nodes_before
        threads = [threading.Thread(target=jepsen.produce, name="producer", daemon=True,
                                    args=(hosts.bootstrap, topic, PARTITIONS, "p", RATE_PER_S, stop_producer, h)),
                   threading.Thread(target=jepsen.consume_group, name="group", daemon=True,
                                    args=(hosts.bootstrap, topic, PARTITIONS, group, stop_consumers, h)),
                   threading.Thread(target=jepsen.consume_share, name="share", daemon=True,
                                    args=(hosts.bootstrap, topic, share_group, stop_consumers, h)),
                   threading.Thread(target=jepsen.sample_isr, name="isr", daemon=True,
                                    args=(hosts.bootstrap, topic, stop_consumers, h))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + WARM_TIMEOUT_S
        while time.monotonic() < deadline and not (h.acks and h.commits and any(e.kind == "accepted" for e in h.share)):
            time.sleep(0.5)
        time.sleep(5)
        say(f"clients warm: {len(h.acks)} acks, {len(h.commits)} commits, "
            f"{sum(e.kind == 'accepted' for e in h.share)} share accepts; killing every process on h1")
        result["leader_isr_before"] = jepsen.isr_at(h.isr, h.now())
        result["load_at_kill"] = os.getloadavg()[0]
        kill_s = h.now()
        result["processes_killed_on_h1"] = hosts.kill_host(1)
        supervisor_starts = {n: hosts.node_starts(n) for n in ("h2", "h3")}
        time.sleep(down_s)
        result["during_outage"] = {n: _ray_processes(hosts, n) for n in ("h2", "h3")}
        result["health_during_outage"] = hosts.health_problems(timeout_s=5, kray_start=False)
        result["create_topic_during_outage"] = _create_and_write(hosts)
        say(f"a topic created while h1 is down: {result['create_topic_during_outage']}")
        say(f"h1 down {down_s:.0f} s; brokers 2 and 3: {result['health_during_outage'] or 'whole'}; "
            f"starting a new Ray head on h1 with the same Redis")
        head_s = h.now()
        result["ray_start_head_s"] = round(hosts.restart_head(), 1)
        say(f"ray start --head took {result['ray_start_head_s']} s")
        # the other nodes, as the new GCS sees them
        nodes_after, seen_at = {}, None
        deadline = time.monotonic() + NODES_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                table = hosts.ray_nodes_seen_from(2, timeout_s=60)
            except Exception as e:
                say(f"ray.nodes() from h2: {str(e).splitlines()[0][:200]}")
                time.sleep(3)
                continue
            nodes_after = {n["NodeManagerAddress"]: n["NodeID"] for n in table if n["Alive"]}
            if all(hosts.address(i) in nodes_after for i in (2, 3)):
                seen_at = h.now()
                break
            time.sleep(3)
        result["ray_nodes_after"] = nodes_after
        result["nodes_alive_in_new_gcs_s"] = None if seen_at is None else round(seen_at - head_s, 1)
        result["same_ray_nodes"] = {f"h{i}": nodes_before.get(hosts.address(i)) == nodes_after.get(hosts.address(i))
                                    for i in (2, 3)}
        result["supervisor_restarts"] = {n: hosts.node_starts(n) - supervisor_starts[n] for n in ("h2", "h3")}
        say(f"nodes alive in the new GCS: {sorted(nodes_after)} after {result['nodes_alive_in_new_gcs_s']} s; "
            f"same nodes as before: {result['same_ray_nodes']}; supervisor restarts: {result['supervisor_restarts']}")
        problems = hosts.wait_healthy(WHOLE_TIMEOUT_S, kray_start=False)
        result["whole_after_new_head_s"] = None if problems else round(h.now() - head_s, 1)
        result["problems_left"] = problems[:10]
        say(f"deployment whole {result['whole_after_new_head_s']} s after the new head" if not problems else
            f"not whole {WHOLE_TIMEOUT_S} s after the new head: {problems[:5]}")
        # the operator runs kray start again (its first one died with h1)
        shown = len(hosts.output)
        t0 = time.monotonic()
        try:
            hosts._start_kray()
            result["kray_start_again"] = {"ready_s": round(time.monotonic() - t0, 1)}
        except Exception as e:
            result["kray_start_again"] = {"failed": str(e)[-1500:]}
        time.sleep(2)  # (the lines after the ready line)
        result["kray_start_again"]["said"] = hosts.output[shown:][-15:]
        # the node table at the end: right after the new head it may still list nodes whose raylets
        # exited (read from Redis, alive until its health checks fail them)
        try:
            end = {n["NodeManagerAddress"]: n["NodeID"] for n in hosts.ray_nodes_seen_from(2) if n["Alive"]}
        except Exception as e:
            end = {"error": str(e)[:200]}
        result["ray_nodes_end"] = end
        result["same_ray_nodes"] = {f"h{i}": nodes_before.get(hosts.address(i)) == end.get(hosts.address(i))
                                    for i in (2, 3)}
        say(f"kray start again: {result['kray_start_again']}")
        time.sleep(10)
    finally:
        stop_producer.set()
        producer_stopped_s = h.now()
        threads_alive = [t for t in threading.enumerate() if t.name == "producer"]
        for t in threads_alive:
            t.join(150)
        deadline = time.monotonic() + SETTLE_S
        acked = {(a.partition, a.offset) for a in h.acks}
        while time.monotonic() < deadline:
            if acked <= {(e.partition, e.offset) for e in list(h.share) if e.kind == "accepted"}:
                break
            time.sleep(1)
        stop_consumers.set()
        for t in threading.enumerate():
            if t.name in ("group", "share", "isr"):
                t.join(60)
        try:
            hws, final = jepsen.read_final(hosts.bootstrap, topic, PARTITIONS)
            replicas = jepsen.replica_logs(hosts.net.run_dir / "data", topic, PARTITIONS)
            fault = Fault("h1 killed (the Ray head's host), new head", kill_s, head_s)
            report = checker.check(acks=h.acks, final=final, replicas=replicas, high_watermarks=hws, reads=[],
                                   commits=h.commits, observed=h.observed, share=h.share, faults=[fault],
                                   partitions=list(range(PARTITIONS)))
            result["checker"] = report.to_json()
            end_s = producer_stopped_s  # (the gaps: while records were being produced)
            gap, gap_at = longest_gap([a.acked_s for a in h.acks], kill_s, end_s)
            result["writes_longest_gap_s"] = round(gap, 1)
            result["writes_longest_gap_from_kill_s"] = round(gap_at - kill_s, 1)
            deliveries = [e.at_s for e in h.share if e.kind == "delivered"]
            gap, gap_at = longest_gap(deliveries, kill_s, end_s)
            result["share_longest_gap_s"] = round(gap, 1)
            result["share_longest_gap_from_kill_s"] = round(gap_at - kill_s, 1)
            result["new_head_from_kill_s"] = round(head_s - kill_s, 1)
            result["acknowledged"] = len(h.acks)
            result["produce_failures"] = len(h.produce_failures)
            result["client_errors"] = dict(h.errors)
            never = sorted({(a.partition, a.offset) for a in h.acks} -
                           {(e.partition, e.offset) for e in h.share if e.kind == "accepted"})
            result["acknowledged_never_accepted_by_share_group"] = len(never)
            result["never_accepted_examples"] = [
                {"partition": p, "offset": o, "deliveries_s": [round(e.at_s - kill_s, 1) for e in h.share
                                                               if (e.partition, e.offset) == (p, o)]}
                for p, o in never[:5]]
        except Exception as e:
            result["checker_failed"] = repr(e)[:500]
        result["kray_log"] = hosts.kray_log(time.time() - 600, limit=60)
        result["raylet_h2"] = _raylet_lines(hosts, "h2")
        result["kray_start_console"] = hosts.output[-40:]
        result["load_at_end"] = os.getloadavg()[0]
        hosts.stop()
    return result


def markdown(runs: list[dict]) -> str:
    lines = ["# The Ray head dies (GCS fault tolerance with Redis)", "",
             "Generated by `python -m benchmarks.head_failure` (see its docstring and docs/guides/multi-node.md, "
             "\"When the Ray head's host dies\"). Three hosts (network namespaces on one 2-core machine), "
             "Kray deployed with `kray start --address --config configs/multinode.toml`, Redis outside the hosts; "
             "every process on h1 (the Ray head's host: GCS, raylet, broker 1, a controller, `kray start`) "
             "SIGKILLed under an acks=all producer (40 records/s, 6 partitions, RF 3, min ISR 2), a consumer "
             "group and a share consumer; a new head started on h1 with the same Redis (`--down` s later, plus the "
             "time the checks during the outage took); then `kray start --address` again on h1. \"Same Ray "
             "nodes\": h2's and h3's node ids in the node table at the end are those from before the kill.", "",
             "| date | new head, after the kill (s) | raylets wait for a GCS (s) | writes: longest gap (s) | produce resumed on every partition (s after kill) | "
             "share: longest gap (s) | ray start --head (s) | h2, h3 alive in new GCS (s) | same Ray nodes | "
             "whole again after new head (s) | second kray start | acked | lost | share redelivered | load |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in runs:
        c = r.get("checker", {})
        window = (c.get("faults") or [{}])[0]
        again = r.get("kray_start_again", {})
        show = lambda x: "never" if x is None else x  # noqa: E731
        lines.append(
            f"| {r['date']} | {r.get('new_head_from_kill_s', r['down_s'])} | {r['ray_system_config'].get('gcs_rpc_server_reconnect_timeout_s')} | "
            f"{r.get('writes_longest_gap_s', '?')} | "
            f"{show(window.get('unavailable_s'))} | {r.get('share_longest_gap_s', '?')} | "
            f"{r.get('ray_start_head_s', '?')} | {show(r.get('nodes_alive_in_new_gcs_s'))} | "
            f"{r.get('same_ray_nodes', '?')} | {show(r.get('whole_after_new_head_s'))} | "
            f"{'ready in ' + str(again['ready_s']) + ' s' if 'ready_s' in again else 'failed'} | "
            f"{c.get('acknowledged', '?')} | {c.get('safety', {}).get('acknowledged records lost', '?')} | "
            f"{c.get('safety', {}).get('share records redelivered after an acknowledged accept', '?')} | "
            f"{r.get('load_at_kill', 0):.1f} |")
    last = runs[-1] if runs else {}
    if last:
        lines += ["", "## The last run in detail", "",
                  f"- Ray processes on h2 and h3 while h1 was down: `{last.get('during_outage')}`",
                  f"- the deployment seen from the clients while h1 was down: {last.get('health_during_outage') or 'whole'}",
                  f"- supervisor restarts of the h2/h3 Ray nodes: {last.get('supervisor_restarts')}",
                  f"- problems left: {last.get('problems_left') or 'none'}",
                  f"- a topic created and written while h1 was down: {last.get('create_topic_during_outage')}",
                  f"- the new head started {last.get('new_head_from_kill_s')} s after the kill"] + \
                 [f"- note: {n}" for n in last.get("notes", [])] + [

                  "- what the second `kray start` said: " + " / ".join(f"`{l}`" for l in
                                                                    last.get('kray_start_again', {}).get('said', [])),
                  "", "h2's raylet about its GCS:", "", "```"] + last.get("raylet_h2", [])[-15:] + ["```", "",
                  "Kray's log (warnings and the controllers) around the failure:", "", "```"] + \
                 last.get("kray_log", [])[-40:] + ["```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--down", type=float, default=20.0, help="seconds h1 stays down before a new head starts")
    parser.add_argument("--reconnect-timeout", type=float, help="Ray's gcs_rpc_server_reconnect_timeout_s "
                                                                    "(default 180): set below --down to see past it")
    parser.add_argument("--out", default=str(JSON_OUT))
    args = parser.parse_args()
    result = run(args.down, reconnect_timeout_s=args.reconnect_timeout)
    out = Path(args.out)
    runs = json.loads(out.read_text()) if out.exists() else []
    runs.append(result)
    out.write_text(json.dumps(runs, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(runs))
    print(json.dumps({k: v for k, v in result.items() if k not in ("kray_log", "raylet_h2")}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
