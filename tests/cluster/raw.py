"""A raw Produce or Fetch over the wire, to see exactly what one broker answers (a client would
reroute or refresh its metadata). With `security` (a client's settings, librdkafka's names) the
request goes over Kray's admin connection, which logs in first (TLS, SASL); without, over a bare
socket, sent at once (a request that must wait in a stalled broker's socket)."""
import socket
import time
import uuid

from protocol.headers import RequestHeader, encode_request
from protocol.messages import (FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, ProduceRequest,
                               ProduceResponse, WriteTxnMarkersRequest)
from protocol.record_batch import build_batch

PRODUCE_VERSION = 9
MARKERS_VERSION = 1
FETCH_VERSION = 13
METADATA_VERSION = 12


def produce_one(bootstrap: str, topic: str, partition: int, *, acks: int = 1, timeout_s: float = 10,
                value: bytes = b"v", security: dict | None = None) -> int:
    """Send one record to `partition` of `topic` at this broker; return the partition's error code."""
    host, port = bootstrap.rsplit(":", 1)
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=build_batch([(b"k", value, [], 0)]))])])
    if security:
        response = _over_login(bootstrap, security, timeout_s, request, PRODUCE_VERSION)
        return response.responses[0].partition_responses[0].error_code
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(encode_request(RequestHeader(0, PRODUCE_VERSION, 1, "raw"), request.encode(PRODUCE_VERSION)))
        size = int.from_bytes(_read(s, 4), "big")
        body = _read(s, size)
    response = ProduceResponse.decode(memoryview(body)[4 + 1:], PRODUCE_VERSION)  # correlation id, tagged fields
    return response.responses[0].partition_responses[0].error_code


def fetch_one(bootstrap: str, topic_id: uuid.UUID, partition: int, *, leader_epoch: int, offset: int = 0,
              security: dict | None = None) -> int:
    """Fetch `partition` from `offset` carrying `leader_epoch` as the consumer's current leader
    epoch; return the partition's error code."""
    host, port = bootstrap.rsplit(":", 1)
    request = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                           session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                               FetchRequest.FetchTopic(topic_id=topic_id, partitions=[FetchRequest.FetchPartition(
                                   partition=partition, current_leader_epoch=leader_epoch, fetch_offset=offset,
                                   last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])])
    if security:
        return _over_login(bootstrap, security, 10, request, FETCH_VERSION).responses[0].partitions[0].error_code
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(RequestHeader(1, FETCH_VERSION, 1, "raw"), request.encode(FETCH_VERSION)))
        size = int.from_bytes(_read(s, 4), "big")
        body = _read(s, size)
    response = FetchResponse.decode(memoryview(body)[4 + 1:], FETCH_VERSION)
    return response.responses[0].partitions[0].error_code


def metadata_one(bootstrap: str, topic: str) -> tuple[list[int], dict[int, int]]:
    """What this broker itself answers to Metadata for `topic` (a client may ask any broker it
    knows): (the broker ids it lists, partition index -> leader id)."""
    host, port = bootstrap.rsplit(":", 1)
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic)],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(RequestHeader(3, METADATA_VERSION, 1, "raw"), request.encode(METADATA_VERSION)))
        size = int.from_bytes(_read(s, 4), "big")
        body = _read(s, size)
    response = MetadataResponse.decode(memoryview(body)[4 + 1:], METADATA_VERSION)
    [described] = response.topics
    return sorted(b.node_id for b in response.brokers), {p.partition_index: p.leader_id for p in described.partitions}


def _read(s, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return out


def _over_login(bootstrap: str, security: dict, timeout_s: float, request, version: int):
    from cluster.admin import KafkaConnection
    properties = {k: str(v) for k, v in security.items() if k != "bootstrap.servers"}
    with KafkaConnection(bootstrap, client_id="raw", timeout_s=timeout_s, properties=properties) as conn:
        return conn.send(request, version)


class Transactions:
    """Writes transactional batches and markers (WriteTxnMarkers) to one topic over Kray's admin
    connection, as a transactional producer and its transaction coordinator do: for tests of the
    partition log's side of transactions without a coordinator."""

    def __init__(self, bootstrap: str, topic: str):
        from cluster.admin import KafkaConnection
        self.conn = KafkaConnection(bootstrap)
        self.topic = topic
        self.sequences: dict[tuple[int, int], int] = {}

    def close(self):
        self.conn.close()

    def send(self, pid: int, values: list[bytes], *, epoch: int = 0, transactional: bool = True,
             partition: int = 0) -> tuple[int, int]:
        """(error code, base offset) of one batch of `values`."""
        seq = self.sequences.get((pid, epoch), 0)
        now = int(time.time() * 1000)
        records = build_batch([(b"k", v, [], now) for v in values], producer_id=pid, producer_epoch=epoch,
                              base_sequence=seq, is_transactional=transactional)
        request = ProduceRequest(transactional_id="txn-log" if transactional else None, acks=-1, timeout_ms=10000,
                                 topic_data=[ProduceRequest.TopicProduceData(name=self.topic, partition_data=[
                                     ProduceRequest.PartitionProduceData(index=partition, records=records)])])
        answer = self.conn.send(request, PRODUCE_VERSION).responses[0].partition_responses[0]
        if answer.error_code == 0:
            self.sequences[(pid, epoch)] = seq + len(values)
        return answer.error_code, answer.base_offset

    def end(self, pid: int, committed: bool, *, epoch: int = 0, coordinator_epoch: int = 0,
            topic: str | None = None, partitions=(0,)) -> list[int]:
        """WriteTxnMarkers for one producer: the error code of each partition."""
        request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=committed, coordinator_epoch=coordinator_epoch,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic or self.topic,
                                                                 partition_indexes=list(partitions))])])
        response = self.conn.send(request, MARKERS_VERSION)
        [marker] = response.markers
        assert marker.producer_id == pid
        return [p.error_code for t in marker.topics for p in t.partitions]
