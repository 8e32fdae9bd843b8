"""Replay or explore seeds of the quorum simulation.

    python -m tests.quorum --seed 42 --steps 2000 -v          # replay one seed, printing every step
    python -m tests.quorum --seeds 0:5000 --steps 2000        # a block of seeds; stops at the first failure
    python -m tests.quorum --seeds 0:300 --break grant_two_votes_per_epoch   # watch a planted bug get caught
    python -m tests.quorum --scenarios --seeds 0:200          # the targeted liveness scenarios

Every run ends with `settle` (heal, restart, then a leader and a commit within a bound) unless
--no-settle. See tests/quorum/world.py for the invariants.
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time

from tests.quorum.breaks import BREAKS, broken
from tests.quorum.scenarios import SCENARIOS
from tests.quorum.world import InvariantViolation, Simulation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.quorum", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", default="0:100", help="a block of seeds, START:STOP")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--break", dest="break_rule", choices=sorted(BREAKS), help="plant one bug on purpose")
    parser.add_argument("--scenarios", action="store_true", help="run the liveness scenarios instead")
    parser.add_argument("--no-settle", action="store_true", help="skip the liveness check at the end of a run")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step")
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
    else:
        start, stop = (int(x) for x in args.seeds.split(":"))
        seeds = list(range(start, stop))
    if args.break_rule and BREAKS[args.break_rule].caught_by != "simulation" and not args.scenarios:
        print(f"note: {args.break_rule} breaks liveness only; the scenario {BREAKS[args.break_rule].caught_by} "
              f"catches it (add --scenarios)")
    totals: collections.Counter = collections.Counter()
    settle_ms: list[int] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    with broken(args.break_rule) as options:
        for seed in seeds:
            try:
                if args.scenarios:
                    for scenario in SCENARIOS.values():
                        for key, value in scenario(seed, verbose=args.verbose).items():
                            if key.endswith("_ms"):
                                totals[key + "_max"] = max(totals[key + "_max"], value)
                            else:
                                totals[key] += value
                    continue
                sim = Simulation(seed, verbose=args.verbose, **options.get("simulation", {}))
                sim.run(args.steps)
                if not args.no_settle:
                    settle_ms.append(sim.settle())
            except InvariantViolation as violation:
                print(violation)
                return 1
            totals.update(sim.stats)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    what = "scenarios" if args.scenarios else f"x {args.steps} steps"
    print(f"{len(seeds)} seeds {what}: all invariants held ({elapsed:.1f} s, {cpu:.1f} s CPU)")
    if settle_ms:
        print(f"settle after healing: median {statistics.median(settle_ms)} ms, max {max(settle_ms)} ms")
    print(", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
