"""Starting a Ray node on a busy machine: a start that missed Ray's 30 s window is tried again.

Ray gives a new node's raylet 30 s to register with the GCS (a constant inside Ray's `Node`, not a
setting), then raises "The current node timed out during startup" and leaves running what that
attempt started (GCS, raylet, agents). On a machine whose CPUs are all taken (two cores under a
test suite or a build) the window is missed now and then, though the raylet would register a few
seconds later. `start_ray_node` ends what the failed attempt left and starts the node again.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable, TypeVar

from cluster.process_tree import children, command_line, signal_all

RAY_NODE_TIMED_OUT = "timed out during startup"  # Ray's words when a new raylet does not register within 30 s
RAY_NODE_START_ATTEMPTS = 3
# how Ray's node processes are told apart from other children of the process that starts the node
# (a test's clients, a JVM): Ray's binaries, its Python entry points, its workers' titles
RAY_PROCESS_MARKS = ("gcs_server", "raylet", "/ray/_private/", "/ray/dashboard/", "/ray/autoscaler/", "ray::")

T = TypeVar("T")


def is_ray_process(command: str) -> bool:
    return any(mark in command for mark in RAY_PROCESS_MARKS)


def timed_out(error: BaseException) -> bool:
    """Whether `error` is Ray giving up on a new node's raylet registering in time."""
    return RAY_NODE_TIMED_OUT in str(error)


def end_ray_processes_since(before: set[int]) -> list[int]:
    """End the Ray processes this one started since `before` (its children then), with everything
    below them (a raylet's agents and workers); returns their pids. Processes below this one's other
    Ray nodes (a LocalCluster's raylets start workers at any time) and its other children (a test's
    clients) are left alone."""
    stopped: list[int] = []
    todo = [p for p in children() if p not in before and is_ray_process(command_line(p))]
    while todo:  # stopped top-down, so that none starts another process meanwhile, then all killed
        signal_all(todo, signal.SIGSTOP)
        stopped += todo
        todo = [c for p in todo for c in children(p) if c not in stopped]
    signal_all(stopped, signal.SIGKILL)
    return stopped


def start_ray_node(start: Callable[[], T], say: Callable[[str], None] | None = None,
                   attempts: int = RAY_NODE_START_ATTEMPTS, end_attempt: Callable[[], int] | None = None) -> T:
    """`start()` (a call that starts a Ray node in this process: ray.init of a local Ray,
    ray.cluster_utils.Cluster(...) or its add_node); where Ray gives up on the raylet registering,
    what that attempt started is ended and `start()` is called again, up to `attempts` times.
    `end_attempt()` ends a failed attempt's processes where they are not this process's children
    (a `ray start` on a host of the hosts harness), returning how many it ended.
    `say` is told of each new attempt. Any other failure, and the last attempt's, is raised."""
    for attempt in range(1, attempts + 1):
        before = set(children())
        begun = time.monotonic()
        try:
            return start()
        except Exception as e:
            if not timed_out(e) or attempt == attempts:
                raise
            ended = end_attempt() if end_attempt is not None else len(end_ray_processes_since(before))
            if say is not None:
                say(f"Ray's new node did not register with its GCS within Ray's 30 s ({time.monotonic() - begun:.0f} s "
                    f"in all; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs): ended its "
                    f"{ended} processes, starting it again (attempt {attempt + 1} of {attempts})")
    raise AssertionError("unreachable")
