"""Key-ordered sharing (share.key.ordering.enable, issue 20) with confluent-kafka ShareConsumers
against a real `kray start`: several unchanged consumers share a group; records of one key reach
them one at a time and are processed in offset order across releases, a member leaving with
records in hand and locks expiring; nothing is lost. The config is set and described like Kafka's group configs."""
import threading
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)

from tests.kray_process import KrayProcess

LOCK_MS = 5000
OVERRIDES = (f"group.share.record.lock.duration.ms={LOCK_MS}", "group.share.min.record.lock.duration.ms=1000",
             "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500")
RECORDS, KEYS, PARTITIONS, CONSUMERS = 3000, 30, 2, 3


@pytest.fixture(scope="module")
def kray_keys(tmp_path_factory):
    server = KrayProcess(tmp_path_factory.mktemp("kray-keys"), overrides=OVERRIDES)
    yield server.start()
    server.stop()


def set_group_configs(bootstrap, group, configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                             incremental_configs=entries)]).values():
        f.result(30)


def produce_keyed(bootstrap, topic):
    """RECORDS records over KEYS keys, lz4-compressed batches (the leader decompresses them to
    read keys), every 10th record with a null key; returns (partition, key) -> offsets in order."""
    offsets = defaultdict(list)

    def delivered(err, msg):
        assert err is None, err
        offsets[(msg.partition(), msg.key())].append(msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    for i in range(RECORDS):
        key = None if i % 10 == 9 else b"key-%d" % (i % KEYS)
        p.produce(topic, key=key, value=b"%d" % i, partition=i % PARTITIONS, on_delivery=delivered)
        p.poll(0)
    assert p.flush(30) == 0
    return {k: sorted(v) for k, v in offsets.items()}


def test_per_key_order_across_releases_and_a_member_leaving(kray_keys):
    name = uuid.uuid4().hex[:8]
    topic, group = f"q-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": kray_keys})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    set_group_configs(kray_keys, group, {"share.auto.offset.reset": "earliest", "share.key.ordering.enable": "true"})
    expected = produce_keyed(kray_keys, topic)

    lock = threading.Lock()
    held = {}                        # (partition, key) -> offset a consumer has in hand (keyed records)
    accepted = defaultdict(list)     # (partition, key) -> offsets accepted, in the order they were
    done = set()                     # (partition, offset) of every record accepted
    released = set()
    violations = []
    leaver_left = threading.Event()
    stop = time.monotonic() + 45

    def check_receipt(m):
        p, key, o = m.partition(), m.key(), m.offset()
        with lock:
            if (p, o) in done:
                violations.append(f"accepted record {p}/{o} delivered again")
            if key is None:
                return
            if (p, key) in held:
                violations.append(f"{key!r} at {p}/{o} delivered while {p}/{held[(p, key)]} is in hand")
            earlier = [x for x in expected[(p, key)] if x < o and (p, x) not in done]
            if earlier:
                violations.append(f"{key!r} at {p}/{o} delivered before {p}/{earlier[0]} was processed")
            held[(p, key)] = o

    def finish(m, how):
        p, key, o = m.partition(), m.key(), m.offset()
        with lock:
            if key is not None:
                held.pop((p, key), None)
            if how == AcknowledgeType.ACCEPT:
                done.add((p, o))
                accepted[(p, key)].append(o)
            elif how == AcknowledgeType.RELEASE:
                released.add((p, o))

    leaver = CONSUMERS - 1
    leaver_holds = threading.Event()

    def work(k):
        if k != leaver:
            # the others join once the leaver has records in hand, so that it surely leaves with some
            # while the others are taking records (of other keys, and of its keys only after it left)
            assert leaver_holds.wait(30), "the leaving member got no records in 30 s"
        c = ShareConsumer({"bootstrap.servers": kray_keys, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        try:
            while time.monotonic() < stop:
                with lock:
                    if len(done) >= RECORDS:
                        break
                got = [m for m in c.poll(0.5) if m.error() is None]
                if k == leaver and got:
                    # this member leaves with records in hand: the broker releases them when it
                    # goes, and they must go out again before anything later of their keys
                    for m in got:
                        check_receipt(m)
                    leaver_holds.set()
                    time.sleep(2)           # the others poll meanwhile
                    for m in got:
                        finish(m, None)     # out of its hands before its session closes
                    leaver_left.set()
                    return
                for m in got:
                    check_receipt(m)
                    if m.offset() % 7 == 0 and m.delivery_count() == 1:
                        finish(m, AcknowledgeType.RELEASE)
                        c.acknowledge(m, AcknowledgeType.RELEASE)
                    else:
                        finish(m, AcknowledgeType.ACCEPT)
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                if got:
                    c.commit_sync()
        finally:
            c.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(CONSUMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not violations, violations[:10]
    assert len(done) == RECORDS, f"{RECORDS - len(done)} records never processed"
    assert leaver_left.is_set(), "the leaving member never left with records in hand"
    assert released, "some records were released"
    for (p, key), offsets in expected.items():
        if key is not None:
            assert accepted[(p, key)] == offsets, f"{key!r} on partition {p} processed out of offset order"


def test_key_ordering_is_a_described_group_config(kray_keys):
    group, other = f"g-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    set_group_configs(kray_keys, group, {"share.key.ordering.enable": "true"})
    admin = AdminClient({"bootstrap.servers": kray_keys})
    described = {r.name: f.result(30) for r, f in admin.describe_configs(
        [ConfigResource(ResourceType.GROUP, group), ConfigResource(ResourceType.GROUP, other)]).items()}
    entry = described[group]["share.key.ordering.enable"]
    assert (entry.value, entry.source) == ("true", ConfigSource.GROUP_CONFIG.value)
    entry = described[other]["share.key.ordering.enable"]
    assert entry.value == "false" and entry.source != ConfigSource.GROUP_CONFIG.value
    bad = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.key.ordering.enable", "sometimes", incremental_operation=AlterConfigOpType.SET)])])
    with pytest.raises(Exception, match="true or false"):
        list(bad.values())[0].result(30)


def test_a_record_whose_lock_expired_goes_out_again_before_the_rest_of_its_key(kray_keys):
    """A member takes one record of each key and sits on them (no acknowledgement, no poll): nobody
    gets anything of those keys until their locks expire (LOCK_MS); then the same records go out
    again (delivery count 2) before any later record of their keys."""
    name = uuid.uuid4().hex[:8]
    topic, group = f"q-{name}", f"g-{name}"
    admin = AdminClient({"bootstrap.servers": kray_keys})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    set_group_configs(kray_keys, group, {"share.auto.offset.reset": "earliest", "share.key.ordering.enable": "true"})
    p = Producer({"bootstrap.servers": kray_keys, "linger.ms": 20})
    for i in range(30):
        p.produce(topic, key=b"k%d" % (i % 3), value=b"%d" % i, partition=0)
    assert p.flush(30) == 0

    def member():
        c = ShareConsumer({"bootstrap.servers": kray_keys, "group.id": group, "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        return c

    sitter, worker = member(), member()
    held, deadline = [], time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        held = [(m.key(), m.offset()) for m in sitter.poll(0.5) if m.error() is None]
    assert sorted(held) == [(b"k0", 0), (b"k1", 1), (b"k2", 2)], held   # one per key: the first of each
    taken_at = time.monotonic()
    deliveries = []   # (key, offset, delivery count, seconds after the sitter took its records)
    deadline = time.monotonic() + 30
    while len({(k, o) for k, o, _, _ in deliveries}) < 30 and time.monotonic() < deadline:
        got = [m for m in worker.poll(0.5) if m.error() is None]
        for m in got:
            deliveries.append((m.key(), m.offset(), m.delivery_count(), time.monotonic() - taken_at))
            worker.acknowledge(m, AcknowledgeType.ACCEPT)
        if got:
            worker.commit_sync()
    worker.close()
    sitter.close()
    assert deliveries and min(t for *_, t in deliveries) >= LOCK_MS / 1000 * 0.9, \
        "nothing of a held key went out before its lock expired"
    for key in (b"k0", b"k1", b"k2"):
        mine = [(o, n) for k, o, n, _ in deliveries if k == key]
        assert mine[0] == (int(key[1:]), 2), f"{key!r}: the expired record first, delivery count 2: {mine[:3]}"
        assert [o for o, _ in mine] == list(range(int(key[1:]), 30, 3)), f"{key!r} out of offset order"
