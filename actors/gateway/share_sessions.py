"""Share sessions (KIP-932): the set of share-partitions a member fetches from one broker.

ShareSessionEpoch 0 opens a session (replacing one the member already had here), -1 closes it,
any other value must be the previous epoch + 1. A session belongs to the connection that opened
it: when that connection drops, its sessions close and what they held is released.
Pure bookkeeping: the front end acts on what these methods return.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EPOCH_MAX = 2**31 - 1

TopicPartition = tuple[uuid.UUID, int]


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection_id: int
    epoch: int = 0  # the epoch the next request must carry
    partitions: list[TopicPartition] = field(default_factory=list)
    rotation: int = 0

    def add(self, partitions: list[TopicPartition]) -> None:
        known = set(self.partitions)
        self.partitions += [tp for tp in partitions if tp not in known and not known.add(tp)]

    def forget(self, partitions: list[TopicPartition]) -> None:
        gone = set(partitions)
        self.partitions = [tp for tp in self.partitions if tp not in gone]

    def rotated(self) -> list[TopicPartition]:
        """This request's partition order: start one further each time, so none starves."""
        if not self.partitions:
            return []
        start = self.rotation % len(self.partitions)
        self.rotation += 1
        return self.partitions[start:] + self.partitions[:start]


class ShareSessionCache:
    def __init__(self, max_sessions: int):
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def begin(self, group_id: str, member_id: str, epoch: int, connection_id: int, *,
              may_open: bool) -> tuple[int, ShareSession | None, ShareSession | None]:
        """Check a request's epoch. Returns (error code, the session, a replaced session to release).
        `may_open` is False for ShareAcknowledge, which cannot open a session."""
        key = (group_id, member_id)
        current = self.sessions.get(key)
        if epoch == INITIAL_EPOCH:
            if not may_open:
                return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None, None
            if current is None and len(self.sessions) >= self.max_sessions:
                return ErrorCode.SHARE_SESSION_LIMIT_REACHED, None, None
            session = ShareSession(group_id, member_id, connection_id, epoch=1)
            self.sessions[key] = session
            return 0, session, current
        if current is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None, None
        if epoch == FINAL_EPOCH:
            return 0, current, None
        if epoch != current.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None, None
        current.epoch = 1 if epoch == EPOCH_MAX else epoch + 1
        return 0, current, None

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def close_connection(self, connection_id: int) -> list[ShareSession]:
        closed = [s for s in self.sessions.values() if s.connection_id == connection_id]
        for s in closed:
            del self.sessions[(s.group_id, s.member_id)]
        return closed
