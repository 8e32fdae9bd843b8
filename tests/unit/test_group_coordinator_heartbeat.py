"""ShareGroupHeartbeat: join / leave, member ids, epochs, errors, initialization gating (pure core, no Ray)."""
import pytest

from actors.group_coordinator import ShareGroupConfig
from actors.group_coordinator import records as rec
from protocol.errors import ErrorCode
from tests.unit.test_group_coordinator_helpers import Harness, topic_id

ORDERS = topic_id("orders")


def test_join_creates_group_and_gates_assignment_on_initialization():
    h = Harness(auto_initialize=False, orders=3)
    r = h.hb("g", "m1", 0, ["orders"])
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 2, 5000)
    assert r.assignment == [], "nothing is initialized yet, so nothing is assigned"
    assert r.initialize == [(ORDERS, 0), (ORDERS, 1), (ORDERS, 2)] and r.state_epoch == 2
    types = [rec.decode(k, v).record_type for k, v in h.log]
    assert types == [rec.SHARE_GROUP_METADATA, rec.SHARE_GROUP_STATE_PARTITION_METADATA]
    assert h.shard.partitions_to_initialize("g") == r.initialize

    # the heartbeat before the share coordinator answers changes nothing and re-sends nothing
    r2 = h.hb("g", "m1", 2)
    assert (r2.member_epoch, r2.assignment, r2.initialize) == (2, None, [])

    h.log += h.shard.mark_initialized("g", r.initialize)
    assert h.shard.partitions_to_initialize("g") == []
    r3 = h.hb("g", "m1", 2)
    assert r3.member_epoch == 3, "newly assignable partitions bump the group epoch"
    assert r3.assignment == [(ORDERS, [0, 1, 2])]


def test_steady_heartbeat_writes_nothing_and_omits_assignment():
    h = Harness(orders=2)
    r = h.join("g", "m1", ["orders"])
    before = len(h.log)
    again = h.hb("g", "m1", r.member_epoch)
    assert (again.error_code, again.member_epoch, again.assignment) == (0, r.member_epoch, None)
    assert len(h.log) == before
    full = h.hb("g", "m1", r.member_epoch, ["orders"])  # a full request gets the assignment again
    assert full.assignment == [(ORDERS, [0, 1])] and len(h.log) == before


@pytest.mark.parametrize("group, member, epoch, topics, rack, message", [
    ("g", "", 0, ["orders"], None, "MemberId can't be empty."),
    ("g", "  ", 0, ["orders"], None, "MemberId can't be empty."),
    ("g", "m" * 256, 0, ["orders"], None, "MemberId can't be longer than 255 characters."),
    ("", "m1", 0, ["orders"], None, "GroupId can't be empty."),
    (" ", "m1", 0, ["orders"], None, "GroupId can't be empty."),
    ("g", "m1", 0, ["orders"], " ", "RackId can't be empty."),
    ("g", "m1", 0, None, None, "SubscribedTopicNames must be set in first request."),
    ("g", "m1", 0, [], None, "SubscribedTopicNames must be set in first request."),
    ("g", "m1", -2, ["orders"], None, "MemberEpoch is invalid."),
])
def test_invalid_requests(group, member, epoch, topics, rack, message):
    h = Harness(orders=1)
    r = h.hb(group, member, epoch, topics, rack=rack)
    assert (r.error_code, r.error_message, r.member_id) == (ErrorCode.INVALID_REQUEST, message, None)
    assert h.log == [] and h.shard.list_groups() == []


def test_unknown_group_and_unknown_member():
    h = Harness(orders=1)
    assert h.hb("nope", "m1", 3).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.hb("nope", "m1", -1).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.shard.list_groups() == [], "a heartbeat that is not a join creates no group"
    h.join("g", "m1", ["orders"])
    assert h.hb("g", "m2", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("g", "m2", -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_client_generated_member_ids_are_kept():
    h = Harness(orders=1)
    a = h.hb("g", "oPVJFxTiS6yz7n9f2N2lTw", 0, ["orders"])
    b = h.hb("g", "another-uuid", 0, ["orders"])
    assert (a.member_id, b.member_id) == ("oPVJFxTiS6yz7n9f2N2lTw", "another-uuid")
    assert [m.member_id for m in h.shard.describe(["g"], h.topics)[0].members] == ["another-uuid",
                                                                                  "oPVJFxTiS6yz7n9f2N2lTw"]


def test_epochs_fencing_and_lost_response():
    h = Harness(orders=2)
    r = h.join("g", "m1", ["orders"])            # m1 at epoch 3 (join at 2, initialized partitions at 3)
    assert r.member_epoch == 3
    assert h.hb("g", "m1", 4).error_code == ErrorCode.FENCED_MEMBER_EPOCH, "ahead of the coordinator"
    assert h.hb("g", "m1", 2).error_code == 0, "the previous epoch is accepted (lost response)"
    h.hb("g", "m2", 0, ["orders"])               # group epoch 4
    r = h.hb("g", "m1", 3)
    assert r.member_epoch == 4 and r.assignment is not None
    assert h.hb("g", "m1", 2).error_code == ErrorCode.FENCED_MEMBER_EPOCH, "older than the previous epoch"
    assert h.hb("g", "m1", 3).error_code == 0
    fenced = h.hb("g", "m1", 8)
    assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH and fenced.error_message
    assert fenced.member_id is None and fenced.assignment is None


def test_rejoin_with_epoch_zero_of_a_known_member_id():
    h = Harness(orders=2)
    r = h.join("g", "m1", ["orders"])
    again = h.hb("g", "m1", 0, ["orders"])
    assert again.error_code == 0 and again.member_epoch == r.member_epoch
    assert again.assignment == [(ORDERS, [0, 1])], "a rejoin gets its full assignment"


def test_group_epoch_bumps_and_member_reconciles():
    h = Harness(orders=2, audit=1)
    assert h.join("g", "m1", ["orders"]).member_epoch == 3
    (d,) = h.shard.describe(["g"], h.topics)
    assert (d.group_epoch, d.assignment_epoch) == (3, 3)

    r = h.hb("g", "m1", 3, ["orders", "audit"])   # subscription change: epoch 4, audit must initialize first
    assert r.member_epoch == 4 and r.initialize == [(topic_id("audit"), 0)]
    r = h.hb("g", "m1", 4)                         # audit initialized: epoch 5, assigned
    assert r.member_epoch == 5 and r.assignment == sorted([(ORDERS, [0, 1]), (topic_id("audit"), [0])],
                                                          key=lambda tp: tp[0].bytes)
    r = h.hb("g", "m1", 5, ["audit"])
    assert r.member_epoch == 6 and r.assignment == [(topic_id("audit"), [0])]
    assert h.shard.metrics().rebalance_count == 5


def test_members_reconcile_on_their_own_heartbeats():
    h = Harness(orders=4)
    h.join("g", "a", ["orders"])
    b = h.hb("g", "b", 0, ["orders"])             # epoch 4: new target for a and b
    assert b.member_epoch == 4 and len(b.assignment[0][1]) == 2
    assert len(h.assignment("g", "a")) == 4, "a keeps its assignment until it heartbeats"
    (d,) = h.shard.describe(["g"], h.topics)
    assert {m.member_id: m.member_epoch for m in d.members} == {"a": 3, "b": 4}
    a = h.hb("g", "a", 3)
    assert a.member_epoch == 4 and len(a.assignment[0][1]) == 2
    assert h.assignment("g", "a") | h.assignment("g", "b") == {("orders", p) for p in range(4)}
    assert not h.assignment("g", "a") & h.assignment("g", "b")


def test_leave():
    h = Harness(orders=2)
    h.join("g", "a", ["orders"])
    h.join("g", "b", ["orders"])
    (d,) = h.shard.describe(["g"], h.topics)
    r = h.hb("g", "a", -1)
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "a", -1)
    (d2,) = h.shard.describe(["g"], h.topics)
    assert [m.member_id for m in d2.members] == ["b"] and d2.group_epoch == d.group_epoch + 1
    b = h.hb("g", "b", [m for m in d.members if m.member_id == "b"][0].member_epoch)
    assert b.assignment == [(ORDERS, [0, 1])], "b takes over a's partitions"
    h.hb("g", "b", -1)
    assert h.shard.describe(["g"], h.topics)[0].group_state == "Empty"
    assert h.hb("g", "b", b.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_group_max_size():
    h = Harness(ShareGroupConfig(max_size=2), orders=1)
    h.join("g", "a", ["orders"])
    h.join("g", "b", ["orders"])
    r = h.hb("g", "c", 0, ["orders"])
    assert r.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and "2 members" in r.error_message
    assert h.hb("g", "a", 0, ["orders"]).error_code == 0, "an existing member is not refused"
    h.hb("g", "b", -1)
    assert h.hb("g", "c", 0, ["orders"]).error_code == 0


def test_default_max_size_is_200():
    h = Harness(orders=1)
    for i in range(200):
        assert h.hb("g", f"m{i}", 0, ["orders"]).error_code == 0
    assert h.hb("g", "m200", 0, ["orders"]).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_namespace_conflict_with_foreign_groups():
    h = Harness(orders=1)
    h.shard.register_foreign_group("classic-g", "classic")
    r = h.hb("classic-g", "m1", 0, ["orders"])
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "not a share group" in r.error_message
    assert h.hb("classic-g", "m1", -1).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.shard.describe(["classic-g"], h.topics)[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.shard.delete_groups(["classic-g"])[0][0][1] == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.shard.group_type("classic-g") == "classic" and h.log == []

    h.join("sg", "m1", ["orders"])
    assert h.shard.group_type("sg") == "share" and h.shard.group_type("other") is None
    with pytest.raises(ValueError):
        h.shard.register_foreign_group("sg", "consumer")
    h.shard.unregister_foreign_group("classic-g")
    assert h.hb("classic-g", "m1", 0, ["orders"]).error_code == 0


def test_subscription_to_missing_topic_then_created():
    h = Harness(orders=1)
    r = h.hb("g", "m1", 0, ["later"])
    assert r.error_code == 0 and r.assignment == [] and r.initialize == []
    h.topics.update({"later": (topic_id("later"), 2)})
    r = h.hb("g", "m1", r.member_epoch)
    assert r.initialize == [(topic_id("later"), 0), (topic_id("later"), 1)]
    r = h.hb("g", "m1", r.member_epoch)
    assert r.assignment == [(topic_id("later"), [0, 1])]


def test_partition_count_increase_initializes_and_assigns_new_partitions():
    h = Harness(orders=2)
    r = h.join("g", "m1", ["orders"])
    h.topics["orders"] = (ORDERS, 3)
    r = h.hb("g", "m1", r.member_epoch)
    assert r.initialize == [(ORDERS, 2)], "only the new partition is initialized"
    r = h.hb("g", "m1", r.member_epoch)
    assert r.assignment == [(ORDERS, [0, 1, 2])]


def test_initialize_retry_and_failure():
    h = Harness(ShareGroupConfig(initialize_retry_interval_ms=30000), auto_initialize=False, orders=1)
    r = h.hb("g", "m1", 0, ["orders"])
    assert r.initialize == [(ORDERS, 0)]
    h.now_ms = 29999
    assert h.hb("g", "m1", 2).initialize == [], "still initializing"
    h.now_ms = 30000
    assert h.hb("g", "m1", 2).initialize == [(ORDERS, 0)], "stale: retried"
    h.log += h.shard.mark_initialize_failed("g", [(ORDERS, 0)])
    assert h.shard.partitions_to_initialize("g") == []
    assert h.hb("g", "m1", 2).initialize == [(ORDERS, 0)], "a failure is retried by the next heartbeat"
    assert h.shard.mark_initialize_failed("g", [(topic_id("x"), 0)]) == []
    assert h.shard.mark_initialized("nope", [(ORDERS, 0)]) == []


def test_deleted_topic_leaves_assignment_and_initialization_state():
    h = Harness(orders=2, audit=1)
    r = h.join("g", "m1", ["orders", "audit"])
    assert {t for t, _ in r.assignment} == {ORDERS, topic_id("audit")}
    del h.topics["audit"]
    r = h.hb("g", "m1", r.member_epoch)
    assert r.assignment == [(ORDERS, [0, 1])], "a topic gone from the view is no longer assigned"
    records = h.shard.on_topics_deleted([topic_id("audit")])
    assert len(records) == 1
    assert h.shard.share_partitions("g") == [(ORDERS, 0), (ORDERS, 1)]
    assert h.shard.on_topics_deleted([topic_id("audit")]) == []
    # recreated under the same name: a new topic id, initialized afresh
    h.topics["audit"] = (topic_id("audit-2"), 1)
    r = h.hb("g", "m1", r.member_epoch)
    assert r.initialize == [(topic_id("audit-2"), 0)]
