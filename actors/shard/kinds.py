"""What a shard hosts for a replica of a topic: the kind registry of hosted objects."""
from __future__ import annotations

from actors import internal_topics


def partition_class(topic: str):
    """What a shard hosts for a replica of `topic`: a plain partition replica for user topics; for
    an internal topic, the coordinator whose state that partition holds (it moves with the
    partition's leadership)."""
    if topic == internal_topics.CONSUMER_OFFSETS:
        from actors.group_coordinator.actor import GroupCoordinator
        return GroupCoordinator
    if topic == internal_topics.SHARE_GROUP_STATE:
        from actors.share_coordinator.actor import ShareCoordinator
        return ShareCoordinator
    if topic == internal_topics.TRANSACTION_STATE:
        from actors.transaction_coordinator.actor import TransactionCoordinator
        return TransactionCoordinator
    from actors.partition.actor import PartitionReplica
    return PartitionReplica
