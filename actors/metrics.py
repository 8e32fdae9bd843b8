"""Group and share-group metrics, exported through Ray's metrics API (Prometheus format on each
node's metrics agent). Shells report the counters their pure cores keep; names follow Kafka's
(group-count, rebalance-count, share-acknowledgement-count, record-acknowledgement-count,
partition-load-time, consumer lag) with a kray_ prefix and Prometheus spelling.
"""
from __future__ import annotations

from functools import lru_cache

ACK_TYPE_NAMES = {0: "gap", 1: "accept", 2: "release", 3: "reject", 4: "renew"}


@lru_cache(maxsize=None)
def _metrics():
    from ray.util import metrics as m
    return {
        "group_count": m.Gauge("kray_group_count", "Groups by type (share, classic, consumer) and state, per "
                               "coordinator (its __consumer_offsets partition): sum them for the cluster",
                               tag_keys=("type", "state", "coordinator")),
        "rebalances": m.Counter("kray_group_rebalance_count", "Rebalances by group type (classic: join phases; "
                                "share and consumer: group epoch bumps)", tag_keys=("type",)),
        "consumer_lag": m.Gauge("kray_consumer_group_lag", "Records between a group's committed offset and the "
                                "partition's high watermark", tag_keys=("group", "topic", "partition")),
        "share_acks": m.Counter("kray_share_acknowledgement_count", "ShareAcknowledge and piggybacked "
                                "acknowledgement requests applied"),
        "record_acks": m.Counter("kray_record_acknowledgement_count", "Records acknowledged, by type",
                                 tag_keys=("ack_type",)),
        "dead_letters": m.Counter("kray_share_dead_letter_record_count", "Records a share group archived "
                                  "through its dead-letter topic (KIP-1191), by outcome: written (durable in "
                                  "the DLQ topic) or skipped (no usable DLQ topic)",
                                  tag_keys=("group", "outcome")),
        "archiving": m.Gauge("kray_share_archiving_record_count", "Records of a share-partition waiting "
                             "ARCHIVING for their dead-letter record (KIP-1191): rejected or out of delivery "
                             "attempts, their DLQ write not yet durable", tag_keys=("group", "topic", "partition")),
        "load_time": m.Histogram("kray_share_partition_load_time_ms", "Time to load a share-partition's state "
                                 "from the share coordinator", boundaries=[1, 5, 10, 50, 100, 500, 1000, 5000]),
    }


def record_group_counts(counts: dict[tuple[str, str], int], coordinator: int) -> None:
    """The counts of one coordinator (many share a process: each its own series)."""
    for (group_type, state), count in counts.items():
        _metrics()["group_count"].set(count, tags={"type": group_type, "state": state,
                                                   "coordinator": str(coordinator)})


def record_rebalances(group_type: str, count: int) -> None:
    if count > 0:
        _metrics()["rebalances"].inc(count, tags={"type": group_type})


def record_consumer_lag(group_id: str, topic: str, partition: int, lag: int) -> None:
    _metrics()["consumer_lag"].set(lag, tags={"group": group_id, "topic": topic, "partition": str(partition)})


def record_acknowledgements(requests: int, records_by_type: dict[int, int]) -> None:
    if requests:
        _metrics()["share_acks"].inc(requests)
    for ack_type, count in records_by_type.items():
        if count > 0:
            _metrics()["record_acks"].inc(count, tags={"ack_type": ACK_TYPE_NAMES.get(ack_type, str(ack_type))})


def record_dead_letters(group_id: str, written: int, skipped: int) -> None:
    if written > 0:
        _metrics()["dead_letters"].inc(written, tags={"group": group_id, "outcome": "written"})
    if skipped > 0:
        _metrics()["dead_letters"].inc(skipped, tags={"group": group_id, "outcome": "skipped"})


def record_archiving(group_id: str, topic: str, partition: int, count: int) -> None:
    _metrics()["archiving"].set(count, tags={"group": group_id, "topic": topic, "partition": str(partition)})


def record_load_time(load_time_ms: float) -> None:
    _metrics()["load_time"].observe(load_time_ms)


def counter_deltas(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    """What a core's cumulative counters gained between two readings."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


@lru_cache(maxsize=None)
def _pool_metrics():
    from ray.util import metrics as m
    tags = ("group",)
    return {
        "lag": m.Gauge("kray_share_worker_pool_lag", "A worker pool's share-group lag (records)", tag_keys=tags),
        "rate": m.Gauge("kray_share_worker_pool_rate", "Records a worker pool finishes per second", tag_keys=tags),
        "workers": m.Gauge("kray_share_worker_pool_workers", "Workers serving in a pool (draining ones apart)",
                           tag_keys=tags),
        "handler_time": m.Gauge("kray_share_worker_pool_handler_time_ms", "A pool's handler time per record "
                                "(moving average)", tag_keys=tags),
        "records": m.Counter("kray_share_worker_pool_record_count", "Records a pool's handler finished, by "
                             "acknowledgement (accept, release, reject)", tag_keys=("group", "ack_type")),
    }


_pool_seen: dict[tuple[str, str], int] = {}


def record_worker_pool(group: str, stats: dict) -> None:
    """A ShareWorkerPool's stats() after a tick: gauges set, record counters advanced."""
    m, tags = _pool_metrics(), {"group": group}
    if stats.get("lag") is not None:
        m["lag"].set(stats["lag"], tags=tags)
    m["rate"].set(stats["rate"], tags=tags)
    m["workers"].set(stats["workers"], tags=tags)
    if stats.get("handler_time_ms") is not None:
        m["handler_time"].set(stats["handler_time_ms"], tags=tags)
    for outcome, ack_type in (("accepted", "accept"), ("released", "release"), ("rejected", "reject")):
        gained = stats.get(outcome, 0) - _pool_seen.get((group, outcome), 0)
        _pool_seen[(group, outcome)] = stats.get(outcome, 0)
        if gained > 0:
            m["records"].inc(gained, tags={"group": group, "ack_type": ack_type})
