"""A replication throttle (Kafka's follower.replication.throttled.rate), pure: bytes fetched for throttled
replicas are recorded against a rate, and while the debt they ran up is not paid off the throttled replicas
are left out of the next fetches, as Kafka's replica fetchers leave throttled partitions out of a fetch while
the broker's replication quota is exceeded (the other partitions fetch on). The time is passed in (seconds);
one fetch may overshoot by its size, the average over time keeps to the rate."""
from __future__ import annotations

UNLIMITED = 9223372036854775807  # Kafka's default rate (Long.MAX_VALUE): no throttle


class ReplicationQuota:
    def __init__(self, rate_bytes_per_s: float | None = None):
        self.rate_bytes_per_s: float | None = None
        self.debt_bytes = 0.0
        self.at_s = 0.0
        self.set_rate(rate_bytes_per_s)

    def set_rate(self, rate_bytes_per_s: float | None) -> None:
        """None, or Kafka's Long.MAX_VALUE: unlimited (and any debt is forgiven)."""
        if rate_bytes_per_s is None or rate_bytes_per_s >= UNLIMITED:
            self.rate_bytes_per_s, self.debt_bytes = None, 0.0
        else:
            self.rate_bytes_per_s = max(float(rate_bytes_per_s), 1.0)

    @property
    def limited(self) -> bool:
        return self.rate_bytes_per_s is not None

    def _pay(self, now_s: float) -> None:
        if self.rate_bytes_per_s is not None and now_s > self.at_s:
            self.debt_bytes = max(0.0, self.debt_bytes - (now_s - self.at_s) * self.rate_bytes_per_s)
        self.at_s = max(self.at_s, now_s)

    def record(self, size_bytes: int, now_s: float) -> None:
        if self.rate_bytes_per_s is None:
            return
        self._pay(now_s)
        self.debt_bytes += size_bytes

    def exceeded(self, now_s: float) -> bool:
        if self.rate_bytes_per_s is None:
            return False
        self._pay(now_s)
        return self.debt_bytes > 0

    def ready_at(self, now_s: float) -> float:
        """When throttled replicas may fetch again (now, when the quota is not exceeded)."""
        if not self.exceeded(now_s):
            return now_s
        return self.at_s + self.debt_bytes / self.rate_bytes_per_s
