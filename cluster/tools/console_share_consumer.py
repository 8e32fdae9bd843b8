"""`kray console-share-consumer`, after kafka-console-share-consumer.sh: print records of a share
group, acknowledging each (ACCEPT by default, or --release / --reject)."""
from __future__ import annotations

from cluster.admin import COMMAND_CONFIG_HELP, librdkafka_config

import sys
import time


def add_parser(sub) -> None:
    p = sub.add_parser("console-share-consumer", help="print records from a share group (like kafka-console-share-consumer.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="console-share-consumer")
    ack = p.add_mutually_exclusive_group()
    ack.add_argument("--release", action="store_true", help="acknowledge with RELEASE (records come back)")
    ack.add_argument("--reject", action="store_true", help="acknowledge with REJECT (records are archived)")
    p.add_argument("--max-messages", type=int, default=0, help="stop after this many records (0: no limit)")
    p.add_argument("--timeout-ms", type=int, default=0, help="stop after this long without a record (0: never)")
    p.add_argument("--property", action="append", default=[], metavar="print.key=true|print.delivery.count=true")
    p.set_defaults(func=run)


def run(args) -> int:
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
    props = dict(p.split("=", 1) for p in args.property if "=" in p)
    ack_type = AcknowledgeType.RELEASE if args.release else AcknowledgeType.REJECT if args.reject else AcknowledgeType.ACCEPT
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap_server, "group.id": args.group,
                              "share.acknowledgement.mode": "explicit", "client.id": "kray-console-share-consumer",
                              **librdkafka_config()})
    consumer.subscribe([args.topic])
    printed, last_record = 0, time.monotonic()
    try:
        while not args.max_messages or printed < args.max_messages:
            if args.timeout_ms and (time.monotonic() - last_record) * 1000 > args.timeout_ms:
                break
            for m in consumer.poll(0.5):
                if m.error():
                    print(f"kray console-share-consumer: {m.error()}", file=sys.stderr)
                    continue
                if args.max_messages and printed >= args.max_messages:
                    consumer.acknowledge(m, AcknowledgeType.RELEASE)  # not shown: let someone else have it
                    continue
                fields = []
                if props.get("print.key") == "true":
                    fields.append((m.key() or b"null").decode(errors="replace"))
                if props.get("print.delivery.count") == "true":
                    fields.append(str(m.delivery_count()))
                fields.append((m.value() or b"null").decode(errors="replace"))
                print("\t".join(fields), flush=True)
                consumer.acknowledge(m, ack_type)
                printed += 1
                last_record = time.monotonic()
            consumer.commit_sync()
    except KeyboardInterrupt:
        pass
    except KafkaException as e:
        print(f"kray console-share-consumer: {e}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0
