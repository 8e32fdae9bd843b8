"""The aborted-transaction index of one segment: ``<base>.txnindex`` (Kafka's TransactionIndex).

One entry per transaction aborted by a marker in this segment: (producer id, first offset, last
offset = the marker's offset, last stable offset when the abort was written). Entries are in
marker order. A read_committed fetch returns the entries that overlap the fetched range (Fetch
response's AbortedTransactions): the client drops those producers' records from the first offset
until it meets the ABORT marker.

Entry layout on disk, big endian: version int16 (0), producer id int64, first offset int64, last
offset int64, last stable offset int64. The file is created with its segment (empty), so that a
missing file means "lost": the partition then rebuilds every index from the log (core.py). It is
append-only and not fsynced (like the offset index); an entry at or past the log end after a
crash is cut on open, and a lost one is re-added by the replay from the producer snapshot.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size   # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """Entries in memory (a segment has few); the file is written on append."""

    def __init__(self, path: Path, entries: list[AbortedTxn] | None = None):
        self.path = path
        self.entries: list[AbortedTxn] = entries or []

    @classmethod
    def create(cls, path: Path) -> "TransactionIndex":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)
        return cls(path)

    @classmethod
    def open(cls, path: Path) -> "TransactionIndex | None":
        """The index in ``path``; None when the file is missing (rebuild from the log). A torn
        trailing entry or one of an unknown version ends what is read (and is cut off)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        entries, good = [], 0
        for pos in range(0, len(data) - ENTRY_BYTES + 1, ENTRY_BYTES):
            version, *fields = _ENTRY.unpack_from(data, pos)
            if version != TXN_INDEX_VERSION:
                break
            entries.append(AbortedTxn(*fields))
            good = pos + ENTRY_BYTES
        if good != len(data):
            os.truncate(path, good)
        return cls(path, entries)

    @property
    def last_offset(self) -> int:
        """The last indexed marker's offset, -1 when empty."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, entry: AbortedTxn) -> None:
        """Add an abort (markers come in offset order; an entry at or below the last one is a
        replay of what the index holds and is skipped)."""
        if entry.last_offset <= self.last_offset:
            return
        self.entries.append(entry)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, _ENTRY.pack(TXN_INDEX_VERSION, *entry))
        finally:
            os.close(fd)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker lies at or past ``offset`` (the log was cut there)."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep != len(self.entries):
            del self.entries[keep:]
            try:
                os.truncate(self.path, keep * ENTRY_BYTES)
            except FileNotFoundError:
                pass

    def collect(self, fetch_offset: int, upper_offset: int, out: list[AbortedTxn]) -> bool:
        """Append to ``out`` the aborted transactions overlapping [fetch_offset, upper_offset);
        True once an entry shows no later segment can hold more (its last stable offset is at or
        past ``upper_offset``: every transaction open before the range ended had ended then)."""
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_offset:
                out.append(entry)
            if entry.last_stable_offset >= upper_offset:
                return True
        return False
