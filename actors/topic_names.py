"""Kafka's rule for a topic's name, the one copy of it: not empty, not '.' or '..', at most 249
of ASCII letters, digits, '.', '_' and '-'. Used where topics are created (the controller), where
requests name them (the gateway's handlers) and for a share group's dead-letter topic."""
from __future__ import annotations

import re

TOPIC_NAME_LENGTH_MAX = 249
TOPIC_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_error(name: str) -> str | None:
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"topic name is longer than {TOPIC_NAME_LENGTH_MAX} characters"
    if not TOPIC_NAME_PATTERN.match(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None
