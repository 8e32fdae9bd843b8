"""Read a share group into Spark: `ShareGroupReader` (reader actors on Ray) and `ShareBatch`
(one batch of acquired records, as a DataFrame, settled as a whole).

Delivery is at least once, tied to the pipeline: a batch's records stay acquired (locks renewed)
until `commit()` accepts them; `release()`, an exception inside `with batch:`, a dead driver (its
reader actors die with it) or an expired lock all put them back in the queue, and the next
delivery carries a higher `delivery_count`. The group's `group.share.delivery.count.limit`
archives a record that keeps failing, as for any consumer.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Iterator

import pyarrow as pa
import ray

from cluster.spark.convert import arrow_to_spark
from cluster.spark.reader_actor import ShareReaderActor
from cluster.admin import AdminError
from cluster.spark.share_client import ACCEPT, RELEASE, Connection, ShareClientError
from protocol.messages import MetadataRequest

log = logging.getLogger("kray.spark")

# Kafka consumer configs the reader understands (Kafka's spelling), and what they map to
CONSUMER_CONFIGS = {"fetch.max.wait.ms": "fetch_max_wait_ms", "client.id": "client_id"}
TAKE_GRACE_S = 30.0
ROUND_WAIT_S = 0.1


def check_topics(bootstrap: str, topics: list[str]) -> None:
    """Fail in the driver, with what to do, before any reader actor starts."""
    try:
        conn = Connection(bootstrap, "kray-spark-check")
    except AdminError as e:
        raise ShareClientError(str(e)) from None
    try:
        r = conn.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                      allow_auto_topic_creation=False))
    finally:
        conn.close()
    missing = [t.name for t in r.topics if t.error_code]
    if missing:
        raise ShareClientError(f"cannot read {', '.join(missing)} from {bootstrap}: no such topic; create it first "
                               f"(kray topics --bootstrap-server {bootstrap} --create --topic {missing[0]})")


def split_evenly(total: int, weights: dict[int, int]) -> dict[int, int]:
    """`total` split over the keys in proportion to their weights (each weight counts at least 1),
    rounding so that the parts add up to `total`."""
    w = {k: max(1, v) for k, v in weights.items()}
    whole = sum(w.values())
    out = {k: total * v // whole for k, v in w.items()}
    for k in sorted(w, key=lambda k: -w[k])[:total - sum(out.values())]:
        out[k] += 1
    return out


class BatchSettleError(RuntimeError):
    """Some records of a batch could not be settled as asked; they go back to the queue and will
    be delivered again (at least once): the message names the partitions and why."""


class ShareBatch:
    """Records acquired for one pipeline step. Settle it once: `commit()`, `release()` or
    `reject(rows)`. As a context manager it commits when the block succeeds and releases when it
    raises."""

    def __init__(self, spark, parts: list[tuple[Any, int, int, ray.ObjectRef]], partitions: int | None):
        self._spark = spark
        self._parts = parts            # (reader actor, batch id, count, Arrow table ref)
        self._partitions = partitions
        self.count = sum(p[2] for p in parts)
        self.counts_by_reader: dict[str, int] = {}
        for reader, _, count, _ in parts:
            key = reader._actor_id.hex()
            self.counts_by_reader[key] = self.counts_by_reader.get(key, 0) + count
        self.settled: str | None = None
        self._df = None
        self._table: pa.Table | None = None

    @property
    def table(self) -> pa.Table:
        """The records as one Arrow table (key, value, topic, partition, offset, timestamp,
        headers, delivery_count)."""
        if self._table is None:
            tables = ray.get([ref for *_, ref in self._parts])
            self._table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        return self._table

    @property
    def df(self):
        """The records as a Spark DataFrame (same columns as `table`)."""
        if self._spark is None:
            raise RuntimeError("this reader has no Spark session: pass one to ShareGroupReader, or use batch.table")
        if self._df is None:
            self._df = arrow_to_spark(self._spark, self.table, self._partitions)
        return self._df

    def commit(self) -> None:
        """Accept every record: they are never delivered again. Raises BatchSettleError if some
        could not be accepted (their locks expired: they will come again)."""
        self._settle("committed", ACCEPT)

    def release(self) -> None:
        """Hand every record back to the queue for another delivery (delivery_count grows)."""
        self._settle("released", RELEASE)

    def reject(self, rows: Iterable) -> None:
        """Archive the given records (never delivered again) and accept the rest. `rows` holds
        (partition, offset) or (topic, partition, offset) tuples, or Rows with those fields."""
        wanted = []
        for row in rows:
            if hasattr(row, "asDict"):
                row = row.asDict()
            if isinstance(row, dict):
                wanted.append((row.get("topic"), int(row["partition"]), int(row["offset"])))
            elif len(row) == 2:
                wanted.append((None, int(row[0]), int(row[1])))
            else:
                wanted.append((row[0], int(row[1]), int(row[2])))
        self._settle("rejected", ACCEPT, wanted)

    def _settle(self, how: str, ack_type: int, rejected: list = ()) -> None:
        if self.settled:
            raise RuntimeError(f"this batch was {self.settled} already: settle a batch once")
        self.settled = how
        by_reader: dict[Any, tuple[Any, list[int]]] = {}
        for reader, batch_id, _, _ in self._parts:
            by_reader.setdefault(reader._actor_id, (reader, []))[1].append(batch_id)
        results = ray.get([reader.settle.remote(ids, ack_type, list(rejected)) for reader, ids in by_reader.values()])
        self._df = self._table = None
        failures = [f for r in results for f in r]
        if failures:
            raise BatchSettleError(f"{how} batch of {self.count} records: not settled on " + "; ".join(failures))

    def __enter__(self) -> "ShareBatch":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.settled:
            return
        if exc_type is None:
            self.commit()
            return
        try:
            self.release()
        except Exception as e:  # the pipeline's own error is the one to see; the records come back anyway
            log.warning("releasing a failed batch of %d records: %s", self.count, e)

    def __repr__(self) -> str:
        return f"ShareBatch(count={self.count}, readers={len(self._parts)}, settled={self.settled})"


class ShareGroupReader:
    """`readers` members of share group `group` on `topics`, each a Ray actor that fetches into
    the object store. More readers than partitions is fine: that is what share groups are for."""

    def __init__(self, spark, bootstrap: str, group: str, topics: str | list[str], readers: int = 2, *,
                 renew_locks: bool = True, reader_cpus: float = 0, prefetch_records: int | None = None,
                 spark_partitions: int | None = None, **consumer_config):
        if readers < 1:
            raise ValueError(f"readers must be >= 1, got {readers}")
        topics = [topics] if isinstance(topics, str) else list(topics)
        unknown = sorted(set(consumer_config) - set(CONSUMER_CONFIGS))
        if unknown:
            raise ValueError(f"unsupported consumer config {', '.join(unknown)}; the reader understands "
                             f"{', '.join(sorted(CONSUMER_CONFIGS))} (pass them as **{{'fetch.max.wait.ms': 100}})")
        options = {CONSUMER_CONFIGS[k]: (int(v) if k.endswith(".ms") else v) for k, v in consumer_config.items()}
        if prefetch_records is not None:
            options["prefetch_records"] = prefetch_records
        if not ray.is_initialized():
            raise RuntimeError("Ray is not running: call ray.init() (or start_spark) before ShareGroupReader")
        check_topics(bootstrap, topics)
        self._spark = spark
        self._spark_partitions = spark_partitions
        self.group = group
        self.topics = topics
        # num_cpus=0 by default: a reader asking for a whole CPU beside a 1-core executor on a
        # 2-CPU node deadlocks with nothing read. Threaded, so settle and take overlap.
        actor_cls = ray.remote(num_cpus=reader_cpus, max_concurrency=8, max_restarts=0)(ShareReaderActor)
        self._readers = [actor_cls.remote(bootstrap, group, topics, renew_locks, **options) for _ in range(readers)]
        self.member_ids = ray.get([r.member_id.remote() for r in self._readers], timeout=60)
        self._closed = False

    def batches(self, max_records: int = 10_000, timeout_s: float = 5.0,
                stop_after_idle_s: float | None = None) -> Iterator[ShareBatch]:
        """Yield a ShareBatch as soon as `max_records` are in hand, or when `timeout_s` has passed
        with at least one record. `max_records` is split evenly over the readers. Runs until the
        caller stops, or until nothing arrived for `stop_after_idle_s`."""
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        idle_since = time.monotonic()
        weights = {i: 1 for i in range(len(self._readers))}
        while not self._closed:
            parts, got = [], 0
            deadline = time.monotonic() + timeout_s
            # Rounds: ask every reader for a share of what is missing, weighted by what it had
            # buffered last time, and wait at most ROUND_WAIT_S for it; a reader with nothing to
            # give (its partitions drained) does not hold the batch up beyond one short round.
            while got < max_records and not self._closed:
                left_s = deadline - time.monotonic()
                if left_s <= 0 and got:
                    break
                asks = split_evenly(max_records - got, weights)
                wait_s = max(0.0, min(ROUND_WAIT_S, left_s))
                calls = [(i, self._readers[i].take.options(num_returns=2).remote(n, wait_s))
                         for i, n in asks.items() if n]
                metas = ray.get([meta for _, (meta, _) in calls], timeout=wait_s + TAKE_GRACE_S)
                for (i, (_, table)), m in zip(calls, metas):
                    weights[i] = m["buffered"] + m["count"]
                    if m["count"]:
                        parts.append((self._readers[i], m["batch_id"], m["count"], table))
                        got += m["count"]
                if left_s <= 0:
                    break
            if parts:
                idle_since = time.monotonic()
                yield ShareBatch(self._spark, parts, self._spark_partitions)
            elif stop_after_idle_s is not None and time.monotonic() - idle_since >= stop_after_idle_s:
                return

    def stats(self) -> list[dict[str, Any]]:
        return ray.get([r.stats.remote() for r in self._readers])

    def close(self) -> None:
        """Leave the group: whatever the readers still hold goes back to the queue."""
        if self._closed:
            return
        self._closed = True
        try:
            ray.get([r.close.remote() for r in self._readers], timeout=60)
        finally:
            for r in self._readers:
                ray.kill(r)

    def __enter__(self) -> "ShareGroupReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
