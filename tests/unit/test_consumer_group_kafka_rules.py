"""KIP-848 consumer groups checked against the rules Apache Kafka's own tests assert.

Each test restates, for Kray's pure core (actors/group_coordinator/consumer_group.py), a rule that a test of Kafka's
group coordinator asserts; the Kafka test is named in a comment. The sources read were GroupMetadataManagerTest,
CurrentAssignmentBuilderTest and ConsumerGroupTest (apache/kafka, Oct 2024 snapshot), the later fixes named where used
(KAFKA-19233: rejoin with epoch 0; KIP-1251 keeps STALE_MEMBER_EPOCH for commits), and what librdkafka 2.x
(group.protocol=consumer) sends: ConsumerGroupHeartbeat v1, a client-generated member id kept for the consumer's life,
a full request on (re)join with TopicPartitions = [], TopicPartitions omitted (null) unless its owned set changed.

Kafka's tests prepare target assignments with a mock assignor; here the members ask for the `range` assignor (members
ordered by member id, contiguous ranges), so the targets are predictable.
"""
import uuid

from actors.group_coordinator import consumer_records as crec
from actors.group_coordinator.consumer_group import ConsumerGroups
from protocol.errors import ErrorCode

SESSION_MS = 45000
INTERVAL_MS = 5000


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, f"kafka-rules/{name}")


FOO, BAR = tid("foo"), tid("bar")


def view(**partitions) -> dict:
    return {name: (tid(name), count) for name, count in partitions.items()}


class Cluster:
    """The consumer groups of one shard, a manual clock, the topics, and the records written (the log)."""

    def __init__(self, config=None, **topics):
        self.groups = ConsumerGroups(config or {})
        self.topics = view(**topics)
        self.now_ms = 0
        self.log: list = []

    def hb(self, member, epoch, *, group="g", names=None, regex=None, owned=None, instance=None,
           rebalance_timeout_ms=-1, assignor=None, api_version=1):
        result, records = self.groups.heartbeat(
            group, member, epoch, instance_id=instance, rack_id=None, rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=assignor,
            owned_partitions=owned, client_id="rdkafka", client_host="/10.0.0.1", now_ms=self.now_ms,
            topics=self.topics, api_version=api_version)
        self.log += records
        return result

    def join(self, member, names=("foo",), *, ok=True, **kw):
        """A full (re)join request as librdkafka sends it: epoch 0, rebalance timeout, subscription, TopicPartitions
        = []."""
        kw.setdefault("rebalance_timeout_ms", 30000)
        kw.setdefault("assignor", "range")
        r = self.hb(member, 0, names=list(names), owned=[], **kw)
        if ok:
            assert r.error_code == 0, r
        return r

    def topics_changed(self, **topics):
        self.topics = view(**topics)
        self.log += self.groups.on_topics_changed(self.topics, self.now_ms)

    def expire(self):
        records = self.groups.expire(self.now_ms)
        self.log += records
        return records

    def described(self, group="g"):
        (d,) = self.groups.describe([group], self.topics)
        return d

    def state(self, group="g"):
        return self.described(group).group_state

    def member(self, member_id, group="g"):
        return {m.member_id: m for m in self.described(group).members}[member_id]

    def epochs(self):
        return [crec.decode_consumer_group_metadata(k, v).epoch for k, v in self.log]


def tp(**topics) -> list:
    """TopicPartitions as a request carries them: tp(foo=[0, 1], bar=[2])."""
    return [(tid(name), list(ps)) for name, ps in topics.items()]


def assigned(result) -> dict:
    """A response's assignment by topic name ({} for an empty one); None when the response carries none."""
    if result.assignment is None:
        return None
    names = {tid(n): n for n in ("foo", "bar", "foobar")}
    return {names[t]: sorted(ps) for t, ps in result.assignment if ps}


def stable_pair(c: Cluster, names=("foo",)):
    """m1 and m2 (range) reconciled: m1 joins alone, m2 joins, m1 revokes, m2 gets its half. Group epoch 3."""
    c.join("m1", names)
    c.join("m2", names)
    r = c.hb("m1", 2, owned=tp(**{n: range(c.topics[n][1]) for n in names}))
    c.hb("m1", 2, owned=[(t, ps) for t, ps in r.assignment])
    c.hb("m2", 3)
    assert c.state() == "Stable" and c.described().group_epoch == 3


# ---- joining -------------------------------------------------------------------------------------------------------

def test_member_joins_empty_group():
    # GroupMetadataManagerTest.testMemberJoinsEmptyConsumerGroup
    c = Cluster(foo=6, bar=3)
    r = c.join("m1", ("foo", "bar"))
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 2, INTERVAL_MS)
    assert assigned(r) == {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]}
    assert c.epochs() == [2]
    assert c.state() == "Stable"


def test_join_with_unknown_group_and_nonzero_epoch():
    # GroupMetadataManagerTest.testUnknownGroupId: epoch > 0 for a group that does not exist
    c = Cluster(foo=1)
    r = c.hb("m1", 100, names=["foo"], owned=[], rebalance_timeout_ms=5000)
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert c.groups.list_groups() == [] and c.log == []


def test_unknown_member_with_nonzero_epoch():
    # GroupMetadataManagerTest.testUnknownMemberIdJoinsConsumerGroup
    c = Cluster(foo=1)
    c.join("m1")
    r = c.hb("m2", 1, names=["foo"], owned=[], rebalance_timeout_ms=5000)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert [m.member_id for m in c.described().members] == ["m1"]


def test_new_joining_member_triggers_new_target_assignment():
    # GroupMetadataManagerTest.testNewJoiningMemberTriggersNewTargetAssignment: a join bumps the group epoch; the
    # newcomer is at the new epoch straight away, with only the partitions nobody holds (here none)
    c = Cluster(foo=6, bar=3)
    stable_pair(c, ("foo", "bar"))
    r = c.join("m3", ("foo", "bar"))
    assert (r.member_epoch, assigned(r)) == (4, {}), "epoch 4, an empty assignment sent on the join"
    assert c.epochs()[-1] == 4
    assert sorted(c.member("m3").target_assignment) == sorted([(FOO, "foo", [4, 5]), (BAR, "bar", [2])])
    assert c.state() == "Reconciling"


def test_group_epoch_bump_when_new_static_member_joins():
    # GroupMetadataManagerTest.testGroupEpochBumpWhenNewStaticMemberJoins
    c = Cluster(foo=2)
    c.join("m1", instance="i1")
    r = c.join("m2", instance="i2")
    assert (r.member_epoch, c.epochs()) == (3, [2, 3])
    assert c.member("m2").instance_id == "i2"


def test_new_member_is_rejected_when_the_group_is_full():
    # GroupMetadataManagerTest.testNewMemberIsRejectedWithMaximumMembersIsReached
    c = Cluster({"group.consumer.max.size": 2}, foo=6, bar=3)
    stable_pair(c, ("foo", "bar"))
    r = c.join("m3", ("foo", "bar"), ok=False)
    assert r.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert r.error_message == "The consumer group has reached its maximum capacity of 2 members."
    assert c.epochs() == [2, 3], "a refused join writes nothing"
    # the check is on the member id: members already in the group are not refused, even when rejoining
    assert c.hb("m1", 3).error_code == 0
    assert c.join("m1", ("foo", "bar")).member_epoch == 3


# ---- epochs ----------------------------------------------------------------------------------------------------------

def test_member_epoch_validation():
    # GroupMetadataManagerTest.testConsumerGroupMemberEpochValidation
    c = Cluster(foo=2)
    c.join("m1")
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=[0, 1]))
    c.hb("m1", 2, owned=tp(foo=[0]))      # m1 now at epoch 3, previous epoch 2
    full = dict(names=["foo"], rebalance_timeout_ms=5000)
    ahead = c.hb("m1", 4, **full)
    assert ahead.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    c.hb("m2", 3)                          # m2 gets partition 1; the group is stable at epoch 3
    assert c.hb("m1", 2, **full).error_code == ErrorCode.FENCED_MEMBER_EPOCH, \
        "the previous epoch without TopicPartitions: no proof of what it owns"
    ok = c.hb("m1", 2, **full, owned=tp(foo=[0]))
    assert (ok.error_code, ok.member_epoch) == (0, 3), "previous epoch + a subset of the assignment: the response " \
                                                      "with the new epoch was lost"
    assert c.hb("m1", 2, **full, owned=tp(foo=[0, 1])).error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_fenced_responses_write_nothing_and_change_nothing():
    # GroupMetadataManagerTest.testConsumerGroupMemberEpochValidation (assertThrows: no records, no state change)
    c = Cluster(foo=2)
    c.join("m1")
    before = (c.described().group_epoch, c.member("m1").member_epoch, c.member("m1").assignment)
    r = c.hb("m1", 8, names=["bar"], owned=[], rebalance_timeout_ms=5000)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH and r.assignment is None
    assert (c.described().group_epoch, c.member("m1").member_epoch, c.member("m1").assignment) == before
    assert c.member("m1").subscribed_topic_names == ["foo"], "the subscription of a fenced request is not applied"
    assert c.epochs() == [2]


# ---- rejoining with the same member id (librdkafka keeps its member id; epoch 0, TopicPartitions []) ------------

def test_rejoin_with_epoch_zero_from_stable():
    # KAFKA-19233 (GroupMetadataManagerTest: member rejoins with epoch 0 in STABLE): the member gets its current
    # epoch and assignment back, and nothing is rebalanced
    c = Cluster(foo=2)
    stable_pair(c)
    r = c.join("m1")
    assert (r.error_code, r.member_epoch, assigned(r)) == (0, 3, {"foo": [0]})
    assert c.epochs() == [2, 3] and c.state() == "Stable"


def test_rejoin_with_epoch_zero_from_unrevoked_partitions():
    # KAFKA-19233, UNREVOKED_PARTITIONS: TopicPartitions = [] proves that everything was dropped, so the partitions
    # pending revocation are released at once and the member moves to the target epoch
    c = Cluster(foo=2)
    c.join("m1")
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=[0, 1]))   # m1 must revoke 1
    assert c.hb("m2", 3).assignment is None, "partition 1 is still held by m1"
    r = c.join("m1")
    assert (r.member_epoch, assigned(r)) == (3, {"foo": [0]})
    r2 = c.hb("m2", 3)
    assert assigned(r2) == {"foo": [1]}
    assert c.state() == "Stable" and c.epochs() == [2, 3]


def test_rejoin_with_epoch_zero_from_unreleased_partitions():
    # KAFKA-19233, UNRELEASED_PARTITIONS: the member is told its assignment so far at the target epoch
    c = Cluster(foo=2)
    c.join("m1")
    c.join("m2")
    r = c.join("m2")
    assert (r.member_epoch, assigned(r)) == (3, {})
    c.hb("m1", 2, owned=tp(foo=[0, 1]))
    c.hb("m1", 2, owned=tp(foo=[0]))
    assert assigned(c.join("m2")) == {"foo": [1]}


def test_rejoin_after_unknown_member_id():
    # GroupMetadataManagerTest.testSessionTimeoutExpiration then a join with the same member id: a new member,
    # a new group epoch
    c = Cluster(foo=2)
    stable_pair(c)
    c.now_ms = SESSION_MS - 1
    c.hb("m2", 3)
    c.now_ms = SESSION_MS
    c.expire()                             # m1 expires
    assert c.hb("m1", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert c.epochs() == [2, 3, 4]
    r = c.join("m1")
    assert (r.error_code, r.member_epoch) == (0, 5)
    assert assigned(r) == {"foo": [0]}, "partition 0 was freed when m1 expired"
    r2 = c.hb("m2", 3, owned=tp(foo=[1]))
    assert (r2.member_epoch, r2.assignment) == (5, None)


# ---- reconciliation ------------------------------------------------------------------------------------------------

def test_reconciliation_process_with_three_members():
    # GroupMetadataManagerTest.testReconciliationProcess (targets from range instead of a mock assignor):
    #   before: m1 foo 0-2 bar 0-1, m2 foo 3-5 bar 2;  after m3 joins: m1 foo 0-1 bar 0, m2 foo 2-3 bar 1,
    #   m3 foo 4-5 bar 2
    c = Cluster(foo=6, bar=3)
    stable_pair(c, ("foo", "bar"))
    assert sorted(c.member("m1").assignment) == sorted([(FOO, "foo", [0, 1, 2]), (BAR, "bar", [0, 1])])

    r3 = c.join("m3", ("foo", "bar"))
    assert (r3.member_epoch, assigned(r3)) == (4, {})
    assert c.state() == "Reconciling"

    # m1 heartbeats (no TopicPartitions): it stays at epoch 3 and is told its assignment minus what it must revoke
    r1 = c.hb("m1", 3)
    assert (r1.member_epoch, assigned(r1), r1.heartbeat_interval_ms) == (3, {"foo": [0, 1], "bar": [0]}, INTERVAL_MS)
    # m2 likewise
    r2 = c.hb("m2", 3)
    assert (r2.member_epoch, assigned(r2)) == (3, {"foo": [3]})
    # m3: nothing released yet, nothing new to say
    r3 = c.hb("m3", 4)
    assert (r3.member_epoch, r3.assignment) == (4, None)

    # m1 acknowledges by reporting what it still owns: epoch 4, Stable; its assignment is unchanged so not re-sent
    r1 = c.hb("m1", 3, owned=tp(foo=[0, 1], bar=[0]))
    assert (r1.member_epoch, r1.assignment) == (4, None)
    assert c.state() == "Reconciling"
    # m2 heartbeats without acknowledging: a no-op
    n = len(c.log)
    r2 = c.hb("m2", 3)
    assert (r2.member_epoch, r2.assignment) == (3, None) and len(c.log) == n
    # m3 still waits: all of its partitions are held by m2
    assert c.hb("m3", 4).assignment is None

    # m2 acknowledges: epoch 4, and it gets the partitions m1 released
    r2 = c.hb("m2", 3, owned=tp(foo=[3]))
    assert (r2.member_epoch, assigned(r2)) == (4, {"foo": [2, 3], "bar": [1]})
    # m3 gets everything now and the group is Stable
    r3 = c.hb("m3", 4)
    assert (r3.member_epoch, assigned(r3)) == (4, {"foo": [4, 5], "bar": [2]})
    r3 = c.hb("m3", 4, owned=tp(foo=[4, 5], bar=[2]))
    assert r3.assignment is None
    assert c.state() == "Stable" and c.epochs() == [2, 3, 4], "reconciling writes no group epoch"


def test_omitted_topic_partitions_do_not_acknowledge_a_revocation():
    # CurrentAssignmentBuilderTest.testRemainsInUnrevokedPartitions (owned partitions null => still owned)
    c = Cluster(foo=4)
    c.join("m1")
    c.join("m2")
    r = c.hb("m1", 2, owned=tp(foo=[0, 1, 2, 3]))
    assert (r.member_epoch, assigned(r)) == (2, {"foo": [0, 1]})
    for _ in range(3):
        r = c.hb("m1", 2)
        assert (r.member_epoch, r.assignment) == (2, None)
    assert c.hb("m2", 3).assignment is None


def test_empty_topic_partitions_acknowledge_every_revocation():
    # CurrentAssignmentBuilderTest.testUnrevokedPartitionsToStable with owned = []: nothing held, so the member moves
    # to the target epoch and keeps the partitions it was not asked to give up
    c = Cluster(foo=4)
    c.join("m1")
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=[0, 1, 2, 3]))
    r = c.hb("m1", 2, owned=[])
    assert (r.member_epoch, r.assignment) == (3, None), "unchanged assignment {0, 1}: not re-sent"
    assert c.member("m1").assignment == [(FOO, "foo", [0, 1])]
    assert assigned(c.hb("m2", 3)) == {"foo": [2, 3]}


def test_owned_partitions_without_the_revoked_ones_skip_unrevoked_partitions():
    # CurrentAssignmentBuilderTest.testStableToUnreleasedPartitionsWithOwnedPartitionsNotHavingRevokedPartitions
    c = Cluster(foo=4)
    c.join("m1")
    c.join("m2")
    r = c.hb("m1", 2, owned=tp(foo=[0, 1]))
    assert (r.member_epoch, assigned(r)) == (3, {"foo": [0, 1]}), "straight to the target epoch"
    assert assigned(c.hb("m2", 3)) == {"foo": [2, 3]}


def test_a_revoking_member_keeps_its_epoch_until_it_acknowledges_even_if_the_group_moves_on():
    # CurrentAssignmentBuilderTest.testRemainsInUnrevokedPartitions: while it owns revoked partitions the member is
    # not reconciled again, whatever the new target
    c = Cluster(foo=6)
    c.join("m1")
    c.join("m2")
    r = c.hb("m1", 2, owned=tp(foo=range(6)))
    assert assigned(r) == {"foo": [0, 1, 2]}
    c.join("m3")                           # epoch 4: m1's target shrinks to {0, 1}
    r = c.hb("m1", 2, owned=tp(foo=range(6)))
    assert (r.member_epoch, r.assignment) == (2, None)
    # it acknowledges the first revocation: it is then reconciled against the latest target (revoke 2 too)
    r = c.hb("m1", 2, owned=tp(foo=[0, 1, 2]))
    assert (r.member_epoch, assigned(r)) == (2, {"foo": [0, 1]})
    r = c.hb("m1", 2, owned=tp(foo=[0, 1]))
    assert (r.member_epoch, r.assignment) == (4, None)


def test_member_leaving_while_another_is_unrevoking():
    # GroupMetadataManagerTest.testLeavingMemberBumpsGroupEpoch + CurrentAssignmentBuilderTest.
    # testRemainsInUnrevokedPartitions: m1 must still revoke partition 1 although m2 (which wanted it) left; once it
    # does, it moves to the new epoch and gets partition 1 back
    c = Cluster(foo=2)
    c.join("m1")
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=[0, 1]))   # m1 UNREVOKED_PARTITIONS
    leave = c.hb("m2", -1)
    assert (leave.error_code, leave.member_id, leave.member_epoch) == (0, "m2", -1)
    assert c.epochs() == [2, 3, 4] and c.state() == "Assigning"
    r = c.hb("m1", 2, owned=tp(foo=[0, 1]))
    assert (r.member_epoch, r.assignment) == (2, None)
    r = c.hb("m1", 2, owned=tp(foo=[0]))
    assert (r.member_epoch, assigned(r)) == (4, {"foo": [0, 1]})
    assert c.state() == "Stable"


def test_member_leaving_while_it_is_unrevoking_releases_its_partitions():
    # GroupMetadataManagerTest.testLeavingMemberBumpsGroupEpoch: the leaving member's partitions (assigned and
    # pending revocation) are free at once
    c = Cluster(foo=2)
    c.join("m1")
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=[0, 1]))
    c.hb("m1", -1)
    r = c.hb("m2", 3)
    assert (r.member_epoch, assigned(r)) == (4, {"foo": [0, 1]})


def test_unreleased_member_receives_partitions_as_they_are_released():
    # CurrentAssignmentBuilderTest.testUnreleasedPartitionsToStable / testUnreleasedPartitionsToUnreleasedPartitions
    c = Cluster(foo=6)
    c.join("m1")
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=range(6)))
    c.join("m3")                              # m2's target {2, 3}, m3's {4, 5}; m1 still owns 0-5
    r = c.hb("m1", 2, owned=tp(foo=[0, 1, 2]))  # m1 released 3, 4, 5; must still revoke 2
    assert (r.member_epoch, assigned(r)) == (2, {"foo": [0, 1]})
    r3 = c.hb("m3", 4)
    assert (r3.member_epoch, assigned(r3)) == (4, {"foo": [4, 5]})
    r2 = c.hb("m2", 3)
    assert (r2.member_epoch, assigned(r2)) == (4, {"foo": [3]}), "moves to epoch 4 with what is free"
    c.hb("m1", 2, owned=tp(foo=[0, 1]))
    r2 = c.hb("m2", 4, owned=tp(foo=[3]))
    assert assigned(r2) == {"foo": [2, 3]}
    assert c.state() == "Stable"


# ---- subscriptions and topic metadata --------------------------------------------------------------------------------

def test_updating_subscription_triggers_new_target_assignment():
    # GroupMetadataManagerTest.testUpdatingSubscriptionTriggersNewTargetAssignment: adding a topic needs no revocation,
    # the member gets the new partitions and the new epoch in the same response
    c = Cluster(foo=6, bar=3)
    c.join("m1", ("foo",))
    r = c.hb("m1", 2, names=["foo", "bar"], owned=tp(foo=range(6)))
    assert (r.member_epoch, assigned(r)) == (3, {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]})
    assert c.epochs() == [2, 3]


def test_same_subscription_in_another_order_is_no_change():
    # GroupMetadataManagerTest.hasMemberSubscriptionChanged: the subscription is a set
    c = Cluster(foo=1, bar=1)
    c.join("m1", ("foo", "bar"))
    c.hb("m1", 2, names=["bar", "foo", "bar"])
    assert c.epochs() == [2]


def test_partitions_added_to_a_topic():
    # GroupMetadataManagerTest.testSubscriptionMetadataRefreshedAfterGroupIsLoaded (metadata change bumps the epoch and
    # computes a new target): range 2 -> 4 partitions moves partition 1 from m2 to m1
    c = Cluster(foo=2)
    stable_pair(c)
    c.topics_changed(foo=4)
    assert c.epochs() == [2, 3, 4] and c.state() == "Assigning"
    r1 = c.hb("m1", 3, owned=tp(foo=[0]))
    assert (r1.member_epoch, r1.assignment) == (4, None), "m1 keeps {0}, waits for 1 (UNRELEASED_PARTITIONS)"
    r2 = c.hb("m2", 3, owned=tp(foo=[1]))
    assert (r2.member_epoch, assigned(r2)) == (3, {}), "m2 must revoke partition 1 first"
    r2 = c.hb("m2", 3, owned=[])
    assert (r2.member_epoch, assigned(r2)) == (4, {"foo": [2, 3]})
    assert assigned(c.hb("m1", 4)) == {"foo": [0, 1]}
    assert c.state() == "Stable"


def test_topic_deleted():
    # CurrentAssignmentBuilder: a deleted topic is not in the target; the member revokes its partitions first if it
    # still reports them, and its subscription keeps the name
    c = Cluster(foo=2, bar=2)
    c.join("m1", ("foo", "bar"))
    c.topics_changed(foo=2)
    assert c.epochs() == [2, 3]
    r = c.hb("m1", 2, owned=tp(foo=[0, 1], bar=[0, 1]))
    assert (r.member_epoch, assigned(r)) == (2, {"foo": [0, 1]})
    r = c.hb("m1", 2, owned=tp(foo=[0, 1]))
    assert (r.member_epoch, r.assignment) == (3, None)
    assert sorted(c.member("m1").subscribed_topic_names) == ["bar", "foo"]
    # the topic comes back (a new topic id): a new epoch, and its partitions are assigned again
    c.topics_changed(foo=2, bar=1)
    r = c.hb("m1", 3)
    assert (r.member_epoch, assigned(r)) == (4, {"foo": [0, 1], "bar": [0]})


# ---- the response --------------------------------------------------------------------------------------------------

def test_full_request_gets_the_assignment_and_a_partial_one_only_when_it_changes():
    # GroupMetadataManagerTest.testConsumerGroupHeartbeatFullResponse
    c = Cluster(foo=2)
    c.join("m1")
    r = c.hb("m1", 2)
    assert (r.member_epoch, r.assignment) == (2, None)
    full = c.hb("m1", 2, names=["foo"], owned=tp(foo=[0, 1]), rebalance_timeout_ms=5000)
    assert assigned(full) == {"foo": [0, 1]}
    # not full: the TopicPartitions are missing
    assert c.hb("m1", 2, names=["foo"], rebalance_timeout_ms=5000).assignment is None
    # not full: the rebalance timeout is missing
    assert c.hb("m1", 2, names=["foo"], owned=tp(foo=[0, 1])).assignment is None


def test_heartbeat_interval_in_every_successful_response():
    # GroupMetadataManagerTest (every assertResponseEquals carries HeartbeatIntervalMs = the configured interval);
    # error and leave responses carry none
    c = Cluster({"group.consumer.heartbeat.interval.ms": 6000}, foo=2)
    assert c.join("m1").heartbeat_interval_ms == 6000
    assert c.join("m2").heartbeat_interval_ms == 6000
    assert c.hb("m1", 2, owned=tp(foo=[0, 1])).heartbeat_interval_ms == 6000   # UNREVOKED_PARTITIONS
    assert c.hb("m1", 2).heartbeat_interval_ms == 6000                          # a no-op
    assert c.hb("m2", 3).heartbeat_interval_ms == 6000                          # UNRELEASED_PARTITIONS
    assert c.hb("m1", 10).heartbeat_interval_ms == 0
    assert c.hb("m2", -1).heartbeat_interval_ms == 0


def test_group_states():
    # GroupMetadataManagerTest.testConsumerGroupStates: Empty, Assigning (group epoch ahead of the assignment epoch),
    # Reconciling, Stable
    c = Cluster(foo=2)
    c.groups.create_empty("g")
    assert c.state() == "Empty"
    c.join("m1")
    assert c.state() == "Stable"
    c.join("m2")
    assert c.state() == "Reconciling"
    c.topics_changed(foo=3)
    assert c.state() == "Assigning"
    c.hb("m1", 2, owned=tp(foo=[0, 1]))
    assert c.state() == "Reconciling"


# ---- timers ----------------------------------------------------------------------------------------------------------

def test_session_timeout_lifecycle():
    # GroupMetadataManagerTest.testSessionTimeoutLifecycle: every heartbeat pushes the session deadline; a leave
    # cancels it
    c = Cluster(foo=1)
    c.join("m1")
    for t in (10000, 40000, 80000):
        c.now_ms = t
        assert c.hb("m1", 2).error_code == 0
        assert c.groups.next_deadline_ms() == t + SESSION_MS
    c.hb("m1", -1)
    assert c.groups.next_deadline_ms() is None


def test_session_timeout_expiration():
    # GroupMetadataManagerTest.testSessionTimeoutExpiration: the member is fenced, the group epoch bumped
    c = Cluster(foo=2)
    c.join("m1")
    c.now_ms = SESSION_MS
    c.expire()
    assert c.described().members == [] and c.epochs() == [2, 3]
    assert c.hb("m1", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_lifecycle():
    # GroupMetadataManagerTest.testRebalanceTimeoutLifecycle: the timer starts when the member has to revoke, is
    # cancelled when it does, and starts again on the next revocation
    c = Cluster(foo=3)
    c.join("m1", rebalance_timeout_ms=12000)
    c.now_ms = 1000
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=[0, 1, 2]))   # revoke 2 by 13000
    assert c.groups.next_deadline_ms() == 13000
    c.now_ms = 2000
    c.hb("m1", 2, owned=tp(foo=[0, 1]))      # revoked
    assert c.groups.next_deadline_ms() == 1000 + SESSION_MS
    c.now_ms = 3000
    c.join("m3")
    c.hb("m1", 3, owned=tp(foo=[0, 1]))      # revoke 1 by 15000
    assert c.groups.next_deadline_ms() == 15000


def test_rebalance_timeout_expiration():
    # GroupMetadataManagerTest.testRebalanceTimeoutExpiration
    c = Cluster(foo=2)
    c.join("m1", rebalance_timeout_ms=12000)
    c.join("m2")
    c.hb("m1", 2, owned=tp(foo=[0, 1]))
    c.now_ms = 12000
    c.hb("m1", 2, owned=tp(foo=[0, 1]))      # heartbeats keep the session, not the revocation deadline
    c.expire()
    assert [m.member_id for m in c.described().members] == ["m2"] and c.epochs() == [2, 3, 4]
    assert c.hb("m1", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert assigned(c.hb("m2", 3)) == {"foo": [0, 1]}


# ---- static members --------------------------------------------------------------------------------------------------

def static_pair(c: Cluster):
    c.join("m1", instance="i1")
    c.join("m2", instance="i2")
    c.hb("m1", 2, instance="i1", owned=tp(foo=[0, 1]))
    c.hb("m1", 2, instance="i1", owned=tp(foo=[0]))
    c.hb("m2", 3, instance="i2")
    assert c.state() == "Stable"


def test_static_member_gets_back_assignment_upon_rejoin():
    # GroupMetadataManagerTest.testStaticMemberGetsBackAssignmentUponRejoin
    c = Cluster(foo=2)
    static_pair(c)
    leave = c.hb("m2", -2, instance="i2")
    assert (leave.error_code, leave.member_id, leave.member_epoch) == (0, "m2", -2)
    assert c.epochs() == [2, 3], "a temporary leave is no rebalance"
    assert c.hb("m1", 3).assignment is None, "the partitions of the absent static member stay with it"
    back = c.join("m2-new", instance="i2")
    assert (back.member_id, back.member_epoch, assigned(back)) == ("m2-new", 3, {"foo": [1]})
    assert c.epochs() == [2, 3]
    assert sorted(m.member_id for m in c.described().members) == ["m1", "m2-new"]
    assert c.hb("m2", 3, instance="i2").error_code == ErrorCode.FENCED_INSTANCE_ID
    assert c.hb("m2", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_rejoins_with_new_subscribed_topics():
    # GroupMetadataManagerTest.testStaticMemberRejoinsWithNewSubscribedTopics
    c = Cluster(foo=2, bar=1)
    static_pair(c)
    c.hb("m2", -2, instance="i2")
    r = c.join("m2-new", ("foo", "bar"), instance="i2")
    assert c.epochs() == [2, 3, 4]
    assert r.member_epoch in (3, 4)
    assert sorted(t for t, _, _ in c.member("m2-new").target_assignment) == sorted([FOO, BAR])


def test_leaving_static_member_bumps_group_epoch():
    # GroupMetadataManagerTest.testLeavingStaticMemberBumpsGroupEpoch: epoch -1 with an instance id leaves for good
    c = Cluster(foo=2)
    static_pair(c)
    r = c.hb("m2", -1, instance="i2")
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "m2", -1)
    assert c.epochs() == [2, 3, 4]
    assert assigned(c.hb("m1", 3, instance="i1")) == {"foo": [0, 1]}
    assert c.join("m2-new", instance="i2").member_epoch == 5, "the instance id is free: a new member"


def test_fenced_instance_id_when_another_member_id_uses_it():
    # GroupMetadataManagerTest.testShouldThrowFencedInstanceIdExceptionWhenStaticMemberWithDifferentMemberIdJoins /
    # ...WhenStaticMemberWithDifferentMemberIdLeaves
    c = Cluster(foo=2)
    static_pair(c)
    assert c.hb("other", 3, instance="i2").error_code == ErrorCode.FENCED_INSTANCE_ID
    assert c.hb("other", -2, instance="i2").error_code == ErrorCode.FENCED_INSTANCE_ID
    assert c.hb("other", -1, instance="i2").error_code == ErrorCode.FENCED_INSTANCE_ID
    assert c.hb("m2", 3, instance="i9").error_code == ErrorCode.UNKNOWN_MEMBER_ID, "an unknown instance id"


def test_member_epoch_validation_for_static_member():
    # GroupMetadataManagerTest.testConsumerGroupMemberEpochValidationForStaticMember
    c = Cluster(foo=2)
    static_pair(c)
    assert c.hb("m1", 4, instance="i1").error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert c.hb("m1", 2, instance="i1").error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert c.hb("m1", 2, instance="i1", owned=tp(foo=[0])).member_epoch == 3


def test_unreleased_instance_id_while_the_owner_is_active():
    # GroupMetadataManagerTest.testStaticMemberGetsBackAssignmentUponRejoin (UnreleasedInstanceIdException before the
    # leave with epoch -2)
    c = Cluster(foo=2)
    static_pair(c)
    r = c.join("m2-new", instance="i2", ok=False)
    assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert r.error_message == ("Static member m2-new with instance id i2 cannot join the group because the instance "
                               "id is owned by m2 member.")


def test_static_member_session_expires_after_a_temporary_leave():
    # GroupMetadataManagerTest.testSessionTimeoutExpirationStaticMember
    c = Cluster(foo=2)
    static_pair(c)
    c.hb("m2", -2, instance="i2")
    c.now_ms = SESSION_MS
    c.hb("m1", 3, instance="i1")
    c.expire()
    assert [m.member_id for m in c.described().members] == ["m1"] and c.epochs() == [2, 3, 4]
    assert assigned(c.hb("m1", 3, instance="i1")) == {"foo": [0, 1]}


def test_static_member_rejoining_with_its_own_member_id_gets_its_state_back():
    # apache/kafka#23542 (GroupMetadataManagerTest join cases for static members); released Kafka (4.x) still answers
    # UNRELEASED_INSTANCE_ID here
    c = Cluster(foo=2)
    static_pair(c)
    r = c.join("m2", instance="i2", ok=False)
    assert (r.error_code, r.member_epoch, assigned(r)) == (0, 3, {"foo": [1]})
    assert c.epochs() == [2, 3]


# ---- offsets ---------------------------------------------------------------------------------------------------------

def test_offset_commit_and_fetch_with_a_greater_epoch_are_stale():
    # ConsumerGroupTest.testValidateOffsetCommit / testValidateOffsetFetch (member at epoch 0, request with 10 ->
    # StaleMemberEpochException); unchanged by KIP-1251, which only widens the accepted range below the member epoch
    c = Cluster(foo=2)
    c.join("m1")
    assert c.groups.validate_offset_commit("g", "m1", 10, 9)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert c.groups.validate_offset_fetch("g", "m1", 10)[0] == ErrorCode.STALE_MEMBER_EPOCH


def test_offset_commit_validation():
    # ConsumerGroupTest.testValidateOffsetCommit
    c = Cluster(foo=2)
    v = c.groups.validate_offset_commit
    c.groups.create_empty("g")
    assert v("g", "", -1, 9)[0] == ErrorCode.NONE, "an empty group takes commits from outside group management"
    c.join("m1")
    assert v("g", "", -1, 9)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert v("g", "nobody", 2, 9)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert v("g", "m1", 2, 8)[0] == ErrorCode.UNSUPPORTED_VERSION, "consumer-protocol members commit with v9+"
    # KIP-1251 (Kafka 4.3+): an older epoch passes here and is checked per partition; m1 got both at epoch 2
    assert v("g", "m1", 0, 9)[0] == ErrorCode.NONE
    assert c.groups.stale_commit_partitions("g", "m1", 0, [("foo", 0), ("foo", 1)]) == [True, True]
    assert v("g", "m1", 3, 9)[0] == ErrorCode.STALE_MEMBER_EPOCH, "newer than the member's epoch"
    assert v("g", "m1", 2, 9) == (ErrorCode.NONE, None)


def test_offset_fetch_validation():
    # ConsumerGroupTest.testValidateOffsetFetch
    c = Cluster(foo=2)
    c.join("m1")
    v = c.groups.validate_offset_fetch
    assert v("g", None, -1)[0] == ErrorCode.NONE
    assert v("g", "nobody", 0)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert v("g", "m1", 0)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert v("g", "m1", 2) == (ErrorCode.NONE, None)


# ---- duplicate full requests (a client retrying after a timeout) --------------------------------------------------

def full(c, member, epoch, owned, names=("foo",)):
    return c.hb(member, epoch, names=list(names), owned=owned, rebalance_timeout_ms=300000)


def test_duplicate_full_heartbeat_in_stable_state():
    # ConsumerGroupHeartbeatRequestTest.testDuplicateFullHeartbeatInStableState
    c = Cluster(foo=3)
    c.join("m1")
    first = full(c, "m1", 2, tp(foo=[0, 1, 2]))
    assert (first.error_code, first.member_epoch, assigned(first)) == (0, 2, {"foo": [0, 1, 2]})
    assert full(c, "m1", 2, tp(foo=[0, 1, 2])) == first


def test_duplicate_full_heartbeat_while_waiting_for_partitions():
    # ConsumerGroupHeartbeatRequestTest.testDuplicateFullHeartbeatWhileWaitingForPartitions
    c = Cluster(foo=2)
    c.join("m1")
    r2 = c.join("m2")
    first = full(c, "m2", r2.member_epoch, [])
    assert (first.error_code, first.member_epoch, assigned(first)) == (0, 3, {})
    assert full(c, "m2", r2.member_epoch, []) == first


def test_duplicate_full_heartbeat_during_revocation():
    # ConsumerGroupHeartbeatRequestTest.testDuplicateFullHeartbeatDuringRevocation
    c = Cluster(foo=2)
    c.join("m1")
    c.join("m2")
    first = full(c, "m1", 2, tp(foo=[0, 1]))
    assert (first.member_epoch, assigned(first)) == (2, {"foo": [0]})
    assert full(c, "m1", 2, tp(foo=[0, 1])) == first


def test_duplicate_full_heartbeat_with_revocation_ack():
    # ConsumerGroupHeartbeatRequestTest.testDuplicateFullHeartbeatWithRevocationAck (and the ack itself repeated: the
    # previous epoch with a subset of the assignment)
    c = Cluster(foo=2)
    c.join("m1")
    c.join("m2")
    ack = full(c, "m1", 2, tp(foo=[0]))
    assert (ack.error_code, ack.member_epoch) == (0, 3)
    again = full(c, "m1", 2, tp(foo=[0]))
    assert (again.error_code, again.member_epoch, assigned(again)) == (0, 3, {"foo": [0]})
    first = full(c, "m1", 3, tp(foo=[0]))
    assert (first.member_epoch, assigned(first)) == (3, {"foo": [0]})
    assert full(c, "m1", 3, tp(foo=[0])) == first


# ---- regular expressions and the subscriptions librdkafka sends ------------------------------------------------------

def test_regex_subscription_follows_topic_creation_and_deletion():
    # ConsumerGroupHeartbeatRequestTest.testConsumerGroupHeartbeatWithRegularExpression: "foo*" matches nothing, then
    # the created topic foo (epoch 3, its partitions), then nothing once foo is deleted (revoked, epoch kept while the
    # heartbeats carry no TopicPartitions)
    c = Cluster()
    r = c.hb("m1", 0, regex="foo*", owned=[], rebalance_timeout_ms=300000)
    assert (r.error_code, r.member_epoch, assigned(r)) == (0, 2, {})
    c.topics_changed(foo=3)
    r = c.hb("m1", 2)
    assert (r.member_epoch, assigned(r)) == (3, {"foo": [0, 1, 2]})
    c.topics_changed()
    r = c.hb("m1", 3)
    assert (r.member_epoch, assigned(r)) == (3, {})


def test_invalid_regular_expression():
    # ConsumerGroupHeartbeatRequestTest.testConsumerGroupHeartbeatWithInvalidRegularExpression
    c = Cluster(foo=1)
    r = c.hb("m1", 0, regex="[", owned=[], rebalance_timeout_ms=300000)
    assert r.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_empty_subscription_is_a_valid_join():
    # ConsumerGroupHeartbeatRequestTest.testConsumerGroupHeartbeatWithEmptySubscription: regex "" or names []
    c = Cluster(foo=1)
    r = c.hb("m1", 0, regex="", owned=[], rebalance_timeout_ms=300000)
    assert (r.error_code, assigned(r)) == (0, {})
    r = c.hb("m2", 0, names=[], owned=[], rebalance_timeout_ms=300000)
    assert (r.error_code, assigned(r)) == (0, {})


def test_librdkafka_subscriptions():
    # librdkafka (group.protocol=consumer) sends its "^" patterns combined as one regex "(^a)|(^b)" with
    # SubscribedTopicNames = [the plain names], and regex "" when there is none; "" clears a regex (newer
    # GroupMetadataManager: an empty SubscribedTopicRegex means no regex)
    c = Cluster(foo=2, foobar=1, bar=1)
    r = c.hb("m1", 0, names=[], regex="(^foo.*)", owned=[], rebalance_timeout_ms=300000)
    assert assigned(r) == {"foo": [0, 1], "foobar": [0]}
    r = c.hb("m1", 2, names=["bar"], regex="", owned=tp(foo=[0, 1], foobar=[0]))
    assert (r.member_epoch, assigned(r)) == (2, {}), "foo and foobar are revoked first"
    r = c.hb("m1", 2, owned=[])
    assert (r.member_epoch, assigned(r)) == (3, {"bar": [0]})
    assert c.member("m1").subscribed_topic_regex is None


# ---- static member coming back with its own member id ----------------------------------------------------------------

def test_static_member_rejoining_with_its_own_member_id_after_a_temporary_leave():
    # GroupMetadataManagerTest.testStaticMemberGetsBackAssignmentUponRejoin with the member id kept (KIP-1082: the
    # client keeps its member id for its life): the member is back at the group epoch with its assignment, no
    # rebalance
    c = Cluster(foo=2)
    static_pair(c)
    c.hb("m2", -2, instance="i2")
    r = c.join("m2", instance="i2")
    assert (r.error_code, r.member_id, r.member_epoch, assigned(r)) == (0, "m2", 3, {"foo": [1]})
    assert c.epochs() == [2, 3]
    assert c.hb("m2", 3, instance="i2").error_code == 0
