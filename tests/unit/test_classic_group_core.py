"""Classic groups (JoinGroup / SyncGroup / Heartbeat / LeaveGroup, KIP-345 static members, KIP-394 member ids, the
initial rebalance delay, timers, offset-commit validation), checked against Kafka's GroupMetadataManager and
ClassicGroup (pure core, no Ray)."""
import pytest

from actors.group_coordinator import classic_records as crec
from actors.group_coordinator.classic import (COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE, merge,
                                              ClassicGroupConfig, ClassicGroups, SyncResult)
from actors.config_schema import ConfigError
from protocol.errors import ErrorCode

SESSION_MS = 10000
REBALANCE_MS = 20000
RANGE = [("range", b"range-meta")]


class Harness:
    """The classic groups, a manual clock, every reply given (by call id) and every record returned (the log)."""

    def __init__(self, delay_ms=0, **config):
        self.groups = ClassicGroups({"group.initial.rebalance.delay.ms": delay_ms, **config})
        self.now_ms = 0
        self.log: list = []
        self.replies: dict = {}
        self._calls = 0

    def _take(self, out):
        self.log += out.records
        for call, reply in out.response.items():
            assert call not in self.replies, f"call {call} answered twice"
            self.replies[call] = reply
        return out

    def join_call(self, member_id="", *, group="g", instance=None, protocols=RANGE, protocol_type="consumer",
                  session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS, require_known=True, api_version=9,
                  client_id="client"):
        """Send a JoinGroup; returns its call id (its answer, if any, is in `replies`)."""
        self._calls += 1
        call = self._calls
        self._take(self.groups.join(call, group, member_id, instance, protocol_type, list(protocols), session_ms,
                                    rebalance_ms, client_id=client_id, client_host="/127.0.0.1",
                                    require_known_member_id=require_known, api_version=api_version,
                                    now_ms=self.now_ms))
        return call

    def join_new(self, *, group="g", protocols=RANGE, **kw):
        """A new dynamic member: MEMBER_ID_REQUIRED, then the join with the given id. Returns (member id, call)."""
        first = self.join_call(group=group, protocols=protocols, **kw)
        r = self.replies[first]
        assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED and r.member_id, r
        return r.member_id, self.join_call(r.member_id, group=group, protocols=protocols, **kw)

    def sync_call(self, member_id, generation, assignments=(), *, group="g", instance=None, protocol_type=None,
                  protocol_name=None):
        self._calls += 1
        call = self._calls
        self._take(self.groups.sync(call, group, generation, member_id, instance, protocol_type, protocol_name,
                                    list(assignments), now_ms=self.now_ms))
        return call

    def heartbeat(self, member_id, generation, *, group="g", instance=None):
        result = self.groups.heartbeat(group, generation, member_id, instance, now_ms=self.now_ms)
        assert result.records == []  # a classic heartbeat writes nothing
        return result.response

    def leave(self, members, group="g"):
        self._calls += 1
        call = self._calls
        self._take(self.groups.leave(call, group, members, now_ms=self.now_ms))
        answer = self.replies.pop(call)
        return answer.error_code, answer.members

    def tick(self, now_ms):
        self.now_ms = now_ms
        return self._take(self.groups.tick(now_ms))

    def reply(self, call):
        return self.replies.get(call)

    def last_group_record(self, group="g"):
        key, value = [r for r in self.log if crec.record_type(r[0]) == crec.CLASSIC_GROUP_METADATA][-1]
        group_id, decoded = crec.decode_group_metadata(key, value)
        assert group_id == group
        return decoded

    def stable_group(self, n=2, **kw):
        """n dynamic members in a Stable group: ([member ids], generation); the first leads; member i gets b"a<i>"."""
        ids = []
        a, call = self.join_new(**kw)
        ids.append(a)
        gen = self.reply(call).generation_id
        for _ in range(n - 1):
            m, m_call = self.join_new(**kw)
            calls = [m_call] + [self.join_call(old, **kw) for old in ids]
            ids.append(m)
            gen = self.reply(m_call).generation_id
            assert all(self.reply(c).error_code == 0 and self.reply(c).generation_id == gen for c in calls)
        assignments = [(m, b"a%d" % i) for i, m in enumerate(ids)]
        syncs = [self.sync_call(ids[0], gen, assignments)] + [self.sync_call(m, gen) for m in ids[1:]]
        assert all(self.reply(c).error_code == 0 for c in syncs)
        assert self.groups.state("g") == STABLE
        return ids, gen


def consumer_subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: int16 version, int32 count, strings (int16 length + utf8)."""
    out = (0).to_bytes(2, "big", signed=True) + len(topics).to_bytes(4, "big", signed=True)
    for t in topics:
        data = t.encode()
        out += len(data).to_bytes(2, "big", signed=True) + data
    return out + (-1).to_bytes(4, "big", signed=True)  # null user data


# ---- config ----------------------------------------------------------------------------------------------------------

def test_config_from_broker_config_reads_group_settings_and_rejects_nonsense():
    c = ClassicGroupConfig.from_broker_config({"group.min.session.timeout.ms": "1000", "group.max.size": 5,
                                               "unrelated": "x"})
    assert (c.min_session_timeout_ms, c.max_session_timeout_ms, c.initial_rebalance_delay_ms, c.max_size) == \
        (1000, 1800000, 3000, 5)
    for bad in ({"group.min.session.timeout.ms": 7000, "group.max.session.timeout.ms": 6000},
                {"group.min.session.timeout.ms": 0}, {"group.initial.rebalance.delay.ms": -1},
                {"group.max.size": 0}, {"group.max.size": "many"}):
        with pytest.raises(ConfigError):
            ClassicGroupConfig.from_broker_config(bad)


# ---- JoinGroup -------------------------------------------------------------------------------------------------------

def test_kip394_member_id_required_then_join_with_the_given_id():
    h = Harness()
    first = h.join_call()
    r = h.reply(first)
    assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert r.member_id.startswith("client-"), "Kafka's member ids are the client id, a dash and a uuid"
    assert h.groups.state("g") == EMPTY and not h.groups.is_empty("g"), "the pending member holds the group"
    call = h.join_call(r.member_id)
    j = h.reply(call)
    assert (j.error_code, j.member_id, j.leader, j.generation_id) == (0, r.member_id, r.member_id, 1)
    assert (j.protocol_type, j.protocol_name) == ("consumer", "range")
    assert j.members == [(r.member_id, None, b"range-meta")], "the leader gets every member's metadata"
    assert h.groups.state("g") == COMPLETING_REBALANCE


def test_old_join_versions_are_admitted_without_member_id_round_trip():
    h = Harness()
    call = h.join_call(require_known=False, api_version=3)
    j = h.reply(call)
    assert j.error_code == 0 and j.member_id and j.generation_id == 1


def test_pending_member_id_expires_after_the_session_timeout():
    h = Harness()
    r = h.reply(h.join_call())
    h.tick(SESSION_MS)
    assert h.groups.is_empty("g")
    call = h.join_call(r.member_id)
    assert h.reply(call).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_join_with_a_member_id_to_an_unknown_group_is_unknown_member_and_creates_nothing():
    h = Harness()
    call = h.join_call("ghost")
    assert h.reply(call).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert not h.groups.has_group("g")


@pytest.mark.parametrize("session_ms", [5999, 1800001])
def test_session_timeout_outside_the_broker_bounds_is_invalid(session_ms):
    h = Harness()
    call = h.join_call(session_ms=session_ms)
    assert h.reply(call).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert not h.groups.has_group("g") and h.log == []


@pytest.mark.parametrize("group_id", ["", "x" * 256])
def test_invalid_group_id(group_id):
    h = Harness()
    assert h.reply(h.join_call(group=group_id)).error_code == ErrorCode.INVALID_GROUP_ID


@pytest.mark.parametrize("protocol_type, protocols", [("", RANGE), ("consumer", [])])
def test_first_member_needs_a_protocol_type_and_protocols(protocol_type, protocols):
    h = Harness()
    call = h.join_call(protocol_type=protocol_type, protocols=protocols)
    assert h.reply(call).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert not h.groups.has_group("g")


@pytest.mark.parametrize("protocol_type, protocols", [
    ("connect", RANGE),                         # another protocol type
    ("consumer", [("sticky", b"")]),            # no protocol in common with the members
])
def test_inconsistent_group_protocol_for_a_new_member(protocol_type, protocols):
    h = Harness()
    h.stable_group(1)
    call = h.join_call(protocol_type=protocol_type, protocols=protocols)
    r = h.reply(call)
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.groups.state("g") == STABLE, "the rejected member does not disturb the group"


def test_group_max_size_rejects_the_member_beyond_it():
    h = Harness(**{"group.max.size": 1})
    h.stable_group(1)
    call = h.join_call()
    assert h.reply(call).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.groups.state("g") == STABLE


def test_initial_rebalance_delay_holds_the_first_join_phase_and_each_join_extends_it():
    h = Harness(delay_ms=3000)
    a, a_call = h.join_new()
    assert h.reply(a_call) is None and h.groups.state("g") == PREPARING_REBALANCE
    h.tick(2000)
    assert h.reply(a_call) is None, "every member has joined, but the initial delay runs its course"
    b, b_call = h.join_new()               # at 2000: the phase now ends at 5000
    h.tick(4999)
    assert h.reply(a_call) is None and h.reply(b_call) is None
    h.tick(5000)
    ra, rb = h.reply(a_call), h.reply(b_call)
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == rb.leader == a
    assert {m for m, _, _ in ra.members} == {a, b} and rb.members == []


def test_initial_rebalance_delay_extensions_stop_at_the_rebalance_timeout():
    h = Harness(delay_ms=3000)
    a, a_call = h.join_new(rebalance_ms=5000)
    for t in (2000, 4000):
        h.now_ms = t
        h.join_new(rebalance_ms=5000)
    h.tick(4999)
    assert h.reply(a_call) is None
    h.tick(5000)
    assert h.reply(a_call).generation_id == 1 and len(h.reply(a_call).members) == 3


def test_next_deadline_reports_the_join_phase_end():
    h = Harness(delay_ms=3000)
    h.join_new()
    assert h.groups.next_deadline_ms() == 3000


def test_protocol_selection_by_votes():
    h = Harness(delay_ms=3000)
    ids = []
    for prefs in ([("range", b"A-r"), ("roundrobin", b"A-rr")],
                  [("roundrobin", b"B-rr"), ("range", b"B-r")],
                  [("roundrobin", b"C-rr"), ("range", b"C-r"), ("sticky", b"C-s")]):
        m, call = h.join_new(protocols=prefs)
        ids.append((m, call))
    h.tick(3000)
    leader = h.reply(ids[0][1])
    assert leader.protocol_name == "roundrobin", "two of three members prefer roundrobin"
    assert sorted(meta for _, _, meta in leader.members) == [b"A-rr", b"B-rr", b"C-rr"], \
        "the leader gets each member's metadata for the selected protocol"


def test_join_completes_when_all_members_rejoin_leader_gets_members_followers_none():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    a_call = h.join_call(a)   # the leader rejoins: a rebalance
    assert h.groups.state("g") == PREPARING_REBALANCE and h.reply(a_call) is None
    assert h.heartbeat(b, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    b_call = h.join_call(b)
    ra, rb = h.reply(a_call), h.reply(b_call)
    assert ra.generation_id == rb.generation_id == gen + 1
    assert ra.leader == rb.leader == a
    assert sorted(m for m, _, _ in ra.members) == sorted([a, b]) and rb.members == []
    assert h.groups.state("g") == COMPLETING_REBALANCE


def test_follower_join_with_same_metadata_in_stable_gets_current_generation_without_rebalance():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    call = h.join_call(b)
    r = h.reply(call)
    assert (r.error_code, r.generation_id, r.leader, r.members) == (0, gen, a, [])
    assert h.groups.state("g") == STABLE


def test_follower_join_with_new_metadata_in_stable_triggers_a_rebalance():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    call = h.join_call(b, protocols=[("range", b"new-subscription")])
    assert h.reply(call) is None and h.groups.state("g") == PREPARING_REBALANCE


def test_lost_join_response_in_completing_rebalance_is_answered_again():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    h.join_call(b)
    assert h.groups.state("g") == COMPLETING_REBALANCE
    records = len(h.log)
    rb = h.reply(h.join_call(b))          # the follower never saw its answer and retries
    assert (rb.error_code, rb.generation_id, rb.leader, rb.members) == (0, gen + 1, a, [])
    ra = h.reply(h.join_call(a))          # so does the leader: it needs the members again
    assert ra.generation_id == gen + 1 and len(ra.members) == 2
    assert h.groups.state("g") == COMPLETING_REBALANCE and len(h.log) == records, "no new rebalance"


def test_changed_metadata_in_completing_rebalance_starts_another_rebalance():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    h.join_call(b)
    s = h.sync_call(b, gen + 1)
    assert h.reply(s) is None
    h.join_call(b, protocols=[("range", b"changed")])
    assert h.groups.state("g") == PREPARING_REBALANCE
    assert h.reply(s).error_code == ErrorCode.REBALANCE_IN_PROGRESS, "the waiting sync is told to rejoin"


def test_join_retry_during_preparing_rebalance_replaces_the_older_call():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    first = h.join_call(a)
    second = h.join_call(a)
    assert h.reply(first).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    h.join_call(b)
    assert h.reply(second).generation_id == gen + 1


# ---- SyncGroup -------------------------------------------------------------------------------------------------------

def test_leader_sync_answers_waiting_followers_and_persists_the_assignment():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    h.join_call(b)
    gen += 1
    fb = h.sync_call(b, gen)
    assert h.reply(fb) is None, "a follower waits for the leader's assignment"
    records = len(h.log)
    fa = h.sync_call(a, gen, [(a, b"for-a"), (b, b"for-b")], protocol_type="consumer", protocol_name="range")
    assert (h.reply(fa).error_code, h.reply(fa).assignment) == (0, b"for-a")
    assert (h.reply(fb).error_code, h.reply(fb).assignment) == (0, b"for-b")
    assert (h.reply(fb).protocol_type, h.reply(fb).protocol_name) == ("consumer", "range")
    assert h.groups.state("g") == STABLE
    assert len(h.log) == records + 1
    v = h.last_group_record()
    assert v.generation == gen and v.leader == a and v.protocol == "range"
    assert {m.member_id: m.assignment for m in v.members} == {a: b"for-a", b: b"for-b"}


def test_leader_assignment_missing_a_member_gives_it_an_empty_assignment():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    h.join_call(b)
    fb = h.sync_call(b, gen + 1)
    h.sync_call(a, gen + 1, [(a, b"all")])
    assert (h.reply(fb).error_code, h.reply(fb).assignment) == (0, b"")


def test_sync_in_stable_returns_the_current_assignment():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    r = h.reply(h.sync_call(b, gen))
    assert (r.error_code, r.assignment) == (0, b"a1")


def test_sync_during_preparing_rebalance_is_rebalance_in_progress():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    assert h.reply(h.sync_call(b, gen)).error_code == ErrorCode.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("case, expected", [
    ("generation", ErrorCode.ILLEGAL_GENERATION),
    ("member", ErrorCode.UNKNOWN_MEMBER_ID),
    ("group", ErrorCode.UNKNOWN_MEMBER_ID),
    ("protocol_name", ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ("protocol_type", ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
])
def test_sync_errors(case, expected):
    h = Harness()
    (a, b), gen = h.stable_group(2)
    kw = {}
    member, generation, group = b, gen, "g"
    if case == "generation":
        generation = gen + 1
    elif case == "member":
        member = "ghost"
    elif case == "group":
        group = "other"
    elif case == "protocol_name":
        kw["protocol_name"] = "roundrobin"
    else:
        kw["protocol_type"] = "connect"
    r = h.reply(h.sync_call(member, generation, group=group, **kw))
    assert isinstance(r, SyncResult) and r.error_code == expected


def test_sync_on_an_empty_group_is_unknown_member():
    h = Harness()
    (a,), gen = h.stable_group(1)
    h.leave([(a, None)])
    assert h.groups.state("g") == EMPTY
    assert h.reply(h.sync_call(a, gen)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


# ---- Heartbeat -------------------------------------------------------------------------------------------------------

def test_heartbeat_in_each_state():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    assert h.heartbeat(b, gen) == ErrorCode.NONE                                   # Stable
    h.join_call(a)
    assert h.heartbeat(b, gen) == ErrorCode.REBALANCE_IN_PROGRESS                  # PreparingRebalance
    h.join_call(b)
    assert h.groups.state("g") == COMPLETING_REBALANCE
    assert h.heartbeat(b, gen + 1) == ErrorCode.NONE                               # CompletingRebalance
    h.leave([(a, None), (b, None)])
    assert h.groups.state("g") == EMPTY
    assert h.heartbeat(a, gen + 1) == ErrorCode.UNKNOWN_MEMBER_ID                  # Empty


def test_heartbeat_errors():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    assert h.heartbeat(b, gen - 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("ghost", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(b, gen, group="nope") == ErrorCode.UNKNOWN_MEMBER_ID


# ---- timers ----------------------------------------------------------------------------------------------------------

def test_member_that_does_not_rejoin_in_time_is_removed_at_the_join_deadline():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.now_ms = 1000
    a_call = h.join_call(a)              # the rebalance's join phase ends at 1000 + 20000
    for t in (8000, 15000):              # b stays alive but never rejoins
        h.now_ms = t
        assert h.heartbeat(b, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    h.tick(20999)
    assert h.reply(a_call) is None
    h.tick(21000)
    r = h.reply(a_call)
    assert (r.error_code, r.generation_id, r.leader) == (0, gen + 1, a)
    assert [m for m, _, _ in r.members] == [a]
    assert h.heartbeat(b, gen + 1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_leader_that_does_not_rejoin_loses_leadership_to_a_member_that_did():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    b_call = h.join_call(b, protocols=[("range", b"changed")])
    h.now_ms = 9000
    assert h.heartbeat(a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    h.tick(REBALANCE_MS)
    r = h.reply(b_call)
    assert r.leader == b and [m for m, _, _ in r.members] == [b]


def test_session_expiry_triggers_a_rebalance():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.now_ms = 6000
    assert h.heartbeat(a, gen) == 0
    h.tick(SESSION_MS - 1)
    assert h.groups.state("g") == STABLE
    h.tick(SESSION_MS)                   # b's session (last seen at 0) is over
    assert h.groups.state("g") == PREPARING_REBALANCE
    assert h.heartbeat(b, gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    r = h.reply(h.join_call(a))
    assert r.generation_id == gen + 1 and [m for m, _, _ in r.members] == [a]


def test_heartbeats_keep_a_member_alive():
    h = Harness()
    (a,), gen = h.stable_group(1)
    for t in range(5000, 60000, 5000):
        h.tick(t)
        assert h.heartbeat(a, gen) == 0
    assert h.groups.state("g") == STABLE


def test_last_member_session_expiry_empties_the_group_and_persists_it():
    h = Harness()
    (a,), gen = h.stable_group(1)
    h.tick(SESSION_MS)
    assert h.groups.state("g") == EMPTY
    v = h.last_group_record()
    assert (v.generation, v.members, v.protocol) == (gen + 1, [], None)
    assert h.groups.empty_since_ms("g") == SESSION_MS


def test_sync_deadline_removes_members_that_never_synced():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    h.join_call(b)                       # join phase over at 0: syncs are due by 0 + 20000
    for t in (8000, 16000):              # the leader heartbeats but never sends its assignment
        h.now_ms = t
        assert h.heartbeat(a, gen + 1) == 0
        if t == 8000:                    # (the follower too, so that its session lasts until its sync)
            assert h.heartbeat(b, gen + 1) == 0
    fb = h.sync_call(b, gen + 1)         # at 16000
    h.tick(REBALANCE_MS - 1)
    assert h.groups.state("g") == COMPLETING_REBALANCE and h.reply(fb) is None
    h.tick(REBALANCE_MS)
    assert h.reply(fb).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.groups.state("g") == PREPARING_REBALANCE
    assert h.heartbeat(a, gen + 1) == ErrorCode.UNKNOWN_MEMBER_ID, "the leader that never synced is gone"
    r = h.reply(h.join_call(b))
    assert r.leader == b and r.generation_id == gen + 2


def test_follower_waiting_for_a_slow_leader_gets_a_fresh_session_with_its_assignment():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    h.join_call(b)
    fb = h.sync_call(b, gen + 1)         # at 0; the session is 10 s, the leader takes 15 s to assign
    for t in (5000, 10000, 15000):
        h.now_ms = t
        assert h.heartbeat(a, gen + 1) == 0
    h.sync_call(a, gen + 1, [(a, b"x"), (b, b"y")])
    assert h.reply(fb).assignment == b"y"
    h.tick(15000)
    assert h.groups.state("g") == STABLE
    assert h.heartbeat(b, gen + 1) == 0


def test_sync_deadline_also_removes_followers_that_never_synced_after_the_leader_did():
    """Kafka's pending-sync expiration: a member that heartbeats but never sends this generation's SyncGroup is
    removed at the rebalance timeout even though the leader's SyncGroup made the group Stable."""
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join_call(a)
    h.join_call(b)
    h.sync_call(a, gen + 1, [(a, b"x"), (b, b"y")])
    assert h.groups.state("g") == STABLE
    for t in (5000, 10000, 15000):       # b keeps its session alive but never syncs
        h.now_ms = t
        assert h.heartbeat(b, gen + 1) == 0 and h.heartbeat(a, gen + 1) == 0
    h.tick(REBALANCE_MS)
    assert h.groups.state("g") == PREPARING_REBALANCE
    assert h.heartbeat(b, gen + 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(a, gen + 1) == ErrorCode.REBALANCE_IN_PROGRESS


def static_group(h, *instances, dynamic=0):
    """Static members (one per instance id), then `dynamic` dynamic ones, in a Stable group. Returns ({instance id,
    or index of a dynamic member: member id}, generation, leader); each member's assignment is b"as-<key>"."""
    ids, instance_of, calls = {}, {}, {}
    for key in list(instances) + list(range(dynamic)):
        if isinstance(key, str):
            new = h.join_call(instance=key)
        else:
            _, new = h.join_new()
        for member_id, instance in instance_of.items():   # a new member: everyone rejoins
            calls[member_id] = h.join_call(member_id, instance=instance)
        r = h.reply(new)
        assert r.error_code == 0, r
        ids[key], instance_of[r.member_id], calls[r.member_id] = r.member_id, (key if isinstance(key, str) else None), new
    replies = [h.reply(c) for c in calls.values()]
    gen, leader = replies[0].generation_id, replies[0].leader
    assert all(r.error_code == 0 and r.generation_id == gen for r in replies)
    h.sync_call(leader, gen, [(m, b"as-%s" % str(k).encode()) for k, m in ids.items()], instance=instance_of[leader])
    for member_id, instance in instance_of.items():
        if member_id != leader:
            assert h.reply(h.sync_call(member_id, gen, instance=instance)).error_code == 0
    assert h.groups.state("g") == STABLE
    return ids, gen, leader


def test_leave_group_batch_with_static_and_dynamic_members():
    h = Harness()
    ids, gen, _ = static_group(h, "i1", "i2", dynamic=1)
    d = ids[0]
    error, results = h.leave([("", "i1"),            # admin removal by instance id
                              ("not-i2s-id", "i2"),  # the instance is owned by another member id
                              (d, None),             # a dynamic member
                              ("ghost", None),       # unknown member
                              ("", "i9")])           # unknown instance
    assert error == 0
    assert [(instance, e) for _, instance, e in results] == [
        ("i1", 0), ("i2", ErrorCode.FENCED_INSTANCE_ID), (None, 0), (None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("i9", ErrorCode.UNKNOWN_MEMBER_ID)]
    assert h.groups.state("g") == PREPARING_REBALANCE
    assert [m.member_id for m in h.groups.describe("g").members] == [ids["i2"]]
    assert h.heartbeat(ids["i1"], gen, instance="i1") == ErrorCode.UNKNOWN_MEMBER_ID


def test_leave_group_by_instance_id_echoes_the_requested_identity():
    h = Harness()
    static_group(h, "i1", "i2")
    _, results = h.leave([("", "i1")])
    assert results == [("", "i1", 0)]


def test_leave_of_an_unknown_group_is_unknown_member():
    h = Harness()
    error, results = h.leave([("m", None)], group="nope")
    assert error == ErrorCode.UNKNOWN_MEMBER_ID and results == [("m", None, ErrorCode.UNKNOWN_MEMBER_ID)]


def test_leave_of_a_pending_member_forgets_its_id():
    h = Harness()
    r = h.reply(h.join_call())
    _, results = h.leave([(r.member_id, None)])
    assert results == [(r.member_id, None, 0)] and h.groups.is_empty("g")


def test_last_member_leaving_empties_the_group():
    h = Harness()
    (a,), gen = h.stable_group(1)
    h.now_ms = 777
    _, results = h.leave([(a, None)])
    assert results == [(a, None, 0)]
    assert h.groups.state("g") == EMPTY and h.groups.empty_since_ms("g") == 777
    assert h.last_group_record().members == []


def test_leave_of_the_last_missing_member_completes_the_join_phase():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    b_call = h.join_call(b, protocols=[("range", b"changed")])
    h.leave([(a, None)])                 # the leader leaves instead of rejoining
    r = h.reply(b_call)
    assert (r.generation_id, r.leader) == (gen + 1, b)
    assert h.groups.state("g") == COMPLETING_REBALANCE


def test_leave_answers_the_leaving_members_waiting_join():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    a_call = h.join_call(a)
    h.leave([(a, None)])
    assert h.reply(a_call).error_code == ErrorCode.UNKNOWN_MEMBER_ID


# ---- static members (KIP-345) ----------------------------------------------------------------------------------------

def test_static_member_joins_without_member_id_round_trip():
    h = Harness()
    r = h.reply(h.join_call(instance="i1"))
    assert r.error_code == 0 and r.generation_id == 1 and r.member_id.startswith("client-")


def test_static_follower_restart_in_stable_keeps_generation_and_assignment_without_rebalance():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    follower_instance = next(i for i, m in ids.items() if m != leader)
    old = ids[follower_instance]
    records = len(h.log)
    r = h.reply(h.join_call(instance=follower_instance))      # restarted: no member id
    assert r.error_code == 0 and r.member_id != old
    assert (r.generation_id, r.leader, r.members, r.skip_assignment) == (gen, leader, [], False)
    assert h.groups.state("g") == STABLE, "no rebalance"
    s = h.reply(h.sync_call(r.member_id, gen, instance=follower_instance))
    assert (s.error_code, s.assignment) == (0, ("as-" + follower_instance).encode())
    assert len(h.log) == records + 1, "the new member id is persisted"
    assert {m.instance_id: m.member_id for m in h.last_group_record().members}[follower_instance] == r.member_id
    # the old incarnation is fenced
    assert h.heartbeat(old, gen, instance=follower_instance) == ErrorCode.FENCED_INSTANCE_ID
    assert h.reply(h.join_call(old, instance=follower_instance)).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert h.reply(h.sync_call(old, gen, instance=follower_instance)).error_code == ErrorCode.FENCED_INSTANCE_ID


def test_static_restart_fences_the_old_members_waiting_join():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    follower_instance = next(i for i, m in ids.items() if m != leader)
    leader_instance = next(i for i in ids if i != follower_instance)
    old_call = h.join_call(ids[follower_instance], instance=follower_instance,
                           protocols=[("range", b"new")])                 # a rebalance: waits for the leader
    assert h.reply(old_call) is None
    new_call = h.join_call(instance=follower_instance)                    # the process restarts meanwhile
    assert h.reply(old_call).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert h.reply(new_call) is None, "the successor waits in the join phase"
    h.join_call(leader, instance=leader_instance)
    r = h.reply(new_call)
    assert (r.error_code, r.generation_id, r.leader) == (0, gen + 1, leader)
    assert r.member_id not in ids.values()


def test_static_restart_in_completing_rebalance_fences_the_waiting_sync_and_rebalances():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    follower_instance = next(i for i, m in ids.items() if m != leader)
    leader_instance = next(i for i in ids if i != follower_instance)
    h.join_call(leader, instance=leader_instance)
    h.join_call(ids[follower_instance], instance=follower_instance)
    assert h.groups.state("g") == COMPLETING_REBALANCE
    waiting = h.sync_call(ids[follower_instance], gen + 1, instance=follower_instance)
    h.join_call(instance=follower_instance)
    assert h.reply(waiting).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert h.groups.state("g") == PREPARING_REBALANCE


def test_static_leader_restart_with_join_v9_skips_assignment():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    leader_instance = next(i for i, m in ids.items() if m == leader)
    r = h.reply(h.join_call(instance=leader_instance, api_version=9))
    assert r.error_code == 0 and r.member_id != leader
    assert (r.generation_id, r.leader, r.skip_assignment) == (gen, r.member_id, True)
    assert sorted(m for m, _, _ in r.members) == sorted(set(ids.values()) - {leader} | {r.member_id})
    assert {i for _, i, _ in r.members} == {"i1", "i2"}
    assert h.groups.state("g") == STABLE
    s = h.reply(h.sync_call(r.member_id, gen, instance=leader_instance))
    assert s.assignment == ("as-" + leader_instance).encode()


def test_static_leader_restart_with_old_join_version_does_not_rebalance():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    leader_instance = next(i for i, m in ids.items() if m == leader)
    r = h.reply(h.join_call(instance=leader_instance, api_version=8))
    assert r is not None and r.error_code == 0
    assert (r.generation_id, r.leader, r.skip_assignment, r.members) == (gen, leader, False, [])
    assert h.groups.state("g") == STABLE


def test_static_restart_that_changes_the_selected_protocol_rebalances():
    h = Harness(delay_ms=3000)
    range_first, rr_first = [("range", b""), ("roundrobin", b"")], [("roundrobin", b""), ("range", b"")]
    calls = {i: h.join_call(instance=i, protocols=p)
             for i, p in (("i1", range_first), ("i2", rr_first), ("i3", range_first))}
    h.tick(3000)
    replies = {i: h.reply(c) for i, c in calls.items()}
    gen, leader = replies["i1"].generation_id, replies["i1"].leader
    assert replies["i1"].protocol_name == "range"
    h.sync_call(leader, gen, [], instance="i1")
    for i in ("i2", "i3"):
        h.sync_call(replies[i].member_id, gen, instance=i)
    assert h.groups.state("g") == STABLE
    unchanged = h.reply(h.join_call(instance="i3", protocols=[("range", b"")]))
    assert unchanged.generation_id == gen and h.groups.state("g") == STABLE, "range still wins: no rebalance"
    h.sync_call(unchanged.member_id, gen, instance="i3")
    call = h.join_call(instance="i3", protocols=rr_first)     # now roundrobin would win 2 to 1
    assert h.reply(call) is None and h.groups.state("g") == PREPARING_REBALANCE


def test_static_member_that_does_not_rejoin_in_time_stays_in_the_group():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    follower_instance = next(i for i, m in ids.items() if m != leader)
    leader_instance = next(i for i in ids if i != follower_instance)
    call = h.join_call(leader, instance=leader_instance, session_ms=60000)
    for t in (8000, 16000):              # the follower stays alive but does not rejoin
        h.now_ms = t
        assert h.heartbeat(ids[follower_instance], gen, instance=follower_instance) == ErrorCode.REBALANCE_IN_PROGRESS
    h.tick(REBALANCE_MS)
    r = h.reply(call)
    assert r.generation_id == gen + 1
    assert {i for _, i, _ in r.members} == {"i1", "i2"}


def test_known_member_id_with_unknown_instance_id_is_unknown_member():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    assert h.reply(h.join_call(leader, instance="unknown-instance")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.groups.state("g") == STABLE


# ---- offset commit validation ----------------------------------------------------------------------------------------

def test_offset_commit_validation():
    h = Harness()
    h.groups.create_simple("simple", 0)
    assert h.groups.validate_offset_commit("simple", "", None, -1, 0) == 0, "admin / manual assignment commits"
    (a, b), gen = h.stable_group(2)
    v = h.groups.validate_offset_commit
    assert v("g", a, None, gen, 0) == 0
    assert v("g", a, None, gen - 1, 0) == ErrorCode.ILLEGAL_GENERATION
    assert v("g", "ghost", None, gen, 0) == ErrorCode.UNKNOWN_MEMBER_ID
    assert v("g", "", None, -1, 0) == ErrorCode.UNKNOWN_MEMBER_ID, "a non-empty group takes no anonymous commits"
    h.join_call(a)
    assert v("g", b, None, gen, 0) == 0, "commits of the old generation are fine while members rejoin"
    h.join_call(b)
    assert v("g", b, None, gen + 1, 0) == ErrorCode.REBALANCE_IN_PROGRESS
    assert v("g", b, None, gen, 0) == ErrorCode.ILLEGAL_GENERATION


def test_offset_commit_from_a_fenced_static_member():
    h = Harness()
    ids, gen, leader = static_group(h, "i1")
    assert h.groups.validate_offset_commit("g", "old-id", "i1", gen, 0) == ErrorCode.FENCED_INSTANCE_ID
    assert h.groups.validate_offset_commit("g", ids["i1"], "i1", gen, 0) == 0


def test_offset_commit_counts_as_a_heartbeat():
    h = Harness()
    (a,), gen = h.stable_group(1)
    h.now_ms = SESSION_MS - 1
    assert h.groups.validate_offset_commit("g", a, None, gen, h.now_ms) == 0
    h.tick(SESSION_MS + 5000)
    assert h.groups.state("g") == STABLE


# ---- describe, list, replay -----------------------------------------------------------------------------------------

def test_describe_shows_protocol_and_assignments_only_when_stable():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    d = h.groups.describe("g")
    assert (d.error_code, d.state, d.protocol_type, d.protocol) == (0, STABLE, "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in d.members] == \
        [(a, b"range-meta", b"a0"), (b, b"range-meta", b"a1")]
    h.join_call(a)
    d = h.groups.describe("g")
    assert (d.state, d.protocol) == (PREPARING_REBALANCE, "")
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)
    assert h.groups.describe("nope").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_list_groups_and_counts():
    h = Harness()
    h.stable_group(2)
    h.groups.create_simple("s", 0)
    assert h.groups.list_groups() == [("g", STABLE, "consumer"), ("s", EMPTY, "")]
    assert h.groups.count_by_state()[STABLE] == 1 and h.groups.count_by_state()[EMPTY] == 1
    assert h.groups.member_count() == 2


def test_replay_of_a_stable_group_keeps_it_stable_with_members_and_assignments():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    fresh = ClassicGroups({"group.initial.rebalance.delay.ms": 0})
    for key, value in h.log:
        fresh.replay(key, value, now_ms=50000)
    assert fresh.state("g") == STABLE
    assert fresh.describe("g") == h.groups.describe("g")
    for k, m in ids.items():
        assert fresh.heartbeat("g", gen, m, k, now_ms=50000).response == 0
    out = fresh.sync(99, "g", gen, ids["i1"], "i1", None, None, [], now_ms=50000)
    assert out.response[99].assignment == b"as-i1"
    # sessions start at load time
    assert fresh.tick(50000 + SESSION_MS - 1).records == []
    assert fresh.state("g") == STABLE
    fresh.tick(50000 + SESSION_MS)
    assert fresh.state("g") == EMPTY


def test_replay_of_a_static_member_lets_its_restart_skip_the_rebalance():
    h = Harness()
    ids, gen, leader = static_group(h, "i1", "i2")
    fresh = ClassicGroups({"group.initial.rebalance.delay.ms": 0})
    for key, value in h.log:
        fresh.replay(key, value, now_ms=0)
    follower_instance = next(i for i, m in ids.items() if m != leader)
    out = fresh.join(1, "g", "", follower_instance, "consumer", RANGE, SESSION_MS, REBALANCE_MS, client_id="c",
                     client_host="h", require_known_member_id=True, api_version=9, now_ms=0)
    assert out.response[1].error_code == 0 and out.response[1].generation_id == gen
    assert fresh.state("g") == STABLE


def test_replay_of_a_new_group_whose_assignment_never_came_rebalances():
    h = Harness()
    a, call = h.join_new()               # the first join phase ends and is written; no SyncGroup yet
    gen = h.reply(call).generation_id
    fresh = ClassicGroups({"group.initial.rebalance.delay.ms": 0})
    for key, value in h.log:
        fresh.replay(key, value, now_ms=0)
    assert fresh.state("g") == PREPARING_REBALANCE
    assert fresh.heartbeat("g", gen, a, None, now_ms=0).response == ErrorCode.REBALANCE_IN_PROGRESS


def test_replay_between_join_and_sync_does_not_serve_the_previous_generations_assignment():
    h = Harness()
    (a, b), gen = h.stable_group(2)
    c, c_call = h.join_new()
    h.join_call(a)
    h.join_call(b)
    assert h.reply(c_call).generation_id == gen + 1
    fresh = ClassicGroups({"group.initial.rebalance.delay.ms": 0})   # the coordinator moves before the SyncGroups
    for key, value in h.log:
        fresh.replay(key, value, now_ms=0)
    out = fresh.sync(100, "g", gen + 1, c, None, None, None, [], now_ms=0)
    merge(out, fresh.sync(101, "g", gen + 1, a, None, None, None, [(a, b"A"), (b, b"B"), (c, b"C")], now_ms=0))
    r = out.response[100]
    assert r.error_code != 0 or r.assignment == b"C", "c must get its new assignment, or be told to rejoin"


def test_replay_of_an_empty_group_and_of_a_tombstone():
    h = Harness()
    (a,), gen = h.stable_group(1)
    h.now_ms = 1234
    h.leave([(a, None)])
    fresh = ClassicGroups()
    for key, value in h.log:
        fresh.replay(key, value, now_ms=99999)
    assert fresh.state("g") == EMPTY and fresh.empty_since_ms("g") == 1234
    for key, value in h.groups.remove("g"):
        fresh.replay(key, value, now_ms=99999)
    assert not fresh.has_group("g")


def test_subscribed_topics_of_a_consumer_protocol_group():
    h = Harness()
    protocols = [("range", consumer_subscription("orders", "payments"))]
    (a,), gen = h.stable_group(1, protocols=protocols)
    assert h.groups.subscribed_topics("g") == {"orders", "payments"}
    h.leave([(a, None)])
    assert h.groups.subscribed_topics("g") == set(), "an empty group subscribes to nothing"
