"""Start and stop a real `kray start` process for end-to-end tests (no mock of our own broker)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

READY = re.compile(r"bootstrap=(\S+)")
STARTUP_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KrayProcess:
    def __init__(self, data_dir: Path, *, port: int | None = None, overrides: tuple[str, ...] = ()):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.port_chosen_here = port is None
        self.overrides = overrides
        self.proc: subprocess.Popen | None = None
        self.bootstrap: str | None = None
        self.output: list[str] = []

    def start(self) -> str:
        """Start and wait until ready. A free port picked here can be taken by another process
        (an outgoing connection gets its ephemeral port from the same range) before kray binds
        it: then another free port is tried, twice at most."""
        for attempt in range(3):
            try:
                return self._start()
            except RuntimeError as e:
                if not (self.port_chosen_here and "address already in use" in str(e)) or attempt == 2:
                    raise
                self.output.clear()
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start(self) -> str:
        kray = Path(sys.executable).parent / "kray"
        cmd = [str(kray), "start", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        for o in self.overrides:
            cmd += ["--override", o]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.output.append(line.rstrip())
                m = READY.search(line)
                if m and not ready.is_set():
                    self.bootstrap = m.group(1)
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("kray start did not become ready:\n" + "\n".join(self.output[-50:]))
        return self.bootstrap

    def stop(self, timeout_s: float = 60) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        finally:
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None


def wait_for(condition, timeout_s: float, interval_s: float = 0.5) -> bool:
    """Poll `condition` (an exception counts as not yet) until it holds or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except Exception:
            pass
        time.sleep(interval_s)
    return False


class NodesProcess:
    """`kray start --nodes N --port 0` as a user runs it: `start()` waits for "Kray is ready" and returns the
    first bootstrap address; `stop()` sends SIGTERM to its process group (SIGKILL after 90 s); `output` keeps
    every line it printed."""

    def __init__(self, data_dir: Path, nodes: int = 3):
        self.data_dir, self.nodes = Path(data_dir), nodes
        self.output: list[str] = []
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 240) -> str:
        kray = str(Path(sys.executable).parent / "kray")
        self.proc = subprocess.Popen([kray, "start", "--nodes", str(self.nodes), "--port", "0", "--data-dir",
                                      str(self.data_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, stdin=subprocess.DEVNULL,
                                     env=os.environ | {"PYTHONUNBUFFERED": "1"})
        threading.Thread(target=lambda: self.output.extend(line.rstrip() for line in self.proc.stdout),
                         daemon=True).start()
        assert wait_for(lambda: any("Kray is ready" in line for line in self.output), timeout_s), \
            "\n".join(self.output)
        return next(line for line in self.output if "Kray is ready" in line).split("bootstrap=")[1].split(",")[0]

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
