"""`kray producer-perf-test` and `kray share-consumer-perf-test`, after Kafka's perf tools: steady
load with progress lines and a summary (records/s, MB/s, latency)."""
from __future__ import annotations

from cluster.admin import COMMAND_CONFIG_HELP, librdkafka_config

import os
import sys
import time

PROGRESS_INTERVAL_S = 5.0


def add_parsers(sub) -> None:
    p = sub.add_parser("producer-perf-test", help="produce at a given rate and report throughput and latency")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    p.add_argument("--record-size", type=int, default=100, help="bytes per record (ignored with --payload-monotonic)")
    p.add_argument("--throughput", type=float, default=-1, help="records/s, fractional allowed (e.g. 0.5); -1: as fast as possible")
    p.add_argument("--payload-monotonic", action="store_true", help="payloads are 0, 1, 2, ... as text")
    p.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=run_producer)

    c = sub.add_parser("share-consumer-perf-test", help="consume from a share group and report throughput")
    c.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    c.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", default="perf-share-consumer")
    c.add_argument("--messages", type=int, required=True, help="stop after this many records")
    c.add_argument("--timeout-ms", type=int, default=30000, help="give up after this long without a record")
    c.set_defaults(func=run_share_consumer)


def _report(label: str, count: int, size_bytes: int, elapsed_s: float, latencies_ms: list[float]) -> None:
    rate = count / elapsed_s if elapsed_s > 0 else 0.0
    line = f"{count} records {label}, {rate:.1f} records/sec ({size_bytes / elapsed_s / 1e6 if elapsed_s else 0:.2f} MB/sec)"
    if latencies_ms:
        ordered = sorted(latencies_ms)
        pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
        line += (f", {sum(ordered) / len(ordered):.1f} ms avg latency, {ordered[-1]:.1f} ms max latency, "
                 f"{pick(0.5):.0f} ms 50th, {pick(0.95):.0f} ms 95th, {pick(0.99):.0f} ms 99th")
    print(line, flush=True)


def run_producer(args) -> int:
    from confluent_kafka import Producer
    props = {"bootstrap.servers": args.bootstrap_server, **librdkafka_config(),
             **dict(kv.split("=", 1) for kv in args.producer_props)}
    producer = Producer(props)
    random_payload = os.urandom(args.record_size)
    latencies, sent_bytes, acked, errors = [], 0, [0], []
    start = last_report = time.monotonic()

    def on_delivery(err, msg, sent_at):
        if err:
            errors.append(err)
        else:
            acked[0] += 1
            latencies.append((time.monotonic() - sent_at) * 1000)

    for i in range(args.num_records):
        if args.throughput > 0:  # pace: record i goes out at start + i / throughput (poll returns early
            due = start + i / args.throughput  # when it serves a delivery report: wait again until due)
            while (delay := due - time.monotonic()) > 0:
                producer.poll(delay)
        payload = str(i).encode() if args.payload_monotonic else random_payload
        sent_at = time.monotonic()
        while True:
            try:
                producer.produce(args.topic, value=payload,
                                 on_delivery=lambda e, m, t=sent_at: on_delivery(e, m, t))
                break
            except BufferError:
                producer.poll(0.05)
        sent_bytes += len(payload)
        producer.poll(0)
        if time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
            _report("sent", acked[0], sent_bytes, time.monotonic() - start, latencies[-10000:])
            last_report = time.monotonic()
    producer.flush(120)
    _report("sent", acked[0], sent_bytes, time.monotonic() - start, latencies)
    if errors:
        print(f"{len(errors)} records failed, first error: {errors[0]}", flush=True)
        return 1
    return 0


def run_share_consumer(args) -> int:
    from confluent_kafka import ShareConsumer
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap_server, "group.id": args.group,
                              "share.acknowledgement.mode": "implicit", **librdkafka_config()})
    consumer.subscribe([args.topic])
    count = size_bytes = 0
    first = None
    last_record = last_report = time.monotonic()
    try:
        while count < args.messages and (time.monotonic() - last_record) * 1000 < args.timeout_ms:
            for m in consumer.poll(0.5):
                if m.error() is None:
                    first = first or time.monotonic()
                    count += 1
                    size_bytes += len(m.value() or b"")
                    last_record = time.monotonic()
            if first and time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                _report("consumed", count, size_bytes, time.monotonic() - first, [])
                last_report = time.monotonic()
        consumer.commit_sync()
    finally:
        consumer.close()
    _report("consumed", count, size_bytes, (time.monotonic() - first) if first else 0.0, [])
    if count < args.messages:
        print(f"timed out: no record for {args.timeout_ms} ms (--timeout-ms) after {count} of {args.messages} "
              f"records (--messages)", file=sys.stderr, flush=True)
        return 1
    return 0
