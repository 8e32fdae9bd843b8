"""A pure ACL authorizer with the semantics of Kafka's StandardAuthorizer.

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED; the LITERAL name '*'
matches every name) and an entry (principal "User:alice" or "User:*", host or '*', operation,
ALLOW or DENY). To authorize (principal, host, operation, resource):

- a principal in `super.users` (semicolon separated) may do anything;
- else the ACLs on the resource are its literal name, the prefixes of its name and '*'; one
  DENY that matches the principal, host and operation (exactly, or ALL) refuses;
- else one matching ALLOW grants; an ALLOW also grants what its operation implies: ALL implies
  everything, READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS
  (implication never widens a DENY);
- else, when the resource has no ACLs at all (for anyone), `allow.everyone.if.no.acl.found`
  decides (false by default); otherwise refused.

ACLs are indexed by (resource type, literal name) and (resource type, prefix), so a check costs a
few dictionary lookups per prefix length in use, whatever the number of ACLs; and by (resource
type, principal, host, operation, permission, pattern type) for authorize_by_resource_type, which
then reads the principal's own names only.
Filters (DescribeAcls/DeleteAcls) follow Kafka's AclBindingFilter, ANY and MATCH pattern types
included. Enum values are Kafka's wire codes.
"""
from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

from actors.security.principal import WILDCARD_USER, KafkaPrincipal

SUPER_USERS = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND = "allow.everyone.if.no.acl.found"
AUTHORIZER_CLASS_NAME = "authorizer.class.name"
KAFKA_STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: every pattern that would apply to the named resource
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# what an ALLOW for an operation also grants (ALL grants everything)
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


@dataclass(frozen=True)
class AccessControlEntry:
    principal: str  # "User:alice", "User:*"
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def binding_row(binding: AclBinding) -> list:
    """A binding as a plain row for the metadata log (msgpack): Kafka's codes and the names."""
    p, e = binding.pattern, binding.entry
    return [int(p.resource_type), p.name, int(p.pattern_type), e.principal, e.host, int(e.operation),
            int(e.permission_type)]


def binding_from_row(row) -> AclBinding:
    resource_type, name, pattern_type, principal, host, operation, permission_type = row
    return AclBinding(ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
                      AccessControlEntry(principal, host, AclOperation(operation), AclPermissionType(permission_type)))


def acl_binding_problem(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses a binding (Kafka's checks, INVALID_REQUEST), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern.pattern_type.name}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {entry.operation.name}"
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {entry.permission_type.name}"
    if not pattern.name:
        return "Resource name should not be empty"
    try:
        KafkaPrincipal.parse(entry.principal)
    except ValueError as e:
        return f"Invalid principal: {e}"
    if not entry.host:
        return "Host should not be empty (use '*' for every host)"
    return None


# --- filters (DescribeAcls, DeleteAcls) -----------------------------------------------------------

@dataclass(frozen=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None  # None matches any name
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:  # MATCH: patterns that apply to the named resource
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)


@dataclass(frozen=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type is AclPermissionType.ANY or self.permission_type == entry.permission_type))


@dataclass(frozen=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter = ResourcePatternFilter()
    entry_filter: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)

    def problem(self) -> str | None:
        """Why DescribeAcls/DeleteAcls refuses this filter (an UNKNOWN field), or None."""
        if self.pattern_filter.resource_type is ResourceType.UNKNOWN or \
                self.pattern_filter.pattern_type is PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.entry_filter.operation is AclOperation.UNKNOWN or \
                self.entry_filter.permission_type is AclPermissionType.UNKNOWN:
            return "Unknown entryFilter."
        return None


ANY_ACL = AclBindingFilter()


# --- configuration --------------------------------------------------------------------------------

@dataclass(frozen=True)
class AuthorizerConfig:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def from_configs(cls, configs: Mapping[str, Any]) -> AuthorizerConfig:
        """`super.users` ("User:admin;User:broker", each a principal) and
        `allow.everyone.if.no.acl.found` (true only when it says true), as Kafka reads them."""
        supers = set()
        for value in str(configs.get(SUPER_USERS) or "").split(";"):
            value = value.strip()
            if value:
                try:
                    KafkaPrincipal.parse(value)
                except ValueError as e:
                    raise ValueError(f"{SUPER_USERS}: {e}; separate principals with ';'") from None
                supers.add(value)
        allow = configs.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND, False)
        allow = allow if isinstance(allow, bool) else str(allow).strip().lower() == "true"
        return cls(frozenset(supers), allow)


# --- the authorizer -------------------------------------------------------------------------------

def _grants(entry: AccessControlEntry, operation: AclOperation) -> bool:
    if entry.operation is AclOperation.ALL or entry.operation == operation:
        return True
    return entry.permission_type is AclPermissionType.ALLOW and \
        entry.operation in IMPLIED_BY.get(operation, frozenset())


def _type_key(binding: AclBinding) -> tuple:
    entry = binding.entry
    return entry.principal, entry.host, entry.operation, entry.permission_type, binding.pattern.pattern_type


class StandardAuthorizer:
    """ACLs in memory, indexed for checks; `add`/`remove` replay the controller's ACL changes."""

    def __init__(self, config: AuthorizerConfig = AuthorizerConfig(), acls: Iterable[AclBinding] = ()):
        self.config = config
        # (resource type, name) -> principal -> its bindings there: a check reads the bindings of
        # its principal and of User:* only (10,000 principals on one topic cost what 1 does)
        self._literal: dict[tuple[ResourceType, str], dict[str, set[AclBinding]]] = {}
        self._prefixed: dict[tuple[ResourceType, str], dict[str, set[AclBinding]]] = {}
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}  # prefixed names per length
        # for authorize_by_resource_type: resource type -> (principal, host, operation, permission,
        # pattern type) -> the resource names of such bindings (one binding per name)
        self._by_type: dict[ResourceType, dict[tuple, set[str]]] = {}
        self._count = 0
        for binding in acls:
            self.add(binding)

    def __len__(self) -> int:
        return self._count

    def add(self, binding: AclBinding) -> bool:
        problem = acl_binding_problem(binding)
        if problem:
            raise ValueError(problem)
        key = (binding.pattern.resource_type, binding.pattern.name)
        index = self._literal if binding.pattern.pattern_type is PatternType.LITERAL else self._prefixed
        new_key = key not in index
        entries = index.setdefault(key, {}).setdefault(binding.entry.principal, set())
        if binding in entries:
            return False
        entries.add(binding)
        self._count += 1
        self._by_type.setdefault(key[0], {}).setdefault(_type_key(binding), set()).add(key[1])
        if index is self._prefixed and new_key:
            self._prefix_lengths.setdefault(key[0], Counter())[len(key[1])] += 1
        return True

    def remove(self, binding: AclBinding) -> bool:
        key = (binding.pattern.resource_type, binding.pattern.name)
        index = self._literal if binding.pattern.pattern_type is PatternType.LITERAL else self._prefixed
        bucket = index.get(key)
        entries = bucket.get(binding.entry.principal) if bucket else None
        if not entries or binding not in entries:
            return False
        entries.discard(binding)
        self._count -= 1
        by_type = self._by_type[key[0]]
        type_key = _type_key(binding)
        by_type[type_key].discard(key[1])
        if not by_type[type_key]:
            del by_type[type_key]
            if not by_type:
                del self._by_type[key[0]]
        if not entries:
            del bucket[binding.entry.principal]
        if not bucket:
            del index[key]
            if index is self._prefixed:
                lengths = self._prefix_lengths[key[0]]
                lengths[len(key[1])] -= 1
                if not lengths[len(key[1])]:
                    del lengths[len(key[1])]
        return True

    def acls(self, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        return [b for b in self._all() if acl_filter.matches(b)]

    def delete(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove and return every binding the filter matches (DeleteAcls)."""
        matched = self.acls(acl_filter)
        for binding in matched:
            self.remove(binding)
        return matched

    def _all(self) -> Iterator[AclBinding]:
        for index in (self._literal, self._prefixed):
            for bucket in index.values():
                for entries in bucket.values():
                    yield from entries

    def _applicable(self, resource_type: ResourceType, name: str) -> Iterator[dict[str, set[AclBinding]]]:
        """The ACLs that apply to one resource, per principal: its literal name, its prefixes, the
        wildcard (each a non-empty mapping)."""
        bucket = self._literal.get((resource_type, name))
        if bucket:
            yield bucket
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                bucket = self._prefixed.get((resource_type, name[:length]))
                if bucket:
                    yield bucket
        if name != WILDCARD_RESOURCE:
            bucket = self._literal.get((resource_type, WILDCARD_RESOURCE))
            if bucket:
                yield bucket

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self.config.super_users

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if self.is_super_user(principal):
            return True
        principals = (str(principal), str(WILDCARD_USER))
        has_acls = allowed = False
        for bucket in self._applicable(resource_type, name):
            has_acls = True
            for who in principals:
                for binding in bucket.get(who, ()):
                    entry = binding.entry
                    if entry.host not in (host, WILDCARD_HOST) or not _grants(entry, operation):
                        continue
                    if entry.permission_type is AclPermissionType.DENY:
                        return False
                    allowed = True
        return allowed or (not has_acls and self.config.allow_everyone_if_no_acl_found)

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do `operation` on some resource of this type (Kafka's
        authorizeByResourceType, e.g. InitProducerId's WRITE on any topic)? As Kafka's Authorizer
        default, which StandardAuthorizer keeps: super users and allow.everyone.if.no.acl.found
        (where no ACL applies to a name nothing has) first; then, over the principal's and User:*'s
        bindings of this type from its host or '*' for the operation or ALL: a DENY on '*' refuses,
        an ALLOW on '*' grants, else some allowed name (LITERAL or PREFIXED) that no DENY on the same
        literal name nor on a prefix of it covers grants. No implication here.

        Read from an index by (type, principal, host, operation, permission, pattern type), as
        Kafka's AclAuthorizer kept its resource cache: 8 lookups per permission and pattern type,
        then the allowed names of this principal only, not every ACL of the cluster."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        index = self._by_type.get(resource_type)
        if not index:
            return False

        def names(permission: AclPermissionType, pattern_type: PatternType) -> list[set[str]]:
            found = []
            for who in (str(principal), str(WILDCARD_USER)):
                for where in {host, WILDCARD_HOST}:
                    for op in {operation, AclOperation.ALL}:
                        bucket = index.get((who, where, op, permission, pattern_type))
                        if bucket:
                            found.append(bucket)
            return found

        deny_literal = names(AclPermissionType.DENY, PatternType.LITERAL)
        if any(WILDCARD_RESOURCE in bucket for bucket in deny_literal):
            return False
        allow_literal = names(AclPermissionType.ALLOW, PatternType.LITERAL)
        if any(WILDCARD_RESOURCE in bucket for bucket in allow_literal):
            return True
        allow_prefixed = names(AclPermissionType.ALLOW, PatternType.PREFIXED)
        if not allow_literal and not allow_prefixed:
            return False
        deny_prefixed = names(AclPermissionType.DENY, PatternType.PREFIXED)
        deny_prefix_lengths = sorted({len(name) for bucket in deny_prefixed for name in bucket})

        def covered_by_a_denied_prefix(name: str) -> bool:
            for length in deny_prefix_lengths:
                if length > len(name):
                    return False
                if any(name[:length] in bucket for bucket in deny_prefixed):
                    return True
            return False

        for bucket in allow_literal:
            for name in bucket:
                if not any(name in denied for denied in deny_literal) and not covered_by_a_denied_prefix(name):
                    return True
        return any(not covered_by_a_denied_prefix(name) for bucket in allow_prefixed for name in bucket)

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType, name: str,
                              operations: Iterable[AclOperation]) -> int:
        """Kafka's authorized-operations bitfield (bit N for operation code N) over `operations`."""
        bits = 0
        for operation in operations:
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << int(operation)
        return bits


# the operations Kafka reports in authorized-operations fields, per resource type
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
