"""Two checkouts of Kray side by side on one machine in one run: the produce/fetch benchmark
(benchmarks.throughput, Kray only) and the share benchmark (benchmarks.share, phase 1) run for each in
turn, A B A B ..., so that what the machine does meanwhile falls on both alike. Made for issue 34 (the
restructuring must not cost speed): the checkout before its first change against main.

    git worktree add --detach /tmp/kray-before 79e3b5b
    python -m benchmarks.before_after --before /tmp/kray-before --after . --rounds 3
    python -m benchmarks.before_after --summarize DIR      # the tables again from a run's directory

Each run of a checkout uses that checkout's code (PYTHONPATH), also in `kray start` and Ray's workers.
Figures: medians over the rounds (and the throughput benchmark's repeats). The broker's CPU seconds per
phase are the figure to compare on a busy machine: records per second follow the machine's load, CPU
seconds much less. Results: benchmarks/results/before-after.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SIDES = ("before", "after")


def run_round(side: str, tree: Path, out: Path, records: int, share_records: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    for name, args in (("tp", ["benchmarks.throughput", "--targets", "kray", "--records", str(records),
                                "--repeats", "3"]),
                       ("share", ["benchmarks.share", "--records", str(share_records), "--skip-scaling"])):
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        print(f"{time.strftime('%H:%M:%S')} {side}: {name} (load {os.getloadavg()[0]:.1f})", flush=True)
        with open(out / f"{name}.log", "w") as log:
            subprocess.run([sys.executable, "-m", *args, "--out", str(target)], cwd=tree, env=env,
                           stdout=log, stderr=subprocess.STDOUT, timeout=900)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize(directory: Path) -> dict:
    """Per side: every figure seen (runs that failed to start are counted, not averaged)."""
    summary = {}
    for side in SIDES:
        figures: dict[str, list[float]] = {}
        failed = 0
        for path in sorted(directory.glob(f"{side}-*/tp/throughput.json")):
            for run in json.loads(path.read_text())["targets"]["kray"]["runs"]:
                for phase in ("produce", "fetch"):
                    figures.setdefault(f"{phase} broker CPU s", []).append(run[phase]["broker_cpu_s"])
                    figures.setdefault(f"{phase} MB/s", []).append(run[phase]["mb_s"])
        for path in sorted(directory.glob(f"{side}-*/share/share.json")):
            data = json.loads(path.read_text())
            if not data.get("ok"):
                failed += 1
                continue
            results = data["results"]
            for phase, label in (("plain_fetch", "plain fetch"), ("share", "share (3 consumers)")):
                figures.setdefault(f"{label} broker CPU s", []).append(results[phase]["broker_cpu_s"])
                figures.setdefault(f"{label} records/s", []).append(results[phase]["rec_s"])
        summary[side] = {"failed_share_runs": failed,
                         "figures": {k: {"median": _median(v), "min": min(v), "max": max(v), "n": len(v)}
                                     for k, v in figures.items()}}
    return summary


def markdown(summary: dict, header: str) -> str:
    lines = [header, "", "| figure | before (median, min-max, n) | after (median, min-max, n) | after / before |",
             "|---|---:|---:|---:|"]
    before, after = summary["before"]["figures"], summary["after"]["figures"]
    for key in before:
        b, a = before[key], after.get(key)
        if a is None:
            continue
        ratio = a["median"] / b["median"] if b["median"] else float("nan")
        lines.append(f"| {key} | {b['median']:g} ({b['min']:g}-{b['max']:g}, {b['n']}) | "
                     f"{a['median']:g} ({a['min']:g}-{a['max']:g}, {a['n']}) | {ratio:.2f} |")
    lines.append("")
    lines.append(f"Share runs that did not start (a timeout of Ray's start on the loaded machine): before "
                 f"{summary['before']['failed_share_runs']}, after {summary['after']['failed_share_runs']}.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="the checkout before the change")
    ap.add_argument("--after", type=Path, help="the checkout after it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000, help="throughput benchmark records per run")
    ap.add_argument("--share-records", type=int, default=200_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kray-before-after"), help="the runs' directory")
    ap.add_argument("--summarize", type=Path, help="only summarize an earlier run's directory")
    ap.add_argument("--note", default="", help="a line for the Markdown (the machine's state, the commits)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    directory = args.summarize
    if directory is None:
        if args.before is None or args.after is None:
            ap.error("--before and --after (or --summarize DIR)")
        directory = args.work
        for n in range(1, args.rounds + 1):
            for side, tree in zip(SIDES, (args.before, args.after)):
                run_round(side, tree.resolve(), directory / f"{side}-{n}", args.records, args.share_records)
    summary = summarize(directory)
    header = (f"# Before and after\n\n{datetime.now(timezone.utc).isoformat(timespec='seconds')} · "
              f"{os.cpu_count()} CPUs · runs alternating before/after in one session. {args.note}".rstrip())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "before-after.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "before-after.md").write_text(markdown(summary, header))
    print(markdown(summary, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
