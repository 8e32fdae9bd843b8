"""The ACL authorizer (actors/security/authorizer.py) against Kafka's StandardAuthorizer rules,
its filters (DescribeAcls/DeleteAcls), and the table of what each API needs (api_acls.py)."""
import time

import pytest

from protocol.errors import ErrorCode

from actors.gateway.handlers import ROUTES
from actors.security.api_acls import (
    API_ACLS, PRE_AUTHENTICATION_API_KEYS, Check, authorization_error, checks_for)
from actors.security.authorizer import (
    ANY_ACL, CLUSTER_NAME, SUPPORTED_OPERATIONS, AccessControlEntry, AccessControlEntryFilter, AclBinding,
    AclBindingFilter, AclOperation, AclPermissionType, AuthorizerConfig, PatternType, ResourcePattern,
    ResourcePatternFilter, ResourceType, StandardAuthorizer, acl_binding_problem)
from actors.security.principal import KafkaPrincipal

Op, Res, Pat = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
HOST = "10.0.0.1"


def acl(resource_type, name, operation, permission=ALLOW, principal="User:alice", host="*", pattern=Pat.LITERAL):
    return AclBinding(ResourcePattern(resource_type, name, pattern),
                      AccessControlEntry(principal, host, operation, permission))


def authorizer(*acls, **config):
    return StandardAuthorizer(AuthorizerConfig(**config), acls)


def may(auth, operation, resource_type, name, principal=ALICE, host=HOST):
    return auth.authorize(principal, host, operation, resource_type, name)


def test_no_acls_means_no_access_by_default():
    assert not may(authorizer(), Op.READ, Res.TOPIC, "orders")
    assert not may(authorizer(), Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)


def test_allow_everyone_if_no_acl_found_only_where_the_resource_has_no_acls():
    auth = authorizer(acl(Res.TOPIC, "orders", Op.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert may(auth, Op.WRITE, Res.TOPIC, "payments"), "no ACL on payments"
    assert not may(auth, Op.READ, Res.TOPIC, "orders"), "orders has an ACL (for bob), so the default no longer applies"
    assert not may(auth, Op.WRITE, Res.TOPIC, "orders")
    assert may(auth, Op.READ, Res.TOPIC, "orders", principal=BOB)


def test_a_literal_allow_grants_exactly_its_resource_and_operation():
    auth = authorizer(acl(Res.TOPIC, "orders", Op.READ))
    assert may(auth, Op.READ, Res.TOPIC, "orders")
    assert not may(auth, Op.WRITE, Res.TOPIC, "orders")
    assert not may(auth, Op.READ, Res.TOPIC, "orders2"), "a literal name is not a prefix"
    assert not may(auth, Op.READ, Res.TOPIC, "order")
    assert not may(auth, Op.READ, Res.GROUP, "orders"), "another resource type"
    assert not may(auth, Op.READ, Res.TOPIC, "orders", principal=BOB)


def test_prefixed_acls_cover_names_that_start_with_them():
    auth = authorizer(acl(Res.TOPIC, "pay", Op.WRITE, pattern=Pat.PREFIXED))
    assert may(auth, Op.WRITE, Res.TOPIC, "pay") and may(auth, Op.WRITE, Res.TOPIC, "payments.eu")
    assert not may(auth, Op.WRITE, Res.TOPIC, "pa") and not may(auth, Op.WRITE, Res.TOPIC, "xpay")


def test_the_wildcard_resource_covers_every_name_of_its_type():
    auth = authorizer(acl(Res.GROUP, "*", Op.READ))
    assert may(auth, Op.READ, Res.GROUP, "any-group") and may(auth, Op.READ, Res.GROUP, "*")
    assert not may(auth, Op.READ, Res.TOPIC, "any-topic")
    prefixed_star = authorizer(acl(Res.GROUP, "*", Op.READ, pattern=Pat.PREFIXED))
    assert not may(prefixed_star, Op.READ, Res.GROUP, "g"), "a PREFIXED '*' is the character '*'"
    assert may(prefixed_star, Op.READ, Res.GROUP, "*g")


def test_deny_wins_over_allow_wherever_it_comes_from():
    allow = acl(Res.TOPIC, "*", Op.READ)
    for deny in (acl(Res.TOPIC, "secret", Op.READ, DENY),
                 acl(Res.TOPIC, "sec", Op.READ, DENY, pattern=Pat.PREFIXED),
                 acl(Res.TOPIC, "secret", Op.ALL, DENY),
                 acl(Res.TOPIC, "secret", Op.READ, DENY, principal="User:*"),
                 acl(Res.TOPIC, "*", Op.READ, DENY, host=HOST)):
        auth = authorizer(allow, acl(Res.TOPIC, "secret", Op.ALL), deny)
        assert not may(auth, Op.READ, Res.TOPIC, "secret"), deny
    auth = authorizer(allow, acl(Res.TOPIC, "secret", Op.READ, DENY))
    assert may(auth, Op.READ, Res.TOPIC, "public")


def test_implied_operations_of_an_allow():
    for operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert may(authorizer(acl(Res.TOPIC, "t", operation)), Op.DESCRIBE, Res.TOPIC, "t"), operation
    for operation in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.CLUSTER_ACTION):
        assert not may(authorizer(acl(Res.TOPIC, "t", operation)), Op.DESCRIBE, Res.TOPIC, "t"), operation
    assert may(authorizer(acl(Res.TOPIC, "t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert not may(authorizer(acl(Res.TOPIC, "t", Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS, Res.TOPIC, "t")
    assert not may(authorizer(acl(Res.TOPIC, "t", Op.DESCRIBE)), Op.READ, Res.TOPIC, "t"), "no implication upwards"
    everything = authorizer(acl(Res.TOPIC, "t", Op.ALL))
    assert all(may(everything, op, Res.TOPIC, "t") for op in SUPPORTED_OPERATIONS[Res.TOPIC])


def test_a_deny_is_never_widened_by_implication():
    auth = authorizer(acl(Res.TOPIC, "t", Op.DESCRIBE), acl(Res.TOPIC, "t", Op.READ, DENY))
    assert may(auth, Op.DESCRIBE, Res.TOPIC, "t"), "DENY READ does not deny DESCRIBE"
    assert not may(auth, Op.READ, Res.TOPIC, "t")
    auth = authorizer(acl(Res.TOPIC, "t", Op.ALL), acl(Res.TOPIC, "t", Op.DESCRIBE, DENY))
    assert not may(auth, Op.DESCRIBE, Res.TOPIC, "t") and may(auth, Op.READ, Res.TOPIC, "t")


def test_wildcard_principal_and_hosts():
    auth = authorizer(acl(Res.TOPIC, "t", Op.READ, principal="User:*", host="10.0.0.1"))
    assert may(auth, Op.READ, Res.TOPIC, "t", principal=BOB)
    assert not may(auth, Op.READ, Res.TOPIC, "t", principal=BOB, host="10.0.0.2")
    other_type = authorizer(acl(Res.TOPIC, "t", Op.READ, principal="Group:*"))
    assert not may(other_type, Op.READ, Res.TOPIC, "t"), "only User:* is the wildcard principal"


def test_super_users_may_do_anything_even_against_a_deny():
    config = AuthorizerConfig.from_configs({"super.users": " User:admin ; User:CN=broker,O=kray;;"})
    assert config.super_users == {"User:admin", "User:CN=broker,O=kray"}
    auth = StandardAuthorizer(config, [acl(Res.TOPIC, "*", Op.ALL, DENY, principal="User:*")])
    assert may(auth, Op.ALTER, Res.CLUSTER, CLUSTER_NAME, principal=KafkaPrincipal.user("admin"))
    assert may(auth, Op.READ, Res.TOPIC, "t", principal=KafkaPrincipal.parse("User:CN=broker,O=kray"))
    assert not may(auth, Op.READ, Res.TOPIC, "t")
    with pytest.raises(ValueError, match="super.users.*separate principals with ';'"):
        AuthorizerConfig.from_configs({"super.users": "User:a,User:b;admin"})


def test_config_defaults_and_boolean_spelling():
    assert AuthorizerConfig.from_configs({}) == AuthorizerConfig(frozenset(), False)
    assert AuthorizerConfig.from_configs({"allow.everyone.if.no.acl.found": " TRUE "}).allow_everyone_if_no_acl_found
    assert AuthorizerConfig.from_configs({"allow.everyone.if.no.acl.found": True}).allow_everyone_if_no_acl_found
    assert not AuthorizerConfig.from_configs({"allow.everyone.if.no.acl.found": "yes"}).allow_everyone_if_no_acl_found


@pytest.mark.parametrize("binding, problem", [
    (acl(Res.ANY, "t", Op.READ), "Invalid resourceType ANY"),
    (acl(Res.UNKNOWN, "t", Op.READ), "Invalid resourceType UNKNOWN"),
    (acl(Res.TOPIC, "t", Op.READ, pattern=Pat.MATCH), "Invalid patternType MATCH"),
    (acl(Res.TOPIC, "t", Op.READ, pattern=Pat.ANY), "Invalid patternType ANY"),
    (acl(Res.TOPIC, "t", Op.ANY), "Invalid operation ANY"),
    (acl(Res.TOPIC, "t", Op.READ, AclPermissionType.ANY), "Invalid permissionType ANY"),
    (acl(Res.TOPIC, "", Op.READ), "Resource name should not be empty"),
    (acl(Res.TOPIC, "t", Op.READ, principal="alice"), "Invalid principal"),
    (acl(Res.TOPIC, "t", Op.READ, host=""), "Host should not be empty"),
])
def test_bindings_kafka_refuses_to_create(binding, problem):
    assert problem in acl_binding_problem(binding)
    with pytest.raises(ValueError, match=problem):
        authorizer(binding)


def test_adding_twice_and_removing():
    binding = acl(Res.TOPIC, "t", Op.READ)
    auth = authorizer()
    assert auth.add(binding) and not auth.add(binding) and len(auth) == 1
    assert may(auth, Op.READ, Res.TOPIC, "t")
    assert auth.remove(binding) and not auth.remove(binding) and len(auth) == 0
    assert not may(auth, Op.READ, Res.TOPIC, "t")


FILTER_ACLS = [
    acl(Res.TOPIC, "payments", Op.READ),
    acl(Res.TOPIC, "pay", Op.WRITE, pattern=Pat.PREFIXED, principal="User:bob"),
    acl(Res.TOPIC, "*", Op.DESCRIBE, DENY, host="10.0.0.9"),
    acl(Res.TOPIC, "orders", Op.READ),
    acl(Res.GROUP, "payments", Op.READ),
]


def described(pattern_filter, entry_filter=AccessControlEntryFilter()):
    return set(authorizer(*FILTER_ACLS).acls(AclBindingFilter(pattern_filter, entry_filter)))


def test_filters_as_kafkas_acl_binding_filter():
    p, pay, star, orders, group = FILTER_ACLS
    assert set(authorizer(*FILTER_ACLS).acls(ANY_ACL)) == set(FILTER_ACLS)
    assert described(ResourcePatternFilter(Res.TOPIC)) == {p, pay, star, orders}
    assert described(ResourcePatternFilter(Res.ANY, "payments")) == {p, group}, "ANY: names compared exactly"
    assert described(ResourcePatternFilter(Res.TOPIC, "payments", Pat.LITERAL)) == {p}
    assert described(ResourcePatternFilter(Res.TOPIC, "pay", Pat.PREFIXED)) == {pay}
    assert described(ResourcePatternFilter(Res.TOPIC, "payments", Pat.MATCH)) == {p, pay, star}, \
        "MATCH: every pattern that applies to the topic payments"
    assert described(ResourcePatternFilter(Res.TOPIC, "*", Pat.LITERAL)) == {star}
    assert described(ResourcePatternFilter(Res.TOPIC, None, Pat.PREFIXED)) == {pay}
    assert described(ResourcePatternFilter(), AccessControlEntryFilter(principal="User:bob")) == {pay}
    assert described(ResourcePatternFilter(), AccessControlEntryFilter(host="10.0.0.9")) == {star}
    assert described(ResourcePatternFilter(), AccessControlEntryFilter(operation=Op.READ)) == {p, orders, group}
    assert described(ResourcePatternFilter(), AccessControlEntryFilter(permission_type=DENY)) == {star}


def test_delete_acls_removes_what_the_filter_matches():
    auth = authorizer(*FILTER_ACLS)
    deleted = auth.delete(AclBindingFilter(ResourcePatternFilter(Res.TOPIC, "payments", Pat.MATCH)))
    assert set(deleted) == set(FILTER_ACLS[:3]) and len(auth) == 2
    assert not may(auth, Op.READ, Res.TOPIC, "payments")
    assert may(auth, Op.READ, Res.TOPIC, "orders")


def test_unknown_filters_are_refused():
    assert AclBindingFilter(ResourcePatternFilter(Res.UNKNOWN)).problem() == "Unknown patternFilter."
    assert AclBindingFilter(ResourcePatternFilter(pattern_type=Pat.UNKNOWN)).problem() == "Unknown patternFilter."
    assert AclBindingFilter(entry_filter=AccessControlEntryFilter(operation=Op.UNKNOWN)).problem() == \
        "Unknown entryFilter."
    assert ANY_ACL.problem() is None


def test_authorize_by_resource_type_for_idempotent_producers():
    assert not authorizer().authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert authorizer(acl(Res.TOPIC, "t", Op.WRITE)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert authorizer(acl(Res.TOPIC, "*", Op.ALL)).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not authorizer(acl(Res.TOPIC, "t", Op.WRITE), acl(Res.TOPIC, "t", Op.WRITE, DENY)
                          ).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not authorizer(acl(Res.TOPIC, "team.t", Op.WRITE), acl(Res.TOPIC, "team", Op.WRITE, DENY, pattern=Pat.PREFIXED)
                          ).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not authorizer(acl(Res.TOPIC, "t", Op.WRITE), acl(Res.TOPIC, "*", Op.WRITE, DENY)
                          ).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert authorizer(acl(Res.TOPIC, "a", Op.WRITE), acl(Res.TOPIC, "b", Op.WRITE), acl(Res.TOPIC, "a", Op.WRITE, DENY)
                      ).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert authorizer(super_users=frozenset({"User:alice"})).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)


def test_authorized_operations_bitfield():
    auth = authorizer(acl(Res.GROUP, "g", Op.READ))
    bits = auth.authorized_operations(ALICE, HOST, Res.GROUP, "g", SUPPORTED_OPERATIONS[Res.GROUP])
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_ten_thousand_acls_keep_checks_fast():
    acls = [acl(Res.TOPIC, f"topic-{i}", Op.READ, principal=f"User:u{i % 100}") for i in range(5000)]
    acls += [acl(Res.TOPIC, f"team-{i}.", Op.WRITE, pattern=Pat.PREFIXED, principal=f"User:u{i % 100}")
             for i in range(4000)]
    acls += [acl(Res.GROUP, f"group-{i}", Op.READ, principal=f"User:u{i % 100}") for i in range(1000)]
    auth = authorizer(*acls)
    assert len(auth) == 10_000
    u7 = KafkaPrincipal.user("u7")
    assert may(auth, Op.READ, Res.TOPIC, "topic-107", principal=u7)
    assert may(auth, Op.WRITE, Res.TOPIC, "team-7.orders", principal=u7)
    assert not may(auth, Op.WRITE, Res.TOPIC, "team-8.orders", principal=u7)
    checks = 2000
    start = time.perf_counter()
    for i in range(checks):
        may(auth, Op.READ, Res.TOPIC, f"topic-{i}", principal=u7)
        may(auth, Op.WRITE, Res.TOPIC, f"team-{i}.orders", principal=u7)
    per_check_us = (time.perf_counter() - start) / (2 * checks) * 1e6
    assert per_check_us < 200, f"{per_check_us:.1f} µs per check: the lookup is scanning, not indexed"


# --- the table of what each API needs -----------------------------------------------------------------

def needs(api_key):
    return {(c.operation, c.resource_type) for c in checks_for(api_key)}


def test_every_api_the_gateway_serves_has_a_row():
    assert set(ROUTES) <= set(API_ACLS), sorted(set(ROUTES) - set(API_ACLS))
    assert {17, 29, 30, 31, 36, 50, 51} <= set(API_ACLS)
    assert PRE_AUTHENTICATION_API_KEYS == {17, 18, 36}
    assert checks_for(17) == checks_for(18) == checks_for(36) == ()
    with pytest.raises(KeyError):
        checks_for(9999)


def test_share_group_apis_as_kip932_and_issue_18_list_them():
    assert needs(76) == {(Op.READ, Res.GROUP), (Op.DESCRIBE, Res.TOPIC)}, "ShareGroupHeartbeat"
    assert needs(78) == needs(79) == {(Op.READ, Res.GROUP), (Op.READ, Res.TOPIC)}, "ShareFetch, ShareAcknowledge"
    assert (Op.DESCRIBE, Res.GROUP) in needs(77) and (Op.READ, Res.GROUP) not in needs(77), "ShareGroupDescribe"
    assert (Op.DESCRIBE, Res.GROUP) in needs(90), "DescribeShareGroupOffsets"
    assert needs(91) == {(Op.READ, Res.GROUP), (Op.READ, Res.TOPIC)}, "AlterShareGroupOffsets"
    assert needs(92) == {(Op.DELETE, Res.GROUP), (Op.READ, Res.TOPIC)}, "DeleteShareGroupOffsets"
    for key in (83, 84, 85, 86, 87):
        assert needs(key) == {(Op.CLUSTER_ACTION, Res.CLUSTER)}, API_ACLS[key].name


def test_classic_apis_as_kafka_checks_them():
    assert needs(0) == {(Op.WRITE, Res.TOPIC), (Op.WRITE, Res.TRANSACTIONAL_ID)}
    assert needs(1) == {(Op.READ, Res.TOPIC), (Op.CLUSTER_ACTION, Res.CLUSTER)}
    assert needs(8) == {(Op.READ, Res.GROUP), (Op.READ, Res.TOPIC)}
    assert needs(9) == {(Op.DESCRIBE, Res.GROUP), (Op.DESCRIBE, Res.TOPIC)}
    assert all(needs(k) == {(Op.READ, Res.GROUP)} for k in (11, 12, 13, 14))
    assert needs(20) == {(Op.DESCRIBE, Res.TOPIC), (Op.DELETE, Res.TOPIC)}
    assert needs(61) == {(Op.READ, Res.TOPIC)}, "DescribeProducers: READ, not DESCRIBE"
    assert needs(42) == {(Op.DELETE, Res.GROUP)} and needs(47) == {(Op.DELETE, Res.GROUP), (Op.READ, Res.TOPIC)}
    assert needs(30) == needs(31) == {(Op.ALTER, Res.CLUSTER)} and needs(29) == {(Op.DESCRIBE, Res.CLUSTER)}
    assert needs(32) == {(Op.DESCRIBE_CONFIGS, r) for r in (Res.TOPIC, Res.CLUSTER, Res.GROUP)}
    assert needs(44) == {(Op.ALTER_CONFIGS, r) for r in (Res.TOPIC, Res.CLUSTER, Res.GROUP)}
    [create] = [c for c in checks_for(19) if c.operation is Op.CREATE]
    assert create.resource_type is Res.CLUSTER and create.alternatives == (Check(Op.CREATE, Res.TOPIC, "topic"),)
    [idempotent] = [c for c in checks_for(22) if c.resource_type is Res.CLUSTER]
    assert idempotent.operation is Op.IDEMPOTENT_WRITE and idempotent.alternatives[0].operation is Op.WRITE


def test_error_codes_per_resource_type():
    assert authorization_error(Res.TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert authorization_error(Res.GROUP) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert authorization_error(Res.CLUSTER) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert authorization_error(Res.TRANSACTIONAL_ID) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    for row in API_ACLS.values():
        for check in row.checks:
            for c in (check,) + check.alternatives:
                authorization_error(c.resource_type)


def test_a_share_consumer_allowed_one_group_but_not_another():
    auth = authorizer(acl(Res.GROUP, "queue-a", Op.READ), acl(Res.TOPIC, "jobs", Op.READ))

    def allowed(api_key, group, topic):
        return all(may(auth, c.operation, c.resource_type, group if c.name_from == "group" else topic)
                   for c in checks_for(api_key))

    assert allowed(78, "queue-a", "jobs") and allowed(79, "queue-a", "jobs") and allowed(76, "queue-a", "jobs")
    assert not allowed(78, "queue-b", "jobs")
    assert allowed(77, "queue-a", "jobs"), "READ on the group implies DESCRIBE"
    assert not allowed(92, "queue-a", "jobs"), "deleting share offsets needs DELETE on the group"


def test_removing_prefixed_acls_leaves_the_index_exact():
    a = acl(Res.TOPIC, "ab", Op.READ, pattern=Pat.PREFIXED)
    b = acl(Res.TOPIC, "cd", Op.READ, pattern=Pat.PREFIXED)
    a_bob = acl(Res.TOPIC, "ab", Op.READ, pattern=Pat.PREFIXED, principal="User:bob")
    auth = authorizer(a, b, a_bob)
    assert auth.remove(a) and may(auth, Op.READ, Res.TOPIC, "cdx") and may(auth, Op.READ, Res.TOPIC, "abx", principal=BOB)
    assert auth.remove(b) and auth.remove(a_bob)
    assert not auth._prefix_lengths[Res.TOPIC] and not auth._prefixed
    assert not may(auth, Op.READ, Res.TOPIC, "cdx")


def test_many_principals_on_one_resource_each_see_only_their_own_and_the_wildcard_users():
    many = [acl(Res.TOPIC, "orders", Op.READ, principal=f"User:u{i}") for i in range(5000)]
    authorizer = StandardAuthorizer(AuthorizerConfig(allow_everyone_if_no_acl_found=True), many + [
        acl(Res.TOPIC, "orders", Op.ALL, DENY, principal="User:*", host="10.0.0.9")])
    assert authorizer.authorize(KafkaPrincipal.user("u4999"), "h", Op.READ, Res.TOPIC, "orders")
    assert not authorizer.authorize(KafkaPrincipal.user("u4999"), "10.0.0.9", Op.READ, Res.TOPIC, "orders")
    assert not authorizer.authorize(BOB, "h", Op.READ, Res.TOPIC, "orders"), \
        "others' ACLs on the topic: allow.everyone.if.no.acl.found does not apply"
    started = time.perf_counter()
    for _ in range(1000):
        authorizer.authorize(KafkaPrincipal.user("u1"), "h", Op.READ, Res.TOPIC, "orders")
    assert time.perf_counter() - started < 0.5, "a check reads its principal's bindings, not all 5,000"
    for binding in many:
        assert authorizer.remove(binding)
    assert len(authorizer) == 1 and authorizer.authorize(BOB, "h", Op.READ, Res.TOPIC, "orders") is False
    assert authorizer.remove(authorizer.acls()[0]) and len(authorizer) == 0
    assert authorizer.authorize(BOB, "h", Op.READ, Res.TOPIC, "orders"), "no ACLs left: everyone allowed"
