"""Example pipeline: orders in a share group -> Spark aggregation -> a results topic.

Against a running broker (`kray start`, or Apache Kafka 4.2+), on an embedded local Ray:

    python configs/examples/orders_pipeline.py --bootstrap 127.0.0.1:9092 --seed-orders 100000

Every order is a JSON value {"order_id": int, "customer": str, "amount_cents": int}. Each batch
is aggregated per customer (order count and total) and written to `order-totals` keyed by
customer; the batch is committed only after every result row is acknowledged, so a crash at any
point redelivers the batch's orders (at least once: a customer's totals may be counted twice for
a batch that was written but not committed).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

ORDERS_TOPIC = "orders"
TOTALS_TOPIC = "order-totals"
GROUP = "order-aggregator"
CUSTOMERS = 100


def create_topics(bootstrap: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(t, partitions, 1) for t in (ORDERS_TOPIC, TOTALS_TOPIC) if t not in existing]
    for f in (admin.create_topics(new).values() if new else []):
        f.result(30)


def start_group_at_earliest(bootstrap: str, group: str = GROUP) -> None:
    """Share groups start at the latest offset; this pipeline wants what is already there."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)


def seed_orders(bootstrap: str, count: int, topic: str = ORDERS_TOPIC, seed: int = 7) -> dict[str, tuple[int, int]]:
    """Produce `count` orders; returns the expected (orders, total cents) per customer."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    expected: dict[str, list[int]] = {}
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 5000})
    for i in range(count):
        customer = f"c{rng.randrange(CUSTOMERS):03d}"
        amount = rng.randrange(100, 100_000)
        e = expected.setdefault(customer, [0, 0])
        e[0] += 1
        e[1] += amount
        while True:
            try:
                p.produce(topic, key=customer.encode(), value=json.dumps(
                    {"order_id": i, "customer": customer, "amount_cents": amount}).encode())
                break
            except BufferError:
                p.poll(0.1)
    if p.flush(60):
        raise RuntimeError("some orders were not acknowledged")
    return {c: (n, total) for c, (n, total) in expected.items()}


def aggregate_orders(df):
    """Orders DataFrame (the reader's columns) -> key = customer, value = JSON totals."""
    from pyspark.sql import functions as F

    order = F.from_json(F.col("value").cast("string"), "order_id long, customer string, amount_cents long")
    totals = (df.select(order.alias("o")).groupBy("o.customer")
              .agg(F.count("*").alias("orders"), F.sum("o.amount_cents").alias("total_cents")))
    return totals.select(F.col("customer").alias("key"),
                         F.to_json(F.struct("customer", "orders", "total_cents")).alias("value"))


def run(spark, bootstrap: str, *, group: str = GROUP, source: str = ORDERS_TOPIC, sink: str = TOTALS_TOPIC,
        readers: int = 2, max_records: int = 100_000, timeout_s: float = 2.0,
        stop_after_idle_s: float | None = None, max_messages: int | None = None, log=print) -> int:
    """The pipeline loop; returns the number of orders committed. It stops when no order arrived
    for `stop_after_idle_s`, or once `max_messages` orders are committed (as
    kafka-console-consumer's --max-messages); else it runs until interrupted."""
    from cluster.spark import ShareGroupReader, write_topic

    committed = 0
    with ShareGroupReader(spark, bootstrap, group, [source], readers=readers) as reader:
        for batch in reader.batches(max_records=max_records, timeout_s=timeout_s, stop_after_idle_s=stop_after_idle_s):
            started = time.monotonic()
            with batch:  # committed when the block succeeds, released (redelivered) if it raises
                rows = write_topic(aggregate_orders(batch.df), bootstrap, sink)
            committed += batch.count
            log(f"batch of {batch.count} orders -> {rows} customer totals in {time.monotonic() - started:.2f} s "
                f"({committed} orders so far)")
            if max_messages is not None and committed >= max_messages:
                break
    return committed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--seed-orders", type=int, default=0, help="produce this many orders first")
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--max-records", type=int, default=100_000)
    parser.add_argument("--stop-after-idle-s", type=float, default=None,
                        help="stop when no order arrived for this long (default: run until Ctrl-C)")
    parser.add_argument("--max-messages", type=int, default=None,
                        help="stop once this many orders are committed (default: run until Ctrl-C)")
    args = parser.parse_args(argv)

    import ray
    from cluster.spark import start_spark, stop_spark

    create_topics(args.bootstrap)
    start_group_at_earliest(args.bootstrap)
    if args.seed_orders:
        seed_orders(args.bootstrap, args.seed_orders)
    ray.init(include_dashboard=False, log_to_driver=False)
    spark = start_spark("orders-pipeline")
    try:
        run(spark, args.bootstrap, readers=args.readers, max_records=args.max_records,
            stop_after_idle_s=args.stop_after_idle_s, max_messages=args.max_messages)
    except KeyboardInterrupt:
        pass
    finally:
        stop_spark()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
