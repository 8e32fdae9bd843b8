"""Incremental fetch sessions (KIP-227), pure: what a broker remembers between a client's fetches
so that each fetch names only the partitions whose fetch state changed, and each answer carries
only the partitions with something new.

A client (a follower's replica fetcher, a Java consumer; librdkafka sends none) opens a session
with a full fetch (session id 0, epoch 0); the broker answers with a session id. Each following
fetch names the session and its next epoch, lists the partitions it adds or whose fetch state
(offset, epochs, max bytes) changed, and the partitions it forgets. The broker reads every
partition of the session, as for a full fetch, but answers only those with records, an error, a
diverging epoch, or a high watermark, last stable offset or log start offset other than the last
one it sent. Epoch -1 with a session id closes that session; epoch 0 with a session id closes it
and opens a new one. An unknown session answers FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
INVALID_FETCH_SESSION_EPOCH: the client starts over with a full fetch.

Partitions are keyed as the request names them: (topic id, index) from Fetch v13, (topic name,
index) before. The cache holds `max.incremental.fetch.session.cache.slots` sessions (Kafka's
1,000) and evicts the least recently used when full.
"""
from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Hashable

from protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
EPOCH_MAX = 2**31 - 1
SESSION_CACHE_SLOTS_DEFAULT = 1000  # max.incremental.fetch.session.cache.slots


@dataclass
class SessionPartition:
    """What the session holds of one partition: the client's last fetch state (a FetchPartition)
    and what the broker last answered for it (to tell what changed)."""
    fetch: Any
    sent: tuple[int, int, int] | None = None  # (high watermark, last stable offset, log start) last answered


@dataclass
class FetchSession:
    session_id: int
    next_epoch: int = 1
    partitions: dict[Hashable, SessionPartition] = field(default_factory=dict)

    def advance(self) -> None:
        self.next_epoch = 1 if self.next_epoch >= EPOCH_MAX else self.next_epoch + 1


@dataclass
class SessionStep:
    """What a fetch means: an error to answer alone, or the session (None: a full fetch without
    one) and whether the answer is incremental (only changed partitions)."""
    error_code: int = 0
    session: FetchSession | None = None
    incremental: bool = False


class FetchSessions:
    def __init__(self, slots: int = SESSION_CACHE_SLOTS_DEFAULT, rng: random.Random | None = None):
        self.slots = slots
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.rng = rng or random.Random()

    def begin(self, session_id: int, epoch: int, wanted: list[tuple[Hashable, Any]],
              forgotten: list[Hashable]) -> SessionStep:
        """Apply a fetch's session fields: `wanted` its (key, FetchPartition)s, `forgotten` the keys
        it drops. Partitions a full fetch names become the new session's; an incremental fetch adds
        or updates them and drops the forgotten."""
        if epoch == FINAL_EPOCH:
            self.sessions.pop(session_id, None)
            return SessionStep()  # a full fetch, no session
        if epoch == INITIAL_EPOCH:
            self.sessions.pop(session_id, None)
            session = self._open()
            if session is not None:
                session.partitions = {key: SessionPartition(fp) for key, fp in wanted}
            return SessionStep(session=session)
        session = self.sessions.get(session_id)
        if session is None:
            return SessionStep(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.next_epoch:
            return SessionStep(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        self.sessions.move_to_end(session_id)
        for key in forgotten:
            session.partitions.pop(key, None)
        for key, fp in wanted:
            held = session.partitions.get(key)
            if held is None:
                session.partitions[key] = SessionPartition(fp)
            else:
                held.fetch = fp
        return SessionStep(session=session, incremental=True)

    def _open(self) -> FetchSession | None:
        if self.slots <= 0:
            return None
        while len(self.sessions) >= self.slots:
            self.sessions.popitem(last=False)  # the least recently used
        for _ in itertools.count():
            session_id = self.rng.randint(1, EPOCH_MAX)
            if session_id not in self.sessions:
                break
        session = self.sessions[session_id] = FetchSession(session_id)
        return session

    @staticmethod
    def changed(held: SessionPartition, response) -> bool:
        """Whether an incremental answer carries this partition (and remember what it sent)."""
        now = (response.high_watermark, response.last_stable_offset, response.log_start_offset)
        records = response.records
        changed = (held.sent != now or response.error_code != 0 or response.diverging_epoch.end_offset >= 0
                   or (records is not None and len(records) > 0))
        held.sent = now
        return changed
