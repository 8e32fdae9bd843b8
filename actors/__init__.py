import logging
import os
import queue
import sys
import threading

# `kray start --log-dir DIR --log-level LEVEL` tells the actors' processes through these (they inherit
# the environment of the Ray that kray start starts)
LOG_DIR_ENV = "KRAY_LOG_DIR"
LOG_LEVEL_ENV = "KRAY_LOG_LEVEL"
SERVER_LOG = "server.log"  # Kafka's name for a broker's log file
# Kafka's (log4j's) level names, and Python's own
LOG_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
              "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
              "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [pid %(process)d]: %(message)s"
# `kray start` asks its actors to send each ERROR record (once) to its console through Ray's GCS too:
# that way works when the log directory is on a full disk (the actors of the Ray that kray start starts)
CONSOLE_ERRORS_ENV = "KRAY_CONSOLE_ERRORS"
CONSOLE_ERROR_PREFIX = "kray-console-error "  # (how kray start tells them from Ray's own messages)


class _ServerLog(logging.FileHandler):
    """server.log. A record it cannot write (the disk is full) is said once per cause on stderr (the
    worker's log, kept by Ray elsewhere), not with a traceback per record; it writes again when it can."""
    failing: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self._failed_now = False
        super().emit(record)
        if not self._failed_now:
            self.failing = None

    def handleError(self, record: logging.LogRecord) -> None:
        self._failed_now = True
        cause = str(sys.exc_info()[1])
        if cause != self.failing:
            self.failing = cause
            sys.stderr.write(f"kray: cannot write {self.baseFilename}: {cause}; its records are only here until "
                             f"it can\n")


class _ToConsole(logging.Handler):
    """ERROR records to `kray start`'s console through Ray's GCS (its driver prints them: see
    cluster/console_log.py), once per (logger, message, exception) in this process."""

    def __init__(self, log_dir: str | None):
        super().__init__(logging.ERROR)
        self.log_dir = log_dir
        self.sent: set[tuple[str, str, str]] = set()
        self.outbox: queue.Queue = queue.Queue(maxsize=100)  # sent by a thread of its own: a GCS that does not
        self.sender: threading.Thread | None = None          # answer (the Ray head lost) never holds up a caller

    def emit(self, record: logging.LogRecord) -> None:
        try:
            import json
            import traceback
            exception = ""
            if record.exc_info and record.exc_info[1] is not None:
                exception = traceback.format_exception_only(record.exc_info[1])[-1].strip()
            identity = (record.name, record.getMessage().split("\n", 1)[0], exception)  # (as server.log's follower)
            if identity in self.sent:
                return
            self.sent.add(identity)
            details = os.path.join(self.log_dir, SERVER_LOG) if self.log_dir else None
            self.outbox.put_nowait(CONSOLE_ERROR_PREFIX + json.dumps(
                {"logger": identity[0], "message": identity[1], "exception": exception, "details": details}))
            if self.sender is None:
                self.sender = threading.Thread(target=self._send, name="kray-console-errors", daemon=True)
                self.sender.start()
        except Exception:  # (a full outbox: server.log and stderr still have the record)
            pass

    def _send(self) -> None:
        import ray._private.utils as ray_utils
        import ray._private.worker as ray_worker
        while True:
            text = self.outbox.get()
            try:
                ray_utils.publish_error_to_driver("kray", text, gcs_client=ray_worker.global_worker.gcs_client)
            except Exception:  # (no Ray here, or its GCS is gone: server.log and stderr still have the record)
                pass


def log_to_stderr() -> None:
    """Kray's actors say what they decide (leadership, fencing, truncation) at INFO (or the level
    in KRAY_LOG_LEVEL), on stderr, which Ray keeps in the session's worker logs, and, where
    KRAY_LOG_DIR names a directory, in its server.log, one file for every actor of the machine
    (which `kray start` follows, to put errors on its console). Called by each actor shell once
    its process starts."""
    logger = logging.getLogger("kray")
    if not logger.handlers:
        formatter = logging.Formatter(LOG_FORMAT)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter)
        logger.addHandler(handler)
        log_dir = os.environ.get(LOG_DIR_ENV)
        if log_dir:
            try:
                os.makedirs(log_dir, exist_ok=True)
                to_file = _ServerLog(os.path.join(log_dir, SERVER_LOG), encoding="utf-8")
                to_file.setFormatter(formatter)
                logger.addHandler(to_file)
            except OSError as e:
                logger.warning("cannot write %s in %s: %s", SERVER_LOG, log_dir, e)
        if os.environ.get(CONSOLE_ERRORS_ENV):
            logger.addHandler(_ToConsole(log_dir))
        logger.setLevel(LOG_LEVELS.get(os.environ.get(LOG_LEVEL_ENV, "INFO").upper(), logging.INFO))
        logger.propagate = False
