"""Which (operation, resource) each Kafka API needs, as Kafka's KafkaApis checks them.

One row per API key Kray serves or will serve (the gateway's routes, SASL, ACL and SCRAM admin
APIs, and the internal share-state APIs). A row lists its checks in the order Kafka makes them;
each check names where the resource name comes from:

    "group"            the request's group id (one group, or each group of a batch)
    "topic"            each topic in the request (unauthorized topics fail alone, per topic)
    "cluster"          the cluster resource, CLUSTER_NAME
    "transactional_id" the request's transactional id
    "config resource"  each config resource, by its type (TOPIC, GROUP, BROKER -> CLUSTER)

`alternatives` are checks of which one suffices (CreateTopics: CREATE on the cluster, else on
each topic). `when` says when a check applies, where Kafka applies it only sometimes. Share
groups follow KIP-932: reading a share group needs DESCRIBE on the group, changing it (consuming
included) needs READ; share-partition state belongs to the brokers (CLUSTER_ACTION).
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ErrorCode

from actors.security.authorizer import AclOperation, ResourceType

Op, Res = AclOperation, ResourceType


@dataclass(frozen=True)
class Check:
    operation: AclOperation
    resource_type: ResourceType
    name_from: str  # "group", "topic", "cluster", "transactional_id", "config resource"
    when: str = ""  # empty: always
    alternatives: tuple[Check, ...] = ()  # any one of these instead of this check


@dataclass(frozen=True)
class ApiAcls:
    api_key: int
    name: str
    checks: tuple[Check, ...]


def _group(op: AclOperation, when: str = "") -> Check:
    return Check(op, Res.GROUP, "group", when)


def _topics(op: AclOperation, when: str = "") -> Check:
    return Check(op, Res.TOPIC, "topic", when)


def _cluster(op: AclOperation, when: str = "") -> Check:
    return Check(op, Res.CLUSTER, "cluster", when)


_ROWS = [
    ApiAcls(0, "Produce", (Check(Op.WRITE, Res.TRANSACTIONAL_ID, "transactional_id", "transactional produce"),
                           _topics(Op.WRITE))),
    ApiAcls(1, "Fetch", (_cluster(Op.CLUSTER_ACTION, "a follower's fetch (replica id >= 0)"),
                         _topics(Op.READ, "a consumer's fetch"))),
    ApiAcls(2, "ListOffsets", (_topics(Op.DESCRIBE),)),
    ApiAcls(3, "Metadata", (_topics(Op.DESCRIBE, "topics not described are left out (or answer "
                                                  "TOPIC_AUTHORIZATION_FAILED when named)"),
                            Check(Op.CREATE, Res.CLUSTER, "cluster", "auto-creating a named topic",
                                  alternatives=(_topics(Op.CREATE),)),
                            _cluster(Op.DESCRIBE, "cluster authorized operations asked (v8-v10)"))),
    ApiAcls(8, "OffsetCommit", (_group(Op.READ), _topics(Op.READ))),
    ApiAcls(9, "OffsetFetch", (_group(Op.DESCRIBE), _topics(Op.DESCRIBE, "offsets of topics not described are "
                                                                          "left out"))),
    ApiAcls(10, "FindCoordinator", (_group(Op.DESCRIBE, "key type GROUP"),
                                    Check(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "transactional_id",
                                          "key type TRANSACTION"),
                                    _cluster(Op.CLUSTER_ACTION, "key type SHARE (share-state coordinator)"))),
    ApiAcls(11, "JoinGroup", (_group(Op.READ),)),
    ApiAcls(12, "Heartbeat", (_group(Op.READ),)),
    ApiAcls(13, "LeaveGroup", (_group(Op.READ),)),
    ApiAcls(14, "SyncGroup", (_group(Op.READ),)),
    ApiAcls(15, "DescribeGroups", (_group(Op.DESCRIBE),)),
    ApiAcls(16, "ListGroups", (Check(Op.DESCRIBE, Res.CLUSTER, "cluster", "all groups listed",
                                     alternatives=(_group(Op.DESCRIBE, "else only groups described"),)),)),
    ApiAcls(17, "SaslHandshake", ()),
    ApiAcls(18, "ApiVersions", ()),
    ApiAcls(19, "CreateTopics", (Check(Op.CREATE, Res.CLUSTER, "cluster", alternatives=(_topics(Op.CREATE),)),
                                 _topics(Op.DESCRIBE_CONFIGS, "configs returned (v5+), else left empty"))),
    ApiAcls(20, "DeleteTopics", (_topics(Op.DESCRIBE), _topics(Op.DELETE))),
    ApiAcls(21, "DeleteRecords", (_topics(Op.DELETE),)),
    ApiAcls(22, "InitProducerId", (Check(Op.WRITE, Res.TRANSACTIONAL_ID, "transactional_id", "transactional"),
                                   Check(Op.IDEMPOTENT_WRITE, Res.CLUSTER, "cluster", "idempotent only",
                                         alternatives=(_topics(Op.WRITE, "WRITE on any topic "
                                                                         "(authorize_by_resource_type)"),)))),
    ApiAcls(24, "AddPartitionsToTxn", (Check(Op.WRITE, Res.TRANSACTIONAL_ID, "transactional_id", "v0-3 (clients)"),
                                       _topics(Op.WRITE, "v0-3; internal topics are refused"),
                                       _cluster(Op.CLUSTER_ACTION, "v4+ (brokers' verification)"))),
    ApiAcls(25, "AddOffsetsToTxn", (Check(Op.WRITE, Res.TRANSACTIONAL_ID, "transactional_id"), _group(Op.READ))),
    ApiAcls(26, "EndTxn", (Check(Op.WRITE, Res.TRANSACTIONAL_ID, "transactional_id"),)),
    ApiAcls(27, "WriteTxnMarkers", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(28, "TxnOffsetCommit", (Check(Op.WRITE, Res.TRANSACTIONAL_ID, "transactional_id"), _group(Op.READ),
                                    _topics(Op.READ))),
    ApiAcls(29, "DescribeAcls", (_cluster(Op.DESCRIBE),)),
    ApiAcls(30, "CreateAcls", (_cluster(Op.ALTER),)),
    ApiAcls(31, "DeleteAcls", (_cluster(Op.ALTER),)),
    ApiAcls(32, "DescribeConfigs", (Check(Op.DESCRIBE_CONFIGS, Res.TOPIC, "config resource", "TOPIC resources"),
                                    Check(Op.DESCRIBE_CONFIGS, Res.CLUSTER, "config resource",
                                          "BROKER and BROKER_LOGGER resources"),
                                    Check(Op.DESCRIBE_CONFIGS, Res.GROUP, "config resource", "GROUP resources"))),
    ApiAcls(36, "SaslAuthenticate", ()),
    ApiAcls(35, "DescribeLogDirs", (_cluster(Op.DESCRIBE),)),
    ApiAcls(37, "CreatePartitions", (_topics(Op.ALTER),)),
    ApiAcls(42, "DeleteGroups", (_group(Op.DELETE),)),
    ApiAcls(43, "ElectLeaders", (_cluster(Op.ALTER),)),
    ApiAcls(45, "AlterPartitionReassignments", (_cluster(Op.ALTER),)),
    ApiAcls(46, "ListPartitionReassignments", (_cluster(Op.DESCRIBE),)),
    ApiAcls(44, "IncrementalAlterConfigs", (Check(Op.ALTER_CONFIGS, Res.TOPIC, "config resource", "TOPIC resources"),
                                            Check(Op.ALTER_CONFIGS, Res.CLUSTER, "config resource",
                                                  "BROKER and BROKER_LOGGER resources"),
                                            Check(Op.ALTER_CONFIGS, Res.GROUP, "config resource",
                                                  "GROUP resources"))),
    ApiAcls(47, "OffsetDelete", (_group(Op.DELETE), _topics(Op.READ))),
    ApiAcls(48, "DescribeClientQuotas", (_cluster(Op.DESCRIBE_CONFIGS),)),
    ApiAcls(49, "AlterClientQuotas", (_cluster(Op.ALTER_CONFIGS),)),
    ApiAcls(50, "DescribeUserScramCredentials", (_cluster(Op.DESCRIBE),)),
    ApiAcls(51, "AlterUserScramCredentials", (_cluster(Op.ALTER),)),
    ApiAcls(52, "Vote", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(53, "BeginQuorumEpoch", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(54, "EndQuorumEpoch", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(55, "DescribeQuorum", (_cluster(Op.DESCRIBE),)),
    ApiAcls(80, "AddRaftVoter", (_cluster(Op.ALTER),)),
    ApiAcls(81, "RemoveRaftVoter", (_cluster(Op.ALTER),)),
    ApiAcls(60, "DescribeCluster", (_cluster(Op.DESCRIBE, "cluster authorized operations asked"),)),
    ApiAcls(61, "DescribeProducers", (_topics(Op.READ),)),
    ApiAcls(65, "DescribeTransactions", (Check(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "transactional_id"),
                                         _topics(Op.DESCRIBE, "topics not described are left out"))),
    ApiAcls(66, "ListTransactions", (Check(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "transactional_id",
                                           "ids not described are left out"),)),
    ApiAcls(68, "ConsumerGroupHeartbeat", (_group(Op.READ), _topics(Op.DESCRIBE, "subscribed topic names given"))),
    ApiAcls(69, "ConsumerGroupDescribe", (_group(Op.DESCRIBE),
                                          _topics(Op.DESCRIBE, "assignments of topics not described answer "
                                                               "TOPIC_AUTHORIZATION_FAILED"))),
    ApiAcls(76, "ShareGroupHeartbeat", (_group(Op.READ), _topics(Op.DESCRIBE, "subscribed topic names given"))),
    ApiAcls(77, "ShareGroupDescribe", (_group(Op.DESCRIBE),
                                       _topics(Op.DESCRIBE, "assignments of topics not described answer "
                                                            "TOPIC_AUTHORIZATION_FAILED"))),
    ApiAcls(78, "ShareFetch", (_group(Op.READ), _topics(Op.READ))),
    ApiAcls(79, "ShareAcknowledge", (_group(Op.READ), _topics(Op.READ))),
    ApiAcls(83, "InitializeShareGroupState", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(84, "ReadShareGroupState", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(85, "WriteShareGroupState", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(86, "DeleteShareGroupState", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(87, "ReadShareGroupStateSummary", (_cluster(Op.CLUSTER_ACTION),)),
    ApiAcls(88, "StreamsGroupHeartbeat", (_group(Op.READ), _topics(Op.DESCRIBE, "the topology's source topics"),
                                          Check(Op.CREATE, Res.CLUSTER, "cluster", "internal topics to create",
                                                alternatives=(_topics(Op.CREATE),)))),
    ApiAcls(89, "StreamsGroupDescribe", (_group(Op.DESCRIBE),
                                         _topics(Op.DESCRIBE, "a group whose topology names topics not described "
                                                              "answers TOPIC_AUTHORIZATION_FAILED"))),
    ApiAcls(90, "DescribeShareGroupOffsets", (_group(Op.DESCRIBE),
                                              _topics(Op.DESCRIBE, "offsets of topics not described are left out"))),
    ApiAcls(91, "AlterShareGroupOffsets", (_group(Op.READ), _topics(Op.READ))),
    ApiAcls(92, "DeleteShareGroupOffsets", (_group(Op.DELETE), _topics(Op.READ))),
]

API_ACLS: dict[int, ApiAcls] = {row.api_key: row for row in _ROWS}

# APIs a connection may send before it has authenticated on a SASL listener
PRE_AUTHENTICATION_API_KEYS = frozenset({17, 18, 36})

AUTHORIZATION_ERRORS: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}


def authorization_error(resource_type: ResourceType) -> ErrorCode:
    """The error code Kafka answers when a check on this resource type fails."""
    return AUTHORIZATION_ERRORS[resource_type]


def checks_for(api_key: int) -> tuple[Check, ...]:
    """The checks of one API; KeyError for an API this table does not know (refuse it)."""
    return API_ACLS[api_key].checks
