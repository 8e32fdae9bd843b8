"""cluster/ray_node_start.py: a Ray node start that missed Ray's 30 s window ends what it left and tries again."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.process_tree import descendants
from cluster.ray_node_start import RAY_NODE_START_ATTEMPTS, end_ray_processes_since, is_ray_process, start_ray_node

RAY_TIMED_OUT = Exception("The current node timed out during startup. This could happen because some of the raylet "
                          "failed to startup or the GCS has become overloaded.")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_rays_processes_are_told_from_others():
    assert is_ray_process("/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server --gcs_server_port=0")
    assert is_ray_process("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --node_id=ab")
    assert is_ray_process("/venv/bin/python -u /venv/lib/python3.11/site-packages/ray/dashboard/agent.py --x")
    assert is_ray_process("/venv/bin/python /venv/lib/python3.11/site-packages/ray/_private/log_monitor.py")
    assert is_ray_process("ray::IDLE")
    assert not is_ray_process("java -cp kafka.jar kafka.Kafka server.properties")
    assert not is_ray_process("/venv/bin/python -m pytest tests/unit")


def test_only_rays_processes_started_since_are_ended():
    """What a failed attempt started is ended; a process that was there before, and one that is not Ray's (a
    test's client started meanwhile), are left alone."""
    old = subprocess.Popen(SLEEPER + ["ray::IDLE"])
    try:
        before = set(descendants())
        ray_like = subprocess.Popen(SLEEPER + ["ray::IDLE"])
        other = subprocess.Popen(SLEEPER + ["a-client"])
        time.sleep(0.2)
        assert end_ray_processes_since(before) == [ray_like.pid]
        assert ray_like.wait(timeout=5) < 0
        assert old.poll() is None and other.poll() is None
        other.kill()
        other.wait()
    finally:
        old.kill()
        old.wait()


def test_what_a_new_ray_process_started_is_ended_with_it_and_other_nodes_workers_are_not():
    """A raylet's agents and workers go with it; a worker that an older node's raylet starts meanwhile (a
    LocalCluster's raylets are this process's children too) stays."""
    spawner = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(60)"]
    old_raylet = subprocess.Popen(spawner + SLEEPER + ["ray::IDLE", "raylet"])
    try:
        before = set(descendants())
        time.sleep(0.5)  # (the old raylet's worker starts after `before`)
        new_raylet = subprocess.Popen(spawner + SLEEPER + ["ray::IDLE", "raylet"])
        time.sleep(0.5)
        worker, old_worker = descendants(new_raylet.pid), descendants(old_raylet.pid)
        assert len(worker) == 1 and len(old_worker) == 1
        ended = end_ray_processes_since(before)
        assert sorted(ended) == sorted([new_raylet.pid] + worker)
        assert new_raylet.wait(timeout=5) < 0
        assert old_raylet.poll() is None and all(Path(f"/proc/{p}").exists() for p in old_worker)
    finally:
        old_raylet.kill()
        old_raylet.wait()
        for p in old_worker:
            os.kill(p, signal.SIGKILL)


def test_a_start_that_timed_out_is_tried_again_after_ending_what_it_left():
    said, calls, left = [], [], []

    def start():
        calls.append(1)
        if len(calls) < 3:
            left.append(subprocess.Popen(SLEEPER + ["ray::IDLE"]))  # what Ray leaves when it gives up
            raise RAY_TIMED_OUT
        return "node"

    assert start_ray_node(start, said.append) == "node"
    assert len(calls) == 3
    assert all(p.wait(timeout=5) < 0 for p in left)  # ended before the next attempt
    assert [line.rsplit("(", 1)[1] for line in said] == ["attempt 2 of 3)", "attempt 3 of 3)"]
    assert all("ended its 1 processes" in line and "load average" in line for line in said)


def test_the_last_attempt_and_any_other_failure_are_raised():
    calls = []

    def times_out():
        calls.append(1)
        raise RAY_TIMED_OUT

    with pytest.raises(Exception, match="timed out during startup"):
        start_ray_node(times_out, attempts=2)
    assert len(calls) == 2

    def fails():
        calls.append(1)
        raise ValueError("a port in use")

    calls.clear()
    with pytest.raises(ValueError):
        start_ray_node(fails)
    assert len(calls) == 1


def test_a_caller_that_ends_an_attempt_itself_is_retried_the_same_number_of_times():
    """The hosts harness ends a failed `ray start`'s processes itself (they are in a network namespace, not this
    process's children): end_attempt is called after each attempt that timed out, and the attempts are the same."""
    calls, ended = [], []

    def times_out():
        calls.append(1)
        raise RuntimeError("Exception: The current node timed out during startup. This could happen ...")
    with pytest.raises(RuntimeError):
        start_ray_node(times_out, end_attempt=lambda: ended.append(1) or 5)
    assert len(calls) == RAY_NODE_START_ATTEMPTS and len(ended) == RAY_NODE_START_ATTEMPTS - 1
