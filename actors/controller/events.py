"""What happened to brokers, in words an operator reads on `kray start`'s console: lost (Ray
declared the node dead), fenced (no heartbeat for broker.session.timeout.ms), back (heartbeats
resumed, or registered again). A bounded, numbered list the console follows by long poll; pure
(the time is passed in)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

BROKER_EVENTS_MAX = 1000


@dataclass(frozen=True)
class BrokerEvent:
    seq: int
    at_ms: int  # wall clock
    text: str


class BrokerEvents:
    def __init__(self, limit: int = BROKER_EVENTS_MAX):
        self.events: deque[BrokerEvent] = deque(maxlen=limit)
        self.next_seq = 0

    def add(self, text: str, now_ms: int) -> BrokerEvent:
        event = BrokerEvent(self.next_seq, now_ms, text)
        self.events.append(event)
        self.next_seq += 1
        return event

    def after(self, seq: int) -> list[BrokerEvent]:
        """Events numbered `seq` and later (the oldest are dropped past the limit)."""
        return [e for e in self.events if e.seq >= seq]
