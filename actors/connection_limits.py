"""Kafka's broker-wide connection limits, as its SocketServer's ConnectionQuotas keeps them, for one
broker's gateway (pure: the front end, actors/gateway/connection_gate.py, waits and closes).

- `max.connection.creation.rate`: new connections a second over the broker's listeners. A connection
  over it is accepted late: the listener accepts nothing for the time the rate needs to come back
  (at most one quota sample, `quota.window.size.seconds`).
- `max.connections`: while the broker holds this many, its listeners accept nothing more until one
  closes. The inter-broker listener is exempt when the broker has other listeners.
- `max.connections.per.ip`, `max.connections.per.ip.overrides` (`host:count,...`): a connection
  from an address that already holds its maximum is closed at once, unanswered.

All four are dynamic broker configs, as on Kafka. The per-address `connection_creation_rate` is a
client quota (actors/quotas.py ConnectionRates).
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from actors.quotas import RateWindow

UNLIMITED = 2**31 - 1  # Kafka's Int.MaxValue: no limit


class OverridesError(ValueError):
    pass


def parse_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: "host:count,host:count" -> {address: count}; a host name is resolved
    to its address once, here (Kafka's InetAddress.getByName). OverridesError for a malformed entry."""
    out = {}
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise OverridesError(f"Invalid max.connections.per.ip.overrides entry {entry!r}: expected host:count")
        out[normal_address(host)] = int(count)
    return out


def normal_address(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        try:
            return socket.gethostbyname(host)
        except OSError:
            raise OverridesError(f"Unknown host {host!r} in max.connections.per.ip.overrides") from None


@dataclass(frozen=True)
class Limits:
    max_connections: int = UNLIMITED
    max_connections_per_ip: int = UNLIMITED
    per_ip_overrides: dict[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = UNLIMITED

    def per_ip(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_connections_per_ip)


class ConnectionCounts:
    """One broker's open connections (by address, in all) and its connection creation rate."""

    def __init__(self, samples: int = 11, sample_ms: int = 1000):
        self.by_address: dict[str, int] = {}
        self.total = 0
        self.sample_ms = sample_ms
        self.rate = RateWindow(samples, sample_ms)

    def creation_throttle_ms(self, limits: Limits, protected: bool, now_ms: int) -> int:
        """Count a new connection against max.connection.creation.rate; how long (ms) to wait before accepting
        it (at most one sample). A protected listener's connections are not counted (Kafka: the inter-broker
        listener has only its own listener-level rate)."""
        if protected or limits.max_connection_creation_rate >= UNLIMITED:
            return 0
        self.rate.record(1, now_ms)
        if limits.max_connection_creation_rate <= 0:
            return self.sample_ms
        return self.rate.throttle_ms(limits.max_connection_creation_rate, now_ms, self.sample_ms)

    def slot_available(self, limits: Limits, protected: bool) -> bool:
        """Whether a new connection may be taken now under max.connections."""
        return protected or self.total < limits.max_connections

    def add(self, address: str, limits: Limits) -> bool:
        """Count a connection from `address`; False (not counted): the address holds its maximum already."""
        count = self.by_address.get(address, 0)
        if count >= limits.per_ip(address):
            return False
        self.by_address[address] = count + 1
        self.total += 1
        return True

    def remove(self, address: str) -> None:
        count = self.by_address.get(address, 0)
        if count <= 1:
            self.by_address.pop(address, None)
        else:
            self.by_address[address] = count - 1
        self.total = max(0, self.total - 1)
