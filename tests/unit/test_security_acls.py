"""ACLs end to end without Ray: the controller core's ACL records (create, delete, replay from its
msgpack log), the gateway's authorizer rebuilt from metadata images, `Access` with and without an
authorizer, the ACL API handlers, the enforcement in a few handlers, and `kray acls`' parsing."""
import asyncio
import uuid
from types import SimpleNamespace

import pytest

from actors.controller.core import ControllerCore, PartitionState, TopicState
from actors.controller.metadata_log import MetadataLog
from actors.gateway.connection import ClientConnection
from actors.gateway.context import GatewayContext
from actors.gateway.handlers.acls import handle_create_acls, handle_delete_acls, handle_describe_acls
from actors.gateway.handlers.cluster_info import handle_metadata
from actors.gateway.handlers.fetch import handle_fetch
from actors.gateway.handlers.produce import handle_produce
from actors.security.access import ALLOW_ALL, Access, authorizer_config
from actors.security.authorizer import (CLUSTER_NAME, KAFKA_STANDARD_AUTHORIZER, AccessControlEntry,
                                        AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
                                        AclPermissionType, AuthorizerConfig, PatternType, ResourcePattern,
                                        ResourcePatternFilter, ResourceType, StandardAuthorizer,
                                        binding_from_row, binding_row)
from actors.security.principal import ANONYMOUS, KafkaPrincipal
from actors.config_schema import BROKER_DEFAULTS
from cluster.tools import acls as acls_tool
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from protocol.messages import (CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
                               DescribeAclsRequest, FetchRequest, MetadataRequest, ProduceRequest)

Op, Res, Perm = AclOperation, ResourceType, AclPermissionType
ALICE = KafkaPrincipal.user("alice")


def acl(name, principal="User:alice", op=Op.READ, perm=Perm.ALLOW, rt=Res.TOPIC, pattern=PatternType.LITERAL,
        host="*"):
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, host, op, perm))


def core():
    return ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")


# ---- the controller core ------------------------------------------------------------------------
def test_create_acls_validates_each_binding_and_adds_the_new_ones():
    c = core()
    results, outcome = c.create_acls([acl("orders"), acl(""), acl("orders", principal="alice"),
                                      acl("orders", op=Op.ANY), acl("orders")])
    assert [code for code, _ in results] == [0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
                                            ErrorCode.INVALID_REQUEST, 0]
    assert list(c.acls) == [acl("orders")] and c.acl_version == 1
    assert len(outcome.records) == 1 and outcome.records[0]["type"] == "acls"
    results, outcome = c.create_acls([acl("orders")])  # already there: a success that writes nothing
    assert results == [(0, None)] and outcome.records == [] and c.acl_version == 1


def test_delete_acls_reports_each_filters_matches_and_removes_them_once():
    c = core()
    c.create_acls([acl("orders"), acl("orders", op=Op.WRITE), acl("payments"), acl("app-", pattern=PatternType.PREFIXED)])
    by_name = AclBindingFilter(ResourcePatternFilter(Res.TOPIC, "orders", PatternType.ANY))
    writes = AclBindingFilter(entry_filter=AccessControlEntryFilter(operation=Op.WRITE))
    unknown = AclBindingFilter(ResourcePatternFilter(Res.UNKNOWN))
    results, outcome = c.delete_acls([by_name, writes, unknown])
    assert [set(m) for _, _, m in results[:2]] == [{acl("orders"), acl("orders", op=Op.WRITE)},
                                                  {acl("orders", op=Op.WRITE)}]
    assert results[2][0] == ErrorCode.INVALID_REQUEST
    assert len(outcome.records[0]["bindings"]) == 2
    assert set(c.acls) == {acl("payments"), acl("app-", pattern=PatternType.PREFIXED)}
    assert c.delete_acls([by_name])[1].records == [], "nothing matched: nothing written"


def test_acls_come_back_from_the_metadata_log(tmp_path):
    c, log = core(), MetadataLog(tmp_path / "m.log")
    for bindings in ([acl("orders"), acl("*", "User:*", Op.DESCRIBE)], [acl("g", rt=Res.GROUP)]):
        log.append(c.create_acls(bindings)[1].records)
    log.append(c.delete_acls([AclBindingFilter(ResourcePatternFilter(Res.TOPIC, "orders"))])[1].records)
    log.close()
    replayed = core()
    for record in MetadataLog(tmp_path / "m.log").replay():
        replayed.apply(record)
    assert list(replayed.acls) == list(c.acls) == [acl("*", "User:*", Op.DESCRIBE), acl("g", rt=Res.GROUP)]
    assert replayed.acl_version == c.acl_version == 3


def test_binding_rows_round_trip():
    b = acl("app-", "User:bob", Op.IDEMPOTENT_WRITE, Perm.DENY, Res.CLUSTER, PatternType.PREFIXED, "10.0.0.1")
    assert binding_from_row(binding_row(b)) == b


# ---- settings and Access --------------------------------------------------------------------------
def test_authorizer_config_names_kafkas_class_and_reads_super_users():
    assert authorizer_config({}) is None and authorizer_config({"authorizer.class.name": ""}) is None
    config = authorizer_config({"authorizer.class.name": KAFKA_STANDARD_AUTHORIZER,
                                "super.users": "User:admin;User:ANONYMOUS", "allow.everyone.if.no.acl.found": "true"})
    # and Kray's own brokers (followers fetching as User:kray-broker) always
    assert config == AuthorizerConfig(frozenset({"User:admin", "User:ANONYMOUS", "User:kray-broker"}), True)
    with pytest.raises(ValueError, match="StandardAuthorizer"):
        authorizer_config({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with pytest.raises(ValueError, match="super.users"):
        authorizer_config({"authorizer.class.name": KAFKA_STANDARD_AUTHORIZER, "super.users": "admin"})


def test_access_without_an_authorizer_allows_everything_and_reports_every_operation():
    assert ALLOW_ALL.allows(Op.WRITE, Res.TOPIC, "t") and ALLOW_ALL.allows_any(Op.WRITE, Res.TOPIC)
    assert ALLOW_ALL.allowed(Op.READ, Res.TOPIC, ["a", "b"]) == {"a", "b"}
    bits = ALLOW_ALL.authorized_operations(Res.GROUP, "g")
    assert bits == sum(1 << op for op in (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS))


def test_access_checks_the_principal_and_host():
    authorizer = StandardAuthorizer(AuthorizerConfig(), [acl("orders", host="10.0.0.1"), acl("logs", op=Op.WRITE)])
    access = Access(authorizer, ALICE, "10.0.0.1")
    assert access.allowed(Op.READ, Res.TOPIC, ["orders", "logs", "other"]) == {"orders"}
    assert access.allowed(Op.DESCRIBE, Res.TOPIC, ["orders", "logs"]) == {"orders", "logs"}  # implied
    assert not Access(authorizer, ALICE, "10.0.0.2").allows(Op.READ, Res.TOPIC, "orders")
    assert access.authorized_operations(Res.TOPIC, "orders") == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert access.allows_any(Op.WRITE, Res.TOPIC) and not Access(authorizer, ANONYMOUS, "h").allows_any(Op.WRITE, Res.TOPIC)


def _image(version, acls=(), topics=()):
    return SimpleNamespace(version=version, acls=tuple(acls), acl_version=version, partition_listeners={},
                           topics={t.name: t for t in topics}, topic_by_id=lambda i: None, brokers={},
                           cluster_id="c", controller_id=1)


def _connection(principal=ALICE, listener="SASL_PLAINTEXT"):
    return ClientConnection(("127.0.0.1", 5555), listener_name=listener, principal=principal)


def _context(config=None, acls=()):
    ctx = GatewayContext(broker_id=1, config={"authorizer.class.name": KAFKA_STANDARD_AUTHORIZER, **(config or {})},
                         controller=None)
    ctx.set_metadata(_image(1, acls))
    return ctx


def test_the_gateway_rebuilds_its_authorizer_when_the_acls_change():
    ctx = GatewayContext(broker_id=1, config={"authorizer.class.name": KAFKA_STANDARD_AUTHORIZER}, controller=None)
    assert not ctx.access(_connection()).allows(Op.READ, Res.TOPIC, "orders"), "deny before the first image"
    ctx.set_metadata(_image(1, [acl("orders")]))
    first = ctx.authorizer
    assert ctx.access(_connection()).allows(Op.READ, Res.TOPIC, "orders")
    ctx.set_metadata(_image(1, [acl("orders")]))
    assert ctx.authorizer is first, "same ACL version: kept"
    ctx.set_metadata(_image(2, []))
    assert not ctx.access(_connection()).allows(Op.READ, Res.TOPIC, "orders")
    assert ctx.access(_connection(listener=None)) is ALLOW_ALL, "the share-state front end is not checked yet"
    assert GatewayContext(broker_id=1, config={}, controller=None).access(_connection()) is ALLOW_ALL


# ---- the ACL APIs -------------------------------------------------------------------------------
class FakeController:
    def __init__(self):
        self.core = core()

    async def create_acls(self, bindings):
        return self.core.create_acls(bindings)[0]

    async def delete_acls(self, filters):
        return self.core.delete_acls(filters)[0]


def _wired_context(super_users="User:admin"):
    ctx = _context({"super.users": super_users})
    controller = ctx.controller = FakeController()

    async def refresh():
        ctx.set_metadata(_image(controller.core.acl_version + 1, controller.core.acls))
    ctx.refresh_metadata = refresh
    return ctx


def _header(api_key, version):
    return RequestHeader(api_key, version, 1, "test")


def _roundtrip(response, version):
    return type(response).decode(response.encode(version), version)


def test_create_describe_delete_acls_through_the_handlers():
    ctx, admin = _wired_context(), _connection(KafkaPrincipal.user("admin"))
    creation = CreateAclsRequest.AclCreation(resource_type=Res.TOPIC, resource_name="orders",
                                             resource_pattern_type=PatternType.LITERAL, principal="User:alice",
                                             host="*", operation=Op.WRITE, permission_type=Perm.ALLOW)
    bad_cluster = CreateAclsRequest.AclCreation(resource_type=Res.CLUSTER, resource_name="other",
                                                resource_pattern_type=PatternType.LITERAL, principal="User:alice",
                                                host="*", operation=Op.ALTER, permission_type=Perm.ALLOW)
    unknown_op = CreateAclsRequest.AclCreation(resource_type=Res.TOPIC, resource_name="orders",
                                               resource_pattern_type=PatternType.LITERAL, principal="User:alice",
                                               host="*", operation=99, permission_type=Perm.ALLOW)
    request = CreateAclsRequest(creations=[creation, bad_cluster, unknown_op])
    refused = asyncio.run(handle_create_acls(ctx, _header(30, 3), request, _connection()))
    assert [r.error_code for r in refused.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 3
    assert not ctx.controller.core.acls, "refused: nothing changed"
    created = _roundtrip(asyncio.run(handle_create_acls(ctx, _header(30, 3), request, admin)), 3)
    assert [r.error_code for r in created.results] == [0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert ctx.access(_connection()).allows(Op.WRITE, Res.TOPIC, "orders"), "the gateway that created it sees it"

    describe = DescribeAclsRequest(resource_type_filter=Res.ANY, resource_name_filter=None,
                                   pattern_type_filter=PatternType.ANY, principal_filter=None, host_filter=None,
                                   operation=Op.ANY, permission_type=Perm.ANY)
    assert asyncio.run(handle_describe_acls(ctx, _header(29, 3), describe, _connection())).error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    described = _roundtrip(asyncio.run(handle_describe_acls(ctx, _header(29, 1), describe, admin)), 1)
    assert [(r.resource_type, r.resource_name, [(a.principal, a.operation) for a in r.acls])
            for r in described.resources] == [(Res.TOPIC, "orders", [("User:alice", Op.WRITE)])]

    delete = DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=Res.TOPIC, resource_name_filter="orders", pattern_type_filter=PatternType.MATCH,
        principal_filter=None, host_filter=None, operation=Op.ANY, permission_type=Perm.ANY)])
    deleted = _roundtrip(asyncio.run(handle_delete_acls(ctx, _header(31, 2), delete, admin)), 2)
    assert [(m.resource_name, m.operation) for m in deleted.filter_results[0].matching_acls] == [("orders", Op.WRITE)]
    assert not ctx.access(_connection()).allows(Op.WRITE, Res.TOPIC, "orders")


def test_acl_apis_without_an_authorizer_answer_security_disabled():
    ctx = GatewayContext(broker_id=1, config={}, controller=None)
    describe = DescribeAclsRequest(resource_type_filter=Res.ANY, pattern_type_filter=PatternType.ANY,
                                   operation=Op.ANY, permission_type=Perm.ANY)
    assert asyncio.run(handle_describe_acls(ctx, _header(29, 3), describe, _connection())).error_code == \
        ErrorCode.SECURITY_DISABLED
    response = asyncio.run(handle_create_acls(ctx, _header(30, 3), CreateAclsRequest(creations=[
        CreateAclsRequest.AclCreation(resource_type=Res.TOPIC, resource_name="t", principal="User:a", host="*",
                                      operation=Op.READ, permission_type=Perm.ALLOW)]), _connection()))
    assert isinstance(response, CreateAclsResponse) and response.results[0].error_code == ErrorCode.SECURITY_DISABLED
    response = asyncio.run(handle_delete_acls(ctx, _header(31, 3), DeleteAclsRequest(filters=[
        DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=Res.ANY, pattern_type_filter=PatternType.ANY,
                                           operation=Op.ANY, permission_type=Perm.ANY)]), _connection()))
    assert isinstance(response, DeleteAclsResponse) and response.filter_results[0].error_code == \
        ErrorCode.SECURITY_DISABLED


# ---- enforcement in handlers (no Ray: nothing refused reaches a partition or the controller) -------
def _topic(name):
    return TopicState(name, uuid.uuid4(), [PartitionState(0, [1], 1, 0, [1])], {})


def test_metadata_lists_describable_topics_and_refuses_named_ones():
    topics = [_topic("orders"), _topic("secret")]
    ctx = _context(acls=[acl("orders", op=Op.READ)])
    ctx.metadata = _image(1, topics=topics)
    ctx.config["auto.create.topics.enable"] = True
    every = asyncio.run(handle_metadata(ctx, _header(3, 12), MetadataRequest(topics=None), _connection()))
    assert [t.name for t in every.topics] == ["orders"]
    named = asyncio.run(handle_metadata(ctx, _header(3, 12), MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in ("orders", "secret", "missing")],
        allow_auto_topic_creation=True, include_topic_authorized_operations=True), _connection()))
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("orders", 0), ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("missing", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert named.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert named.topics[1].topic_id == uuid.UUID(int=0), "a refused topic's id is not disclosed"


def test_produce_without_write_is_refused_per_partition_and_sends_nothing():
    ctx = _context(acls=[acl("orders", op=Op.DESCRIBE)])
    ctx.metadata = _image(1, topics=[_topic("orders")])
    request = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name="orders", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"x" * 61)])])
    response = asyncio.run(handle_produce(ctx, _header(0, 9), request, _connection()))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_fetch_needs_read_and_a_followers_fetch_cluster_action():
    ctx = _context(acls=[acl("orders", op=Op.DESCRIBE), acl("logs"),
                         acl(CLUSTER_NAME, "User:broker", Op.CLUSTER_ACTION, rt=Res.CLUSTER)])
    ctx.metadata = _image(1, topics=[_topic("orders"), _topic("logs")])

    def fetch(principal, replica_id=-1):
        request = FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, topics=[
            FetchRequest.FetchTopic(topic=t, partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                                     partition_max_bytes=1024)])
            for t in ("orders", "logs")])
        response = asyncio.run(handle_fetch(ctx, _header(1, 12), request, _connection(principal)))
        return [t.partitions[0].error_code for t in response.responses]
    # no partition is led here: an allowed partition answers NOT_LEADER_OR_FOLLOWER, a refused one never gets there
    assert fetch(ALICE) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert fetch(ALICE, replica_id=2) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
    assert fetch(KafkaPrincipal.user("broker"), replica_id=2) == [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 2


# ---- kray acls ------------------------------------------------------------------------------------
def test_kray_acls_parses_kafka_acls_options():
    assert acls_tool.parse_operation("DescribeConfigs") is Op.DESCRIBE_CONFIGS
    assert acls_tool.parse_operation("idempotent_write") is Op.IDEMPOTENT_WRITE
    with pytest.raises(acls_tool.UsageError):
        acls_tool.parse_operation("Any")
    args = SimpleNamespace(topic=["orders"], group=["g"], transactional_id=[], cluster=True, operation=["Read", "Write"],
                           allow_principal=["User:alice"], allow_host=[], deny_principal=["User:bob"],
                           deny_host=["10.0.0.7"])
    assert acls_tool.resources(args) == [(Res.TOPIC, "orders"), (Res.GROUP, "g"), (Res.CLUSTER, CLUSTER_NAME)]
    assert acls_tool.entries(args) == [("User:alice", "*", Op.READ, Perm.ALLOW), ("User:alice", "*", Op.WRITE, Perm.ALLOW),
                                       ("User:bob", "10.0.0.7", Op.READ, Perm.DENY),
                                       ("User:bob", "10.0.0.7", Op.WRITE, Perm.DENY)]
    with pytest.raises(acls_tool.UsageError):
        acls_tool.entries(SimpleNamespace(**{**vars(args), "allow_principal": ["alice"]}))
