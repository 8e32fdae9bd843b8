"""DeleteGroups, OffsetDelete, TxnOffsetCommit, OffsetCommit and the share groups' initialization state (the share
coordinators' answers, AlterShareGroupOffsets) change the groups only through the records they return (issue 34 item 3):
each computes its records from the state without changing it, then applies them by the path replay takes
(`Groups.apply`), as Kafka's coordinator replays a CoordinatorResult's records when it writes them. So (a) the state
after a command is the state a fresh replay of the log plus the command's records gives, and (b) a command whose records
are taken back (`Groups.revert`: their append failed) leaves the state as it was, with no reload from the log. Pure
core; the shell's side is in test_group_coordinator_append_failure.py."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.group_coordinator.groups import Groups
from actors.group_coordinator.streams_topology import Subtopology, Topology
from tests.unit.test_groups_namespace import TOPICS, Harness, topic_id

PID = 7
ORDERS, PAYMENTS = topic_id("orders"), topic_id("payments")


def world() -> Harness:
    """Groups of every type, busy and idle, with committed and pending offsets; `h.log` is their log."""
    h = Harness()
    h.classic_member("busy-classic")
    member, generation = h.classic_member("idle-classic")
    h.commit("idle-classic", member, generation, partitions=(("orders", 0, 10), ("orders", 1, 11), ("payments", 0, 3)))
    h.leave("idle-classic", member)
    h.commit("simple", partitions=(("orders", 0, 5), ("old", 2, 9)))
    h.cgh("busy-consumer", "m1", 0)
    h.commit("busy-consumer", "m1", 2, partitions=(("orders", 0, 1), ("payments", 1, 2)))
    h.cgh("idle-consumer", "m2", 0)
    h.commit("idle-consumer", "m2", 2)
    h.cgh("idle-consumer", "m2", -1)
    h.share_member("busy-share")
    h.share_member("idle-share", "s2")
    result, records = h.groups.share.share_group_heartbeat("idle-share", "s2", -1, now_ms=h.now_ms, topics=TOPICS)
    assert result.error_code == 0
    h.log += records
    stepped = h.groups.streams_group_heartbeat(
        "app", "t1", 0, topics=TOPICS, now_ms=h.now_ms, rebalance_timeout_ms=1000, topology=_topology(),
        active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id="p")
    result, records = stepped.response, stepped.records
    assert result.error_code == 0
    h.log += records
    h.log += h.groups.streams_group_heartbeat("app", "t1", -1, topics=TOPICS, now_ms=h.now_ms).records
    txn = h.groups.commit_transactional_offsets("simple", PID, "", None, -1, [("orders", 1, 40, -1, "")],
                                                now_ms=h.now_ms)
    assert txn.response == [0]
    h.log += [(k, v, PID) for k, v in txn.records]
    h.groups.settle()  # everything above is in the log
    return h


def _topology():
    return Topology(0, (Subtopology("0", ("orders",)),))


COMMANDS = {
    "delete groups of every type": lambda g: g.delete_groups(
        ["idle-classic", "simple", "idle-consumer", "app", "idle-share", "busy-classic", "busy-consumer",
         "busy-share", "nope", "", "simple"], now_ms=1),
    "offset delete": lambda g: g.delete_offsets("idle-classic", [("orders", 0), ("payments", 0), ("gone", 0)]),
    "offset delete of a pending offset": lambda g: g.delete_offsets("simple", [("orders", 1)]),
    "offset delete refused for subscribed topics": lambda g: g.delete_offsets(
        "busy-consumer", [("orders", 0), ("payments", 1)]),
    "txn offset commit to a simple group": lambda g: g.commit_transactional_offsets(
        "simple", PID, "", None, -1, [("orders", 0, 50, -1, "m"), ("payments", 2, 8, -1, "")], now_ms=1),
    "txn offset commit creating a simple group": lambda g: g.commit_transactional_offsets(
        "txn-new", PID + 1, "", None, -1, [("orders", 0, 1, -1, "")], now_ms=1),
    "offset commit creating a simple group": lambda g: g.commit_offsets(
        "new", "", None, -1, [("orders", 2, 3, -1, "")], api_version=9, now_ms=1),
    "share-partitions initialized or not": lambda g: g.share_initialized(
        "busy-share", [(ORDERS, 0), (ORDERS, 1), (ORDERS, 0)], [(ORDERS, 2), (PAYMENTS, 0)], now_ms=1),
    "share offsets altered": lambda g: g.share_offsets_altered("idle-share", {(PAYMENTS, 1): "payments",
                                                                               (ORDERS, 0): "orders"}),
    "share offsets altered creating a group": lambda g: g.share_offsets_altered("new-share",
                                                                                {(ORDERS, 2): "orders"}),
}
PRODUCER = {"txn offset commit to a simple group": PID, "txn offset commit creating a simple group": PID + 1}


def _log_entries(h: Harness, records, producer_id=-1):
    return [(e if len(e) == 3 else (*e, -1)) for e in h.log] + [(k, v, producer_id) for k, v in records]


def persisted(g: Groups) -> tuple:
    """What a replay must rebuild: every live record, the pending transactional offsets, every group's type."""
    types = {group: kind for group, _, kind, _ in g.list_groups()}
    pending = {pid: g.offsets.pending(pid) for pid in sorted(g.offsets.open_transactions())}
    return sorted(g.live_records(), key=repr), pending, types


def observed(g: Groups) -> tuple:
    """Everything a client can see of the groups, read without changing anything (unlike `live_records`)."""
    groups = g.list_groups()
    return (groups,
            {group: (g.offsets.fetch_stable(group, None), sorted(g.offsets.open_transactions(group)))
             for group in sorted(g.offsets.groups())},
            {pid: g.offsets.pending(pid) for pid in sorted(g.offsets.open_transactions())},
            g.consumer.persisted_state(), g.streams.persisted_state(),
            {group: g.share.share_partitions(group) for group, _, kind, _ in groups if kind == "share"},
            g.share.persisted_state(),
            [g.describe_classic(group) for group, _, kind, _ in groups if kind == "classic"],
            g.describe_consumer([group for group, _, kind, _ in groups if kind == "consumer"], TOPICS),
            g.describe_streams([group for group, _, kind, _ in groups if kind == "streams"]))


@pytest.mark.parametrize("name", COMMANDS)
def test_the_state_after_a_command_is_what_replaying_its_records_gives(name):
    h = world()
    result = COMMANDS[name](h.groups)
    fresh = Groups({"group.initial.rebalance.delay.ms": 0})
    for key, value, producer_id in _log_entries(h, result.records, PRODUCER.get(name, -1)):
        fresh.replay(key, value, 0, producer_id)
    fresh.finish_replay(0)
    assert persisted(h.groups) == persisted(fresh)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_whose_records_are_taken_back_leaves_the_state_as_it_was(name):
    h = world()
    before = observed(h.groups)
    mark = h.groups.changes_mark()
    result = COMMANDS[name](h.groups)
    changed = observed(h.groups) != before
    assert h.groups.revert(mark)
    assert observed(h.groups) == before
    assert changed == bool(result.records) or name == "offset commit creating a simple group"


def test_computing_the_records_changes_nothing():
    h = world()
    before = observed(h.groups)
    for group in ("idle-classic", "simple", "idle-consumer", "app", "idle-share", "busy-classic"):
        h.groups._delete_group(group)
    h.groups._offset_delete("idle-classic", [("orders", 0)])
    h.groups._transactional_offset_commit("txn-new", "", None, -1, [("orders", 0, 1, -1, "")], now_ms=1)
    h.groups._offset_commit("new", "", None, -1, [("orders", 0, 1, -1, "")], api_version=9, now_ms=1)
    assert observed(h.groups) == before


def test_a_revert_refuses_once_the_groups_changed_otherwise():
    """A heartbeat (or a join, a timer) changes groups during its call, not through records: the changes applied
    before it can no longer be taken back alone, and the shell rebuilds the shard from the log instead."""
    h = world()
    mark = h.groups.changes_mark()
    assert h.groups.delete_groups(["idle-consumer"]).response == [("idle-consumer", 0, None)]
    h.cgh("busy-consumer", "m1", 2)
    assert not h.groups.revert(mark)
    assert h.groups.group_type("idle-consumer") is None, "a refused revert changes nothing"
    h.groups.settle()
    mark = h.groups.changes_mark()
    h.cgh("busy-consumer", "m1", 2)  # (before the command: its changes stay revertable)
    assert h.groups.delete_groups(["idle-classic"]).response == [("idle-classic", 0, None)]
    assert h.groups.revert(mark) and h.groups.group_type("idle-classic") == "classic"


def test_a_later_command_is_taken_back_first():
    """Two commands applied, both taken back (their appends failed together): newest first, to the first's mark."""
    h = world()
    before = observed(h.groups)
    mark = h.groups.changes_mark()
    h.groups.delete_offsets("idle-classic", [("orders", 0)])
    second = h.groups.changes_mark()
    h.groups.delete_groups(["idle-classic"])
    assert h.groups.group_type("idle-classic") is None
    assert h.groups.revert(second)
    assert h.groups.group_type("idle-classic") == "classic" and h.committed("idle-classic") is None
    assert h.groups.revert(mark) and observed(h.groups) == before


def test_share_partitions_still_initializing_keep_when_they_started():
    """Replaying the initialization record keeps when this shard started initializing the partitions still
    initializing: the next heartbeat does not ask to initialize them again before the retry interval."""
    h = world()
    [member] = h.groups.share.describe(["busy-share"], TOPICS)[0].members
    first = h.groups.share.share_group_heartbeat("busy-share", "s1", member.member_epoch, now_ms=1, topics=TOPICS)[0]
    assert first.error_code == 0 and first.initialize == []
    h.groups.share_initialized("busy-share", [(ORDERS, 0)], [], now_ms=2)
    again = h.groups.share.share_group_heartbeat("busy-share", "s1", first.member_epoch, now_ms=3, topics=TOPICS)[0]
    assert again.error_code == 0 and again.initialize == []
    assert h.groups.share.share_partitions("busy-share") == sorted(
        [(ORDERS, 0), (ORDERS, 1), (ORDERS, 2)], key=lambda tp: (tp[0].bytes, tp[1]))


GROUPS = ["idle-classic", "simple", "idle-consumer", "busy-consumer", "app", "idle-share", "busy-share", "fresh"]
TPS = [("orders", 0), ("orders", 1), ("payments", 0)]
OPS = st.lists(st.tuples(st.sampled_from(["commit", "txn", "offset-delete", "delete", "alter-share", "marker",
                                          "heartbeat"]),
                         st.sampled_from(GROUPS), st.sampled_from(TPS), st.sampled_from([PID, PID + 1]),
                         st.sampled_from(["appended", "failed", "failed after a heartbeat"])), max_size=30)


def _command(g: Groups, op: str, group: str, tp, pid: int, now_ms: int):
    topic, partition = tp
    if op == "commit":
        return g.commit_offsets(group, "", None, -1, [(topic, partition, now_ms, -1, "")], api_version=9,
                                now_ms=now_ms), -1
    if op == "txn":
        return g.commit_transactional_offsets(group, pid, "", None, -1, [(topic, partition, now_ms, -1, "")],
                                              now_ms=now_ms), pid
    if op == "offset-delete":
        return g.delete_offsets(group, [tp]), -1
    if op == "delete":
        return g.delete_groups([group], now_ms), -1
    return g.share_offsets_altered(group, {(topic_id(topic), partition): topic}, now_ms), -1


def _join(g: Groups, group: str, now_ms: int) -> list:
    """A KIP-848 member joins `group` (changing the groups during the call); its records."""
    result = g.consumer_group_heartbeat(group, f"hb-{now_ms}", 0, topics=TOPICS, now_ms=0, instance_id=None,
                                        rack_id=None, rebalance_timeout_ms=30000, subscribed_topic_names=["orders"],
                                        subscribed_topic_regex=None, server_assignor=None, owned_partitions=[],
                                        client_id="c", client_host="/h", api_version=1)
    return [(k, v, -1) for k, v in result.records]


def _rebuilt(log) -> Groups:
    fresh = Groups({"group.initial.rebalance.delay.ms": 0})
    for entry in log:
        if entry[0] == "marker":
            fresh.complete_transaction(entry[1], entry[2])
        else:
            fresh.replay(*entry[:2], 0, entry[2])
    fresh.finish_replay(0)
    return fresh


def _kept(g: Groups) -> tuple:
    """What the log keeps: the persisted records, pending offsets, and the type of every group that has a record or
    offsets (a simple group whose offsets are gone is in memory only, until the retention timer drops it)."""
    records, pending, types = persisted(g)
    return records, pending, {group: kind for group, kind in types.items()
                              if kind != "classic" or g.offsets.has_offsets(group) or g.classic.protocol_type(group)}


@settings(max_examples=120, deadline=None)
@given(OPS)
def test_random_commands_appended_or_taken_back_keep_the_state_what_the_log_gives(ops):
    """Random OffsetCommit / TxnOffsetCommit / OffsetDelete / DeleteGroups / AlterShareGroupOffsets, transaction
    markers and heartbeats; each command's append succeeds or fails. A failed command is taken back when nothing
    changed the groups otherwise meanwhile, else (a heartbeat ran) revert refuses and the shard is rebuilt from the
    log, as the shell does (a command that changed offsets only is still taken back: heartbeats change groups, not
    offsets). After every step the state is what replaying the log gives.

    Not modelled: appends queued behind a failed one (DeleteGroups of an empty group, then a member joining the id
    as a new consumer group, while the tombstone's append is in flight). The coordinator log fails them with it, as
    Kafka does, and the shell rebuilds the shard (tests/unit/test_txn_offset_commits.py); before, the log could hold
    both the old group and the new one."""
    h = world()
    g, log = h.groups, _log_entries(h, [])
    for now_ms, (op, group, tp, pid, outcome) in enumerate(ops, start=1):
        if op == "marker":
            log.append(("marker", pid, now_ms % 2 == 0))
            g.complete_transaction(pid, now_ms % 2 == 0)
            g.settle()
            continue
        if op == "heartbeat":
            log += _join(g, group, now_ms)
            g.settle()
            continue
        before, mark = observed(g), g.changes_mark()
        result, producer_id = _command(g, op, group, tp, pid, now_ms)
        if outcome == "appended":
            log += [(k, v, producer_id) for k, v in result.records]
            g.settle()
        elif outcome == "failed":
            assert g.revert(mark)
            assert observed(g) == before
            g.settle()
        else:
            # a heartbeat lands while the command's records wait for the log; its records go in the same append
            # and fail with them, which makes the shell reload (had its own append succeeded after the command's
            # failed, the log could hold a group the state never had: see the docstring)
            heartbeat_records = _join(g, group, now_ms)
            if g.revert(mark) and not heartbeat_records:  # (a command that changed offsets only: heartbeats
                g.settle()                                #  change groups, not offsets)
            else:
                g = _rebuilt(log)  # the shell reloads
        assert _kept(g) == _kept(_rebuilt(log)), (op, group, tp, outcome)


@pytest.mark.parametrize("heartbeat", ["consumer", "streams", "share"])
def test_the_heartbeats_answer_a_coordinator_result_and_change_groups_during_the_call(heartbeat):
    """ConsumerGroupHeartbeat, StreamsGroupHeartbeat and ShareGroupHeartbeat give their records and answer in one
    CoordinatorResult; they still change groups during the call (members are in memory only), so changes applied
    before them can no longer be taken back alone."""
    h = world()
    mark = h.groups.changes_mark()
    assert h.groups.delete_groups(["idle-classic"]).response == [("idle-classic", 0, None)]
    if heartbeat == "consumer":
        result = h.groups.consumer_group_heartbeat(
            "new-consumer", "n1", 0, topics=TOPICS, now_ms=1, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=["orders"], subscribed_topic_regex=None,
            server_assignor=None, owned_partitions=[], client_id="c", client_host="/h", api_version=1)
    elif heartbeat == "streams":
        result = h.groups.streams_group_heartbeat(
            "new-app", "n1", 0, topics=TOPICS, now_ms=1, rebalance_timeout_ms=1000, topology=_topology(),
            active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id="p")
    else:
        result = h.groups.share_group_heartbeat("new-share", "n1", 0, subscribed_topic_names=["orders"], now_ms=1,
                                                topics=TOPICS)
    assert result.response.error_code == 0 and result.response.member_epoch > 0 and result.records
    assert h.groups.group_type(f"new-{'app' if heartbeat == 'streams' else heartbeat}") == heartbeat
    assert not h.groups.revert(mark)
