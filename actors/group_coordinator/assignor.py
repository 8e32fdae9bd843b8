"""The `simple` share-group assignor (Kafka's `group.share.assignors` default).

KIP-932 ("Share group membership") first described it as "assigns all partitions of all subscribed topics to all
members"; Kafka 4.1+ (`SimpleHomogeneousAssignmentBuilder`) refines that to balance first, then stickiness:

- every assignable partition gets at least one member, and when there are more members than partitions a partition
  is shared: each partition is wanted by `ceil(members / partitions)` members, so every member gets work;
- the resulting `sharing * partitions` assignments are spread over the members so that counts differ by at most one;
- as much of the previous target assignment as those two limits allow is kept.

Written from that description (no code copied). Members with different subscriptions are handled by splitting the
topics into blocks of identical subscriber sets and running the same procedure per block; the extra assignments of a
block go to members with the fewest assignments so far, so balance holds across blocks too.
"""
from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping

TopicPartition = tuple[uuid.UUID, int]
Assignment = dict[uuid.UUID, tuple[int, ...]]

NAME = "simple"
KAFKA_CLASS_NAME = "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"


def _sort_key(tp: TopicPartition):
    return tp[0].bytes, tp[1]


def assign(subscriptions: Mapping[str, frozenset[uuid.UUID]],
           assignable: Mapping[uuid.UUID, list[int]],
           previous: Mapping[str, Mapping[uuid.UUID, tuple[int, ...]]]) -> dict[str, Assignment]:
    """The target assignment of every member.

    subscriptions: member id -> ids of the topics it subscribes to (that exist);
    assignable: topic id -> its partitions that may be assigned (initialized share-partitions);
    previous: member id -> its previous target assignment (for stickiness)."""
    blocks: dict[tuple[str, ...], list[TopicPartition]] = {}
    for topic_id in sorted(assignable, key=lambda t: t.bytes):
        members = tuple(sorted(m for m, topics in subscriptions.items() if topic_id in topics))
        if members and assignable[topic_id]:
            blocks.setdefault(members, []).extend((topic_id, p) for p in sorted(assignable[topic_id]))

    assigned_count = {m: 0 for m in subscriptions}
    result: dict[str, dict[uuid.UUID, list[int]]] = {m: {} for m in subscriptions}
    for members, partitions in sorted(blocks.items()):
        block_partitions = set(partitions)
        kept_before = {m: sorted(((t, p) for t, ps in previous.get(m, {}).items() for p in ps
                                  if (t, p) in block_partitions), key=_sort_key) for m in members}
        sharing = -(-len(members) // len(partitions))
        base, extra = divmod(sharing * len(partitions), len(members))
        # balance before stickiness: the extra assignments go to the members with the fewest so far
        by_need = sorted(members, key=lambda m: (assigned_count[m], -len(kept_before[m]), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_need)}

        holders: dict[TopicPartition, set[str]] = {tp: set() for tp in partitions}
        block_result: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for m in members:  # keep what the limits allow
            for tp in kept_before[m]:
                if len(block_result[m]) < quota[m] and len(holders[tp]) < sharing:
                    holders[tp].add(m)
                    block_result[m].append(tp)

        heap = [(-(quota[m] - len(block_result[m])), m) for m in members if quota[m] > len(block_result[m])]
        heapq.heapify(heap)
        for tp in sorted(partitions, key=lambda tp: (len(holders[tp]), _sort_key(tp))):
            skipped = []
            while len(holders[tp]) < sharing and heap:
                neg_left, m = heapq.heappop(heap)
                if m in holders[tp]:
                    skipped.append((neg_left, m))
                    continue
                holders[tp].add(m)
                block_result[m].append(tp)
                if neg_left + 1 < 0:
                    heapq.heappush(heap, (neg_left + 1, m))
            for entry in skipped:
                heapq.heappush(heap, entry)

        for m, tps in block_result.items():
            assigned_count[m] += len(tps)
            for topic_id, p in tps:
                result[m].setdefault(topic_id, []).append(p)
    return {m: {t: tuple(sorted(ps)) for t, ps in a.items()} for m, a in result.items()}
