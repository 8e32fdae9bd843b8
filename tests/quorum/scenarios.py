"""Targeted liveness scenarios on the simulated quorum (calm network: no drops, no crashes), each
seeded, each checking the invariants of world.py at every step as well:

  returning_voter  a follower cut off for 10 fetch timeouts (it pre-votes again and again, alone)
                   comes back: the healthy leader keeps its epoch (KIP-996), the follower catches up;
  isolated_leader  the leader is cut off alone, or with a minority: it takes its last write within
                   1.5 x fetch.timeout.ms of the cut (check quorum), the majority elects another
                   leader, and after the heal the old leader follows it.

Each returns its figures: counts, and *_ms durations (the aggregate keeps their maximum).
"""
from __future__ import annotations

from actors.controller.quorum import CHECK_QUORUM_TIMEOUT_FACTOR, Accepted, Role

from tests.quorum.world import CALM, LivenessViolation, Simulation

PROPOSE_EVERY_MS = 20
NEW_LEADER_BOUND_MS = 3000   # 15 fetch timeouts: see isolated_leader


def _scenario(seed: int, verbose: bool) -> Simulation:
    """A calm world (3 voters on even seeds, 5 on odd ones) with a settled leader."""
    sim = Simulation(seed, weights=CALM, voters=(3, 5)[seed % 2], verbose=verbose)
    sim.replay = f"python -m tests.quorum --scenarios --seed {seed} -v"
    sim.settle()
    return sim


def _run(sim: Simulation, ms: int, propose: bool = True) -> None:
    """Calm steps for `ms`, proposing to the live leader every PROPOSE_EVERY_MS (if `propose`)."""
    end, next_proposal = sim.now_ms + ms, sim.now_ms
    while sim.now_ms < end:
        sim.calm_step()
        if propose and sim.now_ms >= next_proposal:
            next_proposal = sim.now_ms + PROPOSE_EVERY_MS
            leader = sim.leader()
            if leader is not None:
                sim.propose(leader)


def returning_voter(seed: int, verbose: bool = False) -> dict[str, int]:
    sim = _scenario(seed, verbose)
    leader = sim.leader()
    epoch = leader.core.epoch
    follower = sim.nodes[sim.rng.choice([v for v in sim.voter_ids if v != leader.node_id])]
    fetch_timeout_ms = sim.config.fetch_timeout_ms
    sim.isolate(follower.node_id)
    sim.log(f"SCENARIO: voter {follower.node_id} cut off from leader {leader.node_id} (epoch {epoch})")
    _run(sim, 10 * fetch_timeout_ms)
    sim.blocked.clear()
    sim.log("SCENARIO: heal")
    _run(sim, 10 * fetch_timeout_ms)
    epochs = {n.node_id: n.core.epoch for n in sim.node_list}
    if leader.core.role is not Role.LEADER or max(epochs.values()) != epoch:
        sim.fail(f"a voter back from a partition deposed the healthy leader {leader.node_id} of epoch {epoch}: "
                 f"epochs now {epochs}", LivenessViolation)
    _run(sim, 2 * fetch_timeout_ms, propose=False)   # the last proposals commit everywhere
    c = follower.core
    if c.role is not Role.FOLLOWER or c.leader_id != leader.node_id or c.high_watermark != leader.core.high_watermark:
        sim.fail(f"voter {follower.node_id} did not rejoin leader {leader.node_id}: {sim.describe(follower)}",
                 LivenessViolation)
    return {"returning_voter_runs": 1, "returning_voter_caught_up_hw": c.high_watermark}


def isolated_leader(seed: int, verbose: bool = False) -> dict[str, int]:
    """Bounds: the cut-off leader's last write is within 1.5 x fetch.timeout.ms of the cut (its
    check-quorum timer was reset at most at the cut). The majority notices within
    fetch.timeout.ms, then needs a pre-vote and a vote round (an election timeout, 100..200 ms,
    plus backoffs on split votes): NEW_LEADER_BOUND_MS is far above the runs' maximum."""
    sim = _scenario(seed, verbose)
    leader = sim.leader()
    epoch = leader.core.epoch
    minority = {leader.node_id}
    if len(sim.voter_ids) == 5 and seed % 4 == 1:   # cut off with a follower: still a minority
        minority.add(sim.rng.choice([v for v in sim.voter_ids if v != leader.node_id]))
    for a in minority:
        for b in sim.nodes:
            if b not in minority:
                sim.cut(a, b)
                sim.cut(b, a)
    cut_ms = sim.now_ms
    sim.log(f"SCENARIO: leader {leader.node_id} of epoch {epoch} cut off with {sorted(minority)}")
    check_quorum_ms = int(sim.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
    last_accepted_ms = new_leader_ms = resigned_ms = None
    while sim.now_ms - cut_ms <= max(NEW_LEADER_BOUND_MS, 2 * check_quorum_ms):
        sim.calm_step()
        if leader.core.role is Role.LEADER and isinstance(sim.propose(leader), Accepted):
            last_accepted_ms = sim.now_ms
        if resigned_ms is None and leader.core.role is not Role.LEADER:
            resigned_ms = sim.now_ms
        new = sim.leader()
        if new_leader_ms is None and new is not None and new.node_id not in minority:
            new_leader_ms = sim.now_ms
        if new_leader_ms is not None and leader.core.role is not Role.LEADER:
            break
    if last_accepted_ms is not None and last_accepted_ms > cut_ms + check_quorum_ms:
        sim.fail(f"the cut-off leader {leader.node_id} accepted a write {last_accepted_ms - cut_ms} ms after the cut "
                 f"(check quorum: {check_quorum_ms} ms)", LivenessViolation)
    if leader.core.role is Role.LEADER or new_leader_ms is None:
        sim.fail(f"{NEW_LEADER_BOUND_MS} ms after cutting off leader {leader.node_id}: it is "
                 f"{leader.core.role.value}, the majority's new leader {'none' if new_leader_ms is None else 'elected'}",
                 LivenessViolation)
    sim.settle()
    if leader.core.role is not Role.FOLLOWER or leader.core.epoch <= epoch:
        sim.fail(f"after the heal the old leader {leader.node_id} is {sim.describe(leader)}", LivenessViolation)
    return {"isolated_leader_runs": 1,
            "isolated_leader_last_write_ms": (last_accepted_ms or cut_ms) - cut_ms,
            "isolated_leader_resigned_ms": resigned_ms - cut_ms,
            "isolated_leader_new_leader_ms": new_leader_ms - cut_ms}


SCENARIOS = {"returning_voter": returning_voter, "isolated_leader": isolated_leader}
