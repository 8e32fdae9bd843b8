"""A whole multi-node cluster stops and starts again on the same data directories (what a user
does after losing the Ray head, or after `kray start --nodes 3` is stopped): every broker gets
its partitions back and every acknowledged record is there."""
import time

import ray
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.local import LocalCluster


def test_every_partition_comes_back_after_a_full_cluster_restart(tmp_path):
    if ray.is_initialized():
        ray.shutdown()
    with LocalCluster(nodes=3, data_dir=tmp_path) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("kept", 3, 1)])["kept"].result(30)
        assert sorted(cluster.leader("kept", i) for i in range(3)) == [1, 2, 3]
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(3000):
            p.produce("kept", key=b"%d" % i, value=b"v", partition=i % 3)
        assert p.flush(30) == 0

    with LocalCluster(nodes=3, data_dir=tmp_path) as cluster:  # new Ray nodes, the same brokers
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "kept"})
        c.assign([TopicPartition("kept", i, 0) for i in range(3)])
        keys, deadline = set(), time.monotonic() + 60
        while len(keys) < 3000 and time.monotonic() < deadline:
            keys |= {int(m.key()) for m in c.consume(1000, timeout=1.0) if m.error() is None}
        c.close()
        assert keys == set(range(3000)), f"{3000 - len(keys)} records missing: partitions on brokers " \
                                         f"registered after the first did not come back"
