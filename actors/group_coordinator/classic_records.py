"""`__consumer_offsets` records of committed offsets and classic groups, framed as Kafka frames them.

Kafka's layouts (its OffsetCommitKey/Value and GroupMetadataKey/Value schemas, written here by hand: they are not
flexible at the versions used, so each is a fixed sequence of fields):

- offset commit: key = int16 type 1, string group, string topic, int32 partition;
  value = int16 version 3, int64 offset, int32 leader epoch, string metadata, int64 commit timestamp (ms).
  Type 0 is the same key as version 0 of that schema; both are read.
- classic group: key = int16 type 2, string group;
  value = int16 version 3, string protocol type, int32 generation, nullable string protocol, nullable string leader,
  int64 state timestamp (ms), then the members: int32 count of (string member id, nullable string instance id,
  string client id, string client host, int32 rebalance timeout ms, int32 session timeout ms, bytes subscription,
  bytes assignment).

A tombstone (null value) deletes the offset or the group.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from actors.group_coordinator.records import Record
from protocol.errors import MalformedMessage

OFFSET_COMMIT_TYPES = (0, 1)
OFFSET_COMMIT_VALUE_VERSION = 3
CLASSIC_GROUP_METADATA = 2
GROUP_METADATA_VALUE_VERSION = 3

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass
class GroupMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: list[GroupMember] = field(default_factory=list)


# ---- primitive writers and readers ---------------------------------------------------------------------------------

def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    data = s.encode()
    return _I16.pack(len(data)) + data


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + bytes(b)


class _Reader:
    def __init__(self, data):
        self.data, self.pos = memoryview(data), 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise MalformedMessage("coordinator record shorter than its fields")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else bytes(self._take(n)).decode()

    def bytes(self) -> bytes:
        n = self.int32()
        return b"" if n == -1 else bytes(self._take(n))


def record_type(key_bytes) -> int:
    if key_bytes is None or len(key_bytes) < 2:
        raise MalformedMessage("coordinator record key shorter than its 2-byte type")
    return _I16.unpack_from(key_bytes)[0]


# ---- offsets -------------------------------------------------------------------------------------------------------

def offset_commit(group_id: str, topic: str, partition: int, value: OffsetCommitValue | None) -> Record:
    key = _I16.pack(1) + _string(group_id) + _string(topic) + _I32.pack(partition)
    if value is None:
        return key, None
    return key, (_I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(value.offset) + _I32.pack(value.leader_epoch)
                 + _string(value.metadata) + _I64.pack(value.commit_timestamp_ms))


def decode_offset_commit(key_bytes, value_bytes) -> tuple[tuple[str, str, int], OffsetCommitValue | None]:
    """((group, topic, partition), value or None for a tombstone). Value versions 0-3 are read (1 has an expire
    timestamp after the commit timestamp, 2 drops it, 3 adds the leader epoch)."""
    r = _Reader(key_bytes)
    r.int16()
    key = (r.string() or "", r.string() or "", r.int32())
    if value_bytes is None:
        return key, None
    v = _Reader(value_bytes)
    version = v.int16()
    offset = v.int64()
    leader_epoch = v.int32() if version >= 3 else -1
    metadata = v.string() or ""
    commit_timestamp_ms = v.int64()
    return key, OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms)


# ---- classic groups ------------------------------------------------------------------------------------------------

def group_metadata(group_id: str, value: GroupMetadataValue | None) -> Record:
    key = _I16.pack(CLASSIC_GROUP_METADATA) + _string(group_id)
    if value is None:
        return key, None
    out = [_I16.pack(GROUP_METADATA_VALUE_VERSION), _string(value.protocol_type), _I32.pack(value.generation),
           _string(value.protocol), _string(value.leader), _I64.pack(value.state_timestamp_ms),
           _I32.pack(len(value.members))]
    for m in value.members:
        out += [_string(m.member_id), _string(m.instance_id), _string(m.client_id), _string(m.client_host),
                _I32.pack(m.rebalance_timeout_ms), _I32.pack(m.session_timeout_ms), _bytes(m.subscription),
                _bytes(m.assignment)]
    return key, b"".join(out)


def decode_group_metadata(key_bytes, value_bytes) -> tuple[str, GroupMetadataValue | None]:
    r = _Reader(key_bytes)
    r.int16()
    group_id = r.string() or ""
    if value_bytes is None:
        return group_id, None
    v = _Reader(value_bytes)
    version = v.int16()
    if version > GROUP_METADATA_VALUE_VERSION:
        raise MalformedMessage(f"group metadata value version {version} is newer than Kray writes")
    protocol_type, generation, protocol, leader = v.string() or "", v.int32(), v.string(), v.string()
    state_timestamp_ms = v.int64() if version >= 2 else -1
    members = []
    for _ in range(v.int32()):
        member_id = v.string() or ""
        instance_id = v.string() if version >= 3 else None
        client_id, client_host = v.string() or "", v.string() or ""
        rebalance_timeout_ms = v.int32() if version >= 1 else -1
        session_timeout_ms = v.int32()
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        members.append(GroupMember(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                   session_timeout_ms, v.bytes(), v.bytes()))
    return group_id, GroupMetadataValue(protocol_type, generation, protocol, leader, state_timestamp_ms, members)


# ---- the consumer protocol's embedded formats (for OffsetDelete and the tools) --------------------------------------

def subscribed_topics(subscription: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (int16 version, array of string topics, ...); [] if unreadable."""
    try:
        r = _Reader(subscription)
        r.int16()
        n = r.int32()
        return [r.string() or "" for _ in range(max(n, 0))]
    except (MalformedMessage, UnicodeDecodeError):
        return []


def assigned_partitions(assignment: bytes) -> list[tuple[str, list[int]]]:
    """The (topic, partitions) of a ConsumerProtocolAssignment (int16 version, array of (string topic, array of
    int32)); [] if empty or unreadable."""
    try:
        r = _Reader(assignment)
        r.int16()
        out = []
        for _ in range(max(r.int32(), 0)):
            topic = r.string() or ""
            out.append((topic, [r.int32() for _ in range(max(r.int32(), 0))]))
        return out
    except (MalformedMessage, UnicodeDecodeError):
        return []
