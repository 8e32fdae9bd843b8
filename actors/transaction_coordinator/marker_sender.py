"""The transaction coordinator's marker channel: WriteTxnMarkers to the partitions' leaders until written.

Kafka's TransactionMarkerChannelManager, as one asyncio task: `MarkerProgress` (wire.py) says which partitions of
which transactions still need their marker; every round groups them by leader broker into one WriteTxnMarkers
request per broker (never a Ray call per marker: "Ray for control, sockets for data"), sent over a kept-open
connection to that broker's inter-broker listener (TLS and a login as the broker where it uses them, as the replica
fetchers and share-state clients connect). Partitions answered with a retriable error, or whose request failed
(no connection, no answer, the broker does not serve WriteTxnMarkers yet), go again in a later round, after a
backoff that doubles up to MARKER_RETRY_BACKOFF_MAX_S. A transaction whose every partition is written is reported
once, through `on_written` (the shell steps the core's MarkersWritten and appends its Complete* record).

The sender knows nothing of Ray: `leader_of` maps a partition to its leader broker id (None while leaderless, or
GONE where its topic was deleted: Kafka skips the marker of a deleted partition), `address_of` a broker id to its
inter-broker (host, port), and `connect` opens a connection; the shell gives them from its metadata image.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from actors.broker_connection import BrokerConnection

from .core import Markers, MarkersWritten
from .wire import MarkerProgress

__all__ = ["GONE", "WRITE_TXN_MARKERS", "WRITE_TXN_MARKERS_VERSION", "MarkerConnection", "MarkerSender"]

log = logging.getLogger("kray.transaction_coordinator")
WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1       # v2 adds transaction_version (KIP-890 part 2), which Kray does not use
MARKER_REQUEST_TIMEOUT_S = 30.0     # Kafka's request.timeout.ms for the marker channel
MARKER_RETRY_BACKOFF_MIN_S = 0.1
MARKER_RETRY_BACKOFF_MAX_S = 5.0
FAILURE_LOG_INTERVAL_S = 30.0       # a peer that keeps failing is logged this often, not every round
GONE = -2                           # leader_of: the partition's topic is deleted

TopicPartition = tuple[str, int]


class MarkerConnection(BrokerConnection):
    """WriteTxnMarkers (and any Kafka request) to one broker's inter-broker listener."""
    CLIENT_ID = "kray-transaction-coordinator"
    RESPONSE_BYTES_MAX = 16 * 1024 * 1024


class MarkerSender:
    def __init__(self, leader_of: Callable[[TopicPartition], int | None],
                 address_of: Callable[[int], tuple[str, int] | None],
                 connect: Callable[[str, int], Awaitable[MarkerConnection]],
                 on_written: Callable[[MarkersWritten], Awaitable[None]],
                 refresh_metadata: Callable[[], Awaitable[None]] | None = None):
        self.leader_of, self.address_of, self.connect = leader_of, address_of, connect
        self.on_written, self.refresh_metadata = on_written, refresh_metadata
        self.progress = MarkerProgress()
        self.connections: dict[tuple[str, int], MarkerConnection] = {}
        self.wake = asyncio.Event()
        self.backoff_s = MARKER_RETRY_BACKOFF_MIN_S
        self.retrying = False
        self.task: asyncio.Task | None = None
        self.in_flight: set[asyncio.Task] = set()
        self.logged_failures: dict[Any, float] = {}

    # ---- what the shell calls ----------------------------------------------------------------------------------
    def start(self, markers: Markers) -> None:
        """Send `markers` (their Prepare record is durable) until every partition has its marker."""
        written = self.progress.start(markers)
        if written is not None:  # no partitions: written at once
            self._spawn(self.on_written(written))
        if self.task is None:
            self.task = asyncio.ensure_future(self._run())
        self.wake.set()

    def pending(self) -> set[str]:
        """The transactional ids whose markers are still being written."""
        return set(self.progress.waiting)

    def close(self) -> None:
        for task in [self.task, *self.in_flight]:
            if task is not None:
                task.cancel()
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()

    # ---- the rounds ----------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            try:
                if self.retrying:  # a round left something to retry: back off (doubling) and look again
                    self.retrying = False
                    await asyncio.sleep(self.backoff_s)
                    self.backoff_s = min(self.backoff_s * 2, MARKER_RETRY_BACKOFF_MAX_S)
                    if self.refresh_metadata is not None:
                        await self.refresh_metadata()
                if not self._round():
                    self._retry_later()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("a round of transaction markers failed")
                self._retry_later()

    def _round(self) -> bool:
        """Send what is to send now; False if partitions are left that this round could not send (leaderless)."""
        for markers, tp in self._gone():
            self._spawn(self._report(self.progress.partition_gone(markers.transactional_id, tp)))
        requests, leaderless = self.progress.requests(self.leader_of)
        for request_id, broker, request in requests:
            self._spawn(self._send(request_id, broker, request))
        if leaderless:
            self._log_once(("leaderless",), "transaction markers wait for a leader of %s",
                           sorted({tp for _, tp in leaderless}))
        return not leaderless

    def _gone(self) -> list[tuple[Markers, TopicPartition]]:
        return [(markers, tp) for markers, left in self.progress.waiting.values() for tp in sorted(left)
                if self.leader_of(tp) == GONE]

    async def _send(self, request_id: int, broker: int, request) -> None:
        try:
            address = self.address_of(broker)
            if address is None:
                raise ConnectionError(f"broker {broker} has no known address")
            connection = self.connections.get(address)
            if connection is None or not connection.usable:
                connection = self.connections[address] = await self.connect(*address)
            response = await connection.call(request, WRITE_TXN_MARKERS_VERSION, MARKER_REQUEST_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.progress.failed(request_id)
            self._log_once(("broker", broker), "WriteTxnMarkers to broker %d failed (retrying with backoff): %s",
                           broker, e)
            self._retry_later()
            return
        try:
            written = self.progress.answer(request_id, response)
        except RuntimeError as e:  # an answer no marker can take (a bug, or a refusal): log it, retry later
            self._log_once(("answer", broker), "WriteTxnMarkers to broker %d: %s (retrying with backoff)", broker, e)
            self.progress.failed(request_id)
            self._retry_later()
            return
        if any(p.error_code for m in response.markers for t in m.topics for p in t.partitions):
            self._retry_later()
        else:
            self.backoff_s = MARKER_RETRY_BACKOFF_MIN_S
        for report in written:
            await self._report(report)

    async def _report(self, written: MarkersWritten | None) -> None:
        if written is None:
            return
        try:
            await self.on_written(written)
        except Exception:
            log.exception("reporting the markers of %s written failed", written.transactional_id)

    def _retry_later(self) -> None:
        self.retrying = True  # the loop sleeps its backoff before the round that retries (see _run)
        self.wake.set()

    def _spawn(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    def _log_once(self, key, message: str, *args) -> None:
        now = time.monotonic()
        if now - self.logged_failures.get(key, -FAILURE_LOG_INTERVAL_S) >= FAILURE_LOG_INTERVAL_S:
            self.logged_failures[key] = now
            log.warning(message, *args)
