"""A compacted topic (cleanup.policy=compact) against a real `kray start`, with confluent-kafka:
the log cleaner keeps the latest record per key at its offset while producers and consumers go
on, a record without a key is refused with INVALID_RECORD, and a share group reading the topic
never gets back a record the cleaner removed while it was in flight (KIP-932 "Log compaction")."""
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import AcknowledgeType, Consumer, KafkaError, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from tests.kray_process import KrayProcess

TOPIC = "compacted"
KEYS = [f"k{i}" for i in range(20)]
UPDATES = 2000
KRAY = str(Path(sys.executable).parent / "kray")


def read_from_zero(bootstrap: str, end_offset: int, timeout_s: float = 20, topic: str = TOPIC) -> list:
    """(offset, key, value) of every record from offset 0 to ``end_offset``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
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
            while not read_enough.is_set():
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    fetched["errors"].append(m.error())
                else:
                    fetched["count"] += 1
                    fetched["last_offset"] = m.offset()
            c.close()
        # the reader goes on after the producer stops, until it is past the first updates (on a loaded machine
        # it can be behind them when the cleaner has done its work)
        read_enough = threading.Event()
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
            threads[0].join(30)
            behind_until = time.monotonic() + 30
            while fetched["last_offset"] < UPDATES and time.monotonic() < behind_until:
                time.sleep(0.2)
            read_enough.set()
            threads[1].join(30)
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


def test_a_share_group_never_gets_back_records_cleaned_away_while_in_flight(tmp_path):
    """KIP-932 "Log compaction": records in flight may be cleaned away; their delivery goes on as
    normal, and the disappearance shows when they are next fetched. A member holds the first
    records of a topic (acquired, not acknowledged) while the topic turns compacted and the
    cleaner removes them; it then RELEASEs them. What the group delivers next is exactly what the
    log still holds, each record once, none of those cleaned away, and the share-partition's start
    offset reaches the log end (nothing left in flight for offsets that no longer exist)."""
    name, group, records = "share-compacted", "share-compacted-group", 1000
    server = KrayProcess(tmp_path / "data", overrides=("log.cleaner.backoff.ms=200",
                                                       "group.share.record.lock.duration.ms=30000"))
    bootstrap = server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(name, 1, 1, config={  # compacted only once records are in flight
            "cleanup.policy": "delete", "segment.bytes": "20000", "min.cleanable.dirty.ratio": "0.01"})])[name].result(30)
        for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
                ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
                ]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 8000})
        for n in range(records):
            key = KEYS[n % len(KEYS)]
            p.produce(name, key=key, value=f"{key}:{n}:" + "v" * 150, partition=0)
        assert p.flush(30) == 0

        member = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "share.acknowledgement.mode": "explicit", "max.poll.records": records})
        member.subscribe([name])
        held, deadline = [], time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            held = [m for m in member.poll(1.0) if m.error() is None]
        assert held and held[0].offset() == 0, "the member holds the topic's first records"

        for f in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])]).values():
            f.result(30)
        held_offsets, deadline = {m.offset() for m in held}, time.monotonic() + 60
        while True:  # until the cleaner has removed some of the held records (a short read is no sign of it)
            remaining = [r[0] for r in read_from_zero(bootstrap, records, topic=name)]
            if (held_offsets - set(remaining) and remaining and remaining[-1] == records - 1) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert held_offsets - set(remaining), "the cleaner removed records the member held"

        for m in held:
            member.acknowledge(m, AcknowledgeType.RELEASE)
        member.commit_sync()
        delivered, deadline = [], time.monotonic() + 30
        while len(set(delivered)) < len(remaining) and time.monotonic() < deadline:
            for m in member.poll(1.0):
                assert m.error() is None, m.error()
                delivered.append(m.offset())
                member.acknowledge(m, AcknowledgeType.ACCEPT)
            member.commit_sync()
        member.close()
        assert sorted(delivered) == remaining, "exactly what the log holds now, each record once"
        described = subprocess.run([KRAY, "share-groups", "--describe", "--group", group, "--bootstrap-server",
                                    bootstrap], capture_output=True, text=True, timeout=60).stdout
        row = next(line.split() for line in described.splitlines() if line.startswith(group))
        assert row[3:] == [str(records), "0"], described  # start offset at the log end, no lag
    finally:
        server.stop()


def test_the_transaction_state_log_is_compacted_and_replays_after_a_restart(tmp_path):
    """__transaction_state is compacted by the log cleaner (Kafka's cleanup.policy=compact for it):
    a transactional producer's records (several per transaction) shrink to about the latest per
    transactional id, and a coordinator that replays the cleaned log after a restart still knows
    the id: the next producer with it keeps its producer id with the epoch bumped (a lost state
    would give a new producer id), and read_committed readers see every committed record."""
    name, txn_id, transactions = "txn-compacted", "txn-compacted-id", 200
    overrides = ("log.cleaner.backoff.ms=200", "transaction.state.log.segment.bytes=20000",
                 "transaction.state.log.num.partitions=1")
    data = tmp_path / "data"
    kray_bin = str(Path(sys.executable).parent / "kray")

    def describe(bootstrap):
        out = subprocess.run([kray_bin, "transactions", "--bootstrap-server", bootstrap, "--describe",
                              "--transactional-id", txn_id], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        header, row = out.stdout.splitlines()[:2]
        fields = dict(zip(header.split("\t"), row.split("\t")))
        return fields["ProducerId"], int(fields["ProducerEpoch"])

    def commit(bootstrap, count, first):
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        p.init_transactions(30)
        for n in range(first, first + count):
            p.begin_transaction()
            p.produce(name, value=str(n).encode(), partition=0)
            p.commit_transaction(30)
        p.flush(10)

    server = KrayProcess(data, overrides=overrides)
    bootstrap = server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        commit(bootstrap, transactions, 0)
        state_records, deadline = [], time.monotonic() + 30
        while True:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"state-{time.monotonic_ns()}",
                          "enable.auto.commit": False})
            _, end = c.get_watermark_offsets(TopicPartition("__transaction_state", 0), timeout=10)
            c.assign([TopicPartition("__transaction_state", 0, 0)])
            state_records, idle_until = [], time.monotonic() + 3
            while time.monotonic() < idle_until and (not state_records or state_records[-1] < end - 1):
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    state_records.append(m.offset())
            c.close()
            if len(state_records) < end / 3 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert end >= 2 * transactions, f"{end} records for {transactions} transactions"
        assert len(state_records) < end / 3, f"{len(state_records)} of {end} records left: not compacted"
        producer_id, epoch = describe(bootstrap)
    finally:
        server.stop()

    server = KrayProcess(data, overrides=overrides)
    bootstrap = server.start()
    try:
        commit(bootstrap, 1, transactions)
        assert describe(bootstrap) == (producer_id, epoch + 1), "the replayed state kept the producer id"
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                      "isolation.level": "read_committed", "enable.auto.commit": False})
        c.assign([TopicPartition(name, 0, 0)])
        values, deadline = set(), time.monotonic() + 30
        while len(values) < transactions + 1 and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                if m.error() is None:
                    values.add(int(m.value()))
        c.close()
        assert values == set(range(transactions + 1))
    finally:
        server.stop()
