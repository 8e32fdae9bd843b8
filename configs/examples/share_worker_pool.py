"""Example: thumbnail jobs in a share group, handled by a Ray worker pool that scales with the lag.

Against a running broker (`kray start`, or Apache Kafka 4.2+), on an embedded local Ray:

    python configs/examples/share_worker_pool.py --bootstrap 127.0.0.1:9092 --jobs 2000

Each job is a JSON value {"image": str, "width": int}. `handle` takes ~20 ms per job (a stand-in
for real work); a job whose JSON is broken is poison (REJECTed: archived, never retried); a
`TimeoutError` from the "storage" is transient (RELEASEd: delivered again, up to the group's
delivery count limit). The pool starts with one worker, rises towards --max-workers while the
backlog would take longer than --lag-target-s to drain, and drains back to one when it is gone.

The same handler from the command line:

    cd configs/examples && kray share-workers --bootstrap-server 127.0.0.1:9092 --group thumbnails \\
        --topic thumbnail-jobs --handler share_worker_pool:handle --poison ValueError --max-workers 4
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

TOPIC = "thumbnail-jobs"
GROUP = "thumbnails"


def handle(record) -> None:
    """One job: return to ACCEPT; ValueError (poison) to REJECT; anything else to RELEASE."""
    job = json.loads(record.value())  # json.JSONDecodeError is a ValueError: poison
    if random.random() < 0.01:
        raise TimeoutError(f"storage timed out writing {job['image']} (delivery {record.delivery_count()})")
    time.sleep(0.02)  # resize the image


def seed_jobs(bootstrap: str, jobs: int, partitions: int = 4) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                       ResourceType)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if TOPIC not in admin.list_topics(timeout=30).topics:
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(jobs):
        value = b"{not json" if i % 100 == 99 else json.dumps({"image": f"img-{i}.png", "width": 256}).encode()
        producer.produce(TOPIC, key=str(i).encode(), value=value)
    producer.flush(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs to produce first (0: none)")
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--lag-target-s", type=float, default=10.0)
    args = parser.parse_args()

    import ray
    from cluster.workers import ShareWorkerPool

    ray.init(include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers get `handle` by value
    if args.jobs:
        seed_jobs(args.bootstrap, args.jobs)
    with ShareWorkerPool(args.bootstrap, GROUP, [TOPIC], handle, poison=(ValueError,), min_workers=1,
                         max_workers=args.max_workers, num_cpus=0.5, lag_target_s=args.lag_target_s,
                         scale_down_window_s=10.0) as pool:
        while True:
            time.sleep(2)
            s = pool.stats()
            print(f"{s['time_s']:5.0f} s  workers {s['workers']} (+{s['draining']} draining)  lag {s['lag']}  "
                  f"{s['rate']:.0f} records/s  handler {s['handler_time_ms']} ms  accepted {s['accepted']}  "
                  f"rejected {s['rejected']}  released {s['released']}", flush=True)
            if s["lag"] == 0 and s["workers"] == 1 and not s["draining"]:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
