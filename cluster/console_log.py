"""What `kray start` shows of its actors' logs: every ERROR record that Kray's actors write into
server.log (`--log-dir`), once, as one line, pointing at the file for the whole record:

    kray start: error in kray.gateway: unexpected error handling a request; closing the connection:
      ValueError: invalid literal for int() with base 10: 'three' (details: data/logs/server.log)

The same error again (the same logger, message and exception) is not repeated. The actors of a
`kray start` send each ERROR record through Ray's GCS too (actors.CONSOLE_ERRORS_ENV): that way
reaches the console when server.log can't be written (its disk is full);
`ConsoleErrors` says each once, whichever way it came first.
"""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from actors import CONSOLE_ERROR_PREFIX

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


class ConsoleErrors:
    """Says each distinct error once (`say`: a function printing a line on the console)."""

    def __init__(self, say):
        self.say = say
        self.seen: set = set()
        self.lock = threading.Lock()

    def once(self, identity: tuple[str, str, str], line: str) -> None:
        with self.lock:
            if identity in self.seen:
                return
            self.seen.add(identity)
        self.say(line)

    def from_ray(self, text: str) -> bool:
        """An actor's ERROR record sent through Ray's GCS (actors._ToConsole), said once; False when
        `text` is not one (one of Ray's own messages)."""
        if not text.startswith(CONSOLE_ERROR_PREFIX):
            return False
        try:
            record = json.loads(text[len(CONSOLE_ERROR_PREFIX):])
            identity = (record["logger"], record["message"], record["exception"])
        except (ValueError, KeyError, TypeError):
            return False
        line = f"error in {identity[0]}: {identity[1]}" + (f": {identity[2]}" if identity[2] else "")
        self.once(identity, f"kray start: {line}" + (f" (details: {record['details']})" if record.get("details") else ""))
        return True


def follow_errors(path: Path, say, stopping: threading.Event, errors: ConsoleErrors | None = None) -> threading.Thread:
    """A thread saying each new distinct error record of `path` (from its end when called) until
    `stopping` is set (through `errors`, when given, shared with what comes through Ray)."""
    start_offset = path.stat().st_size if path.exists() else 0  # (now, not when the thread first runs)
    errors = errors or ConsoleErrors(say)

    def run():
        offset = start_offset
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
            if quiet >= 2:  # (whole lines only: a record torn by a full disk is finished when it has room)
                cut = pending.rfind("\n") + 1
                done, pending = pending[:cut], pending[cut:]
            elif len(starts) < 2:
                continue
            else:
                done, pending = pending[:starts[-1]], pending[starts[-1]:]
            for identity, line in error_lines(done):
                errors.once(identity, f"kray start: {line} (details: {path})")
    thread = threading.Thread(target=run, name="kray-error-follower", daemon=True)
    thread.start()
    return thread
