"""What one idle broker costs (issue 37): `kray start` on this machine, nothing connected, and every
process of its session (Kray's driver, Ray's GCS, raylet, dashboard, agents, monitors, workers and
Kray's actors) sampled: time to ready, resident memory (RSS, and PSS, which shares libraries fairly),
CPU over a quiet window, per process. Goals: <= 1 GB RSS, <= 0.05 cores, ready in <= 10 s.

    python -m benchmarks.idle_broker                       # one run, appended to benchmarks/results/idle-broker.*
    python -m benchmarks.idle_broker --label "no prestart" --env RAY_xxx=0   # a variant (environment of kray start)

Read /work/NOTES.log first on a shared machine: other work skews CPU and the ready time.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
TICKS_S = os.sysconf("SC_CLK_TCK")
GOALS = {"rss_mb": 1024, "cores": 0.05, "ready_s": 10.0}


def session_pids(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def name_of(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    first = cmd[0].decode(errors="replace")
    if first.startswith("ray::"):
        return re.sub(r"\..*$", "", first.strip())  # ray::GatewayActor.until_stopped -> ray::GatewayActor
    args = [c.decode(errors="replace") for c in cmd if c]
    for arg in args[:3]:
        base = os.path.basename(arg)
        if base.endswith(".py"):
            return base
        if base in ("gcs_server", "raylet"):
            return base
    return "kray start" if "start" in args else os.path.basename(first)


def cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError):
        return 0


def memory_kb(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def measure(settle_s: float, window_s: float, env: dict[str, str], overrides: list[str]) -> dict:
    data = tempfile.mkdtemp(prefix="kray-idle-")
    cmd = [str(Path(sys.executable).parent / "kray"), "start", "--port", "0", "--data-dir", data]
    for o in overrides:
        cmd += ["--override", o]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            stdin=subprocess.DEVNULL, env=os.environ | {"PYTHONUNBUFFERED": "1"} | env)
    try:
        for line in proc.stdout:
            if "Kray is ready" in line:
                break
        else:
            raise RuntimeError("kray start did not become ready")
        ready_s = time.monotonic() - started
        time.sleep(settle_s)
        pids = session_pids(proc.pid)
        before = {pid: cpu_ticks(pid) for pid in pids}
        time.sleep(window_s)
        per: dict[str, dict] = {}
        for pid in pids:
            rss, pss = memory_kb(pid)
            if rss == 0 and pss == 0:
                continue
            entry = per.setdefault(name_of(pid), {"processes": 0, "rss_mb": 0.0, "pss_mb": 0.0, "cores": 0.0})
            entry["processes"] += 1
            entry["rss_mb"] += rss / 1024
            entry["pss_mb"] += pss / 1024
            entry["cores"] += (cpu_ticks(pid) - before.get(pid, 0)) / TICKS_S / window_s
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    for entry in per.values():
        for k in ("rss_mb", "pss_mb"):
            entry[k] = round(entry[k], 1)
        entry["cores"] = round(entry["cores"], 4)
    total = {"processes": sum(e["processes"] for e in per.values()),
             "rss_mb": round(sum(e["rss_mb"] for e in per.values()), 1),
             "pss_mb": round(sum(e["pss_mb"] for e in per.values()), 1),
             "cores": round(sum(e["cores"] for e in per.values()), 4)}
    return {"ready_s": round(ready_s, 2), "total": total,
            "by_process": dict(sorted(per.items(), key=lambda kv: -kv[1]["pss_mb"]))}


def markdown(runs: list[dict]) -> str:
    out = ["# One idle broker: memory, CPU, time to ready", "",
           "`python -m benchmarks.idle_broker` (benchmarks/idle_broker.py): `kray start` with nothing connected; every "
           "process of its session sampled after a settle time, CPU over a quiet window. Goals (issue 37): "
           f"<= {GOALS['rss_mb']} MB RSS, <= {GOALS['cores']} cores, ready in <= {GOALS['ready_s']:g} s.", "",
           "| run | label | load (1 min) | ready s | processes | RSS MB | PSS MB | cores |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        t = r["total"]
        out.append(f"| {r['at']} | {r['label']} | {r['load_1m']} | {r['ready_s']} | {t['processes']} | {t['rss_mb']} | "
                   f"{t['pss_mb']} | {t['cores']} |")
    last = runs[-1]
    out += ["", f"## Where it goes (last run: {last['label']}, {last['at']})", "",
            "| process | count | RSS MB | PSS MB | cores |", "|---|---|---|---|---|"]
    for name, e in last["by_process"].items():
        out.append(f"| `{name}` | {e['processes']} | {e['rss_mb']} | {e['pss_mb']} | {e['cores']} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="default")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds after ready before sampling (default 20)")
    ap.add_argument("--window", type=float, default=30.0, help="seconds of CPU sampling (default 30)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment of kray start")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a kray start --override")
    ap.add_argument("--out", default=str(RESULTS / "idle-broker"), help="results path without extension")
    args = ap.parse_args(argv)
    env = dict(e.split("=", 1) for e in args.env)
    run = {"at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "label": args.label, "env": env,
           "overrides": args.override, "load_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    run |= measure(args.settle, args.window, env, args.override)
    out = Path(args.out)
    runs = json.loads(out.with_suffix(".json").read_text())["runs"] if out.with_suffix(".json").exists() else []
    runs.append(run)
    out.with_suffix(".json").write_text(json.dumps({"goals": GOALS, "runs": runs}, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(runs))
    print(markdown([run]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
