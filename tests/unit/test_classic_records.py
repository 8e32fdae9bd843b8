"""`__consumer_offsets` records of committed offsets (type 0/1) and classic groups (type 2), byte for byte as Kafka's
OffsetCommitKey/Value and GroupMetadataKey/Value schemas lay them out; the consumer protocol's embedded formats."""
import struct

import pytest

from actors.group_coordinator import classic_records as crec
from actors.group_coordinator import records as share_records
from protocol.errors import MalformedMessage


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def i64(n):
    return struct.pack(">q", n)


def s(text):
    if text is None:
        return i16(-1)
    data = text.encode()
    return i16(len(data)) + data


def b(data):
    return i32(len(data)) + data


# ---- offset commits --------------------------------------------------------------------------------------------------

def test_offset_commit_layout_is_kafkas_v3():
    key, value = crec.offset_commit("grp", "orders", 7, crec.OffsetCommitValue(42, 5, "meta", 1700))
    assert key == i16(1) + s("grp") + s("orders") + i32(7)
    assert value == i16(3) + i64(42) + i32(5) + s("meta") + i64(1700)
    assert crec.record_type(key) == 1


def test_offset_commit_round_trip_and_tombstone():
    v = crec.OffsetCommitValue(10**12, -1, "ünïcode", 123)
    key, value = crec.offset_commit("g", "t", 0, v)
    assert crec.decode_offset_commit(key, value) == (("g", "t", 0), v)
    key, value = crec.offset_commit("g", "t", 3, None)
    assert value is None
    assert crec.decode_offset_commit(key, None) == (("g", "t", 3), None)


@pytest.mark.parametrize("version, value, expected", [
    (0, i64(9) + s("m") + i64(100), crec.OffsetCommitValue(9, -1, "m", 100)),
    (1, i64(9) + s("m") + i64(100) + i64(999), crec.OffsetCommitValue(9, -1, "m", 100)),  # + expire timestamp
    (2, i64(9) + s("m") + i64(100), crec.OffsetCommitValue(9, -1, "m", 100)),
    (3, i64(9) + i32(4) + s("m") + i64(100), crec.OffsetCommitValue(9, 4, "m", 100)),
])
def test_older_offset_commit_value_versions_are_read(version, value, expected):
    key = i16(0) + s("g") + s("t") + i32(1)        # type 0: the version-0 key
    assert crec.decode_offset_commit(key, i16(version) + value) == (("g", "t", 1), expected)


@pytest.mark.parametrize("key, value", [
    (i16(1) + s("g"), None),                                            # key cut short
    (i16(1) + s("g") + s("t") + i32(1), i16(3) + i64(1)),             # value cut short
])
def test_truncated_offset_commits_are_malformed(key, value):
    with pytest.raises(MalformedMessage):
        crec.decode_offset_commit(key, value)


def test_record_type_needs_two_bytes():
    with pytest.raises(MalformedMessage):
        crec.record_type(b"\x00")
    with pytest.raises(MalformedMessage):
        crec.record_type(None)


# ---- classic group metadata ------------------------------------------------------------------------------------------

MEMBERS = [
    crec.GroupMember("m1", "inst-1", "client-a", "/10.0.0.1", 30000, 10000, b"sub-1", b"asg-1"),
    crec.GroupMember("m2", None, "client-b", "/10.0.0.2", 20000, 6000, b"", b""),
]


def test_group_metadata_layout_is_kafkas_v3():
    value = crec.GroupMetadataValue("consumer", 4, "range", "m1", 1234, MEMBERS[:1])
    key, data = crec.group_metadata("grp", value)
    assert key == i16(2) + s("grp")
    assert data == (i16(3) + s("consumer") + i32(4) + s("range") + s("m1") + i64(1234) + i32(1)
                    + s("m1") + s("inst-1") + s("client-a") + s("/10.0.0.1") + i32(30000) + i32(10000)
                    + b(b"sub-1") + b(b"asg-1"))


def test_group_metadata_round_trip():
    value = crec.GroupMetadataValue("consumer", 4, "range", "m1", 1234, MEMBERS)
    key, data = crec.group_metadata("grp", value)
    assert crec.decode_group_metadata(key, data) == ("grp", value)


def test_empty_group_metadata_has_null_protocol_and_leader():
    value = crec.GroupMetadataValue("consumer", 7, None, None, 99, [])
    key, data = crec.group_metadata("grp", value)
    assert data == i16(3) + s("consumer") + i32(7) + s(None) + s(None) + i64(99) + i32(0)
    assert crec.decode_group_metadata(key, data) == ("grp", value)


def test_group_metadata_tombstone():
    key, data = crec.group_metadata("grp", None)
    assert data is None
    assert crec.decode_group_metadata(key, None) == ("grp", None)


def test_share_record_decoder_sees_the_group_id_of_a_classic_group():
    key, data = crec.group_metadata("grp", crec.GroupMetadataValue("consumer", 1, None, None, 0, []))
    decoded = share_records.decode(key, data)
    assert (decoded.record_type, decoded.key) == (share_records.CLASSIC_GROUP_METADATA, "grp")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_older_group_metadata_versions_are_read(version):
    member = s("m1") + s("client") + s("/h")
    if version >= 1:
        member += i32(30000)                                # rebalance timeout
    member += i32(10000) + b(b"sub") + b(b"asg")
    data = i16(version) + s("consumer") + i32(3) + s("range") + s("m1")
    if version >= 2:
        data += i64(555)                                    # state timestamp
    data += i32(1) + member
    _, value = crec.decode_group_metadata(i16(2) + s("g"), data)
    assert (value.generation, value.protocol, value.leader) == (3, "range", "m1")
    assert value.state_timestamp_ms == (555 if version >= 2 else -1)
    [m] = value.members
    assert (m.member_id, m.instance_id, m.client_id, m.client_host) == ("m1", None, "client", "/h")
    assert m.rebalance_timeout_ms == (30000 if version >= 1 else 10000), "v0: the session timeout serves"
    assert (m.session_timeout_ms, m.subscription, m.assignment) == (10000, b"sub", b"asg")


def test_group_metadata_of_a_newer_version_is_rejected():
    with pytest.raises(MalformedMessage):
        crec.decode_group_metadata(i16(2) + s("g"), i16(4) + s("consumer"))


def test_truncated_group_metadata_is_malformed():
    key, data = crec.group_metadata("grp", crec.GroupMetadataValue("consumer", 4, "range", "m1", 1, MEMBERS))
    with pytest.raises(MalformedMessage):
        crec.decode_group_metadata(key, data[:-3])


# ---- the consumer protocol's embedded formats ------------------------------------------------------------------------

def subscription(*topics, version=1):
    return i16(version) + i32(len(topics)) + b"".join(s(t) for t in topics) + i32(-1)


def test_subscribed_topics_of_a_consumer_subscription():
    assert crec.subscribed_topics(subscription("orders", "payments")) == ["orders", "payments"]
    assert crec.subscribed_topics(subscription()) == []


@pytest.mark.parametrize("data", [b"", b"\x00", i16(0) + i32(2) + s("only-one"), b"\xff" * 3])
def test_unreadable_subscriptions_give_no_topics(data):
    assert crec.subscribed_topics(data) == []


def test_assigned_partitions_of_a_consumer_assignment():
    data = i16(0) + i32(2) + s("orders") + i32(2) + i32(0) + i32(3) + s("payments") + i32(0) + i32(-1)
    assert crec.assigned_partitions(data) == [("orders", [0, 3]), ("payments", [])]
    assert crec.assigned_partitions(b"") == []
    assert crec.assigned_partitions(i16(0) + i32(1) + s("orders") + i32(5)) == []
