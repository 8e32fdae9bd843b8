"""The `simple` share-group assignor: every member gets work, partitions are shared when members outnumber them,
balance first, then stickiness."""
from collections import Counter

from hypothesis import given, settings, strategies as st

from actors.group_coordinator import assignor
from tests.unit.test_group_coordinator_helpers import Harness, topic_id

T1, T2 = topic_id("t1"), topic_id("t2")


def members(n, *topics):
    return {f"m{i}": frozenset(topics) for i in range(n)}


def holders(result):
    c = Counter()
    for a in result.values():
        for t, ps in a.items():
            c.update((t, p) for p in ps)
    return c


def sizes(result):
    return sorted(sum(len(ps) for ps in a.values()) for a in result.values())


def test_more_members_than_partitions_shares_partitions():
    result = assignor.assign(members(5, T1), {T1: [0, 1]}, {})
    assert all(sum(len(ps) for ps in a.values()) >= 1 for a in result.values()), "every member gets work"
    assert holders(result) == {(T1, 0): 3, (T1, 1): 3}, "ceil(5/2) = 3 members per partition"
    assert sizes(result) == [1, 1, 1, 1, 2]


def test_single_partition_goes_to_every_member():
    result = assignor.assign(members(3, T1), {T1: [0]}, {})
    assert all(a == {T1: (0,)} for a in result.values())


def test_fewer_members_than_partitions_splits_without_sharing():
    result = assignor.assign(members(2, T1), {T1: list(range(5))}, {})
    assert sizes(result) == [2, 3]
    assert holders(result) == {(T1, p): 1 for p in range(5)}


def test_assignment_is_sticky_when_a_member_joins():
    before = assignor.assign(members(2, T1), {T1: list(range(4))}, {})
    after = assignor.assign(members(3, T1), {T1: list(range(4))}, before)
    moved = sum(len(set(before[m][T1]) - set(after[m].get(T1, ()))) for m in before)
    assert moved == 1 and sizes(after) == [1, 1, 2]
    assert assignor.assign(members(3, T1), {T1: list(range(4))}, after) == after, "stable when nothing changes"


def test_heterogeneous_subscriptions():
    subs = {"a": frozenset({T1}), "b": frozenset({T1, T2}), "c": frozenset({T2})}
    result = assignor.assign(subs, {T1: [0, 1], T2: [0, 1, 2, 3]}, {})
    assert set(result["a"]) == {T1} and set(result["c"]) == {T2}
    assert holders(result).keys() == {(T1, 0), (T1, 1)} | {(T2, p) for p in range(4)}


def test_unsubscribed_and_unassignable():
    result = assignor.assign({"a": frozenset(), "b": frozenset({T1})}, {T1: []}, {})
    assert result == {"a": {}, "b": {}}
    assert assignor.assign({}, {T1: [0]}, {}) == {}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.lists(st.integers(0, 6), min_size=1, max_size=3), st.data())
def test_properties(n_members, partition_counts, data):
    topic_ids = [topic_id(f"t{i}") for i in range(len(partition_counts))]
    assignable = {t: list(range(n)) for t, n in zip(topic_ids, partition_counts)}
    subs = {f"m{i}": frozenset(data.draw(st.sets(st.sampled_from(topic_ids)))) for i in range(n_members)}
    previous = assignor.assign({m: frozenset(data.draw(st.sets(st.sampled_from(topic_ids))))
                                for m in subs}, assignable, {})
    result = assignor.assign(subs, assignable, previous)
    held = holders(result)
    for t, parts in assignable.items():
        subscribers = [m for m in subs if t in subs[m]]
        for p in parts:
            if subscribers:
                assert 1 <= held[(t, p)] <= -(-len(subscribers) // len(parts)), "covered, shared no more than needed"
            else:
                assert held[(t, p)] == 0
    for m, a in result.items():
        assert set(a) <= subs[m], "only subscribed topics"
        assert all(list(ps) == sorted(set(ps)) for ps in a.values())
    if len({frozenset(s) for s in subs.values()}) == 1:  # homogeneous: balanced within one partition
        s = sizes(result)
        assert s[-1] - s[0] <= 1
        if any(assignable[t] for t in next(iter(subs.values()))):
            assert s[0] >= 1, "every member gets work"


def test_through_the_shard_more_consumers_than_partitions():
    h = Harness(orders=2)
    for m in ["a", "b", "c", "d", "e"]:
        h.join("g", m, ["orders"])
    for m in ["a", "b", "c", "d", "e"]:  # everyone reconciles to the latest target
        (d,) = h.shard.describe(["g"], h.topics)
        h.hb("g", m, {x.member_id: x.member_epoch for x in d.members}[m])
    got = {m: h.assignment("g", m) for m in "abcde"}
    assert all(got.values()), "every consumer has work"
    assert Counter(tp for s in got.values() for tp in s) == {("orders", 0): 3, ("orders", 1): 3}


def test_through_the_shard_fewer_consumers_than_partitions():
    h = Harness(orders=6)
    h.join("g", "a", ["orders"])
    h.join("g", "b", ["orders"])
    (d,) = h.shard.describe(["g"], h.topics)
    h.hb("g", "a", {x.member_id: x.member_epoch for x in d.members}["a"])
    a, b = h.assignment("g", "a"), h.assignment("g", "b")
    assert len(a) == len(b) == 3 and not a & b and a | b == {("orders", p) for p in range(6)}
