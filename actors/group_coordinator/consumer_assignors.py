"""Server-side assignors of KIP-848 consumer groups (`group.consumer.assignors`, default "uniform,range").

Both take every member's subscription (topic ids that exist) and its previous target assignment, plus the partition
count of each topic, and return every member's new target assignment. Written from the KIP and the behaviour of
Kafka's assignors (no code copied):

- `uniform` (Kafka's UniformAssignor): each partition of a subscribed topic goes to exactly one of its subscribers;
  balance comes first, then stickiness to the previous target. Partitions keep their previous owner when it still
  subscribes; the rest go to the least-loaded subscriber; then single partitions move from the most-loaded member
  to a less-loaded subscriber while that narrows the gap by at least two. With identical subscriptions
  (homogeneous) member counts end up differing by at most one and only the excess moves; with different
  subscriptions (heterogeneous) no single move can improve the balance. Racks are not considered.
- `range` (Kafka's server-side RangeAssignor): per topic, its subscribers in a fixed order (static members by
  instance id first, then the others by member id) get contiguous ranges, the first `partitions % subscribers` of
  them one partition more. The order is the same for every topic, so topics with equal partition counts are
  co-partitioned. It is not sticky.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[uuid.UUID, int]
Assignment = dict[uuid.UUID, frozenset[int]]  # topic id -> partitions; topics without partitions are left out

UNIFORM = "uniform"
RANGE = "range"
KAFKA_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


@dataclass(frozen=True)
class MemberSubscription:
    topic_ids: frozenset[uuid.UUID]
    instance_id: str | None = None
    previous: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)  # previous target assignment


def _member_order(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Static members by instance id, then dynamic members by member id (Kafka's RangeAssignor order)."""
    return sorted(members, key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id is not None
                  else (1, "", m))


def _subscribers(members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
                 ) -> dict[uuid.UUID, list[str]]:
    order = _member_order(members)
    return {t: [m for m in order if t in members[m].topic_ids]
            for t in sorted(partition_counts, key=lambda t: t.bytes) if partition_counts[t] > 0}


def _freeze(result: Mapping[str, Mapping[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in result.items()}


def range_assign(members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
                 ) -> dict[str, Assignment]:
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic_id, subscribers in _subscribers(members, partition_counts).items():
        if not subscribers:
            continue
        quota, extra = divmod(partition_counts[topic_id], len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            end = start + quota + (1 if i < extra else 0)
            if end > start:
                result[m][topic_id] = set(range(start, end))
            start = end
    return _freeze(result)


def uniform_assign(members: Mapping[str, MemberSubscription], partition_counts: Mapping[uuid.UUID, int]
                   ) -> dict[str, Assignment]:
    subscribers = _subscribers(members, partition_counts)
    rank = {m: i for i, m in enumerate(_member_order(members))}
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    owner: dict[TopicPartition, str] = {}

    # 1. stickiness: a partition stays with its previous owner while that member still subscribes to its topic
    for m in _member_order(members):
        for topic_id, partitions in sorted(members[m].previous.items(), key=lambda kv: kv[0].bytes):
            if m not in subscribers.get(topic_id, ()):
                continue
            for p in sorted(partitions):
                if p < partition_counts[topic_id] and (topic_id, p) not in owner:
                    owner[(topic_id, p)] = m
                    owned[m].add((topic_id, p))

    def least_loaded(candidates):
        return min(candidates, key=lambda m: (len(owned[m]), rank[m]))

    # 2. the rest to the least-loaded subscriber, partitions with the fewest subscribers first
    unassigned = [(t, p) for t, subs in subscribers.items() if subs
                  for p in range(partition_counts[t]) if (t, p) not in owner]
    unassigned.sort(key=lambda tp: (len(subscribers[tp[0]]), tp[0].bytes, tp[1]))
    for tp in unassigned:
        m = least_loaded(subscribers[tp[0]])
        owner[tp] = m
        owned[m].add(tp)

    # 3. balance: move one partition at a time from a loaded member to a subscriber with at least two fewer
    while _move_one(owned, owner, subscribers, rank):
        pass

    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for (topic_id, p), m in owner.items():
        result[m].setdefault(topic_id, set()).add(p)
    return _freeze(result)


def _move_one(owned, owner, subscribers, rank) -> bool:
    for hi in sorted(owned, key=lambda m: (-len(owned[m]), rank[m])):
        limit = len(owned[hi]) - 2
        if limit < 0:
            return False
        for tp in sorted(owned[hi], key=lambda tp: (tp[0].bytes, -tp[1])):
            candidates = [m for m in subscribers[tp[0]] if len(owned[m]) <= limit]
            if candidates:
                lo = min(candidates, key=lambda m: (len(owned[m]), rank[m]))
                owned[hi].discard(tp)
                owned[lo].add(tp)
                owner[tp] = lo
                return True
    return False


ASSIGNORS: dict[str, Callable[[Mapping[str, MemberSubscription], Mapping[uuid.UUID, int]], dict[str, Assignment]]] = {
    UNIFORM: uniform_assign,
    RANGE: range_assign,
}
