"""Broker ids of Ray nodes (actors/controller/nodes.py): labels first, then the id a node recorded
beside its data, else a new one that no live broker has."""
import pytest

from actors.controller.nodes import NodeView, proposed_broker_id, recorded_broker_id


def node(**labels):
    return NodeView.of({"NodeID": "ab" * 28, "Alive": True, "NodeManagerAddress": "10.0.0.5", "Labels": labels})


def test_labels_name_the_broker_its_port_and_controller_only_nodes():
    assert node(**{"kray-broker-id": "3", "kray-port": "9094"}).labelled_broker_id == 3
    assert node(**{"kray-port": "9094"}).port == 9094
    assert node().labelled_broker_id is None and node().hosts_broker
    assert not node(**{"kray-role": "controller"}).hosts_broker
    with pytest.raises(ValueError, match="kray-broker-id"):
        node(**{"kray-broker-id": "first"}).labelled_broker_id


def test_new_ids_prefer_the_configured_one_then_the_lowest_free():
    assert proposed_broker_id(0, set()) == 0
    assert proposed_broker_id(0, {0, 1, 3}) == 2
    assert proposed_broker_id(7, {0}) == 7


def test_a_node_finds_its_recorded_id_again(tmp_path):
    assert recorded_broker_id(str(tmp_path), proposed=4) == 4
    assert recorded_broker_id(str(tmp_path), proposed=9) == 4, "meta.properties wins over a new proposal"
    assert "broker.id=4" in (tmp_path / "meta.properties").read_text()


def test_a_new_node_on_the_same_host_replaces_the_live_node_of_its_broker_id():
    from actors.controller.nodes import replaces
    old = NodeView("old", True, "198.18.0.3", {"kray-broker-id": "3"})
    assert replaces(old, NodeView("new", True, "198.18.0.3", {"kray-broker-id": "3"}))
    assert not replaces(old, NodeView("elsewhere", True, "198.18.0.9", {"kray-broker-id": "3"}))
    assert not replaces(old, NodeView("no-address", True, "", {"kray-broker-id": "3"}))
    assert replaces(None, NodeView("new", True, "198.18.0.3", {}))


def test_the_voter_set_chosen_at_a_clusters_first_start_is_kept_beside_the_broker_id(tmp_path):
    from actors.controller.nodes import read_broker_id, recorded_voters
    assert recorded_voters(str(tmp_path)) is None and read_broker_id(str(tmp_path)) is None
    assert recorded_broker_id(str(tmp_path), proposed=2) == 2
    assert recorded_voters(str(tmp_path), "1,2,3") == "1,2,3"
    assert recorded_voters(str(tmp_path), "2,4,5") == "1,2,3", "a recorded voter set never changes silently"
    assert recorded_voters(str(tmp_path)) == "1,2,3" and read_broker_id(str(tmp_path)) == 2
    assert recorded_broker_id(str(tmp_path), proposed=7) == 2, "recording the voters keeps the broker id"


def test_voters_are_the_configured_ones_else_the_recorded_ones_else_none():
    from actors.controller.nodes import chosen_voters
    assert chosen_voters((5, 6, 7), {"1,2,3"}) == (5, 6, 7)
    assert chosen_voters((), {"2,3,4"}) == (2, 3, 4)
    assert chosen_voters((), set()) == (), "no voting brokers: one dedicated controller"
    why = chosen_voters((), {"1,2,3", "1,2,4"})
    assert isinstance(why, str) and "controller.quorum.voters" in why
