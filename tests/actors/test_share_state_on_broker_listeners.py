"""Share state rides on the broker's own listeners (issue 17: no port a firewall must open beside
the broker's): the share coordinator opens no TCP listener of its own, and Kafka's share-state APIs
(keys 83-87) sent to the broker's listener reach it. Bad input there (garbage, a truncated frame,
oversized frames) and invalid writes get a closed connection or an error code, and the share state
of a live group stays intact (its acknowledged records are not delivered again)."""
import socket
import struct
import time
import uuid

import psutil
import ray
from confluent_kafka import AcknowledgeType, ShareConsumer

from actors import internal_topics
from cluster.admin import KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import ReadShareGroupStateSummaryRequest as S, WriteShareGroupStateRequest as W
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


def kray_listening_ports() -> dict[int, set]:
    """pid -> the TCP ports it listens on, for every process of Kray's actors (their process titles
    are Ray's `ray::<ActorClass>...`), Ray's own ports included."""
    out = {}
    for process in psutil.process_iter(["pid", "cmdline"]):
        title = " ".join(process.info["cmdline"] or ())
        if not any(title.startswith(f"ray::{actor}") for actor in ("ShardActor", "GatewayActor", "ControllerActor")):
            continue
        try:
            out[process.pid] = {c.laddr.port for c in process.net_connections(kind="tcp")
                                if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            continue
    return out


def test_share_state_opens_no_listener_and_bad_input_to_the_broker_loses_no_share_state(broker):
    before = kray_listening_ports()
    assert before, "Kray's actor processes were not found"
    topic, group = "state-on-broker-listener", "state-on-broker-listener-group"
    queue_with_records(broker.bootstrap, topic, group, 40)
    first = consume(broker.bootstrap, group, topic, 20)
    assert len(first) >= 20

    # share state was written (the coordinator's summary moved past the accepted records) and no
    # process of Kray listens on a TCP port it did not listen on before: the broker's listener (and
    # Ray's own ports) only; the coordinator's shard is reached over its Unix socket
    image = ray.get(broker.controller.ensure_internal_topic.remote(internal_topics.SHARE_GROUP_STATE))
    index = share_state_partition(image, group, topic, 0)
    coordinator = image.coordinators[(internal_topics.SHARE_GROUP_STATE, index)]
    topic_id = image.topics[topic].topic_id
    summary = ray.get(coordinator.read_state_summary.remote(group, topic_id, 0))
    assert summary.error_code == 0 and summary.start_offset >= 1, summary
    after = kray_listening_ports()
    # (the processes this broker had before: another Kray on the machine, a developer's test run beside this one,
    # starts actors of the same names, with listeners of their own)
    new = {pid: ports - before[pid] for pid, ports in after.items() if pid in before and ports - before[pid]}
    assert not new, f"Kray's processes listen on new TCP ports: {new}"
    gateway_port = int(broker.bootstrap.rsplit(":", 1)[1])
    assert any(gateway_port in ports for ports in after.values())

    address = tuple(broker.bootstrap.rsplit(":", 1))
    address = (address[0], int(address[1]))
    assert closed_after(address, b"\x00\x00\x00\x10garbage-garbage!")
    assert closed_after(address, struct.pack(">i", 100) + b"\x00\x55", half_close=True)  # truncated
    assert closed_after(address, struct.pack(">i", 1 << 30))  # far over socket.request.max.bytes

    def write_request(**kw):
        part = dict(partition=0, state_epoch=0, leader_epoch=0, start_offset=0, delivery_complete_count=-1,
                    state_batches=[])
        part.update(kw)
        return W(group_id=group, topics=[W.WriteStateData(topic_id=kw.pop("topic_id", topic_id), partitions=[
            W.PartitionData(**{k: v for k, v in part.items() if k != "topic_id"})])])

    # the broker's listener serves the share-state APIs (PLAINTEXT without an authorizer: allowed,
    # as in Kafka); invalid writes are refused by the coordinator, whoever sends them
    with KafkaConnection(broker.bootstrap) as conn:
        assert {83, 84, 85, 86, 87} <= set(conn.versions)
        codes = [conn.send(write_request(**kw), 1).results[0].partitions[0].error_code
                 for kw in (dict(state_epoch=-5),
                            dict(state_batches=[W.StateBatch(first_offset=9, last_offset=3, delivery_state=2,
                                                             delivery_count=1)]),
                            dict(topic_id=uuid.uuid4()))]
        assert codes[:2] == [ErrorCode.INVALID_REQUEST] * 2, "invalid writes, even a broker's"
        assert codes[2] in (ErrorCode.INVALID_REQUEST, ErrorCode.NOT_COORDINATOR)  # another key, another coordinator
        read = conn.send(S(group_id=group, topics=[S.ReadStateSummaryData(topic_id=topic_id, partitions=[
            S.PartitionData(partition=0, leader_epoch=0)])]), 1).results[0].partitions[0]
        assert (read.error_code, read.start_offset) == (0, summary.start_offset)

    rest = consume(broker.bootstrap, group, topic, 40 - len(first))
    assert not set(first) & set(rest), "records acknowledged before the bad input came back"
    assert sorted(first + rest) == list(range(40))
