"""Client quotas' throttles at the gateway (actors/quotas.py keeps the rates): `throttle` for the byte rates the
Produce and Fetch handlers count, and for request_percentage the dispatcher's timing of every request (`timed`,
`request_throttle`) while some client has one. The connection of a throttled client takes no request for the
throttle time (KIP-219). `connection_throttle_ms` for a new connection under its address's connection_creation_rate
(KIP-612)."""
from __future__ import annotations

import time
import types

from protocol.headers import request_client_id

from actors import quotas


def throttle(ctx, connection, client_id: str | None, key: str, size_bytes: int, count_throttled: bool = True) -> int:
    """The throttle time (ms) a request of `size_bytes` earns under the `key` quota (producer_byte_rate,
    consumer_byte_rate) of its connection's user and client id; the connection takes no further request for that
    long (KIP-219). 0 where no quota applies. `count_throttled` False: a throttled request's bytes are taken back
    (a fetch answered empty sent none)."""
    client_quotas = getattr(ctx.metadata, "client_quotas", None)
    if not client_quotas or connection is None:
        return 0
    throttles = _throttles(ctx, key)
    now_ms = int(time.monotonic() * 1000)
    throttle_ms = throttles.record(client_quotas, connection.principal.name, client_id or "", size_bytes, now_ms)
    if throttle_ms and not count_throttled:
        throttles.record(client_quotas, connection.principal.name, client_id or "", -size_bytes, now_ms)
    if throttle_ms:
        connection.mute_for(throttle_ms)
    return throttle_ms


def room_bytes(ctx, connection, client_id: str | None, key: str) -> int | None:
    """How many bytes the client may still take under its `key` quota before it is throttled (<= 0: none), None where
    no quota applies: what a share fetch acquires at most (records acquired and then not sent would stay locked)."""
    client_quotas = getattr(ctx.metadata, "client_quotas", None)
    if not client_quotas or connection is None:
        return None
    room = _throttles(ctx, key).room(client_quotas, connection.principal.name, client_id or "",
                                     int(time.monotonic() * 1000))
    return None if room is None else int(room)


def _throttles(ctx, key: str) -> quotas.Throttles:
    """The gateway's rates for the `key` quota, made at its first use with the broker's quota window."""
    throttles = ctx.quota_throttles.get(key)
    if throttles is None:
        window_ms = int(ctx.config.get("quota.window.size.seconds", 1)) * 1000
        throttles = ctx.quota_throttles[key] = quotas.Throttles(
            key, int(ctx.config.get("quota.window.num", 11)), window_ms,
            max_throttle_ms=window_ms if key == quotas.REQUEST_PERCENTAGE else None)  # (Kafka: one window at most)
    return throttles


def quota_applies(ctx, connection, body) -> bool:
    """Whether a byte rate or request quota applies to the connection's user with the client id of this request
    (`body`, a request frame; its header is read only while some quota exists): the reader then takes its requests
    one at a time from this one on (connection.py), before the first is handled, so that no request a client
    pipelined gets past the throttle the one before it earns."""
    client_quotas = getattr(ctx.metadata, "client_quotas", None)
    if not client_quotas:
        return False
    user, client_id = connection.principal.name, request_client_id(body)
    return any(quotas.resolve(client_quotas, user, client_id or "", key) is not None
               for key in (quotas.PRODUCER_BYTE_RATE, quotas.CONSUMER_BYTE_RATE, quotas.REQUEST_PERCENTAGE))


def connection_throttle_ms(ctx, peer) -> int:
    """0: serve this new connection; else how long (ms) to hold it unread before closing it, its address being over
    its connection_creation_rate (as Kafka's acceptor: at most one quota sample, quota.window.size.seconds)."""
    client_quotas = getattr(ctx.metadata, "client_quotas", None)
    if not client_quotas or not peer:
        return 0
    rates = getattr(ctx, "connection_rates", None)
    if rates is None:
        rates = ctx.connection_rates = quotas.ConnectionRates(
            int(ctx.config.get("quota.window.num", 11)), int(ctx.config.get("quota.window.size.seconds", 1)) * 1000)
    return rates.accept(client_quotas, peer[0], int(time.monotonic() * 1000))


def request_quotas_on(ctx, connection) -> bool:
    """Whether some client has a request_percentage (then the dispatcher times every request: `timed`)."""
    client_quotas = getattr(ctx.metadata, "client_quotas", None)
    return connection is not None and bool(client_quotas) and any(
        quotas.REQUEST_PERCENTAGE in values for values in client_quotas.values())


@types.coroutine
def timed(coroutine, spent_ns: list):
    """Await `coroutine`, adding to spent_ns[0] the time its steps take on the event loop (not the time it waits
    for others): what a request costs the gateway's one thread, as Kafka counts its handler threads' time."""
    value, error = None, None
    while True:
        started = time.perf_counter_ns()
        try:
            yielded = coroutine.send(value) if error is None else coroutine.throw(error)
        except StopIteration as done:
            spent_ns[0] += time.perf_counter_ns() - started
            return done.value
        except BaseException:
            spent_ns[0] += time.perf_counter_ns() - started
            raise
        spent_ns[0] += time.perf_counter_ns() - started
        try:
            value, error = (yield yielded), None
        except BaseException as e:  # (cancelled, or a failure sent into it)
            value, error = None, e


def request_throttle(ctx, connection, client_id: str | None, spent_ns: int) -> int:
    """request_percentage: the throttle time a request that took `spent_ns` of the gateway's thread earns (its
    share of a second, in percent, recorded as Kafka records request time); the connection muted for it."""
    return throttle(ctx, connection, client_id, quotas.REQUEST_PERCENTAGE, spent_ns * 100 / 1e9)
