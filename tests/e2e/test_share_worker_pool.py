"""Ray worker pools for share groups (cluster/workers) against a real broker: a LocalBroker and the
pool's worker actors on one Ray for the module, records produced and acknowledged by real
confluent-kafka clients."""
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pytest
import ray
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cluster.config import DEFAULT_LOCAL_CONFIG, load_broker_config
from cluster.local import LocalBroker
from cluster.ray_node_start import start_ray_node
from cluster.workers import ShareWorkerPool
from tests.kray_process import free_port

LOCK_MS = 3000
DELIVERY_LIMIT = 3
FAST = dict(num_cpus=0.25, interval_s=0.5, scale_up_cooldown_s=1.0, scale_down_window_s=3.0,
            scale_down_cooldown_s=1.0)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    owns_ray = not ray.is_initialized()
    if owns_ray:
        # (a start that misses Ray's 30 s on a busy machine is tried again, as kray start does)
        start_ray_node(lambda: ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False))
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the handlers below, in the workers
    config = load_broker_config(DEFAULT_LOCAL_CONFIG, overrides=[
        f"log.dirs={tmp_path_factory.mktemp('kray-workers')}", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
        "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500",
        f"group.share.record.lock.duration.ms={LOCK_MS}", "group.share.min.record.lock.duration.ms=1000",
        f"group.share.delivery.count.limit={DELIVERY_LIMIT}"])
    broker = LocalBroker(config)
    try:
        yield broker.start()
    finally:
        broker.stop()
        if owns_ray:
            ray.shutdown()


@ray.remote(num_cpus=0)
class Deliveries:
    """What the handlers saw: (key, delivery count, outcome) per call."""

    def __init__(self):
        self.seen = []

    def add(self, key, delivery_count, outcome):
        self.seen.append((key, delivery_count, outcome))

    def get(self):
        return list(self.seen)


def queue(bootstrap, records, partitions):
    topic, group = f"q-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    produce(bootstrap, topic, partitions, range(records))
    return topic, group


def produce(bootstrap, topic, partitions, keys):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in keys:
        p.produce(topic, key=str(i).encode(), value=b"v" * 100, partition=i % partitions)
    assert p.flush(30) == 0


def wait_for(condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def settled(pool, expected):
    s = pool.stats()
    return s["accepted"] + s["rejected"] >= expected


def test_each_record_is_acknowledged_as_its_handler_ended(bootstrap):
    """Return: ACCEPT, never delivered again. A poison exception: REJECT, archived, never again.
    Another exception: RELEASE, delivered again with the next delivery count, then accepted."""
    topic, group = queue(bootstrap, 300, partitions=3)
    deliveries = Deliveries.remote()

    def handle(record):
        key, count = int(record.key()), record.delivery_count()
        outcome = ("rejected" if key % 10 == 3 else "released" if key % 10 == 7 and count == 1 else "accepted")
        deliveries.add.remote(key, count, outcome)
        if outcome == "rejected":
            raise ValueError(f"record {key} is malformed")
        if outcome == "released":
            raise ConnectionError("the downstream service is busy")

    with ShareWorkerPool(bootstrap, group, [topic], handle, poison=(ValueError,), min_workers=2, max_workers=2,
                         **FAST) as pool:
        wait_for(lambda: settled(pool, 300), 60, "300 records accepted or rejected")
        time.sleep(LOCK_MS / 1000 + 1)  # anything wrongly left acquired would come back by now
    stats = pool.stats()
    seen = ray.get(deliveries.get.remote())
    by_key = {}
    for key, count, outcome in seen:
        by_key.setdefault(key, []).append((count, outcome))
    assert set(by_key) == set(range(300))
    for key, calls in by_key.items():
        if key % 10 == 3:
            assert calls == [(1, "rejected")], f"poison record {key} was delivered again: {calls}"
        elif key % 10 == 7:
            assert sorted(calls) == [(1, "released"), (2, "accepted")], f"record {key}: {calls}"
        else:
            assert calls == [(1, "accepted")], f"accepted record {key} was delivered again: {calls}"
    assert (stats["accepted"], stats["rejected"], stats["released"]) == (270, 30, 30)
    assert stats["errors"] >= 30 and stats["ack_errors"] == 0  # the 30 transient handler failures
    assert stats["workers"] == 0 and stats["lag"] == 0


def test_a_batch_handler_gets_each_poll_and_its_outcome_acknowledges_the_whole_batch(bootstrap):
    topic, group = queue(bootstrap, 200, partitions=2)
    deliveries = Deliveries.remote()

    def handle(records):
        keys = [int(r.key()) for r in records]
        poison = any(k % 50 == 49 for k in keys)
        for r, k in zip(records, keys):
            deliveries.add.remote(k, r.delivery_count(), len(records) if not poison else "rejected")
        if poison:
            raise ValueError("a batch with a broken record")

    with ShareWorkerPool(bootstrap, group, [topic], handle, batch=True, poison=(ValueError,), min_workers=1,
                         max_workers=1, max_poll_records=10, **FAST) as pool:
        wait_for(lambda: settled(pool, 200), 30, "200 records accepted or rejected")
    seen = ray.get(deliveries.get.remote())
    counts = Counter(key for key, _, _ in seen)
    assert set(counts) == set(range(200)) and max(counts.values()) == 1, "a record came back"
    rejected = {key for key, _, outcome in seen if outcome == "rejected"}
    assert {49, 99, 149, 199} <= rejected and pool.stats()["rejected"] == len(rejected)
    # a poll holds at most max_poll_records per partition: Kray applies ShareFetch's MaxRecords to each
    # share-partition (Kafka to the whole request, so Kafka's polls would be smaller still)
    assert all(1 <= size <= 10 * 2 for _, _, size in seen if size != "rejected"), "a poll larger than the limit"


def test_a_slow_handler_releases_what_it_cannot_finish_within_the_lock(bootstrap):
    """Eight records a poll at 0.6 s each outlast the 3 s lock: the worker releases the rest of the poll
    before their locks expire, so no handler works on a record whose lock ran out."""
    topic, group = queue(bootstrap, 8, partitions=1)
    deliveries = Deliveries.remote()

    def handle(record):
        time.sleep(0.6)
        deliveries.add.remote(int(record.key()), record.delivery_count(), "accepted")

    with ShareWorkerPool(bootstrap, group, [topic], handle, min_workers=1, max_workers=1, max_poll_records=10,
                         **FAST) as pool:
        wait_for(lambda: settled(pool, 8), 40, "8 slow records")
    stats = pool.stats()
    assert stats["record_lock_duration_ms"] == LOCK_MS  # read from the broker (DescribeConfigs)
    assert stats["lock_released"] > 0 and stats["ack_errors"] == 0
    counts = Counter(key for key, _, _ in ray.get(deliveries.get.remote()))
    assert set(counts) == set(range(8)) and max(counts.values()) == 1, "a record was handled twice"


def test_a_backlog_scales_the_pool_up_and_a_drained_queue_scales_it_down(bootstrap):
    topic, group = queue(bootstrap, 0, partitions=4)
    deliveries = Deliveries.remote()

    def handle(record):
        time.sleep(0.02)
        deliveries.add.remote(int(record.key()), record.delivery_count(), "accepted")

    with ShareWorkerPool(bootstrap, group, [topic], handle, min_workers=1, max_workers=4, lag_target_s=3.0,
                         **FAST) as pool:
        wait_for(lambda: pool.stats()["lag"] == 0, 30, "the first worker to join (lag 0)")
        assert pool.stats()["workers"] == 1
        produce(bootstrap, topic, 4, range(900))  # 18 s for one worker, 3 s is the target
        wait_for(lambda: settled(pool, 900), 60, "the backlog to drain")
        wait_for(lambda: pool.stats()["workers"] == 1 and pool.stats()["draining"] == 0, 30, "the scale-down")
        history = list(pool.history)
    peak = max(h["workers"] for h in history)
    assert peak >= 3, f"the pool rose to {peak} workers only"
    stats = pool.stats()  # what the pool planned with: measured, not assumed
    assert stats["starts_timed"] >= 1 and 0 < stats["start_time_s"] < 30, stats
    assert stats["worker_rate"] and stats["worker_rate"] <= 1 / 0.02 * 1.05, stats  # at most the handler's 50/s
    calls = ray.get(deliveries.get.remote())
    seen = Counter(key for key, _, _ in calls)
    assert set(seen) == set(range(900)), "a record was lost"
    assert [k for k, n in seen.items() if n > 1] == [], "scale-down made records come back"
    assert {count for _, count, _ in calls} == {1} and pool.stats()["ack_errors"] == 0, "a lock timed out"
    assert pool.stats()["accepted"] == 900


def test_a_stopped_pool_leaves_nothing_locked_for_the_next(bootstrap):
    """Stopping drains every worker mid-backlog: what they held is acknowledged or released on close,
    so a new pool takes over at once: every record handled, none twice, none after its lock timed out."""
    topic, group = queue(bootstrap, 400, partitions=2)
    deliveries = Deliveries.remote()

    def handle(record):
        time.sleep(0.01)
        deliveries.add.remote(int(record.key()), record.delivery_count(), "accepted")

    first = ShareWorkerPool(bootstrap, group, [topic], handle, min_workers=2, max_workers=2, **FAST).start()
    wait_for(lambda: first.stats()["accepted"] >= 100, 30, "the first pool to get going")
    first.stop()
    handled_first = first.stats()["accepted"]
    assert handled_first < 400, "the first pool should stop mid-backlog"
    started = time.monotonic()
    with ShareWorkerPool(bootstrap, group, [topic], handle, min_workers=2, max_workers=2, **FAST) as second:
        wait_for(lambda: handled_first + second.stats()["accepted"] >= 400, 30, "the second pool to finish")
        took_s = time.monotonic() - started
    seen = ray.get(deliveries.get.remote())
    counts = Counter(key for key, _, _ in seen)
    assert set(counts) == set(range(400)) and max(counts.values()) == 1
    assert {count for _, count, _ in seen} == {1}, "a record came back after a drained worker held it"
    assert took_s < 20


def test_kray_share_workers_runs_a_module_function_and_reports_progress(bootstrap, tmp_path):
    """The command line joins this Ray (--ray-address), loads the handler from the current directory,
    prints a progress line every --reporting-interval ms, and Ctrl-C drains and prints the totals."""
    topic, group = queue(bootstrap, 50, partitions=2)
    (tmp_path / "jobs.py").write_text("def handle(record):\n    if record.key() == b'7':\n"
                                      "        raise ValueError('poison')\n")
    kray = os.path.join(os.path.dirname(sys.executable), "kray")
    proc = subprocess.Popen([kray, "share-workers", "--bootstrap-server", bootstrap, "--group", group, "--topic", topic,
                             "--handler", "jobs:handle", "--poison", "ValueError", "--max-workers", "1",
                             "--num-cpus", "0.25", "--reporting-interval", "500",
                             "--ray-address", ray.get_runtime_context().gcs_address],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip() for line in proc.stdout), daemon=True)
    reader.start()
    try:  # accepted 49, released 0, rejected 1
        wait_for(lambda: any(line.split("\t")[6:9] == ["49", "0", "1"] for line in list(lines)), 60,
                 "a progress line with every record: " + "\n".join(lines))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, "\n".join(lines)
    assert "TIME-S\tWORKERS\tDRAINING\tLAG\tRATE-RECORDS/S\tHANDLER-MS\tACCEPTED\tRELEASED\tREJECTED\tERRORS" in lines
    assert "Draining the workers ..." in lines
    assert lines[-1].split("\t")[1:3] == ["0", "0"] and lines[-1].split("\t")[6:9] == ["49", "0", "1"]
