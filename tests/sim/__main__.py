"""Replay or explore seeds of the replication simulation.

    python -m tests.sim --seed 42 --steps 300 -v       # replay one seed, printing every step
    python -m tests.sim --seeds 0:2000 --steps 300     # run a block of seeds, report the first failure
    python -m tests.sim --seeds 0:200 --break elect_outside_isr   # watch a deliberately broken rule fail
    python -m tests.sim --seeds 0:200 --unclean      # unclean leader election: acknowledged writes lost
    python -m tests.sim --controller --seed 7 --steps 600 -v     # the controller's reconciler (controller_world.py)
    python -m tests.sim --controller --seeds 0:500 --break route_after_shard_death

Each step checks the invariants of the partitions it may have changed; KRAY_SIM_CHECK_ALL=1 checks
every partition after every step (slower; it finds the same violations at the same steps).
"""
from __future__ import annotations

import argparse
import collections
import sys
import time

from tests.sim import controller_breaks, controller_world
from tests.sim.breaks import BREAKS, broken
from tests.sim.world import InvariantViolation, Simulation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", default="0:100", help="a block of seeds, START:STOP")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--controller", action="store_true",
                        help="simulate the controller's reconciler (tests/sim/controller_world.py) instead")
    parser.add_argument("--break", dest="break_rule", choices=sorted(BREAKS) + sorted(controller_breaks.BREAKS),
                        help="break one rule of the cores (with --controller: of the reconciler) on purpose")
    parser.add_argument("--unclean", action="store_true",
                        help="unclean.leader.election.enable=true (acknowledged writes may be lost)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step")
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
    else:
        start, stop = (int(x) for x in args.seeds.split(":"))
        seeds = list(range(start, stop))
    totals: collections.Counter = collections.Counter()
    started = time.perf_counter()
    if args.controller:
        breaking = controller_breaks.broken(args.break_rule)
        make = lambda seed: controller_world.ControllerSimulation(seed, verbose=args.verbose)  # noqa: E731
        violations = (controller_world.InvariantViolation,)
    else:
        breaking = broken(args.break_rule)
        make = lambda seed: Simulation(seed, verbose=args.verbose, unclean_leader_election_enable=args.unclean)  # noqa: E731
        violations = (InvariantViolation,)
    with breaking:
        for seed in seeds:
            sim = make(seed)
            try:
                sim.run(args.steps)
            except violations as violation:
                print(violation)
                return 1
            totals.update(sim.stats)
    elapsed = time.perf_counter() - started
    print(f"{len(seeds)} seeds x {args.steps} steps: all invariants held ({elapsed:.2f} s); "
          + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
