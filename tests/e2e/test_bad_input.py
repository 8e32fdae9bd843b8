"""Bad input gets a Kafka error code or a closed connection, and nothing else breaks."""
import json
import socket
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.admin import KafkaConnection
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader, encode_request
from protocol.messages import ProduceRequest
from protocol.record_batch import build_batch


def connect(bootstrap):
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def is_closed(sock, timeout_s=10):
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def produce_raw(bootstrap, topic, records, acks=-1):
    with KafkaConnection(bootstrap) as conn:
        request = ProduceRequest(acks=acks, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
        return conn.send(request, 9).responses[0].partition_responses[0]


def end_offset(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bad-input"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)[1]
    finally:
        c.close()


@pytest.fixture(scope="module")
def topic(kray):
    name = "bad-input"
    admin = AdminClient({"bootstrap.servers": kray})
    admin.create_topics([NewTopic(name, 1, 1, config={"max.message.bytes": "10000"})])[name].result(30)
    return name


def test_oversize_frame_is_refused_from_its_size_prefix(kray):
    s = connect(kray)
    s.sendall(struct.pack(">i", 200 * 1024 * 1024))  # above socket.request.max.bytes (100 MiB)
    assert is_closed(s)


def test_garbage_and_unknown_api_key_close_only_that_connection(kray):
    for payload in (b"\x00\x00\x00\x05hello", struct.pack(">ihhi", 10, 999, 0, 7) + b"\x00\x00",
                    struct.pack(">i", 8) + b"\x00\x00\x00\x0d\xff\xff\xff\xff"):  # Produce v13, truncated
        s = connect(kray)
        s.sendall(payload)
        assert is_closed(s)
    with KafkaConnection(kray) as conn:  # the broker still serves everyone else
        assert conn.versions[0] == (0, 13)  # the broker answers ApiVersions still (Produce from v0, as Kafka)


def test_unsupported_api_versions_version_gets_error_35(kray):
    s = connect(kray)
    s.sendall(encode_request(RequestHeader(18, 99, 42, "probe"), b""))
    size = struct.unpack(">i", s.recv(4))[0]
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    correlation_id, error_code = struct.unpack_from(">ih", body)
    assert (correlation_id, error_code) == (42, ErrorCode.UNSUPPORTED_VERSION)
    s.close()


def test_crc_mismatch_and_oversize_batch_append_nothing(kray, topic):
    good = build_batch([(b"k", b"v", [], 1)])
    assert produce_raw(kray, topic, good).error_code == 0
    before = end_offset(kray, topic)

    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert produce_raw(kray, topic, bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    too_big = build_batch([(None, b"x" * 20000, [], 1)])
    assert produce_raw(kray, topic, too_big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert produce_raw(kray, topic, good + good).error_code == ErrorCode.INVALID_RECORD  # v3+: one batch only
    assert end_offset(kray, topic) == before


def test_many_idle_and_half_sent_connections_do_not_stop_real_clients(kray, topic):
    idle, half = [], []
    try:
        for _ in range(200):
            idle.append(connect(kray))
        for _ in range(200):
            s = connect(kray)
            s.sendall(struct.pack(">i", 1000) + b"\x00\x03")  # a frame that never completes
            half.append(s)
        p = Producer({"bootstrap.servers": kray})
        delivered = []
        for i in range(100):
            p.produce(topic, value=b"still-works-%d" % i, partition=0, on_delivery=lambda e, m: delivered.append(e))
        assert p.flush(30) == 0
        assert delivered == [None] * 100
    finally:
        for s in idle + half:
            s.close()


def test_produce_to_an_unknown_topic_gets_unknown_topic(kray):
    assert produce_raw(kray, "no-such-topic-here", build_batch([(None, b"v", [], 1)])).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


CAPTURES = Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol" / "captures" / \
    "librdkafka-2.16.0-client-and-mock.jsonl"
FALLBACK_REQUEST = encode_request(RequestHeader(3, 12, 1, "fuzz"), b"\x01\x01\x00")  # Metadata v12, all topics
CAPTURED_REQUESTS = [bytes.fromhex(json.loads(line)["hex"]) for line in CAPTURES.read_text().splitlines()
                     if json.loads(line)["dir"] == "request"] if CAPTURES.exists() else [FALLBACK_REQUEST]


@st.composite
def mutated_request(draw):
    frame = bytearray(draw(st.sampled_from(CAPTURED_REQUESTS)))
    for _ in range(draw(st.integers(1, 8))):
        frame[draw(st.integers(4, len(frame) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        frame = frame[:draw(st.integers(4, len(frame)))]
        frame[0:4] = struct.pack(">i", len(frame) - 4)
    return bytes(frame)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.one_of(st.binary(max_size=200), mutated_request()))
def test_fuzzed_requests_never_take_the_broker_down(kray, payload):
    s = connect(kray)
    try:
        s.sendall(payload)
        s.settimeout(0.3)
        try:
            while s.recv(65536):
                pass
        except (socket.timeout, ConnectionResetError):
            pass
    finally:
        s.close()
    with KafkaConnection(kray) as conn:  # every fuzzed frame leaves the broker serving others
        assert conn.versions[0] == (0, 13)  # the broker answers ApiVersions still (Produce from v0, as Kafka)
