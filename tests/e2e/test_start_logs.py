"""`kray start` says where its logs are; its actors write server.log there (Kafka's name) at the
level asked for, with Ray's own logs linked beside it."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

KRAY = str(Path(sys.executable).parent / "kray")


def start_and_stop(*args) -> str:
    proc = subprocess.Popen([KRAY, "start", "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, stdin=subprocess.DEVNULL,
                            env=os.environ | {"PYTHONUNBUFFERED": "1"})
    lines = []
    deadline = time.monotonic() + 180
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.startswith("Logs:") or time.monotonic() > deadline:
                break
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        lines += proc.communicate(timeout=60)[0].splitlines()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return "\n".join(lines)


def test_kray_start_says_where_its_logs_are_and_writes_them_there(tmp_path):
    output = start_and_stop("--data-dir", str(tmp_path / "data"))
    logs = (tmp_path / "data" / "logs").resolve()
    assert f"Logs: {logs}/server.log (Kray's actors, at INFO), {logs}/ray (Ray's)" in output, output
    text = (logs / "server.log").read_text()
    assert " INFO kray.controller " in text and "broker 0 registered" in text
    assert (logs / "ray").is_symlink() and any((logs / "ray").glob("raylet*"))


def test_log_dir_and_log_level_are_kray_starts_options(tmp_path):
    output = start_and_stop("--data-dir", str(tmp_path / "data"), "--log-dir", str(tmp_path / "elsewhere"),
                            "--log-level", "WARN")
    assert f"Logs: {tmp_path.resolve()}/elsewhere/server.log (Kray's actors, at WARN)" in output, output
    text = (tmp_path / "elsewhere" / "server.log").read_text() if (tmp_path / "elsewhere" / "server.log").exists() \
        else ""
    assert " INFO " not in text
    assert not (tmp_path / "data" / "logs").exists()
