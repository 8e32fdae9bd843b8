"""kray start's console shows each error its actors log into server.log once, as one line naming
the exception, with where the whole record is (cluster/console_log.py)."""
import logging
import threading
import time

import actors
from cluster.console_log import error_lines, follow_errors


def test_an_actors_error_reaches_the_console_once(tmp_path, monkeypatch):
    monkeypatch.setenv(actors.LOG_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(actors.LOG_LEVEL_ENV, "WARN")
    kray_logger = logging.getLogger("kray")
    saved = kray_logger.handlers[:], kray_logger.level, kray_logger.propagate
    kray_logger.handlers, kray_logger.disabled = [], False
    said, stopping = [], threading.Event()
    try:
        actors.log_to_stderr()  # as an actor's process does: server.log in KRAY_LOG_DIR, at KRAY_LOG_LEVEL
        follow_errors(tmp_path / actors.SERVER_LOG, said.append, stopping)
        log = logging.getLogger("kray.console_log_test")  # (a name no other test's logging config touched)
        log.disabled, log.level = False, logging.NOTSET
        log.info("not at WARN")
        for _ in range(3):  # the same failure, three requests
            try:
                int("three")
            except ValueError:
                log.exception("unexpected error handling a request; closing the connection")
        log.warning("a warning is not an error")
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.5)
    finally:
        stopping.set()
        for handler in kray_logger.handlers:
            handler.close()
        kray_logger.handlers, kray_logger.level, kray_logger.propagate = saved
        kray_logger.disabled = False
    assert said == [f"kray start: error in kray.console_log_test: unexpected error handling a request; closing the connection: "
                    f"ValueError: invalid literal for int() with base 10: 'three' (details: {tmp_path}/server.log)"]
    text = (tmp_path / "server.log").read_text()
    assert "not at WARN" not in text and text.count("Traceback") == 3


def test_error_lines_reads_whole_records():
    text = ("2026-01-01 10:00:00,001 INFO kray.controller [pid 1]: broker 0 registered\n"
            "2026-01-01 10:00:01,002 ERROR kray.shard [pid 2]: replica failed\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
            "OSError: [Errno 28] No space left on device\n"
            "2026-01-01 10:00:02,003 ERROR kray.shard [pid 2]: plain\n")
    assert [line for _, line in error_lines(text)] == [
        "error in kray.shard: replica failed: OSError: [Errno 28] No space left on device",
        "error in kray.shard: plain"]


def test_an_error_sent_through_ray_and_found_in_server_log_is_said_once():
    """kray start's actors send their ERROR records through Ray's GCS too (so a full disk does not keep
    them from the console): whichever way comes first is said, the other not."""
    import json

    from cluster.console_log import ConsoleErrors
    said = []
    errors = ConsoleErrors(said.append)
    record = {"logger": "kray.storage", "message": "cannot write to the log directory /d: [Errno 28] No space left "
              "on device: free space there", "exception": "", "details": "/d/logs/server.log"}
    assert errors.from_ray(actors.CONSOLE_ERROR_PREFIX + json.dumps(record))
    assert errors.from_ray(actors.CONSOLE_ERROR_PREFIX + json.dumps(record))
    assert not errors.from_ray("The node with node id: abc has been marked dead")  # Ray's own: not ours
    text = f"2026-01-01 10:00:01,002 ERROR kray.storage [pid 2]: {record['message']}\n"
    for identity, line in error_lines(text):
        errors.once(identity, f"kray start: {line} (details: /d/logs/server.log)")
    assert said == ["kray start: error in kray.storage: cannot write to the log directory /d: [Errno 28] No space left "
                    "on device: free space there (details: /d/logs/server.log)"]


def test_an_error_record_has_the_same_identity_both_ways():
    """What an actor sends through Ray (actors._ToConsole) and what the follower reads from server.log name the
    same error alike, so that kray start says it once."""
    import json
    import sys

    handler = actors._ToConsole("/logs")
    handler.sender = object()  # (no sending thread: the test reads the outbox)
    try:
        int("three")
    except ValueError:
        record = logging.LogRecord("kray.gateway", logging.ERROR, __file__, 1, "closing the connection\nsecond line",
                                   (), sys.exc_info())
    handler.emit(record)
    handler.emit(record)  # (the same again: sent once)
    sent = json.loads(handler.outbox.get_nowait()[len(actors.CONSOLE_ERROR_PREFIX):])
    assert handler.outbox.empty()
    text = logging.Formatter(actors.LOG_FORMAT).format(record) + "\n"
    [(identity, _)] = error_lines(text)
    assert (sent["logger"], sent["message"], sent["exception"]) == identity == (
        "kray.gateway", "closing the connection", "ValueError: invalid literal for int() with base 10: 'three'")
