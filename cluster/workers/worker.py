"""One worker of a share-group pool: a confluent-kafka ShareConsumer in explicit acknowledgement
mode running the handler on each record (or each polled batch). ACCEPT when the handler returns,
REJECT when it raises one of the poison exception types (the record is archived, never delivered
again), RELEASE on any other exception (the record comes back, its delivery count one higher,
until the group's delivery count limit archives it).

No RENEW: confluent-kafka 2.16's AcknowledgeType has ACCEPT, RELEASE and REJECT only, so a
record's lock cannot be extended. Every record of a poll is acquired at once and must be
acknowledged within the group's `share.record.lock.duration.ms` (Kafka's default 30 s): keep
`max_poll_records` x handler time below it. Given the lock duration, a worker RELEASEs, unhandled,
the records of a poll it could not finish before their lock expires (counted as `lock_released`),
so no handler works on a record someone else may already hold; the lock runs from the broker's
acquisition, which may precede the poll (librdkafka fetches ahead), hence a margin. A record
acknowledged after its lock expired counts as an acknowledgement error (the broker already made it
available again).

Draining (scale-down, stop): the worker stops polling, finishes and acknowledges the records it
holds, commits, and closes the consumer, which leaves the group and releases what librdkafka had
fetched ahead, so no record waits for a lock to time out.

A plain class; the pool makes it a threaded Ray actor (`run` on one thread, `stats` and `drain`
from others).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

POLL_TIMEOUT_S = 0.5
LOCK_MARGIN_MAX_S = 1.0  # released this long (or a tenth of the lock) before the lock would expire


class ShareWorker:
    def __init__(self, bootstrap_servers: str, group: str, topics: list[str], handler: Callable[[Any], Any], *,
                 batch: bool = False, poison: tuple[type[BaseException], ...] = (),
                 client_config: dict[str, str] | None = None, max_poll_records: int = 10, name: str = "worker",
                 record_lock_duration_ms: int | None = None):
        self.bootstrap_servers, self.group, self.topics = bootstrap_servers, group, list(topics)
        self.handler, self.batch, self.poison = handler, batch, tuple(poison)
        self.client_config, self.max_poll_records, self.name = dict(client_config or {}), max_poll_records, name
        self.record_lock_duration_ms = record_lock_duration_ms
        self._drain = threading.Event()
        self._lock = threading.Lock()
        self._counts = {"accepted": 0, "released": 0, "rejected": 0, "handler_s": 0.0, "errors": 0,
                        "ack_errors": 0, "in_flight": 0,
                        "lock_released": 0, "empty_polls": 0}
        self._state = "starting"
        self._last_error: str | None = None
        self._first_records_at: float | None = None  # wall clock: the pool times a worker's start-up with it

    def _consumer(self):
        from confluent_kafka import ShareConsumer
        config = {"bootstrap.servers": self.bootstrap_servers, "group.id": self.group,
                  "client.id": f"kray-share-worker-{self.name}", "share.acknowledgement.mode": "explicit",
                  "max.poll.records": self.max_poll_records, "log_level": 3} | self.client_config
        consumer = ShareConsumer(config)
        consumer.set_acknowledgement_commit_callback(self._acknowledged)
        consumer.subscribe(self.topics)
        return consumer

    def _acknowledged(self, offsets, error) -> None:
        if error is not None:
            with self._lock:
                self._counts["ack_errors"] += sum(len(o) for o in offsets.values()) if offsets else 1
                self._last_error = f"acknowledgement failed: {error}"

    def run(self) -> dict:
        """Consume until drained; returns the final stats."""
        from confluent_kafka import KafkaException
        consumer = self._consumer()
        self._state = "running"
        try:
            while not self._drain.is_set():
                try:
                    messages = consumer.poll(POLL_TIMEOUT_S)
                except KafkaException as e:
                    self._error(f"poll: {e}")
                    time.sleep(POLL_TIMEOUT_S)
                    continue
                records = []
                for m in messages:
                    if m.error() is not None:
                        self._error(f"fetch: {m.error()}")
                    else:
                        records.append(m)
                if not records:
                    with self._lock:
                        self._counts["empty_polls"] += 1  # idle: the pool does not measure capacity on it
                else:
                    if self._first_records_at is None:
                        self._first_records_at = time.time()
                    self._handle(consumer, records, polled_s=time.monotonic())
            self._state = "draining"
            try:
                consumer.commit_sync()
            except KafkaException as e:
                self._error(f"commit: {e}")
        finally:
            consumer.close()  # leaves the group: what librdkafka fetched ahead is released
            self._state = "stopped"
        return self.stats()

    def _lock_left_s(self, polled_s: float) -> float:
        """Seconds the records of a poll may still be worked on (infinite without a known lock)."""
        if not self.record_lock_duration_ms:
            return float("inf")
        lock_s = self.record_lock_duration_ms / 1000
        return lock_s - min(LOCK_MARGIN_MAX_S, lock_s / 10) - (time.monotonic() - polled_s)

    def _expected_s(self) -> float:
        done = sum(self._counts[k] for k in ("accepted", "released", "rejected"))
        return self._counts["handler_s"] / done if done else 0.0

    def _handle(self, consumer, records: list, polled_s: float) -> None:
        from confluent_kafka import AcknowledgeType
        with self._lock:
            self._counts["in_flight"] = len(records)
        if self.batch:
            outcome, took_s = self._call(records)
            outcomes = [(m, outcome) for m in records]
            self._count(outcome, len(records), took_s)
        else:
            outcomes = []
            for m in records:
                if self._lock_left_s(polled_s) < self._expected_s():
                    outcomes.append((m, "lock_released"))  # its lock would expire first: someone else's now
                    with self._lock:
                        self._counts["lock_released"] += 1
                    continue
                outcome, took_s = self._call(m)
                outcomes.append((m, outcome))
                self._count(outcome, 1, took_s)
        for m, outcome in outcomes:
            consumer.acknowledge(m, {"accepted": AcknowledgeType.ACCEPT, "released": AcknowledgeType.RELEASE,
                                     "rejected": AcknowledgeType.REJECT,
                                     "lock_released": AcknowledgeType.RELEASE}[outcome])
        with self._lock:
            self._counts["in_flight"] = 0

    def _call(self, arg) -> tuple[str, float]:
        started = time.perf_counter()
        try:
            self.handler(arg)
            outcome = "accepted"
        except self.poison:
            outcome = "rejected"
        except Exception as e:
            self._error(f"handler: {type(e).__name__}: {e}")
            outcome = "released"
        return outcome, time.perf_counter() - started

    def _count(self, outcome: str, records: int, took_s: float) -> None:
        with self._lock:
            self._counts[outcome] += records
            self._counts["handler_s"] += took_s

    def _error(self, message: str) -> None:
        with self._lock:
            self._counts["errors"] += 1
            self._last_error = message

    def drain(self) -> None:
        """Stop polling; `run` finishes the records it holds, acknowledges them and returns."""
        self._drain.set()

    def stats(self) -> dict:
        """Cumulative counts since the worker started (the pool takes the differences)."""
        with self._lock:
            return dict(self._counts, state=self._state, last_error=self._last_error, name=self.name,
                        first_records_at=self._first_records_at)
