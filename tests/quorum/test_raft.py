"""RaftCore, one rule at a time, on hand-made messages (the simulation checks them together)."""
import random

import pytest

from actors.controller.quorum import (
    NO_LEADER, Accepted, Batch, BeginQuorumEpochRequest, ElectionState, EndQuorumEpochRequest, EpochEndOffset,
    EndQuorumEpochResponse, FetchRequest, FetchResponse, LeaderChange, NotLeader, QuorumConfig, QuorumStateError,
    RaftCore, Role, VoteRequest, VoteResponse,
)
from protocol.errors import ErrorCode

NONE = ErrorCode.NONE
ELECTION_MS, FETCH_MS = 1000, 2000


def make(node_id=1, voters=(1, 2, 3), election=None, log=(), now=0, seed=0, **config) -> RaftCore:
    return RaftCore(node_id, QuorumConfig(voters=voters, **config), now_ms=now, rng=random.Random(seed),
                    election=election, log=log)


def batches(*epochs) -> list[Batch]:
    """One single-record batch per epoch given, from offset 0."""
    return [Batch(offset, epoch, (f"r{offset}",)) for offset, epoch in enumerate(epochs)]


def sent(out, kind=None, dst=None) -> list:
    return [m for d, m in out.messages if (kind is None or isinstance(m, kind)) and (dst is None or d == dst)]


def vote(src, epoch, granted=True, pre_vote=False, leader=NO_LEADER) -> VoteResponse:
    return VoteResponse(src, NONE, epoch, leader, granted, pre_vote)


def leader_of(epoch=5, node_id=1, voters=(1, 2, 3), log=(), now=0, **config) -> RaftCore:
    """A node that restarts as a Candidate of `epoch` (it had voted for itself) and wins it."""
    core = make(node_id, voters, ElectionState(epoch, None, node_id), log, now, **config)
    core.tick(now)
    for v in voters:
        if v != node_id and core.role is not Role.LEADER:
            core.handle(vote(v, epoch), now)
    assert core.role is Role.LEADER
    return core


def follower_of(leader=1, epoch=5, node_id=2, voters=(1, 2, 3), log=(), now=0, **config) -> RaftCore:
    core = make(node_id, voters, ElectionState(epoch, leader, None), log, now, **config)
    assert core.role is Role.FOLLOWER
    return core


def fetch_answer(leader_core: RaftCore, request: FetchRequest, now: int) -> FetchResponse:
    out = leader_core.handle(request, now)
    (answer,) = sent(out, FetchResponse, request.src)
    return answer


# ---- restart: the persisted state decides the role -------------------------------------------------
def test_a_restarted_node_resumes_the_role_its_persisted_state_implies():
    assert make(1, election=ElectionState(4, 1, 1)).role is Role.RESIGNED      # never lead an epoch twice
    candidate = make(1, election=ElectionState(4, None, 1))
    assert (candidate.role, candidate.epoch) == (Role.CANDIDATE, 4)            # no new epoch on restart
    assert make(1, election=ElectionState(4, 2, None)).role is Role.FOLLOWER
    voted = make(1, election=ElectionState(4, None, 3))
    assert (voted.role, voted.voted_id) == (Role.UNATTACHED, 3)
    behind = make(1, election=ElectionState(2), log=batches(1, 3))
    assert (behind.role, behind.epoch) == (Role.UNATTACHED, 3)
    assert behind.tick(0).persist_state == ElectionState(3, None, None)


# ---- elections ----------------------------------------------------------------------------------------
def test_an_unattached_voter_pre_votes_after_a_randomized_election_timeout_without_bumping_its_epoch():
    timeouts = []
    for seed in range(20):
        core = make(1, election=ElectionState(3), seed=seed)
        assert sent(core.tick(ELECTION_MS - 1), VoteRequest) == []
        now = ELECTION_MS
        while core.role is Role.UNATTACHED:
            out = core.tick(now)
            now += 1
        timeouts.append(now - 1)
        assert core.role is Role.PROSPECTIVE and core.epoch == 3
        assert out.persist_state is None                       # a pre-vote changes nothing durable
        requests = sent(out, VoteRequest)
        assert {r.epoch for r in requests} == {3} and all(r.pre_vote for r in requests)
    assert min(timeouts) >= ELECTION_MS and max(timeouts) < 2 * ELECTION_MS and len(set(timeouts)) > 10


def test_a_pre_vote_majority_makes_a_candidate_of_the_next_epoch_that_voted_for_itself():
    core = make(1, election=ElectionState(3))
    core.tick(2 * ELECTION_MS)
    out = core.handle(vote(2, 3, pre_vote=True), 2 * ELECTION_MS)
    assert (core.role, core.epoch, core.voted_id) == (Role.CANDIDATE, 4, 1)
    assert out.persist_state == ElectionState(4, None, 1)          # on disk before the requests leave
    assert {(r.epoch, r.pre_vote) for r in sent(out, VoteRequest)} == {(4, False)}
    out = core.handle(vote(3, 4), 2 * ELECTION_MS)
    assert core.role is Role.LEADER and out.persist_state == ElectionState(4, 1, 1)


def test_a_voter_grants_one_vote_per_epoch_and_persists_it_with_the_answer():
    core = make(1, election=ElectionState(3))
    out = core.handle(VoteRequest(2, 4, 0, 0, False), 0)
    assert sent(out, VoteResponse)[0].vote_granted and out.persist_state == ElectionState(4, None, 2)
    assert not sent(core.handle(VoteRequest(3, 4, 0, 0, False), 0), VoteResponse)[0].vote_granted
    again = core.handle(VoteRequest(2, 4, 0, 0, False), 0)         # a duplicate of the first request
    assert sent(again, VoteResponse)[0].vote_granted and again.persist_state is None


def test_a_vote_needs_a_log_at_least_as_up_to_date():
    core = make(1, election=ElectionState(3), log=batches(1, 3, 3))   # log end (epoch 3, offset 3)
    refusals = [VoteRequest(2, 4, 2, 9, False), VoteRequest(2, 4, 3, 2, False)]
    for request in refusals:
        answer = sent(core.handle(request, 0), VoteResponse)[0]
        assert not answer.vote_granted and answer.epoch == 4             # the epoch moved anyway
    assert core.voted_id is None
    assert sent(core.handle(VoteRequest(3, 4, 3, 3, False), 0), VoteResponse)[0].vote_granted


def test_no_vote_goes_to_a_candidate_when_the_epoch_has_a_leader():
    core = follower_of(leader=3, epoch=4, node_id=1)
    assert not sent(core.handle(VoteRequest(2, 4, 0, 0, False), 0), VoteResponse)[0].vote_granted
    stale = sent(core.handle(VoteRequest(2, 3, 0, 0, False), 0), VoteResponse)[0]
    assert stale.error == ErrorCode.FENCED_LEADER_EPOCH and stale.leader_id == 3


def test_pre_votes_are_refused_by_a_leader_and_by_a_follower_that_reaches_its_leader():
    leader = leader_of(epoch=5)
    assert not sent(leader.handle(VoteRequest(2, 5, 5, 9, True), 0), VoteResponse)[0].vote_granted
    follower = follower_of(leader=1, epoch=5, node_id=2)
    request = sent(follower.tick(0), FetchRequest)[0]
    # a follower that never fetched from its leader grants (KIP-996's liveness exception), and a
    # granted pre-vote names no leader, so that the prospective does not start following it
    answer = sent(follower.handle(VoteRequest(3, 5, 0, 0, True), 0), VoteResponse)[0]
    assert answer.vote_granted and answer.leader_id == NO_LEADER
    follower.handle(fetch_answer(leader, request, 0), 0)
    answer = sent(follower.handle(VoteRequest(3, 5, 9, 99, True), 0), VoteResponse)[0]
    assert not answer.vote_granted and answer.leader_id == 1
    assert (follower.role, follower.voted_id) == (Role.FOLLOWER, None)   # a pre-vote changes nothing


def test_a_prospective_refused_by_a_majority_goes_back_to_the_leader_it_knew():
    core = follower_of(leader=1, epoch=5, node_id=2)
    core.tick(FETCH_MS)
    assert core.role is Role.PROSPECTIVE
    core.handle(vote(1, 5, granted=False, pre_vote=True, leader=1), FETCH_MS)
    out = core.handle(vote(3, 5, granted=False, pre_vote=True, leader=1), FETCH_MS)
    assert (core.role, core.epoch, core.leader_id) == (Role.FOLLOWER, 5, 1)
    assert out.persist_state is None and sent(out, FetchRequest, dst=1)


def test_a_stale_pre_vote_answer_does_not_count_as_a_vote():
    core = make(1, election=ElectionState(4, None, 1))   # a Candidate of epoch 4 after a restart
    core.handle(vote(2, 4, pre_vote=True), 0)            # granted to its pre-vote of before the restart
    assert core.role is Role.CANDIDATE
    core.handle(vote(2, 4), 0)
    assert core.role is Role.LEADER


def test_a_refused_candidate_backs_off_then_pre_votes_again():
    core = make(1, election=ElectionState(4, None, 1))
    core.tick(0)
    core.handle(vote(2, 4, granted=False), 0)
    core.handle(vote(3, 4, granted=False), 0)
    assert core.role is Role.CANDIDATE and sent(core.tick(0), VoteRequest) == []
    core.tick(core.config.election_backoff_max_ms + 1)
    assert (core.role, core.epoch) == (Role.PROSPECTIVE, 4)


def test_a_higher_epoch_in_any_request_or_answer_moves_the_node_on():
    leader = leader_of(epoch=5)
    leader.handle(BeginQuorumEpochRequest(2, 6, 2), 0)
    assert (leader.role, leader.epoch, leader.leader_id) == (Role.FOLLOWER, 6, 2)
    voter = make(3, election=ElectionState(2))
    voter.handle(FetchResponse(1, ErrorCode.FENCED_LEADER_EPOCH, 7, 2, -1, (), None, 0, 0), 0)
    assert (voter.role, voter.epoch, voter.leader_id) == (Role.FOLLOWER, 7, 2)


def test_two_leaders_in_one_epoch_stop_the_node():
    with pytest.raises(QuorumStateError):
        leader_of(epoch=5).handle(BeginQuorumEpochRequest(2, 5, 2), 0)
    with pytest.raises(QuorumStateError):
        follower_of(leader=1, epoch=5, node_id=2).handle(BeginQuorumEpochRequest(3, 5, 3), 0)


# ---- the leader ---------------------------------------------------------------------------------------
def test_a_new_leader_writes_a_leader_change_batch_and_announces_itself():
    core = make(1, election=ElectionState(4, None, 1), log=batches(1, 2))
    core.tick(0)
    out = core.handle(vote(3, 4), 0)
    (control,) = out.append
    assert control == Batch(2, 4, (LeaderChange(1, (1, 2, 3), (1, 3)),), control=True)
    assert {d for d, m in out.messages if isinstance(m, BeginQuorumEpochRequest)} == {2, 3}
    assert core.high_watermark == 0                        # nothing of epoch 4 is on a majority yet


def test_the_high_watermark_is_what_a_majority_holds_once_it_covers_the_leaders_own_epoch():
    core = leader_of(epoch=4, log=batches(1, 2, 2))        # control batch at 3
    core.handle(FetchRequest(2, 4, 3, 2, 0), 0)            # follower 2 has the old epochs only
    assert core.high_watermark == 0                        # not before an entry of epoch 4 is covered
    out = core.handle(FetchRequest(2, 4, 4, 4, 0), 0)
    assert core.high_watermark == 4
    assert [b.base_offset for b in out.committed] == [0, 1, 2, 3]
    accepted, out = core.propose(["a", "b"], 0)
    assert accepted == Accepted(4, 4, 5) and out.append[0].records == ("a", "b")
    core.handle(FetchRequest(3, 4, 6, 4, 0), 0)
    assert core.high_watermark == 6


def test_an_observers_fetches_never_count_toward_the_high_watermark():
    core = leader_of(epoch=4, voters=(1, 2, 3))
    core.propose(["a"], 0)
    out = core.handle(FetchRequest(9, 4, 2, 4, 0), 0)
    assert sent(out, FetchResponse, 9)[0].error == NONE and core.high_watermark == 0
    assert [o.replica_id for o in core.status().observers] == [9]


def test_a_diverging_fetch_is_answered_with_where_the_shared_epoch_ends():
    core = leader_of(epoch=4, log=batches(1, 1, 2))
    answer = fetch_answer(core, FetchRequest(2, 4, 3, 3, 0), 0)   # a tail of epoch 3 the leader lacks
    assert answer.diverging_epoch.epoch == 2 and answer.diverging_epoch.end_offset == 3 and answer.records == ()
    assert core.status().voters[1].log_end_offset == -1             # not counted as a fetch


def test_an_empty_fetch_is_held_until_records_arrive_or_max_wait_passes():
    core = leader_of(epoch=4)
    # a fetch that moves the HW is answered at once (it carries the news); then nothing is new
    assert sent(core.handle(FetchRequest(2, 4, 1, 4, 500), 0), FetchResponse)[0].high_watermark == 1
    assert sent(core.handle(FetchRequest(2, 4, 1, 4, 500), 0), FetchResponse) == []
    _, out = core.propose(["a"], 10)
    (answer,) = sent(out, FetchResponse, 2)
    assert [b.records for b in answer.records] == [("a",)]
    assert sent(core.handle(FetchRequest(2, 4, 2, 4, 500), 20), FetchResponse)[0].high_watermark == 2
    assert sent(core.handle(FetchRequest(2, 4, 2, 4, 500), 20), FetchResponse) == []
    assert sent(core.tick(519), FetchResponse) == []
    (answer,) = sent(core.tick(520), FetchResponse, 2)
    assert answer.records == () and answer.error == NONE


def test_fetches_of_other_epochs_or_to_non_leaders_are_refused_with_the_known_leader():
    core = leader_of(epoch=4)
    assert fetch_answer(core, FetchRequest(2, 3, 0, 0, 0), 0).error == ErrorCode.FENCED_LEADER_EPOCH
    assert fetch_answer(core, FetchRequest(2, 5, 0, 0, 0), 0).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = follower_of(leader=1, epoch=4, node_id=2)
    answer = fetch_answer(follower, FetchRequest(9, 4, 0, 0, 0), 0)
    assert (answer.error, answer.leader_id, answer.epoch) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 4)


def test_check_quorum_a_leader_without_fetches_from_a_majority_resigns_within_one_and_a_half_fetch_timeouts():
    core = leader_of(epoch=4)
    deadline = int(1.5 * FETCH_MS)
    core.tick(999)
    core.handle(FetchRequest(2, 4, 1, 4, 0), 1000)          # one of two followers: a majority with the leader
    core.tick(1000 + deadline - 1)
    assert core.role is Role.LEADER
    out = core.tick(1000 + deadline)
    assert core.role is Role.RESIGNED and out.persist_state is None
    assert {d for d, m in out.messages if isinstance(m, EndQuorumEpochRequest)} == {2, 3}
    assert core.propose(["late"], 1000 + deadline)[0] == NotLeader(None, 4)


def test_a_leader_past_its_check_quorum_deadline_refuses_a_write_even_before_a_tick():
    core = leader_of(epoch=4)
    result, out = core.propose(["late"], int(1.5 * FETCH_MS))
    assert result == NotLeader(None, 4) and out.append == [] and core.role is Role.RESIGNED


def test_check_quorum_is_a_sliding_window_a_leader_cut_off_with_a_minority_resigns_on_time():
    core = leader_of(epoch=4, voters=(1, 2, 3, 4, 5))
    core.handle(FetchRequest(2, 4, 1, 4, 0), 100)
    core.handle(FetchRequest(3, 4, 1, 4, 0), 200)           # then the cut: only 2 keeps fetching
    for now in range(300, 3200, 100):
        core.handle(FetchRequest(2, 4, 1, 4, 0), now)
    core.tick(200 + int(1.5 * FETCH_MS) - 1)
    assert core.role is Role.LEADER
    core.tick(200 + int(1.5 * FETCH_MS))
    assert core.role is Role.RESIGNED


def test_a_resigning_leader_names_its_most_caught_up_follower_first_and_that_one_runs_at_once():
    core = leader_of(epoch=4, request_timeout_ms=500)
    core.propose(["a"], 0)
    core.handle(FetchRequest(3, 4, 2, 4, 0), 0)
    core.handle(FetchRequest(2, 4, 1, 4, 0), 0)
    (request, _) = sent(core.resign(0), EndQuorumEpochRequest)
    assert request.preferred_successors == (3, 2)
    first = follower_of(leader=1, epoch=4, node_id=3)
    first.handle(request, 0)
    first.tick(0)
    assert first.role is Role.PROSPECTIVE
    second = follower_of(leader=1, epoch=4, node_id=2)
    second.handle(request, 0)
    second.tick(0)
    assert second.role is Role.FOLLOWER
    second.tick(second.config.election_backoff_max_ms)
    assert second.role is Role.PROSPECTIVE
    core.handle(EndQuorumEpochResponse(2, NONE, 4, 1), 0)
    assert [d for d, m in core.tick(500).messages if isinstance(m, EndQuorumEpochRequest)] == [3]   # resent


def test_a_resigned_leader_never_leads_its_epoch_again():
    core = make(1, election=ElectionState(4, 1, 1))       # restarted after leading epoch 4
    core.tick(2 * ELECTION_MS)
    assert core.role is Role.PROSPECTIVE
    core.handle(vote(2, 4, granted=False, pre_vote=True), 2 * ELECTION_MS)
    out = core.handle(vote(3, 4, granted=False, pre_vote=True), 2 * ELECTION_MS)
    assert (core.role, core.epoch, core.leader_id) == (Role.RESIGNED, 4, 1) and out.persist_state is None


# ---- the follower ---------------------------------------------------------------------------------------
def test_a_follower_appends_what_it_fetches_and_takes_the_high_watermark_up_to_its_log_end():
    leader = leader_of(epoch=4, log=batches(1, 1), fetch_max_records=2)
    for records in (["a"], ["b"], ["c"]):
        leader.propose(records, 0)
    leader.handle(FetchRequest(3, 4, 6, 4, 0), 0)                    # the HW reaches 6
    follower = follower_of(leader=1, epoch=4, node_id=2, log=batches(1, 1))
    request = sent(follower.tick(0), FetchRequest)[0]
    assert (request.fetch_offset, request.last_fetched_epoch) == (2, 1)
    out = follower.handle(fetch_answer(leader, request, 0), 0)
    assert [b.base_offset for b in out.append] == [2, 3]               # two records: the limit
    assert follower.high_watermark == 4 and [b.base_offset for b in out.committed] == [0, 1, 2, 3]
    assert sent(out, FetchRequest)[0].fetch_offset == 4                # the next fetch leaves at once


def test_a_follower_truncates_a_diverging_tail_then_fetches_again():
    leader = leader_of(epoch=4, log=batches(1, 1, 2))
    follower = follower_of(leader=1, epoch=4, node_id=2, log=batches(1, 1, 3, 3))
    answer = fetch_answer(leader, sent(follower.tick(0), FetchRequest)[0], 0)
    out = follower.handle(answer, 0)
    assert out.truncate_to == 2 and out.append == []
    request = sent(out, FetchRequest)[0]
    assert (request.fetch_offset, request.last_fetched_epoch) == (2, 1)
    out = follower.handle(fetch_answer(leader, request, 0), 0)
    assert [(b.base_offset, b.epoch) for b in out.append] == [(2, 2), (3, 4)]


def test_a_truncation_below_the_high_watermark_is_refused():
    follower = follower_of(leader=1, epoch=4, node_id=2, log=batches(1, 1, 3))
    follower.tick(0)
    follower.handle(FetchResponse(1, NONE, 4, 1, 3, (), None, 3, 3), 0)
    assert follower.high_watermark == 3
    with pytest.raises(QuorumStateError):   # no leader may ask that: offsets below the HW are committed
        follower.handle(FetchResponse(1, NONE, 4, 1, 3, (), EpochEndOffset(1, 2), 3, 3), 0)


def test_batches_from_the_leader_that_do_not_fit_the_log_stop_the_node():
    follower = follower_of(leader=1, epoch=4, node_id=2, log=batches(1, 3))
    follower.tick(0)
    with pytest.raises(QuorumStateError):   # an epoch going back after the fetch position
        follower.handle(FetchResponse(1, NONE, 4, 1, -1, (Batch(2, 2, ("x",)),), None, 2, 3), 0)


def test_late_or_duplicated_fetch_answers_are_ignored_and_the_high_watermark_never_goes_back():
    leader = leader_of(epoch=4)
    leader.propose(["a"], 0)
    leader.handle(FetchRequest(3, 4, 2, 4, 0), 0)
    follower = follower_of(leader=1, epoch=4, node_id=2)
    answer = fetch_answer(leader, sent(follower.tick(0), FetchRequest)[0], 0)
    out = follower.handle(answer, 0)
    assert follower.log_end_offset == 2 and follower.high_watermark == 2
    again = follower.handle(answer, 0)                                  # the same answer, duplicated
    assert again.append == [] and follower.log_end_offset == 2
    older = FetchResponse(1, NONE, 4, 1, 1, (), None, 2, 4)            # a lower HW, arriving late
    follower.handle(older, 0)
    assert follower.high_watermark == 2 and out.committed


def test_a_follower_without_a_successful_fetch_for_the_fetch_timeout_pre_votes():
    core = follower_of(leader=1, epoch=5, node_id=2)
    core.tick(FETCH_MS - 1)
    assert core.role is Role.FOLLOWER
    core.handle(FetchResponse(1, NONE, 5, 1, -1, (), None, 0, 0), FETCH_MS - 1)   # a successful fetch
    core.tick(2 * FETCH_MS - 2)
    assert core.role is Role.FOLLOWER
    core.tick(2 * FETCH_MS - 1)
    assert (core.role, core.epoch) == (Role.PROSPECTIVE, 5)


def test_begin_quorum_epoch_makes_an_unattached_voter_follow_the_new_leader():
    core = make(2, election=ElectionState(3))
    out = core.handle(BeginQuorumEpochRequest(1, 4, 1), 0)
    assert (core.role, core.epoch, core.leader_id) == (Role.FOLLOWER, 4, 1)
    assert out.persist_state == ElectionState(4, 1, None) and sent(out, FetchRequest, dst=1)


# ---- observers ------------------------------------------------------------------------------------------
def test_an_observer_finds_the_leader_through_any_voter_and_never_starts_an_election():
    observer = make(9, voters=(1, 2, 3))
    (request,) = sent(observer.tick(0), FetchRequest)
    voter = follower_of(leader=1, epoch=4, node_id=2)
    out = observer.handle(fetch_answer(voter, request, 0), 0)
    assert (observer.role, observer.epoch, observer.leader_id) == (Role.FOLLOWER, 4, 1)
    assert sent(out, FetchRequest, dst=1)
    observer.tick(10 * FETCH_MS)
    assert observer.role is Role.FOLLOWER and observer.voted_id is None
    # KIP-853: a candidate whose log names this node a voter may have its vote (one per epoch,
    # persisted first) though this node's own log does not name it yet; it still never campaigns
    out = observer.handle(VoteRequest(2, 5, 0, 0, False), 10 * FETCH_MS)
    answer = sent(out, VoteResponse)[0]
    assert answer.vote_granted and out.persist_state == ElectionState(5, None, 2)
    for t in range(10 * FETCH_MS, 30 * FETCH_MS, 50):
        observer.tick(t)
        assert observer.role in (Role.UNATTACHED, Role.FOLLOWER)


# ---- proposals and the shell's view ---------------------------------------------------------------------
def test_proposals_go_to_the_leader_and_commit_through_committed():
    follower = follower_of(leader=1, epoch=4, node_id=2)
    assert follower.propose(["x"], 0)[0] == NotLeader(1, 4)
    with pytest.raises(ValueError):
        follower.propose([], 0)
    single = make(1, voters=(1,))
    out = single.tick(2 * ELECTION_MS)
    assert single.role is Role.LEADER and [b.control for b in out.committed] == [True]
    accepted, out = single.propose(["x", "y"], 2 * ELECTION_MS)
    assert accepted == Accepted(1, 1, 2) and [b.records for b in out.committed] == [("x", "y")]


def test_the_output_reports_leader_changes_and_status_describes_the_quorum():
    core = make(2, election=ElectionState(3))
    assert core.tick(0).leader.leader_id is None
    assert core.tick(0).leader is None
    assert core.handle(BeginQuorumEpochRequest(1, 4, 1), 0).leader.leader_id == 1
    leader = leader_of(epoch=4)
    leader.handle(FetchRequest(2, 4, 1, 4, 0), 7)
    status = leader.status()
    assert (status.role, status.epoch, status.leader_id, status.high_watermark) == ("leader", 4, 1, 1)
    assert [(v.replica_id, v.log_end_offset, v.last_fetch_ms) for v in status.voters] == \
        [(1, 1, 7), (2, 1, 7), (3, -1, None)]
    assert leader.next_tick_ms() <= 7 + int(1.5 * FETCH_MS)
    follower = follower_of(leader=1, epoch=4, node_id=2)
    follower.tick(10)                 # its fetch is out: nothing to do before the fetch timeout (from 0)
    assert follower.next_tick_ms() == FETCH_MS


def test_a_new_leader_knows_when_it_last_heard_from_its_predecessor():
    """What a new active controller continues its predecessor's broker session from."""
    leader = leader_of(epoch=5, node_id=1)
    follower = follower_of(leader=1, epoch=5, node_id=2)
    assert follower.status().leader_heard is None
    (request,) = sent(follower.tick(100), FetchRequest, 1)
    follower.handle(fetch_answer(leader, request, 100), 150)
    assert follower.status().leader_heard == (1, 150)
    # the leader goes silent: the follower pre-votes, is elected, and still knows when it last heard
    now = 150 + FETCH_MS
    follower.tick(now)
    follower.handle(vote(3, 5, pre_vote=True), now)
    follower.tick(now)
    follower.handle(vote(3, 6), now)
    assert follower.role is Role.LEADER and follower.epoch == 6
    assert follower.status().leader_heard == (1, 150)


def test_a_leader_says_when_a_majority_was_last_in_touch_for_its_controllers_lease():
    leader = leader_of(epoch=5, node_id=1, voters=(1, 2, 3, 4, 5))
    assert leader.status().majority_contact_ms(1000) is None   # no follower has fetched yet
    leader.handle(FetchRequest(2, 5, 0, 0, 0), 100)
    assert leader.status().majority_contact_ms(1000) is None   # 2 of 5
    leader.handle(FetchRequest(4, 5, 0, 0, 0), 200)
    leader.handle(FetchRequest(3, 5, 0, 0, 0), 300)
    assert leader.status().majority_contact_ms(1000) == 200     # itself at 1000, then 300, then 200
    assert follower_of(leader=1, epoch=5, node_id=2).status().majority_contact_ms(1000) is None
