import logging
import sys


def log_to_stderr() -> None:
    """Kray's actors say what they decide (leadership, fencing, truncation) at INFO, on stderr,
    which Ray keeps in the session's worker logs (and shows the driver). Called by each actor
    shell once its process starts."""
    logger = logging.getLogger("kray")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
