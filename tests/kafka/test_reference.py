"""Kray beside Apache Kafka 4.4, protocol level: the same requests to both, the answers compared (see
tests/kafka/corpus.py). A difference not listed in KNOWN_DIFFERENCES / API_VERSION_DIFFERENCES fails,
and so does a listed one that went away. DIFFERENCES.md is this run's report (python -m tests.kafka.report)."""
import pytest

from tests.kafka import compare
from tests.kafka.corpus import API_VERSION_DIFFERENCES, CASES, KNOWN_DIFFERENCES


@pytest.fixture(scope="module")
def outcomes(both):
    return {o.case.name: o for o in compare.run(both["kafka"], both["kray"])}


def test_api_versions_are_kafkas(both):
    with compare.connect(both["kafka"]) as k, compare.connect(both["kray"]) as r:
        kafka, kray = compare.api_versions(k), compare.api_versions(r)
    differing = {key for key in set(kafka) | set(kray) if kafka.get(key) != kray.get(key)}
    table = {key: (kafka.get(key), kray.get(key)) for key in sorted(differing)}
    assert differing - set(API_VERSION_DIFFERENCES) == set(), f"unexplained (Kafka, Kray): {table}"
    assert set(API_VERSION_DIFFERENCES) - differing == set(), "listed as different, now alike: update the list"


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_kray_answers_as_kafka(outcomes, name):
    o = outcomes[name]
    shown = {f: (compare.value_at(o.kafka, f), compare.value_at(o.kray, f)) for f in o.fields} \
        if isinstance(o.kafka, dict) and isinstance(o.kray, dict) else (o.kafka, o.kray)
    if name in KNOWN_DIFFERENCES:
        assert o.differs, f"{name} now answers as Kafka: remove it from KNOWN_DIFFERENCES"
    else:
        assert not o.differs, f"{name} (v{o.version}, {o.case.what}): Kafka vs Kray {shown}"


def _closed_on_produce(bootstrap: str, version: int) -> bool:
    """A Produce at `version` (a v2-shaped body: acks, timeout, topics) to a fresh connection: whether the broker
    closed it without an answer."""
    import socket
    import struct

    from protocol import messages as m
    from protocol.record_batch import build_batch
    body = bytes(m.ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        m.ProduceRequest.TopicProduceData(name="ref-topic", partition_data=[m.ProduceRequest.PartitionProduceData(
            index=0, records=build_batch([(b"k", b"v", [], 0)]))])]).encode(3))[2:]  # v3 less its null txn id
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        header = struct.pack(">hhih", 0, version, 7, 3) + b"ref"
        s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        try:
            return s.recv(4) == b""
        except ConnectionResetError:
            return True


@pytest.mark.parametrize("version", [0, 2])
def test_produce_below_v3_closes_the_connection_as_kafka_does(both, version):
    """Kafka 4.4 advertises Produce from v0 (old clients' feature detection) but takes only v3+ (KIP-896): both
    close the connection on a v0-2 request."""
    assert _closed_on_produce(both["kafka"], version)
    assert _closed_on_produce(both["kray"], version)


def _described_host(bootstrap: str) -> tuple[str, str]:
    """(a KIP-848 member's client_host in ConsumerGroupDescribe, a share member's in ShareGroupDescribe), each
    just after its first heartbeat."""
    import uuid

    from protocol import messages as m
    from tests.kafka.corpus import _cgh, _sgh, _uuid_b64
    hosts = []
    with compare.connect(bootstrap) as conn:
        for heartbeat, describe in ((_cgh, m.ConsumerGroupDescribeRequest), (_sgh, m.ShareGroupDescribeRequest)):
            group = f"ref-host-{uuid.uuid4().hex[:6]}"
            conn.send(m.FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]))
            assert conn.send(heartbeat(group, _uuid_b64(), 0)).error_code == 0
            [described] = conn.send(describe(group_ids=[group], include_authorized_operations=False)).groups
            hosts.append(described.members[0].client_host)
    return tuple(hosts)


def test_members_client_host_is_shown_as_kafka_shows_it(both):
    """Kafka shows a member's address as Java's InetAddress prints it ("/127.0.0.1"), in every describe."""
    assert _described_host(both["kray"]) == _described_host(both["kafka"]) == ("/127.0.0.1", "/127.0.0.1")


def _all_topics(bootstrap: str) -> dict[str, bool]:
    """A Metadata request for every topic: name -> is_internal."""
    from protocol import messages as m
    with compare.connect(bootstrap) as conn:
        answer = conn.send(m.MetadataRequest(topics=None, allow_auto_topic_creation=False))
    return {t.name: t.is_internal for t in answer.topics}


def test_listing_every_topic_lists_the_internal_ones_as_kafka_does(both):
    """Metadata for every topic names __consumer_offsets (once a group made it) marked internal, and the
    user's topics not (Kafka's own tools and librdkafka list it; Java's listTopics() leaves it out by itself)."""
    from confluent_kafka import Consumer, TopicPartition
    for bootstrap in both.values():  # a committed offset makes __consumer_offsets on each broker
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ref-internal-topics"})
        consumer.commit(offsets=[TopicPartition("ref-topic", 0, 0)], asynchronous=False)
        consumer.close()
    kafka, kray = _all_topics(both["kafka"]), _all_topics(both["kray"])
    for topics in (kafka, kray):
        assert topics.get("__consumer_offsets") is True
        assert topics.get("ref-topic") is False
    assert {n for n, internal in kray.items() if internal} <= {"__consumer_offsets", "__transaction_state",
                                                                "__share_group_state"}
