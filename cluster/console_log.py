"""What `kray start` shows of its actors' logs: every ERROR record that Kray's actors write into
server.log (`--log-dir`), once, as one line, pointing at the file for the whole record:

    kray start: error in kray.gateway: unexpected error handling a request; closing the connection:
      ValueError: invalid literal for int() with base 10: 'three' (details: data/logs/server.log)

The same error again (the same logger, message and exception) is not repeated.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path

RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?P<level>[A-Z]+) (?P<logger>\S+) \[pid \d+\]: "
                          r"(?P<message>.*)$")
FOLLOW_EVERY_S = 1.0


def error_lines(text: str) -> list[tuple[tuple[str, str, str], str]]:
    """(identity, console line) of each ERROR or CRITICAL record in `text` (whole records only)."""
    out, record = [], None

    def close():
        if record is not None and record["level"] in ("ERROR", "CRITICAL"):
            exception = next((line.strip() for line in reversed(record["rest"])
                              if line.strip() and not line.startswith((" ", "\t", "Traceback"))), "")
            message = record["message"] + (f": {exception}" if exception else "")
            out.append(((record["logger"], record["message"], exception), f"error in {record['logger']}: {message}"))
    for line in text.splitlines():
        m = RECORD_START.match(line)
        if m:
            close()
            record = {**m.groupdict(), "rest": []}
        elif record is not None:
            record["rest"].append(line)
    close()
    return out


def follow_errors(path: Path, say, stopping: threading.Event) -> threading.Thread:
    """A thread saying each new distinct error record of `path` (from its end when called) until
    `stopping` is set."""
    start_offset = path.stat().st_size if path.exists() else 0  # (now, not when the thread first runs)

    def run():
        offset = start_offset
        seen: set = set()
        pending, quiet = "", 0
        while not stopping.wait(FOLLOW_EVERY_S):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    f.seek(offset)
                    chunk = f.read()
                    offset = f.tell()
            except OSError:
                continue
            pending += chunk
            quiet = 0 if chunk else quiet + 1
            # keep the last record back until the next one starts or the file is quiet for a while
            # (its traceback may still come)
            starts = [m.start() for m in re.finditer(r"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", pending)]
            if quiet >= 2:
                done, pending = pending, ""
            elif len(starts) < 2:
                continue
            else:
                done, pending = pending[:starts[-1]], pending[starts[-1]:]
            for identity, line in error_lines(done):
                if identity not in seen:
                    seen.add(identity)
                    say(f"kray start: {line} (details: {path})")
    thread = threading.Thread(target=run, name="kray-error-follower", daemon=True)
    thread.start()
    return thread
