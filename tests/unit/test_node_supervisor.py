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
    assert "no sleep-not-there process for 0.3 s" in lines[0]
