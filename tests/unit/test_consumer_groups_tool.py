"""`kray consumer-groups` without a broker: argument checks, topic specs, the ConsumerProtocol assignment
decoder, the reset plan, the tables, and whole commands against a fake broker that answers through our codec."""
import argparse
import struct

import pytest

from cluster.tools import consumer_groups as cg
from cluster.tools.consumer_groups import GroupDescription, Member
from protocol import messages as m
from protocol.errors import ErrorCode


def parse(*argv):
    parser = argparse.ArgumentParser()
    cg.add_parser(parser.add_subparsers())
    return parser.parse_args(["consumer-groups", *argv])


# ---- arguments ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["--list"],
    ["--list", "--state"],
    ["--list", "--state", "Stable,empty"],
    ["--describe", "--group", "g"],
    ["--describe", "--group", "g", "--group", "h", "--members", "--verbose"],
    ["--describe", "--all-groups", "--state"],
    ["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"],
    ["--reset-offsets", "--group", "g", "--topic", "t:0,2", "--topic", "u", "--shift-by", "-2", "--execute"],
    ["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "2024-05-01T12:00:00.000", "--dry-run"],
    ["--reset-offsets", "--all-groups", "--all-topics", "--to-current"],
    ["--delete-offsets", "--group", "g", "--topic", "t:1"],
    ["--delete", "--group", "g", "--group", "h"],
    ["--delete", "--all-groups"],
])
def test_good_arguments(argv):
    assert cg.check_args(parse(*argv)) is None


@pytest.mark.parametrize("argv, says", [
    (["--describe"], "--describe needs --group GROUP"),
    (["--describe", "--group", "g", "--all-groups"], "or --all-groups"),
    (["--delete"], "--delete needs --group"),
    (["--list", "--group", "g"], "--list takes no --group"),
    (["--list", "--members"], "go with --describe"),
    (["--list", "--state", "Sleeping"], "unknown state(s) sleeping"),
    (["--describe", "--group", "g", "--state", "Stable"], "takes no value"),
    (["--describe", "--group", "g", "--to-earliest"], "go with --reset-offsets"),
    (["--describe", "--group", "g", "--execute"], "go with --reset-offsets"),
    (["--describe", "--group", "g", "--topic", "t"], "--topic goes with"),
    (["--delete", "--group", "g", "--state"], "--state goes with"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "--topic TOPIC[:P,P] (repeatable) or --all-topics"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--all-topics", "--to-earliest"], "or --all-topics"),
    (["--reset-offsets", "--group", "g", "--topic", "t"], "needs one of --to-earliest"),
    (["--reset-offsets", "--group", "g", "--topic", "t:a", "--to-latest"], "partitions must be numbers"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"], "is not YYYY-MM-DDTHH"),
    (["--delete-offsets", "--group", "g"], "--delete-offsets needs --topic"),
    (["--delete-offsets", "--group", "g", "--group", "h", "--topic", "t"], "exactly one --group"),
    (["--delete-offsets", "--all-groups", "--topic", "t"], "exactly one --group"),
])
def test_bad_arguments_say_what_to_do(argv, says):
    problem = cg.check_args(parse(*argv))
    assert problem is not None and says in problem, problem


def test_argparse_refuses_two_actions_or_two_reset_specs():
    with pytest.raises(SystemExit):
        parse("--list", "--describe")
    with pytest.raises(SystemExit):
        parse("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest")
    with pytest.raises(SystemExit):
        parse("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute")


def test_run_fails_before_connecting_on_bad_arguments(capsys):
    assert cg.run(parse("--describe", "--bootstrap-server", "127.0.0.1:1")) == 1
    assert "needs --group" in capsys.readouterr().err


def test_topic_specs():
    assert cg.parse_topic_spec("orders") == ("orders", None)
    assert cg.parse_topic_spec("orders:2,0,2") == ("orders", [0, 2])
    for bad in (":0", "orders:", "orders:x", "orders:-1"):
        with pytest.raises(ValueError):
            cg.parse_topic_spec(bad)


def test_datetimes_are_utc_unless_they_say_otherwise():
    assert cg.parse_datetime("1970-01-01T00:00:01.500") == 1500
    assert cg.parse_datetime("1970-01-01T01:00:00.000+01:00") == 0
    assert cg.parse_datetime("2024-05-01T12:00:00Z") == 1714564800000


def test_states_and_reset_spec():
    assert cg.parse_states("Stable, EMPTY") == {"stable", "empty"}
    assert cg.reset_spec(parse("--reset-offsets", "--group", "g", "--all-topics", "--shift-by", "-3")) == ("shift", -3)
    assert cg.reset_spec(parse("--reset-offsets", "--group", "g", "--all-topics", "--to-offset", "7")) == ("offset", 7)
    assert cg.reset_spec(parse("--reset-offsets", "--group", "g", "--all-topics", "--to-current")) == ("current", None)
    assert cg.reset_spec(parse("--reset-offsets", "--group", "g", "--all-topics", "--to-datetime",
                               "1970-01-01T00:00:02.000")) == ("datetime", 2000)


# ---- the ConsumerProtocol assignment ---------------------------------------------------------------------------

def test_assignment_roundtrip_and_kafka_layout():
    data = cg.encode_assignment({"orders": [2, 0], "x": [1]}, b"ud")
    # int16 version, int32 topic count, (int16 name length, name, int32 count, int32s)..., int32 length + user data
    assert data == (b"\x00\x00" b"\x00\x00\x00\x02" b"\x00\x06orders" b"\x00\x00\x00\x02" b"\x00\x00\x00\x02"
                    b"\x00\x00\x00\x00" b"\x00\x01x" b"\x00\x00\x00\x01" b"\x00\x00\x00\x01" b"\x00\x00\x00\x02ud")
    a = cg.decode_assignment(data)
    assert a == cg.Assignment(0, {"orders": [0, 2], "x": [1]}, b"ud")
    assert cg.decode_assignment(cg.encode_assignment({"t": [0]}, None, version=3)).user_data is None


def test_assignment_from_kafka_python_encoder():
    """An independent encoder of the same format: kafka-python's ConsumerProtocolMemberAssignment."""
    consumer_protocol = pytest.importorskip("kafka.protocol.old.consumer_protocol")
    encoded = consumer_protocol.ConsumerProtocolMemberAssignment_v0(
        0, [("orders", [0, 2]), ("x", [1])], b"ud").encode()
    assert cg.decode_assignment(encoded) == cg.Assignment(0, {"orders": [0, 2], "x": [1]}, b"ud")
    assert cg.decode_assignment(consumer_protocol.ConsumerProtocolMemberAssignment_v0(0, [], None).encode()) == \
        cg.Assignment(0, {}, None)


def test_assignment_edge_cases():
    assert cg.decode_assignment(b"") == cg.Assignment(0, {}, None), "a member mid-rebalance has no assignment yet"
    no_user_data_field = struct.pack(">hi", 1, 1) + b"\x00\x01t" + struct.pack(">ii", 1, 4)
    assert cg.decode_assignment(no_user_data_field).partitions == {"t": [4]}
    later_version = cg.encode_assignment({"t": [1]}, b"", version=5) + b"\x00\x00extra"
    assert cg.decode_assignment(later_version) == cg.Assignment(5, {"t": [1]}, b"")
    for broken in (b"\x00", cg.encode_assignment({"orders": [0, 1]})[:12], struct.pack(">hi", 0, 1) + b"\x00\x09ab"):
        with pytest.raises(ValueError, match="ConsumerProtocol"):
            cg.decode_assignment(broken)


# ---- the reset plan ----------------------------------------------------------------------------------------------

T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)
START = {T0: 0, T1: 10, T2: 5}
END = {T0: 100, T1: 20, T2: 5}
COMMITTED = {T0: 40, T1: 15}


def plan(spec, by_time=None, committed=COMMITTED):
    return cg.plan_reset(spec, [T2, T0, T1], committed, START, END, by_time)


def test_reset_to_earliest_latest_and_current():
    assert plan(("earliest", None)) == ({T0: 0, T1: 10, T2: 5}, [])
    assert plan(("latest", None)) == ({T0: 100, T1: 20, T2: 5}, [])
    assert plan(("current", None)) == ({T0: 40, T1: 15, T2: 5}, []), "nothing committed on t-2: its log end"


def test_reset_to_offset_is_clamped_with_warnings():
    offsets, warnings = plan(("offset", 12))
    assert offsets == {T0: 12, T1: 12, T2: 5}
    assert warnings == ["New offset (12) is higher than latest offset for topic partition t-2. Value will be set to 5"]
    offsets, warnings = plan(("offset", 3))
    assert offsets == {T0: 3, T1: 10, T2: 5} and "lower than earliest offset for topic partition t-1" in warnings[0]


def test_shift_by_moves_committed_offsets_within_the_log():
    offsets, warnings = cg.plan_reset(("shift", -10), [T0, T1], COMMITTED, START, END)
    assert offsets == {T0: 30, T1: 10} and len(warnings) == 1
    assert cg.plan_reset(("shift", 70), [T0], COMMITTED, START, END)[0] == {T0: 100}
    with pytest.raises(ValueError, match="t-2 has no committed offset to shift from"):
        plan(("shift", 1))


def test_to_datetime_falls_back_to_the_log_end_where_no_record_is_that_recent():
    assert plan(("datetime", 1000), by_time={T0: 60, T1: -1, T2: -1}) == ({T0: 60, T1: 20, T2: 5}, [])


def test_select_partitions():
    assert cg.select_partitions([("t", None), ("u", [1])], {"t": 2, "u": 3}) == [("t", 0), ("t", 1), ("u", 1)]
    with pytest.raises(ValueError, match="topic u has no partition 3 \\(it has 3: 0-2\\)"):
        cg.select_partitions([("u", [3])], {"u": 3})


def test_reset_refused_while_the_group_consumes():
    assert cg.reset_refusal("g", None) is None, "a group that does not exist yet may be given offsets"
    assert cg.reset_refusal("g", "Empty") is None and cg.reset_refusal("g", "Dead") is None
    assert cg.reset_refusal("g", "Stable").startswith(
        "Assignments can only be reset if the group 'g' is inactive, but the current state is Stable.")


# ---- tables ------------------------------------------------------------------------------------------------------

GROUP = GroupDescription("g", "Stable", "range", [
    Member("m-2", "c2", "/10.0.0.2", {"t": [1]}),
    Member("m-1", "c1", "/10.0.0.1", {"t": [0], "u": [0, 1]}),
    Member("m-3", "c3", "/10.0.0.3", {}),
])


def test_offsets_rows_like_kafka():
    rows = cg.offsets_rows(GROUP, {("t", 0): 5, ("t", 2): 7, ("u", 0): 1}, {("t", 0): 9, ("t", 1): 4, ("t", 2): 7})
    assert rows == [
        ["g", "t", 0, 5, 9, 4, "m-1", "/10.0.0.1", "c1"],
        ["g", "t", 1, None, 4, None, "m-2", "/10.0.0.2", "c2"],
        ["g", "t", 2, 7, 7, 0, None, None, None],
        ["g", "u", 0, 1, None, None, "m-1", "/10.0.0.1", "c1"],
        ["g", "u", 1, None, None, None, "m-1", "/10.0.0.1", "c1"],
        ["g", None, None, None, None, None, "m-3", "/10.0.0.3", "c3"],
    ]
    text = cg.table(cg.OFFSETS_HEADER, rows[:3])
    assert text.splitlines() == [
        "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID",
        "g\tt\t0\t5\t9\t4\tm-1\t/10.0.0.1\tc1",
        "g\tt\t1\t-\t4\t-\tm-2\t/10.0.0.2\tc2",
        "g\tt\t2\t7\t7\t0\t-\t-\t-",
    ]


def test_members_and_state_rows():
    assert cg.members_rows(GROUP, verbose=False) == [
        ["g", "m-1", "/10.0.0.1", "c1", 3], ["g", "m-2", "/10.0.0.2", "c2", 1], ["g", "m-3", "/10.0.0.3", "c3", 0]]
    assert [r[-1] for r in cg.members_rows(GROUP, verbose=True)] == ["t(0),u(0,1)", "t(1)", "-"]
    assert cg.state_row(GROUP, ("127.0.0.1", 9092, 1)) == ["g", "127.0.0.1:9092 (1)", "range", "Stable", 3]
    assert cg.state_row(GroupDescription("e", "Empty", ""), ("h", 1, 2))[2] == "-"


def test_member_state_notes():
    assert cg.member_state_note("g", "Stable", 2) == (None, True)
    assert cg.member_state_note("g", "Empty", 2) == ("Consumer group 'g' has no active members.", True)
    assert cg.member_state_note("g", "Empty", 0)[1] is False
    assert cg.member_state_note("g", "PreparingRebalance", 1)[0] == "Warning: Consumer group 'g' is rebalancing."
    assert cg.member_state_note("g", "Dead", 0) == ("Consumer group 'g' does not exist.", False)


def test_listed_consumer_groups_keeps_consumer_groups_only():
    L = m.ListGroupsResponse.ListedGroup
    groups = [L(group_id="classic", protocol_type="consumer", group_state="Stable", group_type="classic"),
              L(group_id="offsets-only", protocol_type="", group_state="Empty", group_type="classic"),
              L(group_id="new", protocol_type="consumer", group_state="Reconciling", group_type="consumer"),
              L(group_id="connect", protocol_type="connect", group_state="Stable", group_type="classic"),
              L(group_id="queue", protocol_type="share", group_state="Stable", group_type="share")]
    assert cg.listed_consumer_groups(groups, 5, None) == {
        "classic": "Stable", "offsets-only": "Empty", "new": "Reconciling"}
    assert cg.listed_consumer_groups(groups, 5, {"stable", "empty"}) == {"classic": "Stable", "offsets-only": "Empty"}
    assert cg.listed_consumer_groups(groups, 3, None) == {"classic": "", "offsets-only": "", "new": ""}


# ---- whole commands against a fake broker ----------------------------------------------------------------------

class FakeBroker:
    """One broker (node 1) that answers through our codec: requests are encoded at the version the tool picks
    and decoded again, responses likewise, so a field missing in that version shows up here."""

    def __init__(self, *, consumer_group_describe=True, describe_state="Empty", members=(), committed=None,
                 logs=None, by_time=None, offset_fetch_max=9, offset_fetch_error=0):
        self.versions = {m.ApiVersionsRequest.API_KEY: (0, 3), m.MetadataRequest.API_KEY: (0, 12),
                         m.FindCoordinatorRequest.API_KEY: (0, 6), m.ListOffsetsRequest.API_KEY: (1, 9),
                         m.OffsetFetchRequest.API_KEY: (1, offset_fetch_max), m.OffsetCommitRequest.API_KEY: (2, 9),
                         m.DescribeGroupsRequest.API_KEY: (0, 6), m.ListGroupsRequest.API_KEY: (0, 5),
                         m.DeleteGroupsRequest.API_KEY: (0, 2), m.OffsetDeleteRequest.API_KEY: (0, 0)}
        if consumer_group_describe:
            self.versions[m.ConsumerGroupDescribeRequest.API_KEY] = (0, 1)
        self.describe_state = describe_state
        self.members = list(members)
        self.committed = dict(committed or {})
        self.logs = logs or {"t": [(0, 10), (2, 8)]}  # topic -> [(log start, log end)] per partition
        self.by_time = by_time or {}
        self.offset_fetch_error = offset_fetch_error
        self.requests = []

    def connect(self, bootstrap, client_id="x"):
        broker = self

        class Conn:
            address = ("127.0.0.1", 9092)
            versions = broker.versions

            def version_for(self, key):
                return self.versions[key][1]

            def send(self, request, version=None):
                version = self.version_for(request.API_KEY) if version is None else version
                request = type(request).decode(request.encode(version), version)
                broker.requests.append((type(request).__name__, version, request))
                response = getattr(broker, type(request).__name__)(request, version)
                return type(response).decode(response.encode(version), version)

            def close(self):
                pass

        return Conn()

    def MetadataRequest(self, r, v):
        R = m.MetadataResponse
        names = list(self.logs) if not r.topics else [t.name for t in r.topics]
        return R(brokers=[R.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092)], topics=[
            R.MetadataResponseTopic(name=n, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) if n not in self.logs else
            R.MetadataResponseTopic(name=n, partitions=[R.MetadataResponsePartition(partition_index=i, leader_id=1)
                                                        for i in range(len(self.logs[n]))]) for n in names])

    def FindCoordinatorRequest(self, r, v):
        R = m.FindCoordinatorResponse
        return R(coordinators=[R.Coordinator(key=r.coordinator_keys[0], node_id=1, host="127.0.0.1", port=9092)])

    def ConsumerGroupDescribeRequest(self, r, v):
        R = m.ConsumerGroupDescribeResponse
        return R(groups=[R.DescribedGroup(group_id=g, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                          error_message=f"Group {g} is not a consumer group.") for g in r.group_ids])

    def DescribeGroupsRequest(self, r, v):
        R = m.DescribeGroupsResponse
        if self.describe_state == "missing":
            return R(groups=[R.DescribedGroup(group_id=r.groups[0], error_code=ErrorCode.GROUP_ID_NOT_FOUND)])
        return R(groups=[R.DescribedGroup(
            group_id=r.groups[0], group_state=self.describe_state, protocol_type="consumer" if self.members else "",
            protocol_data="range" if self.members else "", members=[R.DescribedGroupMember(
                member_id=mid, client_id="cli", client_host="/127.0.0.1",
                member_assignment=cg.encode_assignment(assignment)) for mid, assignment in self.members])])

    def OffsetFetchRequest(self, r, v):
        R = m.OffsetFetchResponse
        by_topic = {}
        for (t, p), o in sorted(self.committed.items()):
            by_topic.setdefault(t, []).append((p, o))
        if v >= 8:
            topics = [R.OffsetFetchResponseTopics(name=t, partitions=[R.OffsetFetchResponsePartitions(
                partition_index=p, committed_offset=o, metadata="") for p, o in ps]) for t, ps in by_topic.items()]
            return R(groups=[R.OffsetFetchResponseGroup(group_id=r.groups[0].group_id,
                                                        error_code=self.offset_fetch_error, topics=topics)])
        return R(topics=[R.OffsetFetchResponseTopic(name=t, partitions=[R.OffsetFetchResponsePartition(
            partition_index=p, committed_offset=o, metadata="") for p, o in ps]) for t, ps in by_topic.items()])

    def ListOffsetsRequest(self, r, v):
        R = m.ListOffsetsResponse

        def offset(t, p, ts):
            start, end = self.logs[t][p]
            return start if ts == cg.EARLIEST else end if ts == cg.LATEST else self.by_time.get((t, p), -1)
        return R(topics=[R.ListOffsetsTopicResponse(name=t.name, partitions=[R.ListOffsetsPartitionResponse(
            partition_index=p.partition_index, offset=offset(t.name, p.partition_index, p.timestamp))
            for p in t.partitions]) for t in r.topics])

    def OffsetCommitRequest(self, r, v):
        R = m.OffsetCommitResponse
        for t in r.topics:
            for p in t.partitions:
                self.committed[(t.name, p.partition_index)] = p.committed_offset
        return R(topics=[R.OffsetCommitResponseTopic(name=t.name, partitions=[R.OffsetCommitResponsePartition(
            partition_index=p.partition_index) for p in t.partitions]) for t in r.topics])

    def ListGroupsRequest(self, r, v):
        R = m.ListGroupsResponse
        return R(groups=[R.ListedGroup(group_id="g", protocol_type="consumer", group_state=self.describe_state,
                                       group_type="classic"),
                         R.ListedGroup(group_id="q", protocol_type="share", group_state="Empty", group_type="share")])

    def DeleteGroupsRequest(self, r, v):
        R = m.DeleteGroupsResponse
        code = ErrorCode.NON_EMPTY_GROUP if self.members else 0
        return R(results=[R.DeletableGroupResult(group_id=g, error_code=code) for g in r.groups_names])

    def OffsetDeleteRequest(self, r, v):
        R = m.OffsetDeleteResponse
        return R(topics=[R.OffsetDeleteResponseTopic(name=t.name, partitions=[R.OffsetDeleteResponsePartition(
            partition_index=p.partition_index, error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if self.members else 0)
            for p in t.partitions]) for t in r.topics])


@pytest.fixture
def broker(monkeypatch):
    holder = {}

    def use(**kw):
        holder["broker"] = b = FakeBroker(**kw)
        monkeypatch.setattr(cg, "KafkaConnection", b.connect)
        return b
    return use


def sent(b, name):
    return [(v, r) for n, v, r in b.requests if n == name]


def test_describe_offsets_falls_back_from_consumer_group_describe_to_describe_groups(broker, capsys):
    b = broker(describe_state="Stable", members=[("m-1", {"t": [0, 1]})], committed={("t", 0): 4})
    assert cg.run(parse("--describe", "--group", "g")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["g\tt\t0\t4\t10\t6\tm-1\t/127.0.0.1\tcli", "g\tt\t1\t-\t8\t-\tm-1\t/127.0.0.1\tcli"]
    assert [n for n, _, _ in b.requests].index("ConsumerGroupDescribeRequest") < \
        [n for n, _, _ in b.requests].index("DescribeGroupsRequest")
    ((version, fetch),) = sent(b, "OffsetFetchRequest")
    assert version == 9 and fetch.groups[0].group_id == "g" and fetch.groups[0].topics is None


def test_describe_without_consumer_group_describe_and_old_offset_fetch(broker, capsys):
    b = broker(consumer_group_describe=False, offset_fetch_max=7, committed={("t", 1): 8})
    assert cg.run(parse("--describe", "--group", "g")) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1:] == ["g\tt\t1\t8\t8\t0\t-\t-\t-"]
    assert "has no active members" in captured.err
    assert not sent(b, "ConsumerGroupDescribeRequest") and sent(b, "OffsetFetchRequest")[0][0] == 7


def test_describe_members_and_state(broker, capsys):
    broker(describe_state="Stable", members=[("m-1", {"t": [0, 1]})])
    assert cg.run(parse("--describe", "--group", "g", "--members", "--verbose")) == 0
    assert capsys.readouterr().out.splitlines()[1] == "g\tm-1\t/127.0.0.1\tcli\t2\tt(0,1)"
    assert cg.run(parse("--describe", "--group", "g", "--state")) == 0
    assert capsys.readouterr().out.splitlines()[1] == "g\t127.0.0.1:9092 (1)\trange\tStable\t1"


def test_describe_a_missing_group(broker, capsys):
    broker(describe_state="Dead")
    assert cg.run(parse("--describe", "--group", "nope")) == 1
    assert "Consumer group 'nope' does not exist." in capsys.readouterr().err


def test_list_all_groups_and_states(broker, capsys):
    b = broker(describe_state="Stable")
    assert cg.run(parse("--list")) == 0
    assert capsys.readouterr().out.split() == ["g"], "the share group is not listed"
    assert sent(b, "ListGroupsRequest")[0][1].types_filter == ["consumer", "classic"]
    assert cg.run(parse("--list", "--state")) == 0
    assert capsys.readouterr().out.splitlines() == ["GROUP\tSTATE", "g\tStable"]
    assert cg.run(parse("--list", "--state", "empty")) == 0
    assert capsys.readouterr().out.splitlines() == ["GROUP\tSTATE"]


def test_reset_dry_run_changes_nothing(broker, capsys):
    b = broker(committed={("t", 0): 7})
    assert cg.run(parse("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest")) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["GROUP\tTOPIC\tPARTITION\tNEW-OFFSET", "g\tt\t0\t0", "g\tt\t1\t2"]
    assert "dry run" in captured.err and not sent(b, "OffsetCommitRequest")


def test_reset_execute_commits_as_the_admin_client(broker, capsys):
    b = broker(committed={("t", 0): 7, ("t", 1): 3})
    assert cg.run(parse("--reset-offsets", "--group", "g", "--all-topics", "--shift-by", "-5", "--execute")) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1:] == ["g\tt\t0\t2", "g\tt\t1\t2"]
    assert "lower than earliest offset for topic partition t-1" in captured.err
    ((version, commit),) = sent(b, "OffsetCommitRequest")
    assert version == 9 and commit.generation_id_or_member_epoch == -1 and commit.member_id == ""
    assert b.committed == {("t", 0): 2, ("t", 1): 2}


def test_reset_to_datetime_and_a_group_that_does_not_exist_yet(broker, capsys):
    b = broker(describe_state="missing", by_time={("t", 0): 6})
    assert cg.run(parse("--reset-offsets", "--group", "new", "--topic", "t", "--to-datetime",
                        "2024-01-01T00:00:00.000", "--execute")) == 0
    assert b.committed == {("t", 0): 6, ("t", 1): 8}, "no record that recent on t-1: its log end"


def test_reset_refused_while_members_consume(broker, capsys):
    b = broker(describe_state="Stable", members=[("m-1", {"t": [0]})])
    assert cg.run(parse("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--execute")) == 1
    assert "Assignments can only be reset if the group 'g' is inactive, but the current state is Stable." in \
        capsys.readouterr().err
    assert not sent(b, "OffsetCommitRequest")


def test_reset_names_a_missing_topic_or_partition(broker, capsys):
    broker()
    assert cg.run(parse("--reset-offsets", "--group", "g", "--topic", "nope", "--to-earliest")) == 1
    assert "topic 'nope' does not exist" in capsys.readouterr().err
    assert cg.run(parse("--reset-offsets", "--group", "g", "--topic", "t:5", "--to-earliest")) == 1
    assert "topic t has no partition 5" in capsys.readouterr().err


def test_delete_offsets_and_delete(broker, capsys):
    b = broker()
    assert cg.run(parse("--delete-offsets", "--group", "g", "--topic", "t")) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["TOPIC\tPARTITION\tSTATUS", "t\t0\tSuccessful",
                                                        "t\t1\tSuccessful"]
    assert [p.partition_index for p in sent(b, "OffsetDeleteRequest")[0][1].topics[0].partitions] == [0, 1]
    assert cg.run(parse("--delete", "--group", "g")) == 0
    assert "Deletion of requested consumer groups ('g') was successful." in capsys.readouterr().out


def test_delete_refusals(broker, capsys):
    broker(describe_state="Stable", members=[("m-1", {"t": [0]})])
    assert cg.run(parse("--delete-offsets", "--group", "g", "--topic", "t:0")) == 1
    assert "t\t0\tError: the group's consumers subscribe to this topic" in capsys.readouterr().out
    assert cg.run(parse("--delete", "--group", "g")) == 1
    assert "* Group 'g' could not be deleted due to: the group is not empty" in capsys.readouterr().err
    broker(describe_state="missing")
    assert cg.run(parse("--delete", "--group", "gone")) == 1
    assert "* Group 'gone' could not be deleted due to: it does not exist" in capsys.readouterr().err


def test_reset_of_a_share_group_id_says_it_is_not_a_consumer_group(broker, capsys):
    """Kray's one group namespace: DescribeGroups does not know a share group, OffsetFetch says GROUP_ID_NOT_FOUND."""
    b = broker(describe_state="missing", offset_fetch_error=ErrorCode.GROUP_ID_NOT_FOUND)
    assert cg.run(parse("--reset-offsets", "--group", "sq", "--topic", "t", "--to-earliest", "--execute")) == 1
    assert "group 'sq' is not a consumer group" in capsys.readouterr().err and not sent(b, "OffsetCommitRequest")
