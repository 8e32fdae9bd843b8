"""Shared helpers of the group coordinator tests (no tests here)."""
import uuid

from actors.group_coordinator import GroupCoordinatorShard, ShareGroupConfig


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def view(**partitions) -> dict:
    """TopicsView: view(orders=3) -> {"orders": (uuid, 3)}."""
    return {name: (topic_id(name), count) for name, count in partitions.items()}


class Harness:
    """A shard, a manual clock, the cluster's topics, and every record the shard returned (the log)."""

    def __init__(self, config: ShareGroupConfig | None = None, auto_initialize: bool = True, **topics):
        self.shard = GroupCoordinatorShard(config or ShareGroupConfig())
        self.topics = view(**topics)
        self.now_ms = 0
        self.log: list = []
        self.auto_initialize = auto_initialize

    def hb(self, group, member, epoch, topics=None, rack=None, client_id="client", host="/127.0.0.1"):
        result, records = self.shard.share_group_heartbeat(
            group, member, epoch, rack_id=rack, subscribed_topic_names=topics, client_id=client_id,
            client_host=host, now_ms=self.now_ms, topics=self.topics)
        self.log += records
        if self.auto_initialize and result.initialize:  # the shell's round trip to the share coordinator
            self.log += self.shard.mark_initialized(group, result.initialize)
        return result

    def join(self, group, member, topics):
        """Join, then heartbeat once more so the (now initialized) partitions are assigned."""
        r = self.hb(group, member, 0, topics)
        assert r.error_code == 0, r
        r = self.hb(group, member, r.member_epoch)
        assert r.error_code == 0, r
        return r

    def expire(self):
        records = self.shard.expire_sessions(self.now_ms)
        self.log += records
        return records

    def assignment(self, group, member):
        """The member's current assignment as {(topic name, partition)}."""
        names = {tid: name for name, (tid, _) in self.topics.items()}
        (described,) = self.shard.describe([group], self.topics)
        for m in described.members:
            if m.member_id == member:
                return {(names[t], p) for t, _, ps in m.assignment for p in ps}
        raise KeyError(member)

    def replayed(self) -> GroupCoordinatorShard:
        fresh = GroupCoordinatorShard(self.shard.config)
        for key, value in self.log:
            fresh.replay(key, value)
        return fresh
