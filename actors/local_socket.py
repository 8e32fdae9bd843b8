"""Unix sockets between a broker's own processes (its gateway and its shards) that only the
broker's user can use.

The frames on these sockets (actors/partition/wire.py) carry no login: the gateway has checked
the client's ACLs before it sends one, and the shard does what the frame says (append records,
write share state). So the socket itself must keep everyone else out, as a careful operator
expects of a daemon's local socket:

- it lives in a directory of the broker's user, mode 0700 (`socket_dir`): nobody else can even
  reach the file. The directory is made if missing and refused if it is not the user's own, not a
  real directory or open to others (a directory someone else made in a shared /tmp is the classic
  way in);
- the socket file is mode 0600;
- the listener asks the kernel who connected (SO_PEERCRED) and closes the connection of any other
  user than its own, logging once per user why (`serve_same_user`): a belt to the braces above,
  and what still holds if someone loosens the directory by hand.

Not Linux's abstract namespace (`\\0name`), which was used before: any process in the network
namespace could connect to those, as they have no file and no permissions.

Where: `$KRAY_SOCKET_DIR` if set, else `<temp dir>/kray-<uid>` (TMPDIR honoured). A socket path
must fit the kernel's 108 bytes, so the name stays short.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import stat
import struct
import tempfile
from typing import Awaitable, Callable

log = logging.getLogger("kray.local_socket")

SOCKET_DIR_ENV = "KRAY_SOCKET_DIR"
DIR_MODE = 0o700
SOCKET_MODE = 0o600
UNIX_PATH_BYTES_MAX = 107  # sun_path is 108 bytes with its terminating NUL
SUFFIX = ".sock"
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

_refused_uids_logged: set[int] = set()


class UnsafeSocketDir(RuntimeError):
    """The socket directory could be reached by other users; the message says what to fix."""


def socket_dir() -> str:
    """The broker's user's socket directory, made 0700 if missing; raises UnsafeSocketDir naming
    what to fix when it exists but others could reach it."""
    path = os.environ.get(SOCKET_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"kray-{os.getuid()}")
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    check_private_dir(path)
    return path


def check_private_dir(path: str) -> None:
    """Raise UnsafeSocketDir unless `path` is a real directory of this user that nobody else can
    enter (no group or other permission bits)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise UnsafeSocketDir(f"the socket directory {path} cannot be read: {e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeSocketDir(f"the socket directory {path} is not a directory (a symlink?): remove it, or set "
                              f"{SOCKET_DIR_ENV} to a directory of the broker's user with mode 0700")
    if st.st_uid != os.getuid():
        raise UnsafeSocketDir(f"the socket directory {path} belongs to uid {st.st_uid}, not to the broker's user "
                              f"(uid {os.getuid()}): someone else made it; remove it, or set {SOCKET_DIR_ENV} to a "
                              f"directory of the broker's user with mode 0700")
    if st.st_mode & 0o077:
        raise UnsafeSocketDir(f"the socket directory {path} has mode {stat.S_IMODE(st.st_mode):o}: other users could "
                              f"reach the broker's sockets; run chmod 700 {path}")


def private_address(name: str) -> str:
    """Where a process-local listener named `name` (unique among live processes: put the pid in
    it) binds: a file in `socket_dir()`."""
    path = os.path.join(socket_dir(), name + SUFFIX)
    if len(os.fsencode(path)) > UNIX_PATH_BYTES_MAX:
        raise UnsafeSocketDir(f"the socket path {path} is longer than the kernel's {UNIX_PATH_BYTES_MAX} bytes: set "
                              f"{SOCKET_DIR_ENV} (or TMPDIR) to a shorter directory")
    return path


def remove_stale_sockets(directory: str, pid_of: Callable[[str], int | None]) -> int:
    """Remove the socket files of processes that are gone (a shard killed with SIGKILL leaves its
    file): `pid_of(file name)` is the pid a name carries, or None to leave the file alone.
    Returns how many were removed."""
    removed = 0
    for entry in os.listdir(directory):
        pid = pid_of(entry)
        if pid is None or pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # alive (or someone else's: EPERM)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            os.unlink(os.path.join(directory, entry))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket, as the kernel saw it at connect
    (SO_PEERCRED); None where the platform has no such option."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    _, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _PEERCRED.size))
    return uid


def bind_private(path: str) -> socket.socket:
    """A listening Unix socket at `path` (in a private directory), file mode 0600. A file left at
    the path by a dead process is replaced."""
    if path.startswith("\0"):
        raise UnsafeSocketDir("an abstract Unix socket has no permissions: bind in socket_dir() instead")
    check_private_dir(os.path.dirname(os.path.abspath(path)))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(path)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            os.unlink(path)  # our own directory: a file of a process that is gone
            sock.bind(path)
        os.chmod(path, SOCKET_MODE)
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def serve_same_user(serve: Serve, what: str) -> Serve:
    """`serve` for connections of this process's own user only; any other user's connection is
    closed before a byte is read, and the first such connection of each uid is logged."""
    own_uid = os.getuid()

    async def checked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        uid = peer_uid(sock) if sock is not None else None
        if uid is not None and uid != own_uid:
            if uid not in _refused_uids_logged:
                _refused_uids_logged.add(uid)
                log.warning("%s: closed a connection from uid %d: only the broker's own user (uid %d) may use "
                            "this socket (its frames carry no login; further refusals of uid %d are not logged)",
                            what, uid, own_uid, uid)
            writer.transport.abort()
            return
        await serve(reader, writer)

    return checked


async def start_private_server(serve: Serve, path: str, what: str, **kwargs) -> asyncio.AbstractServer:
    """An asyncio Unix server at `path` that only this process's user can reach (see above)."""
    return await asyncio.start_unix_server(serve_same_user(serve, what), sock=bind_private(path), **kwargs)
