"""Kill an actor and wait until Ray has really restarted it.

`ray.kill` only asks: it returns before the process dies. A test that probes the broker right
after the call may still talk to the old process and then lose a request in flight when the kill
lands. Waiting for a new process id makes "after the restart" mean what it says.
"""
import os
import time

import ray

RESTART_WAIT_S = 60


def _pid(actor, timeout_s: float) -> int:
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=timeout_s)


def kill_and_await_restart(actor) -> None:
    before = _pid(actor, RESTART_WAIT_S)
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + RESTART_WAIT_S
    while time.monotonic() < deadline:
        try:
            if _pid(actor, 5) != before:
                return
        except Exception:  # unavailable while Ray restarts it
            pass
        time.sleep(0.2)
    raise AssertionError(f"actor was not restarted within {RESTART_WAIT_S} s")
