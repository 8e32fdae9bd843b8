"""The quorum core's messages on Kafka's wire: Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54)
and Fetch (1) on `__cluster_metadata` partition 0, as KRaft carries them. Pure: no sockets.

What the wire does not say, the transport does. Kafka's responses name no sender and do not repeat
the request; the core's do (`src`, `pre_vote`, the fetch position), so a response is mapped back
with the request it answers (the connection pairs them by correlation id) and the peer it was sent
to. Requests name their sender in their own fields (Vote's replica_id, leader_id, Fetch's replica id).

Records: a data batch's records are bytes (the record values; the state machine's encoding is the
shell's business), a control batch holds one LeaderChange written as Kafka's LeaderChangeMessage
control record (type 2), or one VotersRecord (KIP-853) as Kafka's KRaftVoters control record
(type 6, VotersRecord v0: each voter's id, its directory id (Kray's stand-in, voter_directory_id),
no endpoints (a voter's are its broker's inter-broker listener, as the metadata says) and the
kraft.version range 0-1). Each Batch is one RecordBatch v2: base offset, partition leader epoch =
the batch's epoch, the control bit. Timestamps are not carried by the core: 0 on the wire.

Pre-vote (KIP-996) needs VoteRequest v2 (its PreVote field); a pre-vote refuses to encode below v2
(`NotOnWire`) rather than travel as a real vote.
"""
from __future__ import annotations

import struct
from uuid import UUID, uuid5

from protocol import messages as m
from protocol import record_batch as rb
from protocol.errors import ErrorCode

from actors.controller.quorum import (
    NO_LEADER, Batch, BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest,
    EndQuorumEpochResponse, EpochEndOffset, FetchRequest, FetchResponse, LeaderChange, VoteRequest, VoteResponse,
    VotersRecord,
)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = UUID(int=1)          # Kafka's Uuid.METADATA_TOPIC_ID
VOTE_PRE_VOTE_MIN_VERSION = 2            # KIP-996's PreVote field
FETCH_REPLICA_STATE_MIN_VERSION = 15     # replica id moved into ReplicaState (KIP-903)
FETCH_TOPIC_ID_MIN_VERSION = 13
CONTROL_TYPE_LEADER_CHANGE = 2
CONTROL_TYPE_KRAFT_VOTERS = 6
VOTERS_RECORD_VERSION = 0
KRAFT_VERSION_RANGE = (0, 1)             # a voter's supported kraft.version (KIP-853 needs 1)
# Kray's stand-in for a voter's log directory id (Kafka's meta.properties directory.id): one per node id
_DIRECTORY_NAMESPACE = UUID("6b726179-766f-7465-7273-000000000853")
LEADER_CHANGE_VERSION = 0
FETCH_MAX_BYTES = 8 * 1024 * 1024        # per Fetch; the core's fetch_max_records bounds it first


class NotOnWire(ValueError):
    """A core message this wire version cannot carry."""


class BadQuorumMessage(ValueError):
    """A wire message that is not about __cluster_metadata-0, or malformed records."""


# ---- records ---------------------------------------------------------------------------------------

def _uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise BadQuorumMessage("LeaderChangeMessage: bad varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def encode_leader_change(change: LeaderChange) -> tuple[bytes, bytes]:
    """(key, value) of the control record: key = (version 0, type 2); value = version-prefixed
    LeaderChangeMessage v0 (flexible: compact arrays of {VoterId}, empty tagged fields)."""
    key = struct.pack(">hh", 0, CONTROL_TYPE_LEADER_CHANGE)
    out = bytearray(struct.pack(">hhi", LEADER_CHANGE_VERSION, LEADER_CHANGE_VERSION, change.leader_id))
    for ids in (change.voters, change.granting_voters):
        _uvarint(out, len(ids) + 1)
        for voter_id in ids:
            out += struct.pack(">i", voter_id)
            out.append(0)
    out.append(0)
    return key, bytes(out)


def voter_directory_id(node_id: int) -> UUID:
    """The directory id DescribeQuorum reports for a voter, and the one Remove/AddRaftVoter take."""
    return uuid5(_DIRECTORY_NAMESPACE, str(node_id))


def encode_voters(record: VotersRecord) -> tuple[bytes, bytes]:
    """(key, value) of a KRaftVoters control record: key = (version 0, type 6); value =
    version-prefixed VotersRecord v0 (flexible)."""
    key = struct.pack(">hh", 0, CONTROL_TYPE_KRAFT_VOTERS)
    out = bytearray(struct.pack(">hh", VOTERS_RECORD_VERSION, VOTERS_RECORD_VERSION))
    _uvarint(out, len(record.voters) + 1)
    for voter_id in record.voters:
        out += struct.pack(">i", voter_id) + voter_directory_id(voter_id).bytes
        _uvarint(out, 1)                                   # no endpoints
        out += struct.pack(">hh", *KRAFT_VERSION_RANGE)
        out.append(0)                                      # KRaftVersionFeature's tagged fields
        out.append(0)                                      # the voter's tagged fields
    out.append(0)
    return key, bytes(out)


def _skip_tagged(value: bytes, pos: int) -> int:
    count, pos = _read_uvarint(value, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(value, pos)
        size, pos = _read_uvarint(value, pos)
        pos += size
    return pos


def decode_voters(value: bytes | None) -> VotersRecord:
    if value is None or len(value) < 5:
        raise BadQuorumMessage("VotersRecord: truncated")
    prefix, _version = struct.unpack_from(">hh", value)
    if prefix != VOTERS_RECORD_VERSION:
        raise BadQuorumMessage(f"VotersRecord v{prefix} unsupported")
    pos = 4
    count, pos = _read_uvarint(value, pos)
    ids = []
    try:
        for _ in range(count - 1):
            ids.append(struct.unpack_from(">i", value, pos)[0])
            pos += 4 + 16
            endpoints, pos = _read_uvarint(value, pos)
            for _ in range(endpoints - 1):
                for _string in range(2):                   # Name, Host (compact strings)
                    size, pos = _read_uvarint(value, pos)
                    pos += size - 1
                pos += 2                                   # Port
                pos = _skip_tagged(value, pos)
            pos += 4                                       # KRaftVersionFeature's range
            pos = _skip_tagged(value, pos)
            pos = _skip_tagged(value, pos)
    except struct.error:
        raise BadQuorumMessage("VotersRecord: truncated") from None
    if pos > len(value) or not ids:
        raise BadQuorumMessage("VotersRecord: truncated or empty")
    return VotersRecord(tuple(ids))


def decode_control(key: bytes | None, value: bytes | None):
    """The one record of a control batch: a LeaderChange or a VotersRecord."""
    if key is not None and len(key) >= 4 and struct.unpack_from(">hh", key) == (0, CONTROL_TYPE_KRAFT_VOTERS):
        return decode_voters(value)
    return decode_leader_change(key, value)


def decode_leader_change(key: bytes | None, value: bytes | None) -> LeaderChange:
    if key is None or len(key) < 4 or struct.unpack_from(">hh", key) != (0, CONTROL_TYPE_LEADER_CHANGE):
        raise BadQuorumMessage("control record is not a LeaderChange")
    if value is None or len(value) < 8:
        raise BadQuorumMessage("LeaderChangeMessage: truncated")
    prefix, _version, leader_id = struct.unpack_from(">hhi", value)
    if prefix != LEADER_CHANGE_VERSION:
        raise BadQuorumMessage(f"LeaderChangeMessage v{prefix} unsupported")
    pos = 8
    lists = []
    for _ in range(2):
        count, pos = _read_uvarint(value, pos)
        ids = []
        for _ in range(count - 1):
            if pos + 5 > len(value):
                raise BadQuorumMessage("LeaderChangeMessage: truncated")
            ids.append(struct.unpack_from(">i", value, pos)[0])
            pos += 4
            tagged, pos = _read_uvarint(value, pos)
            if tagged:
                raise BadQuorumMessage("LeaderChangeMessage: unexpected tagged fields")
        lists.append(tuple(ids))
    return LeaderChange(leader_id=leader_id, voters=lists[0], granting_voters=lists[1])


def encode_batches(batches) -> bytes:
    out = bytearray()
    for batch in batches:
        if batch.control:
            if len(batch.records) != 1 or not isinstance(batch.records[0], (LeaderChange, VotersRecord)):
                raise NotOnWire("a control batch holds exactly one LeaderChange or VotersRecord")
            record = batch.records[0]
            key, value = encode_voters(record) if isinstance(record, VotersRecord) else encode_leader_change(record)
            records = [(key, value, (), 0)]
        else:
            if not all(isinstance(r, (bytes, bytearray)) for r in batch.records):
                raise NotOnWire("data records travel as bytes")
            records = [(None, bytes(r), (), 0) for r in batch.records]
        out += rb.build_batch(records, base_offset=batch.base_offset, partition_leader_epoch=batch.epoch,
                              is_control=batch.control)
    return bytes(out)


def decode_batches(data) -> tuple[Batch, ...]:
    if not data:
        return ()
    batches = []
    try:
        for header in rb.iter_batches(data):
            rb.validate_crc(header)
            records = rb.decode_records(header)
            base = header.base_offset
            if [r.offset for r in records] != list(range(base, base + len(records))):
                raise BadQuorumMessage("quorum batch records are not contiguous")
            if header.is_control:
                if len(records) != 1:
                    raise BadQuorumMessage("control batch with more than one record")
                batch = Batch(base, header.partition_leader_epoch,
                              (decode_control(records[0].key, records[0].value),), control=True)
            else:
                batch = Batch(base, header.partition_leader_epoch, tuple(bytes(r.value or b"") for r in records))
            batches.append(batch)
    except rb.CorruptRecord as e:
        raise BadQuorumMessage(str(e)) from None
    return tuple(batches)


# ---- helpers --------------------------------------------------------------------------------------

def _one_partition(topics) -> object:
    if len(topics) != 1 or topics[0].topic_name != METADATA_TOPIC or len(topics[0].partitions) != 1:
        raise BadQuorumMessage(f"expected {METADATA_TOPIC}-{METADATA_PARTITION} only")
    part = topics[0].partitions[0]
    if part.partition_index != METADATA_PARTITION:
        raise BadQuorumMessage(f"expected {METADATA_TOPIC}-{METADATA_PARTITION} only")
    return part


def _leader(leader_id: int | None) -> int:
    return NO_LEADER if leader_id is None else leader_id


# ---- Vote ------------------------------------------------------------------------------------------

def vote_request_to_wire(msg: VoteRequest, *, dst: int, cluster_id: str | None, version: int) -> m.VoteRequest:
    if msg.pre_vote and version < VOTE_PRE_VOTE_MIN_VERSION:
        raise NotOnWire(f"a pre-vote needs VoteRequest v{VOTE_PRE_VOTE_MIN_VERSION}+, not v{version}")
    part = m.VoteRequest.PartitionData(partition_index=METADATA_PARTITION, replica_epoch=msg.epoch,
                                       replica_id=msg.src, last_offset_epoch=msg.last_epoch,
                                       last_offset=msg.last_offset, pre_vote=msg.pre_vote)
    return m.VoteRequest(cluster_id=cluster_id, voter_id=dst,
                         topics=[m.VoteRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def vote_request_from_wire(req: m.VoteRequest) -> VoteRequest:
    part = _one_partition(req.topics)
    return VoteRequest(src=part.replica_id, epoch=part.replica_epoch, last_epoch=part.last_offset_epoch,
                       last_offset=part.last_offset, pre_vote=bool(part.pre_vote))


def vote_response_to_wire(msg: VoteResponse) -> m.VoteResponse:
    part = m.VoteResponse.PartitionData(partition_index=METADATA_PARTITION, error_code=int(msg.error),
                                        leader_id=msg.leader_id, leader_epoch=msg.epoch,
                                        vote_granted=msg.vote_granted)
    return m.VoteResponse(error_code=0, topics=[m.VoteResponse.TopicData(topic_name=METADATA_TOPIC,
                                                                          partitions=[part])])


def vote_response_from_wire(resp: m.VoteResponse, *, src: int, request: VoteRequest) -> VoteResponse:
    if resp.error_code:
        return VoteResponse(src, ErrorCode(resp.error_code), request.epoch, NO_LEADER, False, request.pre_vote)
    part = _one_partition(resp.topics)
    return VoteResponse(src=src, error=ErrorCode(part.error_code), epoch=part.leader_epoch,
                        leader_id=part.leader_id, vote_granted=part.vote_granted, pre_vote=request.pre_vote)


# ---- BeginQuorumEpoch ------------------------------------------------------------------------------

def begin_request_to_wire(msg: BeginQuorumEpochRequest, *, dst: int, cluster_id: str | None,
                          version: int) -> m.BeginQuorumEpochRequest:
    part = m.BeginQuorumEpochRequest.PartitionData(partition_index=METADATA_PARTITION, leader_id=msg.leader_id,
                                                   leader_epoch=msg.epoch)
    return m.BeginQuorumEpochRequest(cluster_id=cluster_id, voter_id=dst, topics=[
        m.BeginQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def begin_request_from_wire(req: m.BeginQuorumEpochRequest) -> BeginQuorumEpochRequest:
    part = _one_partition(req.topics)
    return BeginQuorumEpochRequest(src=part.leader_id, epoch=part.leader_epoch, leader_id=part.leader_id)


def begin_response_to_wire(msg: BeginQuorumEpochResponse) -> m.BeginQuorumEpochResponse:
    part = m.BeginQuorumEpochResponse.PartitionData(partition_index=METADATA_PARTITION, error_code=int(msg.error),
                                                    leader_id=msg.leader_id, leader_epoch=msg.epoch)
    return m.BeginQuorumEpochResponse(error_code=0, topics=[
        m.BeginQuorumEpochResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def begin_response_from_wire(resp: m.BeginQuorumEpochResponse, *, src: int,
                             request: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
    if resp.error_code:
        return BeginQuorumEpochResponse(src, ErrorCode(resp.error_code), request.epoch, NO_LEADER)
    part = _one_partition(resp.topics)
    return BeginQuorumEpochResponse(src, ErrorCode(part.error_code), part.leader_epoch, part.leader_id)


# ---- EndQuorumEpoch --------------------------------------------------------------------------------

def end_request_to_wire(msg: EndQuorumEpochRequest, *, cluster_id: str | None,
                        version: int) -> m.EndQuorumEpochRequest:
    cls = m.EndQuorumEpochRequest
    part = cls.PartitionData(partition_index=METADATA_PARTITION, leader_id=msg.leader_id, leader_epoch=msg.epoch,
                             preferred_successors=list(msg.preferred_successors),
                             preferred_candidates=[cls.ReplicaInfo(candidate_id=i) for i in msg.preferred_successors])
    return cls(cluster_id=cluster_id, topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def end_request_from_wire(req: m.EndQuorumEpochRequest, version: int) -> EndQuorumEpochRequest:
    part = _one_partition(req.topics)
    successors = (part.preferred_successors if version == 0
                  else [c.candidate_id for c in part.preferred_candidates])
    return EndQuorumEpochRequest(src=part.leader_id, epoch=part.leader_epoch, leader_id=part.leader_id,
                                 preferred_successors=tuple(successors))


def end_response_to_wire(msg: EndQuorumEpochResponse) -> m.EndQuorumEpochResponse:
    part = m.EndQuorumEpochResponse.PartitionData(partition_index=METADATA_PARTITION, error_code=int(msg.error),
                                                  leader_id=msg.leader_id, leader_epoch=msg.epoch)
    return m.EndQuorumEpochResponse(error_code=0, topics=[
        m.EndQuorumEpochResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def end_response_from_wire(resp: m.EndQuorumEpochResponse, *, src: int,
                           request: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
    if resp.error_code:
        return EndQuorumEpochResponse(src, ErrorCode(resp.error_code), request.epoch, NO_LEADER)
    part = _one_partition(resp.topics)
    return EndQuorumEpochResponse(src, ErrorCode(part.error_code), part.leader_epoch, part.leader_id)


# ---- Fetch -----------------------------------------------------------------------------------------

def fetch_request_to_wire(msg: FetchRequest, *, cluster_id: str | None, version: int) -> m.FetchRequest:
    cls = m.FetchRequest
    part = cls.FetchPartition(partition=METADATA_PARTITION, current_leader_epoch=msg.epoch,
                              fetch_offset=msg.fetch_offset, last_fetched_epoch=msg.last_fetched_epoch,
                              partition_max_bytes=FETCH_MAX_BYTES)
    topic = cls.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])
    req = cls(cluster_id=cluster_id, max_wait_ms=msg.max_wait_ms, min_bytes=0, max_bytes=FETCH_MAX_BYTES,
              topics=[topic])
    if version >= FETCH_REPLICA_STATE_MIN_VERSION:
        req.replica_state = cls.ReplicaState(replica_id=msg.src, replica_epoch=-1)
    else:
        req.replica_id = msg.src
    return req


def is_metadata_fetch(req: m.FetchRequest, version: int) -> bool:
    """A Fetch for __cluster_metadata-0 goes to the quorum, any other to the shards."""
    if len(req.topics) != 1:
        return False
    topic = req.topics[0]
    return (topic.topic_id == METADATA_TOPIC_ID if version >= FETCH_TOPIC_ID_MIN_VERSION
            else topic.topic == METADATA_TOPIC)


def fetch_request_from_wire(req: m.FetchRequest, version: int) -> FetchRequest:
    if not is_metadata_fetch(req, version) or len(req.topics[0].partitions) != 1:
        raise BadQuorumMessage(f"expected {METADATA_TOPIC}-{METADATA_PARTITION} only")
    part = req.topics[0].partitions[0]
    if part.partition != METADATA_PARTITION:
        raise BadQuorumMessage(f"expected {METADATA_TOPIC}-{METADATA_PARTITION} only")
    src = req.replica_state.replica_id if version >= FETCH_REPLICA_STATE_MIN_VERSION else req.replica_id
    return FetchRequest(src=src, epoch=part.current_leader_epoch, fetch_offset=part.fetch_offset,
                        last_fetched_epoch=part.last_fetched_epoch, max_wait_ms=req.max_wait_ms)


def fetch_response_to_wire(msg: FetchResponse) -> m.FetchResponse:
    cls = m.FetchResponse
    part = cls.PartitionData(partition_index=METADATA_PARTITION, error_code=int(msg.error),
                             high_watermark=msg.high_watermark,
                             current_leader=cls.LeaderIdAndEpoch(leader_id=msg.leader_id, leader_epoch=msg.epoch),
                             records=encode_batches(msg.records) if msg.records else None)
    if msg.diverging_epoch is not None:
        part.diverging_epoch = cls.EpochEndOffset(epoch=msg.diverging_epoch.epoch,
                                                  end_offset=msg.diverging_epoch.end_offset)
    topic = cls.FetchableTopicResponse(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])
    return cls(throttle_time_ms=0, error_code=0, responses=[topic])


def fetch_response_from_wire(resp: m.FetchResponse, *, src: int, request: FetchRequest) -> FetchResponse:
    if resp.error_code:
        return FetchResponse(src, ErrorCode(resp.error_code), request.epoch, NO_LEADER, -1, (), None,
                             request.fetch_offset, request.last_fetched_epoch)
    if len(resp.responses) != 1 or len(resp.responses[0].partitions) != 1:
        raise BadQuorumMessage(f"expected {METADATA_TOPIC}-{METADATA_PARTITION} only")
    part = resp.responses[0].partitions[0]
    diverging = part.diverging_epoch
    diverging = (EpochEndOffset(diverging.epoch, diverging.end_offset)
                 if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0 else None)
    leader = part.current_leader
    return FetchResponse(src=src, error=ErrorCode(part.error_code), epoch=leader.leader_epoch,
                         leader_id=leader.leader_id, high_watermark=part.high_watermark,
                         records=decode_batches(part.records), diverging_epoch=diverging,
                         fetch_offset=request.fetch_offset, last_fetched_epoch=request.last_fetched_epoch)
