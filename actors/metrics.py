"""KIP-932's share-group metrics, exported through Ray's metrics API (Prometheus format on each
node's metrics agent). Shells report the counters their pure cores keep; names follow Kafka's
(group-count, rebalance-count, share-acknowledgement-count, record-acknowledgement-count,
partition-load-time) with a kray_ prefix and Prometheus spelling.
"""
from __future__ import annotations

from functools import lru_cache

ACK_TYPE_NAMES = {0: "gap", 1: "accept", 2: "release", 3: "reject", 4: "renew"}


@lru_cache(maxsize=None)
def _metrics():
    from ray.util import metrics as m
    return {
        "group_count": m.Gauge("kray_share_group_count", "Share groups by state", tag_keys=("state",)),
        "rebalances": m.Counter("kray_share_group_rebalance_count", "Share group epoch bumps (rebalances)"),
        "share_acks": m.Counter("kray_share_acknowledgement_count", "ShareAcknowledge and piggybacked "
                                "acknowledgement requests applied"),
        "record_acks": m.Counter("kray_record_acknowledgement_count", "Records acknowledged, by type",
                                 tag_keys=("ack_type",)),
        "load_time": m.Histogram("kray_share_partition_load_time_ms", "Time to load a share-partition's state "
                                 "from the share coordinator", boundaries=[1, 5, 10, 50, 100, 500, 1000, 5000]),
    }


def record_group_counts(counts_by_state: dict[str, int]) -> None:
    for state, count in counts_by_state.items():
        _metrics()["group_count"].set(count, tags={"state": state})


def record_rebalances(count: int) -> None:
    if count > 0:
        _metrics()["rebalances"].inc(count)


def record_acknowledgements(requests: int, records_by_type: dict[int, int]) -> None:
    if requests:
        _metrics()["share_acks"].inc(requests)
    for ack_type, count in records_by_type.items():
        if count > 0:
            _metrics()["record_acks"].inc(count, tags={"ack_type": ACK_TYPE_NAMES.get(ack_type, str(ack_type))})


def record_load_time(load_time_ms: float) -> None:
    _metrics()["load_time"].observe(load_time_ms)


def counter_deltas(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    """What a core's cumulative counters gained between two readings."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
