"""A raw Produce over the wire, to see exactly what one broker answers (a client would reroute)."""
import socket

from protocol.headers import RequestHeader, encode_request
from protocol.messages import ProduceRequest, ProduceResponse
from protocol.record_batch import build_batch

PRODUCE_VERSION = 9


def produce_one(bootstrap: str, topic: str, partition: int) -> int:
    """Send one record to `partition` of `topic` at this broker; return the partition's error code."""
    host, port = bootstrap.rsplit(":", 1)
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=build_batch([(b"k", b"v", [], 0)]))])])
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(RequestHeader(0, PRODUCE_VERSION, 1, "raw"), request.encode(PRODUCE_VERSION)))
        size = int.from_bytes(_read(s, 4), "big")
        body = _read(s, size)
    response = ProduceResponse.decode(memoryview(body)[4 + 1:], PRODUCE_VERSION)  # correlation id, tagged fields
    return response.responses[0].partition_responses[0].error_code


def _read(s, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return out
