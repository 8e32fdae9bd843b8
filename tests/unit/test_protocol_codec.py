"""Wire rules, defaults, malformed input and zero-copy behaviour of the message codec and headers."""

import time
from uuid import UUID

import pytest

from protocol import generate, primitives as p
from protocol.errors import ErrorCode, MalformedMessage, UnknownApiKey, UnsupportedVersion
from protocol.headers import (RequestHeader, decode_request_header, encode_request, encode_response,
                              request_header_version, response_header_version)
from protocol.messages import (ApiVersionsResponse, ConsumerGroupHeartbeatResponse, FetchResponse, MetadataRequest,
                               MetadataResponse, OffsetDeleteRequest, ProduceRequest, ProduceResponse,
                               SaslAuthenticateRequest)

MIB = 1 << 20


# ---- class API ---------------------------------------------------------------------------------------------------

def test_class_attributes_and_nested_structs():
    assert (ProduceRequest.API_KEY, ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION,
            ProduceRequest.FLEXIBLE_MIN) == (0, 3, 13, 9)
    assert OffsetDeleteRequest.FLEXIBLE_MIN is None
    assert ProduceResponse.TopicProduceResponse and ProduceResponse.PartitionProduceResponse
    assert MetadataResponse.MetadataResponseBroker and FetchResponse.PartitionData and FetchResponse.EpochEndOffset
    assert MetadataResponse.MetadataResponsePartition().isr_nodes == []
    with pytest.raises(AttributeError):
        ProduceRequest().not_a_field = 1


def test_defaults():
    a, b = ProduceRequest(), ProduceRequest()
    assert a.transactional_id is None and a.topic_data == [] and a.topic_data is not b.topic_data
    part = FetchResponse.PartitionData()
    assert (part.last_stable_offset, part.preferred_read_replica, part.records) == (-1, -1, None)
    assert part.current_leader == FetchResponse.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
    assert part.current_leader is not FetchResponse.PartitionData().current_leader
    assert ConsumerGroupHeartbeatResponse().assignment is None  # nullable struct, default null
    assert MetadataResponse.MetadataResponseTopic().topic_id == UUID(int=0)
    assert MetadataResponse().cluster_authorized_operations == -2147483648
    with pytest.raises(TypeError):
        ProduceRequest(no_such_field=1)


def test_repr_and_eq():
    r = ProduceRequest(acks=1)
    assert repr(r).startswith("ProduceRequest(transactional_id=None, acks=1,")
    assert r == ProduceRequest(acks=1) and r != ProduceRequest(acks=-1)


def test_snake_case_rule():
    assert generate.snake("ThrottleTimeMs") == "throttle_time_ms"
    assert generate.snake("ISRNodes") == "isr_nodes"
    assert generate.snake("TopicId") == "topic_id"
    assert generate.snake("ApiKey") == "api_key"


def test_error_codes():
    assert (ErrorCode.NONE, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.CORRUPT_MESSAGE) == (0, -1, 2)
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert sorted(ErrorCode) == list(range(-1, 137))


def test_unsupported_version():
    with pytest.raises(UnsupportedVersion):
        ProduceRequest().encode(2)
    with pytest.raises(UnsupportedVersion):
        ProduceRequest.decode(b"", 14)


# ---- wire rules ----------------------------------------------------------------------------------------------------

def test_flexible_encoding_compact_and_tagged():
    # Metadata v9 (first flexible): compact array of N+1, compact strings, per-struct tagged-field sections.
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="ab")],
                              allow_auto_topic_creation=True)
    assert request.encode(9) == bytes.fromhex("02" "03" "6162" "00" "01" "00" "00" "00")
    assert request.encode(8) == bytes.fromhex("00000001" "0002" "6162" "01" "00" "00")
    assert MetadataRequest(topics=None).encode(9)[:1] == b"\x00"  # null compact array
    assert MetadataRequest(topics=None).encode(1)[:4] == b"\xff\xff\xff\xff"


def test_records_null_in_both_forms():
    part = ProduceRequest.PartitionProduceData(index=0, records=None)
    request = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[part])])
    assert request.encode(8).endswith(b"\x00\x00\x00\x00" b"\xff\xff\xff\xff")  # int32 -1
    assert request.encode(9).endswith(b"\x00\x00\x00\x00" b"\x00" b"\x00" b"\x00" b"\x00")  # uvarint 0
    assert ProduceRequest.decode(request.encode(9), 9) == request


def test_tagged_struct_field_written_only_when_not_default():
    part = FetchResponse.PartitionData(partition_index=1, records=b"")
    flat = part.encode(12)
    assert flat.endswith(b"\x01" b"\x00")  # empty compact records, then no tagged fields
    part.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=7)
    tagged = part.encode(12)
    assert tagged[len(flat) - 1:] == bytes.fromhex("01" "01" "09" "00000003" "00000007" "00")
    assert FetchResponse.PartitionData.decode(tagged, 12) == part


def test_nullable_struct_marker():
    response = ConsumerGroupHeartbeatResponse(member_epoch=1)
    assert response.encode(0).endswith(b"\xff\x00")  # null Assignment, then top-level tagged fields
    response.assignment = ConsumerGroupHeartbeatResponse.Assignment()
    assert response.encode(0).endswith(b"\x01" b"\x01\x00" b"\x00")  # marker, empty array, struct tags, top tags
    assert ConsumerGroupHeartbeatResponse.decode(response.encode(0), 0) == response


def test_unknown_tagged_fields_are_kept_in_order():
    response = ApiVersionsResponse(finalized_features_epoch=5)
    response._unknown_tagged = ((0x7F, b"a"), (9, b"bc"))
    body = response.encode(3)
    decoded = ApiVersionsResponse.decode(body, 3)
    assert decoded._unknown_tagged == ((9, b"bc"), (0x7F, b"a"))
    assert decoded.finalized_features_epoch == 5 and decoded.encode(3) == body


def test_records_encode_accepts_chunks():
    expected = ProduceRequest.PartitionProduceData(index=1, records=b"abcdef").encode(9)
    for records in (bytearray(b"abcdef"), memoryview(b"xabcdef")[1:], [b"ab", memoryview(b"cd"), bytearray(b"ef")],
                    (b"abc", b"def")):
        assert ProduceRequest.PartitionProduceData(index=1, records=records).encode(9) == expected


def test_records_decode_is_zero_copy():
    records = bytes(range(256)) * (4 * 1024)  # 1 MiB
    request = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name="orders", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    frame = bytes(encode_request(RequestHeader(0, 10, 1, "c"), request.encode_chunks(10)))
    header, offset = decode_request_header(memoryview(frame)[4:])
    decoded = ProduceRequest.decode(memoryview(frame)[4 + offset:], 10)
    got = decoded.topic_data[0].partition_data[0].records
    assert isinstance(got, memoryview) and got.obj is frame and got == records
    assert len(got) == MIB


def test_bytes_fields_decode_to_bytes():
    decoded = SaslAuthenticateRequest.decode(SaslAuthenticateRequest(auth_bytes=b"tok").encode(2), 2)
    assert type(decoded.auth_bytes) is bytes and decoded.auth_bytes == b"tok"


# ---- malformed input -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body,version", [
    (b"", 9),  # truncated
    (b"\x00\x00\x00\x01\x00", 8),  # array of 1, topic name truncated
    (b"\x00\x00\x00\x01\xff\xfe", 8),  # string length -2
    (b"\x00\x00\x00\x01\xff\xff\x00", 8),  # null non-nullable topic name
    (b"\xff\xff\xff\xfe", 8),  # array length -2
    (b"\x02\x00", 9),  # compact string null where not nullable
    (b"\x02\x05ab", 9),  # compact string past the end
    (b"\x02\x03\xff\xfe", 9),  # invalid utf-8
    (b"\xff\xff\xff\xff\xff\x01", 9),  # 6-byte varint
    (b"\x01\x00\x00\x00" b"\x01\x00\x05\x01", 9),  # tagged field size past the end
])
def test_malformed_bodies_raise_malformed_message(body, version):
    with pytest.raises(MalformedMessage):
        MetadataRequest.decode(body, version)


def test_huge_array_count_fails_fast():
    body = b"\x7f\xff\xff\xff" + bytes(10)
    start = time.perf_counter()
    with pytest.raises(MalformedMessage, match="exceeds"):
        MetadataRequest.decode(body, 8)
    with pytest.raises(MalformedMessage):
        MetadataRequest.decode(b"\xff\xff\xff\xff\x07" + bytes(10), 9)  # compact count 2^31-2
    assert time.perf_counter() - start < 0.1


def test_tagged_value_must_fill_its_size():
    body = ApiVersionsResponse(finalized_features_epoch=5).encode(3)
    # the tagged int64 (tag 1, size 8) announced as size 9 with a spare byte
    i = body.index(b"\x01\x08")
    bad = body[:i] + b"\x01\x09" + body[i + 2:i + 10] + b"\x00" + body[i + 10:]
    with pytest.raises(MalformedMessage):
        ApiVersionsResponse.decode(bad, 3)


# ---- headers -----------------------------------------------------------------------------------------------------

def test_request_header_versions_and_client_id():
    assert request_header_version(0, 8) == 1 and request_header_version(0, 9) == 2
    header = RequestHeader(api_key=3, api_version=12, correlation_id=9, client_id=None)
    frame = encode_request(header, b"BODY")
    # v2 header: client_id stays an int16-length (here null) string, then tagged fields
    assert frame == bytes.fromhex("0000000f" "0003" "000c" "00000009" "ffff" "00") + b"BODY"
    assert decode_request_header(frame[4:]) == (header, 11)
    v1 = encode_request(RequestHeader(3, 8, 9, "id"), b"")
    assert v1 == bytes.fromhex("0000000c" "0003" "0008" "00000009" "0002") + b"id"


def test_response_header_versions():
    assert response_header_version(0, 9) == 1 and response_header_version(0, 8) == 0
    assert response_header_version(18, 3) == 0  # ApiVersions: always v0
    assert encode_response(0, 9, 5, b"xy") == bytes.fromhex("00000007" "00000005" "00") + b"xy"
    assert encode_response(18, 4, 5, [b"x", b"y"]) == bytes.fromhex("00000006" "00000005") + b"xy"


def test_unknown_api_key_keeps_header_fields():
    with pytest.raises(UnknownApiKey) as info:
        decode_request_header(bytes.fromhex("03e7" "0002" "0000002a" "ffff"))
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (999, 2, 42)


def test_truncated_request_header():
    with pytest.raises(MalformedMessage):
        decode_request_header(b"\x00\x03\x00")
    with pytest.raises(MalformedMessage):
        decode_request_header(bytes.fromhex("0003" "000c" "00000009" "0005") + b"ab")


# ---- primitives ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, -1, 63, -64, 64, 300, 2**31 - 1, -2**31])
def test_varint_zigzag(n):
    assert p.read_varint(p.write_varint(n), 0) == (n, len(p.write_varint(n)))


@pytest.mark.parametrize("n", [0, 1, -1, 2**63 - 1, -2**63, 10**12])
def test_varlong_zigzag(n):
    assert p.read_varlong(p.write_varlong(n), 0)[0] == n


def test_uvarint_bytes():
    assert p.write_uvarint(0) == b"\x00" and p.write_uvarint(300) == b"\xac\x02"
    assert p.read_uvarint(b"\xac\x02", 0) == (300, 2)
    assert p.write_varint(-1) == b"\x01" and p.write_varint(1) == b"\x02"
    with pytest.raises(MalformedMessage):
        p.read_varlong(b"\xff" * 10 + b"\x01", 0)
