"""A share group's lag over the Kafka protocol: DescribeShareGroupOffsets v1 (KIP-1226) from the
group's coordinator. Kray fills its lag (high watermark - start offset - records already
acknowledged beyond it); a broker that answers v0 only, or -1 for a partition, gets the lag
estimated as the partition's end offset (ListOffsets, from its leader) minus the share-partition
start offset: an upper bound, since records acknowledged beyond the start offset count too."""
from __future__ import annotations

from cluster.admin import AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (DescribeConfigsRequest, DescribeShareGroupOffsetsRequest, FindCoordinatorRequest,
                               ListOffsetsRequest, MetadataRequest)

KEY_TYPE_GROUP = 0
LATEST = -1
RESOURCE_GROUP = 32


class ShareGroupLag:
    """Reads a group's lag over the given topics; keeps its connections between reads."""

    def __init__(self, bootstrap_servers: str, group: str, topics: list[str], *,
                 properties: dict[str, str] | None = None, timeout_s: float = 10.0):
        self.bootstrap_servers, self.group, self.topics = bootstrap_servers, group, set(topics)
        self.properties, self.timeout_s = properties, timeout_s
        self._coordinator: KafkaConnection | None = None
        self.estimated = False  # True when the last read fell back to ListOffsets

    def _connect(self, address: str) -> KafkaConnection:
        return KafkaConnection(address, client_id="kray-share-workers", timeout_s=self.timeout_s,
                               properties=self.properties)

    def _find_coordinator(self) -> KafkaConnection:
        with self._connect(self.bootstrap_servers) as conn:
            r = conn.send(FindCoordinatorRequest(key=self.group, key_type=KEY_TYPE_GROUP, coordinator_keys=[self.group]))
        c = r.coordinators[0] if r.coordinators else r
        if c.error_code:
            raise AdminError(f"no coordinator for share group {self.group}: {ErrorCode(c.error_code).name}")
        return self._connect(f"{c.host}:{c.port}")

    def read(self) -> int | None:
        """The records of the topics not yet delivered for good; None when the group has no
        state yet (no member has fetched) or the coordinator cannot be asked right now."""
        try:
            if self._coordinator is None:
                self._coordinator = self._find_coordinator()
            return self._read(self._coordinator)
        except (AdminError, OSError):
            self.close()  # a moved coordinator or a dropped connection: find it again next time
            return None

    def _read(self, conn: KafkaConnection) -> int | None:
        r = conn.send(DescribeShareGroupOffsetsRequest(groups=[
            DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=self.group, topics=None)]))
        g = r.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        if g.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            raise AdminError(ErrorCode(g.error_code).name)
        if g.error_code:
            return None
        lag, missing, seen = 0, {}, False
        for t in g.topics:
            if t.topic_name not in self.topics:
                continue
            for p in t.partitions:
                if p.error_code or p.start_offset < 0:
                    continue
                seen = True
                if getattr(p, "lag", -1) >= 0:
                    lag += p.lag
                else:
                    missing.setdefault(t.topic_name, {})[p.partition_index] = p.start_offset
        self.estimated = bool(missing)
        if missing:
            lag += self._estimate(missing)
        return lag if seen else None

    def _estimate(self, start_offsets: dict[str, dict[int, int]]) -> int:
        """End offset - start offset per partition (ListOffsets LATEST from each leader)."""
        with self._connect(self.bootstrap_servers) as conn:
            metadata = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t)
                                                         for t in start_offsets], allow_auto_topic_creation=False))
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
        by_leader: dict[int, dict[str, list[int]]] = {}
        for t in metadata.topics:
            for p in t.partitions:
                if p.partition_index in start_offsets.get(t.name, {}):
                    by_leader.setdefault(p.leader_id, {}).setdefault(t.name, []).append(p.partition_index)
        lag = 0
        for leader, topics in by_leader.items():
            if leader not in brokers:
                continue
            with self._connect(brokers[leader]) as conn:
                r = conn.send(ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=int(self.timeout_s * 1000),
                                                 topics=[ListOffsetsRequest.ListOffsetsTopic(name=name, partitions=[
                                                     ListOffsetsRequest.ListOffsetsPartition(partition_index=i,
                                                                                             timestamp=LATEST)
                                                     for i in indexes]) for name, indexes in topics.items()]))
            for t in r.topics:
                for p in t.partitions:
                    if not p.error_code:
                        lag += max(0, p.offset - start_offsets[t.name][p.partition_index])
        return lag

    def record_lock_duration_ms(self) -> int | None:
        """The group's share.record.lock.duration.ms (DescribeConfigs: the group's own or the
        broker's default); None when it cannot be read."""
        try:
            with self._connect(self.bootstrap_servers) as conn:
                r = conn.send(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=RESOURCE_GROUP, resource_name=self.group,
                    configuration_keys=["share.record.lock.duration.ms"])])).results[0]
        except (AdminError, OSError):
            return None
        found = [c.value for c in r.configs if c.name == "share.record.lock.duration.ms"] if not r.error_code else []
        return int(found[0]) if found and found[0] and found[0].isdigit() else None

    def close(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None
