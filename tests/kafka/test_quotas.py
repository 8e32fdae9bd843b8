"""Client quotas against Apache Kafka 4.4 and Kray, compared: AlterClientQuotas's validation, DescribeClientQuotas's
matching, and a producer over its producer_byte_rate told to wait (throttle_time_ms) by both brokers; the other
quotas, and connection_creation_rate, applied as by Kafka."""
import random
import socket
import time
import uuid

from cluster.admin import KafkaConnection
from protocol import messages as m
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader, decode_response_header, encode_request
from protocol.record_batch import build_batch

SETTLE_S = 0.5  # after the change shows in the broker's DescribeClientQuotas: Kafka's quota managers and its describe
SHOW_S = 15      # read the same metadata image; a loaded machine has taken over 1.5 s to get there
A = m.AlterClientQuotasRequest
D = m.DescribeClientQuotasRequest


def alter(conn, entries, validate_only=False):
    """entries: [(entity {type: name or None}, [(key, value, remove)])] -> sorted [(error code, entity)] (Kafka
    answers in no particular order, one result per distinct entity: the entities here are distinct). Returns once
    an accepted change shows in the broker's DescribeClientQuotas (Kafka applies quotas from its metadata log, a
    moment after AlterClientQuotas answers)."""
    before = None if validate_only else _every_quota(conn)
    r = conn.send(A(entries=[A.EntryData(entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in e.items()],
                                         ops=[A.OpData(key=k, value=v, remove=rm) for k, v, rm in ops])
                             for e, ops in entries], validate_only=validate_only))
    results = sorted((e.error_code, sorted((d.entity_type, d.entity_name) for d in e.entity)) for e in r.entries)
    if before is not None and any(error == 0 for error, _ in results):
        deadline = time.monotonic() + SHOW_S
        while _every_quota(conn) == before and time.monotonic() < deadline:
            time.sleep(0.1)
    time.sleep(SETTLE_S)
    return results


def _every_quota(conn) -> list:
    r = conn.send(D(components=[], strict=False))
    return sorted((tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)),
                   tuple(sorted((v.key, v.value) for v in entry.values))) for entry in (r.entries or ()))


def describe(conn, components, strict=False, names=()):
    """-> (error code, sorted [(entity, values)]) of the entities naming one of `names` (other tests' are left out)."""
    r = conn.send(D(components=[D.ComponentData(entity_type=t, match_type=mt, match=mm) for t, mt, mm in components],
                    strict=strict))
    entries = sorted((tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)),
                      tuple(sorted((v.key, v.value) for v in entry.values))) for entry in (r.entries or ()))
    return r.error_code, [e for e in entries if any(name in names for _, name in e[0]) or not names]


def steps(bootstrap: str) -> list:
    s = uuid.uuid4().hex[:6]
    alice, bob, app = f"alice-{s}", f"bob-{s}", f"app-{s}"
    out = []
    with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
        out.append(("alter", alter(conn, [
            ({"user": alice, "client-id": app}, [("producer_byte_rate", 1024.0, False)]),
            ({"user": alice}, [("consumer_byte_rate", 2048.0, False), ("request_percentage", 12.5, False)]),
            ({"client-id": app}, [("producer_byte_rate", 4096.0, False)]),
            ({"user": bob}, [("no_such_key", 1.0, False)]),
            ({"user": bob + "-2"}, [("producer_byte_rate", 1.5, False)]),
            ({"user": bob + "-3"}, [("producer_byte_rate", 0.0, False)]),
            ({"user": bob + "-4"}, [("producer_byte_rate", -5.0, False)]),
            ({"ip": "127.0.0.9", "user": bob}, [("connection_creation_rate", 5.0, False)]),
            ({"ip": "not-an-ip"}, [("connection_creation_rate", 5.0, False)]),
            ({"ip": "127.0.0.9"}, [("producer_byte_rate", 5.0, False)]),
            ({}, [("producer_byte_rate", 1.0, False)]),
            ({"group": "g"}, [("producer_byte_rate", 1.0, False)]),
        ])))
        out.append(("validate only", alter(conn, [({"user": bob}, [("producer_byte_rate", 10.0, False)])], True)))
        names = (alice, bob, app)
        out.append(("describe all", describe(conn, [], names=names)))
        out.append(("describe alice", describe(conn, [("user", 0, alice)], names=names)))
        out.append(("describe alice strict", describe(conn, [("user", 0, alice)], strict=True, names=names)))
        out.append(("describe any client strict", describe(conn, [("client-id", 2, None)], strict=True, names=names)))
        out.append(("describe user and client", describe(conn, [("user", 2, None), ("client-id", 0, app)],
                                                         names=names)))
        out.append(("describe duplicate type", describe(conn, [("user", 2, None), ("user", 1, None)])[0]))
        out.append(("describe exact without a name", describe(conn, [("user", 0, None)])[0]))
        out.append(("remove", alter(conn, [({"user": alice}, [("request_percentage", 0, True)])])))
        out.append(("describe alice after remove", describe(conn, [("user", 0, alice)], strict=True, names=names)))
        out.append(("remove the rest", alter(conn, [
            ({"user": alice, "client-id": app}, [("producer_byte_rate", 0, True)]),
            ({"user": alice}, [("consumer_byte_rate", 0, True)]),
            ({"client-id": app}, [("producer_byte_rate", 0, True)])])))
        out.append(("describe after removing", describe(conn, [], names=names)))
    return _without(out, "-" + s)


def _without(value, suffix: str):
    """`value` with the run's suffix taken out of every name, so two brokers' answers compare."""
    if isinstance(value, str):
        return value.replace(suffix, "")
    if isinstance(value, (list, tuple)):
        return type(value)(_without(v, suffix) for v in value)
    return value


def test_client_quotas_are_altered_and_described_as_kafka_does(both):
    kafka, kray = steps(both["kafka"]), steps(both["kray"])
    for (name, k), (_, r) in zip(kafka, kray):
        assert r == k, name
    assert [error for error, _ in kray[0][1]].count(0) == 3  # the three good entries; the other nine refused


def _produce_request(topic: str, size_bytes: int):
    batch = build_batch([(None, b"x" * size_bytes, [], int(time.time() * 1000))])
    return m.ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            m.ProduceRequest.PartitionProduceData(index=0, records=batch)])])


def _produce(conn, topic: str, size_bytes: int) -> tuple[int, int]:
    r = conn.send(_produce_request(topic, size_bytes), 12)  # (v13: topic ids)
    return r.responses[0].partition_responses[0].error_code, r.throttle_time_ms


def _new_topic(bootstrap: str, prefix: str) -> str:
    """A topic of one partition whose leader takes records: made, and waited for, by a client id without a quota
    (Kafka's KafkaApis counts every Produce against its client's quota, one answered NOT_LEADER_OR_FOLLOWER too,
    and so does Kray: a quota'd client waiting for the leader would start over its quota)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
        C = m.CreateTopicsRequest
        conn.send(C(topics=[C.CreatableTopic(name=topic, num_partitions=1, replication_factor=1, assignments=[],
                                             configs=[])], timeout_ms=30_000, validate_only=False))
        deadline = time.monotonic() + 30
        while _produce(conn, topic, 1)[0] in (3, 5, 6) and time.monotonic() < deadline:  # its leader: not yet
            time.sleep(0.2)
    return topic


def _produce_throttles(bootstrap: str, client_id: str, requests: int = 3, size_bytes: int = 50_000) -> list[int]:
    topic = _new_topic(bootstrap, "quota")
    with KafkaConnection(bootstrap, client_id=client_id) as conn:
        throttles = []
        for _ in range(requests):
            error, throttle_ms = _produce(conn, topic, size_bytes)
            assert error == 0, error
            throttles.append(throttle_ms)
        return throttles


def _pipelined_produce(bootstrap: str, client_id: str, count: int = 3, size_bytes: int = 600_000) -> list:
    """`count` Produce requests of `size_bytes` to a new topic, sent in one write before any answer is read:
    [(error code, throttle_time_ms, ms from the write to this answer)]."""
    topic = _new_topic(bootstrap, "pipelined")
    with KafkaConnection(bootstrap, client_id=client_id) as conn:
        requests = b"".join(encode_request(RequestHeader(0, 12, 100 + i, client_id), _produce_request(
            topic, size_bytes).encode(12)) for i in range(count))
        decoder, answers, started = FrameDecoder(16 * 1024 * 1024), [], time.monotonic()
        conn.sock.sendall(requests)
        while len(answers) < count:
            chunk = conn.sock.recv(65536)
            assert chunk, "the broker closed the connection"
            for frame in decoder.feed(chunk):
                _, offset = decode_response_header(memoryview(frame), 0, 12)
                r = m.ProduceResponse.decode(memoryview(frame)[offset:], 12)
                answers.append((r.responses[0].partition_responses[0].error_code, r.throttle_time_ms,
                                (time.monotonic() - started) * 1000))
        return answers


def test_pipelined_produce_requests_wait_out_the_throttle_the_one_before_earned_as_on_kafka(both):
    """producer_byte_rate 100 KB/s for one client id, and three Produce requests of 600 KB sent in one write: both
    brokers answer the first with no wait and the second with ~2 s (1.2 MB over a young window of 10 s), then read
    the third only after those 2 s, and answer it with ~8 s (1.8 MB). A broker that handled the three at once would
    answer the third at once: the client would be a request ahead of its quota each time it pipelines."""
    seen = {}
    for broker, bootstrap in both.items():
        client = f"pipelined-{uuid.uuid4().hex[:6]}"
        with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
            assert alter(conn, [({"client-id": client}, [("producer_byte_rate", 100_000.0, False)])])[0][0] == 0
        seen[broker] = _pipelined_produce(bootstrap, client)
    for broker, answers in seen.items():
        summary = [(e, t, round(ms)) for e, t, ms in answers]
        assert [e for e, _, _ in answers] == [0, 0, 0] and answers[0][1] == 0, (broker, summary)
        assert 1_500 <= answers[1][1] <= 2_100 and 6_500 <= answers[2][1] <= 8_100, (broker, summary)
        assert answers[2][2] - answers[1][2] >= answers[1][1] * 0.9, (broker, summary)  # read after the wait


def test_a_producer_over_its_byte_rate_is_told_to_wait_as_kafka_tells_it(both):
    """producer_byte_rate 10 KiB/s for one client id: three requests of 50 KB, back to back. Kafka measures the
    rate over a window of at least 10 s: 100 KB is within the quota, 150 KB is not, so both brokers answer the
    first two with no wait and the third with one (about 5 s); a client id without a quota is never throttled."""
    seen = {}
    for broker, bootstrap in both.items():
        client = f"throttled-{uuid.uuid4().hex[:6]}"
        with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
            assert alter(conn, [({"client-id": client}, [("producer_byte_rate", 10_240.0, False)])])[0][0] == 0
        time.sleep(1)  # Kafka applies quotas from its metadata log: let the change reach the broker
        seen[broker] = (_produce_throttles(bootstrap, client), _produce_throttles(bootstrap, f"free-{client}", 2))
    for broker, (throttled, free) in seen.items():
        assert throttled[:2] == [0, 0] and 3_000 < throttled[2] < 7_000, (broker, throttled)
        assert free == [0, 0], (broker, free)


def test_a_pipelining_greedy_producer_is_held_as_kafka_holds_it(both):
    """A greedy librdkafka producer (many requests in flight) with producer_byte_rate 200 KB/s beside a polite one,
    on both brokers: Kafka takes a throttled connection's requests one at a time, so the greedy one gets no more than
    its first window's worth ahead; Kray before took what the client had pipelined meanwhile (and capped a
    throttle at one window, after which the client started over), 470-720 KB/s against Kafka's 301 over 13 s."""
    from tests.e2e.test_client_quotas import greedy_beside_polite, say
    seen = {}
    for broker, bootstrap in both.items():
        def configure(client, quota, bootstrap=bootstrap):
            with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
                assert alter(conn, [({"client-id": client}, [("producer_byte_rate", float(quota), False)])])[0][0] == 0
        seen[broker] = greedy_beside_polite(bootstrap, configure)
        print(say(broker, seen[broker]))
    kafka, kray = (seen[b]["greedy_bytes_per_s"] * seen[b]["elapsed_s"] for b in ("kafka", "kray"))
    assert kray <= 1.3 * kafka + 100_000, f"Kray let the greedy producer write {kray:.0f} bytes, Kafka {kafka:.0f}"
    assert kray >= 0.7 * kafka, f"Kray held the greedy producer to {kray:.0f} bytes, Kafka to {kafka:.0f}"


def _share_consume(bootstrap: str, quota: float | None, seconds: float = 12.0) -> tuple[int, int]:
    """A share consumer over 6 MB (300 records of 20 KB, each its own batch), `quota` its consumer_byte_rate (None:
    no quota): (bytes it received in `seconds`, the longest throttle librdkafka's statistics report)."""
    import json
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                       ResourceType)
    name = uuid.uuid4().hex[:6]
    topic, group, client = f"shq-{name}", f"shq-g-{name}", f"shq-c-{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    reset = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                             incremental_configs=[reset])]).values():
        f.result(30)
    if quota is not None:
        with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
            assert alter(conn, [({"client-id": client}, [("consumer_byte_rate", quota, False)])])[0][0] == 0
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 20_000})
    for _ in range(300):
        p.produce(topic, value=b"x" * 20_000, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    throttles = []
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client,
                       "statistics.interval.ms": 500, "stats_cb": lambda stats: throttles.extend(
                           b["throttle"]["max"] for b in json.loads(stats)["brokers"].values() if b.get("throttle"))})
    c.subscribe([topic])
    got, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        got += sum(len(msg.value()) for msg in c.poll(0.5) if msg.error() is None)
    c.close()
    return got, max(throttles, default=0)


def test_share_fetches_count_against_consumer_byte_rate_as_on_kafka(both):
    """consumer_byte_rate 100 KB/s for a share consumer's client id: Kafka 4.4 counts share fetches as fetches (it
    received 980 KB in 12 s, told to wait ~10 s; 6 MB without the quota), and so does Kray (before: 6 MB, never
    told to wait). Neither gets more than the quota over the time plus one window's worth and one batch. Kafka
    acquires, then answers the fetch that takes the client over empty (its records stay locked until their lock
    times out, 30 s): here it stopped at 980 KB. Kray acquires no more than the quota has room for (2.1 MB in the
    12 s, told to wait up to ~0.2 s at a time), so no record is acquired and left unsent: a deliberate difference."""
    quota, seconds = 100_000.0, 12.0
    for broker, bootstrap in both.items():
        got, throttle_ms = _share_consume(bootstrap, quota, seconds)
        print(f"{broker}: a share consumer at consumer_byte_rate {quota / 1000:.0f} KB/s received {got / 1000:.0f} KB "
              f"in {seconds:.0f} s, told to wait up to {throttle_ms} ms")
        assert got <= quota * seconds + quota * 10 + 20_000, (broker, got)
        assert throttle_ms > 0, (broker, throttle_ms)
        assert got >= 20_000, (broker, got)   # it was not starved either


def _create_topics(bootstrap: str, client_id: str, version: int, count: int = 1, partitions: int = 10,
                   started: float | None = None, first: int = 0) -> list:
    """`count` CreateTopics of `partitions` partitions each, back to back on one connection, at `version`: [(error
    code, error message, throttle_time_ms, ms since `started`)] (the quota refills meanwhile: on a busy machine a
    creation takes seconds, and the waits answered are that much shorter)."""
    C = m.CreateTopicsRequest
    out = []
    started = time.monotonic() if started is None else started
    with KafkaConnection(bootstrap, client_id=client_id) as conn:
        for i in range(first, first + count):
            r = conn.send(C(topics=[C.CreatableTopic(name=f"{client_id}-{i}", num_partitions=partitions,
                                                     replication_factor=1, assignments=[], configs=[])],
                            timeout_ms=30_000, validate_only=False), version)
            out.append((r.topics[0].error_code, r.topics[0].error_message, r.throttle_time_ms,
                        (time.monotonic() - started) * 1000))
    return out


def test_controller_mutation_rate_refuses_or_throttles_topic_creation_as_kafka_does(both):
    """controller_mutation_rate 0.25 partitions/s for a client id, a bucket of 0.25 x 11 = 2.75 partitions
    (controller.quota.window.num x .size.seconds): a topic of 10 partitions takes it to -7.25 and is created all the
    same; then CreateTopics v6+ refuses the next topic with THROTTLING_QUOTA_EXCEEDED and the time to refill (29 s),
    while v5 and below create every topic and say how long to wait: 29 s, then 69 s for the next (KIP-599; the
    waits are uncapped). Another client id is not limited. (A low rate, so that the refill while a loaded machine
    creates a topic, seconds, does not reach the next topic's 10 partitions.)"""
    seen = {}
    for broker, bootstrap in both.items():
        strict, permissive = f"mut-s-{uuid.uuid4().hex[:6]}", f"mut-p-{uuid.uuid4().hex[:6]}"
        with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
            assert [e for e, _ in alter(conn, [({"client-id": c}, [("controller_mutation_rate", 0.25, False)])
                                               for c in (strict, permissive)])] == [0, 0]
        time.sleep(1)
        started = time.monotonic()  # the second v5 topic goes on a new connection: the first one is muted
        seen[broker] = (_create_topics(bootstrap, strict, 7, count=2),
                        _create_topics(bootstrap, permissive, 5, started=started)
                        + _create_topics(bootstrap, permissive, 5, started=started, first=1),
                        _create_topics(bootstrap, f"free-{strict}", 7, count=3))
    for broker, (strict, permissive, free) in seen.items():
        assert [(e, t) for e, _, t, _ in strict[:1]] == [(0, 0)], (broker, strict)
        assert strict[1][:2] == (89, None) and 29_000 - strict[1][3] < strict[1][2] <= 29_000, (broker, strict)
        assert [e for e, _, _, _ in permissive] == [0, 0], (broker, permissive)
        assert 29_000 - permissive[0][3] < permissive[0][2] <= 29_000 and \
            69_000 - permissive[1][3] < permissive[1][2] <= 69_000, (broker, permissive)
        assert [(e, t) for e, _, t, _ in free] == [(0, 0)] * 3, (broker, free)


def _metadata_throttles(bootstrap: str, client_id: str, requests: int = 5) -> list[int]:
    with KafkaConnection(bootstrap, client_id=client_id) as conn:
        out = []
        for _ in range(requests):
            r = conn.send(m.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False), 12)
            assert r.brokers  # a whole answer, throttled or not
            out.append(r.throttle_time_ms)
        return out


def test_request_percentage_throttles_a_client_over_its_share_of_request_time_as_kafka_does(both):
    """request_percentage 0.001 (% of one request thread per second, over the quota window) for one client id:
    Metadata requests, back to back. Any request costs more than 0.1 ms per 10 s window, so both brokers answer
    with a wait, at most one window (quota.window.size.seconds: Kafka's cap for request quotas); a client id
    without the quota is never throttled."""
    seen = {}
    for broker, bootstrap in both.items():
        client = f"busy-{uuid.uuid4().hex[:6]}"
        with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
            assert alter(conn, [({"client-id": client}, [("request_percentage", 0.001, False)])])[0][0] == 0
        time.sleep(1)
        seen[broker] = (_metadata_throttles(bootstrap, client), _metadata_throttles(bootstrap, f"idle-{client}"))
    for broker, (busy, idle) in seen.items():
        assert sum(1 for t in busy if t > 0) >= 4 and max(busy) == 1_000, (broker, busy)
        assert idle == [0] * 5, (broker, idle)


def _connections_from(bootstrap: str, source_ip: str, count: int) -> list[tuple[str, float]]:
    """`count` connections one after another from `source_ip` (any 127.x address is this host's), each sending
    ApiVersions v0 and waiting up to 3 s: [("answered" or "closed", ms from connect to the answer or the close)]."""
    host, port = bootstrap.rsplit(":", 1)
    request = encode_request(RequestHeader(18, 0, 7, "kray-ip-quota"), m.ApiVersionsRequest().encode(0))
    out = []
    for _ in range(count):
        with socket.create_connection((host, int(port)), timeout=3, source_address=(source_ip, 0)) as s:
            started = time.monotonic()
            s.sendall(request)
            try:
                answered = len(s.recv(4)) == 4
            except ConnectionResetError:
                answered = False
            out.append(("answered" if answered else "closed", (time.monotonic() - started) * 1000))
    return out


def test_connection_creation_rate_closes_an_addresses_connections_over_it_unanswered_as_kafka_does(both):
    """connection_creation_rate 2/s for one address (KIP-612): 20 connections in a row are served (a young rate
    is measured over 10 s), then each further one is accepted, never answered and closed after the rate's wait (at
    most one window: 1 s); another address is not limited, and once the quota is removed the address is served
    again. Kafka's acceptor does this; Kray's gateway the same, before reading a byte."""
    seen = {}
    for broker, bootstrap in both.items():
        source = f"127.0.{random.randrange(1, 255)}.{random.randrange(2, 255)}"
        with KafkaConnection(bootstrap, client_id="kray-quotas") as conn:
            assert alter(conn, [({"ip": source}, [("connection_creation_rate", 2.0, False)])])[0][0] == 0
            try:
                outcomes = _connections_from(bootstrap, source, 26)
                elsewhere = _connections_from(bootstrap, "127.0.0.1", 3)
            finally:
                assert alter(conn, [({"ip": source}, [("connection_creation_rate", 0.0, True)])])[0][0] == 0
            after = _connections_from(bootstrap, source, 3)
        seen[broker] = outcomes, elsewhere, after
    for broker, (outcomes, elsewhere, after) in seen.items():
        closed = [ms for what, ms in outcomes if what == "closed"]
        outcomes = [(what[0], round(ms)) for what, ms in outcomes]  # (as the messages below print them)
        run_s = sum(ms for _, ms in outcomes) / 1000
        assert [what for what, _ in outcomes[:20]] == ["a"] * 20, (broker, outcomes)
        # (Kafka 4.4, three runs: the 21st closed after 517-573 ms, or answered when the first 20 took over 0.5 s,
        # one more answered, the rest closed after 504-1,051 ms; Kray the same pattern, closed after 462-1,004 ms.
        # the 2 s bound leaves a loaded machine room beyond the one-window wait)
        assert len(closed) >= 3 and 26 - len(closed) <= 2 * (10 + run_s) + 1, (broker, outcomes)
        assert all(ms <= 2_000 for ms in closed), (broker, outcomes)
        assert [what for what, _ in elsewhere + after] == ["answered"] * 6, (broker, elsewhere, after)
