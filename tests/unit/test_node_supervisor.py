"""The host's node supervisor (cluster/node_supervisor.py) with stand-in commands: it starts a
command again when it ends, or when the process it watches is gone."""
import sys
import threading

from cluster import node_supervisor
from cluster.node_supervisor import NodeSupervisor


def _run_until(supervisor: NodeSupervisor, starts: int, timeout_s: float = 20) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    for _ in range(int(timeout_s / 0.05)):
        if supervisor.starts >= starts:
            break
        stop.wait(0.05)
    stop.set()
    thread.join(15)
    assert not thread.is_alive()


def test_starts_the_command_again_when_it_exits(monkeypatch):
    monkeypatch.setattr(node_supervisor, "RESTART_BACKOFF_S", 0.05)
    lines = []
    supervisor = NodeSupervisor([sys.executable, "-c", "pass"], watch=None, say=lines.append, check_s=0.05)
    _run_until(supervisor, starts=3)
    assert supervisor.starts >= 3
    assert "exited with code 0): starting it again" in lines[0]


def test_starts_it_again_when_the_watched_process_is_gone(monkeypatch):
    monkeypatch.setattr(node_supervisor, "RESTART_BACKOFF_S", 0.05)
    lines = []
    # a parent that outlives its child "sleep" (as `ray start --block` outlives a raylet that exited)
    command = ["sh", "-c", "sleep 0.3; sleep 30"]
    supervisor = NodeSupervisor(command, watch="sleep-not-there", say=lines.append, raylet_grace_s=0.3,
                                check_s=0.05)
    _run_until(supervisor, starts=2)
    assert "no sleep-not-there process 0.3 s after the start" in lines[0]


def test_a_watched_process_that_ran_and_exited_ends_the_node_at_once(monkeypatch):
    """A raylet that Ray declared dead exits while `ray start --block` may go on: the node is
    started again RAYLET_GONE_S later, not after the start-up grace."""
    monkeypatch.setattr(node_supervisor, "RESTART_BACKOFF_S", 0.05)
    with open("/proc/self/comm") as f:
        comm = f.read().strip()  # this interpreter's process name: the stand-in raylet's
    command = ["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(0.5)'; sleep 30"]
    lines = []
    supervisor = NodeSupervisor(command, watch=comm, say=lines.append, raylet_grace_s=60, raylet_gone_s=0.2,
                                check_s=0.05)
    _run_until(supervisor, starts=2, timeout_s=10)
    assert supervisor.starts >= 2, lines
    assert f"its {comm} exited and has been gone" in lines[0]


def test_watch_verdict():
    verdict = node_supervisor.watch_verdict
    assert verdict(seen=False, running_s=5, missing_s=5, grace_s=30, gone_s=1) is None  # still starting
    assert "30 s after the start" in verdict(seen=False, running_s=30, missing_s=30, grace_s=30, gone_s=1)
    assert verdict(seen=True, running_s=100, missing_s=0.5, grace_s=30, gone_s=1) is None  # a blink
    assert "gone 1.0 s" in verdict(seen=True, running_s=100, missing_s=1.0, grace_s=30, gone_s=1)
