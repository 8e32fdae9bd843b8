"""KIP-848 consumer groups (ConsumerGroupHeartbeat): joins, reconciliation, leaves, static members, timers, regex
subscriptions, offset validation, describe / list, persistence (pure core, no Ray)."""
import uuid

import pytest

from actors.group_coordinator import consumer_records as crec
from actors.group_coordinator import records as share_records
from actors.group_coordinator.consumer_group import ConsumerGroups
from actors.config_schema import ConfigError
from protocol.errors import ErrorCode

SESSION_MS = 45000


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def view(**partitions) -> dict:
    return {name: (topic_id(name), count) for name, count in partitions.items()}


ORDERS = topic_id("orders")


class Harness:
    """The consumer groups, a manual clock, the cluster's topics and every record returned (the log)."""

    def __init__(self, config=None, **topics):
        self.groups = ConsumerGroups(config or {})
        self.topics = view(**topics)
        self.now_ms = 0
        self.log: list = []

    def hb(self, member, epoch, *, group="g", names=None, regex=None, owned=None, instance=None, rack=None,
           rebalance_timeout_ms=-1, assignor=None, api_version=1):
        result, records = self.groups.heartbeat(
            group, member, epoch, instance_id=instance, rack_id=rack, rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=assignor,
            owned_partitions=owned, client_id="client", client_host="/127.0.0.1", now_ms=self.now_ms,
            topics=self.topics, api_version=api_version)
        self.log += records
        return result

    def join(self, member, names=("orders",), **kw):
        kw.setdefault("rebalance_timeout_ms", 30000)
        r = self.hb(member, 0, names=list(names), owned=[], **kw)
        assert r.error_code == 0, r
        return r

    def expire(self):
        records = self.groups.expire(self.now_ms)
        self.log += records
        return records

    def group(self, group="g"):
        (d,) = self.groups.describe([group], self.topics)
        return d

    def member(self, member_id, group="g"):
        return {m.member_id: m for m in self.group(group).members}[member_id]

    def epochs(self):
        """The group epochs written to the log, in order."""
        return [crec.decode_consumer_group_metadata(k, v).epoch for k, v in self.log]


def owned(*partitions, topic=ORDERS):
    return [(topic, list(partitions))]


def partitions(result):
    """The partitions of `orders` in a heartbeat's assignment."""
    return {p for t, ps in result.assignment or [] if t == ORDERS for p in ps}


# ---- joining and reconciling -----------------------------------------------------------------------------------------

def test_first_member_gets_every_partition_at_epoch_two():
    h = Harness(orders=4)
    r = h.join("m1")
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 2, 5000)
    assert r.assignment == [(ORDERS, [0, 1, 2, 3])]
    assert h.epochs() == [2], "the group epoch is persisted when it is bumped"
    assert h.groups.list_groups() == [("g", "Stable")]

    steady = h.hb("m1", 2, owned=owned(0, 1, 2, 3))
    assert (steady.member_epoch, steady.assignment) == (2, None), "an unchanged assignment is not sent again"
    full = h.hb("m1", 2, names=["orders"], owned=owned(0, 1, 2, 3), rebalance_timeout_ms=30000)
    assert full.assignment == [(ORDERS, [0, 1, 2, 3])], "a full request gets the assignment"
    assert h.epochs() == [2], "steady heartbeats write nothing"


def test_second_member_waits_until_the_first_revokes():
    h = Harness(orders=4)
    h.join("a")
    b = h.join("b")
    assert b.member_epoch == 3 and b.assignment == [], "b's partitions are still owned by a"
    assert h.member("b").target_assignment == [(ORDERS, "orders", [2, 3])]
    assert h.group().group_state == "Reconciling"

    a = h.hb("a", 2, owned=owned(0, 1, 2, 3))
    assert a.member_epoch == 2, "a keeps its epoch until it revokes"
    assert partitions(a) == {0, 1}, "a is told its assignment without the partitions to revoke"
    assert h.hb("a", 2).member_epoch == 2, "a heartbeat without TopicPartitions does not prove the revocation"
    assert h.hb("b", 3).assignment is None, "b still waits for the released partitions"

    a = h.hb("a", 2, owned=owned(0, 1))
    assert (a.member_epoch, a.assignment) == (3, None)
    b = h.hb("b", 3)
    assert (b.member_epoch, partitions(b)) == (3, {2, 3})
    assert h.group().group_state == "Stable"
    assert h.epochs() == [2, 3]


def test_leave_bumps_the_epoch_and_frees_the_partitions():
    h = Harness(orders=2)
    h.join("a")
    h.join("b")
    h.hb("a", 2, owned=owned(0))
    h.hb("b", 3)
    r = h.hb("a", -1)
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "a", -1)
    assert h.epochs() == [2, 3, 4]
    assert h.group().group_state == "Assigning"
    b = h.hb("b", 3, owned=owned(1))
    assert (b.member_epoch, partitions(b)) == (4, {0, 1})
    assert h.hb("a", 4).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    h.hb("b", -1)
    assert h.groups.list_groups() == [("g", "Empty")] and h.groups.is_empty("g")


def test_known_member_rejoining_with_epoch_zero_gets_its_partitions_back():
    h = Harness(orders=2)
    h.join("a")
    h.join("b")
    h.hb("a", 2, owned=owned(0))
    h.hb("b", 3)
    r = h.join("a")
    assert (r.error_code, r.member_epoch, partitions(r)) == (0, 3, {0})
    assert h.epochs() == [2, 3], "a rejoin with the same subscription is no rebalance"


def test_subscription_change_bumps_the_epoch_and_revokes():
    h = Harness(orders=2, audit=1)
    h.join("a")
    r = h.hb("a", 2, names=["audit"], owned=owned(0, 1))
    assert (r.member_epoch, partitions(r)) == (2, set()), "orders must be revoked first"
    r = h.hb("a", 2, owned=[])
    assert (r.member_epoch, r.assignment) == (3, [(topic_id("audit"), [0])])


def test_new_partitions_bump_the_epoch():
    h = Harness(orders=2)
    h.join("a")
    h.topics = view(orders=3)
    records = h.groups.on_topics_changed(h.topics, h.now_ms)
    h.log += records
    assert h.epochs() == [2, 3]
    r = h.hb("a", 2, owned=owned(0, 1))
    assert (r.member_epoch, partitions(r)) == (3, {0, 1, 2})
    assert h.groups.on_topics_changed(h.topics, h.now_ms) == [], "nothing changed: no bump"


def test_deleted_topic_leaves_the_assignment():
    h = Harness(orders=2, audit=1)
    h.join("a", names=["orders", "audit"])
    h.topics = view(orders=2)
    h.log += h.groups.on_topics_changed(h.topics, h.now_ms)
    r = h.hb("a", 2, owned=owned(0, 1))
    assert (r.member_epoch, r.assignment) == (3, [(ORDERS, [0, 1])])


# ---- epochs --------------------------------------------------------------------------------------------------------

def test_fenced_epochs_and_unknown_members():
    h = Harness(orders=2)
    assert h.hb("m1", 4).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.groups.list_groups() == [], "only a join creates a group"
    h.join("m1")
    ahead = h.hb("m1", 3)
    assert ahead.error_code == ErrorCode.FENCED_MEMBER_EPOCH and "greater member epoch (3)" in ahead.error_message
    assert ahead.member_id is None and ahead.assignment is None
    assert h.hb("m2", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("m2", -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("m1", -1, group="other").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_previous_epoch_is_accepted_only_with_a_subset_of_the_assignment():
    h = Harness(orders=2)
    h.join("a")
    h.join("b")
    h.hb("a", 2, owned=owned(0))              # a moves to epoch 3; say the response is lost
    r = h.hb("a", 2, owned=owned(0))
    assert (r.error_code, r.member_epoch) == (0, 3), "the previous epoch with owned partitions it may keep"
    assert h.hb("a", 2).error_code == ErrorCode.FENCED_MEMBER_EPOCH, "without TopicPartitions there is no proof"
    assert h.hb("a", 2, owned=owned(0, 1)).error_code == ErrorCode.FENCED_MEMBER_EPOCH, "owns more than assigned"
    h.hb("b", -1)                              # epoch 4
    h.hb("a", 3, owned=owned(0))
    smaller = h.hb("a", 2, owned=owned(0))
    assert smaller.error_code == ErrorCode.FENCED_MEMBER_EPOCH and "smaller member epoch (2)" in smaller.error_message


# ---- timers --------------------------------------------------------------------------------------------------------

def test_session_expiry_removes_the_member_and_bumps_the_epoch():
    h = Harness(orders=2)
    h.join("a")
    h.now_ms = 10000
    h.join("b")
    assert h.groups.next_deadline_ms() == SESSION_MS, "a's session ends first"
    h.now_ms = SESSION_MS - 1
    assert h.expire() == []
    h.now_ms = SESSION_MS
    assert len(h.expire()) == 1
    assert [m.member_id for m in h.group().members] == ["b"] and h.epochs() == [2, 3, 4]
    r = h.hb("b", 3)
    assert (r.member_epoch, partitions(r)) == (4, {0, 1}), "a's partitions are free at once"
    assert h.groups.next_deadline_ms() == SESSION_MS + SESSION_MS


def test_member_that_does_not_revoke_in_time_is_fenced():
    h = Harness(orders=2)
    h.join("a", rebalance_timeout_ms=10000)
    h.join("b")
    h.now_ms = 1000
    h.hb("a", 2, owned=owned(0, 1))           # asked to revoke partition 1, by 11000
    assert h.groups.next_deadline_ms() == 11000
    h.now_ms = 5000
    h.hb("a", 2, owned=owned(0, 1))           # still holds it: the deadline does not move
    h.now_ms = 10999
    assert h.expire() == []
    h.now_ms = 11000
    assert len(h.expire()) == 1
    assert h.hb("a", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    b = h.hb("b", 3)
    assert (b.member_epoch, partitions(b)) == (4, {0, 1})


def test_revoking_in_time_clears_the_rebalance_deadline():
    h = Harness(orders=2)
    h.join("a", rebalance_timeout_ms=1000)
    h.join("b")
    h.hb("a", 1, owned=owned(0, 1))
    h.hb("a", 1, owned=owned(0))
    h.now_ms = 5000
    assert h.expire() == [] and len(h.group().members) == 2


# ---- static membership ---------------------------------------------------------------------------------------------

def test_static_member_leaves_and_rejoins_with_its_assignment_and_no_rebalance():
    h = Harness(orders=2)
    h.join("a", instance="i-a")
    h.join("b", instance="i-b")
    h.hb("a", 2, owned=owned(0), instance="i-a")
    h.hb("b", 3, instance="i-b")
    epochs = h.epochs()

    r = h.hb("a", -2, instance="i-a")
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "a", -2)
    assert h.epochs() == epochs, "a temporary leave is no rebalance"
    assert h.member("a").assignment == [(ORDERS, "orders", [0])], "the assignment is kept for the instance"

    back = h.join("a2", instance="i-a")
    assert (back.member_id, back.member_epoch, back.assignment) == ("a2", 3, [(ORDERS, [0])])
    assert h.epochs() == epochs, "the replacement takes over without a group epoch bump"
    assert [m.member_id for m in h.group().members] == ["a2", "b"]
    assert h.member("a2").instance_id == "i-a"
    assert h.hb("a", 3, instance="i-a").error_code == ErrorCode.FENCED_INSTANCE_ID


def test_instance_id_of_an_active_member_is_unreleased():
    h = Harness(orders=1)
    h.join("a", instance="i-a")
    r = h.hb("a2", 0, names=["orders"], owned=[], instance="i-a", rebalance_timeout_ms=30000)
    assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID and "owned by a" in r.error_message
    assert h.hb("x", 1, instance="i-x").error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_that_does_not_come_back_expires():
    h = Harness(orders=2)
    h.join("a", instance="i-a")
    h.join("b")
    h.hb("a", 2, owned=owned(0), instance="i-a")
    h.now_ms = 1000
    h.hb("a", -2, instance="i-a")
    h.now_ms = 1000 + SESSION_MS - 1
    h.hb("b", 3)
    assert {m.member_id for m in h.group().members} == {"a", "b"}
    h.now_ms = 1000 + SESSION_MS
    h.expire()
    assert [m.member_id for m in h.group().members] == ["b"]
    assert partitions(h.hb("b", 3)) == {0, 1}
    assert h.join("a3", instance="i-a").member_epoch == h.group().group_epoch, "the instance id is free again"


def test_static_member_leaving_for_good():
    h = Harness(orders=1)
    h.join("a", instance="i-a")
    r = h.hb("a", -1, instance="i-a")
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert h.groups.is_empty("g") and h.epochs() == [2, 3]


# ---- regular expressions ---------------------------------------------------------------------------------------------

def test_regex_subscription_picks_up_a_new_topic():
    h = Harness(orders=1, __consumer_offsets=3)
    r = h.hb("a", 0, regex="orders.*|__.*", owned=[], rebalance_timeout_ms=30000)
    assert r.assignment == [(ORDERS, [0])], "internal topics never match"
    h.topics = {**h.topics, **view(orders_eu=2)}
    h.log += h.groups.on_topics_changed(h.topics, h.now_ms)
    assert h.epochs() == [2, 3]
    r = h.hb("a", 2, owned=owned(0))
    assert r.member_epoch == 3
    assert sorted(r.assignment) == sorted([(ORDERS, [0]), (topic_id("orders_eu"), [0, 1])])
    assert h.groups.on_topics_changed({**h.topics, **view(payments=1)}, h.now_ms) == [], "no match, no bump"


def test_regex_is_matched_in_full():
    h = Harness(orders=1, preorders=1)
    r = h.hb("a", 0, regex="orders", owned=[], rebalance_timeout_ms=30000)
    assert r.assignment == [(ORDERS, [0])]


# ---- validation ------------------------------------------------------------------------------------------------------

FULL = dict(names=["orders"], owned=[], rebalance_timeout_ms=30000)


@pytest.mark.parametrize("group, member, epoch, kw, code, message", [
    ("", "m", 0, FULL, ErrorCode.INVALID_REQUEST, "GroupId can't be empty."),
    ("g", "", 0, FULL, ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
    ("g", "m", 0, {**FULL, "instance": ""}, ErrorCode.INVALID_REQUEST, "InstanceId can't be empty."),
    ("g", "m", 0, {**FULL, "rack": " "}, ErrorCode.INVALID_REQUEST, "RackId can't be empty."),
    ("g", "m", 0, {**FULL, "rebalance_timeout_ms": -1}, ErrorCode.INVALID_REQUEST,
     "RebalanceTimeoutMs must be provided in first request."),
    ("g", "m", 0, {**FULL, "owned": None}, ErrorCode.INVALID_REQUEST,
     "TopicPartitions must be empty when (re-)joining."),
    ("g", "m", 0, {**FULL, "owned": owned(0)}, ErrorCode.INVALID_REQUEST,
     "TopicPartitions must be empty when (re-)joining."),
    ("g", "m", 0, {**FULL, "names": None}, ErrorCode.INVALID_REQUEST,
     "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
    ("g", "m", -2, {}, ErrorCode.INVALID_REQUEST, "InstanceId can't be null."),
    ("g", "m", -3, {}, ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
    ("g", "m", 0, {**FULL, "names": None, "regex": "orders("}, ErrorCode.INVALID_REGULAR_EXPRESSION, None),
    ("g", "m", 0, {**FULL, "assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
])
def test_invalid_requests(group, member, epoch, kw, code, message):
    h = Harness(orders=1)
    r = h.hb(member, epoch, group=group, **kw)
    assert (r.error_code, r.member_id) == (code, None)
    if message:
        assert r.error_message == message
    assert h.log == [] and h.groups.list_groups() == []


def test_v0_coordinator_generates_the_member_id():
    h = Harness(orders=1)
    r = h.hb("", 0, api_version=0, **FULL)
    assert r.error_code == 0 and len(r.member_id) == 22
    assert h.hb(r.member_id, 2, api_version=0).error_code == 0
    assert h.hb("", 2, api_version=0).error_code == ErrorCode.INVALID_REQUEST


def test_group_max_size():
    h = Harness({"group.consumer.max.size": 1}, orders=1)
    h.join("a")
    r = h.hb("b", 0, **FULL)
    assert r.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.hb("a", 2).error_code == 0, "members already in the group are not refused"


def test_server_assignor_preferred_by_members_is_used():
    h = Harness(orders=4, audit=4)
    h.join("a", names=["orders", "audit"], assignor="range")
    h.join("b", names=["orders", "audit"], assignor="range")
    assert h.group().assignor_name == "range"
    targets = {m.member_id: m.target_assignment for m in h.group().members}
    assert {tuple(ps) for _, _, ps in targets["a"]} == {(0, 1)}, "range: contiguous and co-partitioned"
    assert {tuple(ps) for _, _, ps in targets["b"]} == {(2, 3)}


def test_broker_config():
    groups = ConsumerGroups({"group.consumer.heartbeat.interval.ms": "6000", "group.consumer.assignors": "range"})
    assert (groups.config.heartbeat_interval_ms, groups.config.assignor_names) == (6000, ("range",))
    assert ConsumerGroups({}).config.assignor_names == ("uniform", "range")
    for bad in ({"group.consumer.session.timeout.ms": 1000}, {"group.consumer.heartbeat.interval.ms": 20000},
                {"group.consumer.assignors": "sticky"}, {"group.consumer.assignors": ""},
                {"group.consumer.max.size": 0}, {"group.consumer.session.timeout.ms": "soon"}):
        with pytest.raises(ConfigError):
            ConsumerGroups(bad)


# ---- offsets ---------------------------------------------------------------------------------------------------------

def test_validate_offset_commit():
    h = Harness(orders=2)
    v = h.groups.validate_offset_commit
    assert v("g", "", -1, 9)[0] == ErrorCode.NONE, "an admin commit to an unknown group"
    assert v("g", "m", 4, 9)[0] == ErrorCode.GROUP_ID_NOT_FOUND
    assert v("g", "m", 4, 8)[0] == ErrorCode.ILLEGAL_GENERATION
    h.join("a")
    h.join("b")
    assert v("g", "", -1, 9)[0] == ErrorCode.UNKNOWN_MEMBER_ID, "a non-empty group takes commits from members only"
    assert v("g", "b", 3, 9) == (ErrorCode.NONE, None)
    assert v("g", "b", 3, 8)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert v("g", "b", 4, 9)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert v("g", "a", 2, 9)[0] == ErrorCode.NONE, "a is still at epoch 2 while it revokes"
    h.hb("a", 2, owned=owned(0))
    assert h.member("a").member_epoch == 3
    assert v("g", "a", 4, 9)[0] == ErrorCode.STALE_MEMBER_EPOCH, "newer than the member's epoch"
    assert v("g", "a", 2, 9)[0] == ErrorCode.NONE, "older: checked per partition (KIP-1251)"
    h.hb("a", -1)
    h.hb("b", -1)
    assert v("g", "", -1, 9)[0] == ErrorCode.NONE, "an empty group takes simple commits"


def test_a_commit_at_an_older_epoch_is_taken_for_partitions_held_since_then():
    """KIP-1251 (Kafka 4.3+): assignment epoch <= the commit's epoch <= the member's epoch, per partition. A member
    whose epoch moved on in a heartbeat whose answer it has not seen yet still commits what it holds."""
    h = Harness(orders=4)
    h.join("a")                                    # a: 0-3 at epoch 2
    h.join("b")                                    # epoch 3: a must give up 2 and 3
    h.hb("a", 2, owned=owned(0, 1))                # a revoked them: epoch 3, keeping 0 and 1 from epoch 2
    h.hb("b", 3)                                   # b: 2 and 3 at epoch 3
    stale = h.groups.stale_commit_partitions
    every = [("orders", p) for p in range(4)]
    assert stale("g", "a", 3, every) == [False] * 4, "the current epoch: nothing checked per partition (as Kafka)"
    assert stale("g", "a", 2, every) == [False, False, True, True], "epoch 2: 0 and 1, held since epoch 2"
    assert stale("g", "b", 2, every) == [True, True, True, True], "b was given its partitions at epoch 3"
    assert stale("g", "b", 3, [("orders", 2), ("gone", 0)]) == [False, False], "the current epoch: no check"
    h.join("c")                                    # epoch 4: a gives up 1
    h.hb("a", 3, owned=owned(0))
    assert h.member("a").member_epoch == 4
    assert stale("g", "a", 3, every) == [False, True, True, True], "1 has left a"


def test_validate_offset_fetch():
    h = Harness(orders=2)
    v = h.groups.validate_offset_fetch
    assert v("g", None, -1)[0] == ErrorCode.NONE
    h.join("a")
    assert v("g", None, -1)[0] == ErrorCode.NONE, "an admin fetch"
    assert v("g", "a", 2) == (ErrorCode.NONE, None)
    assert v("g", "x", 2)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    h.join("b")
    h.hb("a", 2, owned=owned(0))
    assert v("g", "a", 2)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert v("g", "a", 4)[0] == ErrorCode.STALE_MEMBER_EPOCH


# ---- admin and metrics -----------------------------------------------------------------------------------------------

def test_describe_and_list():
    h = Harness(orders=2)
    h.join("a", instance="i-a", rack="r1")
    h.join("b", names=[], regex="ord.*")
    (d, missing) = h.groups.describe(["g", "nope"], h.topics)
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        0, "Reconciling", 3, 3, "uniform")
    a, b = d.members
    assert (a.member_id, a.instance_id, a.rack_id, a.member_epoch, a.client_id, a.client_host, a.member_type) == (
        "a", "i-a", "r1", 2, "client", "/127.0.0.1", 1)
    assert (a.subscribed_topic_names, a.subscribed_topic_regex) == (["orders"], None)
    assert a.assignment == [(ORDERS, "orders", [0, 1])] and a.target_assignment == [(ORDERS, "orders", [0])]
    assert (b.subscribed_topic_names, b.subscribed_topic_regex) == ([], "ord.*")
    assert b.assignment == [] and b.target_assignment == [(ORDERS, "orders", [1])]

    h.hb("a", -1, instance="i-a")
    assert h.groups.list_groups() == [("g", "Assigning")]
    h.hb("b", 3)
    assert h.groups.list_groups() == [("g", "Stable")]
    h.join("c", group="g2")
    h.hb("b", -1)
    assert h.groups.list_groups() == [("g", "Empty"), ("g2", "Stable")]
    assert h.groups.count_by_state() == {"Empty": 1, "Assigning": 0, "Reconciling": 0, "Stable": 1}
    assert h.groups.member_count() == 1 and h.groups.rebalance_count() == 5


def test_delete_and_create_empty():
    h = Harness(orders=1)
    assert h.groups.delete_group("g")[0] == ErrorCode.GROUP_ID_NOT_FOUND
    h.join("a")
    assert h.groups.delete_group("g")[:2] == (ErrorCode.NON_EMPTY_GROUP, "Group g is not empty.")
    h.hb("a", -1)
    code, message, records = h.groups.delete_group("g")
    assert (code, message, records) == (ErrorCode.NONE, None, [crec.consumer_group_metadata_tombstone("g")])
    assert not h.groups.has_group("g")
    records = h.groups.create_empty("admin")
    assert h.groups.has_group("admin") and h.groups.is_empty("admin") and len(records) == 1
    assert h.groups.create_empty("admin") == []
    assert h.groups.list_groups() == [("admin", "Empty")]


# ---- persistence -----------------------------------------------------------------------------------------------------

def replayed(h: Harness) -> ConsumerGroups:
    fresh = ConsumerGroups({})
    for key, value in h.log:
        fresh.replay(int.from_bytes(key[:2], "big", signed=True), key, value)
    return fresh


def test_replay_rebuilds_groups_and_epochs_never_go_back():
    h = Harness(orders=2)
    h.join("a")
    h.join("b")
    h.join("c", group="gone")
    h.hb("c", -1, group="gone")
    _, _, tombstone = h.groups.delete_group("gone")
    h.log += tombstone
    h.log += h.groups.create_empty("admin")
    fresh = replayed(h)
    assert fresh.persisted_state() == h.groups.persisted_state()
    assert fresh.list_groups() == [("admin", "Empty"), ("g", "Empty")], "members are not persisted"

    # after the coordinator moved, members rejoin; the epoch moves on from the persisted one
    r, _ = fresh.heartbeat("g", "a", 2, instance_id=None, rack_id=None, rebalance_timeout_ms=-1,
                           subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
                           owned_partitions=None, client_id="c", client_host="h", now_ms=0, topics=h.topics,
                           api_version=1)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    r, records = fresh.heartbeat("g", "a", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                                 subscribed_topic_names=["orders"], subscribed_topic_regex=None, server_assignor=None,
                                 owned_partitions=[], client_id="c", client_host="h", now_ms=0, topics=h.topics,
                                 api_version=1)
    assert r.member_epoch == 4 and r.assignment == [(ORDERS, [0, 1])]
    assert crec.decode_consumer_group_metadata(*records[0]) == ("g", 4, fresh.persisted_state()["g"][1])


def test_record_format_is_kafka_framed_and_readable_by_the_share_core():
    key, value = crec.consumer_group_metadata("grp", 7, -5)
    assert key == b"\x00\x03\x00\x03grp"
    assert value == b"\x00\x00" + (7).to_bytes(4, "big") + (-5).to_bytes(8, "big", signed=True) + b"\x00"
    decoded = share_records.decode(key, value)
    assert (decoded.record_type, decoded.key) == (3, "grp")
    assert crec.decode_consumer_group_metadata(key, b"\x00\x00\x00\x00\x00\x09\x00") == ("grp", 9, 0), \
        "a value without the metadata hash (Kafka 4.0) still loads"
    assert crec.decode_consumer_group_metadata(key, None).epoch is None
