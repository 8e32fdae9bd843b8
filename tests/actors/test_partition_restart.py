"""A partition replica that dies is restarted by Ray, recovers its log and serves clients again."""
import time

import ray
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                  ResourceType)

from actors import names
from tests.actors.restarts import (host_of, inspect_replica, kill_and_await_death, kill_and_await_restart,
                                  leader_replica)
from tests.cluster.raw import produce_one


def produce(bootstrap, topic, values):
    # idempotent: a retry after the kill must not append twice (dedup survives the actor restart)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000,
                  "enable.idempotence": True})
    acked = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda e, m: acked.append(m.offset()) if e is None else None)
    assert p.flush(90) == 0
    return acked


def read(bootstrap, topic, count):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(100, timeout=1.0) if m.error() is None]
    c.close()
    return got


def test_killed_partition_replica_comes_back_with_its_data(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("phoenix", 1, 1)])["phoenix"].result(30)
    assert produce(broker.bootstrap, "phoenix", [b"a%d" % i for i in range(100)]) == list(range(100))

    kill_and_await_restart(host_of(leader_replica(broker.controller, "phoenix")))

    # the gateway learns the restarted leader's new listener from the controller and carries on
    assert produce(broker.bootstrap, "phoenix", [b"b%d" % i for i in range(100)]) == list(range(100, 200))
    assert read(broker.bootstrap, "phoenix", 200) == [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(100)]


def test_a_config_altered_before_its_shard_restarts_is_in_force_after_the_restart(broker):
    """AlterConfigs reaches the running replicas; a shard that Ray restarts hosts its replicas again,
    and they must come back with the topic's configs as they are now, not as they were when the
    topic was created (the cause of issue 38: a DLQ topic's raised max.message.bytes was lost with a
    restart, and its rejected records never reached it)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("altered", 1, 1, config={"max.message.bytes": "64"})])["altered"].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, "altered", incremental_configs=[
            ConfigEntry("max.message.bytes", "1048588", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    assert produce(broker.bootstrap, "altered", [b"x" * 1024]) == [0]

    kill_and_await_restart(host_of(leader_replica(broker.controller, "altered")))

    assert produce(broker.bootstrap, "altered", [b"y" * 1024]) == [1], "the restarted replica refused a 1 KiB batch"
    assert inspect_replica(leader_replica(broker.controller, "altered"),
                           lambda replica: replica.core.config.max_message_bytes) == 1048588


def test_killed_gateway_serves_again_on_its_port(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("before-gateway-kill", 1, 1)])["before-gateway-kill"].result(30)
    kill_and_await_restart(ray.get_actor(names.gateway_name(0), namespace=names.NAMESPACE))
    deadline, topics = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        try:
            topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).topics
            break
        except Exception:
            time.sleep(1)
    assert "before-gateway-kill" in topics


def test_restarted_controller_adopts_running_actors(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("survives-controller", 1, 1)])["survives-controller"].result(30)
    assert produce(broker.bootstrap, "survives-controller", [b"x%d" % i for i in range(10)]) == list(range(10))
    kill_and_await_restart(broker.controller)
    deadline, image, topic_id = time.monotonic() + 60, None, None
    while time.monotonic() < deadline:  # the restarted controller re-registers listeners one by one
        try:
            image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0), timeout=5)
            topic_id = image.topics["survives-controller"].topic_id
            if (topic_id, 0) in image.partition_listeners:
                break
        except Exception:
            pass
        time.sleep(0.5)
    assert (topic_id, 0) in image.partition_replicas and (topic_id, 0) in image.partition_listeners
    # clients keep producing to the same partition leader, and new topics can still be created
    assert produce(broker.bootstrap, "survives-controller", [b"y%d" % i for i in range(10)]) == list(range(10, 20))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("after-controller", 1, 1)])["after-controller"].result(30)
    assert produce(broker.bootstrap, "after-controller", [b"z"]) == [0]


def test_a_killed_shard_takes_only_its_own_replicas_down(broker):
    """Replicas hosted by the broker's other shard serve on while one shard dies and comes back
    with its replicas, each recovered from its own log."""
    topic = "two-shards"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 8, 1)])[topic].result(30)
    image = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    replicas = {p: image.partition_replicas[(image.topics[topic].topic_id, p)] for p in range(8)}
    victim = host_of(replicas[0])
    survivors = [p for p, r in replicas.items() if host_of(r)._actor_id != victim._actor_id]
    doomed = [p for p in replicas if p not in survivors]
    assert survivors, "with two shards, some of 8 partitions live on the other one"
    for p in range(8):
        assert produce_one(broker.bootstrap, topic, p) == 0

    # (not just ray.kill, which returns before the process dies: the loop below would be answered
    # by the old process, and the consumer after it would meet the partitions leaderless while the
    # kill lands; librdkafka keeps a partition it was told has no leader as unknown to
    # get_watermark_offsets until its next metadata refresh, minutes later)
    kill_and_await_death(victim)
    for p in survivors:  # answered at once by the shard that lives on
        assert produce_one(broker.bootstrap, topic, p, timeout_s=5) == 0
    deadline = time.monotonic() + 60
    for p in doomed:  # back once Ray restarted the shard and it hosts them again
        while not produced(broker.bootstrap, topic, p):
            assert time.monotonic() < deadline, f"partition {p} did not come back with its shard"
            time.sleep(0.5)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "two-shards", "enable.auto.commit": False})
    try:
        ends = [end_offset(c, topic, p, time.monotonic() + 30) for p in range(8)]
    finally:
        c.close()
    assert all(end >= 2 for end in ends), f"every partition kept its first record and took a second: {ends}"


def produced(bootstrap, topic, partition) -> bool:
    """One record appended; False on a refusal, or a connection the gateway closed because the
    partition's shard died under the request (its outcome unknown)."""
    try:
        return produce_one(bootstrap, topic, partition, timeout_s=10) == 0
    except OSError:
        return False


# what a client may hear while a shard's partitions come back: its leader not yet named again, or
# the partition not yet hosted by the restarted shard
RESTARTING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._UNKNOWN_PARTITION,
              KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE)


def end_offset(consumer, topic, partition, deadline) -> int:
    """The partition's end offset, asked again after a retriable error (as a client would: the
    metadata may still name the restarted shard's old listener for a moment)."""
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1]
        except KafkaException as e:
            if e.args[0].code() not in RESTARTING or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
