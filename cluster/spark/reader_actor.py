"""The Ray actor that reads a share group: one share-group member, a buffer of acquired records,
and the batches it has handed out but not yet settled.

`take` returns the records of a batch as ONE Arrow table (Ray stores it in the object store, owned
by the caller), so Spark gets few, large blocks. The actor keeps, per batch, which offsets of which
partition it holds, and settles them (ACCEPT / RELEASE / REJECT) through the member that acquired
them. A renewal thread RENEWs the locks of everything held (buffered or handed out) every half
third of the lock duration, so a long Spark job keeps its batch.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from typing import Any

import pyarrow as pa

from cluster.spark.share_client import (ACCEPT, RELEASE, REJECT, RENEW, ACK_TYPE_NAMES, FetchedRecords,
                                        ShareGroupMember, _Ack, offset_ranges)

log = logging.getLogger("kray.spark")

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
RECORD_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC")), ("headers", HEADER_TYPE),
    ("delivery_count", pa.int32()),
])
PREFETCH_RECORDS_DEFAULT = 5000
RENEW_TICK_S = 0.1
RENEWALS_PER_LOCK = 3   # renew every third of the lock duration: a round trip may wait behind a fetch


def to_arrow(chunks: list[FetchedRecords]) -> pa.Table:
    """Column lists -> one Arrow table in RECORD_SCHEMA."""
    keys, values, topics, partitions, offsets, timestamps, headers, counts = [], [], [], [], [], [], [], []
    for c in chunks:
        n = len(c.offsets)
        keys += c.keys
        values += c.values
        topics += [c.topic] * n
        partitions += [c.partition] * n
        offsets += c.offsets
        timestamps += c.timestamps_ms
        headers += [[{"key": k, "value": v} for k, v in h] if h else [] for h in c.headers]
        counts += c.delivery_counts
    return pa.Table.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array(topics, pa.string()).dictionary_encode().cast(pa.string()), pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()), pa.array(timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        pa.array(headers, HEADER_TYPE), pa.array(counts, pa.int32()),
    ], schema=RECORD_SCHEMA)


def split(chunk: FetchedRecords, n: int) -> tuple[FetchedRecords, FetchedRecords]:
    """The first n records of a chunk, and the rest."""
    def part(sl):
        return FetchedRecords(chunk.topic, chunk.partition, chunk.offsets[sl], chunk.timestamps_ms[sl],
                              chunk.keys[sl], chunk.values[sl], chunk.headers[sl], chunk.delivery_counts[sl])
    return part(slice(0, n)), part(slice(n, None))


class ShareReaderActor:
    """Made remote (num_cpus=0, threaded) by `ShareGroupReader`; usable without Ray in tests."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], renew_locks: bool = True,
                 prefetch_records: int = PREFETCH_RECORDS_DEFAULT, fetch_max_wait_ms: int = 200,
                 client_id: str = "kray-spark-reader"):
        self._cond = threading.Condition()
        self._buffer: deque[FetchedRecords] = deque()
        self._buffered = 0
        self._prefetch_records = prefetch_records
        self._held: dict[int, dict[tuple[str, int], list[int]]] = {}
        self._lost: dict[int, dict[tuple[str, int], int]] = {}   # batch -> records delivered again meanwhile
        self._batch_ids = itertools.count(1)
        self._closed = False
        self.renew_locks = renew_locks
        self.renewals = 0
        self.renew_failures = 0
        self.member = ShareGroupMember(bootstrap, group, topics, on_records=self._on_records,
                                       want_records=self._room, fetch_max_wait_ms=fetch_max_wait_ms,
                                       client_id=client_id)
        self._renewer = threading.Thread(target=self._renew_loop, name="share-renew", daemon=True)
        self._renewer.start()

    # ---- called by the member's I/O thread ----

    def _room(self) -> int:
        with self._cond:
            return 0 if self._closed else max(0, self._prefetch_records - self._buffered)

    def _on_records(self, chunks: list[FetchedRecords]) -> None:
        with self._cond:
            for c in chunks:
                if c.offsets:
                    self._forget_stale(c)
                    self._buffer.append(c)
                    self._buffered += len(c.offsets)
            self._cond.notify_all()

    def _forget_stale(self, chunk: FetchedRecords) -> None:
        """Records fetched again were lost by an earlier hold (its lock expired): an unsettled batch
        must not settle this new delivery, and an older buffered copy must not be handed out."""
        tp, lo, hi = (chunk.topic, chunk.partition), chunk.offsets[0], chunk.offsets[-1]
        new = None
        for batch_id, held in self._held.items():
            offsets = held.get(tp)
            if not offsets or min(offsets) > hi or max(offsets) < lo:
                continue
            new = new or set(chunk.offsets)
            keep = [o for o in offsets if o not in new]
            if len(keep) < len(offsets):
                held[tp] = keep
                lost = self._lost.setdefault(batch_id, {})
                lost[tp] = lost.get(tp, 0) + len(offsets) - len(keep)
        for i, old in enumerate(self._buffer):
            if (old.topic, old.partition) != tp or old.offsets[0] > hi or old.offsets[-1] < lo:
                continue
            new = new or set(chunk.offsets)
            keep = [j for j, o in enumerate(old.offsets) if o not in new]
            if len(keep) < len(old.offsets):
                self._buffered -= len(old.offsets) - len(keep)
                self._buffer[i] = FetchedRecords(old.topic, old.partition, *(
                    [column[j] for j in keep] for column in (old.offsets, old.timestamps_ms, old.keys, old.values,
                                                             old.headers, old.delivery_counts)))

    # ---- remote API ----

    def member_id(self) -> str:
        return self.member.member_id

    def take(self, max_records: int, timeout_s: float) -> tuple[dict[str, Any], pa.Table | None]:
        """Up to max_records records as soon as that many are buffered, or when timeout_s passes
        (possibly none). Returns ({batch_id, count}, table)."""
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._prefetch_records = max(self._prefetch_records, max_records)
            while self._buffered < max_records and not self._closed:
                self._raise_if_failed()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            taken, count = [], 0
            while self._buffer and count < max_records:
                chunk = self._buffer.popleft()
                if count + len(chunk.offsets) > max_records:
                    chunk, rest = split(chunk, max_records - count)
                    self._buffer.appendleft(rest)
                taken.append(chunk)
                count += len(chunk.offsets)
            self._buffered -= count
            if not count:
                return {"batch_id": None, "count": 0, "buffered": self._buffered}, None
            batch_id = next(self._batch_ids)
            held: dict[tuple[str, int], list[int]] = {}
            for c in taken:
                held.setdefault((c.topic, c.partition), []).extend(c.offsets)
            self._held[batch_id] = held
            buffered = self._buffered
        return {"batch_id": batch_id, "count": count, "buffered": buffered}, to_arrow(taken)

    def settle(self, batch_ids: list[int], ack_type: int, rejected: list[tuple[str | None, int, int]] = (),
               timeout_s: float = 60.0) -> list[str]:
        """Acknowledge every record of the given batches with ack_type, except `rejected` (topic or
        None, partition, offset) which are REJECTed. Returns the failures, one message per partition."""
        if ack_type not in (ACCEPT, RELEASE, REJECT):
            raise ValueError(f"ack_type must be ACCEPT, RELEASE or REJECT, got {ack_type}")
        failures = []
        held: dict[tuple[str, int], list[int]] = {}
        lost: dict[tuple[str, int], int] = {}
        with self._cond:
            for batch_id in batch_ids:
                if batch_id not in self._held:
                    failures.append(f"batch {batch_id} is not held by this reader (settled already?)")
                    continue
                for tp, offsets in self._held.pop(batch_id).items():
                    held.setdefault(tp, []).extend(offsets)
                for tp, n in self._lost.pop(batch_id, {}).items():
                    lost[tp] = lost.get(tp, 0) + n
        failures += [f"{t}-{p}: {n} records were held past their lock and delivered again (renew locks, or "
                     f"raise share.record.lock.duration.ms)" for (t, p), n in sorted(lost.items())]
        rejects: dict[tuple[str, int], set[int]] = {}
        for topic, partition, offset in rejected:
            for (t, p) in held:
                if p == partition and topic in (None, t):
                    rejects.setdefault((t, p), set()).add(offset)
        acks = []
        for (topic, partition), offsets in held.items():
            if not offsets:
                continue
            bad = rejects.get((topic, partition), set()) & set(offsets)
            ranges = offset_ranges([o for o in offsets if o not in bad], ack_type) + offset_ranges(bad, REJECT)
            acks.append(_Ack(topic, partition, sorted(ranges)))
        for a in self.member.acknowledge_many(acks, timeout_s):
            if a.error_code:
                failures.append(f"{a.topic}-{a.partition}: {_error_name(a.error_code)}"
                                f"{': ' + a.error_message if a.error_message else ''}")
        return failures

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"buffered": self._buffered, "held_batches": len(self._held), "renewals": self.renewals, "renew_failures": self.renew_failures,
                    "lock_duration_ms": self.member.lock_duration_ms, "member_id": self.member.member_id,
                    "error": repr(self.member.error) if self.member.error else None}

    def close(self) -> None:
        """Leave the group; the broker releases every record still acquired (buffered or held)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.member.close()

    # ---- internals ----

    def _raise_if_failed(self) -> None:
        if self.member.error is not None:
            raise RuntimeError(f"the share group reader stopped: {self.member.error}")

    def _renew_loop(self) -> None:
        last = time.monotonic()
        while not self._closed:
            time.sleep(RENEW_TICK_S)
            lock_ms = self.member.lock_duration_ms  # known after the first fetch
            if self._closed or not self.renew_locks or lock_ms is None:
                continue
            if time.monotonic() - last < lock_ms / 1000 / RENEWALS_PER_LOCK:
                continue
            last = time.monotonic()
            with self._cond:
                holding: dict[tuple[str, int], list[int]] = {}
                for held in self._held.values():
                    for tp, offsets in held.items():
                        holding.setdefault(tp, []).extend(offsets)
                for c in self._buffer:
                    holding.setdefault((c.topic, c.partition), []).extend(c.offsets)
            if not holding:
                continue
            acks = self.member.acknowledge_many([_Ack(t, p, offset_ranges(o, RENEW)) for (t, p), o in holding.items()],
                                                timeout_s=lock_ms / 1000 / RENEWALS_PER_LOCK)
            self.renewals += 1
            failed = [f"{a.topic}-{a.partition}: {_error_name(a.error_code)}" for a in acks if a.error_code]
            if failed:
                self.renew_failures += 1
                log.warning("renewing locks failed on %s", "; ".join(failed))
            if any(a.error_code == 35 for a in acks):  # UNSUPPORTED_VERSION
                log.warning("the broker cannot renew locks (Kafka < 4.2): batches must finish within "
                            "the group's share.record.lock.duration.ms")
                self.renew_locks = False


def _error_name(code: int) -> str:
    from protocol.error_codes import ErrorCode
    try:
        name = ErrorCode(code).name
    except ValueError:
        return f"error {code}"
    if name == "INVALID_RECORD_STATE":
        return (name + " (the records' locks expired or they were settled already: they go back to the queue "
                "and are delivered again; renew locks or raise share.record.lock.duration.ms)")
    return name


ACK_NAMES = ACK_TYPE_NAMES
