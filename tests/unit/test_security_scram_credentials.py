"""The SCRAM credential store (KIP-554) without Ray: Kafka's AlterUserScramCredentials and
DescribeUserScramCredentials rules (the cases of Kafka's own AlterUserScramCredentialsRequestTest
and DescribeUserScramCredentialsRequestTest), the controller's records replayed from its log, the
handlers with their cluster authorization, and a SCRAM login against a gateway's credentials."""
import asyncio
import hashlib
from types import SimpleNamespace

import pytest

from actors.controller.core import ControllerCore
from actors.controller.metadata_log import MetadataLog
from actors.gateway.connection import ClientConnection, new_session
from actors.gateway.context import GatewayContext
from actors.gateway.handlers.scram_credentials import (handle_alter_user_scram_credentials,
                                                       handle_describe_user_scram_credentials)
from actors.security.authorizer import (CLUSTER_NAME, KAFKA_STANDARD_AUTHORIZER, AccessControlEntry,
                                        AclBinding, AclOperation, AclPermissionType, PatternType,
                                        ResourcePattern, ResourceType)
from actors.security.principal import KafkaPrincipal
from actors.security.scram import ScramMechanism, make_credential, salted_password
from actors.security.scram_credentials import (Deletion, Upsertion, alter_credentials, by_mechanism,
                                               describe_credentials)
from actors.security.session import State
from actors.config_schema import BROKER_DEFAULTS
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from protocol.messages import (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
                               DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse)
from tests.unit.test_security_scram import Client

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SALT = b"0123456789abcdef"


def upsert(name, mechanism=SHA256, iterations=4096, password="secret", salt=SALT):
    salted = salted_password(mechanism, password, salt, min(max(iterations, 1), 16384))
    return Upsertion(name, mechanism.type_id, iterations, salt, salted)


def delete(name, mechanism=SHA256):
    return Deletion(name, mechanism.type_id)


def codes(results):
    return {r.user: r.error_code for r in results}


def core_with(*upsertions):
    c = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    results, _ = c.alter_user_scram_credentials([], list(upsertions))
    assert all(r.error_code == 0 for r in results)
    return c


# ---- Kafka's rules ------------------------------------------------------------------------------
def test_a_user_altered_twice_in_one_request_is_a_duplicate_and_unchanged():
    store = core_with(upsert("user1"), upsert("user2")).scram_credentials
    for deletions, upsertions in (([delete("user1"), delete("user1")], [upsert("user2"), upsert("user2")]),
                                  ([delete("user1"), delete("user2")], [upsert("user1"), upsert("user2")])):
        results, records = alter_credentials(store, deletions, upsertions)
        assert codes(results) == {"user1": ErrorCode.DUPLICATE_RESOURCE, "user2": ErrorCode.DUPLICATE_RESOURCE}
        assert {r.error_message for r in results} == {"A user credential cannot be altered twice in the same request"}
        assert records == []
    results, records = alter_credentials({}, [], [upsert("alice", SHA256), upsert("alice", SHA512)])
    assert codes(results) == {"alice": ErrorCode.DUPLICATE_RESOURCE} and records == [], \
        "both mechanisms of one user need two requests, as in Kafka (kray configs sends them apart)"


def test_empty_users_unknown_mechanisms_and_iteration_bounds_are_refused_with_kafkas_codes():
    results, records = alter_credentials({}, [delete(""), Deletion("user1", 0), Deletion("user2", 10)], [
        Upsertion("user4", 0, 8192, SALT, b"x"), Upsertion("user5", 10, 8192, SALT, b"x"),
        upsert("few", iterations=1), upsert("many", iterations=2**31 - 1), upsert("nosalt", salt=b""),
        Upsertion("nosalted", 1, 4096, SALT, b"")])
    assert records == []
    by_user = {r.user: (r.error_code, r.error_message) for r in results}
    assert by_user == {
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "user1": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "user2": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "user4": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "user5": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "nosalt": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt must not be empty"),
        "nosalted": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salted password must not be empty"),
    }


def test_deleting_what_does_not_exist_is_resource_not_found_and_the_rest_of_the_request_applies():
    c = core_with(upsert("alice"))
    results, outcome = c.alter_user_scram_credentials([delete("alice", SHA512), delete("alice2")],
                                                      [upsert("bob", SHA512, 8192)])
    assert codes(results) == {"alice": ErrorCode.RESOURCE_NOT_FOUND, "alice2": ErrorCode.RESOURCE_NOT_FOUND, "bob": 0}
    assert set(c.scram_credentials) == {("alice", SHA256), ("bob", SHA512)}
    assert len(outcome.records) == 1 and outcome.records[0]["type"] == "scram_credential"


def test_an_upsertion_keeps_keys_salt_and_iterations_never_the_password():
    c = core_with(upsert("alice", SHA512, 8192, password="alice-secret"))
    credential = c.scram_credentials[("alice", SHA512)]
    assert credential == make_credential(SHA512, "alice-secret", salt=SALT, iterations=8192)
    salted = hashlib.pbkdf2_hmac("sha512", b"alice-secret", SALT, 8192)
    kept = credential.salt + credential.stored_key + credential.server_key
    assert salted not in kept and b"alice-secret" not in kept and "alice-secret" not in repr(credential)


def test_describe_names_mechanisms_and_iterations_duplicates_and_unknown_users():
    store = core_with(upsert("user1", SHA256, 4096), upsert("user2", SHA512, 8192)).scram_credentials
    store = dict(store)
    store[("user1", SHA512)] = make_credential(SHA512, "pw", iterations=8192)
    everyone = describe_credentials(store, None)
    assert [(r.user, r.error_code, r.credentials) for r in everyone] == [
        ("user1", 0, ((1, 4096), (2, 8192))), ("user2", 0, ((2, 8192),))]
    assert describe_credentials(store, []) == everyone
    asked = describe_credentials(store, ["user2", "nobody", "user1", "user1"])
    assert [(r.user, r.error_code) for r in asked] == [
        ("user2", 0), ("nobody", ErrorCode.RESOURCE_NOT_FOUND), ("user1", ErrorCode.DUPLICATE_RESOURCE)]
    assert asked[1].error_message == "Attempt to describe a user credential that does not exist: nobody"
    assert describe_credentials({}, None) == []


def test_credentials_come_back_from_the_metadata_log(tmp_path):
    c, log = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1"), MetadataLog(tmp_path / "m.log")
    log.append(c.alter_user_scram_credentials([], [upsert("alice", SHA512, 8192), upsert("bob")])[1].records)
    log.append(c.alter_user_scram_credentials([delete("bob")], [upsert("carol", SHA256, 5000)])[1].records)
    log.close()
    replayed = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    for record in MetadataLog(tmp_path / "m.log").replay():
        replayed.apply(record)
    assert replayed.scram_credentials == c.scram_credentials
    assert set(replayed.scram_credentials) == {("alice", SHA512), ("carol", SHA256)}
    assert replayed.scram_version == c.scram_version == 4
    assert b"secret" not in (tmp_path / "m.log").read_bytes()


# ---- the handlers and a login --------------------------------------------------------------------
class FakeController:
    def __init__(self):
        self.core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")

    async def alter_user_scram_credentials(self, deletions, upsertions):
        return self.core.alter_user_scram_credentials(deletions, upsertions)[0]


def _image(version, core, acls=()):
    return SimpleNamespace(version=version, acls=tuple(acls), acl_version=1, partition_listeners={}, topics={},
                           topic_by_id=lambda i: None, brokers={}, cluster_id="c", controller_id=1,
                           scram_credentials=dict(core.scram_credentials), scram_version=core.scram_version)


def _context(config):
    ctx = GatewayContext(broker_id=1, config=config, controller=FakeController())
    core = ctx.controller.core
    describe_alice = AclBinding(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                                AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    ctx.set_metadata(_image(1, core, [describe_alice]))

    async def refresh():
        ctx.set_metadata(_image(ctx.metadata.version + 1, core, [describe_alice]))
    ctx.refresh_metadata = refresh
    return ctx


def _as(name):
    return ClientConnection(("127.0.0.1", 5555), listener_name="SASL_SSL", principal=KafkaPrincipal.user(name))


def _alter(ctx, connection, deletions=(), upsertions=()):
    R = AlterUserScramCredentialsRequest
    request = R(deletions=[R.ScramCredentialDeletion(name=n, mechanism=m) for n, m in deletions],
                upsertions=[R.ScramCredentialUpsertion(name=u.name, mechanism=u.mechanism, iterations=u.iterations,
                                                       salt=u.salt, salted_password=u.salted_password)
                            for u in upsertions])
    response = asyncio.run(handle_alter_user_scram_credentials(ctx, RequestHeader(51, 0, 1, "t"), request, connection))
    return AlterUserScramCredentialsResponse.decode(response.encode(0), 0)


def _describe(ctx, connection, users=None):
    R = DescribeUserScramCredentialsRequest
    request = R(users=None if users is None else [R.UserName(name=u) for u in users])
    response = asyncio.run(handle_describe_user_scram_credentials(ctx, RequestHeader(50, 0, 1, "t"), request,
                                                                  connection))
    return DescribeUserScramCredentialsResponse.decode(response.encode(0), 0)


def test_altering_needs_alter_on_the_cluster_and_describing_describe():
    ctx = _context({"authorizer.class.name": KAFKA_STANDARD_AUTHORIZER, "super.users": "User:admin"})
    refused = _alter(ctx, _as("alice"), [("bob", 1)], [upsert("carol")])
    assert [(r.user, r.error_code) for r in refused.results] == [
        ("bob", ErrorCode.CLUSTER_AUTHORIZATION_FAILED), ("carol", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    assert not ctx.controller.core.scram_credentials, "refused: nothing changed"
    assert _describe(ctx, _as("bob")).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    done = _alter(ctx, _as("admin"), upsertions=[upsert("carol", SHA512, 8192)])
    assert [(r.user, r.error_code) for r in done.results] == [("carol", 0)]
    described = _describe(ctx, _as("alice"))  # alice may DESCRIBE the cluster
    assert described.error_code == 0
    assert [(r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in described.results] == [
        ("carol", [(2, 8192)])]


def test_without_an_authorizer_anyone_may_alter_as_on_a_kafka_broker_without_one():
    ctx = _context({})
    assert [r.error_code for r in _alter(ctx, _as("x"), upsertions=[upsert("carol")]).results] == [0]
    assert _alter(ctx, _as("x")).results == [], "an empty request changes nothing and answers nothing"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_a_login_uses_the_credentials_of_the_gateways_current_image(mechanism):
    ctx = _context({})
    _alter(ctx, _as("admin"), upsertions=[upsert("carol", mechanism, 4096, password="carol-secret")])
    security = SimpleNamespace(mechanisms=(mechanism.mechanism_name, "PLAIN"), plain_users={}, reauth_ms=0)

    def login(password):
        session = new_session(security, ctx.scram_credentials)
        assert session.handshake(mechanism.mechanism_name, 1).error_code == 0
        client = Client(mechanism, "carol", password)
        first = session.authenticate(client.first(), 0)
        if first.error_code:
            return session, first
        return session, session.authenticate(client.final(first.auth_bytes), 0)

    session, answer = login("carol-secret")
    assert answer.error_code == 0 and session.state is State.AUTHENTICATED
    assert session.principal == KafkaPrincipal.user("carol")
    session, answer = login("wrong")
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and answer.close
    _alter(ctx, _as("admin"), deletions=[("carol", mechanism.type_id)])
    assert by_mechanism(ctx.metadata.scram_credentials)[mechanism] == {}
    session, answer = login("carol-secret")
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, "a deleted credential logs in no more"


# ---- kray configs' parsing -----------------------------------------------------------------------
def test_add_config_splits_as_kafka_configs_does():
    from cluster.admin import AdminError
    from cluster.tools.configs import parse_add_config, scram_upsertion
    assert parse_add_config("SCRAM-SHA-256=[iterations=8192,password=a,b],SCRAM-SHA-512=[password=c]") == {
        "SCRAM-SHA-256": "iterations=8192,password=a,b", "SCRAM-SHA-512": "password=c"}
    assert parse_add_config("retention.ms=100, cleanup.policy=[compact,delete],x=") == {
        "retention.ms": "100", "cleanup.policy": "compact,delete", "x": ""}
    assert parse_add_config("") == {}
    with pytest.raises(AdminError, match="key=val"):
        parse_add_config("novalue")
    request = scram_upsertion("alice", "SCRAM-SHA-512", "password=alice-secret")
    upsertion = request.upsertions[0]
    assert (upsertion.name, upsertion.mechanism, upsertion.iterations) == ("alice", 2, 4096)
    assert upsertion.salted_password == salted_password(SHA512, "alice-secret", upsertion.salt, 4096)
    assert b"alice-secret" not in request.encode(0)
    with pytest.raises(AdminError, match="less than the minimum 4096"):
        scram_upsertion("alice", "SCRAM-SHA-512", "iterations=100,password=x")
    with pytest.raises(AdminError, match=r"iterations=8192,password=SECRET"):
        scram_upsertion("alice", "SCRAM-SHA-512", "secret")
