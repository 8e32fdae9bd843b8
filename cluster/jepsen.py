"""The workload of the Jepsen-style check: real Kafka clients (confluent-kafka) on a topic of
several partitions while a seeded network fault schedule runs on the hosts, their histories
recorded, then every partition read back from the leader and from every replica's files, and
cluster/checker.py's rules checked.

    with KrayHosts(3) as hosts:
        report = run_checked(hosts, seed=7, duration_s=120)   # or: kray chaos --hosts 3 --seed 7
        print(markdown(report))

Clients, each in a thread of its own:
- `producers` idempotent acks=all producers, each sending `rate_per_s` records a second, round
  robin over the partitions (every value unique: "p<n>-<count>"), and one acks=1 producer
  ("one-<count>") whose losses are counted, not ruled out: Kafka loses those too when a leader
  cut off from the others acknowledges alone
- a plain consumer reading every partition from the start (assign, no group)
- a consumer group member committing its position about every second (commit_sync), closed
  and started again after 15 s and 5 commits, reading the group's committed offsets after each
  commit
- a share consumer (ShareConsumer, explicit acknowledgement) accepting every record and
  committing the acceptances (commit_sync) after each poll
"""
from __future__ import annotations

import functools
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from cluster import checker, network_chaos
from cluster.checker import Ack, Commit, CommittedRead, Fault, Read, ShareEvent
from protocol.record_batch import CorruptRecord, decode_records, iter_batches

CLIENT_TIMEOUT_S = 30
GROUP_MEMBER_LIFE_S = 15.0


class History:
    """What the clients saw, each event stamped with seconds since `t0` (monotonic)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.acks: list[Ack] = []
        self.acks_1: list[Ack] = []           # of the acks=1 producer: Kafka may lose these
        self.produce_failures: list[str] = []
        self.reads: list[Read] = []
        self.commits: list[Commit] = []
        self.observed: list[CommittedRead] = []
        self.share: list[ShareEvent] = []
        self.faults: list[Fault] = []
        self.isr: list[tuple[float, dict[int, tuple[int, tuple[int, ...]]]]] = []  # (t, partition -> (leader, ISR))
        self.errors: dict[str, int] = {}      # client errors by kind: counted, not rules

    def now(self) -> float:
        return time.monotonic() - self.t0

    def add(self, what: list, item) -> None:
        with self.lock:
            what.append(item)

    def error(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1


# ---- clients ---------------------------------------------------------------------------------------
def produce(bootstrap: str, topic: str, partitions: int, name: str, rate_per_s: float, stop: threading.Event,
            h: History, *, flush_s: float = 120, acks_all: bool = True) -> None:
    """acks_all: an idempotent acks=all producer (what the rules are about), else acks=1 without
    idempotence (what Kafka itself may lose when a leader is cut off: counted, not a rule)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": acks_all, "acks": "all" if acks_all else "1",
                  "linger.ms": 5, "delivery.timeout.ms": 300000})
    into = h.acks if acks_all else h.acks_1

    def done(sent_s, err, msg):
        if err is None:
            h.add(into, Ack(msg.partition(), msg.offset(), msg.value(), sent_s, h.now()))
        else:
            h.add(h.produce_failures, f"{msg.value()!r}: {err}")

    n, gap_s = 0, 1.0 / rate_per_s
    next_s = time.monotonic()
    while not stop.is_set():
        try:
            p.produce(topic, value=f"{name}-{n:08d}".encode(), partition=n % partitions,
                      on_delivery=functools.partial(done, h.now()))
            n += 1
        except BufferError:
            h.error("producer queue full")
        next_s += gap_s
        p.poll(max(0.0, next_s - time.monotonic()))
    left = p.flush(flush_s)
    if left:
        h.error(f"records unanswered {flush_s:.0f} s after the end")


def consume_plain(bootstrap: str, topic: str, partitions: int, stop: threading.Event, h: History) -> None:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        while not stop.is_set():
            for m in c.consume(500, timeout=0.5):
                if m.error() is None:
                    h.add(h.reads, Read(m.partition(), m.offset(), m.value()))
    finally:
        c.close()


def consume_group(bootstrap: str, topic: str, partitions: int, group: str, stop: threading.Event, h: History) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    while not stop.is_set():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
        c.subscribe([topic])
        born, commits = time.monotonic(), 0
        last_commit = time.monotonic()
        try:  # a member lives a while and commits a few times, then leaves and a new one starts
            while not stop.is_set() and (time.monotonic() - born < GROUP_MEMBER_LIFE_S or commits < 5):
                got = c.consume(500, timeout=0.5)
                if not got or time.monotonic() - last_commit < 1.0:
                    continue
                last_commit = time.monotonic()
                try:
                    committed = c.commit(asynchronous=False)
                except KafkaException:
                    h.error("group commit failed")
                    continue
                commits += 1
                done_s = h.now()
                for tp in committed or []:
                    if tp.error is None and tp.offset >= 0:
                        h.add(h.commits, Commit(tp.partition, tp.offset, done_s))
                asked = h.now()
                try:
                    seen = c.committed(tps, timeout=10)
                except KafkaException:
                    h.error("committed offsets unreadable")
                    continue
                answered = h.now()
                for tp in seen:
                    if tp.error is None:
                        h.add(h.observed, CommittedRead(tp.partition, tp.offset if tp.offset >= 0 else None,
                                                        asked, answered))
        finally:
            c.close()


def consume_share(bootstrap: str, topic: str, group: str, stop: threading.Event, h: History) -> None:
    """Accepts every record; an acceptance counts as acknowledged when the broker answered it
    without error, told by commit_sync's answer or by the acknowledgement commit callback (which
    also hears acknowledgements the client sent with a ShareFetch)."""
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})

    def answered(offsets, err):
        if err is not None:
            h.error("share acknowledgement refused (callback)")
            return
        done_s = h.now()
        for tp, done in offsets.items():
            for offset in done:
                h.add(h.share, ShareEvent("accepted", tp.partition, offset, done_s))

    c.set_acknowledgement_commit_callback(answered)
    c.subscribe([topic])
    try:
        while not stop.is_set():
            try:
                got = [m for m in c.poll(0.5) if m.error() is None]
            except KafkaException:
                h.error("share poll failed")
                continue
            for m in got:
                h.add(h.share, ShareEvent("delivered", m.partition(), m.offset(), h.now()))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if not got:
                continue
            try:
                answers = c.commit_sync(10.0)
            except KafkaException:
                h.error("share commit failed")
                continue
            done_s = h.now()
            for tp, err in answers.items():
                if err is None:
                    for m in got:
                        if m.partition() == tp.partition:
                            h.add(h.share, ShareEvent("accepted", m.partition(), m.offset(), done_s))
                else:
                    h.error("share acknowledgement refused")
    finally:
        c.close()


def sample_isr(bootstrap: str, topic: str, stop: threading.Event, h: History, every_s: float = 1.0) -> None:
    """Leaders and ISRs as Metadata tells them, about every second (what a fault found)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while not stop.wait(every_s):
        try:
            md = admin.list_topics(topic, timeout=5).topics.get(topic)
        except KafkaException:
            continue
        if md is not None and md.error is None:
            h.add(h.isr, (h.now(), {p: (m.leader, tuple(sorted(m.isrs))) for p, m in md.partitions.items()}))


def isr_at(samples: list, at_s: float) -> str:
    """'partition:leader[ISR]' of the last sample before `at_s`."""
    before = [s for t, s in samples if t <= at_s]
    if not before:
        return "?"
    return " ".join(f"{p}:{leader}{list(isr)}".replace(" ", "") for p, (leader, isr) in sorted(before[-1].items()))


# ---- read back -------------------------------------------------------------------------------------
def replica_log(directory: Path) -> dict[int, bytes]:
    """offset -> value of every record in a replica's segment files (read as they are on disk,
    up to a torn tail of a batch being written)."""
    out: dict[int, bytes] = {}
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        try:
            for header in iter_batches(data):
                for r in decode_records(header):
                    out[r.offset] = bytes(r.value) if r.value is not None else b""
        except CorruptRecord:
            pass
    return out


def replica_logs(data_dir: Path, topic: str, partitions: int) -> dict[int, dict[int, dict[int, bytes]]]:
    """partition -> broker id -> offset -> value, from data_dir/broker-<id>/<topic>-<p>/."""
    out: dict[int, dict[int, dict[int, bytes]]] = {p: {} for p in range(partitions)}
    for broker_dir in sorted(Path(data_dir).glob("broker-*")):
        broker = int(broker_dir.name.split("-", 1)[1])
        for p in range(partitions):
            d = broker_dir / f"{topic}-{p}"
            if d.is_dir():
                out[p][broker] = replica_log(d)
    return out


def read_final(bootstrap: str, topic: str, partitions: int, *, timeout_s: float = 90) -> tuple[dict, dict]:
    """(high watermarks, partition -> offset -> value) as a consumer reads them from the leaders."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    deadline = time.monotonic() + timeout_s
    hws: dict[int, int] = {}
    seen: list[str] = []  # what went wrong on the way, printed when the read comes up short
    for p in range(partitions):
        while p not in hws and time.monotonic() < deadline:
            try:
                low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high >= 0:
                    hws[p] = high
                else:
                    seen.append(f"partition {p}: watermarks {low}, {high}")
                    time.sleep(1)
            except KafkaException as e:
                seen.append(f"partition {p}: watermarks: {e}")
                time.sleep(1)
    final: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while time.monotonic() < deadline and any(len(final[p]) < hws.get(p, 0) for p in range(partitions)):
        for m in c.consume(1000, timeout=1.0):
            if m.error() is None:
                final[m.partition()][m.offset()] = m.value()
            elif len(seen) < 50:
                seen.append(f"partition {m.partition()}: consume: {m.error()}")
    c.close()
    short = {p: (len(final[p]), hws.get(p)) for p in range(partitions) if p not in hws or len(final[p]) < hws[p]}
    if short:
        print(f"read_final({topic}): short (records read, high watermark) {short}; {seen[:20]}")
    return hws, final


# ---- the run -----------------------------------------------------------------------------------------
def _setup(bootstrap: str, topic: str, partitions: int, share_group: str) -> None:
    from confluent_kafka.admin import (
        AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, share_group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(60)


def run_checked(hosts, *, seed: int, duration_s: float, faults: tuple[str, ...] = network_chaos.FAULTS,
                partitions: int = 6, producers: int = 2, rate_per_s: float = 50, mean_gap_s: float = 8.0,
                down_s: tuple[float, float] = (3.0, 15.0), warmup_timeout_s: float = 120, settle_s: float = 60,
                say: Callable[[str], None] = print, stop: threading.Event | None = None) -> checker.Report:
    """The workload on `hosts` (a started KrayHosts) under network_chaos.plan(seed, ...), then the
    checks. The schedule starts once every client has done its first work (the group committed,
    the share group accepted a record): slow first use is not a fault's unavailability."""
    steps = network_chaos.plan(seed, [h.index for h in hosts.plan.hosts], duration_s, faults=faults,
                               mean_gap_s=mean_gap_s, down_s=down_s)
    bootstrap = hosts.bootstrap
    topic, group, share_group = f"chaos-{seed}-{uuid.uuid4().hex[:4]}", f"chaos-group-{seed}", f"chaos-share-{seed}"
    say(f"topic {topic}: {partitions} partitions, 3 replicas, min.insync.replicas 2; {len(steps) // 2} faults "
        f"in {duration_s:.0f} s (seed {seed})")
    _setup(bootstrap, topic, partitions, share_group)
    h = History()
    stop_producers, stop_consumers = threading.Event(), threading.Event()
    threads = [threading.Thread(target=produce, name=f"producer-{i}", daemon=True,
                                args=(bootstrap, topic, partitions, f"p{i}", rate_per_s, stop_producers, h))
               for i in range(producers)]
    threads.append(threading.Thread(target=produce, name="producer-acks-1", daemon=True,
                                    args=(bootstrap, topic, partitions, "one", rate_per_s / 2, stop_producers, h),
                                    kwargs={"acks_all": False}))
    producers += 1
    threads += [threading.Thread(target=consume_plain, name="plain", daemon=True,
                                 args=(bootstrap, topic, partitions, stop_consumers, h)),
                threading.Thread(target=consume_group, name="group", daemon=True,
                                 args=(bootstrap, topic, partitions, group, stop_consumers, h)),
                threading.Thread(target=consume_share, name="share", daemon=True,
                                 args=(bootstrap, topic, share_group, stop_consumers, h)),
                threading.Thread(target=sample_isr, name="isr", daemon=True,
                                 args=(bootstrap, topic, stop_consumers, h))]
    for t in threads:
        t.start()
    info: dict = {}
    try:
        warm_deadline = time.monotonic() + warmup_timeout_s
        while time.monotonic() < warm_deadline and not (
                h.commits and any(e.kind == "accepted" for e in h.share) and h.reads and h.acks):
            time.sleep(0.5)
        info["warm-up (s): first commit, share accept, read and ack"] = round(h.now(), 1)
        info["load average (1, 5, 15 min) when the schedule started"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
        say(f"+{h.now():6.1f}s clients warm ({len(h.acks)} acks, {len(h.reads)} reads, {len(h.commits)} commits, "
            f"{sum(e.kind == 'accepted' for e in h.share)} share accepts): the schedule starts")
        opened: dict[tuple, int] = {}

        def on_step(t_monotonic: float, step: network_chaos.NetStep) -> None:
            at = t_monotonic - h.t0
            key = (step.fault, step.host, step.peer, step.probability)
            if step.action == network_chaos.HEAL:
                i = opened.pop(key)
                h.faults[i] = Fault(h.faults[i].name, h.faults[i].start_s, at)
            else:
                opened[key] = len(h.faults)
                h.faults.append(Fault(step.describe(), at, None))

        network_chaos.run(hosts, steps, say=lambda line: say(f"  {line}"), stop=stop, on_step=on_step)
        say(f"+{h.now():6.1f}s schedule done, every fault healed; settling")
        time.sleep(min(10.0, settle_s))
    finally:
        hosts.heal_all()
        stop_producers.set()
        for t in threads[:producers]:
            t.join(150)
        # let the consumers catch up with everything acknowledged, then stop them
        deadline = time.monotonic() + settle_s
        acked = {(a.partition, a.offset) for a in h.acks if a.offset is not None}  # (None: see lost_acknowledged)
        while time.monotonic() < deadline:
            read = {(r.partition, r.offset) for r in list(h.reads)}
            delivered = {(e.partition, e.offset) for e in list(h.share) if e.kind == "accepted"}
            if acked <= read and acked <= delivered:
                break
            time.sleep(1.0)
        stop_consumers.set()
        for t in threads[producers:]:
            t.join(60)
    hws, final = read_final(bootstrap, topic, partitions)
    deadline = time.monotonic() + 30
    while True:  # followers catch up after the heal: wait (bounded) until each replica reaches the HW
        replicas = replica_logs(hosts.net.run_dir / "data", topic, partitions)
        behind = [(p, b) for p, logs in replicas.items() for b, log in logs.items() if len(log) < hws.get(p, 0)]
        if not behind or time.monotonic() > deadline:
            break
        time.sleep(2.0)
    info.update({
        "load average (1, 5, 15 min) at the end": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "records produced and failed": len(h.produce_failures),
        "acks=1 records acknowledged": len(h.acks_1),
        "acks=1 acknowledged records lost (Kafka allows it)": len(checker.lost_acknowledged(h.acks_1, final)),
        "records read by the plain consumer (distinct offsets)": len({(r.partition, r.offset) for r in h.reads}),
        "group commits acknowledged": len(h.commits),
        "committed offsets read": len(h.observed),
        "share deliveries": sum(e.kind == "delivered" for e in h.share),
        "share acceptances acknowledged": sum(e.kind == "accepted" for e in h.share),
        "acknowledged records never accepted by the share group": len(
            {(a.partition, a.offset) for a in h.acks if a.offset is not None}
            - {(e.partition, e.offset) for e in h.share if e.kind == "accepted"}),
        "replicas behind the HW at the end (partition, broker)": ", ".join(f"{p}/{b}" for p, b in behind) or "none",
        "high watermarks": ", ".join(f"{p}: {hw}" for p, hw in sorted(hws.items())),
    } | {f"client errors: {k}": v for k, v in sorted(h.errors.items())})
    report = checker.check(acks=h.acks, final=final, replicas=replicas, high_watermarks=hws, reads=h.reads,
                           commits=h.commits, observed=h.observed, share=h.share, faults=h.faults,
                           partitions=list(range(partitions)), info=info)
    for window in report.faults:  # what the fault found: each partition's leader and ISR just before it
        window["leader_isr_before"] = isr_at(h.isr, window["start_s"])
    return report
