"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a real `kray start`."""
import threading
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from tests.kray_process import KrayProcess

LOCK_MS = 2000
OVERRIDES = (f"group.share.record.lock.duration.ms={LOCK_MS}", "group.share.min.record.lock.duration.ms=1000",
             "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=500",
             "group.share.delivery.count.limit=3")


@pytest.fixture(scope="module")
def kray_share(tmp_path_factory):
    """A broker with short locks, fast heartbeats and a delivery limit of 3, so the tests run quickly."""
    server = KrayProcess(tmp_path_factory.mktemp("kray-share"), overrides=OVERRIDES)
    yield server.start()
    server.stop()


def new_topic_and_group(bootstrap, partitions, records):
    topic, group = f"q-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(30)
    produce(bootstrap, topic, partitions, 0, records)
    return topic, group


def share_consumer(bootstrap, group, topic, explicit=True):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def test_mixed_accept_release_reject_accounts_for_every_record(kray_share):
    topic, group = new_topic_and_group(kray_share, 3, 3000)
    c = share_consumer(kray_share, group, topic)
    accepted, rejected, released, redelivered = set(), set(), set(), {}
    deadline = time.monotonic() + 90
    while len(accepted) + len(rejected) < 3000 and time.monotonic() < deadline:
        for m in c.poll(1.0):
            assert m.error() is None, m.error()
            i = int(m.key())
            if i % 10 == 3:
                assert i not in rejected, "a rejected record came back"
                rejected.add(i)
                c.acknowledge(m, AcknowledgeType.REJECT)
            elif i % 10 == 7 and i not in released:
                released.add(i)
                c.acknowledge(m, AcknowledgeType.RELEASE)
            else:
                assert i not in accepted, "an accepted record came back"
                if i in released:
                    redelivered[i] = m.delivery_count()
                accepted.add(i)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
    c.close()
    assert accepted | rejected == set(range(3000)) and not accepted & rejected
    assert len(rejected) == 300 and len(released) == 300
    assert set(redelivered.values()) == {2}, "a released record comes back with delivery count 2"
    assert set(redelivered) == released


def test_implicit_mode_accepts_what_was_polled(kray_share):
    topic, group = new_topic_and_group(kray_share, 2, 500)
    c = share_consumer(kray_share, group, topic, explicit=False)
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < 500 and time.monotonic() < deadline:
        seen += [int(m.key()) for m in c.poll(1.0) if m.error() is None]
    c.commit_sync()
    c.close()
    assert sorted(seen) == list(range(500))
    again = share_consumer(kray_share, group, topic)
    assert [m for m in again.poll(3.0) if m.error() is None] == [], "accepted records are never redelivered"
    again.close()


def produce(bootstrap, topic, partitions, first, count):
    # small batches: a share-partition leader acquires whole batches, so this lets work spread
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 50})
    for i in range(first, first + count):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def test_more_consumers_than_partitions_all_get_work(kray_share):
    topic, group = new_topic_and_group(kray_share, 2, 0)
    consumers = [share_consumer(kray_share, group, topic) for _ in range(4)]
    warm_until = time.monotonic() + 4  # every member joins and gets its (shared) partitions first
    while time.monotonic() < warm_until:
        for c in consumers:
            assert [m for m in c.poll(0.2) if m.error() is None] == []
    produce(kray_share, topic, 2, 0, 4000)
    counts = [0] * 4
    seen, deliveries, lock = set(), set(), threading.Lock()
    stop = time.monotonic() + 60

    def work(k):
        c = consumers[k]
        while time.monotonic() < stop:
            with lock:
                if len(seen) >= 4000:
                    break
            for m in c.poll(0.5):
                if m.error() is None:
                    time.sleep(0.0005)  # a little processing per record, so work spreads out
                    delivery = (int(m.key()), m.delivery_count())
                    with lock:  # redelivery after a lock expiry is allowed, a second copy of one delivery not
                        assert delivery not in deliveries, "one delivery reached two members"
                        deliveries.add(delivery)
                        seen.add(int(m.key()))
                    counts[k] += 1
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in consumers:
        c.close()
    assert seen == set(range(4000))
    assert all(n > 0 for n in counts), f"every consumer gets work: {counts}"


def test_delivery_limit_archives_a_poison_record(kray_share):
    topic, group = new_topic_and_group(kray_share, 1, 1)
    c = share_consumer(kray_share, group, topic)
    deliveries = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not deliveries or deliveries[-1] < 3):
        for m in c.poll(1.0):
            if m.error() is None:
                deliveries.append(m.delivery_count())
                c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync()
    assert deliveries == [1, 2, 3]
    assert [m for m in c.poll(3.0) if m.error() is None] == [], "archived at the delivery limit (3)"
    c.close()


def test_abandoned_records_come_back_after_the_lock_expires(kray_share):
    topic, group = new_topic_and_group(kray_share, 1, 50)
    holder = share_consumer(kray_share, group, topic)
    held = []
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        held = [int(m.key()) for m in holder.poll(1.0) if m.error() is None]
    assert held, "the first consumer got records"
    # the holder neither acknowledges nor polls again: its locks run out after LOCK_MS
    other = share_consumer(kray_share, group, topic)
    again, counts = [], set()
    deadline = time.monotonic() + 30
    while len(again) < len(held) and time.monotonic() < deadline:
        for m in other.poll(1.0):
            if m.error() is None and int(m.key()) in held:
                again.append(int(m.key()))
                counts.add(m.delivery_count())
                other.acknowledge(m, AcknowledgeType.ACCEPT)
            elif m.error() is None:
                other.acknowledge(m, AcknowledgeType.ACCEPT)
        other.commit_sync()
    assert sorted(again) == sorted(held) and counts == {2}
    other.close()
    holder.close()


def kray_tool(bootstrap, *args, timeout_s=90):
    import subprocess
    import sys
    from pathlib import Path
    kray = str(Path(sys.executable).parent / "kray")
    return subprocess.run([kray, *args, "--bootstrap-server", bootstrap], capture_output=True, text=True,
                          timeout=timeout_s)


def test_share_group_tools_describe_reset_and_delete(kray_share):
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", f"workers-{uuid.uuid4().hex[:6]}"
    assert kray_tool(kray_share, "topics", "--create", "--topic", topic, "--partitions", "1").returncode == 0
    r = kray_tool(kray_share, "configs", "--entity-type", "groups", "--entity-name", group, "--alter",
                  "--add-config", "share.auto.offset.reset=earliest")
    assert r.returncode == 0, r.stderr
    bad = kray_tool(kray_share, "configs", "--entity-type", "groups", "--entity-name", group, "--alter",
                    "--add-config", "share.isolation.level=serializable")
    assert bad.returncode == 1 and "share.isolation.level" in bad.stderr
    r = kray_tool(kray_share, "producer-perf-test", "--topic", topic, "--num-records", "3", "--throughput", "2.5",
                  "--payload-monotonic")
    assert r.returncode == 0 and "3 records sent" in r.stdout, r.stdout + r.stderr

    r = kray_tool(kray_share, "console-share-consumer", "--topic", topic, "--group", group, "--max-messages", "3",
                  "--timeout-ms", "30000", "--property", "print.delivery.count=true")
    assert r.returncode == 0 and r.stdout.split() == ["1", "0", "1", "1", "1", "2"], r.stdout + r.stderr
    assert group in kray_tool(kray_share, "share-groups", "--list").stdout.split()
    offsets = kray_tool(kray_share, "share-groups", "--describe", "--group", group).stdout
    assert f"{group}\t{topic}\t0\t3\t0" in offsets, offsets

    dry = kray_tool(kray_share, "share-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert "dry run" in dry.stdout and f"{topic}\t0\t0" in dry.stdout
    assert "\t0\t3\t" in kray_tool(kray_share, "share-groups", "--describe", "--group", group).stdout
    r = kray_tool(kray_share, "share-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                  "--execute")
    assert r.returncode == 0, r.stderr
    assert f"{group}\t{topic}\t0\t0\t3" in kray_tool(kray_share, "share-groups", "--describe", "--group", group).stdout
    again = kray_tool(kray_share, "console-share-consumer", "--topic", topic, "--group", group, "--max-messages", "3",
                      "--timeout-ms", "30000", "--reject")
    assert again.stdout.split() == ["0", "1", "2"], "after the reset the records come again"

    state = kray_tool(kray_share, "share-groups", "--describe", "--group", group, "--state").stdout
    assert "Empty" in state
    assert kray_tool(kray_share, "share-groups", "--delete", "--group", group).returncode == 0
    assert group not in kray_tool(kray_share, "share-groups", "--list").stdout.split()


def test_reset_offsets_initializes_a_group_before_its_first_member(kray_share):
    """KIP-932: the reset tool can initialize a share group; its first member starts where the reset
    put it (here the earliest offset), not where share.auto.offset.reset (default latest) would."""
    topic, group = f"backlog-{uuid.uuid4().hex[:6]}", f"late-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kray_share})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    produce(kray_share, topic, 1, 0, 20)
    r = kray_tool(kray_share, "share-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                  "--execute")
    assert r.returncode == 0, r.stdout + r.stderr
    assert group in kray_tool(kray_share, "share-groups", "--list").stdout.split()
    c = share_consumer(kray_share, group, topic)
    keys, deadline = set(), time.monotonic() + 30
    while len(keys) < 20 and time.monotonic() < deadline:
        for m in c.poll(1.0):
            assert m.error() is None, m.error()
            keys.add(int(m.key()))
            c.acknowledge(m, AcknowledgeType.ACCEPT)
    c.close()
    assert keys == set(range(20))


def test_share_fetch_v2_record_limit_and_renew(kray_share):
    """KIP-1206 and KIP-1222 over the wire with our own client (confluent-kafka 2.16.1 speaks v1):
    acquire mode record_limit splits a log batch at MaxRecords; RENEW keeps a lock past its
    duration while unrenewed records in the same batch lose theirs."""
    from cluster.admin import KafkaConnection
    from protocol.errors import ErrorCode
    from protocol.messages import ShareAcknowledgeRequest as A, ShareFetchRequest as F, \
        ShareGroupHeartbeatRequest as H

    topic, group = new_topic_and_group(kray_share, 1, 10)  # one partition, one log batch of 10
    member = uuid.uuid4().hex[:22]
    with KafkaConnection(kray_share) as conn:
        assert conn.version_for(F.API_KEY) == 2 and conn.version_for(A.API_KEY) == 2
        deadline, assigned = time.monotonic() + 30, []
        epoch = 0
        while not assigned and time.monotonic() < deadline:
            hb = conn.send(H(group_id=group, member_id=member, member_epoch=epoch,
                             subscribed_topic_names=[topic] if epoch == 0 else None), 1)
            assert hb.error_code == 0, hb.error_message
            epoch = hb.member_epoch
            assigned = hb.assignment.topic_partitions if hb.assignment else []
            if not assigned:
                time.sleep(0.5)
        topic_id = assigned[0].topic_id

        def fetch(session_epoch, acks=(), **kw):
            req = dict(group_id=group, member_id=member, share_session_epoch=session_epoch, max_wait_ms=5000,
                       min_bytes=1, max_bytes=1 << 20, max_records=6, batch_size=6, topics=[F.FetchTopic(
                           topic_id=topic_id, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=[
                               F.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[t])
                               for a, b, t in acks])])], forgotten_topics_data=[])
            req.update(kw)
            return conn.send(F(**req), 2)

        got = fetch(0, share_acquire_mode=1)
        assert got.error_code == 0, got.error_message
        (part,) = got.responses[0].partitions
        assert [(a.first_offset, a.last_offset) for a in part.acquired_records] == [(0, 5)], \
            "record_limit: 6 of the batch's 10 records"
        time.sleep(LOCK_MS / 1000 * 0.6)
        renew = fetch(1, acks=[(0, 2, 4)], is_renew_ack=True, max_wait_ms=0, min_bytes=0, max_bytes=0, max_records=0)
        assert renew.error_code == 0 and renew.responses[0].partitions[0].acknowledge_error_code == 0
        assert renew.responses[0].partitions[0].acquired_records == [], "a renew-only request fetches nothing"
        time.sleep(LOCK_MS / 1000 * 0.7)  # past the first lock's deadline, within the renewed one

        def ack(session_epoch, first, last):
            r = conn.send(A(group_id=group, member_id=member, share_session_epoch=session_epoch, topics=[
                A.AcknowledgeTopic(topic_id=topic_id, partitions=[A.AcknowledgePartition(
                    partition_index=0, acknowledgement_batches=[A.AcknowledgementBatch(
                        first_offset=first, last_offset=last, acknowledge_types=[1])])])]), 2)
            assert r.error_code == 0 and r.acquisition_lock_timeout_ms == LOCK_MS
            return r.responses[0].partitions[0].error_code

        assert ack(2, 0, 2) == 0, "renewed: still held"
        assert ack(3, 3, 5) == ErrorCode.INVALID_RECORD_STATE, "not renewed: the lock expired"

        bad = fetch(4, acks=[(6, 6, 4)], share_acquire_mode=0)  # RENEW without IsRenewAck
        assert bad.error_code == ErrorCode.INVALID_REQUEST
        bad = fetch(4, acks=[(6, 6, 4)], is_renew_ack=True)  # fetch limits must be 0
        assert bad.error_code == ErrorCode.INVALID_REQUEST

        # Kafka 4.3: share.renew.acknowledge.enable=false refuses RENEW with INVALID_RECORD_STATE
        set_group_configs(kray_share, group, share_renew_acknowledge_enable="false")
        got = fetch(4, share_acquire_mode=1)
        held = got.responses[0].partitions[0].acquired_records[0].first_offset  # 3-5 expired: acquired again
        refused = fetch(5, acks=[(held, held, 4)], is_renew_ack=True, max_wait_ms=0, min_bytes=0, max_bytes=0,
                        max_records=0)
        assert refused.error_code == 0
        assert refused.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_RECORD_STATE


def set_group_configs(bootstrap, group, **configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                             incremental_configs=entries)]).values():
        f.result(30)


def release_until_archived(c, deliveries, expected, timeout_s=30, quiet_s=2.0):
    """Poll, RELEASE and commit whatever comes until `expected` deliveries were seen, then for
    `quiet_s` more (anything that still comes is a delivery too many)."""
    deadline, quiet_until = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
        got = [m for m in c.poll(0.5) if m.error() is None]
        for m in got:
            deliveries.append(m.delivery_count())
            c.acknowledge(m, AcknowledgeType.RELEASE)
        if got:
            c.commit_sync()
        if quiet_until is None and len(deliveries) >= expected:
            quiet_until = time.monotonic() + quiet_s


def test_per_group_delivery_count_limit_applies_to_a_live_group(kray_share):
    """KIP-1240 (Kafka 4.3): share.delivery.count.limit=2 set on a group whose record is already in
    flight: it is archived after its second delivery, never delivered a third time, while another
    group on the same topic keeps the broker's default (3 here); DescribeConfigs shows the override."""
    from confluent_kafka.admin import ConfigSource

    topic, group = new_topic_and_group(kray_share, 1, 1)
    other = f"g-{uuid.uuid4().hex[:8]}"
    set_group_configs(kray_share, other, share_auto_offset_reset="earliest")
    limited, plain = share_consumer(kray_share, group, topic), share_consumer(kray_share, other, topic)
    deliveries, deadline = [], time.monotonic() + 30
    while not deliveries and time.monotonic() < deadline:  # the first delivery, under the broker's limit
        for m in limited.poll(1.0):
            if m.error() is None:
                deliveries.append(m.delivery_count())
                set_group_configs(kray_share, group, share_delivery_count_limit="2")
                limited.acknowledge(m, AcknowledgeType.RELEASE)
        limited.commit_sync()
    release_until_archived(limited, deliveries, 2)
    assert deliveries == [1, 2], "archived at the group's limit (2), never delivered a third time"
    plain_deliveries = []
    release_until_archived(plain, plain_deliveries, 3)
    assert plain_deliveries == [1, 2, 3], "the other group keeps the broker's group.share.delivery.count.limit (3)"
    limited.close()
    plain.close()

    admin = AdminClient({"bootstrap.servers": kray_share})
    described = {r.name: entries for r, f in admin.describe_configs(
        [ConfigResource(ResourceType.GROUP, group), ConfigResource(ResourceType.GROUP, other)]).items()
        for entries in [f.result(30)]}
    limit = described[group]["share.delivery.count.limit"]
    assert (limit.value, limit.source) == ("2", ConfigSource.GROUP_CONFIG.value)
    assert described[other]["share.delivery.count.limit"].value == "3"
    assert described[other]["share.delivery.count.limit"].source != ConfigSource.GROUP_CONFIG.value
    for key, value in (("share.partition.max.record.locks", "2000"), ("share.renew.acknowledge.enable", "true"),
                       ("share.assignment.interval.ms", "1000")):
        assert described[group][key].value == value
    bad = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.delivery.count.limit", "11", incremental_operation=AlterConfigOpType.SET)])])
    with pytest.raises(Exception, match="group.share.max.delivery.count.limit"):
        list(bad.values())[0].result(30)
    r = kray_tool(kray_share, "configs", "--entity-type", "groups", "--entity-name", group, "--describe")
    assert r.returncode == 0 and "  share.delivery.count.limit=2 source=GROUP_CONFIG" in r.stdout.splitlines(), r.stdout
    assert "  share.partition.max.record.locks=2000 source=DEFAULT_CONFIG" in r.stdout.splitlines(), r.stdout


def test_perf_tools_keep_their_rate_and_say_when_they_time_out(kray_share):
    """kray producer-perf-test --throughput is a ceiling, as in kafka-producer-perf-test (it sent 144.8
    records/s when asked for 0.5 in issue 37: delivery reports cut its pauses short); share-consumer-perf-test
    says that it timed out."""
    import time
    topic = f"paced-{uuid.uuid4().hex[:6]}"
    assert kray_tool(kray_share, "topics", "--create", "--topic", topic, "--partitions", "1").returncode == 0
    started = time.monotonic()
    r = kray_tool(kray_share, "producer-perf-test", "--topic", topic, "--num-records", "12", "--throughput", "8")
    assert r.returncode == 0 and "12 records sent" in r.stdout, r.stdout + r.stderr
    assert time.monotonic() - started >= 11 / 8, "12 records at 8/s take at least 1.375 s"
    rate = float(r.stdout.splitlines()[-1].split(", ")[1].split(" ")[0])
    assert rate <= 8 * 12 / 11 * 1.02, r.stdout  # (12 records over 11 gaps of 1/8 s)
    r = kray_tool(kray_share, "share-consumer-perf-test", "--topic", topic, "--group", f"g-{topic}",
                  "--messages", "5", "--timeout-ms", "2000")
    assert r.returncode == 1 and "timed out: no record for 2000 ms" in r.stderr, r.stdout + r.stderr
