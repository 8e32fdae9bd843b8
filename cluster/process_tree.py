"""Every process `kray start` started, or Ray started for it, ends when `kray start` does.

Ray's node processes (GCS, raylet, dashboard, agents, workers) are this process's children and
grandchildren; when one of them exits before its children (a raylet stopped while its agents
still run), those children would be handed to init and outlive Kray. `adopt_orphans()` makes
this process their "child subreaper" (Linux prctl), so they are handed to it instead, and
`end_descendants()` ends whatever is still below it: SIGTERM, a grace period, then SIGKILL.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
END_GRACE_S = 5.0


def adopt_orphans() -> bool:
    """Become the child subreaper of this process's descendants (Linux); False where not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":  # a zombie has ended; it only waits to be reaped
                parents[int(entry)] = int(fields[1])
    return parents


def children(pid: int | None = None) -> list[int]:
    """The live processes whose parent is `pid` (default: this process)."""
    root = os.getpid() if pid is None else pid
    return [child for child, parent in _parents().items() if parent == root]


def descendants(pid: int | None = None) -> list[int]:
    """The live processes below `pid` (default: this process), parents before their children."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(root, []))
    while todo:
        p = todo.pop(0)
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def command_line(pid: int) -> str:
    """The process's command line, its arguments joined by spaces ("" once it has gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def signal_all(pids, sig) -> None:
    """Send `sig` to each of `pids` (those gone already, or not ours, are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_descendants(grace_s: float = END_GRACE_S, keep=()) -> int:
    """End every live process below this one (but `keep`'s): SIGTERM, up to `grace_s` for them to
    exit, then SIGKILL. Returns how many there were."""
    keep = set(keep)
    left = [p for p in descendants() if p not in keep]
    ended = len(left)
    if left:
        signal_all(left, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while True:
            _reap()
            left = [p for p in descendants() if p not in keep]  # (orphans of those just ended come here too)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        deadline = time.monotonic() + grace_s
        while left and time.monotonic() < deadline:
            signal_all(left, signal.SIGKILL)
            time.sleep(0.1)
            _reap()
            left = [p for p in descendants() if p not in keep]
    _reap()
    return ended
