"""Session expiry with a manual clock, describe / list / delete, metrics, config (pure core, no Ray)."""
import pytest

from actors.group_coordinator import SHARE_GROUP_CONFIG_DEFAULTS, GroupCoordinatorShard, ShareGroupConfig
from actors.group_coordinator import records as rec
from actors.config_schema import ConfigError
from protocol.errors import ErrorCode
from tests.unit.test_group_coordinator_helpers import Harness, topic_id


def test_session_expiry_with_manual_clock():
    h = Harness(orders=2)
    assert h.shard.next_deadline_ms() is None
    a = h.join("g", "a", ["orders"])
    h.now_ms = 10_000
    b = h.hb("g", "b", 0, ["orders"])
    assert h.shard.next_deadline_ms() == 45_000, "a's last heartbeat at 0 + group.share.session.timeout.ms"
    h.now_ms = 30_000
    h.hb("g", "a", a.member_epoch)
    assert h.shard.next_deadline_ms() == 55_000, "now b's, from its heartbeat at 10 s"
    h.now_ms = 54_999
    assert h.expire() == []
    h.now_ms = 55_000
    records = h.expire()
    assert [rec.decode(k, v).record_type for k, v in records] == [rec.SHARE_GROUP_METADATA]
    (d,) = h.shard.describe(["g"], h.topics)
    assert [m.member_id for m in d.members] == ["a"] and d.group_epoch == b.member_epoch + 1
    assert h.shard.next_deadline_ms() == 75_000
    assert h.hb("g", "b", b.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("g", "b", 0, ["orders"]).error_code == 0, "a removed member rejoins with epoch 0"
    h.now_ms = 200_000
    h.expire()
    assert h.shard.describe(["g"], h.topics)[0].group_state == "Empty"
    assert h.shard.next_deadline_ms() is None
    assert h.shard.list_groups() == [("g", "Empty", "share")], "an empty share group stays until deleted"


def test_describe():
    h = Harness(orders=2)
    h.join("g", "a", ["orders"])
    h.hb("g", "a", 3, rack="rack-1", client_id="share-consumer-1", host="/10.0.0.7")
    (d,) = h.shard.describe(["g"], h.topics)
    assert (d.error_code, d.group_id, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == \
        (0, "g", "Stable", 3, 3, "simple")
    (m,) = d.members
    assert (m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host, m.subscribed_topic_names) == \
        ("a", "rack-1", 3, "share-consumer-1", "/10.0.0.7", ["orders"])
    assert m.assignment == [(topic_id("orders"), "orders", [0, 1])]
    missing, empty = h.shard.describe(["missing", ""], h.topics)
    assert (missing.error_code, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group missing not found.")
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID


def test_list_groups_filters():
    h = Harness(orders=1)
    h.join("stable-g", "a", ["orders"])
    h.join("empty-g", "b", ["orders"])
    h.hb("empty-g", "b", -1)
    assert h.shard.list_groups() == [("empty-g", "Empty", "share"), ("stable-g", "Stable", "share")]
    assert h.shard.list_groups(["STABLE"]) == [("stable-g", "Stable", "share")]
    assert h.shard.list_groups(["empty", "stable"], ["Share"]) == h.shard.list_groups()
    assert h.shard.list_groups([], ["classic", "consumer"]) == []
    assert h.shard.list_groups(["Dead"]) == []


def test_delete_groups():
    h = Harness(orders=1)
    h.join("busy", "a", ["orders"])
    h.join("idle", "b", ["orders"])
    h.hb("idle", "b", -1)
    assert h.shard.share_partitions("idle") == [(topic_id("orders"), 0)], "the share state to delete first"
    results, records = h.shard.delete_groups(["busy", "idle", "missing", ""])
    assert results == [
        ("busy", ErrorCode.NON_EMPTY_GROUP, "Group busy is not empty."),
        ("idle", ErrorCode.NONE, None),
        ("missing", ErrorCode.GROUP_ID_NOT_FOUND, "Group missing not found."),
        ("", ErrorCode.INVALID_GROUP_ID, "Group id can't be empty."),
    ]
    decoded = [rec.decode(k, v) for k, v in records]
    assert [(r.record_type, r.key.group_id, r.value) for r in decoded] == [
        (rec.SHARE_GROUP_STATE_PARTITION_METADATA, "idle", None), (rec.SHARE_GROUP_METADATA, "idle", None)]
    assert [g for g, _, _ in h.shard.list_groups()] == ["busy"]
    assert h.shard.share_partitions("idle") == [] and h.shard.group_type("idle") is None
    r = h.hb("idle", "b", 0, ["orders"])
    assert r.error_code == 0 and r.member_epoch == 2, "the id is free again: a brand-new group"


def test_metrics():
    h = Harness(orders=1)
    h.join("g1", "a", ["orders"])
    h.join("g1", "b", ["orders"])
    h.join("g2", "c", ["orders"])
    h.hb("g2", "c", -1)
    m = h.shard.metrics()
    assert m.group_count_by_state == {"Empty": 1, "Stable": 1}
    assert m.member_count == 2
    assert m.rebalance_count == 2 + 1 + 2 + 1  # g1: join a, init; join b | g2: join c, init, leave c


def test_config_from_broker_config():
    assert GroupCoordinatorShard().config == ShareGroupConfig()
    c = ShareGroupConfig.from_broker_config({"num.partitions": 3})
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.max_size, c.assignor_name) == (45000, 5000, 200, "simple")
    assert SHARE_GROUP_CONFIG_DEFAULTS["group.share.max.session.timeout.ms"] == c.max_session_timeout_ms == 60000
    c = ShareGroupConfig.from_broker_config({"group.share.max.size": "10", "group.share.session.timeout.ms": 50000,
                                             "group.share.assignors": [
                                                 "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"]})
    assert (c.max_size, c.session_timeout_ms) == (10, 50000)
    assert GroupCoordinatorShard({"group.share.heartbeat.interval.ms": 6000}).config.heartbeat_interval_ms == 6000


@pytest.mark.parametrize("overrides", [
    {"group.share.max.size": 0},
    {"group.share.max.size": 1001},
    {"group.share.session.timeout.ms": 30000},          # below the minimum
    {"group.share.session.timeout.ms": 70000},          # above the maximum
    {"group.share.heartbeat.interval.ms": 4000},
    {"group.share.heartbeat.interval.ms": 16000},
    {"group.share.assignors": "uniform"},
    {"group.share.assignors": "simple,simple"},
    {"group.share.max.size": "many"},
])
def test_config_rejects_out_of_bounds(overrides):
    with pytest.raises(ConfigError):
        ShareGroupConfig.from_broker_config(overrides)


def test_heartbeat_interval_must_be_below_session_timeout():
    with pytest.raises(ConfigError):
        ShareGroupConfig(session_timeout_ms=5000, min_session_timeout_ms=5000, heartbeat_interval_ms=5000)


def test_altering_offsets_initializes_a_new_share_group_and_its_first_member_is_assigned_at_once():
    h = Harness(auto_initialize=False, orders=2)
    tid = topic_id("orders")
    error, _, records = h.shard.share_offsets_altered("fresh", {(tid, 0): "orders", (tid, 1): "orders"})
    h.log += records
    assert error == 0
    assert h.shard.list_groups() == [("fresh", "Empty", "share")], "KIP-932: the tool can initialize a share group"
    assert sorted(h.replayed().share_partitions("fresh")) == [(tid, 0), (tid, 1)], "persisted"
    first = h.hb("fresh", "a", 0, ["orders"])
    assert first.initialize == [], "no second initialization: it would replace the start offsets just set"
    assert first.assignment == [(tid, [0, 1])]


def test_altering_offsets_refuses_a_group_with_members_and_a_consumer_group():
    h = Harness(orders=1)
    h.join("busy", "a", ["orders"])
    assert h.shard.share_offsets_altered("busy", {(topic_id("orders"), 0): "orders"})[0] == ErrorCode.NON_EMPTY_GROUP
    h.shard.register_foreign_group("classic-g", "classic")
    assert h.shard.share_offsets_altered("classic-g", {})[0] == ErrorCode.GROUP_ID_NOT_FOUND
