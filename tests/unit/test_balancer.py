"""The balancer's pure core (actors/controller/balancer.py): a cluster that grows gets its share of replicas and
leaders on the new broker, a draining broker ends with nothing, no plan step takes a partition below its
replication factor, moves in flight stay under the cap, and repeated planning converges. The plans are carried
out by a small model of KIP-455 reassignment (the joining replicas are added, catch up, then the leaving ones
go) and of preferred leader election."""
from collections import Counter

from hypothesis import given, settings, strategies as st

from actors.controller.balancer import PartitionLoad, plan, weights


def _cluster(brokers: list[int], topics: dict[str, tuple[int, int]]) -> dict[tuple[str, int], PartitionLoad]:
    """Partitions placed round-robin over `brokers` as the controller places them: topic -> (partitions, RF)."""
    out = {}
    for seed, (topic, (count, rf)) in enumerate(sorted(topics.items())):
        for i in range(count):
            start = (seed + i) % len(brokers)
            replicas = tuple(brokers[(start + r) % len(brokers)] for r in range(rf))
            out[(topic, i)] = PartitionLoad(topic, i, replicas, replicas[0], replicas)
    return out


class Model:
    """Partitions under reassignment as the controller runs them: while a move runs the partition holds its old
    and its new replicas (the old ones in the ISR); it completes once the new ones caught up."""

    def __init__(self, partitions: dict[tuple[str, int], PartitionLoad]):
        self.partitions = dict(partitions)
        self.moving: dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}  # key -> (old, target)
        self.rf = {key: len(p.replicas) for key, p in partitions.items()}
        self.max_in_flight_seen = 0

    def view(self) -> list[PartitionLoad]:
        return list(self.partitions.values())

    def start(self, result, draining: set[int], brokers: set[int]) -> None:
        for move in result.moves:
            key = (move.topic, move.partition)
            p = self.partitions[key]
            assert not p.moving, f"{key} planned while it moves"
            assert len(move.replicas) == self.rf[key], f"{key}: target {move.replicas} changes the replication factor"
            assert len(set(move.replicas)) == len(move.replicas), move
            assert set(move.replicas) <= brokers and not set(move.replicas) & draining, (move, brokers, draining)
            if set(move.replicas) == set(p.replicas):  # a reorder: completes at once
                self.partitions[key] = PartitionLoad(p.topic, p.partition, move.replicas, p.leader, p.isr)
                continue
            self.moving[key] = (p.replicas, move.replicas)
            self.partitions[key] = PartitionLoad(p.topic, p.partition, move.replicas, p.leader, p.isr, moving=True)
        for key in result.elections:
            p = self.partitions[key]
            assert p.replicas[0] in p.isr and p.replicas[0] not in draining
            self.partitions[key] = PartitionLoad(p.topic, p.partition, p.replicas, p.replicas[0], p.isr)
        self.max_in_flight_seen = max(self.max_in_flight_seen, len(self.moving))
        self.check()

    def check(self) -> None:
        """No partition below its replication factor: while moving its ISR still holds its old replicas."""
        for key, p in self.partitions.items():
            if key in self.moving:
                old, target = self.moving[key]
                in_sync = set(old) & set(p.isr)
                assert len(in_sync) >= self.rf[key], (key, p)
                assert len(set(old) | set(target)) >= self.rf[key]
            else:
                assert len(set(p.isr)) >= self.rf[key], (key, p)

    def complete(self, how_many: int | None = None) -> None:
        """Moves complete (the new replicas joined the ISR, the old ones left; a leader that left is replaced by
        the first replica of the target)."""
        for key in list(self.moving)[:how_many]:
            old, target = self.moving.pop(key)
            p = self.partitions[key]
            leader = p.leader if p.leader in target else target[0]
            self.partitions[key] = PartitionLoad(p.topic, p.partition, target, leader, target)
        self.check()

    def replicas_on(self, broker: int) -> int:
        return sum(1 for p in self.partitions.values() for b in p.replicas if b == broker)

    def leaders(self) -> Counter:
        return Counter(p.leader for p in self.partitions.values())

    def preferred(self) -> Counter:
        return Counter(p.replicas[0] for p in self.partitions.values())


def _run(model: Model, brokers: set[int], draining: set[int], cap: int, *, rounds: int = 500,
         complete_per_round: int | None = None) -> int:
    for n in range(rounds):
        result = plan(model.view(), brokers, draining, max_moves_in_flight=cap)
        model.start(result, draining, brokers - draining)
        assert len(model.moving) <= cap, f"{len(model.moving)} moves in flight, cap {cap}"
        if result.empty and not model.moving:
            return n
        model.complete(complete_per_round)
    raise AssertionError(f"no convergence in {rounds} rounds")


def test_a_new_broker_gets_its_share_of_replicas_and_leaders():
    model = Model(_cluster([1, 2, 3], {"orders": (12, 3), "__consumer_offsets": (6, 3), "logs": (5, 2)}))
    _run(model, {1, 2, 3, 4}, set(), cap=4)
    counts = {b: model.replicas_on(b) for b in (1, 2, 3, 4)}
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    assert counts[4] >= (12 * 3 + 6 * 3 + 5 * 2) // 4
    leaders = model.leaders()
    assert max(leaders[b] for b in (1, 2, 3, 4)) - min(leaders[b] for b in (1, 2, 3, 4)) <= 1, leaders
    assert leaders == model.preferred()


def test_a_draining_broker_ends_with_nothing_and_every_partition_keeps_its_replication_factor():
    model = Model(_cluster([1, 2, 3, 4], {"orders": (12, 3), "logs": (5, 1)}))
    _run(model, {1, 2, 3, 4}, {4}, cap=3)
    assert model.replicas_on(4) == 0
    assert 4 not in model.leaders()
    assert all(len(p.replicas) == (3 if p.topic == "orders" else 1) for p in model.view())


def test_drain_only_when_balancing_is_off():
    model = Model(_cluster([1, 2, 3, 4], {"orders": (8, 2)}))
    before = {key: p.replicas for key, p in model.partitions.items()}
    result = plan(model.view(), {1, 2, 3, 4}, {4}, max_moves_in_flight=100, balance=False)
    assert {(m.topic, m.partition) for m in result.moves} == {key for key, r in before.items() if 4 in r}
    assert plan(model.view(), {1, 2, 3, 4}, set(), balance=False).empty


def test_a_new_broker_gets_replicas_of_every_topic_not_only_the_first_ones():
    model = Model(_cluster([1, 2, 3], {"__consumer_offsets": (12, 3), "orders": (6, 2), "zeta": (4, 3)}))
    _run(model, {1, 2, 3, 4}, set(), cap=8)
    for topic, at_least in (("__consumer_offsets", 9), ("orders", 3), ("zeta", 3)):
        assert sum(4 in p.replicas for p in model.view() if p.topic == topic) >= at_least, topic


def test_a_drain_that_would_drop_below_the_replication_factor_is_stuck_and_said():
    model = Model(_cluster([1, 2, 3], {"orders": (3, 3)}))
    result = plan(model.view(), {1, 2, 3}, {3}, max_moves_in_flight=10)
    assert not result.moves
    assert result.stuck and "orders-0 has 3 replicas and only 2 brokers" in result.stuck[0]


def test_moves_in_flight_stay_under_the_cap_and_running_moves_are_left_alone():
    model = Model(_cluster([1, 2, 3], {"orders": (30, 3)}))
    result = plan(model.view(), {1, 2, 3, 4}, set(), max_moves_in_flight=5)
    data_moves = [m for m in result.moves if 4 in m.replicas]
    assert len(data_moves) == 5
    model.start(result, set(), {1, 2, 3, 4})
    again = plan(model.view(), {1, 2, 3, 4}, set(), max_moves_in_flight=5)
    assert not [m for m in again.moves if (m.topic, m.partition) in model.moving]
    assert not [m for m in again.moves if not set(m.replicas) == set(model.partitions[(m.topic, m.partition)].replicas)]


def test_an_under_replicated_partition_waits():
    p = PartitionLoad("orders", 0, (1, 2, 3), 1, (1, 2))
    result = plan([p], {1, 2, 4}, {3}, max_moves_in_flight=10)
    assert not result.moves and "waits for its ISR" in result.stuck[0]


def test_a_balanced_cluster_plans_nothing():
    model = Model(_cluster([1, 2, 3], {"orders": (9, 3), "logs": (6, 1)}))
    assert plan(model.view(), {1, 2, 3}, set()).empty


def test_leaders_not_on_their_preferred_replica_are_elected():
    p = PartitionLoad("orders", 0, (1, 2, 3), 2, (1, 2, 3))
    q = PartitionLoad("orders", 1, (2, 3, 1), 2, (2, 3, 1))
    r = PartitionLoad("orders", 2, (3, 1, 2), 1, (1, 2))  # its preferred replica is out of the ISR
    result = plan([p, q, r], {1, 2, 3}, set())
    assert result.elections == [("orders", 0)]


def test_weights_move_the_heavy_partitions_apart():
    # broker 1 holds two heavy partitions, broker 2 two light ones: counts are even, bytes are not
    parts = [PartitionLoad("t", 0, (1,), 1, (1,), size_bytes=1000.0),
             PartitionLoad("t", 1, (1,), 1, (1,), size_bytes=1000.0),
             PartitionLoad("t", 2, (2,), 2, (2,), size_bytes=10.0),
             PartitionLoad("t", 3, (2,), 2, (2,), size_bytes=10.0)]
    w = weights(parts)
    assert w[("t", 0)] == 3.0 and w[("t", 2)] == 1.0  # (1 + its bytes over the mean, to a half: 1.98 and 0.02)
    result = plan(parts, {1, 2}, set(), max_moves_in_flight=1)
    moved = {(m.topic, m.partition): m.replicas for m in result.moves}
    assert any(replicas == (2,) for key, replicas in moved.items() if key in {("t", 0), ("t", 1)}), moved


brokers_st = st.integers(min_value=2, max_value=6)


@settings(max_examples=100, deadline=None)
@given(start=brokers_st, added=st.integers(min_value=0, max_value=2), drained=st.integers(min_value=0, max_value=2),
       topics=st.lists(st.tuples(st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=3)),
                       min_size=1, max_size=4),
       cap=st.integers(min_value=1, max_value=8), complete_per_round=st.sampled_from([None, 1, 2]))
def test_planning_converges_keeps_replication_factors_and_empties_draining_brokers(
        start, added, drained, topics, cap, complete_per_round):
    brokers = list(range(1, start + 1))
    model = Model(_cluster(brokers, {f"t{i}": (count, min(rf, start)) for i, (count, rf) in enumerate(topics)}))
    every = set(range(1, start + added + 1))
    draining = set(sorted(every)[-drained:]) if drained else set()
    stays = every - draining
    max_rf = max(min(rf, start) for _, rf in topics)
    if len(stays) < max_rf:
        result = plan(model.view(), every, draining, max_moves_in_flight=cap)
        assert result.stuck
        return
    _run(model, every, draining, cap, complete_per_round=complete_per_round)
    assert model.max_in_flight_seen <= cap
    for b in draining:
        assert model.replicas_on(b) == 0 and model.leaders()[b] == 0
    counts = [model.replicas_on(b) for b in stays]
    assert max(counts) - min(counts) <= 1, counts
    for topic in {p.topic for p in model.view()}:  # each topic spread too (its partitions are alike)
        per_topic = Counter(b for p in model.view() if p.topic == topic for b in p.replicas)
        assert max(per_topic[b] for b in stays) - min(per_topic[b] for b in stays) <= 1, (topic, per_topic)
    # every leader is its partition's preferred replica, and preferred leaders are spread within 1 where
    # reordering replica lists can do it (it always can when each partition has a replica on every broker)
    assert model.leaders() == model.preferred()
    if all(min(rf, start) == len(stays) for _, rf in topics):
        lead = [model.leaders()[b] for b in stays]
        assert max(lead) - min(lead) <= 1, lead
    assert plan(model.view(), every, draining, max_moves_in_flight=cap).empty
