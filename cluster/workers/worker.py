"""One worker of a share-group pool: a confluent-kafka ShareConsumer in explicit acknowledgement
mode running the handler on each record (or each polled batch). ACCEPT when the handler returns,
REJECT when it raises one of the poison exception types (the record is archived, never delivered
again), RELEASE on any other exception (the record comes back, its delivery count one higher,
until the group's delivery count limit archives it).

No RENEW: confluent-kafka 2.16's AcknowledgeType has ACCEPT, RELEASE and REJECT only, so a
record's lock cannot be extended. Every record of a poll is acquired at once and must be
acknowledged within the group's `share.record.lock.duration.ms` (Kafka's default 30 s): keep
`max_poll_records` x handler time below it. A record acknowledged after its lock expired counts as
an acknowledgement error (the broker already made it available again).

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


class ShareWorker:
    def __init__(self, bootstrap_servers: str, group: str, topics: list[str], handler: Callable[[Any], Any], *,
                 batch: bool = False, poison: tuple[type[BaseException], ...] = (),
                 client_config: dict[str, str] | None = None, max_poll_records: int = 10, name: str = "worker"):
        self.bootstrap_servers, self.group, self.topics = bootstrap_servers, group, list(topics)
        self.handler, self.batch, self.poison = handler, batch, tuple(poison)
        self.client_config, self.max_poll_records, self.name = dict(client_config or {}), max_poll_records, name
        self._drain = threading.Event()
        self._lock = threading.Lock()
        self._counts = {"accepted": 0, "released": 0, "rejected": 0, "handler_s": 0.0, "errors": 0,
                        "ack_errors": 0, "in_flight": 0}
        self._state = "starting"
        self._last_error: str | None = None

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
                if records:
                    self._handle(consumer, records)
            self._state = "draining"
            try:
                consumer.commit_sync()
            except KafkaException as e:
                self._error(f"commit: {e}")
        finally:
            consumer.close()  # leaves the group: what librdkafka fetched ahead is released
            self._state = "stopped"
        return self.stats()

    def _handle(self, consumer, records: list) -> None:
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
                outcome, took_s = self._call(m)
                outcomes.append((m, outcome))
                self._count(outcome, 1, took_s)
        for m, outcome in outcomes:
            consumer.acknowledge(m, {"accepted": AcknowledgeType.ACCEPT, "released": AcknowledgeType.RELEASE,
                                     "rejected": AcknowledgeType.REJECT}[outcome])
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
            return dict(self._counts, state=self._state, last_error=self._last_error, name=self.name)
