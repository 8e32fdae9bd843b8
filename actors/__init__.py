import logging

# Kray's actors say what they decide (leadership, fencing, truncation) at INFO: Ray keeps each
# actor's stderr in its session's worker logs.
logging.getLogger("kray").setLevel(logging.INFO)
