"""Records: Kafka's framing, what is persisted, and replay rebuilding the same persisted state."""
import struct

from hypothesis import given, settings, strategies as st

from actors.group_coordinator import GroupCoordinatorShard
from actors.group_coordinator import records as rec
from protocol.coordinator_records import ShareGroupMetadataKey, ShareGroupMetadataValue
from protocol.errors import ErrorCode
from tests.unit.test_group_coordinator_helpers import Harness, topic_id

ORDERS = topic_id("orders")


def test_record_framing_matches_kafka():
    key, value = rec.share_group_metadata("g", 7, -5)
    # key: int16 record type 11, then ShareGroupMetadataKey v0 (int16-length string)
    assert key == struct.pack(">hh", 11, 1) + b"g"
    # value: int16 version 0, then the flexible v0 value: epoch, metadata hash, empty tagged fields
    assert value == struct.pack(">hiqB", 0, 7, -5, 0)
    assert ShareGroupMetadataValue.decode(value[2:], 0) == ShareGroupMetadataValue(epoch=7, metadata_hash=-5)
    r = rec.decode(key, value)
    assert (r.record_type, r.key, r.value) == (11, ShareGroupMetadataKey(group_id="g"),
                                               ShareGroupMetadataValue(epoch=7, metadata_hash=-5))
    tk, tv = rec.share_group_metadata_tombstone("g")
    assert (tk, tv) == (key, None) and rec.decode(tk, tv).value is None


def test_state_partition_metadata_record():
    key, value = rec.state_partition_metadata("g", {ORDERS: [2]}, {ORDERS: [1, 0]}, [topic_id("old")],
                                              {ORDERS: "orders", topic_id("old"): "old"})
    assert key[:2] == struct.pack(">h", 15)
    v = rec.decode(key, value).value
    assert [(i.topic_id, i.topic_name, i.partitions) for i in v.initializing_topics] == [(ORDERS, "orders", [2])]
    assert [(i.topic_id, i.topic_name, i.partitions) for i in v.initialized_topics] == [(ORDERS, "orders", [0, 1])]
    assert [(i.topic_id, i.topic_name) for i in v.deleting_topics] == [(topic_id("old"), "old")]


def test_only_group_and_initialization_records_are_written():
    h = Harness(orders=2)
    h.join("g", "a", ["orders"])
    h.join("g", "b", ["orders"])
    h.hb("g", "a", -1)
    assert {rec.decode(k, v).record_type for k, v in h.log} == {rec.SHARE_GROUP_METADATA,
                                                              rec.SHARE_GROUP_STATE_PARTITION_METADATA}


def test_replay_rebuilds_persisted_state_and_members_rejoin():
    h = Harness(auto_initialize=False, orders=3, audit=1)
    first = h.hb("g", "a", 0, ["orders", "audit"])
    h.log += h.shard.mark_initialized("g", [tp for tp in first.initialize if tp[0] == ORDERS])
    r = h.hb("g", "a", first.member_epoch)
    assert r.assignment == [(ORDERS, [0, 1, 2])]
    h.hb("other", "x", 0, ["orders"])
    h.hb("other", "x", -1)
    h.log += h.shard.delete_groups(["other"])[1]
    loaded = h.replayed()
    assert loaded.persisted_state() == h.shard.persisted_state()
    assert loaded.list_groups() == [("g", "Empty", "share")], "members are not persisted"
    assert loaded.partitions_to_initialize("g") == [(topic_id("audit"), 0)]

    # the member comes back to the new coordinator
    h.shard = loaded
    assert h.hb("g", "a", r.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    again = h.hb("g", "a", 0, ["orders", "audit"])
    assert again.member_epoch > r.member_epoch, "epochs never move backwards across a failover"
    assert again.assignment == [(ORDERS, [0, 1, 2])], "initialized partitions are assigned without re-initializing"
    assert again.initialize == [(topic_id("audit"), 0)], "an unconfirmed initialization is retried at once"


def test_replay_of_tombstones_and_foreign_groups():
    shard = GroupCoordinatorShard()
    for k, v in [rec.share_group_metadata("g", 3, 0), rec.state_partition_metadata("g", {}, {ORDERS: [0]}, [], {}),
                 rec.state_partition_metadata_tombstone("g")]:
        shard.replay(k, v)
    assert shard.persisted_state() == {"g": (3, 0, (), (), ())}
    shard.replay(*rec.share_group_metadata_tombstone("g"))
    assert shard.persisted_state() == {}
    shard.replay(*rec.share_group_metadata_tombstone("never-existed"))

    classic_key = struct.pack(">hh", rec.CLASSIC_GROUP_METADATA, 3) + b"cg1"
    consumer_key = struct.pack(">hh", rec.CONSUMER_GROUP_METADATA, 3) + b"cg2"
    shard.replay(classic_key, b"\x00\x03whatever")
    shard.replay(consumer_key, b"\x00\x00whatever")
    shard.replay(struct.pack(">hh", 1, 0) + b"offset-commit-key", b"ignored")
    assert (shard.group_type("cg1"), shard.group_type("cg2")) == ("classic", "consumer")
    shard.replay(classic_key, None)
    assert shard.group_type("cg1") is None


OPS = st.lists(st.tuples(st.sampled_from(["join", "hb", "leave", "tick", "init", "fail", "grow", "delete"]),
                         st.sampled_from(["g1", "g2"]), st.sampled_from(["a", "b", "c"])), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_histories_replay_to_the_same_persisted_state(ops):
    h = Harness(auto_initialize=False, orders=2, audit=1)
    pending: dict[str, list] = {}
    epochs: dict[tuple, int] = {}
    for op, g, m in ops:
        if op == "join":
            r = h.hb(g, m, 0, ["orders"] if m != "c" else ["orders", "audit"])
        elif op == "hb":
            r = h.hb(g, m, epochs.get((g, m), 1))
        elif op == "leave":
            r = h.hb(g, m, -1)
        elif op == "tick":
            h.now_ms += 20_000
            h.expire()
            continue
        elif op == "init":
            h.log += h.shard.mark_initialized(g, pending.pop(g, []))
            continue
        elif op == "fail":
            h.log += h.shard.mark_initialize_failed(g, pending.pop(g, []))
            continue
        elif op == "grow":
            tid, n = h.topics["orders"]
            h.topics["orders"] = (tid, n + 1)
            continue
        else:
            h.log += h.shard.delete_groups([g])[1]
            continue
        if r.error_code == 0:
            epochs[(g, m)] = r.member_epoch
            pending.setdefault(g, []).extend(r.initialize)
        # invariants of the live state
        for d in h.shard.describe(["g1", "g2"], h.topics):
            if d.error_code == 0:
                assert d.assignment_epoch <= d.group_epoch
                assert all(0 < x.member_epoch <= d.assignment_epoch for x in d.members)
    assert h.replayed().persisted_state() == h.shard.persisted_state()
