import logging
import os
import sys

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
                to_file = logging.FileHandler(os.path.join(log_dir, SERVER_LOG), encoding="utf-8")
                to_file.setFormatter(formatter)
                logger.addHandler(to_file)
            except OSError as e:
                logger.warning("cannot write %s in %s: %s", SERVER_LOG, log_dir, e)
        logger.setLevel(LOG_LEVELS.get(os.environ.get(LOG_LEVEL_ENV, "INFO").upper(), logging.INFO))
        logger.propagate = False
