"""The gateway-to-shard socket is the broker's user's alone (actors/local_socket.py, issue 18): a
shard's data-path listener over a real Unix socket serves its own user; another user (`nobody`,
from a forked child that drops root) cannot reach the file, and when the file is reachable (its
directory loosened by hand) the listener still closes that user's connection before acting on a
frame, and says why once. The socket directory is refused when others could reach it."""
import asyncio
import logging
import os
import socket
import stat
import tempfile
import uuid

import pytest

from actors import local_socket
from actors.local_socket import (UnsafeSocketDir, check_private_dir, private_address, remove_stale_sockets,
                                 socket_dir)
from actors.partition import wire
from actors.partition.listener import start_listener
from actors.pipelined import PipelinedConnection
from actors.shard.actor import _listener_pid

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")
NOBODY = 65534
root_only = pytest.mark.skipif(os.getuid() != 0, reason="switching to another uid needs root")


class Replica:
    """Counts what reaches it: a produce from another user must not."""

    def __init__(self):
        self.produced = 0

    def append(self, blobs, leader_epoch, acks):
        self.produced += 1
        from actors.partition.core import ProduceResult
        return [ProduceResult(0, self.produced - 1, -1, 0)], None

    async def produce(self, blobs, leader_epoch, acks, timeout_ms):
        return self.append(blobs, leader_epoch, acks)[0]


def _produce_frame(correlation_id: int = 1) -> bytes:
    return b"".join(bytes(c) for c in wire.encode_request(wire.PRODUCE, correlation_id, (TOPIC, 0), [0, 1, 1000],
                                                          [b"records"]))


def _as_nobody(path: str) -> str:
    """Fork; the child drops to uid/gid nobody, connects to `path`, sends a produce frame and reads:
    returns what happened ("refused: <errno name>", "closed", or "answered")."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no asyncio, no pytest, only this
        outcome = "error"
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(path)
            except OSError as e:
                outcome = f"refused: {os.strerror(e.errno)}"
            else:
                try:
                    s.sendall(_produce_frame())
                    outcome = "answered" if s.recv(65536) else "closed"
                except (BrokenPipeError, ConnectionResetError):  # closed before or while it sent
                    outcome = "closed"
                except socket.timeout:
                    outcome = "no answer"
        except BaseException as e:
            outcome = f"error: {type(e).__name__}: {e}"
        finally:
            os.write(write_end, outcome.encode())
            os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as f:
            return f.read().decode()
    finally:
        os.waitpid(pid, 0)


async def _listen(directory: str, replica: Replica):
    address = os.path.join(directory, "shard.sock")
    server = await start_listener({(TOPIC, 0): replica}.get, address, 1 << 20, asyncio.Event)
    return server, address


def test_the_broker_user_produces_over_its_socket_and_the_file_is_private():
    async def main():
        replica = Replica()
        server, address = await _listen(tempfile.mkdtemp(), replica)
        connection = await PipelinedConnection.open_unix(address, timeout_s=5, response_bytes_max=1 << 20)
        try:
            body = await connection.call(lambda cid: wire.encode_request(wire.PRODUCE, cid, (TOPIC, 0), [0, 1, 1000],
                                                                         [b"records"]), 5)
            status, out, _ = wire.decode_response(body)
            assert status == wire.ANSWERED and out[0] == 0
            assert replica.produced == 1
            assert stat.S_IMODE(os.stat(address).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(os.path.dirname(address)).st_mode) == 0o700
        finally:
            connection.close()
            server.close()
    asyncio.run(main())


@root_only
def test_another_user_cannot_reach_the_socket_file():
    async def main():
        replica = Replica()
        server, address = await _listen(tempfile.mkdtemp(), replica)
        try:
            outcome = await asyncio.get_running_loop().run_in_executor(None, _as_nobody, address)
            assert outcome == f"refused: {os.strerror(13)}"  # EACCES: the directory is 0700
            assert replica.produced == 0
        finally:
            server.close()
    asyncio.run(main())


@root_only
def test_another_users_connection_is_closed_before_its_frame_and_logged_once(caplog):
    """The directory and the file loosened by hand (chmod 777, 666): the peer check still holds."""
    async def main():
        replica = Replica()
        directory = tempfile.mkdtemp()
        server, address = await _listen(directory, replica)
        os.chmod(directory, 0o777)
        os.chmod(address, 0o666)
        local_socket._refused_uids_logged.discard(NOBODY)
        try:
            loop = asyncio.get_running_loop()
            for _ in range(2):
                assert await loop.run_in_executor(None, _as_nobody, address) == "closed"
            assert replica.produced == 0, "a frame from another user reached the replica"
            # and the broker's own user still gets through on the same listener
            connection = await PipelinedConnection.open_unix(address, timeout_s=5, response_bytes_max=1 << 20)
            body = await connection.call(lambda cid: wire.encode_request(wire.PRODUCE, cid, (TOPIC, 0), [0, 1, 1000],
                                                                         [b"records"]), 5)
            assert wire.decode_response(body)[0] == wire.ANSWERED and replica.produced == 1
            connection.close()
        finally:
            server.close()
    with caplog.at_level(logging.WARNING, logger="kray.local_socket"):
        asyncio.run(main())
    refusals = [r.getMessage() for r in caplog.records if f"uid {NOBODY}" in r.getMessage()]
    assert len(refusals) == 1, refusals
    assert "only the broker's own user" in refusals[0]


def test_a_socket_directory_others_could_reach_is_refused(tmp_path, monkeypatch):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    with pytest.raises(UnsafeSocketDir, match="chmod 700"):
        check_private_dir(str(loose))
    link = tmp_path / "link"
    link.symlink_to(loose)
    with pytest.raises(UnsafeSocketDir, match="not a directory"):
        check_private_dir(str(link))
    if os.getuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, NOBODY, NOBODY)
        with pytest.raises(UnsafeSocketDir, match="someone else made it"):
            check_private_dir(str(theirs))
    # made where missing, 0700, and the listener's name fits the kernel's limit or says what to do
    monkeypatch.setenv(local_socket.SOCKET_DIR_ENV, str(tmp_path / "made"))
    assert socket_dir() == str(tmp_path / "made")
    assert stat.S_IMODE(os.stat(tmp_path / "made").st_mode) == 0o700
    monkeypatch.setenv(local_socket.SOCKET_DIR_ENV, str(tmp_path / ("d" * 120)))
    with pytest.raises(UnsafeSocketDir, match="shorter directory"):
        private_address("123-shard-1-0")


def test_an_abstract_address_is_refused():
    async def main():
        with pytest.raises(UnsafeSocketDir, match="abstract"):
            await start_listener({}.get, "\0kray-test", 1 << 20, asyncio.Event)
    asyncio.run(main())


def test_files_of_dead_shards_are_swept_and_a_leftover_at_the_path_replaced(tmp_path):
    directory = tmp_path / "socks"
    directory.mkdir(mode=0o700)
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)  # a pid that is gone
    (directory / f"{child}-shard-1-0.sock").touch()
    (directory / f"{os.getppid()}-shard-1-1.sock").touch()  # a live process's
    (directory / "notes.txt").touch()                      # not a listener's
    assert remove_stale_sockets(str(directory), _listener_pid) == 1
    assert sorted(p.name for p in directory.iterdir()) == sorted([f"{os.getppid()}-shard-1-1.sock", "notes.txt"])

    async def main():
        leftover = directory / "shard.sock"
        leftover.touch()  # a file a killed process left where the new one binds
        server = await start_listener({}.get, str(leftover), 1 << 20, asyncio.Event)
        server.close()
    asyncio.run(main())
