"""What the balancer knows of each partition's load: its size in bytes, as its leader's broker measured it
on disk, and its produce rate in bytes/s, from how much that size grew between two samples (smoothed).

Pure: the controller's balancer shell (actors/controller/balancing.py) asks the brokers that serve for the
sizes of the partitions they lead every `kray.balancer.load.sample.interval.ms`, records them here with the
time it asked, and reads them back when it plans. A size that shrank (retention deleted segments, the log
cleaner compacted, DeleteRecords) gives no rate for that interval. A partition missing from a sample (its
leadership moving, its leader's broker slow to answer) keeps what it was last measured at: a value that
came and went between samples would change its weight, and the balancer would move replicas back and forth
(seen on a LocalCluster while moves ran). Before its first sample a partition is unknown, which the planner
counts as the mean. What it keeps is this controller's memory only: after a controller failover the next one
knows sizes at its first sample and rates at its second.
"""
from __future__ import annotations

RATE_SMOOTHING = 0.5  # each new interval's rate moves the smoothed one this much of the way

Key = tuple[str, int]  # (topic, partition)


class LoadSamples:
    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._sizes: dict[Key, tuple[float, int]] = {}  # (topic, partition) -> (measured at, bytes)
        self._rates: dict[Key, float] = {}              # -> bytes/s
        self.last_sample_s: float | None = None

    def due(self, now_s: float) -> bool:
        return self.last_sample_s is None or now_s - self.last_sample_s >= self.interval_s

    def record(self, sizes: dict[Key, int], now_s: float) -> None:
        """Sizes measured at `now_s` (any subset of the partitions: the brokers that answered)."""
        self.last_sample_s = now_s
        for key, size in sizes.items():
            before = self._sizes.get(key)
            if before is not None and now_s > before[0]:
                grown = size - before[1]
                if grown >= 0:
                    rate = grown / (now_s - before[0])
                    smoothed = self._rates.get(key)
                    self._rates[key] = rate if smoothed is None else smoothed + RATE_SMOOTHING * (rate - smoothed)
            self._sizes[key] = (now_s, size)

    def of(self, key: Key) -> tuple[float | None, float | None]:
        """(size in bytes, produce bytes/s) of the partition when last measured; None where not known."""
        measured = self._sizes.get(key)
        if measured is None:
            return None, None
        return float(measured[1]), self._rates.get(key)

    def forget_except(self, keys: set[Key]) -> None:
        """Drop what is kept of partitions that no longer exist."""
        for table in (self._sizes, self._rates):
            for key in [k for k in table if k not in keys]:
                del table[key]
