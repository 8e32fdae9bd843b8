"""Server-side assignors of KIP-848 consumer groups: `uniform` (balanced, sticky) and `range` (contiguous,
co-partitioned)."""
import uuid

from hypothesis import given, settings, strategies as st

from actors.group_coordinator.consumer_assignors import (
    ASSIGNORS, KAFKA_CLASS_NAMES, MemberSubscription, range_assign, uniform_assign)

TOPICS = [uuid.uuid5(uuid.NAMESPACE_DNS, f"t{i}") for i in range(4)]
T0, T1 = TOPICS[0], TOPICS[1]


def counts(assignment):
    return {m: sum(len(ps) for ps in a.values()) for m, a in assignment.items()}


def owners(assignment):
    out = {}
    for m, a in assignment.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{(t, p)} assigned twice"
                out[(t, p)] = m
    return out


def assert_complete(assignment, members, partition_counts):
    """Every partition of a subscribed topic goes to exactly one of its subscribers; nothing else is assigned."""
    got = owners(assignment)
    expected = {(t, p) for t, n in partition_counts.items() for p in range(n)
                if any(t in s.topic_ids for s in members.values())}
    assert set(got) == expected
    for (t, _), m in got.items():
        assert t in members[m].topic_ids
    assert set(assignment) == set(members), "every member gets an entry, possibly empty"


subscriptions = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.frozensets(st.sampled_from(TOPICS), max_size=4), min_size=1, max_size=8)
partition_counts = st.fixed_dictionaries({t: st.integers(0, 12) for t in TOPICS})


@settings(max_examples=150, deadline=None)
@given(subscriptions, partition_counts, st.sampled_from(sorted(ASSIGNORS)))
def test_every_subscribed_partition_is_assigned_exactly_once(subs, partition_counts, name):
    members = {m: MemberSubscription(topics) for m, topics in subs.items()}
    assert_complete(ASSIGNORS[name](members, partition_counts), members, partition_counts)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 9), st.frozensets(st.sampled_from(TOPICS), min_size=1), partition_counts)
def test_uniform_homogeneous_is_balanced(n_members, topics, partition_counts):
    members = {f"m{i}": MemberSubscription(topics) for i in range(n_members)}
    c = counts(uniform_assign(members, partition_counts))
    assert max(c.values()) - min(c.values()) <= 1


@settings(max_examples=150, deadline=None)
@given(subscriptions, partition_counts)
def test_uniform_heterogeneous_has_no_improving_move(subs, partition_counts):
    members = {m: MemberSubscription(topics) for m, topics in subs.items()}
    assignment = uniform_assign(members, partition_counts)
    c = counts(assignment)
    for (t, _), m in owners(assignment).items():
        for other, s in members.items():
            assert not (t in s.topic_ids and c[other] + 2 <= c[m]), "a single move would improve the balance"


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 8), st.integers(0, 3), st.integers(0, 40), st.sampled_from(["join", "leave"]))
def test_uniform_homogeneous_moves_only_what_balance_requires(n_members, n_changed, n_partitions, change):
    before_members = {f"m{i}": MemberSubscription(frozenset({T0})) for i in range(n_members)}
    before = uniform_assign(before_members, {T0: n_partitions})
    if change == "join":
        ids = list(before_members) + [f"new{i}" for i in range(n_changed)]
    else:
        ids = list(before_members)[: max(1, n_members - n_changed)]
    members = {m: MemberSubscription(frozenset({T0}), previous=before.get(m, {})) for m in ids}
    after = uniform_assign(members, {T0: n_partitions})
    assert_complete(after, members, {T0: n_partitions})
    c = counts(after)
    assert max(c.values()) - min(c.values()) <= 1
    for m in ids:
        kept = before.get(m, {}).get(T0, frozenset()) & after[m].get(T0, frozenset())
        assert len(kept) == min(len(before.get(m, {}).get(T0, ())), c[m]), f"{m} lost more than it had to"


def test_uniform_second_member_takes_half():
    first = uniform_assign({"a": MemberSubscription(frozenset({T0}))}, {T0: 4})
    assert first == {"a": {T0: frozenset({0, 1, 2, 3})}}
    members = {"a": MemberSubscription(frozenset({T0}), previous=first["a"]),
               "b": MemberSubscription(frozenset({T0}))}
    second = uniform_assign(members, {T0: 4})
    assert len(second["a"][T0]) == len(second["b"][T0]) == 2 and second["a"][T0] < first["a"][T0]


def test_uniform_heterogeneous_example():
    # a reads T0 and T1, b only T1: a takes all of T0, T1 tilts towards b
    members = {"a": MemberSubscription(frozenset({T0, T1})), "b": MemberSubscription(frozenset({T1}))}
    result = uniform_assign(members, {T0: 2, T1: 4})
    assert result["a"][T0] == frozenset({0, 1})
    assert counts(result) == {"a": 3, "b": 3}


def test_range_ranges_are_contiguous_and_co_partitioned():
    members = {m: MemberSubscription(frozenset({T0, T1})) for m in ("c", "a", "b")}
    result = range_assign(members, {T0: 7, T1: 7})
    assert result == {"a": {T0: frozenset({0, 1, 2}), T1: frozenset({0, 1, 2})},
                      "b": {T0: frozenset({3, 4}), T1: frozenset({3, 4})},
                      "c": {T0: frozenset({5, 6}), T1: frozenset({5, 6})}}


def test_range_orders_static_members_by_instance_id_first():
    members = {"a": MemberSubscription(frozenset({T0})),
               "z": MemberSubscription(frozenset({T0}), instance_id="i-1"),
               "y": MemberSubscription(frozenset({T0}), instance_id="i-2")}
    result = range_assign(members, {T0: 3})
    assert result == {"z": {T0: frozenset({0})}, "y": {T0: frozenset({1})}, "a": {T0: frozenset({2})}}


def test_range_heterogeneous_splits_each_topic_among_its_subscribers():
    members = {"a": MemberSubscription(frozenset({T0, T1})), "b": MemberSubscription(frozenset({T1}))}
    result = range_assign(members, {T0: 3, T1: 4})
    assert result == {"a": {T0: frozenset({0, 1, 2}), T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}}


@settings(max_examples=100, deadline=None)
@given(subscriptions, partition_counts)
def test_range_gives_each_subscriber_a_fair_contiguous_share(subs, partition_counts):
    members = {m: MemberSubscription(topics) for m, topics in subs.items()}
    result = range_assign(members, partition_counts)
    for t, n in partition_counts.items():
        subscribers = [m for m in members if t in members[m].topic_ids]
        shares = [sorted(result[m].get(t, ())) for m in subscribers]
        for share in shares:
            assert share == list(range(share[0], share[0] + len(share))) if share else True
        if subscribers:
            sizes = [len(s) for s in shares]
            assert max(sizes) - min(sizes) <= 1


def test_kafka_class_names_map_to_the_assignors():
    assert {KAFKA_CLASS_NAMES[k] for k in KAFKA_CLASS_NAMES} == set(ASSIGNORS)
