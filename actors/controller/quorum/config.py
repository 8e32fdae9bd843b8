"""The quorum's settings, named after Kafka's `controller.quorum.*` configs (defaults as Kafka 4)."""
from __future__ import annotations

from dataclasses import dataclass

# A leader resigns when a majority of voters has not fetched within this many fetch timeouts
# (Kafka's check quorum, KIP-996's companion: a cut-off leader stops taking writes).
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5


@dataclass(frozen=True)
class QuorumConfig:
    voters: tuple[int, ...]               # controller.quorum.voters (node ids; endpoints are the transport's)
    election_timeout_ms: int = 1000       # controller.quorum.election.timeout.ms, jittered to [1x, 2x)
    fetch_timeout_ms: int = 2000          # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000   # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000        # controller.quorum.request.timeout.ms: a request unanswered this long is sent again
    retry_backoff_ms: int = 20            # controller.quorum.retry.backoff.ms: after an error answer
    fetch_max_wait_ms: int = 500          # replica.fetch.wait.max.ms: the leader holds a fetch with nothing new this long
    fetch_max_records: int = 4096         # records per Fetch answer (whole batches, at least one)
    batch_max_records: int = 10_000       # records per proposal (Kafka's QuorumController takes 10,000 per operation)
    parked_fetches_max: int = 1024        # fetches a leader holds at once (one per replica); more are answered at once
    observers_max: int = 1024             # observers a leader keeps DescribeQuorum state for

    def __post_init__(self) -> None:
        if not self.voters or len(set(self.voters)) != len(self.voters):
            raise ValueError(f"controller.quorum.voters must list distinct ids, got {self.voters!r}")
        for name in ("election_timeout_ms", "fetch_timeout_ms", "request_timeout_ms", "fetch_max_records",
                     "batch_max_records"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("election_backoff_max_ms", "retry_backoff_ms", "fetch_max_wait_ms", "parked_fetches_max",
                     "observers_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
