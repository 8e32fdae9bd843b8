"""Retention deletes whole segments on the broker's timer and advances the log start offset; their
files (renamed *.deleted first) and, after DeleteTopics, the partition's directory (renamed
*-delete first) leave the disk soon after, off the shard's event loop."""
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kray_process import KrayProcess


def test_retention_bytes_deletes_old_segments(tmp_path):
    server = KrayProcess(tmp_path / "data", overrides=("log.retention.check.interval.ms=300",))
    bootstrap = server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("short", 1, 1, config={
            "segment.bytes": "20000", "retention.bytes": "40000"})])["short"].result(30)
        # batches must stay below segment.bytes (else RECORD_LIST_TOO_LARGE, as in Kafka)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 8000})
        errors = []
        for i in range(300):
            p.produce("short", value=b"x" * 1000, partition=0, on_delivery=lambda e, m: errors.append(e) if e else None)
            p.poll(0)
        assert p.flush(30) == 0 and errors == []
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "retention", "auto.offset.reset": "earliest"})
        # retention passes ran while the producer wrote: wait until a pass after the last write has
        # run (the log start stays put for several check intervals), else the offset read here may
        # be deleted before the fetch below
        low = high = 0
        seen, stable_since, deadline = None, time.monotonic(), time.monotonic() + 30
        while time.monotonic() < deadline:
            low, high = c.get_watermark_offsets(TopicPartition("short", 0), timeout=10, cached=False)
            if (low, high) != seen:
                seen, stable_since = (low, high), time.monotonic()
            elif low > 0 and time.monotonic() - stable_since >= 3:
                break
            time.sleep(0.3)
        assert high == 300
        assert 0 < low < 300 and high - low <= 100, (low, high)  # ~40 kB kept, whole segments only
        c.assign([TopicPartition("short", 0, low)])
        first = next(m for m in iter(lambda: c.poll(5.0), None) if m.error() is None)
        assert first.offset() == low, "the log start offset serves its record"
        c.close()
        partition_dir = next(Path(tmp_path / "data").rglob("short-0"))
        assert _soon(lambda: not list(partition_dir.glob("*.deleted"))), list(partition_dir.iterdir())
        kept_bytes = sum(p.stat().st_size for p in partition_dir.glob("*.log"))
        assert kept_bytes <= 40000 + 20000  # retention.bytes, and the active segment
        admin.delete_topics(["short"])["short"].result(30)
        broker_dir = partition_dir.parent
        assert _soon(lambda: not [p for p in broker_dir.iterdir() if p.name.startswith("short-")]), \
            list(broker_dir.iterdir())
    finally:
        server.stop()


def _soon(check, timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
