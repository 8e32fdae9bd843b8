"""Streams groups (KIP-1071): the pure core (actors/group_coordinator/streams_group.py, streams_topology.py) and its
place in the group namespace (groups.py). The messages are Kafka 4.4's, measured against it (tests/kafka/
test_streams.py compares the same conversation on the wire)."""
import uuid

import pytest

from actors.group_coordinator.groups import Groups
from actors.group_coordinator import streams_topology as st
from actors.group_coordinator.streams_group import StreamsGroups, assign, _Member
from actors.group_coordinator.streams_topology import Subtopology, TopicInfo, Topology
from protocol.errors import ErrorCode

DELAY_MS = 3000


def topology(epoch=0, source="in"):
    return Topology(epoch, (
        Subtopology("0", (source,), repartition_sink_topics=("rep",)),
        Subtopology("1", repartition_source_topics=(TopicInfo("rep", topic_configs=(("cleanup.policy", "delete"),)),),
                    state_changelog_topics=(TopicInfo("store-changelog",
                                                      topic_configs=(("cleanup.policy", "compact"),)),))))


def topics(partitions=3, internal=True):
    out = {"in": (uuid.uuid4(), partitions)}
    if internal:
        out.update({"rep": (uuid.uuid4(), partitions), "store-changelog": (uuid.uuid4(), partitions)})
    return out


def join(groups, member, now_ms, view, process=None, **kw):
    return groups.heartbeat("app", member, 0, now_ms=now_ms, topics=view, rebalance_timeout_ms=10000,
                            topology=kw.pop("topology", topology()), active_tasks=[], standby_tasks=[],
                            warmup_tasks=[], process_id=process or f"p-{member}", **kw)[0]


def beat(groups, member, epoch, now_ms, view, active=None):
    other = None if active is None else []
    return groups.heartbeat("app", member, epoch, now_ms=now_ms, topics=view, active_tasks=active,
                            standby_tasks=other, warmup_tasks=other)[0]


def active_of(result):
    return {(s, p) for s, ps in result.active_tasks for p in ps}


# ---- topology ----------------------------------------------------------------------------------------------------

def test_missing_source_topics_are_named():
    c = st.configure(topology(), {})
    assert c.status == (st.MISSING_SOURCE_TOPICS, "Source topics in are missing.")
    assert not c.ready and c.to_create == []


def test_internal_topics_get_the_source_partition_count_and_their_configs():
    c = st.configure(topology(), topics(4, internal=False))
    assert c.status == (st.MISSING_INTERNAL_TOPICS, "Internal topics are missing: rep, store-changelog")
    assert {(t.name, t.partitions, t.replication_factor, t.configs) for t in c.to_create} == {
        ("rep", 4, -1, (("cleanup.policy", "delete"),)), ("store-changelog", 4, -1, (("cleanup.policy", "compact"),))}
    ready = st.configure(topology(), topics(4))
    assert ready.ready and ready.task_counts == {"0": 4, "1": 4}


def test_an_internal_topic_with_other_partitions_is_incorrectly_partitioned():
    view = topics(3)
    view["rep"] = (uuid.uuid4(), 5)
    c = st.configure(topology(), view)
    assert c.status == (st.INCORRECTLY_PARTITIONED_TOPICS,
                        "Existing topic rep has different number of partitions: expected 3, found 5")


def test_copartitioned_sources_must_agree():
    t = Topology(0, (Subtopology("0", ("a", "b"), copartition_groups=(((0, 1), (), ()),)),))
    c = st.configure(t, {"a": (uuid.uuid4(), 2), "b": (uuid.uuid4(), 3)})
    assert c.status[0] == st.INCORRECTLY_PARTITIONED_TOPICS


def test_a_sink_that_no_subtopology_reads_is_an_invalid_topology():
    t = Topology(0, (Subtopology("0", ("in",), repartition_sink_topics=("nowhere",)),))
    assert "nowhere" in st.validate(t)
    r = StreamsGroups({}).heartbeat("app", "m1", 0, now_ms=0, topics=topics(), rebalance_timeout_ms=1, topology=t,
                                    active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id="p")[0]
    assert r.error_code == ErrorCode.STREAMS_INVALID_TOPOLOGY


# ---- heartbeats --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (dict(group_id=""), "GroupId can't be empty."),
    (dict(member_id=""), "MemberId can't be empty."),
    (dict(topology=None), "Topology must be non-null when (re-)joining."),
    (dict(rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided in first request."),
    (dict(active_tasks=[("0", [1])]), "ActiveTasks must be empty when (re-)joining."),
])
def test_invalid_heartbeats_are_answered_as_kafka(change, message):
    request = dict(group_id="app", member_id="m1", member_epoch=0, now_ms=0, topics=topics(),
                   rebalance_timeout_ms=1000, topology=topology(), active_tasks=[], standby_tasks=[],
                   warmup_tasks=[], process_id="p")
    request.update(change)
    r, records = StreamsGroups({}).heartbeat(**request)
    assert records == []
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, message)


def test_a_member_sends_all_its_task_kinds_or_none():
    g, view = StreamsGroups({}), topics()
    r = join(g, "m1", 0, view)
    r, _ = g.heartbeat("app", "m1", r.member_epoch, now_ms=1, topics=view, active_tasks=[], standby_tasks=None,
                       warmup_tasks=None)
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST,
                                               "If one task-type is non-null, all must be non-null.")


def test_a_join_before_the_internal_topics_exist_gets_epoch_2_and_no_tasks():
    g = StreamsGroups({})
    r = join(g, "m1", 0, topics(internal=False))
    assert (r.error_code, r.member_epoch, r.active_tasks) == (0, 2, [])
    assert sorted(code for code, _ in r.status) == [st.MISSING_INTERNAL_TOPICS, st.ASSIGNMENT_DELAYED]
    assert {t.name for t in r.topics_to_create} == {"rep", "store-changelog"}
    assert (r.heartbeat_interval_ms, r.task_offset_interval_ms) == (5000, 60000)


def test_tasks_come_after_the_initial_rebalance_delay_and_spread_over_members():
    g, view = StreamsGroups({}), topics()
    r1 = join(g, "m1", 0, view)
    assert [c for c, _ in r1.status] == [st.ASSIGNMENT_DELAYED] and r1.active_tasks == []
    r2 = join(g, "m2", 100, view)
    assert r2.active_tasks == []
    r1 = beat(g, "m1", r1.member_epoch, DELAY_MS, view, active=[])
    r2 = beat(g, "m2", r2.member_epoch, DELAY_MS, view, active=[])
    r1 = beat(g, "m1", r1.member_epoch, DELAY_MS, view, active=[])   # its tasks were held by nobody: all given
    assert r1.status == [] and r1.member_epoch == r2.member_epoch
    all_tasks = {(s, p) for s in "01" for p in range(3)}
    assert active_of(r1) | active_of(r2) == all_tasks and not active_of(r1) & active_of(r2)
    assert abs(len(active_of(r1)) - len(active_of(r2))) <= 1
    [d] = g.describe(["app"])
    assert (d.group_state, d.group_epoch, d.assignment_epoch) == ("Stable", r1.member_epoch, r1.member_epoch)


def test_a_new_member_waits_until_the_old_one_revokes():
    g, view = StreamsGroups({"group.streams.initial.rebalance.delay.ms": 0}), topics()
    r1 = join(g, "m1", 0, view)
    assert len(active_of(r1)) == 6
    owned = r1.active_tasks
    r2 = join(g, "m2", 10, view)
    assert r2.active_tasks == [] and r2.member_epoch == 3   # m1 still holds everything
    r1 = beat(g, "m1", r1.member_epoch, 20, view, active=owned)
    assert r1.member_epoch == 2 and len(active_of(r1)) == 3   # told to keep three: it must revoke the others
    [d] = g.describe(["app"])
    assert d.group_state == "Reconciling"
    r1 = beat(g, "m1", 2, 30, view, active=r1.active_tasks)  # revoked
    assert r1.member_epoch == 3
    r2 = beat(g, "m2", 3, 40, view, active=[])
    assert active_of(r2) == {(s, p) for s in "01" for p in range(3)} - active_of(r1)


def test_fencing_and_unknown_members():
    g, view = StreamsGroups({}), topics()
    r = join(g, "m1", 0, view)
    fenced = beat(g, "m1", r.member_epoch + 5, 1, view)
    assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert fenced.error_message.startswith("The streams group member has a greater member epoch (7)")
    assert beat(g, "m9", 3, 1, view).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert beat(g, "m1", -1, 1, view).member_epoch == -1
    assert g.describe(["app"])[0].group_state == "Empty"


def test_a_member_whose_session_runs_out_is_fenced():
    g, view = StreamsGroups({}), topics()
    join(g, "m1", 0, view)
    g.expire(45000)
    assert g.describe(["app"])[0].members == []


def test_the_standby_replicas_go_to_other_processes():
    members = {m: _Member(m, process_id=p) for m, p in (("a", "p1"), ("b", "p2"), ("c", "p2"))}
    out = assign({"0": 4}, members, 1)
    for m, sets in out.items():
        for s, ps in sets.standby.items():
            for p in ps:
                owner = next(o for o, x in out.items() if p in x.active.get(s, ()))
                assert members[owner].process_id != members[m].process_id


# ---- the namespace and offsets -----------------------------------------------------------------------------------

def test_streams_groups_share_the_namespace_and_list_as_streams():
    g, view = Groups({}), topics()
    r, _ = g.streams_group_heartbeat("app", "m1", 0, topics=view, now_ms=0, rebalance_timeout_ms=1000,
                                     topology=topology(), active_tasks=[], standby_tasks=[], warmup_tasks=[],
                                     process_id="p")
    assert r.error_code == 0
    assert [(group, kind, protocol) for group, _, kind, protocol in g.list_groups()] == [("app", "streams", "streams")]
    c, _ = g.consumer_group_heartbeat("app", "c1", 0, topics=view, now_ms=0, instance_id=None, rack_id=None,
                                      rebalance_timeout_ms=1000, subscribed_topic_names=["in"],
                                      subscribed_topic_regex=None, server_assignor=None, owned_partitions=[],
                                      client_id="", client_host="", api_version=1)
    assert c.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert g.describe_streams(["nope"])[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert g.delete_groups(["app"]).response == [("app", ErrorCode.NON_EMPTY_GROUP, "Group app is not empty.")]


def test_offset_commits_check_the_streams_member_and_epoch():
    g, view = Groups({"group.streams.initial.rebalance.delay.ms": 0}), topics()
    r, _ = g.streams_group_heartbeat("app", "m1", 0, topics=view, now_ms=0, rebalance_timeout_ms=1000,
                                     topology=topology(), active_tasks=[], standby_tasks=[], warmup_tasks=[],
                                     process_id="p")
    epoch = r.member_epoch
    partitions = [("in", 0, 5, -1, None)]
    assert g.commit_offsets("app", "m1", None, epoch, partitions, api_version=9, now_ms=1).response == [0]
    assert g.commit_offsets("app", "m1", None, epoch + 1, partitions, api_version=9, now_ms=1).response == \
        [ErrorCode.STALE_MEMBER_EPOCH]
    assert g.commit_offsets("app", "mx", None, epoch, partitions, api_version=9, now_ms=1).response == \
        [ErrorCode.UNKNOWN_MEMBER_ID]
    error, rows = g.fetch_offsets("app", [("in", [0])], member_id="m1", member_epoch=epoch)
    assert error == 0 and rows[0][2].offset == 5
    assert g.fetch_offsets("app", [("in", [0])], member_id="m1", member_epoch=epoch + 1)[0] == \
        ErrorCode.STALE_MEMBER_EPOCH


# ---- persistence -------------------------------------------------------------------------------------------------

def test_the_group_epoch_is_persisted_and_never_goes_back():
    g, view = Groups({"group.streams.initial.rebalance.delay.ms": 0}), topics()
    records = []
    for member in ("m1", "m2"):
        r, out = g.streams_group_heartbeat("app", member, 0, topics=view, now_ms=0, rebalance_timeout_ms=1000,
                                           topology=topology(), active_tasks=[], standby_tasks=[], warmup_tasks=[],
                                           process_id="p")
        records += out
    assert records and all(key[:2] == (17).to_bytes(2, "big") for key, _ in records)
    epoch = g.streams.describe(["app"])[0].group_epoch
    reloaded = Groups({})
    for key, value in records:
        reloaded.replay(key, value, now_ms=0)
    reloaded.finish_replay(now_ms=0)
    assert reloaded.group_type("app") == "streams"
    assert reloaded.streams.persisted_state() == g.streams.persisted_state()
    [d] = reloaded.describe_streams(["app"])
    assert (d.group_state, d.group_epoch, d.members) == ("Empty", epoch, [])
    # a member of the old coordinator is unknown here; it rejoins and the epoch moves on
    r, _ = reloaded.streams_group_heartbeat("app", "m1", epoch, topics=view, now_ms=10)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    r, _ = reloaded.streams_group_heartbeat("app", "m1", 0, topics=view, now_ms=10, rebalance_timeout_ms=1000,
                                            topology=topology(), active_tasks=[], standby_tasks=[], warmup_tasks=[],
                                            process_id="p")
    assert r.member_epoch > epoch
    # the share groups' namespace knows the id
    assert reloaded.share.group_type("app") == "streams"


def test_deleting_an_empty_streams_group_writes_a_tombstone():
    g, view = Groups({}), topics()
    g.streams_group_heartbeat("app", "m1", 0, topics=view, now_ms=0, rebalance_timeout_ms=1000, topology=topology(),
                              active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id="p")
    g.streams_group_heartbeat("app", "m1", -1, topics=view, now_ms=1)
    result = g.delete_groups(["app"])
    results, records = result.response, result.records
    assert results == [("app", ErrorCode.NONE, None)]
    assert any(value is None and key[:2] == (17).to_bytes(2, "big") for key, value in records)
    assert g.group_type("app") is None and g.list_groups() == []


def test_members_learn_which_user_endpoint_holds_which_partitions():
    g, view = StreamsGroups({"group.streams.initial.rebalance.delay.ms": 0}), topics()
    r1 = join(g, "m1", 0, view, user_endpoint=("host-a", 7070))
    assert r1.endpoint_information_epoch >= 1
    [(endpoint, active, standby)] = r1.partitions_by_user_endpoint
    assert endpoint == ("host-a", 7070) and standby == []
    assert active == [("in", [0, 1, 2]), ("rep", [0, 1, 2])]
    # a member that already has the group's endpoint epoch is not sent the map again
    r1 = g.heartbeat("app", "m1", r1.member_epoch, now_ms=1, topics=view, active_tasks=r1.active_tasks,
                     standby_tasks=[], warmup_tasks=[], endpoint_information_epoch=r1.endpoint_information_epoch)[0]
    assert r1.partitions_by_user_endpoint is None


def test_a_transactional_commit_with_a_stale_streams_epoch_is_an_illegal_generation():
    g, view = Groups({"group.streams.initial.rebalance.delay.ms": 0}), topics()
    r, _ = g.streams_group_heartbeat("app", "m1", 0, topics=view, now_ms=0, rebalance_timeout_ms=1000,
                                     topology=topology(), active_tasks=[], standby_tasks=[], warmup_tasks=[],
                                     process_id="p")
    partitions = [("in", 0, 5, -1, None)]
    result = g.commit_transactional_offsets("app", 7, "m1", None, r.member_epoch, partitions, now_ms=1)
    errors, records = result.response, result.records
    assert errors == [0] and records
    errors = g.commit_transactional_offsets("app", 7, "m1", None, r.member_epoch + 1, partitions, now_ms=1).response
    assert errors == [ErrorCode.ILLEGAL_GENERATION]
