"""A compacted topic (cleanup.policy=compact) against a real `kray start`, with confluent-kafka:
the log cleaner keeps the latest record per key at its offset while producers and consumers go
on, and a record without a key is refused with INVALID_RECORD."""
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kray_process import KrayProcess

TOPIC = "compacted"
KEYS = [f"k{i}" for i in range(20)]
UPDATES = 2000


def read_from_zero(bootstrap: str, end_offset: int, timeout_s: float = 20) -> list:
    """(offset, key, value) of every record from offset 0 to ``end_offset``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    out, deadline = [], time.monotonic() + timeout_s
    try:
        while (not out or out[-1][0] < end_offset - 1) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key().decode(), m.value().decode()))
    finally:
        c.close()
    return out


def test_the_cleaner_keeps_the_latest_record_per_key_while_clients_go_on(tmp_path):
    server = KrayProcess(tmp_path / "data", overrides=("log.cleaner.backoff.ms=200",))
    bootstrap = server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "20000"})])[TOPIC].result(30)
        errors = []
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 8000})

        def on_delivery(err, _msg):
            if err:
                errors.append(err)
        latest = {}
        for n in range(UPDATES):
            key = KEYS[n % len(KEYS)]
            latest[key] = f"{key}:{n}:" + "v" * 150
            p.produce(TOPIC, key=key, value=latest[key], partition=0, on_delivery=on_delivery)
            p.poll(0)
        assert p.flush(30) == 0 and errors == []

        # a record without a key: refused, as Kafka refuses it on a compacted topic
        refused = []
        p.produce(TOPIC, value=b"no key", partition=0, on_delivery=lambda e, m: refused.append(e))
        p.flush(30)
        assert [e.code() for e in refused] == [KafkaError.INVALID_RECORD], refused

        # while the cleaner works: a producer keeps updating one key, a consumer keeps fetching
        stop = threading.Event()
        filler = {"sent": 0, "last": None}
        fetched = {"count": 0, "last_offset": -1, "errors": []}

        def keep_producing():
            n = 0
            while not stop.is_set():
                filler["last"] = f"filler:{n}:" + "f" * 150
                p.produce(TOPIC, key="filler", value=filler["last"], partition=0, on_delivery=on_delivery)
                p.poll(0)
                n += 1
                filler["sent"] = n
                time.sleep(0.002)

        def keep_fetching():
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False})
            c.assign([TopicPartition(TOPIC, 0, 0)])
            while not stop.is_set():
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    fetched["errors"].append(m.error())
                else:
                    fetched["count"] += 1
                    fetched["last_offset"] = m.offset()
            c.close()
        threads = [threading.Thread(target=keep_producing), threading.Thread(target=keep_fetching)]
        for t in threads:
            t.start()
        partition_dir = next(Path(tmp_path / "data").rglob(f"{TOPIC}-0"))
        started = time.monotonic()
        try:
            while time.monotonic() - started < 40:
                cleaned = list(partition_dir.glob("*.c*.log"))
                if cleaned and filler["sent"] > 800:
                    break
                time.sleep(0.2)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        assert p.flush(30) == 0 and errors == []
        assert cleaned, sorted(f.name for f in partition_dir.iterdir())
        # the tailing reader got past the first updates into what was written while the cleaner
        # worked (records cleaned before it came are gaps it skips)
        assert fetched["errors"] == [] and fetched["last_offset"] >= UPDATES, fetched

        # the keys' last updates lie in cleaned segments now: once their round ran, a reader
        # from offset 0 meets each of them once, at the offset it was written, with its latest value
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
        _low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)
        c.close()
        assert high == UPDATES + filler["sent"]
        deadline = time.monotonic() + 30
        while True:
            rows = read_from_zero(bootstrap, high)
            keyed = [r for r in rows if r[1] != "filler"]
            if len(keyed) == len(KEYS) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert sorted(keyed) == sorted((UPDATES - len(KEYS) + i, k, latest[k]) for i, k in enumerate(KEYS))
        offsets = [r[0] for r in rows]
        assert offsets == sorted(set(offsets)) and offsets[-1] == high - 1
        assert len(rows) < UPDATES, "superseded records were cleaned away"
        assert rows[-1] == (high - 1, "filler", filler["last"])
    finally:
        server.stop()


def test_records_without_a_key_are_named_in_produce_record_errors(kray):
    """Produce v8+ (KIP-467) names each refused record (batch_index) with a message; earlier
    versions get the partition's INVALID_RECORD alone. Nothing of the batch is written."""
    from cluster.admin import KafkaConnection
    from protocol.errors import ErrorCode
    from protocol.messages import ProduceRequest
    from protocol.record_batch import build_batch

    name = "compacted-keys"
    admin = AdminClient({"bootstrap.servers": kray})
    admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": "compact,delete"})])[name].result(30)

    def produce(records, version):
        with KafkaConnection(kray) as conn:
            request = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
                name=name, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
            return conn.send(request, version).responses[0].partition_responses[0]
    mixed = build_batch([(b"a", b"1", [], 1), (None, b"2", [], 1), (b"b", b"3", [], 1), (None, b"4", [], 1)])
    r = produce(mixed, 9)
    assert r.error_code == ErrorCode.INVALID_RECORD and r.error_message
    assert [(e.batch_index, bool(e.batch_index_error_message)) for e in r.record_errors] == [(1, True), (3, True)]
    assert produce(mixed, 7).error_code == ErrorCode.INVALID_RECORD
    ok = produce(build_batch([(b"a", b"1", [], 1)]), 9)
    assert (ok.error_code, ok.base_offset) == (0, 0), "the refused batches wrote nothing"
