"""Spark-on-Ray pipelines reading share groups (cluster.spark) against a real broker on 127.0.0.1.

One Ray, one broker (LocalBroker on that Ray) and ONE Spark session for the module: RayDP takes
10-15 s to start. Short record locks (2 s) and a delivery limit of 3 keep the failure tests quick.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("raydp", reason="the spark extra is not installed: pip install -e '.[test]'")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17 (java on PATH or JAVA_HOME)", allow_module_level=True)

import ray  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,  # noqa: E402
                                   NewTopic, ResourceType)

from cluster.cli import DEFAULT_LOCAL_CONFIG  # noqa: E402
from cluster.config import load_broker_config  # noqa: E402
from cluster.local import LocalBroker  # noqa: E402
from cluster.ray_node_start import start_ray_node  # noqa: E402
from cluster.spark import BatchSettleError, ShareGroupReader, start_spark, stop_spark  # noqa: E402
from tests.kray_process import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LOCK_MS = 3000
DELIVERY_LIMIT = 3


def load_example():
    spec = importlib.util.spec_from_file_location("orders_pipeline", REPO / "configs/examples/orders_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    owns_ray = not ray.is_initialized()
    if owns_ray:
        # (a start that misses Ray's 30 s on a busy machine is tried again, as kray start does)
        start_ray_node(lambda: ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False))
    config = load_broker_config(DEFAULT_LOCAL_CONFIG, overrides=[
        f"log.dirs={tmp_path_factory.mktemp('kray-spark')}", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
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


@pytest.fixture(scope="module")
def spark(bootstrap):
    session = start_spark("kray-spark-tests", executors=1, executor_cores=1, executor_memory="1g")
    yield session
    stop_spark()


def queue(bootstrap, records, partitions=1, topic=None, group=None, lock_ms=None):
    """A fresh topic holding `records` records keyed 0..records-1, and a share group at earliest
    (with its own share.record.lock.duration.ms when `lock_ms` is given)."""
    topic, group = topic or f"q-{uuid.uuid4().hex[:8]}", group or f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    configs = [ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)]
    if lock_ms is not None:
        configs.append(ConfigEntry("share.record.lock.duration.ms", str(lock_ms), incremental_operation=AlterConfigOpType.SET))
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=configs)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(records):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0
    return topic, group


def one_batch(reader, max_records, timeout_s=10.0):
    for batch in reader.batches(max_records=max_records, timeout_s=timeout_s, stop_after_idle_s=timeout_s):
        return batch
    return None


def read_topic(bootstrap, topic, partitions, idle_s=3.0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, last = [], time.monotonic()
    while time.monotonic() - last < idle_s:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append(m)
            last = time.monotonic()
    c.close()
    return out


def test_example_pipeline_aggregates_every_order_once(bootstrap, spark):
    example = load_example()
    source, sink, group = f"orders-{uuid.uuid4().hex[:6]}", f"totals-{uuid.uuid4().hex[:6]}", "aggregator"
    queue(bootstrap, 0, partitions=3, topic=source, group=group)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(sink, 3, 1)])[sink].result(30)
    expected = example.seed_orders(bootstrap, 8_000, topic=source)
    committed = example.run(spark, bootstrap, group=group, source=source, sink=sink, readers=2,
                            # it stops once every order is committed; the idle stop (counted from the
                            # start: the readers' first join took over 4 s once on a loaded CI machine)
                            # only ends a run that is missing orders
                            max_records=2_000, timeout_s=2.0, stop_after_idle_s=30.0, max_messages=8_000,
                            log=lambda *_: None)
    assert committed == 8_000
    totals: dict[str, list[int]] = {}
    for m in read_topic(bootstrap, sink, 3):
        v = json.loads(m.value())
        assert m.key().decode() == v["customer"]
        t = totals.setdefault(v["customer"], [0, 0])
        t[0] += v["orders"]
        t[1] += v["total_cents"]
    assert {c: tuple(t) for c, t in totals.items()} == expected, "every order counted exactly once"
    with ShareGroupReader(spark, bootstrap, group, [source], readers=1) as again:
        assert one_batch(again, 100, timeout_s=3.0) is None, "committed orders never come back"


def test_failing_spark_job_releases_its_batch_and_the_retry_sees_delivery_count_2(bootstrap, spark):
    from pyspark.sql import functions as F

    topic, group = queue(bootstrap, 200)

    @F.udf("long")
    def explode_on_record_7(key):
        if key == b"7":
            raise ValueError("bad order 7")
        return 1

    with ShareGroupReader(spark, bootstrap, group, [topic], readers=1) as reader:
        first = one_batch(reader, 200)
        assert first.count == 200
        with pytest.raises(Exception, match="bad order 7"):
            with first:
                first.df.select(explode_on_record_7("key").alias("n")).agg(F.sum("n")).collect()
        assert first.settled == "released"
        retry = one_batch(reader, 200)
        rows = retry.df.select("offset", "delivery_count").collect()
        assert sorted(r.offset for r in rows) == list(range(200))
        assert {r.delivery_count for r in rows} == {2}
        retry.commit()
        assert one_batch(reader, 200, timeout_s=3.0) is None


def test_two_readers_split_the_work_and_no_record_is_accepted_twice(bootstrap, spark):
    # the records arrive once both readers are in the group, as in a running pipeline (a new share group's first
    # member is assigned at once, so records queued before would all go to the reader that joined first)
    topic, group = queue(bootstrap, 0, partitions=2)

    def produce_later():
        time.sleep(3.0)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(6_000):
            p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % 2)
        assert p.flush(30) == 0
    accepted: list[tuple[int, int]] = []
    readers_seen: set[str] = set()
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=2) as reader:
        producer = threading.Thread(target=produce_later, daemon=True)
        producer.start()
        for batch in reader.batches(max_records=1_000, timeout_s=2.0, stop_after_idle_s=6.0):
            with batch:
                rows = batch.df.select("partition", "offset", "delivery_count").collect()
            assert {r.delivery_count for r in rows} == {1}
            accepted += [(r.partition, r.offset) for r in rows]
            readers_seen |= {r for r, n in batch.counts_by_reader.items() if n}
    assert len(accepted) == len(set(accepted)) == 6_000, "each record accepted exactly once"
    assert len(readers_seen) == 2, "both readers did part of the work"


DYING_DRIVER = textwrap.dedent("""
    import json, os, sys, ray
    from cluster.spark import ShareGroupReader
    ray.init(address=sys.argv[1], log_to_driver=False)
    reader = ShareGroupReader(None, sys.argv[2], sys.argv[3], [sys.argv[4]], readers=1)
    for batch in reader.batches(max_records=100, timeout_s=10, stop_after_idle_s=10):
        print(json.dumps(sorted(batch.table.column("offset").to_pylist())), flush=True)
        os._exit(1)   # the driver dies mid-batch: no commit, no release, no goodbye
""")


def test_records_of_a_dead_driver_are_redelivered_to_another_reader(bootstrap, spark):
    topic, group = queue(bootstrap, 100)
    gcs = ray.get_runtime_context().gcs_address
    out = subprocess.run([sys.executable, "-c", DYING_DRIVER, gcs, bootstrap, group, topic], capture_output=True,
                         text=True, timeout=120, cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})
    assert out.returncode == 1, out.stderr[-3000:]
    held = json.loads(out.stdout.strip().splitlines()[-1])
    assert held == list(range(100)), "the dying driver held the whole queue"
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=1) as reader:
        batch = one_batch(reader, 100, timeout_s=LOCK_MS / 1000 * 5)
        table = batch.table
        assert sorted(table.column("offset").to_pylist()) == held
        assert set(table.column("delivery_count").to_pylist()) == {2}
        batch.commit()


def test_reject_archives_the_given_records_and_accepts_the_rest(bootstrap, spark):
    topic, group = queue(bootstrap, 50)
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=1) as reader:
        batch = one_batch(reader, 50)
        bad = batch.df.where("cast(key as string) in ('3', '4')").select("partition", "offset").collect()
        batch.reject(bad)
        assert one_batch(reader, 50, timeout_s=LOCK_MS / 1000 * 2) is None, "rejected and accepted records stay gone"


def test_a_record_that_keeps_failing_is_archived_at_the_delivery_limit(bootstrap, spark):
    topic, group = queue(bootstrap, 5)
    counts = []
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=1) as reader:
        for _ in range(DELIVERY_LIMIT):
            batch = one_batch(reader, 5)
            counts.append(set(batch.table.column("delivery_count").to_pylist()))
            batch.release()
        assert counts == [{1}, {2}, {3}]
        assert one_batch(reader, 5, timeout_s=3.0) is None, f"archived after {DELIVERY_LIMIT} deliveries"


def test_a_batch_held_past_its_lock_keeps_it_by_renewing(bootstrap, spark):
    topic, group = queue(bootstrap, 20)
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=1) as reader:
        batch = one_batch(reader, 20)
        time.sleep(LOCK_MS / 1000 * 2.5)  # a slow Spark job
        batch.commit()
        assert reader.stats()[0]["renewals"] >= 2
        assert one_batch(reader, 20, timeout_s=3.0) is None


def test_without_renewal_an_expired_batch_fails_to_commit_and_comes_back(bootstrap, spark):
    # the records fetched again must still be locked when committed: the group's lock leaves
    # room for a loaded machine (with the broker's 3 s, their lock ran out before the commit
    # once, in a CI run at load ~15)
    lock_ms = 8000
    topic, group = queue(bootstrap, 20, lock_ms=lock_ms)
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=1, renew_locks=False,
                          prefetch_records=20) as reader:
        batch = one_batch(reader, 20)
        time.sleep(lock_ms / 1000 * 1.3)  # expired, and fetched again (delivery 2) with a fresh lock
        with pytest.raises(BatchSettleError, match="held past their lock|INVALID_RECORD_STATE"):
            batch.commit()
        again = one_batch(reader, 20)
        assert set(again.table.column("delivery_count").to_pylist()) == {2}
        again.commit()


def test_writing_rows_the_broker_cannot_take_raises(bootstrap, spark):
    from cluster.spark import TopicWriteError, write_topic

    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(TopicWriteError, match="not acknowledged"):
        write_topic(df, bootstrap, "no-such-topic-and-no-auto-create", producer_config={
            "message.timeout.ms": 2000, "allow.auto.create.topics": False})


def test_reading_a_topic_that_does_not_exist_says_how_to_create_it(bootstrap, spark):
    from cluster.spark import ShareClientError

    with pytest.raises(ShareClientError, match="no such topic; create it first"):
        ShareGroupReader(spark, bootstrap, "g-missing", ["no-such-topic"], readers=1)


def test_closing_a_reader_hands_what_it_held_to_another_at_once(bootstrap, spark):
    topic, group = queue(bootstrap, 100)
    first = ShareGroupReader(spark, bootstrap, group, [topic], readers=1)
    batch = one_batch(first, 60)  # 60 in the batch, the other 40 in the reader's buffer
    assert batch.count == 60
    with ShareGroupReader(spark, bootstrap, group, [topic], readers=1) as second:
        assert one_batch(second, 100, timeout_s=2.0) is None, "the first reader holds everything"
        closed_at = time.monotonic()
        first.close()
        got = one_batch(second, 100, timeout_s=LOCK_MS / 1000)
        assert time.monotonic() - closed_at < LOCK_MS / 1000, "released by close, not by lock expiry"
        assert sorted(got.table.column("offset").to_pylist()) == list(range(100))
        got.commit()
