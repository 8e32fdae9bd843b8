"""Which transactional partitions a gateway has verified with their transaction's coordinator (KIP-890 part 1: a
transaction version 1 Produce is appended only to a partition the producer added to its open transaction), so
that only a transaction's first batch per partition asks the coordinator. A verification holds until a marker of
that producer for that partition passes through this gateway (WriteTxnMarkers reaches the partition's leader, as
the Produce does): the transaction ended, and a late batch of it must be verified again (and refused).

`guard` is taken before asking the coordinator and checked when the answer is kept, and `is_verified` once more
right before the batch is written to the partition's data path (no await between): a marker that came meanwhile
fails the batch (retriably) instead of letting it open a transaction that no marker will end (Kafka's
VerificationGuard)."""
from __future__ import annotations

Key = tuple[int, str, int]   # (producer id, topic, partition)


class TxnVerifications:
    def __init__(self, max_entries: int = 100_000):
        self.max_entries = max_entries
        self.verified: dict[Key, tuple[str, int]] = {}   # -> (transactional id, producer epoch)
        self.markers: dict[Key, int] = {}                 # markers seen, per producer and partition
        self.generation = 0                               # bumped when the tables are cleared (bounded)

    def is_verified(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                    partition: int) -> bool:
        return self.verified.get((producer_id, topic, partition)) == (transactional_id, producer_epoch)

    def guard(self, producer_id: int, topic: str, partition: int) -> tuple[int, int]:
        return self.generation, self.markers.get((producer_id, topic, partition), 0)

    def keep(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int,
             guard: tuple[int, int]) -> bool:
        """Remember a verification the coordinator confirmed; False where a marker came since `guard` was taken."""
        if guard != self.guard(producer_id, topic, partition):
            return False
        if len(self.verified) >= self.max_entries:
            self.verified.pop(next(iter(self.verified)))
        self.verified[(producer_id, topic, partition)] = (transactional_id, producer_epoch)
        return True

    def marker(self, producer_id: int, topic: str, partition: int) -> None:
        """A COMMIT or ABORT marker of this producer for this partition is on its way to the partition."""
        key = (producer_id, topic, partition)
        self.verified.pop(key, None)
        if key not in self.markers and len(self.markers) >= self.max_entries:
            self.markers.clear()
            self.verified.clear()
            self.generation += 1
        self.markers[key] = self.markers.get(key, 0) + 1
