"""The metadata quorum for real (issue 17; actors/controller/quorum_shell): on a 3-broker LocalCluster
with combined voters (controller.quorum.voters=1,2,3; LocalCluster's default is one dedicated
controller voter), each broker runs a voter in its gateway; the voters elect a leader
over the brokers' own listeners (Vote v2 pre-votes, BeginQuorumEpoch, Fetch of __cluster_metadata-0),
and DescribeQuorum, asked of each broker over TCP, shows one leader, one epoch and a committed log.
A leader's node killed (SIGKILL of every process) leaves two voters that elect another leader with a
higher epoch and commit its LeaderChange; the killed broker, started again from its files, follows the
new leader and catches up.

The controller keeps its metadata there: no metadata log on its own node, a topic created is a record
committed in the quorum, and topics created before a quorum leader's loss are served, written and read
after it (the controller, whose proposal in flight may have been lost, starts again and reads the log).
Each voting broker's node runs a controller; the one whose voter leads is active, and another takes
over when that node dies."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from confluent_kafka.admin import AdminClient, NewTopic

from cluster.admin import KafkaConnection
from protocol.messages import MetadataRequest
from cluster.local import LocalCluster
from cluster.tools.metadata_quorum import describe_request, partition_of
from tests.cluster.test_replication import AckedProducer, _read_keys, _wait_for_isr

REPO = Path(__file__).resolve().parents[2]
QUORUM = {"controller.quorum.voters": "1,2,3"}  # combined voters (LocalCluster's default: one dedicated)
ELECTED_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-quorum"), overrides=QUORUM)
    c.start()
    c.addresses = {b: f"{info.host}:{info.port}" for b, info in c.metadata().brokers.items()}
    c.events = []
    c.report_broker_events(c.events.append)
    yield c
    c.stop()


def describe(address: str):
    with KafkaConnection(address, client_id="test-quorum", timeout_s=5) as conn:
        return partition_of(conn.send(describe_request()))


def agreed(cluster, brokers, *, above_epoch: int = 0, timeout_s: float = ELECTED_WITHIN_S):
    """Until every broker in `brokers` names the same leader in the same epoch (> above_epoch) and
    that leader reports every voter's log end offset at its high watermark: the leader's view."""
    deadline = time.monotonic() + timeout_s
    seen = {}
    while time.monotonic() < deadline:
        try:
            seen = {b: describe(cluster.addresses[b]) for b in brokers}
        except Exception as e:  # a broker still starting its voter, or restarting
            seen = {"error": repr(e)}
            time.sleep(0.5)
            continue
        views = {(p.leader_id, p.leader_epoch) for p in seen.values()}
        if len(views) == 1:
            leader, epoch = views.pop()
            if leader in brokers and epoch > above_epoch:
                view = seen[leader]
                ends = {r.replica_id: r.log_end_offset for r in view.current_voters}
                if view.high_watermark > 0 and all(ends.get(b) == view.high_watermark for b in brokers):
                    return view
        time.sleep(0.5)
    raise AssertionError(f"no agreed quorum leader among {sorted(brokers)} within {timeout_s:.0f} s: "
                         f"{ {b: (getattr(p, 'leader_id', p), getattr(p, 'leader_epoch', None)) for b, p in seen.items()} }")


def _listed_everywhere(cluster, brokers: set[int], timeout_s: float = 30.0) -> None:
    """Until each broker's Metadata answer, asked over TCP, lists every broker of `brokers`: a
    broker back from a restart is known to the controller a moment before every gateway has the
    new image, and a client that meets an answer without it drops its connection to it and fails
    what it had in flight there (librdkafka: _DESTROY_BROKER), as a Kafka client would with a
    broker whose metadata lags. An operator waits for the broker to be listed; so does the test."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {}
        for b in brokers:
            try:
                with KafkaConnection(cluster.addresses[b], client_id="test-quorum", timeout_s=5) as conn:
                    seen[b] = sorted(x.node_id for x in conn.send(MetadataRequest(topics=[])).brokers)
            except Exception as e:  # still starting its listener
                seen[b] = repr(e)
        if all(isinstance(v, list) and set(v) >= brokers for v in seen.values()):
            return
        assert time.monotonic() < deadline, f"brokers not listed by every broker within {timeout_s:.0f} s: {seen}"
        time.sleep(0.3)


def _create(cluster, topic: str, partitions: int = 3) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    return admin


def test_voters_elect_one_leader_and_commit_over_the_listeners(cluster):
    view = agreed(cluster, {1, 2, 3})
    # the controller's metadata is in the quorum, not in a file beside the controller
    assert not (Path(cluster.data_dir) / "__cluster_metadata" / "metadata.log").exists()
    admin = _create(cluster, "q-before")
    assert "q-before" in admin.list_topics(timeout=10).topics
    grown = agreed(cluster, {1, 2, 3})
    assert grown.high_watermark > view.high_watermark   # the topic's record, committed by the voters
    assert sorted(r.replica_id for r in view.current_voters) == [1, 2, 3]
    assert list(view.observers) == []
    # the voter's state is on the broker's disk, beside its partitions, as Kafka lays it out
    state = Path(cluster.data_dir) / f"broker-{view.leader_id}" / "__cluster_metadata-0" / "quorum-state"
    recorded = json.loads(state.read_text())
    assert (recorded["leaderId"], recorded["leaderEpoch"]) == (view.leader_id, view.leader_epoch)
    assert sorted(v["voterId"] for v in recorded["currentVoters"]) == [1, 2, 3]
    # the operator's view: kray metadata-quorum, as kafka-metadata-quorum.sh prints it
    out = subprocess.run([sys.executable, "-m", "cluster.cli", "metadata-quorum", "--bootstrap-server",
                          cluster.addresses[view.leader_id], "describe", "--status"],
                         capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert f"LeaderId:               {view.leader_id}" in out.stdout
    assert "CurrentVoters:          [1,2,3]" in out.stdout


def test_a_killed_leader_is_replaced_and_rejoins_as_a_follower(cluster):
    before = agreed(cluster, {1, 2, 3})
    old = before.leader_id
    topic = "q-through"
    admin = _create(cluster, topic)
    for i in range(3):
        _wait_for_isr(admin, topic, i, [1, 2, 3])
    producer = AckedProducer(cluster.bootstrap, topic, 3)
    time.sleep(2)
    cluster.kill_node(old)
    killed_at = time.monotonic()
    survivors = {1, 2, 3} - {old}
    after = agreed(cluster, survivors, above_epoch=before.leader_epoch)
    elected_s = time.monotonic() - killed_at
    assert after.leader_id != old
    assert after.high_watermark > before.high_watermark     # the new epoch's LeaderChange is committed
    print(f"new quorum leader {after.leader_id} (epoch {after.leader_epoch}) {elected_s:.1f} s after the kill")
    # the controller that ran beside the killed voter is replaced by the new leader's: it answers,
    # and the console follows it (what `kray start` prints)
    cluster.metadata()
    print(f"a controller answers {time.monotonic() - killed_at:.1f} s after the kill")
    deadline = time.monotonic() + 30
    while not any(f"the controller on broker {after.leader_id} is active" in e for e in cluster.events):
        assert time.monotonic() < deadline, cluster.events
        time.sleep(0.5)
    time.sleep(5)
    acked_before_restart = len(producer.acked)
    cluster.restart_node(old)
    back = agreed(cluster, {1, 2, 3}, above_epoch=before.leader_epoch)
    assert back.leader_epoch >= after.leader_epoch
    assert back.high_watermark >= after.high_watermark
    # the cluster works on: the metadata from before the loss, new metadata after it
    _listed_everywhere(cluster, {1, 2, 3})
    _create(cluster, "q-after")
    assert {"q-before", topic, "q-after"} <= set(AdminClient({"bootstrap.servers": cluster.bootstrap})
                                                   .list_topics(timeout=10).topics)
    time.sleep(2)
    producer.finish()
    acked = dict(producer.acked)
    assert acked and len(acked) > acked_before_restart, producer.errors[:3]
    assert set(acked) <= _read_keys(cluster.bootstrap, topic, 3, len(acked))   # no acknowledged record lost


def test_controller_mutation_rate_holds_across_brokers_as_kafkas_controller_keeps_it(cluster):
    """controller_mutation_rate (KIP-599) is the active controller's, for the whole cluster, as in Kafka (which
    applies it at its controller): at 0.2 partitions/s (a burst of 2.2) a CreateTopics v7 of 10 partitions through
    one broker takes the client's bucket to -7.8, and its next one through ANOTHER broker is refused
    THROTTLING_QUOTA_EXCEEDED with the time to wait (~39 s). With a bucket per broker (Kray before), the second
    broker let it through."""
    import uuid
    from protocol import messages as m
    client = f"mutations-{uuid.uuid4().hex[:6]}"
    A, C = m.AlterClientQuotasRequest, m.CreateTopicsRequest
    answering = [b for b, a in sorted(cluster.addresses.items()) if _answers(a)][:2]
    assert len(answering) == 2, f"two brokers answering are needed: {cluster.addresses}"
    first, second = (cluster.addresses[b] for b in answering)
    with KafkaConnection(first, client_id="test-quotas") as conn:
        r = conn.send(A(entries=[A.EntryData(entity=[A.EntityData(entity_type="client-id", entity_name=client)],
                                             ops=[A.OpData(key="controller_mutation_rate", value=0.2, remove=False)])],
                        validate_only=False))
        assert r.entries[0].error_code == 0, r
    deadline = time.monotonic() + 30          # every broker knows the quota (it asks the controller only then)
    while not all(_knows_mutation_quota(a, client) for a in (first, second)):
        assert time.monotonic() < deadline, "the quota did not reach both brokers within 30 s"
        time.sleep(0.5)

    def create(address: str, name: str):
        with KafkaConnection(address, client_id=client, timeout_s=60) as conn:
            return conn.send(C(topics=[C.CreatableTopic(name=name, num_partitions=10, replication_factor=1,
                                                        assignments=[], configs=[])],
                               timeout_ms=30_000, validate_only=False), 7)
    one = create(first, f"{client}-1")
    assert one.topics[0].error_code == 0, one           # let through whole (the bucket was not below zero)
    two = create(second, f"{client}-2")
    assert two.topics[0].error_code == 89, two        # THROTTLING_QUOTA_EXCEEDED, through the other broker
    assert two.throttle_time_ms > 20_000, two
    print(f"through broker {answering[0]}: created; through broker {answering[1]}: refused "
          f"THROTTLING_QUOTA_EXCEEDED, wait {two.throttle_time_ms} ms")


def _answers(address: str) -> bool:
    try:
        with KafkaConnection(address, client_id="test-quotas", timeout_s=5) as conn:
            conn.send(MetadataRequest(topics=[]))
        return True
    except Exception:
        return False


def _knows_mutation_quota(address: str, client: str) -> bool:
    from protocol import messages as m
    D = m.DescribeClientQuotasRequest
    with KafkaConnection(address, client_id="test-quotas", timeout_s=5) as conn:
        r = conn.send(D(components=[D.ComponentData(entity_type="client-id", match_type=0, match=client)],
                        strict=False))
    return any(v.key == "controller_mutation_rate" for e in (r.entries or ()) for v in e.values)
