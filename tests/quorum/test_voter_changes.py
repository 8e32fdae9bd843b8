"""KIP-853 voter changes in RaftCore, one rule at a time (the simulation checks them together with
faults: tests/quorum/world.py, `change_voters`)."""
from actors.controller.quorum import (
    Accepted, Batch, FetchRequest, LeaderChange, Refused, Role, VotersRecord,
)
from protocol.errors import ErrorCode
from tests.quorum.test_raft import FETCH_MS, fetch_answer, follower_of, leader_of, make, sent


def committed_leader(voters=(1, 2, 3), now=0):
    """Leader 1 of epoch 5 whose LeaderChange is committed (node 2 fetched past it twice)."""
    core = leader_of(5, 1, voters, now=now)
    end = core.log_end_offset
    for v in voters[1:2]:
        core.handle(FetchRequest(v, 5, end, 5, 0), now)
    assert core.high_watermark == end
    return core


def observer_fetch(core, node_id, now, offset=None):
    offset = core.log_end_offset if offset is None else offset
    epoch = core.log.end_offset_for_epoch(10 ** 9)[0] if offset else 0
    return core.handle(FetchRequest(node_id, core.epoch, offset, epoch, 0), now)


def test_the_voter_set_is_the_last_voters_record_in_the_log_committed_or_not():
    log = [Batch(0, 1, (LeaderChange(1, (1, 2, 3), (1, 2)),), control=True),
           Batch(1, 1, (VotersRecord((1, 2, 3, 4)),), control=True),
           Batch(2, 1, ("r2",))]
    core = make(4, voters=(1, 2, 3), log=log)
    assert core.voters == (1, 2, 3, 4) and core.is_voter and core.voters_offset == 1
    assert make(4, voters=(1, 2, 3), log=log[:1]).voters == (1, 2, 3)   # the bootstrap set until then
    # a truncation that takes the record away brings the set before it back
    follower = follower_of(1, 5, node_id=2, log=log)
    assert follower.voters == (1, 2, 3, 4)
    follower.log.truncate_to(1)
    follower._voters_changed()
    assert follower.voters == (1, 2, 3)


def test_a_leader_adds_a_caught_up_observer_and_the_new_set_is_in_force_at_once():
    core = committed_leader()
    observer_fetch(core, 4, 10)
    result, out = core.add_voter(4, 10)
    assert isinstance(result, Accepted) and result.base_offset == 1
    (batch,) = out.append
    assert batch.control and batch.records == (VotersRecord((1, 2, 3, 4)),)
    assert core.voters == (1, 2, 3, 4) and core.voter_change_pending
    # the majority is now 3 of 4: node 2 alone no longer commits
    core.handle(FetchRequest(2, 5, 2, 5, 0), 20)
    assert core.high_watermark == 1
    out = core.handle(FetchRequest(4, 5, 2, 5, 0), 20)
    assert core.high_watermark == 2 and [b.records for b in out.committed] == [(VotersRecord((1, 2, 3, 4)),)]
    assert not core.voter_change_pending
    assert [v.replica_id for v in core.status().voters] == [1, 2, 3, 4]


def test_a_change_waits_for_an_entry_of_the_leaders_epoch_to_commit():
    core = leader_of(5, 1, (1, 2, 3))
    observer_fetch(core, 4, 0, offset=0)
    result, out = core.add_voter(4, 0)
    assert isinstance(result, Refused) and result.error == ErrorCode.REQUEST_TIMED_OUT
    assert "has not committed an entry of its epoch" in result.reason and not out.append


def test_one_change_at_a_time():
    core = committed_leader()
    assert isinstance(core.remove_voter(3, 10)[0], Accepted)
    result, _ = core.remove_voter(2, 10)
    assert result.error == ErrorCode.REQUEST_TIMED_OUT and "one change at a time" in result.reason
    core.handle(FetchRequest(2, 5, 2, 5, 0), 20)     # 2 of {1, 2}: committed
    assert not core.voter_change_pending and core.voters == (1, 2)
    assert isinstance(core.add_voter(3, 30)[0], Refused)           # 3 has not fetched as an observer yet


def test_a_new_voter_must_have_fetched_lately_and_reached_the_high_watermark():
    core = committed_leader()
    result, _ = core.add_voter(4, 0)
    assert result.error == ErrorCode.REQUEST_TIMED_OUT and "start it (as an observer) first" in result.reason
    observer_fetch(core, 4, 0, offset=0)                               # behind the high watermark
    result, _ = core.add_voter(4, 0)
    assert result.error == ErrorCode.REQUEST_TIMED_OUT and "catching up" in result.reason
    observer_fetch(core, 4, 0)
    assert core.add_voter(4, FETCH_MS + 1)[0].error == ErrorCode.REQUEST_TIMED_OUT   # silent too long


def test_errors_as_kafka_names_them():
    core = committed_leader()
    assert core.add_voter(2, 0)[0].error == ErrorCode.DUPLICATE_VOTER
    assert core.remove_voter(7, 0)[0].error == ErrorCode.VOTER_NOT_FOUND
    follower = follower_of(1, 5, node_id=2)
    refused = follower.add_voter(4, 0)[0]
    assert (refused.error, refused.leader_id) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 1)
    single = committed_leader(voters=(1,))
    assert single.remove_voter(1, 0)[0].error == ErrorCode.INVALID_REQUEST


def test_a_leader_that_removes_itself_leads_without_counting_itself_then_resigns_once_it_commits():
    core = committed_leader()
    result, _ = core.remove_voter(1, 10)
    assert isinstance(result, Accepted) and core.voters == (2, 3) and core.role is Role.LEADER
    core.handle(FetchRequest(2, 5, 2, 5, 0), 20)          # 1 of {2, 3}: not yet
    assert core.high_watermark == 1 and core.role is Role.LEADER
    out = core.handle(FetchRequest(3, 5, 2, 5, 0), 20)   # 2 of {2, 3}: committed, so it resigns
    assert core.high_watermark == 2 and core.role is Role.RESIGNED and not core.is_voter
    assert {d for d, _ in out.messages} >= {2, 3}
    # an observer now: it looks for the next leader and never campaigns
    for t in range(20, 20 + 10 * FETCH_MS, 100):
        out = core.tick(t)
        assert core.role is not Role.PROSPECTIVE
    assert sent(out, FetchRequest) or core._fetching.in_flight


def test_votes_and_begin_quorum_epoch_are_taken_from_a_node_this_log_does_not_name_yet():
    core = follower_of(1, 5, node_id=2)
    core.tick(3 * FETCH_MS)
    from actors.controller.quorum import BeginQuorumEpochRequest, VoteRequest, VoteResponse
    answer = sent(core.handle(VoteRequest(4, 6, 5, 0, False), 3 * FETCH_MS), VoteResponse)[0]
    assert answer.error == ErrorCode.NONE and answer.vote_granted
    core.handle(BeginQuorumEpochRequest(4, 6, 4), 3 * FETCH_MS)
    assert (core.role, core.leader_id, core.epoch) == (Role.FOLLOWER, 4, 6)


def test_a_candidate_counts_only_the_votes_of_its_own_set():
    from actors.controller.quorum import ElectionState
    core = make(1, voters=(1, 2, 3), election=ElectionState(5, None, 1))
    core.tick(0)
    from tests.quorum.test_raft import vote
    core.handle(vote(9, 5), 0)
    assert core.role is Role.CANDIDATE
    core.handle(vote(2, 5), 0)
    assert core.role is Role.LEADER


def test_an_added_voter_learns_it_from_its_log_and_campaigns_when_its_leader_goes():
    leader = committed_leader()
    observer = make(4, voters=(1, 2, 3))
    (request,) = sent(observer.tick(0), FetchRequest)
    observer.handle(fetch_answer(leader, request, 0), 0)   # finds leader 1 (epoch 5)
    while observer.log_end_offset < leader.log_end_offset:
        r = FetchRequest(4, 5, observer.log_end_offset, observer.log.last_epoch, 0)
        observer.handle(fetch_answer(leader, r, 0), 0)
    leader.handle(FetchRequest(4, 5, observer.log_end_offset, observer.log.last_epoch, 0), 0)  # it says so
    assert isinstance(leader.add_voter(4, 0)[0], Accepted)
    r = FetchRequest(4, 5, observer.log_end_offset, observer.log.last_epoch, 0)
    observer.handle(fetch_answer(leader, r, 0), 0)
    assert observer.is_voter and observer.voters == (1, 2, 3, 4)
    observer.tick(FETCH_MS + 1)                                  # its leader went silent
    assert observer.role is Role.PROSPECTIVE
