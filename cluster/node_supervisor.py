"""Keep a host's Ray node running: start `ray start --block ...` again whenever it ends or its
raylet is gone, so that a broker whose node Ray declared dead (a network cut longer than Ray's
health checks) comes back by itself when the host is reachable again, with its broker id (its
`kray-broker-id` label, or meta.properties beside its logs) and its data.

    python -m cluster.node_supervisor -- ray start --address=10.0.0.1:6379 --block \\
        --labels kray-broker-id=2

(or a service manager: systemd's `Restart=always` around the same `ray start --block`.) Why a
raylet check besides the exit: a raylet that Ray declared dead exits ("mistakenly marked as
dead"), and `ray start --block` ends only when one of its processes exits with an unexpected
code. So the supervisor also looks for a process named `raylet` under the command: gone for
RAYLET_GONE_S once it ran (or not there RAYLET_GRACE_S after a start), the node is stopped (its
processes killed) and started again. It never runs `ray stop` (that stops every Ray node of the
machine).

Restarts back off from RESTART_BACKOFF_S to RESTART_BACKOFF_S_MAX (a host still cut off from the
head fails to join; the first try after the heal comes at most that long after it), and reset
once a node ran STABLE_S. Ctrl-C / SIGTERM stop the node and the supervisor.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Callable

from actors.tcp_backoff import host_advice

RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_S_MAX = 8.0
STABLE_S = 60.0
CHECK_S = 0.5
RAYLET_GRACE_S = 30.0  # a starting node's raylet appears within this long
# a raylet that ran and is gone: the node is over (Ray declared it dead, or it crashed); `ray start
# --block` notices only an exit code it does not expect, within a second, so wait a little for it
RAYLET_GONE_S = 1.0
STOP_GRACE_S = 10.0


def descendants(pid: int) -> dict[int, str]:
    """pid -> process name of every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(rest[1]), []).append(int(entry))
        names[int(entry)] = name
    found, todo = {}, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found[p] = names.get(p, "")
        todo.extend(children.get(p, []))
    return found


def watch_verdict(seen: bool, running_s: float, missing_s: float, grace_s: float, gone_s: float) -> str | None:
    """Whether a node whose watched process (WATCHED) is not running now is over, and why: one
    that ran and has been gone `gone_s`, or never appeared within `grace_s` of the start."""
    if seen and missing_s >= gone_s:
        return f"its WATCHED exited and has been gone {missing_s:.1f} s (Ray declared the node dead, or it crashed)"
    if not seen and running_s >= grace_s:
        return f"no WATCHED process {grace_s:g} s after the start"
    return None


class NodeSupervisor:
    def __init__(self, command: list[str], *, watch: str | None = "raylet", say: Callable[[str], None] = print,
                 raylet_grace_s: float = RAYLET_GRACE_S, raylet_gone_s: float = RAYLET_GONE_S,
                 check_s: float = CHECK_S):
        self.command = command
        self.watch = watch
        self.say = say
        self.raylet_grace_s = raylet_grace_s
        self.raylet_gone_s = raylet_gone_s
        self.check_s = check_s
        self.starts = 0

    def _say(self, text: str) -> None:
        self.say(f"[{datetime.now().strftime('%H:%M:%S')}] {text}")

    def run(self, stop: threading.Event) -> None:
        backoff_s = RESTART_BACKOFF_S
        while not stop.is_set():
            started = time.monotonic()
            self.starts += 1
            if self.starts > 1:
                self._say(f"starting the Ray node again (start {self.starts}): {' '.join(self.command[:2])} ...")
            process = subprocess.Popen(self.command, start_new_session=True)
            why = self._watch(process, stop)
            self._stop(process)
            if stop.is_set():
                return
            if time.monotonic() - started >= STABLE_S:
                backoff_s = RESTART_BACKOFF_S
            self._say(f"the Ray node stopped ({why}): starting it again in {backoff_s:g} s")
            if stop.wait(backoff_s):
                return
            backoff_s = min(backoff_s * 2, RESTART_BACKOFF_S_MAX)

    def _watch(self, process: subprocess.Popen, stop: threading.Event) -> str:
        """Wait until the node ends: why, in words."""
        started = time.monotonic()
        seen = False
        missing_since = None
        while not stop.wait(self.check_s):
            code = process.poll()
            if code is not None:
                return f"`{' '.join(self.command[:2])}` exited with code {code}"
            if self.watch is None:
                continue
            now = time.monotonic()
            if self.watch in descendants(process.pid).values():
                if not seen and self.starts > 1:
                    self._say(f"the Ray node runs again ({self.watch} up {now - started:.1f} s after the start)")
                seen, missing_since = True, None
                continue
            missing_since = now if missing_since is None else missing_since
            why = watch_verdict(seen, now - started, now - missing_since, self.raylet_grace_s, self.raylet_gone_s)
            if why:
                return why.replace("WATCHED", self.watch)
        return "stopped"

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        """End the command and everything it started (its own process group and session)."""
        below = list(descendants(process.pid))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)  # its process group: also what was orphaned when the raylet died
            except (ProcessLookupError, PermissionError):
                pass
            for pid in below:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            try:
                process.wait(STOP_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                continue


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m cluster.node_supervisor -- ray start --address=HOST:PORT --block [...]", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if advice := host_advice():
        print(f"kray node supervisor: {advice}", file=sys.stderr, flush=True)
    NodeSupervisor(args, say=lambda line: print(line, flush=True)).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
