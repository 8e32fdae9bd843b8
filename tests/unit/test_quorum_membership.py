"""actors/controller/quorum_membership.py: the next voter change that keeps three voters on live
brokers (or one on a single node), one change at a time."""
from actors.controller.quorum_membership import Absences, VoterStep, next_voter_step


def step(voters, live, leader=1, pending=False, eligible=None):
    return next_voter_step(voters, live, leader_id=leader, change_pending=pending, eligible=eligible)


def test_three_live_voters_stay_as_they_are():
    assert step({1, 2, 3}, {1, 2, 3, 4, 5}) is None


def test_a_dead_voter_goes_out_first_then_a_live_broker_comes_in():
    assert step({1, 2, 3}, {1, 2, 4}) == VoterStep("remove", 3, "broker 3 is not live")
    assert step({1, 2}, {1, 2, 4}).op == "add" and step({1, 2}, {1, 2, 4}).broker_id == 4


def test_nothing_while_a_change_is_uncommitted_or_no_leader_is_known():
    assert step({1, 2, 3}, {1, 2, 4}, pending=True) is None
    assert step({1, 2, 3}, {1, 2, 4}, leader=None) is None


def test_no_change_that_could_not_commit():
    assert step({1, 2, 3}, {1}) is None          # one live voter of three: no majority to commit a removal


def test_a_single_node_keeps_one_voter_and_a_growing_cluster_gets_three():
    assert step({1}, {1}) is None
    assert step({1}, {1, 2, 3}) == VoterStep("add", 2, "1 voters, 3 wanted on live brokers")
    assert step({1, 2}, {1, 2, 3}).broker_id == 3
    assert step({1, 2}, {1, 2}) is None          # two live brokers keep their two voters


def test_above_the_target_a_follower_voter_goes_never_the_leader():
    assert step({1, 2, 3, 4}, {1, 2, 3, 4}, leader=4) == VoterStep("remove", 3, "4 voters, 3 wanted")


def test_only_brokers_that_run_a_quorum_node_are_added():
    assert step({1, 2}, {1, 2, 3, 4}, eligible={1, 2, 4}).broker_id == 4
    assert step({1, 2}, {1, 2, 3}, eligible={1, 2}) is None


def test_a_dead_voter_stays_while_no_live_broker_can_take_its_place():
    assert step({1, 2, 3}, {1, 2, 4}, eligible={1, 2, 3}) is None   # 4 runs no quorum node
    assert step({1, 2, 3}, {1, 2, 3, 4}, eligible={1, 2, 3}) is None


def test_a_dead_voter_goes_before_a_live_one_when_there_are_too_many():
    # four voters, three wanted: a dead one goes first, never a live one
    assert step({1, 2, 3, 4}, {1, 2}, leader=1) is None          # two live of four: no majority to commit
    assert step({1, 2, 3, 4}, {1, 2, 3}, leader=1) == VoterStep("remove", 4, "broker 4 is not live")
    assert step({1, 2, 3}, {1, 2}, leader=1) is None            # three voters, two live: the third stays


def test_a_returning_broker_takes_its_vote_back():
    assert step({1, 2}, {1, 2, 3}, eligible={1, 2, 3}) == VoterStep("add", 3, "2 voters, 3 wanted on live brokers")


def test_a_broker_counts_as_live_until_it_has_been_gone_for_the_delay():
    absences = Absences()
    assert absences.live({1, 2, 3}, {1, 2, 3}, now_s=0, delay_s=30) == {1, 2, 3}
    assert absences.live({1, 2, 3}, {1, 2}, now_s=10, delay_s=30) == {1, 2, 3}   # gone 0 s
    assert absences.live({1, 2, 3}, {1, 2}, now_s=39, delay_s=30) == {1, 2, 3}   # gone 29 s
    assert absences.live({1, 2, 3}, {1, 2}, now_s=40, delay_s=30) == {1, 2}      # gone 30 s
    assert absences.live({1, 2, 3}, {1, 2, 3}, now_s=41, delay_s=30) == {1, 2, 3}  # back
    assert absences.live({1, 2, 3}, {1, 2}, now_s=42, delay_s=30) == {1, 2, 3}   # gone again: counted afresh
