"""What a coordinator's command decides: the records to append to its log and the response to give once they
are appended (Kafka's CoordinatorResult). A command answers only after its records are in the log; when the
append fails it answers the append's error instead."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

Record = tuple[bytes, bytes | None]   # (key bytes, value bytes or None for a tombstone)
R = TypeVar("R")


@dataclass
class CoordinatorResult(Generic[R]):
    records: list[Record] = field(default_factory=list)
    response: R | None = None
