"""Broker sessions and partitions that heal by themselves (issue 17 item 5), on a 3-broker
LocalCluster with real clients over TCP:

- a broker cut off from the controller stops serving as leader once its session would have
  expired (broker.session.timeout.ms), and serves again as soon as the controller answers; the
  cut is the controller's process stopped (SIGSTOP), so every broker is cut off at once;
- a node stalled longer than Ray's health checks (declared dead: its raylet exits when it wakes)
  is started again by the node supervisor, with no call from the test, and rejoins every ISR;
- neither loses an acknowledged record.

The faults are LocalCluster's (`pause`, `resume`); on hosts of their own the same tests take a
network cut instead (`cut` / `heal` below are the only fault-specific steps)."""
import os
import signal
import time
import uuid

import pytest
import ray
from confluent_kafka.admin import AdminClient, NewTopic

from actors.controller.quorum import QuorumConfig
from cluster.local import LocalCluster, _node_pids
from protocol.errors import ErrorCode
from tests.cluster.raw import metadata_one, produce_one
from tests.cluster.test_replication import AckedProducer, _read_keys, _wait_for_isr

SESSION_MS = 3000
LEASE_S = QuorumConfig(voters=(1,)).fetch_timeout_ms / 1000   # controller.quorum.fetch.timeout.ms, not set here
LIVENESS = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500,
            "replica.lag.time.max.ms": 5000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-sessions"), overrides=LIVENESS)
    c.start()
    c.events = []
    c.report_broker_events(c.events.append)
    yield c
    c.stop()


def _create(cluster, partitions: int = 3) -> tuple[str, AdminClient]:
    topic = f"s-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    for i in range(partitions):
        _wait_for_isr(admin, topic, i, [1, 2, 3])
    return topic, admin


def _controller_pids(cluster) -> list[int]:
    """The controllers' processes (the active one and the standbys, on the voting brokers' nodes),
    below this cluster's raylets (never another Ray's)."""
    pids = []
    for node in cluster.ray_cluster.list_all_nodes():
        for pid in _node_pids(node):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().startswith(b"ray::ControllerActor"):
                        pids.append(pid)
            except OSError:
                pass
    assert pids, "no controller process found"
    return pids


def _until(condition, timeout_s: float, what: str, poll_s: float = 0.1) -> float:
    """Seconds until `condition()` held."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"{what} not within {timeout_s:.0f} s"
        time.sleep(poll_s)
    return time.monotonic() - start


def test_a_broker_cut_off_from_the_controller_stops_leading_after_its_session(cluster):
    topic, _ = _create(cluster)
    probe, _ = _create(cluster)  # raw one-record writes to each leader, beside the producer's topic
    gateways = dict(zip(cluster.brokers, cluster.bootstrap.split(",")))
    leaders = {i: cluster.leader(probe, i) for i in range(3)}
    producer = AckedProducer(cluster.bootstrap, topic, 3)
    pids = _controller_pids(cluster)
    answers: dict[int, int] = {}

    def refused_everywhere() -> bool:
        for i, broker in leaders.items():
            answers[i] = produce_one(gateways[broker], probe, i, acks=1, timeout_s=10)
        return all(code == ErrorCode.NOT_LEADER_OR_FOLLOWER for code in answers.values())

    def served_everywhere() -> bool:
        for i, broker in leaders.items():
            answers[i] = produce_one(gateways[broker], probe, i, acks=1, timeout_s=10)
        return all(code == ErrorCode.NONE for code in answers.values())

    try:
        time.sleep(1)
        assert served_everywhere()
        for pid in pids:  # cut: the controller stops answering every broker
            os.kill(pid, signal.SIGSTOP)
        fenced_s = _until(refused_everywhere, 15, f"every leader refusing writes (answers {answers})")
        # (a broker counts its session from the controller's last contact with a majority of the
        # voters, which an answer may carry up to the controller's lease old: not before then)
        assert SESSION_MS / 1000 - LEASE_S <= fenced_s <= SESSION_MS / 1000 + 3, \
            f"brokers stopped leading {fenced_s:.1f} s after the cut; their session is {SESSION_MS} ms"
        brokers, described_leaders = metadata_one(gateways[leaders[0]], probe)
        assert leaders[0] not in brokers, f"a broker that may be fenced advertises itself: {brokers}"
        assert described_leaders[0] == -1, "a broker that may be fenced advertises its leadership"
    finally:
        for pid in pids:  # heal
            os.kill(pid, signal.SIGCONT)
    healed_s = _until(served_everywhere, 15, f"every leader taking writes again after the heal (answers {answers})")
    producer.finish()
    print(f"\nfenced {fenced_s:.2f} s after the cut (broker.session.timeout.ms={SESSION_MS}); "
          f"serving {healed_s:.2f} s after the heal")
    assert healed_s <= 5, f"brokers served again only {healed_s:.1f} s after the controller answered"
    assert {i: cluster.leader(probe, i) for i in range(3)} == leaders, \
        "the controller's own stall moved leadership (it must give every broker a fresh session)"
    acked = set(producer.acked)
    assert len(acked) > 100
    assert _read_keys(cluster.bootstrap, topic, 3, len(acked)) >= acked, "acknowledged records lost"


def test_a_node_declared_dead_comes_back_by_itself_and_rejoins_the_isr(cluster):
    topic, admin = _create(cluster)
    victim = cluster.leader(topic, 0)
    producer = AckedProducer(cluster.bootstrap, topic, 3)
    restarts_before = len(cluster.restarts)
    try:
        time.sleep(1)
        cluster.pause_node(victim)  # the whole machine stalls: raylet, gateway, shards
        dead_node = cluster._nodes[victim].node_id
        declared_dead_s = _until(lambda: not any(n["NodeID"] == dead_node and n["Alive"] for n in ray.nodes()),
                                 30, f"Ray declaring broker {victim}'s node dead", poll_s=0.2)
        moved_s = _until(lambda: cluster.leader(topic, 0) not in (victim, -1), 15, "a new leader for partition 0")
        time.sleep(1)
        resumed_at = time.monotonic()
        assert cluster.resume_node(victim), "the node was declared dead, so it must have been started again"
    finally:
        if victim in cluster._paused:
            cluster.resume_node(victim)
    serving_s = time.monotonic() - resumed_at
    assert len(cluster.restarts) > restarts_before and cluster.restarts[-1][0] == victim, \
        "the node supervisor, not the test, started the node again"
    for i in range(3):
        _wait_for_isr(admin, topic, i, [1, 2, 3])
    isr_s = time.monotonic() - resumed_at
    producer.finish()
    print(f"\nRay declared the node dead {declared_dead_s:.1f} s into the stall, its partition moved within "
          f"{moved_s:.1f} s more; after the wake: serving again in {serving_s:.1f} s, every ISR whole in {isr_s:.1f} s")
    said = "\n".join(cluster.events)
    print(said)
    for words in (f"broker {victim} lost", f"broker {victim}: its Ray node is gone", f"broker {victim} back"):
        assert words in said, f"{words!r} not said on the console:\n{said}"
    acked = set(producer.acked)
    assert len(acked) > 100
    assert _read_keys(cluster.bootstrap, topic, 3, len(acked)) >= acked, "acknowledged records lost"
