"""Committed offsets of consumer groups (classic and KIP-848 alike): a pure store. No Ray, no clock, no I/O.

Every change returns the `__consumer_offsets` records that make it durable (Kafka's OffsetCommit records, one per
partition, keyed by group, topic and partition, so compaction keeps the latest); `replay` rebuilds the store.
Retention (`offsets.retention.minutes`) applies to groups without members: an offset expires once the later of its
commit and the moment its group became empty is older than the retention.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from actors.group_coordinator import classic_records as crec
from actors.group_coordinator.classic_records import OffsetCommitValue
from actors.group_coordinator.records import Record
from cluster.config import BROKER_DEFAULTS
from protocol.errors import ErrorCode

OFFSETS_CONFIG_DEFAULTS = {key: BROKER_DEFAULTS[key] for key in (
    "offsets.retention.minutes", "offset.metadata.max.bytes", "offsets.retention.check.interval.ms")}
NO_OFFSET = -1

TopicPartition = tuple[str, int]


class OffsetStore:
    def __init__(self, broker_config: Mapping[str, Any] | None = None):
        c = {**OFFSETS_CONFIG_DEFAULTS, **(broker_config or {})}
        self.retention_ms = int(c["offsets.retention.minutes"]) * 60_000
        self.metadata_max_bytes = int(c["offset.metadata.max.bytes"])
        self.check_interval_ms = int(c["offsets.retention.check.interval.ms"])
        self._offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}

    def groups(self) -> set[str]:
        return set(self._offsets)

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._offsets.get(group_id))

    def topics(self, group_id: str) -> set[str]:
        return {t for t, _ in self._offsets.get(group_id, {})}

    def live_records(self) -> list[Record]:
        """One record per committed offset, its current value: replaying them rebuilds the store (compaction)."""
        return [crec.offset_commit(g, t, p, v) for g, stored in self._offsets.items() for (t, p), v in stored.items()]

    def positions(self) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, committed offset) of every committed offset: for the lag metric."""
        return [(g, t, p, v.offset) for g, stored in self._offsets.items() for (t, p), v in stored.items()]

    def commit(self, group_id: str, partitions: Iterable[tuple[str, int, int, int, str | None]],
               now_ms: int) -> tuple[list[int], list[Record]]:
        """Commit (topic, partition, offset, leader epoch, metadata) each: an error code per partition (in order),
        and the records of those that succeed."""
        errors, records = [], []
        stored = self._offsets.setdefault(group_id, {})
        for topic, partition, offset, leader_epoch, metadata in partitions:
            metadata = metadata or ""
            if len(metadata.encode()) > self.metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetCommitValue(offset, leader_epoch, metadata, now_ms)
            stored[(topic, partition)] = value
            records.append(crec.offset_commit(group_id, topic, partition, value))
            errors.append(ErrorCode.NONE)
        if not stored:
            del self._offsets[group_id]
        return errors, records

    def fetch(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
              ) -> list[tuple[str, int, OffsetCommitValue | None]]:
        """The committed offsets asked for (None where nothing is committed); every one when `topics` is None."""
        stored = self._offsets.get(group_id, {})
        if topics is None:
            return [(t, p, v) for (t, p), v in sorted(stored.items())]
        return [(t, p, stored.get((t, p))) for t, partitions in topics for p in partitions]

    def delete(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        stored = self._offsets.get(group_id, {})
        records = [crec.offset_commit(group_id, t, p, None) for t, p in partitions if stored.pop((t, p), None)]
        if not stored:
            self._offsets.pop(group_id, None)
        return records

    def delete_group(self, group_id: str) -> list[Record]:
        return self.delete(group_id, list(self._offsets.get(group_id, {})))

    def on_topics_deleted(self, topic_names: set[str]) -> list[Record]:
        """A deleted topic's offsets go too (a topic created again under the name starts afresh)."""
        records = []
        for group_id in list(self._offsets):
            records += self.delete(group_id, [tp for tp in self._offsets[group_id] if tp[0] in topic_names])
        return records

    def expire(self, now_ms: int, empty_since_ms: Callable[[str], int | None],
               subscribed_topics: Callable[[str], set[str] | None] = lambda group_id: None) -> list[Record]:
        """Offsets past retention: in groups that have been empty (`empty_since_ms(group)`: when it became empty,
        -1 for a group with no state but offsets, None while it has members), and (KIP-496) offsets of topics a
        group with members no longer subscribes to (`subscribed_topics(group)`, None when that is not known), by
        their commit time."""
        records = []
        for group_id in list(self._offsets):
            since = empty_since_ms(group_id)
            if since is None:
                subscribed = subscribed_topics(group_id)
                if subscribed is None:
                    continue
                old = [tp for tp, v in self._offsets[group_id].items()
                       if tp[0] not in subscribed and v.commit_timestamp_ms + self.retention_ms <= now_ms]
                records += self.delete(group_id, old)
                continue
            old = [tp for tp, v in self._offsets[group_id].items()
                   if max(v.commit_timestamp_ms, since) + self.retention_ms <= now_ms]
            records += self.delete(group_id, old)
        return records

    def replay(self, key_bytes, value_bytes) -> str:
        """Load one offset commit record; returns its group id."""
        (group_id, topic, partition), value = crec.decode_offset_commit(key_bytes, value_bytes)
        if value is None:
            stored = self._offsets.get(group_id, {})
            stored.pop((topic, partition), None)
            if not stored:
                self._offsets.pop(group_id, None)
        else:
            self._offsets.setdefault(group_id, {})[(topic, partition)] = value
        return group_id
