"""Dynamic controller voters (KIP-853, issue 36 item 4) for real: on a 3-broker LocalCluster with
combined voters (controller.quorum.voters=1,2,3), `kray metadata-quorum remove-controller` takes a
voter out and `add-controller` puts it back (RemoveRaftVoter / AddRaftVoter over TCP, forwarded to
the quorum's leader), under an acks=all producer: the quorum keeps one leader, a removed voter keeps
fetching as an observer, metadata changes (topics created) commit with two voters, a leader that
removes itself hands over to another, and every acknowledged record is read back."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.admin import KafkaConnection
from cluster.local import LocalCluster
from cluster.tools.metadata_quorum import describe_request, format_directory_id, partition_of
from tests.cluster.test_metadata_quorum import _create
from tests.cluster.test_replication import AckedProducer, _read_keys, _wait_for_isr
from tests.kafka.broker import LIB, java

REPO = Path(__file__).resolve().parents[2]
QUORUM = {"controller.quorum.voters": "1,2,3"}
WITHIN_S = 60.0
METADATA_PROPAGATION_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("kray-voters"), overrides=QUORUM)
    c.start()
    c.addresses = {b: f"{info.host}:{info.port}" for b, info in c.metadata().brokers.items()}
    yield c
    c.stop()


def describe(address: str):
    with KafkaConnection(address, client_id="test-voters", timeout_s=5) as conn:
        return partition_of(conn.send(describe_request()))


def leader_view(cluster, voters: set[int], timeout_s: float = WITHIN_S):
    """Until some broker's voter leads with exactly `voters` as voters, each at its high watermark;
    every broker then names that leader (one leader, one epoch)."""
    return agreed_view(cluster.addresses, lambda ids: ids == voters, f"voters {sorted(voters)}", timeout_s)


def agreed_view(addresses: dict[int, str], accept, what: str, timeout_s: float = WITHIN_S):
    """Until every broker at `addresses` names one leader in one epoch, whose voters (their ids) `accept` takes,
    each at the leader's high watermark: the leader's DescribeQuorum view. `what` names the wait in its failure."""
    deadline, seen = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            views = {b: describe(a) for b, a in addresses.items()}
        except Exception as e:   # a broker's voter restarting
            seen = repr(e)
            time.sleep(0.5)
            continue
        seen = {b: (v.leader_id, v.leader_epoch, sorted(r.replica_id for r in v.current_voters)) for b, v in views.items()}
        leaders = {(v.leader_id, v.leader_epoch) for v in views.values()}
        if len(leaders) == 1:
            leader, _ = leaders.pop()
            view = views.get(leader)
            if view is not None:
                ends = {r.replica_id: r.log_end_offset for r in view.current_voters}
                if accept(set(ends)) and all(e == view.high_watermark for e in ends.values()):
                    return view
        time.sleep(0.5)
    raise AssertionError(f"no leader with {what} within {timeout_s:.0f} s: {seen}")


def kray_quorum(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", "metadata-quorum", "--bootstrap-server",
                           cluster.bootstrap.split(",")[0], *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def commit_a_topic(cluster, name: str) -> None:
    """A metadata change: a topic created (one partition, one replica, so that it needs only the
    controller and one broker), answered once its records are committed in the quorum."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(120)
    # every broker then learns the topic from the metadata (as in Kafka, a moment after CreateTopics
    # answers: a Metadata request to another broker may not list it yet)
    deadline = time.monotonic() + METADATA_PROPAGATION_S
    for broker, address in cluster.addresses.items():
        one = AdminClient({"bootstrap.servers": address})
        while name not in one.list_topics(timeout=30).topics:
            assert time.monotonic() < deadline, f"broker {broker} does not list {name} {METADATA_PROPAGATION_S:.0f} s after it was created"
            time.sleep(0.2)
    print(f"{name}: listed by every broker {METADATA_PROPAGATION_S - (deadline - time.monotonic()):.1f} s after CreateTopics answered")


def directory_of(view, node_id: int) -> str:
    (replica,) = [r for r in list(view.current_voters) + list(view.observers) if r.replica_id == node_id]
    return format_directory_id(replica.replica_directory_id)


def test_a_voter_removed_and_added_back_under_a_producer(cluster):
    view = leader_view(cluster, {1, 2, 3})
    topic = "voters-load"
    admin = _create(cluster, topic)
    for i in range(3):
        _wait_for_isr(admin, topic, i, [1, 2, 3])
    producer = AckedProducer(cluster.bootstrap, topic, 3)
    started = time.monotonic()
    try:
        time.sleep(2)
        # a follower voter out, then back
        follower = min({1, 2, 3} - {view.leader_id})
        out = kray_quorum(cluster, "remove-controller", "--controller-id", str(follower),
                          "--controller-directory-id", directory_of(view, follower))
        assert out.returncode == 0, out.stderr
        assert f"Removed controller {follower}" in out.stdout
        two = leader_view(cluster, {1, 2, 3} - {follower})
        assert two.leader_id == view.leader_id and two.leader_epoch == view.leader_epoch   # no election needed
        deadline = time.monotonic() + WITHIN_S      # the removed voter keeps fetching, as an observer
        while follower not in [r.replica_id for r in describe(cluster.addresses[two.leader_id]).observers]:
            assert time.monotonic() < deadline, "the removed voter is not an observer of the leader"
            time.sleep(0.5)
        commit_a_topic(cluster, "voters-two")      # a metadata change commits with two voters
        refused = kray_quorum(cluster, "remove-controller", "--controller-id", str(follower),
                              "--controller-directory-id", directory_of(view, follower))
        assert refused.returncode == 1 and "VOTER_NOT_FOUND" in refused.stderr
        out = kray_quorum(cluster, "add-controller", "--controller-id", str(follower))
        assert out.returncode == 0, out.stderr
        three = leader_view(cluster, {1, 2, 3})
        assert three.leader_id == view.leader_id
        # the leader removes itself: it commits its removal, resigns, and another voter leads
        old = three.leader_id
        out = kray_quorum(cluster, "remove-controller", "--controller-id", str(old),
                          "--controller-directory-id", directory_of(three, old))
        assert out.returncode == 0, out.stderr
        handed = leader_view(cluster, {1, 2, 3} - {old})
        assert handed.leader_id != old and handed.leader_epoch > three.leader_epoch
        commit_a_topic(cluster, "voters-handed")   # the new leader's controller commits metadata
        out = kray_quorum(cluster, "add-controller", "--controller-id", str(old))
        assert out.returncode == 0, out.stderr
        final = leader_view(cluster, {1, 2, 3})
        # (asked of the leader: a follower voter knows the leader and epoch, not the voters' states)
        status = subprocess.run([sys.executable, "-m", "cluster.cli", "metadata-quorum", "--bootstrap-server",
                                 cluster.addresses[final.leader_id], "describe", "--status"], capture_output=True,
                                text=True, timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert "CurrentVoters:          [1,2,3]" in status.stdout, status.stdout
        time.sleep(2)
    finally:
        producer.finish()
    assert producer.acked, producer.errors[:5]
    keys = _read_keys(cluster.bootstrap, topic, 3, len(producer.acked))
    lost = set(producer.acked) - keys
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:10]}"
    print(f"{len(producer.acked)} records acknowledged through two removals and two additions "
          f"({time.monotonic() - started:.0f} s), none lost; final leader {final.leader_id} (epoch {final.leader_epoch})")


@pytest.mark.skipif(shutil.which("java") is None or not any(LIB.glob("kafka-tools-*.jar")),
                    reason="Kafka 4.4's tools (tests/kafka/lib, installed by ./dev test) and java are needed")
def test_kafkas_own_kafka_metadata_quorum_removes_a_voter_of_kray(cluster):
    """Kafka 4.4's kafka-metadata-quorum.sh (org.apache.kafka.tools.MetadataQuorumCommand) against
    Kray: describe --replication lists Kray's voters with their directory ids, remove-controller
    takes one out through Kafka's admin client (RemoveRaftVoter); kray add-controller puts it back."""
    view = leader_view(cluster, {1, 2, 3})
    bootstrap = cluster.addresses[view.leader_id]

    def kafka_tool(*args):
        run = subprocess.run(java("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server", bootstrap,
                                  *args), capture_output=True, text=True, timeout=120)
        return run.returncode, run.stdout + run.stderr

    code, text = kafka_tool("describe", "--replication")
    assert code == 0, text
    victim = min({1, 2, 3} - {view.leader_id})
    assert directory_of(view, victim) in text
    code, text = kafka_tool("remove-controller", "--controller-id", str(victim),
                            "--controller-directory-id", directory_of(view, victim))
    assert code == 0, text
    leader_view(cluster, {1, 2, 3} - {victim})
    out = kray_quorum(cluster, "add-controller", "--controller-id", str(victim))
    assert out.returncode == 0, out.stderr
    leader_view(cluster, {1, 2, 3})
