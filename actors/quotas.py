"""Client quotas, as Kafka keeps and applies them (KIP-13, KIP-55, KIP-546): pure, no Ray, no clock.

An entity is a tuple of (entity type, name) pairs sorted by type: ("user", "alice"), ("client-id", None) (None: the
default entity of that type), or both a user and a client id; or an ip alone. Each entity has quota values by
key. The controller keeps them (AlterClientQuotas records, replayed) and every gateway gets them in its metadata
image; DescribeClientQuotas reads them there.

A gateway applies `producer_byte_rate` to Produce and `consumer_byte_rate` to Fetch per broker, as Kafka does: the
quota of a (user, client id) is resolved in Kafka's order (the most specific entity that has the key), the bytes are
recorded in a rate over `quota.window.num` samples of `quota.window.size.seconds`, and a request that takes the
rate above its quota is answered with the time to wait (throttle_time_ms: the excess over the quota, in window
time, at most the whole window); the connection then takes no request for that long (KIP-219: the client waits too).
`request_percentage` is applied the same way to the time the gateway's event loop spends on a client's requests
(Kafka: its request handler and network threads' time), in percent of one thread per second, with a throttle of at
most one window (as Kafka's request quota); `controller_mutation_rate` with Kafka's token bucket (KIP-599,
`TokenBucket`): partitions created or deleted per second. `connection_creation_rate` (KIP-612) per IP address, or
the default IP entity's for every address without its own: a new connection that takes its address's rate above the
quota is not counted and not served, and is closed after the time its rate needs to come back (at most one sample).
"""
from __future__ import annotations

import ipaddress
import math
from collections import deque
from typing import Iterable

from protocol.errors import ErrorCode

__all__ = ["USER", "CLIENT_ID", "IP", "PRODUCER_BYTE_RATE", "CONSUMER_BYTE_RATE", "Entity", "entity_problem",
           "value_problem", "describe", "resolve", "RateWindow", "Throttles", "MATCH_EXACT", "MATCH_DEFAULT",
           "MATCH_ANY", "TokenBucket", "MutationQuotas", "REQUEST_PERCENTAGE", "CONTROLLER_MUTATION_RATE",
           "CONNECTION_CREATION_RATE", "ip_quota", "ConnectionRates"]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE = "request_percentage", "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# key -> whether its value is a whole number (Kafka's QuotaConfig types: LONG, else DOUBLE)
CLIENT_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
               CONTROLLER_MUTATION_RATE: False}
IP_KEYS = {CONNECTION_CREATION_RATE: True}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def entity_problem(pairs: list[tuple[str, str | None]]) -> str | None:
    """Why Kafka refuses this entity in AlterClientQuotas (INVALID_REQUEST), or None."""
    if not pairs:
        return "Invalid empty client quota entity"
    types = [t for t, _ in pairs]
    if len(set(types)) != len(types):
        return f"Invalid client quota entity: duplicate entity type in {types}"
    for entity_type, name in pairs:
        if entity_type not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {entity_type}"
        if name == "" and entity_type != CLIENT_ID:
            return f"Invalid empty {entity_type} name"
    if IP in types:
        if len(types) > 1:
            return "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
        name = dict(pairs)[IP]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return f"{name} is not a valid IP or resolvable host."
    return None


def value_problem(entity: Entity, key: str, value: float) -> str | None:
    """Why Kafka refuses this key or value for the entity (INVALID_REQUEST), or None."""
    keys = IP_KEYS if any(t == IP for t, _ in entity) else CLIENT_KEYS
    if key not in keys:
        return f"Invalid configuration key {key}"
    if keys[key] and (not math.isfinite(value) or value != int(value)):
        return f"Configuration {key} must be a Long value"
    if value <= 0:
        return f"Invalid quota value {value} for {key}: it must be greater than 0"  # (Kafka refuses 0 too)
    return None


def describe(quotas: dict[Entity, dict[str, float]], components: list[tuple[str, int, str | None]],
             strict: bool) -> tuple[ErrorCode, str | None, list[tuple[Entity, dict[str, float]]]]:
    """DescribeClientQuotas: the entities matching every component (and, strict, no other type)."""
    types = [t for t, _, _ in components]
    if len(set(types)) != len(types):
        return ErrorCode.INVALID_REQUEST, f"Duplicate entity type in filter: {types}", []
    for entity_type, match_type, match in components:
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}", []
        if match_type == MATCH_EXACT and match is None:
            return ErrorCode.INVALID_REQUEST, "Exact match requires a name", []
    out = []
    for entity, values in quotas.items():
        names = dict(entity)
        if strict and set(names) != set(types):
            continue
        ok = True
        for entity_type, match_type, match in components:
            if entity_type not in names:
                ok = False
            elif match_type == MATCH_EXACT:
                ok = names[entity_type] == match
            elif match_type == MATCH_DEFAULT:
                ok = names[entity_type] is None
            if not ok:
                break
        if ok and values:
            out.append((entity, dict(values)))
    return ErrorCode.NONE, None, out


def resolve(quotas: dict[Entity, dict[str, float]], user: str, client_id: str, key: str) -> float | None:
    """The quota of `key` for this user and client id, in Kafka's order: user and client id, the user with the
    default client id, the user, the default user with the client id, the default user with the default client
    id, the default user, the client id, the default client id."""
    for entity in ((("client-id", client_id), ("user", user)), (("client-id", None), ("user", user)),
                   (("user", user),), (("client-id", client_id), ("user", None)),
                   (("client-id", None), ("user", None)), (("user", None),), (("client-id", client_id),),
                   (("client-id", None),)):
        value = quotas.get(entity, {}).get(key)
        if value is not None:
            return value
    return None


def _get_or_make(entries: dict, key, max_entries: int, make):
    """entries[key], made by `make()` if missing; the oldest entry goes first when there are `max_entries`."""
    entry = entries.get(key)
    if entry is None:
        if len(entries) >= max_entries:
            entries.pop(next(iter(entries)))
        entry = entries[key] = make()
    return entry


class RateWindow:
    """Kafka's Rate over `samples` samples of `sample_ms`: the total recorded in the samples still in the window,
    over the window's elapsed time (`window_ms`)."""

    def __init__(self, samples: int = 11, sample_ms: int = 1000):
        self.samples, self.sample_ms = samples, sample_ms
        self.buckets: deque[list] = deque()  # [start ms, total]

    def record(self, value: float, now_ms: int) -> None:
        if not self.buckets or now_ms - self.buckets[-1][0] >= self.sample_ms:
            self.buckets.append([now_ms, 0.0])
        self.buckets[-1][1] += value
        self._expire(now_ms)

    def _expire(self, now_ms: int) -> None:
        while self.buckets and now_ms - self.buckets[0][0] >= self.samples * self.sample_ms:
            self.buckets.popleft()

    def window_ms(self, now_ms: int) -> float:
        """Kafka's Rate.windowSize: the time since the oldest sample began, plus the whole samples it lacks of
        samples - 1 (a young rate is measured over samples - 1 samples and the current one's part)."""
        elapsed = now_ms - self.buckets[0][0] if self.buckets else 0
        full = elapsed // self.sample_ms
        return elapsed + max(0, self.samples - 1 - full) * self.sample_ms

    def rate(self, now_ms: int) -> float:
        self._expire(now_ms)
        return sum(total for _, total in self.buckets) / (self.window_ms(now_ms) / 1000)

    def room(self, quota: float, now_ms: int) -> float:
        """What may still be recorded before the rate goes above `quota` (<= 0: nothing)."""
        self._expire(now_ms)
        return quota * self.window_ms(now_ms) / 1000 - sum(total for _, total in self.buckets)

    def throttle_ms(self, quota: float, now_ms: int, max_throttle_ms: int | None = None) -> int:
        """How long the client must wait for the rate to come back to `quota` (0: it is within it): the excess
        over the quota in window time, uncapped as Kafka's byte-rate quotas (a cap would let the window empty
        while the client waits, and the client start over with a full window's burst), or at most
        `max_throttle_ms` (Kafka's request quota: one window)."""
        rate = self.rate(now_ms)
        if rate <= quota:
            return 0
        throttle_ms = int((rate - quota) / quota * self.window_ms(now_ms))
        return throttle_ms if max_throttle_ms is None else min(throttle_ms, max_throttle_ms)


class Throttles:
    """A gateway's rates for one quota key, by (user, client id): record a request's bytes, get its throttle."""

    def __init__(self, key: str, samples: int = 11, sample_ms: int = 1000, max_entries: int = 100_000,
                 max_throttle_ms: int | None = None):
        self.key, self.samples, self.sample_ms, self.max_entries = key, samples, sample_ms, max_entries
        self.max_throttle_ms = max_throttle_ms
        self.windows: dict[tuple[str, str], RateWindow] = {}

    def record(self, quotas: dict[Entity, dict[str, float]], user: str, client_id: str, size_bytes: float,
               now_ms: int) -> int:
        """throttle_time_ms for a request of `size_bytes` (or, for request_percentage, its share of a thread's
        time: percent of a second) (0 where no quota applies)."""
        quota = resolve(quotas, user, client_id, self.key) if quotas else None
        if quota is None:
            return 0
        window = _get_or_make(self.windows, (user, client_id), self.max_entries,
                              lambda: RateWindow(self.samples, self.sample_ms))
        window.record(size_bytes, now_ms)
        return window.throttle_ms(quota, now_ms, self.max_throttle_ms)

    def room(self, quotas: dict[Entity, dict[str, float]], user: str, client_id: str, now_ms: int) -> float | None:
        """What this user and client id may still take before their rate goes above the quota (<= 0: nothing),
        None where no quota applies (a client not seen yet has an empty window's worth)."""
        quota = resolve(quotas, user, client_id, self.key) if quotas else None
        if quota is None:
            return None
        window = self.windows.get((user, client_id)) or RateWindow(self.samples, self.sample_ms)
        return window.room(quota, now_ms)


class TokenBucket:
    """Kafka's token bucket for controller_mutation_rate (KIP-599): `quota` tokens (partitions) a second, at most
    `quota` x the window (samples x sample length, a burst) kept; full at first. Mutations take tokens and may take
    it below zero (a request is let through whole); while it is below zero the client waits the time it takes to
    come back to zero."""

    def __init__(self, samples: int = 11, sample_ms: int = 1000):
        self.window_s = samples * sample_ms / 1000
        self.tokens: float | None = None
        self.last_ms = 0

    def _refill(self, quota: float, now_ms: int) -> None:
        burst = quota * self.window_s
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * max(0, now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms

    def throttle_ms(self, quota: float, now_ms: int) -> int:
        self._refill(quota, now_ms)
        return 0 if self.tokens >= 0 else math.ceil(-self.tokens / quota * 1000)

    def record(self, quota: float, partitions: float, now_ms: int) -> None:
        self._refill(quota, now_ms)
        self.tokens -= partitions


class MutationQuotas:
    """A broker's controller mutation buckets by (user, client id) under `controller_mutation_rate`."""

    def __init__(self, samples: int = 11, sample_ms: int = 1000, max_entries: int = 100_000):
        self.samples, self.sample_ms, self.max_entries = samples, sample_ms, max_entries
        self.buckets: dict[tuple[str, str], TokenBucket] = {}

    def _bucket(self, quotas, user: str, client_id: str) -> tuple[float | None, TokenBucket | None]:
        quota = resolve(quotas, user, client_id, CONTROLLER_MUTATION_RATE) if quotas else None
        if quota is None:
            return None, None
        return quota, _get_or_make(self.buckets, (user, client_id), self.max_entries,
                                   lambda: TokenBucket(self.samples, self.sample_ms))

    def throttle_ms(self, quotas, user: str, client_id: str, now_ms: int) -> int:
        """How long this client must wait before its next mutation is let through (0: now)."""
        quota, bucket = self._bucket(quotas, user, client_id)
        return 0 if bucket is None else bucket.throttle_ms(quota, now_ms)

    def record(self, quotas, user: str, client_id: str, partitions: int, now_ms: int) -> None:
        quota, bucket = self._bucket(quotas, user, client_id)
        if bucket is not None and partitions > 0:
            bucket.record(quota, partitions, now_ms)


def ip_quota(quotas: dict[Entity, dict[str, float]], ip: str) -> float | None:
    """An address's connection_creation_rate: its own IP entity's, else the default IP entity's, else None (no
    limit). Addresses compare as addresses (an entity written ::1 or 0:0:0:0:0:0:0:1 is the same one)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        address = None
    default = None
    for entity, values in quotas.items():
        if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
            continue
        name = entity[0][1]
        if name is None:
            default = values[CONNECTION_CREATION_RATE]
        elif name == ip or (address is not None and _same_address(name, address)):
            return values[CONNECTION_CREATION_RATE]
    return default


def _same_address(name: str, address) -> bool:
    try:
        return ipaddress.ip_address(name) == address
    except ValueError:
        return False


class ConnectionRates:
    """A broker's connection creation rate by client address, under `connection_creation_rate` (KIP-612), as
    Kafka's ConnectionQuotas keeps it: only addresses with a quota are counted; a connection that takes its
    address's rate above the quota is taken back out of the count and is to be closed unserved after the time the
    rate needs to come back, at most one sample (`quota.window.size.seconds`)."""

    def __init__(self, samples: int = 11, sample_ms: int = 1000, max_entries: int = 100_000):
        self.samples, self.sample_ms, self.max_entries = samples, sample_ms, max_entries
        self.windows: dict[str, RateWindow] = {}

    def accept(self, quotas: dict[Entity, dict[str, float]], ip: str, now_ms: int) -> int:
        """0: serve this new connection from `ip` (counted); else how long (ms) to hold it unread before closing it
        (not counted)."""
        quota = ip_quota(quotas, ip) if quotas else None
        if quota is None:
            return 0
        window = _get_or_make(self.windows, ip, self.max_entries, lambda: RateWindow(self.samples, self.sample_ms))
        window.record(1, now_ms)
        throttle_ms = window.throttle_ms(quota, now_ms, self.sample_ms)
        if throttle_ms:
            window.record(-1, now_ms)
        return throttle_ms
