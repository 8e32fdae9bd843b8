"""Every API that names a consumer or share group refuses, in its handler, a principal without the
group ACL Kafka checks (issue 18, KIP-932's "Access control"), with GROUP_AUTHORIZATION_FAILED and
before reaching any coordinator: the gateway here has no coordinator at all, so a handler that
went past its check would fail or hang instead of answering.

The principal may READ and DESCRIBE the topic, so only the group check can refuse. With DESCRIBE
on the group (and not READ), the describing APIs pass the check while the ones that change the
group (a share consumer fetching or acknowledging included) still refuse."""
import asyncio
import uuid

import pytest

from actors.gateway.connection import ClientConnection
from actors.gateway.context import GatewayContext
from actors.gateway.handlers.consumer_groups import (handle_consumer_group_describe, handle_consumer_group_heartbeat,
                                                     handle_describe_groups, handle_heartbeat, handle_join_group,
                                                     handle_leave_group, handle_offset_commit, handle_offset_delete,
                                                     handle_offset_fetch, handle_sync_group)
from actors.gateway.handlers.groups import handle_delete_groups, handle_share_group_describe, handle_share_group_heartbeat
from actors.gateway.handlers.share_admin import (handle_alter_share_group_offsets, handle_delete_share_group_offsets,
                                                 handle_describe_share_group_offsets)
from actors.gateway.handlers.share_fetch import handle_share_acknowledge, handle_share_fetch
from actors.gateway.handlers.streams_groups import handle_streams_group_describe, handle_streams_group_heartbeat
from actors.gateway.handlers.transactions import handle_add_offsets_to_txn, handle_txn_offset_commit
from actors.security.authorizer import (KAFKA_STANDARD_AUTHORIZER, AccessControlEntry, AclBinding,
                                        AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                        ResourceType)
from actors.security.principal import KafkaPrincipal
from actors.config_schema import BROKER_DEFAULTS
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from tests.unit.test_security_acls import _image

GROUP, TOPIC, TRANSACTIONAL_ID = "workers", "orders", "tx"
REFUSED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def _acl(resource_type, name, operation):
    return AclBinding(ResourcePattern(resource_type, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW))


def _context(group_operation=None):
    acls = [_acl(ResourceType.TOPIC, TOPIC, AclOperation.READ),  # READ implies DESCRIBE
            _acl(ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID, AclOperation.WRITE)]
    if group_operation is not None:
        acls.append(_acl(ResourceType.GROUP, GROUP, group_operation))
    ctx = GatewayContext(broker_id=1, config={**BROKER_DEFAULTS, "authorizer.class.name": KAFKA_STANDARD_AUTHORIZER},
                         controller=None)
    ctx.set_metadata(_image(1, acls))
    return ctx


def _connection():
    return ClientConnection(("127.0.0.1", 5555), listener_name="SASL_PLAINTEXT", principal=KafkaPrincipal.user("alice"))


def _share_topics(cls):
    return [cls.FetchTopic(topic_id=uuid.uuid4(), partitions=[cls.FetchPartition(partition_index=0)])] \
        if cls is m.ShareFetchRequest else []


# (name, handler, api key, version, request, the group's error code in the answer, the group operation it needs)
CASES = [
    ("JoinGroup", handle_join_group, 11, 5, m.JoinGroupRequest(group_id=GROUP, protocol_type="consumer", protocols=[]),
     lambda r: r.error_code, AclOperation.READ),
    ("SyncGroup", handle_sync_group, 14, 3, m.SyncGroupRequest(group_id=GROUP, generation_id=1, member_id="m",
                                                                assignments=[]),
     lambda r: r.error_code, AclOperation.READ),
    ("Heartbeat", handle_heartbeat, 12, 3, m.HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="m"),
     lambda r: r.error_code, AclOperation.READ),
    ("LeaveGroup", handle_leave_group, 13, 3, m.LeaveGroupRequest(group_id=GROUP, members=[]),
     lambda r: r.error_code, AclOperation.READ),
    ("OffsetCommit", handle_offset_commit, 8, 8, m.OffsetCommitRequest(
        group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(
            name=TOPIC, partitions=[m.OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]),
     lambda r: r.topics[0].partitions[0].error_code, AclOperation.READ),
    ("OffsetFetch", handle_offset_fetch, 9, 7, m.OffsetFetchRequest(
        group_id=GROUP, topics=[m.OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]),
     lambda r: r.error_code, AclOperation.DESCRIBE),
    ("OffsetDelete", handle_offset_delete, 47, 0, m.OffsetDeleteRequest(group_id=GROUP, topics=[]),
     lambda r: r.error_code, AclOperation.DELETE),
    ("DescribeGroups", handle_describe_groups, 15, 5, m.DescribeGroupsRequest(groups=[GROUP]),
     lambda r: r.groups[0].error_code, AclOperation.DESCRIBE),
    ("DeleteGroups", handle_delete_groups, 42, 2, m.DeleteGroupsRequest(groups_names=[GROUP]),
     lambda r: r.results[0].error_code, AclOperation.DELETE),
    ("ConsumerGroupHeartbeat", handle_consumer_group_heartbeat, 68, 0, m.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id="m", member_epoch=0, subscribed_topic_names=[TOPIC]),
     lambda r: r.error_code, AclOperation.READ),
    ("ConsumerGroupDescribe", handle_consumer_group_describe, 69, 0, m.ConsumerGroupDescribeRequest(group_ids=[GROUP]),
     lambda r: r.groups[0].error_code, AclOperation.DESCRIBE),
    ("ShareGroupHeartbeat", handle_share_group_heartbeat, 76, 1, m.ShareGroupHeartbeatRequest(
        group_id=GROUP, member_id="m", member_epoch=0, subscribed_topic_names=[TOPIC]),
     lambda r: r.error_code, AclOperation.READ),
    ("ShareGroupDescribe", handle_share_group_describe, 77, 1, m.ShareGroupDescribeRequest(group_ids=[GROUP]),
     lambda r: r.groups[0].error_code, AclOperation.DESCRIBE),
    ("ShareFetch", handle_share_fetch, 78, 1, m.ShareFetchRequest(
        group_id=GROUP, member_id="m", share_session_epoch=0, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
        topics=_share_topics(m.ShareFetchRequest), forgotten_topics_data=[]),
     lambda r: r.error_code, AclOperation.READ),
    ("ShareAcknowledge", handle_share_acknowledge, 79, 1, m.ShareAcknowledgeRequest(
        group_id=GROUP, member_id="m", share_session_epoch=1, topics=[]),
     lambda r: r.error_code, AclOperation.READ),
    ("DescribeShareGroupOffsets", handle_describe_share_group_offsets, 90, 0, m.DescribeShareGroupOffsetsRequest(
        groups=[m.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=None)]),
     lambda r: r.groups[0].error_code, AclOperation.DESCRIBE),
    ("AlterShareGroupOffsets", handle_alter_share_group_offsets, 91, 0, m.AlterShareGroupOffsetsRequest(
        group_id=GROUP, topics=[]),
     lambda r: r.error_code, AclOperation.READ),
    ("AddOffsetsToTxn", handle_add_offsets_to_txn, 25, 3, m.AddOffsetsToTxnRequest(
        transactional_id=TRANSACTIONAL_ID, producer_id=1, producer_epoch=0, group_id=GROUP),
     lambda r: r.error_code, AclOperation.READ),
    ("TxnOffsetCommit", handle_txn_offset_commit, 28, 3, m.TxnOffsetCommitRequest(
        transactional_id=TRANSACTIONAL_ID, group_id=GROUP, producer_id=1, producer_epoch=0, member_id="",
        topics=[m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
            name=TOPIC, partitions=[m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, committed_metadata="")])]),
     lambda r: r.topics[0].partitions[0].error_code, AclOperation.READ),
    ("StreamsGroupHeartbeat", handle_streams_group_heartbeat, 88, 0, m.StreamsGroupHeartbeatRequest(
        group_id=GROUP, member_id="m", member_epoch=0, endpoint_information_epoch=0),
     lambda r: r.error_code, AclOperation.READ),
    ("StreamsGroupDescribe", handle_streams_group_describe, 89, 0, m.StreamsGroupDescribeRequest(group_ids=[GROUP]),
     lambda r: r.groups[0].error_code, AclOperation.DESCRIBE),
    ("DeleteShareGroupOffsets", handle_delete_share_group_offsets, 92, 0, m.DeleteShareGroupOffsetsRequest(
        group_id=GROUP, topics=[]),
     lambda r: r.error_code, AclOperation.DELETE),
]


def _answer(ctx, handler, api_key, version, request):
    header = RequestHeader(api_key, version, 1, "test")
    return asyncio.run(asyncio.wait_for(handler(ctx, header, request, _connection()), 10))


@pytest.mark.parametrize("name,handler,api_key,version,request_,error_of,needs", CASES, ids=[c[0] for c in CASES])
def test_no_group_acl_refuses_before_any_coordinator(name, handler, api_key, version, request_, error_of, needs):
    assert error_of(_answer(_context(), handler, api_key, version, request_)) == REFUSED


@pytest.mark.parametrize("name,handler,api_key,version,request_,error_of,needs",
                         [c for c in CASES if c[-1] is not AclOperation.DESCRIBE], ids=[
                             c[0] for c in CASES if c[-1] is not AclOperation.DESCRIBE])
def test_describe_on_the_group_does_not_let_a_principal_change_it(name, handler, api_key, version, request_, error_of,
                                                                  needs):
    """KIP-932: reading a group's information needs DESCRIBE, changing it (consuming a record
    included) READ; deleting needs DELETE."""
    assert error_of(_answer(_context(AclOperation.DESCRIBE), handler, api_key, version, request_)) == REFUSED


def test_every_group_api_the_gateway_serves_is_checked_here():
    from actors.gateway.handlers import ROUTES
    from actors.security.api_acls import API_ACLS
    group_apis = {key for key, row in API_ACLS.items() if key in ROUTES
                  and any(c.name_from == "group" and c.when == "" for c in row.checks)}
    assert group_apis <= {c[2] for c in CASES}, sorted(group_apis - {c[2] for c in CASES})
