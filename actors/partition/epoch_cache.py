"""The leader-epoch cache of one replica's log: leader epoch -> the first offset written in it.

Kafka's LeaderEpochFileCache, Ray-free and I/O-free. Every batch carries the leader epoch it was
written in; this cache remembers where each epoch starts, so that a replica can answer
OffsetsForLeaderEpoch ("where does your epoch E end?") and a follower can find where its log and
the leader's part (KIP-101, KIP-279, KIP-320).

Rules (as Kafka's):
* entries are strictly increasing in both epoch and start offset; `assign` of an entry that breaks
  that removes the entries it contradicts from the end (a new leader's epoch wins);
* `end_offset_for(E, log_end_offset)`: for the largest known epoch <= E, its end offset is the start
  offset of the next known epoch, or the log end offset for the latest epoch; UNDEFINED when E is
  -1 or larger than every known epoch; E smaller than the first known epoch answers (E, start of
  the first epoch);
* `truncate_from_end(o)` drops epochs that start at or after o (the log was cut at o);
  `truncate_from_start(o)` drops epochs wholly below a new log start offset o and moves the start
  of the epoch covering o up to o.

The checkpoint is a small text file (written by the shell with write-temp, fsync, rename):
    line 1  format version (1)
    line 2  number of entries
    then    "<epoch> <start_offset>" per entry
    last    "crc32 <hex of zlib.crc32 over the lines above, newline-terminated>"
A torn or corrupt checkpoint raises CheckpointError; the shell then rebuilds the cache from the
batch headers of its log (each batch carries its leader epoch), which is always possible.
"""
from __future__ import annotations

import bisect
import zlib
from dataclasses import dataclass
from typing import Iterable

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_VERSION = 1
CHECKPOINT_ENTRIES_MAX = 1_000_000  # a named bound on what decode will accept


@dataclass(frozen=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True)
class EpochEndOffset:
    """An OffsetsForLeaderEpoch answer for one partition (error handling is the caller's)."""
    leader_epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.leader_epoch == UNDEFINED_EPOCH or self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED_EPOCH_END = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class CheckpointError(ValueError):
    """A leader-epoch checkpoint that does not decode (torn write, corruption, foreign format)."""


class LeaderEpochCache:
    def __init__(self, entries: Iterable[EpochEntry | tuple[int, int]] = ()):
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for entry in entries:
            epoch, start = (entry.epoch, entry.start_offset) if isinstance(entry, EpochEntry) else entry
            self.assign(epoch, start)

    # ---- views -----------------------------------------------------------------------------
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts)]

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._starts[0]) if self._epochs else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._starts[-1]) if self._epochs else None

    def start_offset_of(self, epoch: int) -> int:
        """Where `epoch` starts, or UNDEFINED_EPOCH_OFFSET if it is not in the cache."""
        i = bisect.bisect_left(self._epochs, epoch)
        return self._starts[i] if i < len(self._epochs) and self._epochs[i] == epoch else UNDEFINED_EPOCH_OFFSET

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at `offset` was written in (as far as the cache knows)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    # ---- updates ---------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs:
            latest_epoch, latest_start = self._epochs[-1], self._starts[-1]
            if epoch == latest_epoch and start_offset >= latest_start:
                return False  # same epoch, later batch: nothing new
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was truncated to `end_offset` (offsets >= it are gone)."""
        changed = False
        while self._starts and self._starts[-1] >= end_offset:
            self._epochs.pop()
            self._starts.pop()
            changed = True
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved up to `start_offset` (retention, DeleteRecords)."""
        i = bisect.bisect_right(self._starts, start_offset) - 1  # the entry covering start_offset
        if i < 0 or (i == 0 and self._starts[0] == start_offset):
            return False
        epoch = self._epochs[i]
        del self._epochs[:i + 1]
        del self._starts[:i + 1]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        return True

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()

    # ---- queries ---------------------------------------------------------------------------
    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """OffsetsForLeaderEpoch: the largest epoch <= requested_epoch and where it ends."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH_END
        if requested_epoch == self._epochs[-1]:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect.bisect_right(self._epochs, requested_epoch)  # first epoch > requested
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH_END  # newer than anything this log has seen
        if higher == 0:
            return EpochEndOffset(requested_epoch, self._starts[0])
        return EpochEndOffset(self._epochs[higher - 1], self._starts[higher])

    # ---- checkpoint ------------------------------------------------------------------------
    def encode_checkpoint(self) -> str:
        return encode_checkpoint(self.entries())

    @classmethod
    def decode_checkpoint(cls, text: str) -> "LeaderEpochCache":
        return cls(decode_checkpoint(text))


def encode_checkpoint(entries: Iterable[EpochEntry]) -> str:
    entries = list(entries)
    body = f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)
    return body + f"crc32 {zlib.crc32(body.encode()):08x}\n"


def decode_checkpoint(text: str) -> list[EpochEntry]:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise CheckpointError("leader-epoch checkpoint is truncated")
    crc_line = lines[-2]
    body = "\n".join(lines[:-2]) + "\n"
    if not crc_line.startswith("crc32 ") or crc_line[6:] != f"{zlib.crc32(body.encode()):08x}":
        raise CheckpointError("leader-epoch checkpoint checksum mismatch")
    if lines[0] != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"leader-epoch checkpoint version {lines[0]!r} is not {CHECKPOINT_VERSION}")
    if not _is_number(lines[1]) or int(lines[1]) > CHECKPOINT_ENTRIES_MAX:
        raise CheckpointError(f"leader-epoch checkpoint entry count {lines[1]!r} is invalid")
    count = int(lines[1])
    rows = lines[2:-2]
    if len(rows) != count:
        raise CheckpointError(f"leader-epoch checkpoint says {count} entries but holds {len(rows)}")
    entries = []
    for row in rows:
        parts = row.split(" ")
        if len(parts) != 2 or not all(_is_number(p) for p in parts):
            raise CheckpointError(f"leader-epoch checkpoint line {row!r} is not '<epoch> <start_offset>'")
        entry = EpochEntry(int(parts[0]), int(parts[1]))
        if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset <= entries[-1].start_offset):
            raise CheckpointError(f"leader-epoch checkpoint entries are not increasing at {row!r}")
        entries.append(entry)
    return entries


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 19
