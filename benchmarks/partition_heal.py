#!/usr/bin/env python3
"""Partitions that heal by themselves (issue 17, item 5), measured on hosts of their own.

Kray on three hosts (network namespaces with their own addresses: cluster/hosts), deployed as on
machines of one's own: `ray start --head` on h1, `ray start --address` under the node supervisor
on h2 and h3, `kray start --address` on h1. An idempotent acks=all confluent-kafka producer
writes to a topic of 3 partitions with replication factor 3 and min.insync.replicas=2 (one
partition led by each broker); one host is cut off from every other host and every client for
--cut seconds (its cable pulled: packets lost, nothing refused), then healed. Measured per
partition:

- resumed_s: from the cut until the first record sent after it was acknowledged (acks=all);
- moved_s: from the cut until the metadata (asked of the other brokers) names a leader that is
  not the cut-off broker and an ISR without it: Kray's part of resumed_s (a producer with a
  request in flight to a cut-off leader waits for its request.timeout.ms, 30 s by default, as
  with Kafka);
- gap_after_heal_s: the longest time without an acknowledgement from the heal until the end;
- isr_whole_s: from the heal until the partition's ISR holds all three brokers again;

and, for readers beside the producer with their clients' default settings (a consumer group
member and a share consumer), the same resumed and gap figures for receiving records;
and checked: every acknowledged record is read back (none lost, none twice). Also said: whether
Ray declared the cut-off node dead (the supervisor started it again) and what `kray start`
printed about brokers. The machine's load average (1 min) is taken at the cut, the heal and the
end. Run as root from the repo root:

    python -m benchmarks.partition_heal --victim 3 --cut 60 --ray-health broker
    python -m benchmarks.partition_heal --victim 1 --cut 60      # the host of the Ray head and controller

Each run is appended to benchmarks/results/partition-heal.json and the table in
partition-heal.md is rewritten from all runs (see --out).
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
from typing import Callable

from actors.tcp_backoff import RTO_MAX_MS, host_rto_max_ms

# Ray's health checks (GCS -> each raylet): a check every 3 s, each waiting up to 10 s, and a node
# is declared dead after 5 failures in a row. On a cut, where packets are lost and nothing is
# refused, every check waits out its 10 s: the node is declared dead ~65 s into the cut (measured
# here: 64 s, 4 s *after* a 60 s cut had healed and its broker was back), or ~15 s after its
# raylet crashed on a reachable host (refused at once). A raylet (and every worker) also gives up
# on a GCS it can't reach after gcs_rpc_server_reconnect_timeout_s (60 s). A node declared dead
# returns only through a new `ray start` (the node supervisor), its processes started and its
# replicas recovered from disk: a minute or more on a loaded machine, against a few seconds for a
# broker that was only fenced. Kray has a failure detector of its own for brokers
# (broker.session.timeout.ms, 9 s: the controller fences the broker and its partitions get new
# leaders), so Ray need not be quick to give up on a node: the "broker" settings let a node ride
# out a cut of ~2 minutes (10 failures of ~13 s) and carry on where it was at the heal, while a
# crashed raylet is still noticed in ~30 s (and sooner: the controller lets a new node on the
# same host take the broker over at once, actors/controller/nodes.replaces).
RAY_HEALTH = {
    "default": {},
    "broker": {"health_check_failure_threshold": 10, "gcs_rpc_server_reconnect_timeout_s": 180},
    # and gRPC keepalive pings between Ray's processes every 10 s (Ray's default: 300 s, 120 s to answer)
    "broker-keepalive": {"health_check_failure_threshold": 10, "gcs_rpc_server_reconnect_timeout_s": 180,
                         "grpc_client_keepalive_time_ms": 10000, "grpc_client_keepalive_timeout_ms": 10000},
}
PARTITIONS = 3
READ_TIMEOUT_S = 90
ISR_TIMEOUT_S = 120
READERS_WARM_TIMEOUT_S = 60  # the readers' first records of every partition, before a cut
# after the producer stops, how long the readers may take to receive every acknowledged record:
# a share consumer's records acquired by a ShareFetch whose answer was lost come back when their
# lock runs out (share.record.lock.duration.ms, 30 s by default), and a loaded machine adds to it
READERS_CATCH_UP_TIMEOUT_S = 90
OVERRIDES = ("offsets.topic.num.partitions=6", "share.coordinator.state.topic.num.partitions=6")
# the metadata quorum's voters on the three hosts' brokers (each runs a voter and a controller), as
# configs/multinode.toml has it; --no-quorum: one dedicated controller (the quorum's single voter),
# on the Ray head (h1)
QUORUM = ("controller.quorum.voters=1,2,3",)
DEDICATED = ()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def isr(admin, topic: str) -> dict[int, list[int]]:
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: sorted(m.isrs) for p, m in meta.partitions.items()}


def leaders(admin, topic: str) -> dict[int, int]:
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: m.leader for p, m in meta.partitions.items()}


class Producing:
    """An idempotent acks=all producer in a thread, records round robin over the partitions:
    when each record was sent and when acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, config: dict | None = None):
        from confluent_kafka import Producer
        self.sent: dict[bytes, float] = {}
        self.acked: dict[bytes, tuple[int, float]] = {}
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.unflushed = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "delivery.timeout.ms": 300000} | dict(config or {}))
        self.thread = threading.Thread(target=self._run, args=(topic, partitions), name="producer", daemon=True)
        self.thread.start()

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value()] = (msg.partition(), time.monotonic())
        else:
            self.failed.append(str(err))

    def _run(self, topic: str, partitions: int) -> None:
        n = 0
        while not self.stop.is_set():
            value = b"%08d" % n
            self.sent[value] = time.monotonic()
            self.producer.produce(topic, value=value, partition=n % partitions, on_delivery=self._done)
            n += 1
            self.producer.poll(0.005)
        self.unflushed = self.producer.flush(300)

    def finish(self, timeout_s: float = 320) -> None:
        self.stop.set()
        self.thread.join(timeout_s)


class Reading:
    """Readers beside the producer, each in a thread with the client's default settings: a
    consumer group member (subscribed, committing automatically) and a share consumer (implicit
    acknowledgement). When each first received each record. `config`: settings beside the
    client's defaults, for both (librdkafka's share consumer has one ShareFetch in flight across
    all brokers, and one sent to a broker cut off holds every partition up for socket.timeout.ms,
    60 s by default: see the README)."""

    def __init__(self, bootstrap: str, topic: str, config: dict | None = None):
        self.config = dict(config or {})
        self.consumed: dict[bytes, tuple[int, float]] = {}
        self.shared: dict[bytes, tuple[int, float]] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        tag = uuid.uuid4().hex[:6]
        self.threads = [threading.Thread(target=self._consume, args=(bootstrap, topic, f"heal-group-{tag}"),
                                         name="consumer", daemon=True),
                        threading.Thread(target=self._share, args=(bootstrap, topic, f"heal-share-{tag}"),
                                         name="share-consumer", daemon=True)]
        for t in self.threads:
            t.start()

    def _consume(self, bootstrap: str, topic: str, group: str) -> None:
        from confluent_kafka import Consumer
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"} | self.config)
        c.subscribe([topic])
        try:
            while not self.stop.is_set():
                for m in c.consume(1000, timeout=0.2):
                    if m.error() is None:
                        self.consumed.setdefault(m.value(), (m.partition(), time.monotonic()))
                    elif len(self.errors) < 20:
                        self.errors.append(f"consumer: {m.error()}")
        finally:
            c.close()

    def _share(self, bootstrap: str, topic: str, group: str) -> None:
        from confluent_kafka import KafkaException, ShareConsumer
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
        # from the start of the topic, as the group consumer (share.auto.offset.reset, KIP-932)
        resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept until the answer: a dropped client aborts it)
        try:
            admin.incremental_alter_configs([resource])[resource].result(30)
        except KafkaException as e:
            self.errors.append(f"share consumer: share.auto.offset.reset not set ({e}); reading from the latest")
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group} | self.config)
        c.subscribe([topic])
        try:
            while not self.stop.is_set():
                try:
                    got = c.poll(0.2)
                except KafkaException as e:
                    if len(self.errors) < 20:
                        self.errors.append(f"share consumer: {e}")
                    continue
                for m in got:
                    if m.error() is None:
                        self.shared.setdefault(m.value(), (m.partition(), time.monotonic()))
        finally:
            c.close()

    def warm(self, partitions: int) -> bool:
        """Whether both readers have received records of every partition."""
        return all(len({p for p, _ in list(got.values())}) >= partitions for got in (self.consumed, self.shared))

    def catch_up(self, want: set[bytes], timeout_s: float = READERS_CATCH_UP_TIMEOUT_S) -> float | None:
        """Seconds until both readers had received every record of `want`; None if they had not
        within `timeout_s`."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if all(want <= _keys(got) for got in (self.consumed, self.shared)):
                return round(time.monotonic() - started, 2)
            time.sleep(0.25)
        return None

    def finish(self, timeout_s: float = 30) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout_s)


def _keys(got: dict) -> set:
    """The keys of a dict a reader thread keeps adding to (set() of it can fail with "dictionary
    changed size during iteration")."""
    while True:
        try:
            return set(got)
        except RuntimeError:
            continue


def read_back(bootstrap: str, topic: str, partitions: int, want: set[bytes], timeout_s: float = READ_TIMEOUT_S) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    got, deadline = [], time.monotonic() + timeout_s
    while not want <= set(got) and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(1000, timeout=1.0) if m.error() is None]
    c.close()
    return got


def summarize(sent: dict[bytes, float], acked: dict[bytes, tuple[int, float]], cut_at: float, healed_at: float,
              end_at: float, partitions: int) -> dict[int, dict]:
    """Per partition: resumed_s (cut -> first acknowledgement of a record sent after the cut) and
    gap_after_heal_s (the longest time without an acknowledgement between the heal and `end_at`)."""
    out: dict[int, dict] = {p: {"resumed_s": None, "gap_after_heal_s": None} for p in range(partitions)}
    times: dict[int, list[float]] = {p: [] for p in range(partitions)}
    for value, (p, at) in acked.items():
        if sent.get(value, 0) > cut_at:
            first = out[p]["resumed_s"]
            out[p]["resumed_s"] = at - cut_at if first is None else min(first, at - cut_at)
        if healed_at <= at <= end_at:
            times[p].append(at)
    for p, ts in times.items():
        marks = [healed_at] + sorted(ts) + [end_at]
        out[p]["gap_after_heal_s"] = max(b - a for a, b in zip(marks, marks[1:]))
    for p in out.values():
        for k, v in p.items():
            p[k] = None if v is None else round(v, 2)
    return out


def run_scenario(hosts, victim: int, cut_s: float, *, say: Callable[[str], None] = log,
                 settle_s: float = 20, partitions: int = PARTITIONS, producer_config: dict | None = None,
                 reader_config: dict | None = None) -> dict:
    """Cut host `victim` off for `cut_s` under the producer, heal, wait for every ISR to be whole
    again, read everything back; returns the measurements (see the module's doc)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = f"heal-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": hosts.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    brokers = sorted(b.id for b in admin.list_topics(timeout=10).brokers.values())
    deadline = time.monotonic() + 60
    while any(v != brokers for v in isr(admin, topic).values()):
        assert time.monotonic() < deadline, f"ISRs of a new topic not whole: {isr(admin, topic)}"
        time.sleep(0.25)
    led = leaders(admin, topic)
    joining = [h.index for h in hosts.plan.hosts[1:]]  # hosts whose Ray node runs under the supervisor
    starts_before = {h: hosts.node_starts(h) for h in joining}
    console_before = len(hosts.output)
    reading = Reading(hosts.bootstrap, topic, reader_config)
    producing = Producing(hosts.bootstrap, topic, partitions, producer_config)
    loads = {}
    isr_whole: dict[int, float] = {}
    moved: dict[int, float] = {}  # partition -> seconds from the cut until a live leader and an ISR without the victim
    try:
        # the cut comes when both readers are in steady state (each has received records of every
        # partition): how a fault interrupts running readers, not how a reader starts under one
        warm_deadline = time.monotonic() + READERS_WARM_TIMEOUT_S
        while not reading.warm(partitions) and time.monotonic() < warm_deadline:
            time.sleep(0.25)
        readers_warm = reading.warm(partitions)
        if not readers_warm:
            say(f"the readers did not receive records of every partition within {READERS_WARM_TIMEOUT_S:.0f} s: "
                "cutting anyway")
        time.sleep(1)
        loads["cut"] = load1()
        hosts.isolate(victim)  # (its `ip` commands take a while: the cut counts from when they are all done)
        cut_at, cut_wall = time.monotonic(), _dt.datetime.now().strftime("%H:%M:%S")
        say(f"h{victim} cut off (load {loads['cut']})")
        others = AdminClient({"bootstrap.servers": ",".join(hosts.broker_address(b) for b in brokers if b != victim)})
        while time.monotonic() < cut_at + cut_s:  # when the cluster moved on: Kray's part, not the client's
            try:
                meta = others.list_topics(topic, timeout=2).topics[topic].partitions
                for p, m in meta.items():
                    if p not in moved and m.leader not in (victim, -1) and victim not in m.isrs:
                        moved[p] = time.monotonic() - cut_at
            except Exception:
                pass
            time.sleep(max(0.0, min(0.25, cut_at + cut_s - time.monotonic())))
        hosts.heal(victim)
        healed_at, healed_wall = time.monotonic(), _dt.datetime.now().strftime("%H:%M:%S")
        loads["heal"] = load1()
        say(f"h{victim} healed after {healed_at - cut_at:.1f} s (load {loads['heal']})")
        deadline = healed_at + ISR_TIMEOUT_S
        while len(isr_whole) < partitions and time.monotonic() < deadline:
            try:
                for p, members in isr(admin, topic).items():
                    if p not in isr_whole and members == brokers:
                        isr_whole[p] = time.monotonic() - healed_at
            except Exception as e:  # a broker cut off answers nothing: try the next round
                say(f"describe failed: {e}")
            time.sleep(0.25)
        time.sleep(settle_s)  # acknowledgements after the ISRs are whole: any hiccup the return caused
    finally:
        if hosts.net.isolated:
            hosts.heal(victim)
        end_at = time.monotonic()
        producing.finish()
        caught_up_s = reading.catch_up(set(producing.acked))  # the readers take in the last records
        reading.finish()
    loads["end"] = load1()
    want = set(producing.acked)
    got = read_back(hosts.bootstrap, topic, partitions, want)
    per_partition = summarize(producing.sent, producing.acked, cut_at, healed_at, end_at, partitions)
    for name, got_at in (("consume", reading.consumed), ("share", reading.shared)):
        for p, d in summarize(producing.sent, got_at, cut_at, healed_at, end_at, partitions).items():
            per_partition[p] |= {f"{name}_resumed_s": d["resumed_s"], f"{name}_gap_after_heal_s": d["gap_after_heal_s"]}
    for p, d in per_partition.items():
        d["leader_before"] = led.get(p)
        d["isr_whole_s"] = round(isr_whole[p], 2) if p in isr_whole else None
        d["moved_s"] = round(moved[p], 2) if p in moved else None
    said = [line for line in hosts.output[console_before:] if "broker " in line]
    supervised = {f"h{h}": [line for line in hosts.supervisor_output(h).splitlines()
                            if line.startswith("[") and ("Ray node" in line)] for h in joining}
    result = {
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "producer_config": dict(producer_config or {}),
        "reader_config": dict(reader_config or {}), "victim": f"h{victim}", "cut_s": round(healed_at - cut_at, 1), "cut_at": cut_wall, "healed_at": healed_wall,
        "partitions": per_partition,
        "acknowledged": len(want), "lost": len(want - set(got)), "duplicates": len(got) - len(set(got)),
        "failed": len(producing.failed), "failed_examples": producing.failed[:3], "unflushed": producing.unflushed,
        "consumed": len(set(reading.consumed) & want), "share_consumed": len(set(reading.shared) & want),
        "reader_errors": reading.errors[:5], "readers_caught_up_s": caught_up_s,
        "ray_nodes_restarted": [f"h{h}" for h in joining if hosts.node_starts(h) > starts_before[h]],
        "readers_warm": readers_warm, "load_1min": loads, "console": said, "supervisors": supervised,
    }
    say(json.dumps({k: v for k, v in result.items() if k != "console"}))
    return result


def markdown(runs: list[dict]) -> str:
    lines = ["# Partitions that heal by themselves (issue 17, item 5)", "",
             "Kray on three hosts (network namespaces on one 2-core machine), one host cut off from "
             "every other host and client, then healed, under an idempotent acks=all producer "
             "(3 partitions, replication factor 3, min.insync.replicas=2; broker.session.timeout.ms "
             "9000). Per partition: *resumed* = seconds from the cut until the first record sent "
             "after it was acknowledged; *ISR whole* = seconds from the heal until the ISR held all "
             "three brokers again; *gap* = longest time without an acknowledgement after the heal; "
             "*moved* = seconds from the cut until the other brokers' metadata named a live leader and an "
             "ISR without the cut-off broker (Kray's part: a producer with a request in flight to a "
             "cut-off leader waits its request.timeout.ms, 30 s by default, as with Kafka). "
             "Goal: resumed <= 12 s (session + 3 s), <= 5 s after the heal. Load = 1-minute load "
             "average at the cut / heal / end (other test runs shared the machine).", "",
             "Commands: `python -m benchmarks.partition_heal --victim V --cut S --ray-health H "
             "[--tcp-rto-max-ms MS]` (root). *hosts tcp_rto_max_ms*: each host's net.ipv4.tcp_rto_max_ms "
             "(actors/tcp_backoff.py); runs without it had the kernel's default, 120000.", "",
             "| when (UTC) | cut host | cut s | Ray health | Ray nodes restarted | partition (leader before) "
             "| moved s | resumed s | ISR whole s | gap after heal s | acked | lost | load cut/heal/end |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        first = True
        for p, d in sorted(r["partitions"].items(), key=lambda kv: int(kv[0])):
            tuned = "".join(f"; producer {k}={v}" for k, v in r.get("producer_config", {}).items())
            tuned += "".join(f"; readers {k}={v}" for k, v in r.get("reader_config", {}).items())
            if r.get("tcp_rto_max_ms"):  # runs before it was set had the kernel's default (120000)
                tuned += f"; hosts tcp_rto_max_ms={r['tcp_rto_max_ms']}"
            if r.get("quorum") or "--quorum" in r.get("command", ""):
                tuned += "; **metadata quorum** (the active controller's host cut)" if r.get("victim_leads") \
                    or "quorum-leader" in r.get("command", "") else "; **metadata quorum**"
            head = (f"| {r['when']} | {r['victim']} | {r['cut_s']} | {r.get('ray_health', '?')}{tuned} | "
                    f"{', '.join(r['ray_nodes_restarted']) or 'none'} |") if first else "| | | | | |"
            tail = (f" {r['acknowledged']} | {r['lost']} | "
                    f"{r['load_1min'].get('cut')}/{r['load_1min'].get('heal')}/{r['load_1min'].get('end')} |") \
                if first else " | | |"
            lines.append(f"{head} {p} ({d['leader_before']}) | {d.get('moved_s')} | {d['resumed_s']} | {d['isr_whole_s']} | "
                         f"{d['gap_after_heal_s']} |{tail}")
            first = False
    lines.append("")
    readers = [r for r in runs if "consumed" in r]
    if readers:
        lines += ["Readers beside the producer, with their clients' default settings (but for a run's `readers` settings in the table above): a consumer group member "
                  "and a share consumer (implicit acknowledgement). *resumed* = seconds from the cut until a "
                  "record sent after it was received; *gap* = longest time without receiving one after the heal; "
                  "*read* = acknowledged records received by the end.", "",
                  "| when (UTC) | cut host | partition (leader before) | consume resumed s | consume gap after heal s "
                  "| share resumed s | share gap after heal s | read (group / share) of acked |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in readers:
            first = True
            for p, d in sorted(r["partitions"].items(), key=lambda kv: int(kv[0])):
                head = f"| {r['when']} | {r['victim']} |" if first else "| | |"
                tail = f" {r['consumed']} / {r['share_consumed']} of {r['acknowledged']} |" if first else " |"
                lines.append(f"{head} {p} ({d['leader_before']}) | {d.get('consume_resumed_s')} | "
                             f"{d.get('consume_gap_after_heal_s')} | {d.get('share_resumed_s')} | "
                             f"{d.get('share_gap_after_heal_s')} |{tail}")
                first = False
        lines.append("")
    for r in runs:
        lines.append(f"`kray start` said, {r['when']} (cut h{r['victim'][1:]} at {r['cut_at']}, healed at "
                     f"{r['healed_at']}):")
        lines += ["", "```"] + [line for line in r["console"]] + ["```", ""]
        restarts = [f"{h}: {line}" for h, said in r.get("supervisors", {}).items() for line in said]
        if restarts:
            lines += ["Node supervisors:", "", "```"] + restarts + ["```", ""]
    return "\n".join(lines)


def quorum_leader(bootstrap: str) -> int:
    """The broker whose voter leads the metadata quorum (DescribeQuorum), once one does."""
    from cluster.admin import KafkaConnection
    from cluster.tools.metadata_quorum import describe_request, partition_of
    deadline = time.monotonic() + 60
    while True:
        try:
            with KafkaConnection(bootstrap, client_id="partition-heal") as conn:
                leader = partition_of(conn.send(describe_request())).leader_id
            if leader >= 0:
                return leader
        except Exception as e:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no metadata quorum leader: {e}") from None
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--victim", default="3",
                        help="the host cut off (1 runs the Ray head, and with --no-quorum the dedicated controller); "
                             "'quorum-leader': the host whose voter leads the metadata quorum (the active "
                             "controller's host)")
    parser.add_argument("--cut", type=float, default=60.0, help="seconds the host is cut off")
    parser.add_argument("--ray-health", choices=sorted(RAY_HEALTH), default="broker")
    parser.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a producer setting beside the defaults (repeatable), e.g. socket.timeout.ms=10000")
    parser.add_argument("--reader-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of both readers (group and share consumer) beside the defaults "
                             "(repeatable), e.g. socket.timeout.ms=10000")
    parser.add_argument("--tcp-rto-max-ms", default=str(RTO_MAX_MS),
                        help=f"each host's net.ipv4.tcp_rto_max_ms ({RTO_MAX_MS}, as the README asks of broker "
                             f"hosts; 'kernel': the kernel's default)")
    parser.add_argument("--quorum", action=argparse.BooleanOptionalAction, default=True,
                        help="combined voters of the metadata quorum (a voter and a controller on each broker: " +
                             " ".join(QUORUM) + "; configs/multinode.toml's default); --no-quorum: one dedicated "
                             "controller (the quorum's single voter) on the Ray head")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config of `kray start` beside the benchmark's (repeatable), e.g. "
                             "broker.session.timeout.ms=6000")
    parser.add_argument("--out", default="benchmarks/results/partition-heal", help="results path, without .json/.md")
    args = parser.parse_args(argv)
    from cluster.hosts.deploy import KrayHosts
    rto_max_ms = None if args.tcp_rto_max_ms == "kernel" else int(args.tcp_rto_max_ms)
    hosts = KrayHosts(3, overrides=(*OVERRIDES, *(QUORUM if args.quorum else DEDICATED), *args.override), ray_system_config=RAY_HEALTH[args.ray_health], tcp_rto_max_ms=rto_max_ms)
    log(f"starting 3 hosts (Ray health {args.ray_health}: {RAY_HEALTH[args.ray_health]}; load {load1()})")
    with hosts:
        log(f"up: {hosts.bootstrap}; " + ", ".join(f"{k} {v:.1f}" for k, v in hosts.timings.items()))
        victim = quorum_leader(hosts.bootstrap) if args.victim == "quorum-leader" else int(args.victim)
        log(f"victim: h{victim}")
        result = run_scenario(hosts, victim, args.cut,
                              producer_config=dict(kv.split("=", 1) for kv in args.producer_config),
                              reader_config=dict(kv.split("=", 1) for kv in args.reader_config))
    result |= {"quorum": args.quorum, "victim_leads": args.victim == "quorum-leader", "ray_health": args.ray_health, "ray_system_config": RAY_HEALTH[args.ray_health],
               "tcp_rto_max_ms": rto_max_ms if host_rto_max_ms() is not None else None,
               "command": "python -m benchmarks.partition_heal " + " ".join(argv if argv is not None else
                                                                             __import__("sys").argv[1:])}
    out = Path(args.out)
    runs = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    runs.append(result)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(runs))
    log(f"written {out}.json and {out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
