"""Partition reassignment on a 3-broker LocalCluster (real Ray nodes) under load: every partition of a topic
moves off the broker that leads it, and so do the __consumer_offsets partition that coordinates the consumer
group and the __share_group_state partitions that hold the share group's state, while idempotent acks=all
producers, a plain consumer, a consumer group committing and a share consumer accepting every record run
(cluster/jepsen.py's clients). cluster/checker.py's rules then hold: nothing acknowledged is lost, no offset
holds two records, nothing read is gone, committed offsets never go backwards, and no record whose acceptance
was acknowledged is delivered again. Also: a throttled move that is cancelled, and a move that a restarted
controller carries on from the metadata log, and a move held back by the leader's side of the throttle."""
import threading
import time
import uuid

import pytest
import ray
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from actors import internal_topics
from cluster import checker, jepsen
from cluster.admin import KafkaConnection
from cluster.local import LocalCluster
from cluster.tools import reassign_partitions as tool
from tests.coordinators import group_coordinator_partition, share_state_partition

FAST_LIVENESS = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
                 "replica.lag.time.max.ms": 5000}
PLACEMENT = {0: [1, 2], 1: [2, 3], 2: [3, 1]}
MOVE_OFF_LEADERS = {0: [2, 3], 1: [3, 1], 2: [1, 2]}  # each partition's leader (its first replica) removed


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-reassign"), overrides=FAST_LIVENESS)
    c.start()
    yield c
    c.stop()


def _create(bootstrap: str, topic: str, placement: dict[int, list[int]]) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=len(placement),
                                  replica_assignment=[placement[p] for p in sorted(placement)],
                                  config={"min.insync.replicas": "2"})])[topic].result(60)
    return admin


def wait_for_readers(h, timeout_s: float = 60) -> set[tuple[int, int]]:
    """Until the reader and the share consumer have every acknowledged (partition, offset), at most
    timeout_s; returns those. An acknowledgement without an offset (librdkafka's idempotent producer's
    answer after a timed-out request whose records a later one proved written) is left to
    cluster/checker.py, which checks it by its value."""
    acked = {(a.partition, a.offset) for a in h.acks if a.offset is not None and a.offset >= 0}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (
            acked <= {(r.partition, r.offset) for r in list(h.reads)}
            and acked <= {(e.partition, e.offset) for e in list(h.share) if e.kind == "accepted"}):
        time.sleep(1)
    return acked


def _moves_done(bootstrap: str) -> bool:
    with KafkaConnection(bootstrap) as conn:
        return not tool.ongoing(conn)


def _alter(bootstrap: str, targets: dict) -> dict:
    with KafkaConnection(bootstrap) as conn:
        return tool.alter(conn, targets)


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_a_topic_and_its_coordinators_move_under_load_and_nothing_acknowledged_is_lost(cluster):
    bootstrap = cluster.bootstrap
    topic, group, share_group = (f"mv-{uuid.uuid4().hex[:6]}", f"mv-group-{uuid.uuid4().hex[:4]}",
                                 f"mv-share-{uuid.uuid4().hex[:4]}")
    admin = _create(bootstrap, topic, PLACEMENT)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, share_group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        f.result(60)
    partitions = len(PLACEMENT)
    h = jepsen.History()
    stop_producers, stop_consumers = threading.Event(), threading.Event()
    producers = [threading.Thread(target=jepsen.produce, daemon=True,
                                  args=(bootstrap, topic, partitions, f"p{i}", 40, stop_producers, h)) for i in range(2)]
    consumers = [threading.Thread(target=jepsen.consume_plain, daemon=True,
                                  args=(bootstrap, topic, partitions, stop_consumers, h)),
                 threading.Thread(target=jepsen.consume_group, daemon=True,
                                  args=(bootstrap, topic, partitions, group, stop_consumers, h)),
                 threading.Thread(target=jepsen.consume_share, daemon=True,
                                  args=(bootstrap, topic, share_group, stop_consumers, h))]
    for t in producers + consumers:
        t.start()
    try:
        _wait(lambda: h.commits and any(e.kind == "accepted" for e in h.share) and h.reads and h.acks, 120,
              "the clients did no work in 120 s")
        time.sleep(3)
        image = cluster.metadata()
        offsets = image.topics[internal_topics.CONSUMER_OFFSETS]
        state = image.topics[internal_topics.SHARE_GROUP_STATE]
        coordinator = group_coordinator_partition(image, group)
        states = {share_state_partition(image, share_group, topic, p) for p in range(partitions)}
        internal_before = {(offsets.name, coordinator): offsets.partitions[coordinator].leader,
                           **{(state.name, s): state.partitions[s].leader for s in states}}
        targets = {(topic, p): replicas for p, replicas in MOVE_OFF_LEADERS.items()}
        for (name, index), leader in internal_before.items():
            replicas = image.topics[name].partitions[index].replicas
            targets[(name, index)] = [r for r in replicas if r != leader] + [r for r in (1, 2, 3)
                                                                             if r not in replicas][:1]
        started = h.now()
        assert _alter(bootstrap, targets) == {}
        try:
            _wait(lambda: _moves_done(bootstrap), 180, "the moves did not complete in 180 s")
        except AssertionError:
            with KafkaConnection(bootstrap) as conn:
                stuck = tool.ongoing(conn)
            image = cluster.metadata()
            raise AssertionError(f"moves still running after 180 s: " + "; ".join(
                f"{t}-{p} {moving} ISR {image.topics[t].partitions[p].isr} leader {image.topics[t].partitions[p].leader}"
                for (t, p), moving in sorted(stuck.items()))) from None
        h.faults.append(checker.Fault("reassignment", started, h.now()))
        after = cluster.metadata()
        for p, replicas in MOVE_OFF_LEADERS.items():
            moved = after.topics[topic].partitions[p]
            # (the target's first replica took over; on a loaded machine a session may lapse since and move it on)
            assert moved.replicas == replicas and moved.leader in replicas, moved
        for (name, index), leader in internal_before.items():
            moved = after.topics[name].partitions[index]
            assert leader not in moved.replicas and moved.leader != leader, (name, index, moved)
        acks_at_end_of_move = len(h.acks)
        commits_at_end_of_move = len(h.commits)
        accepted_at_end_of_move = sum(e.kind == "accepted" for e in h.share)
        time.sleep(8)
    finally:
        stop_producers.set()
        for t in producers:
            t.join(150)
        acked = wait_for_readers(h)
        stop_consumers.set()
        for t in consumers:
            t.join(60)
    hws, final = jepsen.read_final(bootstrap, topic, partitions)
    report = checker.check(acks=h.acks, final=final, replicas=jepsen.replica_logs(cluster.data_dir, topic, partitions),
                           high_watermarks=hws, reads=h.reads, commits=h.commits, observed=h.observed, share=h.share,
                           faults=h.faults, partitions=list(range(partitions)))
    print(checker.markdown(report, "a topic and its coordinators moved under load"))
    assert report.safe, report.to_json()
    assert len(h.acks) > acks_at_end_of_move, "acks=all writes went on after the move"
    assert len(h.commits) > commits_at_end_of_move, "the group committed through its moved coordinator"
    assert sum(e.kind == "accepted" for e in h.share) > accepted_at_end_of_move, \
        "the share group accepted through its moved share-partition leaders and share-state partitions"
    # every acknowledged record was accepted by the share group; those whose acceptance the client heard refused
    # (it went to a share-partition leader that had just moved; Kafka's client gives no guarantee either way)
    # count too when the group holds none of them any more: its lag is 0, nothing below its end left to deliver
    accepted = {(e.partition, e.offset) for e in h.share if e.kind == "accepted"}
    refused = sum(n for kind, n in h.errors.items() if kind.startswith("share acknowledgement refused"))
    lags = _share_lags(bootstrap, share_group, topic)
    print(f"share group: {len(acked - accepted)} acknowledged records whose acceptance was not confirmed "
          f"({refused} acknowledgements answered with an error); lag per partition {lags}")
    assert acked - accepted == set() or (refused and lags == {p: 0 for p in range(partitions)}), \
        (len(acked - accepted), refused, lags)
    assert acked <= {(r.partition, r.offset) for r in h.reads}
    assert report.faults[0]["unavailable_s"] is not None


def _share_lags(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """partition -> the share group's lag (records from its start offset to the end not yet acknowledged)."""
    import subprocess
    import sys
    from pathlib import Path
    out = subprocess.run([str(Path(sys.executable).parent / "kray"), "share-groups", "--bootstrap-server", bootstrap,
                          "--describe", "--group", group], capture_output=True, text=True, timeout=60).stdout
    return {int(cols[2]): int(cols[4]) for cols in (line.split("\t") for line in out.splitlines())
            if len(cols) == 5 and cols[1] == topic and cols[4].isdigit()}


def _throttle(admin: AdminClient, topic: str, followers: str, rate: str | None) -> None:
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    resources = [ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
        ConfigEntry("follower.replication.throttled.rate", rate or "", incremental_operation=op)]) for b in (1, 2, 3)]
    resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("follower.replication.throttled.replicas", followers if rate is not None else "",
                    incremental_operation=op)]))
    for resource in resources:  # (the client takes one BROKER resource per call)
        for f in admin.incremental_alter_configs([resource]).values():
            f.result(60)


def _fill(bootstrap: str, topic: str, megabytes: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for _ in range(megabytes * 1000):
        p.produce(topic, value=b"x" * 1000, partition=0)
        p.poll(0)
    assert p.flush(120) == 0


def test_a_throttled_move_is_cancelled_and_one_survives_a_controller_restart(cluster):
    """A move held back by a throttle (50 kB/s for 3 MB) is cancelled: back to the original replicas, the added
    replica stopped. A second one is under way when Ray restarts the controller: the new incarnation reads the
    move from the metadata log, lists it, and completes it once the throttle is lifted."""
    from tests.actors.restarts import kill_and_await_restart
    bootstrap = cluster.bootstrap
    topic = f"mv-{uuid.uuid4().hex[:6]}"
    admin = _create(bootstrap, topic, {0: [1, 2]})
    _fill(bootstrap, topic, 3)
    _throttle(admin, topic, "0:3", "50000")
    assert _alter(bootstrap, {(topic, 0): [1, 3]}) == {}
    time.sleep(2)
    with KafkaConnection(bootstrap) as conn:
        assert tool.ongoing(conn) == {(topic, 0): ([1, 3, 2], [3], [2])}
    assert _alter(bootstrap, {(topic, 0): None}) == {}
    p = cluster.metadata().topics[topic].partitions[0]
    assert (p.replicas, p.adding, p.removing) == ([1, 2], [], [])
    _wait(lambda: not (cluster.data_dir / "broker-3" / f"{topic}-0").exists(), 30,
          "the cancelled replica's directory is still on broker 3")

    assert _alter(bootstrap, {(topic, 0): [3, 2]}) == {}
    time.sleep(2)
    assert not _moves_done(bootstrap)
    kill_and_await_restart(cluster.controller)
    _wait(lambda: not _moves_done(bootstrap), 60, "the restarted controller does not list the move")
    with KafkaConnection(bootstrap) as conn:
        assert tool.ongoing(conn) == {(topic, 0): ([3, 2, 1], [3], [1])}
    _throttle(admin, topic, "", None)
    _wait(lambda: _moves_done(bootstrap), 120, "the move did not complete after the controller's restart")
    p = cluster.metadata().topics[topic].partitions[0]
    assert (p.replicas, sorted(p.isr), p.leader) == ([3, 2], [2, 3], 3)
    _, final = jepsen.read_final(bootstrap, topic, 1)
    assert len(final[0]) == 3000


def _leader_throttle(admin: AdminClient, topic: str, leaders: str, rate: str | None) -> None:
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    for resource in [ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
            ConfigEntry("leader.replication.throttled.rate", rate or "", incremental_operation=op)]) for b in (1, 2, 3)] + [
            ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
                ConfigEntry("leader.replication.throttled.replicas", leaders if rate is not None else "",
                            incremental_operation=op)])]:
        for f in admin.incremental_alter_configs([resource]).values():
            f.result(60)


def _replica_bytes(cluster, broker: int, topic: str) -> int:
    directory = cluster.data_dir / f"broker-{broker}" / f"{topic}-0"
    return sum(f.stat().st_size for f in directory.glob("*.log")) if directory.exists() else 0


def test_the_leaders_throttle_holds_a_new_replica_back_until_it_is_lifted(cluster):
    """Kafka's leader side of the throttle: broker 1 leads partition 0 and the topic lists its replica in
    leader.replication.throttled.replicas; with leader.replication.throttled.rate 50 kB/s a replica added on
    broker 3 (not in the ISR) gets about that rate, while the in-sync follower on broker 2 and an acks=all
    producer go on unthrottled. Lifted, the move completes and every record is on the new replica."""
    bootstrap = cluster.bootstrap
    topic = f"lt-{uuid.uuid4().hex[:6]}"
    admin = _create(bootstrap, topic, {0: [1, 2]})
    _fill(bootstrap, topic, 3)
    total = _replica_bytes(cluster, 1, topic)
    _leader_throttle(admin, topic, "0:1", "50000")
    assert _alter(bootstrap, {(topic, 0): [1, 2, 3]}) == {}
    started = time.monotonic()
    time.sleep(8)
    copied = _replica_bytes(cluster, 3, topic)
    elapsed = time.monotonic() - started
    # one fetch may overshoot the rate by its size (replica.fetch.max.bytes, 1 MiB), the rest keeps to it
    assert copied <= 1048576 + 50000 * elapsed * 1.5, (copied, elapsed)
    assert copied < total and not _moves_done(bootstrap), (copied, total)
    _fill(bootstrap, topic, 1)  # the in-sync follower is not throttled: acks=all writes go on
    _leader_throttle(admin, topic, "", None)
    _wait(lambda: _moves_done(bootstrap), 120, "the move did not complete once the throttle was lifted")
    p = cluster.metadata().topics[topic].partitions[0]
    assert (p.replicas, sorted(p.isr)) == ([1, 2, 3], [1, 2, 3])
    _, final = jepsen.read_final(bootstrap, topic, 1)
    assert len(final[0]) == 4000
