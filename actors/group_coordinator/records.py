"""The group coordinator's `__consumer_offsets` records, serialized as Kafka serializes them.

Kafka's framing (`MessageUtil.toCoordinatorTypePrefixedBytes` / `toVersionPrefixedBytes`):

- key   = int16 record type (the key schema's apiKey) + the key struct at version 0 (keys are never flexible;
          there is no separate key-version field: the old key schemas used the record type as their version);
- value = int16 value version + the value struct at that version; a tombstone is a null value.

Kray persists only two share-group record kinds (see core.py): `ShareGroupMetadata` (the group exists, its epoch)
and `ShareGroupStatePartitionMetadata` (which share-partitions are initializing / initialized / deleting).
"""
from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from protocol import primitives
from protocol.coordinator_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
)
from protocol.errors import MalformedMessage

Record = tuple[bytes, bytes | None]  # (key bytes, value bytes or None for a tombstone)

# The group epoch a new KIP-848 consumer group, share group or streams group starts at, as Kafka 4.4's ModernGroup
# and StreamsGroup constructors set it (its target assignment metadata starts at epoch 1 too): the first member's
# join bumps it to 2, the first epoch a member gets and the first a metadata record carries.
INITIAL_GROUP_EPOCH = 1

_INT16 = struct.Struct(">h")

# Record types (the schemas' apiKey) of the __consumer_offsets records this module knows.
OFFSET_COMMIT_TYPES = (0, 1)
CLASSIC_GROUP_METADATA = 2          # GroupMetadataKey: a classic group
CONSUMER_GROUP_METADATA = 3         # ConsumerGroupMetadataKey: a KIP-848 consumer group
SHARE_GROUP_MEMBER_METADATA = ShareGroupMemberMetadataKey.API_KEY                    # 10, not written by Kray
SHARE_GROUP_METADATA = ShareGroupMetadataKey.API_KEY                                  # 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = ShareGroupTargetAssignmentMetadataKey.API_KEY  # 12, not written by Kray
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = ShareGroupTargetAssignmentMemberKey.API_KEY      # 13, not written by Kray
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = ShareGroupCurrentMemberAssignmentKey.API_KEY    # 14, not written by Kray
SHARE_GROUP_STATE_PARTITION_METADATA = ShareGroupStatePartitionMetadataKey.API_KEY      # 15

_KEY_CLASSES = {
    SHARE_GROUP_METADATA: ShareGroupMetadataKey,
    SHARE_GROUP_STATE_PARTITION_METADATA: ShareGroupStatePartitionMetadataKey,
}
_VALUE_CLASSES = {
    SHARE_GROUP_METADATA: ShareGroupMetadataValue,
    SHARE_GROUP_STATE_PARTITION_METADATA: ShareGroupStatePartitionMetadataValue,
}


_read_key_string = primitives.string_reader(compact=False, nullable=False)


class DecodedRecord(NamedTuple):
    record_type: int
    key: object | None      # a key message, or for types 2 and 3 the group id (str); None for other types
    value: object | None    # a value message; None for a tombstone or a type this module does not decode


def encode(key, value, value_version: int = 0) -> Record:
    key_bytes = _INT16.pack(key.API_KEY) + key.encode(0)
    if value is None:
        return key_bytes, None
    return key_bytes, _INT16.pack(value_version) + value.encode(value_version)


def decode(key_bytes, value_bytes) -> DecodedRecord:
    """Decode one `__consumer_offsets` record. Share-group records 11 and 15 decode fully; for classic (2) and
    consumer (3) group metadata only the group id is read (their keys are a single string); other types come back
    with key and value None so that replay can skip them."""
    if key_bytes is None or len(key_bytes) < 2:
        raise MalformedMessage("coordinator record key shorter than its 2-byte type")
    record_type = _INT16.unpack_from(key_bytes)[0]
    if record_type in (CLASSIC_GROUP_METADATA, CONSUMER_GROUP_METADATA):
        group_id, _ = _read_key_string(memoryview(key_bytes), 2)
        return DecodedRecord(record_type, group_id, None if value_bytes is None else b"")
    key_cls = _KEY_CLASSES.get(record_type)
    if key_cls is None:
        return DecodedRecord(record_type, None, None)
    key = key_cls.decode(memoryview(key_bytes)[2:], 0)
    if value_bytes is None:
        return DecodedRecord(record_type, key, None)
    if len(value_bytes) < 2:
        raise MalformedMessage("coordinator record value shorter than its 2-byte version")
    version = _INT16.unpack_from(value_bytes)[0]
    return DecodedRecord(record_type, key, _VALUE_CLASSES[record_type].decode(memoryview(value_bytes)[2:], version))


# ---- the records Kray writes ---------------------------------------------------------------------------------------

def share_group_metadata(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return encode(ShareGroupMetadataKey(group_id=group_id),
                  ShareGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))


def share_group_metadata_tombstone(group_id: str) -> Record:
    return encode(ShareGroupMetadataKey(group_id=group_id), None)


def state_partition_metadata(group_id: str,
                             initializing: Mapping[uuid.UUID, Iterable[int]],
                             initialized: Mapping[uuid.UUID, Iterable[int]],
                             deleting: Iterable[uuid.UUID],
                             topic_names: Mapping[uuid.UUID, str]) -> Record:
    V = ShareGroupStatePartitionMetadataValue

    def infos(by_topic):
        return [V.TopicPartitionsInfo(topic_id=t, topic_name=topic_names.get(t, ""), partitions=sorted(ps))
                for t, ps in sorted(by_topic.items(), key=lambda kv: (topic_names.get(kv[0], ""), kv[0].bytes))]

    value = V(initializing_topics=infos(initializing), initialized_topics=infos(initialized),
              deleting_topics=[V.TopicInfo(topic_id=t, topic_name=topic_names.get(t, ""))
                               for t in sorted(deleting, key=lambda t: (topic_names.get(t, ""), t.bytes))])
    return encode(ShareGroupStatePartitionMetadataKey(group_id=group_id), value)


def state_partition_metadata_tombstone(group_id: str) -> Record:
    return encode(ShareGroupStatePartitionMetadataKey(group_id=group_id), None)
