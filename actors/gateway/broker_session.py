"""A broker's own view of its session with the controller: pure, the clock passed in.

The controller fences a broker that sent no heartbeat for `broker.session.timeout.ms` and moves
its partitions' leadership to other replicas. A broker cut off from the controller can't hear
that, so it must assume it once its session *would* have expired: from then on it serves no
partition as leader and coordinates no group (as a fenced Kafka broker), until the controller
answers again (and the broker has metadata from after that answer).

The session is counted from when the last answered heartbeat was *sent*: the controller counted
it from when it arrived, which is later, so the broker gives up its leadership no later than the
controller could give it to another broker. Heartbeats are not abandoned when slow: a late answer
to a heartbeat still renews the session from that heartbeat's send time.

With the metadata quorum, the controller's answer also says how long before it its voter last heard
from a majority of the voters, and the session counts from the send time less that age: so from no
later than that contact. A controller elected after this one was cut off knows when its own voter
last heard from the old leader, and fences this broker a session (and a skew) after that, sure that
the broker stopped leading first, without waiting out a lease of the old controller.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BrokerSession:
    session_timeout_ms: int
    renewed_from_ms: int | None = None  # send time of the newest answered heartbeat (or registration)
    lost: bool = False                  # expired, and not yet taken up again

    def renewed(self, sent_ms: int) -> None:
        """The controller answered a heartbeat (or a registration) sent at `sent_ms`."""
        if self.renewed_from_ms is None or sent_ms > self.renewed_from_ms:
            self.renewed_from_ms = sent_ms

    def heartbeat_answered(self, sent_ms: int, contact_age_ms: int = 0) -> None:
        """The controller answered a heartbeat sent at `sent_ms`, its voter's last contact with a
        majority `contact_age_ms` old when it answered: the session renews from the send time less
        that age (the answer came after the send, so the contact was no earlier)."""
        self.renewed(sent_ms - max(0, contact_age_ms))

    def expires_at_ms(self) -> int | None:
        return None if self.renewed_from_ms is None else self.renewed_from_ms + self.session_timeout_ms

    def expired(self, now_ms: int) -> bool:
        """The controller may have fenced this broker by now. Before the first registration the
        session is unknown, not expired (nothing routes to an unregistered broker)."""
        expires = self.expires_at_ms()
        return expires is not None and now_ms >= expires

    def check(self, now_ms: int) -> bool:
        """True exactly when the session is found expired for the first time since it was last
        taken up: the shell then stops serving as leader."""
        if self.lost or not self.expired(now_ms):
            return False
        self.lost = True
        return True

    def may_resume(self, now_ms: int) -> bool:
        """After `lost`: the controller answered since (the session is live again). The shell
        fetches fresh metadata, then calls `resumed`."""
        return self.lost and not self.expired(now_ms)

    def resumed(self, now_ms: int) -> bool:
        """Take the session up again if it is still live; False if it expired meanwhile."""
        if self.expired(now_ms):
            return False
        self.lost = False
        return True
