"""kray start's progress lines (cluster/start_progress.py): each names what the deploy waits for."""
from cluster.local import _Said
from cluster.start_progress import progress_line


def test_before_any_controller_is_active_the_line_names_the_election_and_its_voters():
    line = progress_line((1, 2, 3), None, None, 3)
    assert "elect a leader" in line and "brokers 1, 2, 3" in line
    assert progress_line((), None, None, 1) == "waiting for the controller to read the metadata"


def test_the_line_names_the_brokers_not_serving_yet_and_why():
    line = progress_line((1, 2, 3), 2, {"brokers": {1: "serving", 2: "registered", 3: "starting"},
                                        "internal_topics_missing": ["__consumer_offsets"]}, 3)
    assert line.startswith("waiting for brokers to serve clients: 1 of 3 serve (1)")
    assert "broker 2 registered" in line and "broker 3 starting" in line
    assert "the controller on broker 2 is active" in line


def test_broker_nodes_the_controller_has_not_seen_are_counted():
    line = progress_line((), None, {"brokers": {1: "serving"}, "internal_topics_missing": []}, 3)
    assert "1 of 3 serve" in line and "2 broker nodes not seen yet" in line


def test_once_every_broker_serves_the_line_names_the_internal_topics():
    line = progress_line((1, 2, 3), 1, {"brokers": {1: "serving", 2: "serving", 3: "serving"},
                                        "internal_topics_missing": ["__consumer_offsets", "__share_group_state"]}, 3)
    assert "all 3 brokers serve" in line and "__consumer_offsets, __share_group_state" in line


def test_a_line_is_said_when_it_changes_not_every_poll():
    said = []
    say = _Said(said.append)
    for line in ("a", "a", "b", "b", "a"):
        say(line)
    assert said == ["a", "b", "a"]
