"""The share coordinator's state listener against bad input: garbage, a truncated frame, an API it
does not serve and invalid writes each get a closed connection or an error code, and the share
state of a live group stays intact (its acknowledged records are not delivered again)."""
import socket
import struct
import time
import uuid

import ray
from confluent_kafka import AcknowledgeType, ShareConsumer

from actors import internal_topics
from cluster.admin import KafkaConnection
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader, encode_request
from protocol.messages import MetadataRequest, WriteShareGroupStateRequest as W
from tests.actors.queues import queue_with_records
from tests.coordinators import share_state_partition


def closed_after(address, data: bytes, half_close=False) -> bool:
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(data)
        if half_close:  # a client that leaves mid-frame
            s.shutdown(socket.SHUT_WR)
        try:
            return s.recv(1) == b""
        except ConnectionResetError:
            return True


def consume(bootstrap, group, topic, count, timeout_s=60):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                       "max.poll.records": 10})
    c.subscribe([topic])
    keys, deadline = [], time.monotonic() + timeout_s
    while len(keys) < count and time.monotonic() < deadline:
        for m in c.poll(1.0):
            if m.error() is None:
                keys.append(int(m.key()))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
    c.close()
    return keys


def test_bad_input_to_the_state_listener_loses_no_share_state(broker):
    topic, group = "state-listener-fuzz", "state-listener-group"
    queue_with_records(broker.bootstrap, topic, group, 40)
    first = consume(broker.bootstrap, group, topic, 20)
    assert len(first) >= 20

    image = ray.get(broker.controller.ensure_internal_topic.remote(internal_topics.SHARE_GROUP_STATE))
    coordinator = image.coordinators[(internal_topics.SHARE_GROUP_STATE, share_state_partition(image, group, topic, 0))]
    address = tuple(ray.get(coordinator.state_listener.remote()))
    assert closed_after(address, b"\x00\x00\x00\x10garbage-garbage!")
    assert closed_after(address, struct.pack(">i", 100) + b"\x00\x55", half_close=True)  # truncated
    assert closed_after(address, encode_request(RequestHeader(3, 12, 1, "x"), MetadataRequest(topics=None).encode(12)))
    assert closed_after(address, struct.pack(">i", 1 << 30))  # far over socket.request.max.bytes

    topic_id = image.topics[topic].topic_id
    with KafkaConnection(f"{address[0]}:{address[1]}") as conn:
        def write(**kw):
            part = dict(partition=0, state_epoch=0, leader_epoch=0, start_offset=0, delivery_complete_count=-1,
                        state_batches=[])
            part.update(kw)
            r = conn.send(W(group_id=group, topics=[W.WriteStateData(topic_id=topic_id, partitions=[
                W.PartitionData(**part)])]), 1)
            return r.results[0].partitions[0].error_code
        assert write(partition=-1) == ErrorCode.INVALID_REQUEST
        assert write(state_epoch=-5) == ErrorCode.INVALID_REQUEST
        assert write(state_batches=[W.StateBatch(first_offset=9, last_offset=3, delivery_state=2,
                                                 delivery_count=1)]) == ErrorCode.INVALID_REQUEST
        unknown = conn.send(W(group_id=group, topics=[W.WriteStateData(topic_id=uuid.uuid4(), partitions=[
            W.PartitionData(partition=0, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=[])])]), 1)
        assert unknown.results[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST, "never initialized"

    rest = consume(broker.bootstrap, group, topic, 40 - len(first))
    assert not set(first) & set(rest), "records acknowledged before the bad input came back"
    assert sorted(first + rest) == list(range(40))
