"""The balancer keeps three voters on live brokers (issue 36 item 4), for real: a 4-broker LocalCluster
whose four brokers may vote (controller.quorum.voters=1,2,3,4: each runs a quorum node and a controller)
with kray.balancer.enable. The active controller takes the quorum to three voters (the fourth stays an
observer); when a voter's node dies and stays away for kray.balancer.voter.replacement.delay.ms, the
observer takes its vote (RemoveRaftVoter, then AddRaftVoter, through the leader's own voter); when the
node comes back its broker stays an observer (three voters, no change back). Meanwhile an acks=all
producer writes, metadata changes commit, and every acknowledged record is read back."""
import time

import pytest
import ray

from cluster.local import LocalCluster
from tests.cluster.test_dynamic_voters import agreed_view, commit_a_topic, describe
from tests.cluster.test_metadata_quorum import _create
from tests.cluster.test_replication import AckedProducer, _read_keys

DELAY_MS = 5000
OVERRIDES = {"controller.quorum.voters": "1,2,3,4", "kray.balancer.enable": "true",
             "kray.balancer.check.interval.ms": 1000, "kray.balancer.voter.replacement.delay.ms": DELAY_MS}
WITHIN_S = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(nodes=4, data_dir=tmp_path_factory.mktemp("kray-voter-keeping"), overrides=OVERRIDES)
    c.start()
    c.addresses = {b: f"{info.host}:{info.port}" for b, info in c.metadata().brokers.items()}
    yield c
    c.stop()


def three_voters(cluster, among: set[int], asked: set[int] | None = None, timeout_s: float = WITHIN_S):
    """Until the brokers in `asked` (default: all) name one leader in one epoch, whose voters are three brokers of
    `among`, each at the leader's high watermark: the leader's view."""
    addresses = {b: a for b, a in cluster.addresses.items() if asked is None or b in asked}
    return agreed_view(addresses, lambda ids: len(ids) == 3 and ids <= among,
                       f"three voters among {sorted(among)}", timeout_s)


def test_the_balancer_keeps_three_voters_as_a_voters_node_dies_and_returns(cluster):
    start = three_voters(cluster, {1, 2, 3, 4})
    voters = {r.replica_id for r in start.current_voters}
    (observer,) = {1, 2, 3, 4} - voters
    assert start.leader_id in voters
    print(f"four brokers may vote: voters {sorted(voters)} (leader {start.leader_id}), {observer} an observer")
    topic = "voter-keeping"
    admin = _create(cluster, topic)
    deadline = time.monotonic() + WITHIN_S
    while not all(sorted(p.isrs) == sorted(p.replicas) and len(p.replicas) == 3
                  for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()):
        assert time.monotonic() < deadline, f"{topic}'s replicas are not all in sync within {WITHIN_S:.0f} s"
        time.sleep(0.25)
    producer = AckedProducer(cluster.bootstrap, topic, 3)
    try:
        time.sleep(2)
        victim = max(voters - {start.leader_id})
        killed_at = time.monotonic()
        cluster.kill_node(victim)
        live = {1, 2, 3, 4} - {victim}
        after = three_voters(cluster, live, asked=live)
        replaced_s = time.monotonic() - killed_at
        assert {r.replica_id for r in after.current_voters} == live
        assert replaced_s >= DELAY_MS / 1000, f"voter {victim} replaced {replaced_s:.1f} s after its node died"
        print(f"broker {victim}'s node killed: broker {observer} voted in its place {replaced_s:.1f} s later "
              f"(the delay is {DELAY_MS} ms)")
        commit_a_topic(_LiveBrokers(cluster, live), "voter-keeping-metadata")
        cluster.restart_node(victim)
        deadline = time.monotonic() + WITHIN_S     # it fetches again, as an observer
        while victim not in [r.replica_id for r in describe(cluster.addresses[after.leader_id]).observers]:
            assert time.monotonic() < deadline, f"broker {victim} is not an observer after its return"
            time.sleep(0.5)
        time.sleep(3 * DELAY_MS / 1000)            # nothing moves back
        final = three_voters(cluster, {1, 2, 3, 4}, timeout_s=10)
        assert {r.replica_id for r in final.current_voters} == live, "the voters changed after the broker returned"
    finally:
        producer.finish()
    assert producer.acked, producer.errors[:5]
    keys = _read_keys(cluster.bootstrap, topic, 3, len(producer.acked))
    lost = set(producer.acked) - keys
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:10]}"
    print(f"{len(producer.acked)} records acknowledged through the voter's loss and return, none lost")


class _LiveBrokers:
    """The cluster as commit_a_topic uses it (bootstrap and addresses), with only the brokers in `live`."""

    def __init__(self, cluster, live: set[int]):
        self.addresses = {b: a for b, a in cluster.addresses.items() if b in live}
        self.bootstrap = ",".join(self.addresses.values())


def test_a_voter_being_removed_gives_its_vote_away_before_it_stops(cluster):
    """kray remove-broker on a voting broker: its replicas move off, a broker that may vote and serves
    takes its vote, and only then does it stop and unregister; the quorum keeps three voters."""
    import subprocess
    import sys
    from pathlib import Path
    serving = set(cluster.metadata().brokers)
    view = three_voters(cluster, serving, asked=serving)
    voters = {r.replica_id for r in view.current_voters}
    takers = sorted((serving & {1, 2, 3, 4}) - voters)
    assert takers, f"no broker to take a vote: voters {sorted(voters)}, serving {sorted(serving)}"
    victim = max(voters - {view.leader_id})
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "kray"), "remove-broker", "--bootstrap-server",
                           cluster.addresses[view.leader_id], "--broker", str(victim), "--wait", "--timeout", "300"],
                          capture_output=True, text=True, timeout=360)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    # it unregistered (what --wait waits for) only after its vote went: it is no voter by then
    assert victim not in {r.replica_id for r in describe(cluster.addresses[view.leader_id]).current_voters}
    left = serving - {victim}
    after = three_voters(cluster, left, asked=left, timeout_s=30)
    assert {r.replica_id for r in after.current_voters} == (voters - {victim}) | {takers[0]}
    assert victim not in cluster.metadata().brokers
    print(f"broker {victim} removed in {time.monotonic() - started:.1f} s; broker {takers[0]} votes in its place: "
          f"voters {sorted(r.replica_id for r in after.current_voters)}")
