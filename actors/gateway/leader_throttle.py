"""The leader's side of Kafka's replication throttle (leader.replication.throttled.rate with a topic's
leader.replication.throttled.replicas), pure: a broker answers its followers' fetches for the replicas a
topic lists ("partition:leader broker", or "*"), for followers not in the partition's ISR, within one
byte rate for the whole broker; while the rate's debt is not paid off those partitions are answered
without records (their offsets still sent), as Kafka's ReplicaManager leaves a throttled partition out
of a follower's fetch while the leader quota is exceeded. Followers in the ISR are never throttled, so a
throttle slows a reassignment's new replicas catching up, never acks=all producers.

A gateway is its broker's one leader: one LeaderThrottle per gateway. Time is passed in (seconds)."""
from __future__ import annotations

from typing import Any

from actors.config_schema import effective_dynamic_broker_config, replica_listed
from actors.partition.replication_quota import ReplicationQuota

RATE_KEY = "leader.replication.throttled.rate"
REPLICAS_KEY = "leader.replication.throttled.replicas"


class LeaderThrottle:
    def __init__(self):
        self.quota = ReplicationQuota(None)

    def configure(self, broker_id: int, static: dict[str, Any], dynamic: dict[str, dict[str, Any]]) -> None:
        """This broker's leader.replication.throttled.rate: its own dynamic value, the cluster default, the
        static config (Kafka's Long.MAX_VALUE: none)."""
        rate = effective_dynamic_broker_config(RATE_KEY, broker_id, static, dynamic or {})
        rate = None if rate is None else int(rate)
        if rate != self.quota.rate_bytes_per_s:
            self.quota.set_rate(rate)

    def applies(self, topic: Any, partition: int, leader_id: int, replica_id: int) -> bool:
        """Whether a follower fetch of `topic`-`partition` by broker `replica_id` counts against the rate:
        the topic lists the leader's replica and the follower is not in the ISR (Kafka's
        shouldLeaderThrottle)."""
        if not self.quota.limited or topic is None or partition >= len(topic.partitions):
            return False
        if not replica_listed(str(topic.configs.get(REPLICAS_KEY, "") or ""), partition, leader_id):
            return False
        return replica_id not in topic.partitions[partition].isr

    def exceeded(self, now_s: float) -> bool:
        return self.quota.exceeded(now_s)

    def wait_s(self, now_s: float) -> float:
        """How long until throttled partitions may be answered with records again (0: now)."""
        return max(0.0, self.quota.ready_at(now_s) - now_s)

    def record(self, size_bytes: int, now_s: float) -> None:
        self.quota.record(size_bytes, now_s)
