"""Committed offsets of consumer groups (classic and KIP-848 alike): a pure store. No Ray, no clock, no I/O.

Every change returns the `__consumer_offsets` records that make it durable (Kafka's OffsetCommit records, one per
partition, keyed by group, topic and partition, so compaction keeps the latest); `replay` rebuilds the store. A
command's records (a commit, a transactional commit, OffsetDelete's or DeleteGroups' tombstones) are computed without
changing the store; they change it when they are applied (`apply`, which runs replay's own path), and until the
shell settles them (their append done) `revert` takes back exactly those changes (committed and pending offsets of
the partitions they name), as Kafka's snapshot registry reverts records whose append failed.
Retention (`offsets.retention.minutes`) applies to groups without members: an offset expires once the later of its
commit and the moment its group became empty is older than the retention.

Transactional offsets (TxnOffsetCommit, KIP-98's sendOffsetsToTransaction) are *pending* per producer id: written as
the same OffsetCommit records, but inside the producer's transactional batch, and kept apart from the committed
offsets until the transaction's COMMIT or ABORT marker reaches the partition (`complete_transaction`), as Kafka's
OffsetMetadataManager keeps them. A COMMIT makes them the committed offsets, unless a partition's committed offset is
newer than the pending one (a plain commit after the transactional one: Kafka compares the records' log offsets; Kray
compares commit time, then the order the store saw them in, which is the log's order, and which survives the
coordinator's rewrite of live records at compaction, when log offsets do not); an ABORT drops them. OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT for a partition with a pending offset. A tombstone (OffsetDelete, a
deleted group or topic) removes the pending offsets of its partition too. Replay gets each record's producer id
(-1 outside a transaction) and the markers, in log order.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from actors.group_coordinator import classic_records as crec
from actors.group_coordinator.classic_records import OffsetCommitValue
from actors.group_coordinator.records import Record
from actors.config_schema import BROKER_DEFAULTS
from protocol.errors import ErrorCode

OFFSETS_CONFIG_DEFAULTS = {key: BROKER_DEFAULTS[key] for key in (
    "offsets.retention.minutes", "offset.metadata.max.bytes", "offsets.retention.check.interval.ms")}
NO_OFFSET = -1
CHANGES_MAX = 100_000  # applied commits remembered for `revert` while appends overlap; beyond, the shell reloads

TopicPartition = tuple[str, int]


class OffsetStore:
    def __init__(self, broker_config: Mapping[str, Any] | None = None):
        c = {**OFFSETS_CONFIG_DEFAULTS, **(broker_config or {})}
        self.retention_ms = int(c["offsets.retention.minutes"]) * 60_000
        self.metadata_max_bytes = int(c["offset.metadata.max.bytes"])
        self.check_interval_ms = int(c["offsets.retention.check.interval.ms"])
        self._offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}
        # the order each committed offset was taken in (log order: see the module's note on commit)
        self._order: dict[tuple[str, str, int], int] = {}
        # producer id -> group -> partition -> (pending value, order taken)
        self._pending: dict[int, dict[str, dict[TopicPartition, tuple[OffsetCommitValue, int]]]] = {}
        self._open_by_group: dict[str, set[int]] = {}  # group -> producer ids with pending offsets in it
        self._next_order = 0
        # what `apply` replaced, per partition (committed value, its order, pending values by producer), until settled
        self._changes: list[tuple[tuple[str, str, int], OffsetCommitValue | None, int | None,
                                  dict[int, tuple[OffsetCommitValue, int]]]] = []
        self._changes_dropped = 0  # how many were forgotten unsettled (appends never stopped overlapping)

    def _take_order(self) -> int:
        self._next_order += 1
        return self._next_order

    def _store(self, group_id: str, topic: str, partition: int, value: OffsetCommitValue, order: int) -> None:
        self._offsets.setdefault(group_id, {})[(topic, partition)] = value
        self._order[(group_id, topic, partition)] = order

    def _unstore(self, group_id: str, topic: str, partition: int) -> bool:
        """Drop a partition's committed offset; True if there was one."""
        stored = self._offsets.get(group_id, {})
        found = stored.pop((topic, partition), None) is not None
        self._order.pop((group_id, topic, partition), None)
        if not stored:
            self._offsets.pop(group_id, None)
        return found

    def _drop_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """Drop a partition's pending offsets (of every producer); True if there was one."""
        found = False
        for producer_id in list(self._open_by_group.get(group_id, ())):
            by_group = self._pending.get(producer_id, {})
            pending = by_group.get(group_id, {})
            found = pending.pop((topic, partition), None) is not None or found
            if not pending:
                by_group.pop(group_id, None)
                self._open_by_group[group_id].discard(producer_id)
            if not by_group:
                self._pending.pop(producer_id, None)
        if not self._open_by_group.get(group_id, True):
            del self._open_by_group[group_id]
        return found

    def _forget(self, group_id: str, topic: str, partition: int) -> bool:
        """Drop a partition's committed offset and its pending ones; True if there was either."""
        found = self._unstore(group_id, topic, partition)
        return self._drop_pending(group_id, topic, partition) or found

    def _has_any(self, group_id: str, topic: str, partition: int) -> bool:
        return (topic, partition) in self._offsets.get(group_id, {}) or self.has_pending(group_id, topic, partition)

    def groups(self) -> set[str]:
        """Groups with committed or pending offsets."""
        return set(self._offsets) | set(self._open_by_group)

    def has_offsets(self, group_id: str) -> bool:
        """Committed offsets, or pending ones of an open transaction (Kafka keeps such a group)."""
        return bool(self._offsets.get(group_id)) or group_id in self._open_by_group

    # ---- transactional offsets ---------------------------------------------------------------------------------------

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return any((topic, partition) in self._pending.get(p, {}).get(group_id, {})
                   for p in self._open_by_group.get(group_id, ()))

    def open_transactions(self, group_id: str | None = None) -> set[int]:
        """Producer ids with pending offsets (in one group, or in any)."""
        return set(self._pending) if group_id is None else set(self._open_by_group.get(group_id, ()))

    def pending(self, producer_id: int) -> dict[str, dict[TopicPartition, OffsetCommitValue]]:
        """A producer's pending offsets, by group and partition (a copy)."""
        return {g: {tp: v for tp, (v, _) in by_tp.items()} for g, by_tp in self._pending.get(producer_id, {}).items()}

    def _add_pending(self, producer_id: int, group_id: str, topic: str, partition: int,
                     value: OffsetCommitValue) -> None:
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {})[(topic, partition)] = \
            (value, self._take_order())
        self._open_by_group.setdefault(group_id, set()).add(producer_id)

    def commit_transactional(self, group_id: str, producer_id: int,
                             partitions: Iterable[tuple[str, int, int, int, str | None]],
                             now_ms: int) -> tuple[list[int], list[Record]]:
        """TxnOffsetCommit's offsets (topic, partition, offset, leader epoch, metadata), pending for `producer_id`
        until its transaction ends: an error code per partition (in order) and the records, which the shell writes
        in the producer's transactional batch. The records are applied (`apply`, replay's path) before returning;
        `commit` (the same records, computed only) is what the group coordinator calls."""
        errors, records = self.commit(group_id, partitions, now_ms)
        self.apply(records, producer_id)
        return errors, records

    def complete_transaction(self, producer_id: int, committed: bool) -> list[tuple[str, str, int]]:
        """The COMMIT or ABORT marker of `producer_id` reached the partition (appended now, or replayed): its
        pending offsets become the committed ones, or are dropped. Returns the (group, topic, partition) whose
        committed offset changed. Nothing to write: the marker is the record."""
        self._changes_unrevertable()
        by_group = self._pending.pop(producer_id, None)
        if by_group is None:
            return []  # a marker for a producer without pending offsets here (a resend, or none were sent)
        changed = []
        for group_id, by_tp in by_group.items():
            open_ids = self._open_by_group.get(group_id)
            if open_ids is not None:
                open_ids.discard(producer_id)
                if not open_ids:
                    del self._open_by_group[group_id]
            if not committed:
                continue
            for (topic, partition), (value, order) in by_tp.items():
                existing = self._offsets.get(group_id, {}).get((topic, partition))
                if existing is not None and (existing.commit_timestamp_ms, self._order.get(
                        (group_id, topic, partition), 0)) > (value.commit_timestamp_ms, order):
                    continue  # a plain commit newer than the transaction's offset stays
                self._store(group_id, topic, partition, value, order)
                changed.append((group_id, topic, partition))
        return changed

    def topics(self, group_id: str) -> set[str]:
        return {t for t, _ in self._offsets.get(group_id, {})}

    def live_records(self) -> list[Record]:
        """One record per committed offset, its current value: replaying them rebuilds the store (compaction).
        Pending transactional offsets are not among them: their records stay in the log until their transaction
        ends (the shell never deletes records past the partition's last stable offset). The commits applied and not
        settled go into them too: they can no longer be reverted alone."""
        self._changes_unrevertable()
        return [crec.offset_commit(g, t, p, v) for g, stored in self._offsets.items() for (t, p), v in stored.items()]

    def positions(self) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, committed offset) of every committed offset: for the lag metric."""
        return [(g, t, p, v.offset) for g, stored in self._offsets.items() for (t, p), v in stored.items()]

    def commit(self, group_id: str, partitions: Iterable[tuple[str, int, int, int, str | None]],
               now_ms: int) -> tuple[list[int], list[Record]]:
        """Commit (topic, partition, offset, leader epoch, metadata) each: an error code per partition (in order),
        and the records of those that succeed. Changes nothing: `apply` the records (Kafka's commitOffset, whose
        records its replay applies)."""
        errors, records = [], []
        for topic, partition, offset, leader_epoch, metadata in partitions:
            metadata = metadata or ""
            if len(metadata.encode()) > self.metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetCommitValue(offset, leader_epoch, metadata, now_ms)
            records.append(crec.offset_commit(group_id, topic, partition, value))
            errors.append(ErrorCode.NONE)
        return errors, records

    def apply(self, records: list[Record], producer_id: int = -1) -> None:
        """Replay a command's records now, before their append, by replay's own path (`producer_id`: of the
        transactional batch they go in, -1 outside a transaction), remembering what each replaces (the partition's
        committed and pending offsets) so that `revert` can take them back."""
        for key_bytes, value_bytes in records:
            (group_id, topic, partition), _ = crec.decode_offset_commit(key_bytes, value_bytes)
            key = (group_id, topic, partition)
            if len(self._changes) >= CHANGES_MAX:
                self._changes_dropped += len(self._changes)
                self._changes.clear()
            pending = {}
            for pid in self._open_by_group.get(group_id, ()):
                entry = self._pending.get(pid, {}).get(group_id, {}).get((topic, partition))
                if entry is not None:
                    pending[pid] = entry
            self._changes.append((key, self._offsets.get(group_id, {}).get((topic, partition)), self._order.get(key),
                                  pending))
            self._replay(key_bytes, value_bytes, producer_id)

    def _changes_unrevertable(self) -> None:
        """Committed offsets change otherwise than by `apply` (a tombstone, a transaction's marker): the commits applied
        before can no longer be taken back alone (`revert` says so; the shell then reloads from the log)."""
        if self._changes:
            self._changes_dropped += len(self._changes)
            self._changes.clear()

    def changes_mark(self) -> int:
        """Where the next command's changes start (see `revert`)."""
        return self._changes_dropped + len(self._changes)

    def can_revert(self, mark: int) -> bool:
        return mark >= self._changes_dropped

    def revert(self, mark: int) -> bool:
        """Take back every record applied since `mark`, newest first: the committed and pending offsets of their
        partitions are as before them. Only right when nothing else changed those offsets since (no other append was
        under way). False, changing nothing, when those changes are no longer remembered (the shell then rebuilds
        the store from the log)."""
        if not self.can_revert(mark):
            return False
        while self._changes_dropped + len(self._changes) > mark:
            (group_id, topic, partition), value, order, pending = self._changes.pop()
            if value is None:
                self._unstore(group_id, topic, partition)
            else:
                self._store(group_id, topic, partition, value, order)
            self._drop_pending(group_id, topic, partition)
            for pid, entry in pending.items():
                self._pending.setdefault(pid, {}).setdefault(group_id, {})[(topic, partition)] = entry
                self._open_by_group.setdefault(group_id, set()).add(pid)
        return True

    def settle(self) -> None:
        """Every applied commit is in the log (or was reverted): forget how to undo them."""
        self._changes.clear()
        self._changes_dropped = 0

    def fetch(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
              ) -> list[tuple[str, int, OffsetCommitValue | None]]:
        """The committed offsets asked for (None where nothing is committed); every one when `topics` is None."""
        stored = self._offsets.get(group_id, {})
        if topics is None:
            return [(t, p, v) for (t, p), v in sorted(stored.items())]
        return [(t, p, stored.get((t, p))) for t, partitions in topics for p in partitions]

    def fetch_stable(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
                     ) -> list[tuple[str, int, OffsetCommitValue | None, int]]:
        """`fetch` for OffsetFetch with require_stable: (topic, partition, value, error) where a partition with a
        pending transactional offset answers UNSTABLE_OFFSET_COMMIT and no value (Kafka's fetchOffsets)."""
        out = []
        for t, p, v in self.fetch(group_id, topics):
            if self.has_pending(group_id, t, p):
                out.append((t, p, None, ErrorCode.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((t, p, v, ErrorCode.NONE))
        return out

    def tombstones(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """The tombstones `delete` would write, computed only (each partition once): `apply` them."""
        seen = dict.fromkeys(tp for tp in partitions if self._has_any(group_id, *tp))
        return [crec.offset_commit(group_id, t, p, None) for t, p in seen]

    def group_tombstones(self, group_id: str) -> list[Record]:
        """A deleted group's tombstones, computed only: every partition with a committed or pending offset."""
        return self.tombstones(group_id, self._partitions(group_id))

    def delete(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """Tombstones for the partitions with a committed or a pending offset (both go, at once: not revertable)."""
        self._changes_unrevertable()
        return [crec.offset_commit(group_id, t, p, None) for t, p in partitions if self._forget(group_id, t, p)]

    def _partitions(self, group_id: str) -> list[TopicPartition]:
        """Every partition of a group with a committed or a pending offset."""
        tps = dict.fromkeys(self._offsets.get(group_id, {}))
        for producer_id in sorted(self._open_by_group.get(group_id, ())):
            tps.update(dict.fromkeys(self._pending.get(producer_id, {}).get(group_id, {})))
        return list(tps)

    def delete_group(self, group_id: str) -> list[Record]:
        return self.delete(group_id, self._partitions(group_id))

    def on_topics_deleted(self, topic_names: set[str]) -> list[Record]:
        """A deleted topic's offsets go too (a topic created again under the name starts afresh)."""
        records = []
        for group_id in self.groups():
            records += self.delete(group_id, [tp for tp in self._partitions(group_id) if tp[0] in topic_names])
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
                       if tp[0] not in subscribed and v.commit_timestamp_ms + self.retention_ms <= now_ms
                       and not self.has_pending(group_id, *tp)]
                records += self.delete(group_id, old)
                continue
            old = [tp for tp, v in self._offsets[group_id].items()  # (never one a transaction will commit)
                   if max(v.commit_timestamp_ms, since) + self.retention_ms <= now_ms
                   and not self.has_pending(group_id, *tp)]
            records += self.delete(group_id, old)
        return records

    def replay(self, key_bytes, value_bytes, producer_id: int = -1) -> str:
        """Load one offset commit record (`producer_id`: of its transactional batch, -1 outside a transaction);
        returns its group id."""
        self._changes_unrevertable()
        return self._replay(key_bytes, value_bytes, producer_id)

    def _replay(self, key_bytes, value_bytes, producer_id: int = -1) -> str:
        (group_id, topic, partition), value = crec.decode_offset_commit(key_bytes, value_bytes)
        if value is None:
            self._forget(group_id, topic, partition)
        elif producer_id >= 0:
            self._add_pending(producer_id, group_id, topic, partition, value)
        else:
            self._store(group_id, topic, partition, value, self._take_order())
        return group_id
