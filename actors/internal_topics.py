"""Kafka's internal topics and which of their partitions owns a key.

`__consumer_offsets` shards the group coordinators, `__share_group_state` the share coordinators
and `__transaction_state` the transaction coordinators: a coordinator is the actor that follows the leadership of one partition. Keys map to
partitions as Kafka maps them (the Java String hash of the key, made non-negative, modulo the
partition count), so operators can reason about placement the same way.
"""
from __future__ import annotations

CONSUMER_OFFSETS = "__consumer_offsets"
SHARE_GROUP_STATE = "__share_group_state"
TRANSACTION_STATE = "__transaction_state"
# created when the brokers are deployed; __transaction_state is created on first use (a transactional
# id's FindCoordinator or InitProducerId), as Kafka creates it: most clusters never see a transaction
NAMES = (CONSUMER_OFFSETS, SHARE_GROUP_STATE)

PARTITION_COUNT_CONFIG = {CONSUMER_OFFSETS: "offsets.topic.num.partitions",
                          SHARE_GROUP_STATE: "share.coordinator.state.topic.num.partitions",
                          TRANSACTION_STATE: "transaction.state.log.num.partitions"}
REPLICATION_FACTOR_CONFIG = {CONSUMER_OFFSETS: "offsets.topic.replication.factor",
                             SHARE_GROUP_STATE: "share.coordinator.state.topic.replication.factor",
                             TRANSACTION_STATE: "transaction.state.log.replication.factor"}
# the topic's min.insync.replicas, capped by its replication factor (Kafka's transaction.state.log.min.isr and
# share.coordinator.state.topic.min.isr: the coordinator's records, appended with acks=all, survive a broker's
# loss; a share acknowledgement is confirmed only once two replicas hold it)
MIN_INSYNC_REPLICAS_CONFIG = {TRANSACTION_STATE: "transaction.state.log.min.isr",
                              SHARE_GROUP_STATE: "share.coordinator.state.topic.min.isr"}
# the broker configs of the internal topics' segment.bytes (Kafka's names; 100 MiB by default)
SEGMENT_BYTES_CONFIG = {CONSUMER_OFFSETS: "offsets.topic.segment.bytes",
                        SHARE_GROUP_STATE: "share.coordinator.state.topic.segment.bytes",
                        TRANSACTION_STATE: "transaction.state.log.segment.bytes"}
# Kafka's configs for its internal topics, never deleted by time or size. __transaction_state is
# compacted by the log cleaner (the latest record per transactional id stays; an expired id's
# tombstone goes after delete.retention.ms), as Kafka's is. The group coordinator keeps
# __consumer_offsets short itself (it rewrites its live records and deletes the rest, the result
# Kafka's cleaner gives), and the share coordinator prunes __share_group_state behind its
# snapshots (Kafka's cleanup.policy=delete for that topic).
TOPIC_CONFIGS = {CONSUMER_OFFSETS: {"retention.ms": -1},
                 SHARE_GROUP_STATE: {"retention.ms": -1},
                 TRANSACTION_STATE: {"cleanup.policy": "compact", "retention.ms": -1}}


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


def transaction_partition(transactional_id: str, partition_count: int) -> int:
    """The `__transaction_state` partition of a transactional id (Kafka's partitionFor)."""
    return partition_for(transactional_id, partition_count)


def topic_configs(name: str, broker_config, replication_factor: int) -> dict:
    """The configs an internal topic is created with (its min.insync.replicas capped by its replication)."""
    configs = dict(TOPIC_CONFIGS[name])
    configs["segment.bytes"] = int(broker_config.get(SEGMENT_BYTES_CONFIG[name], 104857600))
    if name in MIN_INSYNC_REPLICAS_CONFIG:
        configs["min.insync.replicas"] = max(1, min(int(broker_config[MIN_INSYNC_REPLICAS_CONFIG[name]]),
                                                    replication_factor))
    return configs
