"""The controller's reconciler in the seeded simulation (tests/sim/controller_world.py), as a CI
test: blocks of seeds, each replayable with `python -m tests.sim --controller --seed S -v`; the
deliberate breaks of tests/sim/controller_breaks.py, each caught; and the decisions the
simulation found wrong once, pinned step by step."""
import collections
import os
import uuid

import pytest

from actors.config_schema import BROKER_DEFAULTS
from actors.controller import reconciler as rc
from actors.controller.core import BrokerInfo, ControllerCore
from actors.controller.nodes import BROKER_ID_LABEL, NodeView
from tests.sim.controller_breaks import BREAKS, broken
from tests.sim.controller_world import ControllerSimulation, InvariantViolation

SEEDS = int(os.environ.get("KRAY_CONTROLLER_SIM_SEEDS", 500))
STEPS = int(os.environ.get("KRAY_CONTROLLER_SIM_STEPS", 600))
BLOCK = 100


@pytest.mark.parametrize("first_seed", range(0, SEEDS, BLOCK))
def test_invariants_hold(first_seed):
    totals = collections.Counter()
    for seed in range(first_seed, first_seed + BLOCK):
        totals.update(ControllerSimulation(seed).run(STEPS).stats)
    # the block exercised what it claims to: shard, gateway and node crashes, nodes that return
    # (before and after Ray declares the old one dead), strangers, cuts with timed-out tells,
    # controller restarts that adopt, topics created and deleted, leaders moving
    exercised = ("hosted", "told", "routed_checks", "shard_crashes", "gateway_crashes", "node_crashes", "node_returns",
                 "fenced_lost", "strangers", "cuts", "tell_timeouts", "tells_not_hosted", "controller_restarts",
                 "registrations", "topics", "topics_deleted", "deleted", "isr_expansions", "session_fences",
                 "preferred_elections")
    assert [k for k in exercised if totals[k] == 0] == []
    assert totals["settled"] == BLOCK


def test_a_seed_replays_exactly():
    first, second = ControllerSimulation(1234).run(STEPS), ControllerSimulation(1234).run(STEPS)
    assert list(first.timeline) == list(second.timeline)
    assert first.stats == second.stats


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_a_broken_rule_is_caught(rule):
    """The simulation can fail: breaking any one of these rules of the reconciler violates an
    invariant (or its liveness) on some seed."""
    with broken(rule):
        with pytest.raises(InvariantViolation) as caught:
            for seed in range(500):
                ControllerSimulation(seed).run(STEPS)
    message = str(caught.value)
    assert "replay: python -m tests.sim --controller --seed" in message and "last steps:" in message


# ---- decisions the simulation found wrong, pinned ------------------------------------------------
def node(node_id, broker_id, address):
    return NodeView(node_id, True, address, {BROKER_ID_LABEL: str(broker_id)})


def core_with_topic(brokers=(0, 1, 2)):
    core = ControllerCore(dict(BROKER_DEFAULTS), "c")
    for b in brokers:
        core.register_broker(BrokerInfo(b, f"10.0.0.{b}", 9092, node_id=f"n{b}"))
    core.create_topic("t", 1, len(brokers), {})
    return core, core.topics["t"]


def test_a_confirmation_that_comes_back_after_the_shard_died_does_not_route():
    """A Tell answered before its shard died, whose answer is heard after the death: the replica
    is hosted again (empty) and must confirm again before the image routes to it."""
    core, topic = core_with_topic((0,))
    rec = rc.Reconciler()
    rec.registered = {0}
    _, starts = rec.missing(rc.desired_replicas(core, rec.registered))
    rec.replica_started(starts[0].key, "replica", (0, 0))
    [host] = rec.step(0.0, lambda key: rc.partition_state(core, key))
    rec.hosted(host, "addr#0", 0.0)
    [tell] = rec.step(0.0, lambda key: rc.partition_state(core, key))
    rec.shard_died((0, 0), 0.1)
    rec.told(tell)
    assert rec.route(tell.key, 0) == ("replica", None)


def test_an_older_node_of_a_host_does_not_replace_the_one_whose_gateway_answered():
    """After a controller restart, Ray may still list a host's older node (not declared dead yet)
    beside the newer one whose gateway answered at adoption: the older one is not a replacement."""
    core, _ = core_with_topic()
    rec = rc.Reconciler()
    rec.adopt(core, {}, {2: ("gateway-2", "n2-new", True)}, lambda *a: None)
    older = node("n2-old", 2, "10.0.0.2")
    assert rec.claim(older, 2, [older, node("n2-new", 2, "10.0.0.2")]) == []
    assert rec.node_brokers == {"n2-new": 2}


def test_a_gateway_that_runs_elsewhere_than_its_broker_registered_from_gets_replicas_once_it_registers():
    core, topic = core_with_topic()
    rec = rc.Reconciler()
    rec.adopt(core, {}, {0: ("g0", "n0", True), 1: ("g1", "n1-new", True), 2: ("g2", "n2", False)}, lambda *a: None)
    assert rec.registered == {0, 2}  # broker 1 registered from n1: its replicas would start there


def test_a_broker_that_registers_from_another_node_leaves_its_old_shards():
    core, topic = core_with_topic((0,))
    rec = rc.Reconciler()
    rec.registered = {0}
    _, starts = rec.missing(rc.desired_replicas(core, rec.registered))
    rec.shards[(0, 0)] = "old shard"
    rec.replica_started(starts[0].key, "replica", (0, 0))
    actions = rec.broker_registered(0, "n0-new", "10.0.0.0", 9092, 2, previous_node_id="n0")
    assert rc.Kill(("shard", 0, 0), "old shard") in actions
    assert rec.replicas == {} and rec.shards == {}


def test_a_gateway_an_earlier_controller_started_is_its_nodes_broker_once_it_registers():
    rec = rc.Reconciler()
    rec.broker_registered(1, "n1", "10.0.0.1", 9092, 1)
    _, new = rec.nodes_seen([node("n1", 1, "10.0.0.1")])
    assert new == []  # no second gateway for broker 1


def test_a_replica_placed_elsewhere_is_stopped():
    """Desired placement is an input: a replica no longer placed (here: its topic deleted) stops."""
    core, topic = core_with_topic((0, 1))
    rec = rc.Reconciler()
    rec.registered = {0, 1}
    _, starts = rec.missing(rc.desired_replicas(core, rec.registered))
    for start in starts:
        rec.replica_started(start.key, f"replica-{start.key[2]}", (start.key[2], 0))
    placed = {k: b for k, b in rc.placed_replicas(core).items() if b == 0}  # moved off broker 1
    stops = rec.unwanted(placed, {topic.topic_id})
    assert stops == [rc.StopReplica((topic.topic_id, 0, 1), "replica-1")]
    assert list(rec.replicas) == [(topic.topic_id, 0, 0)]
    assert isinstance(topic.topic_id, uuid.UUID)
