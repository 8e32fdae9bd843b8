"""Kray's queue features across a leader's death, on one 3-node LocalCluster (issue 20, item 5): the
node leading a share-partition (its share-partition leader, and its dead-letter writer, with it) is
hard-killed while real clients consume; the new leader rebuilds the state from the share
coordinator. Kafka's rule for share groups holds throughout: an acknowledgement the client saw
committed is never undone (its record is not delivered again), while records in a consumer's hands
at the kill may be (at least once).

- Key-ordered sharing (share.key.ordering.enable): per key, records are first processed in offset
  order across the move, none is lost, and no record is delivered (even again) after a later record
  of its key was: a key is free only once its record's new state is durable; the new leader learns
  the keys again from the log.
- Dead-letter topics (KIP-1191): every rejected record reaches the DLQ topic, accepted ones never; a
  rejection committed before the kill whose DLQ record was not yet written is written by the new
  leader, which learns from the share coordinator that it is still ARCHIVING.
- A Ray worker pool (cluster/workers ShareWorkerPool) keeps consuming: every record, those produced
  after the kill too, is handled within a bounded time, at a rate comparable with the one before."""
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict

import pytest
import ray
from confluent_kafka import AcknowledgeType, Consumer, KafkaException, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.local import LocalCluster
from cluster.workers import ShareWorkerPool

FAST_LIVENESS = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
                 "replica.lag.time.max.ms": 5000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-queues-failover"), overrides=FAST_LIVENESS)
    c.start()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the pool's handler, in the workers
    yield c
    c.stop()


# ---- key-ordered sharing -----------------------------------------------------------------------------------------
KEYED_RECORDS, KEYS = 4000, 20


def test_key_order_holds_across_a_killed_leader(cluster):
    name = uuid.uuid4().hex[:6]
    topic, group = f"keyed-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource("group", group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in {"share.auto.offset.reset": "earliest", "share.key.ordering.enable": "true"}.items()])]).values():
        f.result(30)
    offsets = defaultdict(list)

    def delivered(err, msg):
        assert err is None, err
        offsets[msg.key()].append(msg.offset())

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 10})
    for i in range(KEYED_RECORDS):
        p.produce(topic, key=b"key-%d" % (i % KEYS), value=b"%d" % i, partition=0, on_delivery=delivered)
        p.poll(0)
    assert p.flush(60) == 0
    expected = {k: sorted(v) for k, v in offsets.items()}

    lock = threading.Lock()
    first_accepted = defaultdict(list)   # key -> offsets in the order they were first accepted
    last_delivered: dict = {}            # key -> the highest offset delivered so far
    accepted: set = set()
    violations: list = []
    stop = threading.Event()

    def consume():
        c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        while not stop.is_set():
            try:
                got = [m for m in c.poll(0.5) if m.error() is None]
                for m in got:
                    key, o = m.key(), m.offset()
                    with lock:
                        if o < last_delivered.get(key, -1):
                            violations.append(f"{key!r} at {o} delivered after {last_delivered[key]}")
                        last_delivered[key] = max(o, last_delivered.get(key, -1))
                        if o not in accepted:
                            missing = [x for x in expected[key] if x < o and x not in accepted]
                            if missing:
                                violations.append(f"{key!r} at {o} delivered before {missing[0]} was processed")
                            accepted.add(o)
                            first_accepted[key].append(o)
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if got:
                    c.commit_sync()
            except KafkaException:
                time.sleep(0.1)
        c.close()

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    down = None
    try:
        deadline = time.monotonic() + 60
        while len(accepted) < KEYED_RECORDS // 4:
            assert time.monotonic() < deadline, f"the share consumers do not consume ({len(accepted)})"
            time.sleep(0.1)
        victim = cluster.leader(topic, 0)
        at_kill = len(accepted)
        cluster.kill_node(victim)
        down = victim
        killed_at = time.monotonic()
        while len(accepted) < KEYED_RECORDS:
            assert time.monotonic() < killed_at + 120, \
                f"{KEYED_RECORDS - len(accepted)} records not processed 120 s after the kill ({at_kill} before it)"
            time.sleep(0.2)
        cluster.restart_node(victim)
        down = None
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        if down is not None:
            cluster.restart_node(down)
    assert not violations, violations[:10]
    assert at_kill < KEYED_RECORDS, "the leader was killed mid-way"
    for key, offs in expected.items():
        assert first_accepted[key] == offs, f"{key!r} first processed out of offset order"


# ---- dead-letter topics ------------------------------------------------------------------------------------------
DLQ_RECORDS, POISON_EVERY = 2000, 5
HANDLE_S = 0.005      # per record: the kill lands mid-way through the backlog
COMMIT_EVERY = 50     # records acknowledged per commit_sync: what the client knows to be durable
DUPLICATES_MAX = 500  # one DLQ Produce request in flight at the kill (DLQ_BATCH_RECORDS_MAX records at most)


def set_dlq_max_message_bytes(bootstrap, dlq, value, *, gone: int | None = None):
    """With `gone` (a killed broker): first wait until Metadata no longer lists it, as an operator
    would. Until the controller fences it, Metadata may name it as the controller, and librdkafka
    sends AlterConfigs there and waits for it (seen: 30 s timeouts under load; Kafka's brokers also
    list a dead broker until its session ends)."""
    if gone is not None:
        deadline = time.monotonic() + 60
        while gone in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers:
            assert time.monotonic() < deadline, f"broker {gone} still listed 60 s after its node was killed"
            time.sleep(0.5)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # a fresh one: not one that still knows a killed broker
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, dlq, incremental_configs=[
            ConfigEntry("max.message.bytes", str(value), incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)


def dlq_headers(m):
    return {k: v.decode() for k, v in (m.headers() or []) if k.startswith("__dlq.")}


def read_dlq(bootstrap, dlq, until=None, timeout_s=60.0, quiet_s=3.0):
    """The DLQ topic's records: until the offsets `until` were all seen and nothing came for `quiet_s`
    (or, without `until`, only until quiet), at most `timeout_s`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(dlq, 0, 0)])
    out, deadline, quiet_since = [], time.monotonic() + timeout_s, time.monotonic()
    while time.monotonic() < deadline:
        got = [m for m in c.consume(500, timeout=0.5) if m.error() is None]
        out += got
        if got:
            quiet_since = time.monotonic()
        seen = {int(dlq_headers(m)["__dlq.errors.offset"]) for m in out}
        if not (until or set()) - seen and time.monotonic() - quiet_since > quiet_s:
            break
    c.close()
    return out


def test_rejected_records_reach_the_dlq_across_a_killed_leader(cluster):
    """confluent-kafka ShareConsumers REJECT every poison record of an RF-3 partition and ACCEPT the
    rest, committing every COMMIT_EVERY records, while the node leading that partition is
    hard-killed. So that the kill surely finds committed rejections whose DLQ records are not
    written yet, the DLQ topic refuses every write for a while before it (its max.message.bytes
    smaller than one DLQ record: the writer retries) and accepts them again after it."""
    name = uuid.uuid4().hex[:6]
    topic, dlq, group = f"q-{name}", f"dlq.q-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([
            NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"}),
            NewTopic(dlq, 1, 3, config={"min.insync.replicas": "2",
                                        "errors.deadletterqueue.group.enable": "true"})]).values():
        f.result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in {"share.auto.offset.reset": "earliest",
                         "errors.deadletterqueue.topic.name": dlq}.items()])]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 10})
    for i in range(DLQ_RECORDS):
        p.produce(topic, value=b"poison-%d" % i if i % POISON_EVERY == 0 else b"ok-%d" % i, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    poison = {o for o in range(DLQ_RECORDS) if o % POISON_EVERY == 0}  # one partition: offset i is record i

    lock = threading.Lock()
    delivered = Counter()       # offset -> deliveries seen (all consumers)
    acknowledged: set = set()   # offsets acknowledged (ACCEPT or REJECT) at least once
    committed: set = set()      # offsets whose acknowledgement a commit_sync reported durable
    again_after_commit: list = []
    mislabelled: list = []
    stop = threading.Event()

    def commit(c, offsets):
        results = c.commit_sync() or {}
        if results and all(error is None for error in results.values()):
            with lock:
                committed.update(offsets)
        offsets.clear()

    def consume():
        c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        pending: list = []
        while not stop.is_set():
            try:
                for m in [m for m in c.poll(0.5) if m.error() is None]:
                    time.sleep(HANDLE_S)
                    bad = m.value().startswith(b"poison-")
                    with lock:
                        if bad != (m.offset() in poison):
                            mislabelled.append(m.offset())
                        if m.offset() in committed:
                            again_after_commit.append(m.offset())
                        delivered[m.offset()] += 1
                    c.acknowledge(m, AcknowledgeType.REJECT if bad else AcknowledgeType.ACCEPT)
                    pending.append(m.offset())
                    with lock:
                        acknowledged.add(m.offset())
                    if len(pending) >= COMMIT_EVERY:
                        commit(c, pending)
                if pending:
                    commit(c, pending)
            except KafkaException:
                pending.clear()
                time.sleep(0.1)
        c.close()

    victim = cluster.leader(topic, 0)
    threads = [threading.Thread(target=consume, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    down = None
    try:
        deadline = time.monotonic() + 60
        while len(acknowledged) < DLQ_RECORDS // 4:
            assert time.monotonic() < deadline, f"the share consumers do not consume ({len(acknowledged)})"
            time.sleep(0.02)
        set_dlq_max_message_bytes(cluster.bootstrap, dlq, 64)  # smaller than any DLQ record: every write fails
        while len(acknowledged) < DLQ_RECORDS // 2:
            assert time.monotonic() < deadline + 60, f"the share consumers stopped ({len(acknowledged)})"
            time.sleep(0.02)
        cluster.kill_node(victim)
        down, killed_at = victim, time.monotonic()
        with lock:
            rejected_at_kill = committed & poison
        # what the dead leader wrote (no one writes now: the DLQ refuses, the new leader is not loaded)
        in_dlq_at_kill = {int(dlq_headers(m)["__dlq.errors.offset"]) for m in read_dlq(cluster.bootstrap, dlq, quiet_s=2)}
        set_dlq_max_message_bytes(cluster.bootstrap, dlq, 1048588, gone=victim)  # Kafka's default: the DLQ writes succeed again
        while len(acknowledged) < DLQ_RECORDS:
            assert time.monotonic() < killed_at + 120, \
                f"{DLQ_RECORDS - len(acknowledged)} records not acknowledged 120 s after the kill"
            time.sleep(0.2)
        recovered_s = time.monotonic() - killed_at
        cluster.restart_node(victim)
        down = None
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        if down is not None:
            cluster.restart_node(down)
    assert not mislabelled, mislabelled[:10]
    archiving_at_kill = rejected_at_kill - in_dlq_at_kill
    assert len(archiving_at_kill) >= 20, \
        f"too few committed rejections without their DLQ record at the kill ({len(rejected_at_kill)} committed, " \
        f"{len(in_dlq_at_kill)} in the DLQ)"
    assert not again_after_commit, \
        f"{len(again_after_commit)} records delivered again after their acknowledgement was committed: " \
        f"{sorted(again_after_commit)[:10]}"

    letters = read_dlq(cluster.bootstrap, dlq, until=poison)
    offsets = Counter(int(dlq_headers(m)["__dlq.errors.offset"]) for m in letters)
    missing = sorted(poison - set(offsets))
    print(f"DLQ across the kill of broker {victim}: {len(rejected_at_kill)} rejections committed at it, "
          f"{len(archiving_at_kill)} of them not yet in the DLQ; all {DLQ_RECORDS} acknowledged {recovered_s:.1f} s "
          f"after it; {len(letters)} DLQ records for {len(poison)} rejected; offsets delivered more than once "
          f"{sum(n > 1 for n in delivered.values())}")
    assert not missing, f"{len(missing)} rejected records never reached the DLQ " \
                        f"({len(set(missing) & archiving_at_kill)} ARCHIVING at the kill): {missing[:10]}"
    assert set(offsets) == poison, f"accepted records in the DLQ: {sorted(set(offsets) - poison)[:10]}"
    assert len(letters) - len(poison) <= DUPLICATES_MAX, f"{len(letters) - len(poison)} duplicate DLQ records"
    assert max(offsets.values()) <= 2, f"a record in the DLQ {max(offsets.values())} times"
    for m in letters:
        h = dlq_headers(m)
        assert (h["__dlq.errors.group"], h["__dlq.errors.topic"], h["__dlq.errors.partition"],
                h["__dlq.errors.message"]) == (group, topic, "0", "Offset rejected by client."), h
        assert int(h["__dlq.errors.delivery.count"]) >= 1
        assert m.key() is None and m.value() is None, "copy.record.enable=false: coordinates only"


# ---- a Ray worker pool -------------------------------------------------------------------------------------------
BEFORE, AFTER = 1500, 500   # records produced before the kill, and after it
POOL_HANDLE_S = 0.005       # per record: two workers take several seconds over the backlog
RECOVERY_S_MAX = 90         # every record handled within this after the kill
POOL = dict(min_workers=2, max_workers=2, num_cpus=0.25, interval_s=0.5)


@ray.remote(num_cpus=0)
class Handled:
    """When each record was handled: key -> the times (time.time()) of its handler calls."""

    def __init__(self):
        self.calls = {}

    def add(self, key, at_s):
        self.calls.setdefault(key, []).append(at_s)

    def distinct(self):
        return len(self.calls)

    def get(self):
        return self.calls


def head_node_id():
    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])


def produce(bootstrap, topic, keys):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in keys:
        p.produce(topic, key=b"%d" % i, value=b"v" * 100, partition=0)
        p.poll(0)
    assert p.flush(60) == 0


def test_a_worker_pool_keeps_consuming_across_a_killed_leader(cluster):
    name = uuid.uuid4().hex[:6]
    topic, group = f"jobs-{name}", f"pool-{name}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    produce(cluster.bootstrap, topic, range(BEFORE))
    # the record of what was handled lives on the head node, which is never killed
    handled = Handled.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head_node_id(), soft=False)).remote()

    def handle(record):
        time.sleep(POOL_HANDLE_S)
        handled.add.remote(int(record.key()), time.time())

    victim, down = cluster.leader(topic, 0), None
    pool = ShareWorkerPool(cluster.bootstrap, group, [topic], handle, **POOL).start()
    try:
        deadline = time.monotonic() + 60
        while ray.get(handled.distinct.remote()) < BEFORE // 4:
            assert time.monotonic() < deadline, f"the pool does not consume: {pool.stats()}"
            time.sleep(0.05)
        at_kill = ray.get(handled.distinct.remote())
        cluster.kill_node(victim)
        down, killed_at, killed_at_wall = victim, time.monotonic(), time.time()
        produce(cluster.bootstrap, topic, range(BEFORE, BEFORE + AFTER))  # to the new leader
        while (done := ray.get(handled.distinct.remote())) < BEFORE + AFTER:
            assert time.monotonic() < killed_at + RECOVERY_S_MAX, \
                f"{BEFORE + AFTER - done} records not handled {RECOVERY_S_MAX} s after the kill: {pool.stats()}"
            time.sleep(0.2)
        recovered_s = time.monotonic() - killed_at
        calls = ray.get(handled.get.remote())
        stats = pool.stats()
        cluster.restart_node(victim)
        down = None
    finally:
        pool.stop()
        if down is not None:
            cluster.restart_node(down)
    assert at_kill < BEFORE, "the leader was killed mid-way"
    assert set(calls) == set(range(BEFORE + AFTER)), "a record was never handled"
    # throughput: before the kill, and from the first record handled after it (the outage apart)
    firsts = sorted(min(at) for at in calls.values())
    everything = sorted(at for ats in calls.values() for at in ats)
    before = [t for t in everything if t < killed_at_wall]
    after = [t for t in everything if t >= killed_at_wall]
    rate_before = (len(before) - 1) / (before[-1] - before[0])
    # the outage: the longest pause in handling after the kill; the rate after it
    gap, resumed_at = max((b - a, i + 1) for i, (a, b) in enumerate(zip(after, after[1:])))
    resumed = after[resumed_at]
    rate_after = (len(after) - resumed_at - 1) / (after[-1] - resumed)
    again = sum(len(ats) - 1 for ats in calls.values())
    print(f"pool across the kill of broker {victim}: {at_kill} handled before it; all {BEFORE + AFTER} "
          f"{recovered_s:.1f} s after it; handling paused {gap:.1f} s, resumed +{resumed - killed_at_wall:.1f} s; "
          f"{rate_before:.0f} records/s before, {rate_after:.0f} after; {again} handled again; "
          f"workers {stats['workers']}, errors {stats['errors']}, ack_errors {stats['ack_errors']}, "
          f"last_error {stats['last_error']}")
    assert firsts[-1] - killed_at_wall < RECOVERY_S_MAX
    assert stats["workers"] == 2, "the pool lost a worker for good"
    assert rate_after >= rate_before / 3, f"throughput did not recover: {rate_before:.0f} -> {rate_after:.0f}/s"
