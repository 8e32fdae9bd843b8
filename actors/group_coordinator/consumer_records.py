"""The `__consumer_offsets` records of KIP-848 consumer groups that Kray writes, encoded by hand.

Kafka's framing (as in records.py): key = int16 record type + the key struct at version 0; value = int16 value
version + the value struct; a tombstone is a null value. The message generator has no ConsumerGroup* record
schemas, so the one record Kray persists is written here with `struct`:

- ConsumerGroupMetadataKey (type 3): the group id as a classic string (int16 length + UTF-8). records.decode of the
  share core reads exactly this to reserve the id;
- ConsumerGroupMetadataValue v0 (flexible): epoch int32, metadata hash int64, then an empty tagged-fields section
  (one 0 byte). The decoder also accepts a value without the hash (epoch + tagged fields), as Kafka 4.0 wrote it.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.errors import MalformedMessage

Record = tuple[bytes, bytes | None]  # (key bytes, value bytes or None for a tombstone)

RECORD_TYPE_CONSUMER_GROUP_METADATA = 3

_KEY_HEAD = struct.Struct(">hh")          # record type, group id length
_VALUE = struct.Struct(">hiq")            # value version, epoch, metadata hash
_VALUE_NO_HASH = struct.Struct(">hi")     # value version, epoch
_EMPTY_TAGGED_FIELDS = b"\x00"


class ConsumerGroupMetadata(NamedTuple):
    group_id: str
    epoch: int | None          # None: a tombstone (the group was deleted)
    metadata_hash: int = 0


def consumer_group_metadata_key(group_id: str) -> bytes:
    encoded = group_id.encode()
    if len(encoded) > 0x7FFF:
        raise ValueError("group id longer than 32767 bytes")
    return _KEY_HEAD.pack(RECORD_TYPE_CONSUMER_GROUP_METADATA, len(encoded)) + encoded


def consumer_group_metadata(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return consumer_group_metadata_key(group_id), _VALUE.pack(0, epoch, metadata_hash) + _EMPTY_TAGGED_FIELDS


def consumer_group_metadata_tombstone(group_id: str) -> Record:
    return consumer_group_metadata_key(group_id), None


def decode_consumer_group_metadata(key_bytes: bytes, value_bytes: bytes | None) -> ConsumerGroupMetadata:
    if key_bytes is None or len(key_bytes) < _KEY_HEAD.size:
        raise MalformedMessage("ConsumerGroupMetadataKey shorter than its type and group id length")
    record_type, length = _KEY_HEAD.unpack_from(key_bytes)
    if record_type != RECORD_TYPE_CONSUMER_GROUP_METADATA:
        raise MalformedMessage(f"record type {record_type} is not ConsumerGroupMetadata")
    if length < 0 or len(key_bytes) < _KEY_HEAD.size + length:
        raise MalformedMessage("ConsumerGroupMetadataKey group id truncated")
    group_id = bytes(key_bytes[_KEY_HEAD.size:_KEY_HEAD.size + length]).decode()
    if value_bytes is None:
        return ConsumerGroupMetadata(group_id, None)
    if len(value_bytes) >= _VALUE.size + 1:
        _version, epoch, metadata_hash = _VALUE.unpack_from(value_bytes)
    elif len(value_bytes) >= _VALUE_NO_HASH.size:
        epoch, metadata_hash = _VALUE_NO_HASH.unpack_from(value_bytes)[1], 0
    else:
        raise MalformedMessage("ConsumerGroupMetadataValue shorter than its version and epoch")
    return ConsumerGroupMetadata(group_id, epoch, metadata_hash)
