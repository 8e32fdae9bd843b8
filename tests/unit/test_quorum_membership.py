"""actors/controller/quorum_membership.py: the next voter change that keeps three voters on live
brokers (or one on a single node), one change at a time."""
from actors.controller.quorum_membership import VoterStep, next_voter_step


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
