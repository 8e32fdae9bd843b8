"""Serde of the `__share_group_state` records (Kafka's CoordinatorRecordSerde layout)."""

import struct
import uuid

import pytest

from actors.share_coordinator.records import (
    SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE, UnknownRecordType, decode_record, encode_record,
)
from protocol.coordinator_records import ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue
from protocol.errors import MalformedMessage

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def snapshot_value():
    return ShareSnapshotValue(
        snapshot_epoch=3, state_epoch=2, leader_epoch=7, start_offset=100, delivery_complete_count=5,
        create_timestamp=1_700_000_000_000, write_timestamp=1_700_000_000_500,
        state_batches=[ShareSnapshotValue.StateBatch(first_offset=100, last_offset=109, delivery_state=2,
                                                     delivery_count=1),
                       ShareSnapshotValue.StateBatch(first_offset=110, last_offset=110, delivery_state=0,
                                                     delivery_count=3)])


def update_value():
    return ShareUpdateValue(
        snapshot_epoch=3, leader_epoch=7, start_offset=-1, delivery_complete_count=-1,
        state_batches=[ShareUpdateValue.StateBatch(first_offset=5, last_offset=9, delivery_state=4, delivery_count=5)])


@pytest.mark.parametrize("key_class,value_factory,record_type", [
    (ShareSnapshotKey, snapshot_value, SHARE_SNAPSHOT_RECORD_TYPE),
    (ShareUpdateKey, update_value, SHARE_UPDATE_RECORD_TYPE),
])
def test_round_trip_key_and_value(key_class, value_factory, record_type):
    key = key_class(group_id="grp", topic_id=TOPIC_ID, partition=4)
    value = value_factory()
    key_bytes, value_bytes = encode_record(key, value)
    # key = int16 record type + key at version 0 (no key version); value = int16 version + value
    assert key_bytes[:2] == struct.pack(">h", record_type)
    assert key_bytes[2:] == key.encode(0)
    assert value_bytes[:2] == b"\x00\x00"
    assert value_bytes[2:] == value.encode(0)
    assert decode_record(key_bytes, value_bytes) == (key, value)
    assert decode_record(memoryview(key_bytes), bytearray(value_bytes)) == (key, value)


@pytest.mark.parametrize("key_class", [ShareSnapshotKey, ShareUpdateKey])
def test_tombstone_round_trip(key_class):
    key = key_class(group_id="grp", topic_id=TOPIC_ID, partition=0)
    key_bytes, value_bytes = encode_record(key, None)
    assert value_bytes is None
    assert decode_record(key_bytes, None) == (key, None)


def test_golden_snapshot_key_bytes():
    key_bytes, _ = encode_record(ShareSnapshotKey(group_id="g", topic_id=TOPIC_ID, partition=1), None)
    assert key_bytes == b"\x00\x00" + b"\x00\x01g" + TOPIC_ID.bytes + b"\x00\x00\x00\x01"


def test_default_delivery_complete_count_is_tagged_and_omitted():
    value = ShareUpdateValue(snapshot_epoch=0, leader_epoch=0, start_offset=0, state_batches=[])
    assert value.delivery_complete_count == -1
    _, value_bytes = encode_record(ShareUpdateKey(group_id="g", topic_id=TOPIC_ID, partition=0), value)
    assert value_bytes.endswith(b"\x01\x00")          # empty compact array, no tagged fields


def test_mismatched_value_rejected():
    with pytest.raises(TypeError):
        encode_record(ShareSnapshotKey(group_id="g", topic_id=TOPIC_ID, partition=0), update_value())
    with pytest.raises(TypeError):
        encode_record(snapshot_value(), None)


def test_decode_errors():
    key_bytes, value_bytes = encode_record(ShareSnapshotKey(group_id="g", topic_id=TOPIC_ID, partition=0),
                                           snapshot_value())
    with pytest.raises(UnknownRecordType) as exc:
        decode_record(b"\x00\x09" + key_bytes[2:], None)
    assert exc.value.record_type == 9
    with pytest.raises(MalformedMessage):
        decode_record(b"\x00", None)
    with pytest.raises(MalformedMessage):
        decode_record(key_bytes[:-1], None)
    with pytest.raises(MalformedMessage):
        decode_record(key_bytes, value_bytes[:1])
    with pytest.raises(MalformedMessage):
        decode_record(key_bytes, value_bytes[:-3])
    with pytest.raises(MalformedMessage):
        decode_record(key_bytes, b"\x00\x05" + value_bytes[2:])      # unsupported value version
