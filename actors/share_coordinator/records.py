"""Serde of the `__share_group_state` records, laid out as Kafka's coordinator record serde does.

    record key   = int16 record type (the key schema's apiKey: ShareSnapshot 0, ShareUpdate 1)
                   + key message encoded at version 0
    record value = int16 value version + value message, or None for a tombstone

(Kafka: ``CoordinatorRecordSerde.serializeKey`` -> ``MessageUtil.toCoordinatorTypePrefixedBytes``,
which writes the apiKey and then the key at version 0; there is no separate key version.)
"""

from __future__ import annotations

import struct

from protocol.coordinator_records import ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue
from protocol.errors import MalformedMessage

__all__ = [
    "SHARE_SNAPSHOT_RECORD_TYPE", "SHARE_UPDATE_RECORD_TYPE", "VALUE_VERSION",
    "UnknownRecordType", "encode_record", "decode_record",
]

SHARE_SNAPSHOT_RECORD_TYPE = ShareSnapshotKey.API_KEY   # 0
SHARE_UPDATE_RECORD_TYPE = ShareUpdateKey.API_KEY       # 1
VALUE_VERSION = 0                                       # the only value version of both records

_KEY_CLASSES = {SHARE_SNAPSHOT_RECORD_TYPE: ShareSnapshotKey, SHARE_UPDATE_RECORD_TYPE: ShareUpdateKey}
_VALUE_CLASSES = {SHARE_SNAPSHOT_RECORD_TYPE: ShareSnapshotValue, SHARE_UPDATE_RECORD_TYPE: ShareUpdateValue}
_INT16 = struct.Struct(">h")


class UnknownRecordType(MalformedMessage):
    """A key whose record type is not a share-state record (Kafka: UnknownRecordTypeException)."""

    def __init__(self, record_type: int):
        super().__init__(f"unknown __share_group_state record type {record_type}")
        self.record_type = record_type


def encode_record(key, value=None) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone), ready to append to `__share_group_state`."""
    if type(key) not in (ShareSnapshotKey, ShareUpdateKey):
        raise TypeError(f"not a share-state record key: {type(key).__name__}")
    key_bytes = _INT16.pack(key.API_KEY) + key.encode(0)
    if value is None:
        return key_bytes, None
    if type(value) is not _VALUE_CLASSES[key.API_KEY]:
        raise TypeError(f"{type(value).__name__} is not the value of a {type(key).__name__}")
    return key_bytes, _INT16.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def decode_record(key_bytes, value_bytes=None) -> tuple:
    """(key message, value message or None). Raises MalformedMessage (UnknownRecordType for a foreign type)."""
    key_view = memoryview(key_bytes)
    if len(key_view) < 2:
        raise MalformedMessage("share-state record key shorter than its record type")
    (record_type,) = _INT16.unpack_from(key_view, 0)
    key_class = _KEY_CLASSES.get(record_type)
    if key_class is None:
        raise UnknownRecordType(record_type)
    key, _ = key_class.decode_from(key_view, 2, 0)
    if value_bytes is None:
        return key, None
    value_view = memoryview(value_bytes)
    if len(value_view) < 2:
        raise MalformedMessage("share-state record value shorter than its version")
    (version,) = _INT16.unpack_from(value_view, 0)
    value_class = _VALUE_CLASSES[record_type]
    if not value_class.MIN_VERSION <= version <= value_class.MAX_VERSION:
        raise MalformedMessage(f"{value_class.__name__} version {version} is not supported")
    value, _ = value_class.decode_from(value_view, 2, version)
    return key, value
