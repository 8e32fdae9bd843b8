"""A broker whose disk fills up (issue 37: an error in a Kray actor that a user's request hit reaches
`kray start`'s console once, with the fix). A real `kray start` with its data directory (and so its
server.log) on a small tmpfs, filled: the producer is answered KAFKA_STORAGE_ERROR, the console says
once which directory and what to do, with no traceback; once space is freed produce works again, and
every record acknowledged before is there. Needs root (mount)."""
import errno
import os
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from cluster.admin import KafkaConnection
from protocol import messages as m
from protocol.record_batch import build_batch
from tests.kray_process import KrayProcess

KAFKA_STORAGE_ERROR = 56
RECORD_BYTES = 64 * 1024

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="mounts a tmpfs: needs root")


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)]).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)])


def produce(conn, topic: str, value: bytes) -> tuple[int, int, str | None]:
    """One acks=all Produce of one record: (error code, base offset, error message)."""
    r = conn.send(m.ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        m.ProduceRequest.TopicProduceData(name=topic, partition_data=[m.ProduceRequest.PartitionProduceData(
            index=0, records=build_batch([(None, value, [], int(time.time() * 1000))]))])]), 12)
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset, p.error_message


def fill(path) -> None:
    """Write `path` until the file system has no byte left."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096, b"\0" * 512):
            try:
                while True:
                    f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def test_a_full_disk_answers_kafka_storage_error_says_so_once_and_loses_nothing(small_disk):
    server = KrayProcess(small_disk / "data")
    bootstrap = server.start()
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    try:
        with KafkaConnection(bootstrap, client_id="disk-full") as conn:
            C = m.CreateTopicsRequest
            conn.send(C(topics=[C.CreatableTopic(name=topic, num_partitions=1, replication_factor=1, assignments=[],
                                                 configs=[])], timeout_ms=30_000, validate_only=False))
            acknowledged = {}
            while len(acknowledged) < 20:
                value = b"%04d" % len(acknowledged) + os.urandom(RECORD_BYTES - 4)
                error, offset, _ = produce(conn, topic, value)
                if error in (3, 5, 6) and not acknowledged:  # the new topic's leader: not yet
                    time.sleep(0.2)
                    continue
                assert error == 0, error
                acknowledged[offset] = value
            ready_lines = len(server.output)

            fill(small_disk / "ballast")
            answers = [produce(conn, topic, b"after the disk filled" + os.urandom(RECORD_BYTES)) for _ in range(5)]
            assert {error for error, _, _ in answers} == {KAFKA_STORAGE_ERROR}, answers
            assert "No space left on device" in answers[0][2]

            def storage_lines():
                return [line for line in server.output[ready_lines:] if "cannot write to the log directory" in line]
            assert wait_for(lambda: storage_lines(), 30), "\n".join(server.output)
            time.sleep(3)  # (more requests failed meanwhile: still one line)
            assert produce(conn, topic, os.urandom(RECORD_BYTES))[0] == KAFKA_STORAGE_ERROR
            time.sleep(3)
            assert len(storage_lines()) == 1, "\n".join(server.output[ready_lines:])
            [line] = storage_lines()
            broker_dir = (small_disk / "data" / "broker-0").resolve()
            assert line.startswith(f"kray start: error in kray.storage: cannot write to the log directory {broker_dir}: "
                                   "[Errno 28] No space left on device: free space there"), line
            after = server.output[ready_lines:]
            assert not any("Traceback" in line or line.startswith("  File ") for line in after), "\n".join(after)

            (small_disk / "ballast").unlink()  # space again: Kray writes again, without a restart
            assert wait_for(lambda: produce(conn, topic, b"after space was freed")[0] == 0, 30)
    finally:
        server.stop()
    assert server.output[-1].startswith("Kray stopped"), "\n".join(server.output)

    server = KrayProcess(small_disk / "data")  # and after a restart: every acknowledged record, as written
    bootstrap = server.start()
    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                             "fetch.message.max.bytes": 1 << 20})
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen, deadline = {}, time.monotonic() + 60
        while len(seen) < len(acknowledged) + 1 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                seen[message.offset()] = message.value()
        consumer.close()
    finally:
        server.stop()
    assert {offset: seen.get(offset) for offset in acknowledged} == acknowledged
    assert seen[max(acknowledged) + 1] == b"after space was freed"  # the failed requests left nothing behind
    assert len(seen) == len(acknowledged) + 1
