"""The replicated log as the quorum core sees it: batches in offset order and where each epoch starts.

Offsets count records, as Kafka's do, but the batch is the unit of everything else, as in KRaft: a
proposal becomes one batch, fetches carry whole batches, the log is truncated only between
batches, and the high watermark only ever lands between batches (every replica's log end does).
So a batch of metadata records commits whole or not at all.

The core keeps the log in memory (the metadata log is small; snapshots are a later step); the
shell keeps the durable copy, written from the core's `Output.append` / `Output.truncate_to`.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterable, Sequence


@dataclass(frozen=True)
class LeaderChange:
    """KRaft's LeaderChangeMessage: the one record of the control batch a leader writes at the
    start of its epoch (its offset is the epoch's start offset)."""
    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


@dataclass(frozen=True)
class VotersRecord:
    """KRaft's VotersRecord (KIP-853): the whole voter set, in force from its offset on (committed
    or not) until the next one; a truncation that removes it brings the previous set back. The one
    record of its control batch. Endpoints and directory ids are the shell's (ids only here)."""
    voters: tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    """Records written together by the leader of `epoch`, at offsets base_offset..next_offset-1.
    A control batch holds one LeaderChange or one VotersRecord; other records are the shell's,
    opaque here."""
    base_offset: int
    epoch: int
    records: tuple[Any, ...]
    control: bool = False

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


class LogError(ValueError):
    """A change that would break the log's shape (a gap, an epoch going back, a cut inside a batch)."""


class QuorumLog:
    def __init__(self, batches: Iterable[Batch] = ()):
        self.batches: list[Batch] = []
        self._bases: list[int] = []
        self._epochs: list[int] = []          # epochs, strictly increasing ...
        self._epoch_starts: list[int] = []    # ... and the offset each starts at
        self._voter_sets: list[tuple[int, tuple[int, ...]]] = []   # (offset, voters) of each VotersRecord
        for batch in batches:
            self.append(batch)

    # ---- reading --------------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    @property
    def last_epoch(self) -> int:
        """The epoch of the last batch; 0 for an empty log (no leader has epoch 0)."""
        return self._epochs[-1] if self._epochs else 0

    def is_boundary(self, offset: int) -> bool:
        if offset == self.end_offset:
            return True
        i = bisect.bisect_left(self._bases, offset)
        return i < len(self._bases) and self._bases[i] == offset

    def read(self, offset: int, max_records: int) -> tuple[Batch, ...]:
        """Whole batches from `offset` (a batch boundary), at least one if any, then while the
        total stays within max_records."""
        if offset == self.end_offset:
            return ()
        i = bisect.bisect_left(self._bases, offset)
        if i == len(self._bases) or self._bases[i] != offset:
            raise LogError(f"offset {offset} is not a batch boundary of this log")
        out = [self.batches[i]]
        total = len(self.batches[i].records)
        for batch in self.batches[i + 1:]:
            total += len(batch.records)
            if total > max_records:
                break
            out.append(batch)
        return tuple(out)

    def batches_between(self, start: int, end: int) -> list[Batch]:
        """The batches wholly in [start, end) (both boundaries)."""
        return self.batches[bisect.bisect_left(self._bases, start):bisect.bisect_left(self._bases, end)]

    def latest_voters(self) -> tuple[int, tuple[int, ...]] | None:
        """(offset, voters) of the last VotersRecord in the log, committed or not (KIP-853's voter
        set in force); None when the log holds none (the bootstrap set applies)."""
        return self._voter_sets[-1] if self._voter_sets else None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(E', end): E' is the largest epoch <= `epoch` in this log and `end` the offset where it
        ends (where the next epoch starts, or the log end). An epoch older than every epoch of the
        log answers (epoch, start of the first epoch), as Kafka's epoch cache does, so an empty
        follower (last fetched epoch 0, offset 0) is always a valid fetch."""
        if not self._epochs or epoch < self._epochs[0]:
            return epoch, (self._epoch_starts[0] if self._epoch_starts else self.end_offset)
        i = bisect.bisect_right(self._epochs, epoch) - 1
        end = self._epoch_starts[i + 1] if i + 1 < len(self._epochs) else self.end_offset
        return self._epochs[i], end

    def diverging(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """The leader's check of a fetch (Kafka's validateOffsetAndEpoch): None when the fetcher's
        log, which ends at fetch_offset with a batch of last_fetched_epoch, is a prefix of this one;
        else (epoch, end offset) of the largest epoch we share, for the fetcher to truncate to."""
        epoch, end = self.end_offset_for_epoch(last_fetched_epoch)
        if epoch != last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def truncation_offset(self, epoch: int, end_offset: int) -> int:
        """Where a follower cuts its log on a diverging epoch (epoch, end_offset) from the leader:
        at the end of its own copy of that epoch if it has it (no further than the leader's end of
        it), else at the end of the largest epoch it has below it; the next fetch checks again."""
        local_epoch, local_end = self.end_offset_for_epoch(epoch)
        if local_epoch == epoch:
            return min(local_end, end_offset)
        return local_end

    # ---- changing -------------------------------------------------------------------------------
    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise LogError(f"batch at {batch.base_offset} does not start at the log end {self.end_offset}")
        if not batch.records:
            raise LogError("empty batch")
        if batch.epoch < self.last_epoch or batch.epoch < 1:
            raise LogError(f"batch of epoch {batch.epoch} after epoch {self.last_epoch}")
        if batch.epoch != self.last_epoch:
            self._epochs.append(batch.epoch)
            self._epoch_starts.append(batch.base_offset)
        self.batches.append(batch)
        self._bases.append(batch.base_offset)
        if batch.control:
            for record in batch.records:
                if isinstance(record, VotersRecord):
                    self._voter_sets.append((batch.base_offset, tuple(sorted(record.voters))))

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after `offset` (a batch boundary)."""
        if offset >= self.end_offset:
            return
        if not self.is_boundary(offset):
            raise LogError(f"truncation at {offset} would cut a batch")
        i = bisect.bisect_left(self._bases, offset)
        del self.batches[i:]
        del self._bases[i:]
        j = bisect.bisect_left(self._epoch_starts, offset)
        del self._epochs[j:]
        del self._epoch_starts[j:]
        while self._voter_sets and self._voter_sets[-1][0] >= offset:
            self._voter_sets.pop()

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)

    def __getitem__(self, i):
        return self.batches[i]


def check_log(batches: Sequence[Batch]) -> None:
    """Raises LogError if `batches` is not a well-formed log starting at offset 0."""
    QuorumLog(batches)
