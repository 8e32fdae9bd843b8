"""A follower replica's fetches from its leader: Kafka's own follower Fetch (replica id and epoch,
current leader epoch, fetch offset, last fetched epoch), sent over a kept-open TCP connection to
the leader's broker, the same listener clients use, long-polled like a consumer's fetch.

Sans-Ray: `encode_fetch` and `decode_fetch` are pure (bytes in, answers out); `LeaderConnection`
is the socket. The replication core (replication.py) decides what to ask and what an answer
means; the partition actor's shell loops: next_fetch -> fetch -> on_fetch_response -> act.
"""
from __future__ import annotations

import uuid

from actors.partition.epoch_cache import EpochEndOffset
from actors.partition.replication import FetchAnswer, FetchRequest
from actors.pipelined import PipelinedConnection
from protocol.errors import MalformedMessage
from protocol import primitives
from protocol.headers import RequestHeader, encode_request
from protocol.messages import FetchRequest as KafkaFetchRequest, FetchResponse as KafkaFetchResponse

FETCH_VERSION = 16              # ReplicaState (v15+), topic ids (v13+), diverging epochs (v12+)
FETCH_API_KEY = 1
CONNECT_TIMEOUT_S = 5.0
CLIENT_ID = "kray-replica-fetcher"


def encode_fetch(correlation_id: int, topic_id: uuid.UUID, partition: int, request: FetchRequest, *,
                 broker_epoch: int, max_wait_ms: int, max_bytes: int) -> bytes:
    body = KafkaFetchRequest(
        replica_state=KafkaFetchRequest.ReplicaState(replica_id=request.replica_id, replica_epoch=broker_epoch),
        max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[KafkaFetchRequest.FetchTopic(topic_id=topic_id, partitions=[KafkaFetchRequest.FetchPartition(
            partition=partition, current_leader_epoch=request.current_leader_epoch,
            fetch_offset=request.fetch_offset, last_fetched_epoch=request.last_fetched_epoch,
            log_start_offset=-1, partition_max_bytes=max_bytes)])],
    ).encode(FETCH_VERSION)
    return encode_request(RequestHeader(FETCH_API_KEY, FETCH_VERSION, correlation_id, CLIENT_ID), body)


def decode_fetch(body_after_correlation_id: memoryview, partition: int) -> tuple[FetchAnswer, memoryview]:
    """The leader's answer for our one partition, and its records."""
    _, pos = primitives.read_tagged_fields(body_after_correlation_id, 0)  # response header v1
    response = KafkaFetchResponse.decode(body_after_correlation_id[pos:], FETCH_VERSION)
    if response.error_code:
        return FetchAnswer(response.error_code), memoryview(b"")
    for topic in response.responses:
        for p in topic.partitions:
            if p.partition_index != partition:
                continue
            diverging = p.diverging_epoch
            diverging = (EpochEndOffset(diverging.epoch, diverging.end_offset)
                         if diverging is not None and diverging.end_offset >= 0 else None)
            # log end offset: Kafka's follower fetch answers carry none; ours is unknown (-1) then
            return (FetchAnswer(p.error_code, p.high_watermark, p.log_start_offset, -1, diverging),
                    memoryview(p.records or b""))
    raise MalformedMessage(f"the leader's fetch answer has no partition {partition}")


class LeaderConnection:
    """A kept-open connection to the broker leading a partition (one per follower replica)."""

    def __init__(self, host: str, port: int, *, response_bytes_max: int):
        self.host, self.port = host, port
        self.response_bytes_max = response_bytes_max
        self.connection: PipelinedConnection | None = None

    async def fetch(self, topic_id: uuid.UUID, partition: int, request: FetchRequest, *, broker_epoch: int,
                    max_wait_ms: int, max_bytes: int, timeout_s: float) -> tuple[FetchAnswer, memoryview]:
        if self.connection is None or not self.connection.usable:
            self.connection = await PipelinedConnection.open_tcp(
                self.host, self.port, timeout_s=CONNECT_TIMEOUT_S, response_bytes_max=self.response_bytes_max)
        body = await self.connection.call(
            lambda cid: [encode_fetch(cid, topic_id, partition, request, broker_epoch=broker_epoch,
                                      max_wait_ms=max_wait_ms, max_bytes=max_bytes)], timeout_s)
        return decode_fetch(body, partition)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

