"""`kray broker --kill/--restart/--pause/--resume N`: one broker of a running `kray start --nodes N`
(or `kray chaos`) killed, started again, stalled or woken, from another terminal, as
LocalCluster.kill_node & co. do from Python.

`kray start --nodes` listens on a Unix socket in its data directory (`kray-start.sock`, only its own
user may connect); `kray broker` sends one line (`kill 2`, `kill-graceful 2`, `restart 2`, `pause 2`,
`resume 2`) and prints the one line that comes back (`ok: ...` or `error: ...`).
"""
from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

SOCKET_NAME = "kray-start.sock"
ACTIONS = ("kill", "kill-graceful", "restart", "pause", "resume")
ANSWER_TIMEOUT_S = 180.0  # a restart waits until the broker serves again


def socket_path(data_dir) -> Path:
    return Path(data_dir).resolve() / SOCKET_NAME


def serve(cluster, data_dir, stopping: threading.Event) -> threading.Thread | None:
    """Listen for `kray broker` in the background until `stopping` is set; None when the socket
    cannot be made (the path too long for a Unix socket, say): kray start says so and goes on."""
    path = socket_path(data_dir)
    try:
        if path.exists():
            path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        os.chmod(path, 0o600)
        server.listen(4)
        server.settimeout(0.5)
    except OSError as e:
        print(f"kray start: kray broker cannot reach this cluster ({path}: {e})", file=sys.stderr, flush=True)
        return None

    def answer(line: str) -> str:
        action, _, rest = line.strip().partition(" ")
        if action not in ACTIONS or not rest.strip().isdigit():
            return f"error: not a command: {line.strip()!r} (one of {', '.join(ACTIONS)} and a broker id)"
        broker_id = int(rest)
        try:
            if action in ("kill", "kill-graceful"):
                cluster.kill_node(broker_id, graceful=action == "kill-graceful")
                return f"ok: broker {broker_id} {'stopped' if action == 'kill-graceful' else 'killed'}"
            if action == "restart":
                cluster.restart_node(broker_id)
                return f"ok: broker {broker_id} serves again"
            if action == "pause":
                cluster.pause_node(broker_id)
                return f"ok: broker {broker_id} paused (SIGSTOP): kray broker --resume {broker_id} wakes it"
            restarted = cluster.resume_node(broker_id)
            return f"ok: broker {broker_id} resumed" + (" (Ray had declared it dead: started again)" if restarted else "")
        except (KeyError, ValueError, TimeoutError) as e:
            return f"error: {e.args[0] if e.args else e}"

    def run():
        with server:
            while not stopping.is_set():
                try:
                    conn, _ = server.accept()
                except socket.timeout:
                    continue
                except OSError:
                    return
                with conn:
                    conn.settimeout(10)
                    try:
                        line = conn.makefile().readline()
                        conn.sendall((answer(line) + "\n").encode())
                    except OSError:
                        pass
        try:
            path.unlink()
        except OSError:
            pass
    thread = threading.Thread(target=run, name="kray-broker-control", daemon=True)
    thread.start()
    return thread


def send(data_dir, action: str, broker_id: int) -> str:
    """One command to the `kray start --nodes` whose data directory is `data_dir`; its answer."""
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(ANSWER_TIMEOUT_S)
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return (f"error: no kray start --nodes runs with data in {Path(data_dir).resolve()} ({path} does not "
                    f"answer): give its --data-dir")
        s.sendall(f"{action} {broker_id}\n".encode())
        return s.makefile().readline().strip() or "error: kray start closed the connection"


def add_parser(sub) -> None:
    p = sub.add_parser("broker", help="kill, restart, pause or resume one broker of a running `kray start --nodes N` "
                                      "(or kray chaos), named by its id")
    p.add_argument("--data-dir", default="./data", help="the --data-dir of that kray start (default ./data)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--kill", type=int, metavar="N", help="broker N's node dies at once (SIGKILL), as a machine "
                                                            "losing power")
    what.add_argument("--stop", type=int, metavar="N", help="broker N's node stops gracefully (SIGTERM first)")
    what.add_argument("--restart", type=int, metavar="N", help="broker N starts again (same id, port and data); "
                                                               "returns once it serves")
    what.add_argument("--pause", type=int, metavar="N", help="every process of broker N's node stops (SIGSTOP)")
    what.add_argument("--resume", type=int, metavar="N", help="broker N's paused processes go on (SIGCONT)")
    p.set_defaults(func=run_tool)


def run_tool(args) -> int:
    for option, action in (("kill", "kill"), ("stop", "kill-graceful"), ("restart", "restart"), ("pause", "pause"),
                           ("resume", "resume")):
        broker_id = getattr(args, option)
        if broker_id is not None:
            answer = send(args.data_dir, action, broker_id)
            print(f"kray broker: {answer}", file=sys.stdout if answer.startswith("ok") else sys.stderr)
            return 0 if answer.startswith("ok") else 1
    return 2
