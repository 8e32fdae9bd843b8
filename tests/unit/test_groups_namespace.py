"""One group namespace (Groups): share, classic and KIP-848 consumer groups and committed offsets; requests aimed at
a group of another type, conversions of empty groups between the classic and consumer protocols, offset commits
checked against the group, DeleteGroups / ListGroups / OffsetDelete across types, retention, replay (pure core)."""
import uuid

import pytest

from actors.coordinator_result import CoordinatorResult
from actors.group_coordinator import classic_records as crec
from actors.group_coordinator import consumer_records
from actors.group_coordinator.classic import COMPLETING_REBALANCE, EMPTY, STABLE
from actors.group_coordinator.groups import CLASSIC, CONSUMER, SHARE, Groups
from protocol.errors import ErrorCode

SESSION_MS = 10000
MINUTE_MS = 60_000


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


TOPICS = {name: (topic_id(name), 3) for name in ("orders", "payments", "old")}


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: int16 version, int32 count, strings (int16 length + utf8), null user data."""
    out = (0).to_bytes(2, "big", signed=True) + len(topics).to_bytes(4, "big", signed=True)
    for t in topics:
        data = t.encode()
        out += len(data).to_bytes(2, "big", signed=True) + data
    return out + (-1).to_bytes(4, "big", signed=True)


class Harness:
    def __init__(self, **config):
        self.groups = Groups({"group.initial.rebalance.delay.ms": 0, **config})
        self.now_ms = 0
        self.log: list = []
        self.replies: dict = {}
        self._calls = 0

    def _take(self, out):
        self.log += out.records
        self.replies.update(out.response)

    def join(self, member_id="", *, group="g", protocol_type="consumer", protocols=None, topics=("orders",)):
        self._calls += 1
        call = self._calls
        protocols = protocols or [("range", subscription(*topics))]
        self._take(self.groups.join_group(call, group, member_id, None, protocol_type, protocols, SESSION_MS,
                                          20000, client_id="c", client_host="/h", require_known_member_id=True,
                                          api_version=9, now_ms=self.now_ms))
        return self.replies.get(call)

    def classic_member(self, group="g", **kw):
        """A single classic member in a Stable group: (member id, generation)."""
        r = self.join(group=group, **kw)
        r = self.join(r.member_id, group=group, **kw)
        assert r.error_code == 0, r
        self._calls += 1
        self._take(self.groups.sync_group(self._calls, group, r.generation_id, r.member_id, None, None, None,
                                          [(r.member_id, b"asg")], now_ms=self.now_ms))
        assert self.replies[self._calls].error_code == 0
        return r.member_id, r.generation_id

    def cgh(self, group, member_id, epoch, topics=("orders",), owned=None):
        stepped = self.groups.consumer_group_heartbeat(
            group, member_id, epoch, topics=TOPICS, now_ms=self.now_ms, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=list(topics), subscribed_topic_regex=None,
            server_assignor=None, owned_partitions=[] if epoch == 0 else owned, client_id="c", client_host="/h",
            api_version=1)
        result, records = stepped.response, stepped.records
        self.log += records
        return result

    def share_member(self, group, member_id="s1"):
        result, records = self.groups.share.share_group_heartbeat(group, member_id, 0, subscribed_topic_names=["orders"],
                                                                  now_ms=self.now_ms, topics=TOPICS)
        assert result.error_code == 0, result
        self.log += records
        return result

    def commit(self, group, member_id="", generation=-1, partitions=(("orders", 0, 10),), api_version=9):
        result = self.groups.commit_offsets(
            group, member_id, None, generation, [(t, p, o, -1, "") for t, p, o in partitions],
            api_version=api_version, now_ms=self.now_ms)
        self.log += result.records
        return result.response

    def committed(self, group, topic="orders", partition=0):
        error, rows = self.groups.fetch_offsets(group, [(topic, [partition])])
        assert error == 0
        value = rows[0][2]
        return None if value is None else value.offset

    def leave(self, group, member_id):
        self._calls += 1
        out = self.groups.leave_group(self._calls, group, [(member_id, None)], now_ms=self.now_ms)
        answer = out.response.pop(self._calls)
        assert answer.error_code == 0 and answer.members[0][2] == 0
        self._take(out)

    def tick(self, now_ms):
        self.now_ms = now_ms
        self._take(self.groups.tick(now_ms))

    def replayed(self, now_ms=0) -> Groups:
        fresh = Groups({"group.initial.rebalance.delay.ms": 0})
        for key, value in self.log:
            fresh.replay(key, value, now_ms)
        fresh.finish_replay(now_ms)
        return fresh


# ---- requests aimed at a group of another type -----------------------------------------------------------------------

def test_classic_join_on_a_share_group_id_is_inconsistent_group_protocol():
    h = Harness()
    h.share_member("sg")
    r = h.join(group="sg")
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.groups.group_type("sg") == SHARE


def test_classic_join_on_a_non_empty_consumer_group_is_inconsistent_group_protocol():
    h = Harness()
    assert h.cgh("g", "m1", 0).error_code == 0
    r = h.join()
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.groups.group_type("g") == CONSUMER


def test_classic_heartbeat_sync_leave_on_a_share_group_id_are_unknown_member():
    h = Harness()
    h.share_member("sg")
    assert h.groups.heartbeat("sg", 1, "m", None, now_ms=0).response == ErrorCode.UNKNOWN_MEMBER_ID
    out = h.groups.sync_group(1, "sg", 1, "m", None, None, None, [], now_ms=0)
    assert out.response[1].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.groups.leave_group(2, "sg", [("m", None)], now_ms=0).response[2].error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_describe_of_a_group_of_another_type_is_not_found():
    h = Harness()
    h.share_member("sg")
    h.classic_member("cl")
    assert h.groups.describe_classic("sg").error_code == ErrorCode.GROUP_ID_NOT_FOUND
    [d] = h.groups.describe_consumer(["cl"], TOPICS)
    assert d.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.groups.describe_classic("cl").state == STABLE


def test_share_heartbeat_on_a_classic_group_id_is_group_id_not_found():
    h = Harness()
    h.classic_member("cl")
    result, _ = h.groups.share.share_group_heartbeat("cl", "s1", 0, subscribed_topic_names=["orders"], now_ms=0,
                                                     topics=TOPICS)
    assert result.error_code == ErrorCode.GROUP_ID_NOT_FOUND


# ---- conversions of empty groups -------------------------------------------------------------------------------------

def test_empty_consumer_group_becomes_classic_on_join_and_keeps_its_offsets():
    h = Harness()
    r = h.cgh("g", "m1", 0)
    assert h.commit("g", "m1", r.member_epoch) == [0]
    assert h.cgh("g", "m1", -1).error_code == 0             # the last member leaves: the group is empty
    before = len(h.log)
    member, gen = h.classic_member()
    assert h.groups.group_type("g") == CLASSIC and gen == 1
    tombstones = [consumer_records.decode_consumer_group_metadata(k, v) for k, v in h.log[before:]
                  if crec.record_type(k) == consumer_records.RECORD_TYPE_CONSUMER_GROUP_METADATA]
    assert [t.epoch for t in tombstones] == [None], "the consumer group's tombstone is written"
    assert h.committed("g") == 10
    # and a replay of the log ends in the same place
    fresh = h.replayed()
    assert fresh.group_type("g") == CLASSIC and fresh.classic.state("g") == STABLE
    assert fresh.fetch_offsets("g", [("orders", [0])])[1][0][2].offset == 10


def test_empty_classic_group_becomes_consumer_on_heartbeat_epoch_zero_and_keeps_its_offsets():
    h = Harness()
    member, gen = h.classic_member()
    assert h.commit("g", member, gen) == [0]
    h.leave("g", member)
    assert h.groups.classic.state("g") == EMPTY
    r = h.cgh("g", "m1", 0)
    assert r.error_code == 0 and r.member_epoch >= 1
    assert h.groups.group_type("g") == CONSUMER
    assert h.committed("g") == 10
    assert not h.groups.classic.has_group("g")
    assert any(crec.record_type(k) == crec.CLASSIC_GROUP_METADATA and v is None for k, v in h.log), \
        "the classic group's tombstone is written"
    fresh = h.replayed()
    assert fresh.group_type("g") == CONSUMER


def test_consumer_heartbeat_on_a_classic_group_with_members_is_refused():
    h = Harness()
    h.classic_member()
    r = h.cgh("g", "m1", 0)
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.groups.group_type("g") == CLASSIC and h.groups.classic.state("g") == STABLE


# ---- offset commits --------------------------------------------------------------------------------------------------

def test_commit_with_generation_minus_one_creates_a_simple_group():
    h = Harness()
    assert h.commit("simple") == [0]
    assert h.groups.group_type("simple") == CLASSIC
    assert h.groups.classic.state("simple") == EMPTY
    assert ("simple", EMPTY, CLASSIC, "") in h.groups.list_groups()
    assert h.committed("simple") == 10
    h.share_member("simple2")
    assert h.groups.share.group_type("simple") == CLASSIC, "the id is taken in the share namespace too"


@pytest.mark.parametrize("api_version, expected", [(9, ErrorCode.GROUP_ID_NOT_FOUND),
                                                   (8, ErrorCode.ILLEGAL_GENERATION)])
def test_commit_of_a_member_to_an_unknown_group(api_version, expected):
    h = Harness()
    assert h.commit("gone", "m", 3, partitions=(("orders", 0, 1), ("orders", 1, 1)),
                    api_version=api_version) == [expected, expected]
    assert h.groups.group_type("gone") is None and h.log == []


def test_commit_validation_against_a_classic_group():
    h = Harness()
    member, gen = h.classic_member()
    assert h.commit("g", member, gen) == [0]
    assert h.commit("g", member, gen + 1) == [ErrorCode.ILLEGAL_GENERATION]
    assert h.commit("g", "ghost", gen) == [ErrorCode.UNKNOWN_MEMBER_ID]
    r = h.join(member)                   # the leader rejoins: PreparingRebalance, then (alone) CompletingRebalance
    assert h.groups.classic.state("g") == COMPLETING_REBALANCE
    assert h.commit("g", member, r.generation_id) == [ErrorCode.REBALANCE_IN_PROGRESS]
    h.leave("g", member)
    assert h.commit("g") == [0], "an empty group takes generation -1 commits"


def test_commit_to_a_share_group_is_group_id_not_found():
    h = Harness()
    h.share_member("sg")
    assert h.commit("sg") == [ErrorCode.GROUP_ID_NOT_FOUND]
    assert h.groups.fetch_offsets("sg", None) == (ErrorCode.GROUP_ID_NOT_FOUND, [])


def test_commit_metadata_too_large():
    h = Harness(**{"offset.metadata.max.bytes": 3})
    errors = h.groups.commit_offsets("g", "", None, -1, [("orders", 0, 1, -1, "abcd"), ("orders", 1, 1, -1, "ab")],
                                     api_version=9, now_ms=0).response
    assert errors == [ErrorCode.OFFSET_METADATA_TOO_LARGE, 0]


def test_fetch_of_unknown_partitions_gives_none():
    h = Harness()
    assert h.committed("nobody") is None
    h.commit("g")
    assert h.committed("g", partition=1) is None


# ---- OffsetDelete ----------------------------------------------------------------------------------------------------

def test_offset_delete_refuses_topics_the_classic_group_subscribes_to():
    h = Harness()
    member, gen = h.classic_member(topics=("orders",))
    h.commit("g", member, gen, partitions=(("orders", 0, 1), ("old", 0, 1)))
    result = h.groups.delete_offsets("g", [("orders", 0), ("old", 0)])
    (error, errors), records = result.response, result.records
    assert error == 0 and errors == [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, 0]
    assert [crec.decode_offset_commit(k, v) for k, v in records] == [(("g", "old", 0), None)]
    assert h.committed("g", "orders") == 1 and h.committed("g", "old") is None


def test_offset_delete_in_an_empty_group_deletes_anything():
    h = Harness()
    member, gen = h.classic_member(topics=("orders",))
    h.commit("g", member, gen)
    h.leave("g", member)
    result = h.groups.delete_offsets("g", [("orders", 0)])
    (error, errors), records = result.response, result.records
    assert (error, errors, len(records)) == (0, [0], 1)


def test_offset_delete_refuses_a_non_empty_group_of_another_protocol_type():
    h = Harness()
    h.classic_member(protocol_type="connect", protocols=[("v1", b"")])
    assert h.groups.delete_offsets("g", [("orders", 0)]) == CoordinatorResult([], (ErrorCode.NON_EMPTY_GROUP, []))


def test_offset_delete_refuses_topics_a_consumer_group_subscribes_to():
    h = Harness()
    r = h.cgh("g", "m1", 0, topics=("orders",))
    h.commit("g", "m1", r.member_epoch, partitions=(("orders", 0, 1), ("old", 0, 1)))
    error, errors = h.groups.delete_offsets("g", [("orders", 0), ("old", 0)]).response
    assert error == 0 and errors == [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, 0]


def test_offset_delete_of_unknown_or_share_group_is_group_id_not_found():
    h = Harness()
    h.share_member("sg")
    assert h.groups.delete_offsets("nope", [("orders", 0)]).response[0] == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.groups.delete_offsets("sg", [("orders", 0)]).response[0] == ErrorCode.GROUP_ID_NOT_FOUND


# ---- DeleteGroups and ListGroups -------------------------------------------------------------------------------------

def test_delete_groups_per_type():
    h = Harness()
    h.classic_member("busy-classic")
    member, gen = h.classic_member("idle-classic")
    h.commit("idle-classic", member, gen)
    h.leave("idle-classic", member)
    h.cgh("busy-consumer", "m1", 0)
    h.cgh("idle-consumer", "m2", 0)
    h.cgh("idle-consumer", "m2", -1)
    h.share_member("sg")
    result = h.groups.delete_groups(["busy-classic", "idle-classic", "busy-consumer", "idle-consumer", "nope", "sg"])
    results, records = result.response, result.records
    assert [(g, e) for g, e, _ in results] == [
        ("busy-classic", ErrorCode.NON_EMPTY_GROUP), ("idle-classic", 0), ("busy-consumer", ErrorCode.NON_EMPTY_GROUP),
        ("idle-consumer", 0), ("nope", ErrorCode.GROUP_ID_NOT_FOUND), ("sg", ErrorCode.NON_EMPTY_GROUP)]
    assert h.groups.group_type("idle-classic") is None and h.groups.group_type("idle-consumer") is None
    assert h.committed("idle-classic") is None, "the group's offsets go with it"
    kinds = sorted((crec.record_type(k), v is None) for k, v in records)
    assert kinds == [(1, True), (2, True), (3, True)]
    assert h.groups.group_type("busy-classic") == CLASSIC


def test_delete_of_a_simple_group_with_offsets():
    h = Harness()
    h.commit("simple")
    result = h.groups.delete_groups(["simple"])
    results, records = result.response, result.records
    assert results == [("simple", 0, None)]
    assert h.groups.group_type("simple") is None and h.committed("simple") is None


def test_list_groups_with_type_and_state_filters():
    h = Harness()
    h.classic_member("classic-stable")
    h.commit("classic-simple")
    h.cgh("consumer-g", "m1", 0)
    h.share_member("share-g")
    everything = h.groups.list_groups()
    assert [(g, t) for g, _, t, _ in everything] == [
        ("classic-simple", CLASSIC), ("classic-stable", CLASSIC), ("consumer-g", CONSUMER), ("share-g", SHARE)]
    assert [g for g, *_ in h.groups.list_groups(types_filter=["Classic"])] == ["classic-simple", "classic-stable"]
    assert [g for g, *_ in h.groups.list_groups(states_filter=["stable"], types_filter=["classic"])] == \
        ["classic-stable"]
    assert [g for g, *_ in h.groups.list_groups(states_filter=["EMPTY"])] == ["classic-simple"]
    assert [g for g, *_ in h.groups.list_groups(types_filter=["share"])] == ["share-g"]
    assert ("classic-stable", STABLE, CLASSIC, "consumer") in everything


# ---- retention -------------------------------------------------------------------------------------------------------

def test_retention_expires_offsets_of_empty_groups_and_then_the_group():
    h = Harness(**{"offsets.retention.minutes": 10, "offsets.retention.check.interval.ms": 1000})
    member, gen = h.classic_member("busy")
    h.commit("busy", member, gen)
    h.commit("simple")
    for t in range(1000, 10 * MINUTE_MS + 5000, 5000):   # the member stays alive
        h.now_ms = t
        assert h.groups.heartbeat("busy", gen, member, None, now_ms=t).response == 0
        h.tick(t)
    assert h.groups.group_type("simple") is None, "the simple group lost its offsets and is gone"
    assert h.committed("simple") is None
    assert h.committed("busy") == 10 and h.groups.classic.state("busy") == STABLE


def test_simple_group_offsets_expire_by_commit_time_across_a_reload():
    h = Harness(**{"offsets.retention.minutes": 10})
    h.commit("simple")                                    # at 0
    fresh = Groups({"offsets.retention.minutes": 10})
    for key, value in h.log:
        fresh.replay(key, value, 9 * MINUTE_MS)
    fresh.finish_replay(9 * MINUTE_MS)
    fresh.next_retention_check_ms = 0
    fresh.tick(10 * MINUTE_MS)
    assert fresh.fetch_offsets("simple", [("orders", [0])])[1][0][2] is None


def test_offsets_of_unsubscribed_topics_expire_in_a_stable_group():
    h = Harness(**{"offsets.retention.minutes": 10, "offsets.retention.check.interval.ms": 1000})
    member, gen = h.classic_member(topics=("orders",))
    h.commit("g", member, gen, partitions=(("orders", 0, 1), ("old", 0, 1)))
    for t in range(1000, 10 * MINUTE_MS + 5000, 5000):
        h.groups.heartbeat("g", gen, member, None, now_ms=t)
        h.tick(t)
    assert h.committed("g", "orders") == 1
    assert h.committed("g", "old") is None


def test_deleted_topics_drop_their_offsets():
    h = Harness()
    h.commit("a", partitions=(("orders", 0, 1), ("old", 0, 1)))
    records = h.groups.on_topics_deleted({topic_id("old")}, {"old"})
    assert [crec.decode_offset_commit(k, v) for k, v in records if crec.record_type(k) == 1] == \
        [(("a", "old", 0), None)]
    assert h.committed("a", "old") is None and h.committed("a", "orders") == 1


# ---- replay ----------------------------------------------------------------------------------------------------------

def test_replay_rebuilds_classic_groups_offsets_and_simple_groups():
    h = Harness()
    member, gen = h.classic_member("cl")
    h.commit("cl", member, gen)
    h.commit("simple", partitions=(("payments", 2, 77),))
    fresh = h.replayed(now_ms=5000)
    assert fresh.group_type("cl") == CLASSIC and fresh.classic.state("cl") == STABLE
    assert fresh.describe_classic("cl") == h.groups.describe_classic("cl")
    assert fresh.heartbeat("cl", gen, member, None, now_ms=5000).response == 0
    assert fresh.group_type("simple") == CLASSIC and fresh.classic.state("simple") == EMPTY, \
        "a group known only by its offsets comes back as a simple, empty group"
    assert fresh.fetch_offsets("simple", [("payments", [2])])[1][0][2].offset == 77
    errors = fresh.commit_offsets("simple", "", None, -1, [("payments", 2, 78, -1, "")], api_version=9,
                                  now_ms=5000).response
    assert errors == [0]
    assert fresh.share.group_type("simple") == CLASSIC, "the simple group's id is taken in the share namespace"
    assert fresh.list_groups() == h.groups.list_groups()


def test_replay_of_a_deleted_group_forgets_it():
    h = Harness()
    member, gen = h.classic_member("cl")
    h.commit("cl", member, gen)
    h.leave("cl", member)
    h.log += h.groups.delete_groups(["cl"]).records
    fresh = h.replayed()
    assert fresh.group_type("cl") is None and fresh.share.group_type("cl") is None


def test_an_empty_group_id_is_invalid_everywhere():
    """Kafka's isGroupIdNotEmpty checks: INVALID_GROUP_ID, and nothing is created or written."""
    h = Harness()
    assert h.join(group="").error_code == ErrorCode.INVALID_GROUP_ID
    assert h.groups.heartbeat("", 1, "m", None, now_ms=0).response == ErrorCode.INVALID_GROUP_ID
    assert h.groups.leave_group(1, "", [("m", None)], now_ms=0).response[1].error_code == ErrorCode.INVALID_GROUP_ID
    assert h.groups.commit_offsets("", "", None, -1, [("orders", 0, 5, -1, None)], api_version=9,
                                   now_ms=0) == CoordinatorResult([], [ErrorCode.INVALID_GROUP_ID])
    assert h.groups.fetch_offsets("", None) == (ErrorCode.INVALID_GROUP_ID, [])
    assert h.groups.delete_offsets("", [("orders", 0)]).response[0] == ErrorCode.INVALID_GROUP_ID
    assert h.groups.describe_classic("").error_code == ErrorCode.INVALID_GROUP_ID
    assert h.groups.list_groups() == [] and h.log == []


# ---- compaction: the live records alone rebuild the state ------------------------------------------------------------

def test_live_records_rebuild_every_group_type_and_offset():
    """What compaction keeps (one record per live key) replays to the same state as the whole log."""
    h = Harness()
    member, gen = h.classic_member("cl")
    h.commit("cl", member, gen, partitions=(("orders", 0, 5), ("orders", 1, 6)))
    h.commit("cl", member, gen, partitions=(("orders", 0, 9),))          # supersedes 5
    h.commit("simple", partitions=(("payments", 2, 77),))
    h.commit("gone", partitions=(("payments", 0, 1),))
    h.log += h.groups.delete_groups(["gone"]).records
    assert h.cgh("cg", "m1", 0).error_code == 0
    h.share_member("sg")
    whole = h.replayed(now_ms=5000)
    live = Groups({"group.initial.rebalance.delay.ms": 0})
    for key, value in h.groups.live_records():
        live.replay(key, value, 5000)
    live.finish_replay(5000)
    assert len(h.groups.live_records()) < len(h.log)
    for g in (whole, live):
        assert g.list_groups() == whole.list_groups()
        assert g.fetch_offsets("cl", None) == whole.fetch_offsets("cl", None)
        assert g.fetch_offsets("simple", None)[1][0][2].offset == 77
        assert g.describe_classic("cl") == h.groups.describe_classic("cl")
        assert g.group_type("gone") is None and g.fetch_offsets("gone", None) == (0, [])
        assert g.consumer.persisted_state() == h.groups.consumer.persisted_state()
        assert g.share.persisted_state() == h.groups.share.persisted_state()
    assert [v.offset for _, _, v, _ in live.fetch_offsets("cl", None)[1]] == [9, 6]


# ---- sessions carried into a shard rebuilt after a failed append -----------------------------------------------------

def test_a_rebuilt_shard_keeps_the_members_sessions_it_is_given():
    """The coordinator drops its shard when an append fails (memory ahead of the log) and replays the
    partition. Replaying alone gives every member a fresh session; the actor carries the old deadlines
    over, so a member that went silent during a network cut expires when its session ends, not a
    session after every failed write of its removal."""
    h = Harness()
    member, _gen = h.classic_member(group="c")      # heartbeats stop at 0: deadline SESSION_MS
    h.cgh("k", "m1", 0)
    h.share_member("s")
    before = h.groups.session_deadlines()
    assert before[("classic", "c", member)] == SESSION_MS
    assert {k for k, _, _ in before} == {"classic", "consumer", "share"}

    later = SESSION_MS - 1000                       # the rebuild: a second before those sessions end
    fresh = h.replayed(later)
    assert fresh.session_deadlines()[("classic", "c", member)] == later + SESSION_MS  # replay alone: fresh
    fresh.carry_sessions(before)
    # (KIP-848 and share group members come back by joining again: the replay does not keep them)
    assert fresh.session_deadlines() == {k: d for k, d in before.items() if k[0] == "classic"}
    out = fresh.tick(SESSION_MS)
    assert fresh.describe_classic("c").members == [] and out.records  # expired on time, its removal written


def test_carried_sessions_of_members_the_log_no_longer_has_are_ignored():
    h = Harness()
    member, _ = h.classic_member(group="c")
    fresh = h.replayed(0)
    fresh.carry_sessions({("classic", "c", "gone"): 1, ("classic", "other", member): 1, ("classic", "c", member): 7})
    assert fresh.session_deadlines() == {("classic", "c", member): 7}


def test_a_member_the_dropped_shard_had_removed_stays_removed_in_the_rebuilt_shard():
    """The timer removed a member whose session ran out, and the write of that removal failed (too few in-sync
    replicas during a network cut): the shard is dropped and rebuilt from the log, which still has the member. The
    deadlines carried over come from the dropped shard, where it was gone already: it must not come back with a
    session counted from the rebuild (or from the coordinator's election, if that was recent)."""
    h = Harness()
    member, _ = h.classic_member(group="c")
    log = list(h.log)
    h.tick(SESSION_MS)                              # expired and removed in memory; its record is never written
    assert h.groups.describe_classic("c").members == []
    carried = h.groups.session_deadlines()
    assert carried == {}
    h.log = log
    rebuilt = h.replayed(SESSION_MS)                # a coordinator elected just now would load it fresh
    rebuilt.carry_sessions(carried)
    out = rebuilt.tick(SESSION_MS + 1)
    assert rebuilt.describe_classic("c").members == [] and out.records


def test_a_late_request_of_an_expired_member_does_not_revive_it():
    """The probe's failure (h1, the coordinator, cut for 60 s, then healed): the old member's session ran out in the
    cut, its removal could not be written, so the rebuilt shard still had it, expired. After the heal the client's
    OffsetCommits queued in the cut arrived with the old member id: each counted as a heartbeat and gave the old
    member a new session (carried into the next rebuild when the commit's own write failed), and the client's JoinGroup
    with a new member id waited in PreparingRebalance for it. As in Kafka, where the expired member is gone, such a
    request is UNKNOWN_MEMBER_ID, and the join completes once the timer removes the old member."""
    h = Harness()
    old, generation = h.classic_member(group="c")
    carried = h.groups.session_deadlines()          # no heartbeat since: the session ends at SESSION_MS
    rebuilt = h.replayed(0)
    rebuilt.carry_sessions(carried)
    h.groups = rebuilt
    h.now_ms = SESSION_MS + 5000                    # after the heal, before the timers' turn
    assert h.commit("c", old, generation) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert rebuilt.heartbeat("c", generation, old, None, now_ms=h.now_ms).response == ErrorCode.UNKNOWN_MEMBER_ID
    assert rebuilt.session_deadlines()[("classic", "c", old)] == SESSION_MS
    r = h.join(group="c")                           # the consumer, back with a new member id
    assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
    calls = h._calls + 1
    assert h.join(r.member_id, group="c") is None   # waits for the group's members
    h.tick(h.now_ms + 1000)                         # the old member goes: the join completes
    joined = h.replies[calls]
    assert joined.error_code == 0 and joined.leader == r.member_id
    assert [m for m, _, _ in joined.members] == [r.member_id]


def test_a_consumer_member_commits_at_an_older_epoch_the_partitions_it_held_then():
    """KIP-1251 (Kafka 4.3+): the member's epoch moved on (another member joined) while its commit was under
    way with the epoch it had: the partitions it still holds since then are committed, the others answer
    STALE_MEMBER_EPOCH and keep their offsets, and a commit with a newer epoch than the member's is refused."""
    h = Harness()
    assert h.cgh("c", "a", 0).member_epoch == 2                  # a: orders 0-2 at epoch 2
    h.cgh("c", "b", 0)                                            # epoch 3: a must give some up
    a = h.cgh("c", "a", 2, owned=[(topic_id("orders"), [0, 1, 2])])
    kept = sorted(p for t, ps in a.assignment for p in ps)
    a = h.cgh("c", "a", 2, owned=[(topic_id("orders"), kept)])   # revoked: a moves to epoch 3
    assert a.member_epoch == 3 and 0 < len(kept) < 3
    errors = h.commit("c", "a", 2, partitions=[("orders", p, 7) for p in range(3)])
    assert errors == [ErrorCode.NONE if p in kept else ErrorCode.STALE_MEMBER_EPOCH for p in range(3)]
    assert [h.committed("c", partition=p) for p in range(3)] == [7 if p in kept else None for p in range(3)]
    assert h.commit("c", "a", 4, partitions=[("orders", kept[0], 8)]) == [ErrorCode.STALE_MEMBER_EPOCH]
