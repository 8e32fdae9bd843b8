"""The metadata image: what a gateway needs to route requests, a versioned copy of the
controller's state, made by the controller and sent whole to each gateway on every change."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from actors.controller.core import BrokerInfo, TopicState


@dataclass
class MetadataImage:
    """What a gateway needs to route requests: a versioned copy of the controller's state."""
    version: int
    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicState]
    # each partition's leader replica actor, keyed (topic id, partition)
    partition_replicas: dict[tuple[uuid.UUID, int], Any] = field(default_factory=dict)
    # where each partition leader's data-path listener is, on its own node (keyed like partition_replicas)
    partition_listeners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    # coordinators, keyed by (internal topic name, partition): the leader actors of those partitions
    coordinators: dict[tuple[str, int], Any] = field(default_factory=dict)
    group_configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # overrides only
    # ACL bindings (actors.security.authorizer.AclBinding) and how many ACL records made them:
    # a gateway rebuilds its authorizer only when acl_version moves
    acls: tuple = ()
    acl_version: int = 0
    # SCRAM credentials (KIP-554): (user, ScramMechanism) -> ScramCredential (salts and keys, never
    # passwords); a gateway re-indexes them only when scram_version moves
    scram_credentials: dict = field(default_factory=dict)
    scram_version: int = 0
    # client quotas (actors/quotas.py): entity -> key -> value
    client_quotas: dict = field(default_factory=dict)
    # dynamic broker configs (the replication throttles): broker id string or "" (cluster default) -> key -> value
    dynamic_broker_configs: dict = field(default_factory=dict)

    def __post_init__(self):
        self.topics_by_id = {t.topic_id: t for t in self.topics.values()}

    @classmethod
    def starting(cls) -> "MetadataImage":
        """What a broker serves before it has read the metadata: no brokers, no topics (clients retry)."""
        return cls(version=-1, cluster_id="", controller_id=-1, brokers={}, topics={})

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        return self.topics_by_id.get(topic_id)

    def leader_id(self, topic: TopicState, index: int) -> int:
        """The broker clients send this partition's produce and fetch requests to: the broker of
        the node that hosts its leader actor."""
        return topic.partitions[index].leader
