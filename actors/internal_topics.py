"""Kafka's internal topics and which of their partitions owns a key.

`__consumer_offsets` shards the group coordinators and `__share_group_state` the share
coordinators: a coordinator is the actor that follows the leadership of one partition. Keys map to
partitions as Kafka maps them (the Java String hash of the key, made non-negative, modulo the
partition count), so operators can reason about placement the same way.
"""
from __future__ import annotations

CONSUMER_OFFSETS = "__consumer_offsets"
SHARE_GROUP_STATE = "__share_group_state"
NAMES = (CONSUMER_OFFSETS, SHARE_GROUP_STATE)

PARTITION_COUNT_CONFIG = {CONSUMER_OFFSETS: "offsets.topic.num.partitions",
                          SHARE_GROUP_STATE: "share.coordinator.state.topic.num.partitions"}
REPLICATION_FACTOR_CONFIG = {CONSUMER_OFFSETS: "offsets.topic.replication.factor",
                             SHARE_GROUP_STATE: "share.coordinator.state.topic.replication.factor"}
# Kafka's configs for its internal topics: small segments, and never deleted by time or size: their
# coordinators keep them short themselves (the group coordinator rewrites its live records and deletes
# the rest, as Kafka's log cleaner compacts __consumer_offsets; the share coordinator prunes behind its
# snapshots)
TOPIC_CONFIGS = {CONSUMER_OFFSETS: {"segment.bytes": 104857600, "retention.ms": -1},
                 SHARE_GROUP_STATE: {"segment.bytes": 104857600, "retention.ms": -1}}


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, int32 wrap-around)."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partition_count: int) -> int:
    """Kafka's Utils.abs(key.hashCode()) % partitionCount (Utils.abs maps MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partition_count


def group_partition(group_id: str, partition_count: int) -> int:
    return partition_for(group_id, partition_count)
