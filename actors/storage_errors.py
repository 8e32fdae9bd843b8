"""A write into a broker's log directory that fails (the disk is full, read-only, failing, or the
directory not writable): said once per directory and cause, at ERROR, with what to do, so that it
reaches `kray start`'s console as one line, not once per partition or per request:

    cannot write to the log directory /data/broker-0: [Errno 28] No space left on device: free space
    there (or lower retention.ms / retention.bytes of the largest topics, or move log.dirs to a larger
    disk); until then produce requests to its partitions are answered KAFKA_STORAGE_ERROR

Kray keeps serving meanwhile and writes again once it can (Kafka takes the directory offline until
the broker restarts; docs/operations/troubleshooting.md).
"""
from __future__ import annotations

import errno
import logging
import time
from pathlib import Path

log = logging.getLogger("kray.storage")
SAID_AGAIN_AFTER_S = 600.0  # the same directory and cause, said again in server.log after this long

_said: dict[tuple[str, int | None], float] = {}


def advice(error: OSError) -> str:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return ("free space there (or lower retention.ms / retention.bytes of the largest topics, or move "
                "log.dirs to a larger disk)")
    if error.errno == errno.EROFS:
        return "the file system is read-only: make it writable again (or move log.dirs)"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "let the user Kray runs as write there (or move log.dirs)"
    if error.errno == errno.EIO:
        return "the disk reports an I/O error: check it (dmesg) or move log.dirs to another disk"
    return "check the disk and the directory"


def write_failed(directory: str | Path, error: OSError, *, now_s: float | None = None) -> bool:
    """Say that writing into `directory` (a broker's log directory) failed with `error`, unless it
    was said for the same directory and cause in the last SAID_AGAIN_AFTER_S. True when said."""
    key = (str(directory), error.errno)
    now_s = time.monotonic() if now_s is None else now_s
    if key in _said and now_s - _said[key] < SAID_AGAIN_AFTER_S:
        return False
    _said[key] = now_s
    cause = f"[Errno {error.errno}] {error.strerror}" if error.errno is not None else str(error)
    log.error("cannot write to the log directory %s: %s: %s; until then produce requests to its partitions are "
              "answered KAFKA_STORAGE_ERROR", directory, cause, advice(error))
    return True
