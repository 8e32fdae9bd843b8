"""The share coordinator's state listener against bad input: garbage, a truncated frame, an API it
does not serve, a write from anyone but a broker and a broker's invalid writes each get a closed
connection or an error code, and the share state of a live group stays intact (its acknowledged
records are not delivered again)."""
import asyncio
import socket
import struct
import time
import uuid

import pytest
import ray
from confluent_kafka import AcknowledgeType, ShareConsumer

from actors import internal_topics
from actors.share_partition.state_client import StateConnection
from cluster.admin import AdminError, KafkaConnection
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

    def write_request(**kw):
        part = dict(partition=0, state_epoch=0, leader_epoch=0, start_offset=0, delivery_complete_count=-1,
                    state_batches=[])
        part.update(kw)
        return W(group_id=group, topics=[W.WriteStateData(topic_id=kw.pop("topic_id", topic_id), partitions=[
            W.PartitionData(**{k: v for k, v in part.items() if k != "topic_id"})])])

    # not a broker: a share-state request without logging in gets no answer but a close
    with KafkaConnection(f"{address[0]}:{address[1]}") as conn:
        with pytest.raises(AdminError, match="closed"):
            conn.send(write_request(start_offset=10**9), 1)

    broker_config = ray.get(broker.controller.broker_configs.remote())  # holds the cluster's secret

    async def broker_writes():  # logged in as the broker
        connection = await StateConnection.open(*address, 10, broker_config)
        try:
            return [(await connection.call(write_request(**kw), 1, 10)).results[0].partitions[0].error_code
                    for kw in (dict(partition=-1), dict(state_epoch=-5),
                               dict(state_batches=[W.StateBatch(first_offset=9, last_offset=3, delivery_state=2,
                                                                delivery_count=1)]),
                               dict(topic_id=uuid.uuid4()))]
        finally:
            connection.close()
    assert asyncio.run(broker_writes()) == [ErrorCode.INVALID_REQUEST] * 4, "invalid writes, even a broker's"

    rest = consume(broker.bootstrap, group, topic, 40 - len(first))
    assert not set(first) & set(rest), "records acknowledged before the bad input came back"
    assert sorted(first + rest) == list(range(40))
