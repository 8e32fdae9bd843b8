"""A partition leader's metadata image carries its own actor handle only: every handle in an image
is deserialized and reference-counted by each receiver, so sending all of them to every partition
leader on every change grew as partitions squared. Gateways still get every handle."""
import ray
from confluent_kafka.admin import AdminClient, NewTopic


def test_partition_leaders_get_slim_images_and_gateways_full_ones(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("imaged", 3, 1)])["imaged"].result(30)
    full = ray.get(broker.controller.wait_for_metadata.remote(-1, 0))
    topic_id = full.topics["imaged"].topic_id
    assert {(topic_id, i) for i in range(3)} <= set(full.partition_actors)

    slim = ray.get(broker.controller.wait_for_metadata.remote(-1, 0, (topic_id, 1)))
    assert set(slim.partition_actors) == {(topic_id, 1)}
    assert slim.topics.keys() == full.topics.keys() and slim.endpoints == full.endpoints, \
        "everything else a partition's listener answers Metadata from is there"
    assert slim.coordinators.keys() == full.coordinators.keys()
