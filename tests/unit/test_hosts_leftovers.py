"""A crashed hosts run's processes outside its hosts (the GCS's Redis of tests/hosts/test_head_failure.py)
are ended by the next run's clean-up (cluster/hosts/net.py: record_daemon, _kill_leftover_daemons)."""
import shutil
import socket
import subprocess
import time

import pytest

from cluster.hosts.net import _kill_leftover_daemons, record_daemon


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_a_recorded_redis_of_a_crashed_run_is_ended(tmp_path):
    redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(_free_port()), "--save", "",
                              "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        record_daemon(tmp_path, redis.pid, "redis-server")
        assert _kill_leftover_daemons(tmp_path) == [f"redis-server (pid {redis.pid})"]
        assert redis.wait(10) != 0
    finally:
        redis.kill()


def test_a_recorded_pid_now_of_another_program_is_left_alone(tmp_path):
    other = subprocess.Popen(["sleep", "30"])
    try:
        record_daemon(tmp_path, other.pid, "redis-server")
        assert _kill_leftover_daemons(tmp_path) == []
        assert other.poll() is None
    finally:
        other.kill()
