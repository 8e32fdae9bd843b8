"""authorize_by_resource_type (Kafka's authorizeByResourceType: may the principal do an operation on
some resource of a type?) read from its index: the scenarios of Kafka's authorizer tests for it
(adds and removes, unrelated denies, deny dominance by literal, prefix and wildcard, ALL operations,
every host, every principal, super users, allow.everyone.if.no.acl.found), the same answers as a
plain scan of every ACL (Kafka's Authorizer default) over random ACL sets with adds and removes,
and a cost that does not grow with other principals' ACLs."""
import time

from hypothesis import given, settings, strategies as st

from actors.security.authorizer import (AccessControlEntry, AclBinding, AclOperation, AclPermissionType,
                                        AuthorizerConfig, PatternType, ResourcePattern, ResourceType,
                                        StandardAuthorizer)
from actors.security.principal import KafkaPrincipal

Op, Res, Pat = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
U1, U2 = KafkaPrincipal.user("user1"), KafkaPrincipal.user("user2")
H1, H2 = "192.168.1.1", "192.168.1.2"


def binding(resource_type, name, principal, host, operation, permission, pattern=Pat.LITERAL):
    return AclBinding(ResourcePattern(resource_type, name, pattern),
                      AccessControlEntry(str(principal), host, operation, permission))


def any_of_type(auth, principal, host, operation, resource_type) -> bool:
    return auth.authorize_by_resource_type(principal, host, operation, resource_type)


def test_adding_and_removing_the_same_allow_and_deny_many_times():
    auth = StandardAuthorizer()
    allow = binding(Res.TOPIC, "sb1", U1, H1, Op.READ, ALLOW)
    deny = binding(Res.TOPIC, "sb1", U1, H1, Op.READ, DENY)
    for _ in range(5):
        assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
        auth.add(allow)
        assert any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
        for _ in range(5):
            auth.add(deny)
            assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
            auth.remove(deny)
            assert any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
        auth.remove(allow)
        assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    assert len(auth) == 0 and not auth._by_type, "the index is empty again"


def test_denies_of_other_principals_hosts_and_types_do_not_refuse():
    auth = StandardAuthorizer(acls=[
        binding(Res.TOPIC, "sb1", U1, H1, Op.READ, DENY), binding(Res.TOPIC, "sb1", U2, H1, Op.READ, DENY),
        binding(Res.TOPIC, "sb1", U1, H2, Op.WRITE, DENY), binding(Res.TOPIC, "sb1", U2, H2, Op.READ, DENY),
        binding(Res.TOPIC, "sb1", U1, H2, Op.READ, ALLOW), binding(Res.TOPIC, "sb2", U1, H2, Op.READ, DENY),
        binding(Res.GROUP, "s", U1, H2, Op.READ, DENY, Pat.PREFIXED)])
    assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    for resource_type in (Res.GROUP, Res.TRANSACTIONAL_ID, Res.CLUSTER):
        assert not any_of_type(auth, U1, H1, Op.READ, resource_type)
    assert any_of_type(auth, U1, H2, Op.READ, Res.TOPIC), "a deny on another topic leaves sb1 allowed"


def test_a_deny_on_the_same_literal_name_wins():
    auth = StandardAuthorizer(acls=[binding(Res.TOPIC, "sb1", U1, H1, Op.WRITE, ALLOW)])
    assert any_of_type(auth, U1, H1, Op.WRITE, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb1", U1, H1, Op.WRITE, DENY))
    assert not any_of_type(auth, U1, H1, Op.WRITE, Res.TOPIC)


def test_a_denied_prefix_covers_longer_allowed_prefixes_but_not_shorter_ones():
    auth = StandardAuthorizer()

    def add(name, permission):
        auth.add(binding(Res.GROUP, name, U1, H1, Op.READ, permission, Pat.PREFIXED))
    add("abcde", ALLOW)
    assert any_of_type(auth, U1, H1, Op.READ, Res.GROUP)
    add("abcd", DENY)
    assert not any_of_type(auth, U1, H1, Op.READ, Res.GROUP)
    add("abc", ALLOW)  # groups abc... not under abcd remain
    assert any_of_type(auth, U1, H1, Op.READ, Res.GROUP)
    add("a", DENY)
    assert not any_of_type(auth, U1, H1, Op.READ, Res.GROUP)
    add("ab", ALLOW)
    assert not any_of_type(auth, U1, H1, Op.READ, Res.GROUP)
    # a literal deny of the same name does not cover a prefixed allow (it names one group only)
    other = StandardAuthorizer(acls=[binding(Res.GROUP, "x", U1, H1, Op.READ, ALLOW, Pat.PREFIXED),
                                     binding(Res.GROUP, "x", U1, H1, Op.READ, DENY)])
    assert any_of_type(other, U1, H1, Op.READ, Res.GROUP)


def test_a_wildcard_deny_wins_over_everything_a_wildcard_allow_included():
    auth = StandardAuthorizer(acls=[binding(Res.GROUP, "hello", U1, H1, Op.WRITE, ALLOW, Pat.PREFIXED)])
    assert any_of_type(auth, U1, H1, Op.WRITE, Res.GROUP)
    auth.add(binding(Res.GROUP, "*", U1, H1, Op.WRITE, DENY))
    assert not any_of_type(auth, U1, H1, Op.WRITE, Res.GROUP)
    auth.add(binding(Res.GROUP, "*", U1, H1, Op.WRITE, ALLOW))
    assert not any_of_type(auth, U1, H1, Op.WRITE, Res.GROUP)
    auth.add(binding(Res.GROUP, "aloha", U1, H1, Op.WRITE, ALLOW))
    assert not any_of_type(auth, U1, H1, Op.WRITE, Res.GROUP)
    # and a wildcard allow alone grants, whatever denies on names there are
    alone = StandardAuthorizer(acls=[binding(Res.GROUP, "*", U1, H1, Op.WRITE, ALLOW),
                                     binding(Res.GROUP, "g", U1, H1, Op.WRITE, DENY, Pat.PREFIXED)])
    assert any_of_type(alone, U1, H1, Op.WRITE, Res.GROUP)


def test_all_operations_in_an_allow_and_in_a_deny():
    auth = StandardAuthorizer()
    assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb1", U1, H1, Op.WRITE, DENY))
    auth.add(binding(Res.TOPIC, "sb1", U1, H1, Op.ALL, ALLOW))
    assert any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb1", U1, H1, Op.ALL, DENY))
    assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    # no implication: DESCRIBE is not "some READ"
    assert not any_of_type(StandardAuthorizer(acls=[binding(Res.TOPIC, "t", U1, H1, Op.READ, ALLOW)]),
                           U1, H1, Op.DESCRIBE, Res.TOPIC)


def test_every_host_in_an_allow_and_in_a_deny():
    auth = StandardAuthorizer(acls=[binding(Res.TOPIC, "sb1", U1, H1, Op.READ, ALLOW)])
    assert any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb1", U1, "*", Op.READ, DENY))
    assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb2", U1, H1, Op.READ, DENY))
    assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    assert not any_of_type(auth, U1, H2, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb2", U1, "*", Op.READ, ALLOW))
    assert any_of_type(auth, U1, H2, Op.READ, Res.TOPIC), "sb2's deny is for host 1 only"
    auth.add(binding(Res.TOPIC, "sb2", U1, "*", Op.READ, DENY))
    assert not any_of_type(auth, U1, H2, Op.READ, Res.TOPIC)


def test_every_principal_in_an_allow_and_in_a_deny():
    auth = StandardAuthorizer(acls=[binding(Res.TOPIC, "sb1", U1, H1, Op.READ, ALLOW)])
    assert any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb1", "User:*", H1, Op.READ, DENY))
    assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb2", U1, H1, Op.READ, DENY))
    assert not any_of_type(auth, U1, H1, Op.READ, Res.TOPIC)
    assert not any_of_type(auth, U2, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb2", "User:*", H1, Op.READ, ALLOW))
    assert any_of_type(auth, U2, H1, Op.READ, Res.TOPIC)
    auth.add(binding(Res.TOPIC, "sb2", "User:*", H1, Op.READ, DENY))
    assert not any_of_type(auth, U2, H1, Op.READ, Res.TOPIC)


def test_super_users_and_allow_everyone_if_no_acl_found():
    deny_all = [binding(t, "*", "User:*", "*", Op.ALL, DENY) for t in (Res.TOPIC, Res.CLUSTER, Res.GROUP,
                                                                       Res.TRANSACTIONAL_ID)]
    auth = StandardAuthorizer(AuthorizerConfig(super_users=frozenset({"User:superuser1"})), deny_all)
    for resource_type in (Res.TOPIC, Res.CLUSTER, Res.GROUP, Res.TRANSACTIONAL_ID):
        assert any_of_type(auth, KafkaPrincipal.user("superuser1"), "192.0.4.4", Op.READ, resource_type)
        assert not any_of_type(auth, U1, "192.0.4.4", Op.READ, resource_type)
    everyone = StandardAuthorizer(AuthorizerConfig(allow_everyone_if_no_acl_found=True))
    assert any_of_type(everyone, U1, H1, Op.READ, Res.TOPIC) and any_of_type(everyone, U1, H1, Op.WRITE, Res.TOPIC)


# --- the index answers as a scan of every ACL (Kafka's Authorizer default) -----------------------------

def scanned(auth: StandardAuthorizer, principal, host, operation, resource_type) -> bool:
    """Kafka's Authorizer.authorizeByResourceType default, over auth.acls(): the model."""
    if auth.authorize(principal, host, operation, resource_type, "hardcode"):
        return True
    deny = {Pat.LITERAL: set(), Pat.PREFIXED: set()}
    allow = {Pat.LITERAL: set(), Pat.PREFIXED: set()}
    wildcard_allow = False
    for b in auth.acls():
        p, e = b.pattern, b.entry
        if p.resource_type != resource_type or e.host not in (host, "*") \
                or e.principal not in (str(principal), "User:*") or e.operation not in (operation, Op.ALL):
            continue
        if e.permission_type is DENY:
            if p.pattern_type is Pat.LITERAL and p.name == "*":
                return False
            deny[p.pattern_type].add(p.name)
        elif p.pattern_type is Pat.LITERAL and p.name == "*":
            wildcard_allow = True
        else:
            allow[p.pattern_type].add(p.name)
    if wildcard_allow:
        return True
    for pattern_type, names in allow.items():
        for name in names:
            if pattern_type is Pat.LITERAL and name in deny[Pat.LITERAL]:
                continue
            if not any(name[:n] in deny[Pat.PREFIXED] for n in range(1, len(name) + 1)):
                return True
    return False


PRINCIPALS = ["User:user1", "User:user2", "User:*"]
bindings = st.builds(
    binding, st.sampled_from([Res.TOPIC, Res.GROUP]), st.sampled_from(["*", "a", "ab", "abc", "b", "ba"]),
    st.sampled_from(PRINCIPALS), st.sampled_from([H1, H2, "*"]), st.sampled_from([Op.READ, Op.WRITE, Op.ALL]),
    st.sampled_from([ALLOW, DENY]), st.sampled_from([Pat.LITERAL, Pat.PREFIXED]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), bindings), max_size=25), st.booleans())
def test_the_index_answers_as_a_scan_of_every_acl(changes, allow_everyone):
    auth = StandardAuthorizer(AuthorizerConfig(allow_everyone_if_no_acl_found=allow_everyone))
    for add, b in changes:
        auth.add(b) if add else auth.remove(b)
    for principal in (U1, U2):
        for host in (H1, H2):
            for operation in (Op.READ, Op.WRITE):
                for resource_type in (Res.TOPIC, Res.GROUP, Res.CLUSTER):
                    assert any_of_type(auth, principal, host, operation, resource_type) == \
                        scanned(auth, principal, host, operation, resource_type), \
                        (str(principal), host, operation.name, resource_type.name, auth.acls())


def test_the_cost_does_not_grow_with_other_principals_acls():
    """10,000 ACLs of 10,000 other principals on one topic, and 10,000 of one principal each on its
    own topic: a check reads the asking principal's few bindings (a scan took 12-18 ms here)."""
    acls = [binding(Res.TOPIC, "orders", f"User:user-{u}", "*", Op.READ, ALLOW) for u in range(10_000)]
    acls += [binding(Res.TOPIC, f"t-{i}", "User:busy", "*", Op.WRITE, ALLOW) for i in range(10_000)]
    auth = StandardAuthorizer(acls=acls)
    assert any_of_type(auth, KafkaPrincipal.user("user-9999"), H1, Op.READ, Res.TOPIC)
    assert not any_of_type(auth, KafkaPrincipal.user("nobody"), H1, Op.READ, Res.TOPIC)
    checks = 2000
    started = time.perf_counter()
    for _ in range(checks):
        any_of_type(auth, KafkaPrincipal.user("user-9999"), H1, Op.READ, Res.TOPIC)
        any_of_type(auth, KafkaPrincipal.user("nobody"), H1, Op.READ, Res.TOPIC)
    per_check_us = (time.perf_counter() - started) / (2 * checks) * 1e6
    assert per_check_us < 500, f"{per_check_us:.0f} µs per check: it scans other principals' ACLs"
