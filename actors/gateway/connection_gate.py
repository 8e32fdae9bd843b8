"""Where a gateway's listeners take new connections: Kafka's acceptor, one per listener, under the
broker's connection limits (actors/connection_limits.py) and each address's connection_creation_rate
(actors/gateway/quota_throttles.py). A listener takes one connection at a time, as Kafka's acceptor
thread does: a wait for the rate or for a free slot holds the listener's next connections behind it.
"""
from __future__ import annotations

import asyncio
import logging

from actors.config_schema import effective_dynamic_broker_config
from actors.connection_limits import ConnectionCounts, Limits, OverridesError, parse_overrides
from actors.gateway.context import monotonic_ms
from actors.gateway.quota_throttles import connection_throttle_ms

log = logging.getLogger("kray.gateway")

SLOT_RECHECK_S = 1.0  # a listener waiting for a free slot reads the limits again this often (they are dynamic)
REJECTED = -1


class ConnectionGate:
    """A gateway's connection counts, shared by its listeners (ctx.connection_gate)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.counts = ConnectionCounts(int(ctx.config.get("quota.window.num", 11)),
                                       int(ctx.config.get("quota.window.size.seconds", 1)) * 1000)
        self.acceptors: dict[str, asyncio.Lock] = {}
        self.released = asyncio.Event()  # set (and replaced) whenever a counted connection closes
        self._limits: tuple[int, Limits] | None = None  # (metadata version, the limits it gives)

    def limits(self) -> Limits:
        metadata = self.ctx.metadata
        version = getattr(metadata, "version", None)
        if self._limits is None or self._limits[0] != version:
            dynamic = getattr(metadata, "dynamic_broker_configs", None) or {}

            def value(key):
                return effective_dynamic_broker_config(key, self.ctx.broker_id, self.ctx.config, dynamic)
            try:
                overrides = parse_overrides(str(value("max.connections.per.ip.overrides") or ""))
            except OverridesError as e:  # (checked when set; a host name may stop resolving)
                log.warning("%s; the overrides are not applied", e)
                overrides = {}
            self._limits = version, Limits(int(value("max.connections")), int(value("max.connections.per.ip")),
                                           overrides, int(value("max.connection.creation.rate")))
        return self._limits[1]

    async def accept(self, listener: str, peer, protected: bool) -> int:
        """0: serve this new connection (counted: `release` it when it closes); REJECTED: close it at once, its
        address holds its max.connections.per.ip; else how long (ms) to hold it unread before closing it, its
        address being over its connection_creation_rate."""
        address = peer[0] if peer else ""
        acceptor = self.acceptors.setdefault(listener, asyncio.Lock())
        async with acceptor:
            throttle_ms = self.counts.creation_throttle_ms(self.limits(), protected, monotonic_ms())
            if throttle_ms:
                await asyncio.sleep(throttle_ms / 1000)
            while not self.counts.slot_available(self.limits(), protected):
                try:
                    await asyncio.wait_for(self.released.wait(), SLOT_RECHECK_S)
                except asyncio.TimeoutError:
                    pass
            ip_throttle_ms = connection_throttle_ms(self.ctx, peer)
            if ip_throttle_ms:
                return ip_throttle_ms
            if not self.counts.add(address, self.limits()):
                log.info("Rejected connection from %s, address already has the configured maximum of %d connections.",
                         address, self.limits().per_ip(address))
                return REJECTED
            return 0

    def release(self, peer) -> None:
        self.counts.remove(peer[0] if peer else "")
        self.released.set()
        self.released = asyncio.Event()
