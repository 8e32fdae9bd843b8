"""Which partition of an internal topic holds a group's state, as Kafka maps it: tests that kill a
coordinator kill the one the group really uses (the internal topics have Kafka's 50 partitions)."""
from actors import internal_topics
from actors.share_coordinator import state_partition_for


def group_coordinator_partition(image, group_id: str) -> int:
    """The `__consumer_offsets` partition whose leader coordinates `group_id`."""
    count = len(image.topics[internal_topics.CONSUMER_OFFSETS].partitions)
    return internal_topics.group_partition(group_id, count)


def share_state_partition(image, group_id: str, topic: str, partition: int) -> int:
    """The `__share_group_state` partition that holds the share state of (group, topic-partition)."""
    count = len(image.topics[internal_topics.SHARE_GROUP_STATE].partitions)
    return state_partition_for(group_id, image.topics[topic].topic_id, partition, count)
