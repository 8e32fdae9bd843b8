"""The `__consumer_offsets` record of streams groups (KIP-1071) that Kray writes, encoded by hand.

Kafka's framing (as in records.py and consumer_records.py): key = int16 record type + the key struct at version 0;
value = int16 value version + the value struct; a tombstone is a null value.

- StreamsGroupMetadataKey (type 17): the group id as a classic string (int16 length + UTF-8);
- StreamsGroupMetadataValue v0 (flexible): epoch int32, metadata hash int64, an empty compact array of assignment
  configs (one 0x01 byte), then an empty tagged-fields section (one 0 byte). Kafka 4.4's value has more (the
  validated topology epoch, tagged; the last assignment configs); Kray writes what it replays and reads its own.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.errors import MalformedMessage

Record = tuple[bytes, bytes | None]

RECORD_TYPE_STREAMS_GROUP_METADATA = 17

_KEY_HEAD = struct.Struct(">hh")     # record type, group id length
_VALUE = struct.Struct(">hiq")       # value version, epoch, metadata hash
_EMPTY_COMPACT_ARRAY = b"\x01"
_EMPTY_TAGGED_FIELDS = b"\x00"


class StreamsGroupMetadata(NamedTuple):
    group_id: str
    epoch: int | None          # None: a tombstone (the group was deleted)
    metadata_hash: int = 0


def streams_group_metadata_key(group_id: str) -> bytes:
    encoded = group_id.encode()
    if len(encoded) > 0x7FFF:
        raise ValueError("group id longer than 32767 bytes")
    return _KEY_HEAD.pack(RECORD_TYPE_STREAMS_GROUP_METADATA, len(encoded)) + encoded


def streams_group_metadata(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return (streams_group_metadata_key(group_id),
            _VALUE.pack(0, epoch, metadata_hash) + _EMPTY_COMPACT_ARRAY + _EMPTY_TAGGED_FIELDS)


def streams_group_metadata_tombstone(group_id: str) -> Record:
    return streams_group_metadata_key(group_id), None


def decode_streams_group_metadata(key_bytes: bytes, value_bytes: bytes | None) -> StreamsGroupMetadata:
    if key_bytes is None or len(key_bytes) < _KEY_HEAD.size:
        raise MalformedMessage("StreamsGroupMetadataKey shorter than its type and group id length")
    record_type, length = _KEY_HEAD.unpack_from(key_bytes)
    if record_type != RECORD_TYPE_STREAMS_GROUP_METADATA:
        raise MalformedMessage(f"record type {record_type} is not StreamsGroupMetadata")
    if length < 0 or len(key_bytes) < _KEY_HEAD.size + length:
        raise MalformedMessage("StreamsGroupMetadataKey group id truncated")
    group_id = bytes(key_bytes[_KEY_HEAD.size:_KEY_HEAD.size + length]).decode()
    if value_bytes is None:
        return StreamsGroupMetadata(group_id, None)
    if len(value_bytes) < _VALUE.size:
        raise MalformedMessage("StreamsGroupMetadataValue shorter than its version, epoch and metadata hash")
    _version, epoch, metadata_hash = _VALUE.unpack_from(value_bytes)
    return StreamsGroupMetadata(group_id, epoch, metadata_hash)
