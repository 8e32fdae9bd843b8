"""`kray acls`, after kafka-acls.sh: --add, --remove and --list ACL bindings over the wire
(CreateAcls, DeleteAcls, DescribeAcls).

  kray acls --bootstrap-server H:P --add --allow-principal User:alice --operation Read --operation Describe \
      --topic orders --group workers
  kray acls --bootstrap-server H:P --add --deny-principal User:bob --deny-host 10.0.0.7 --operation Write --topic orders
  kray acls --bootstrap-server H:P --add --allow-principal User:alice --operation Write --topic app- \
      --resource-pattern-type prefixed
  kray acls --bootstrap-server H:P --list [--topic orders] [--principal User:alice]
  kray acls --bootstrap-server H:P --remove --allow-principal User:alice --operation Read --topic orders [--force]

As in kafka-acls.sh: --operation defaults to All, hosts to '*', --add's pattern type to LITERAL and
--list's / --remove's to ANY; --remove without principals removes every ACL of the named
resources, and asks first unless --force. Resources: --topic, --group, --transactional-id
(repeatable) and --cluster. The broker needs an authorizer (authorizer.class.name), and the tool's
principal ALTER on the cluster to add or remove, DESCRIBE to list (see --command-config).
"""
from __future__ import annotations

import sys

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

from actors.security.authorizer import (CLUSTER_NAME, AclOperation, AclPermissionType, PatternType,
                                        ResourceType)
from actors.security.principal import KafkaPrincipal

WILDCARD_HOST = "*"


def add_parser(sub) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (like kafka-acls.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME", help="(repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME", help="(repeatable)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="hosts of the allow principals (default *; repeatable)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                   help="hosts of the deny principals (default *; repeatable)")
    p.add_argument("--principal", action="append", default=[], metavar="User:NAME",
                   help="--list: only ACLs of this principal (repeatable)")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, TwoPhaseCommit, All "
                        "(default All; repeatable)")
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable; '*' is every topic)")
    p.add_argument("--group", action="append", default=[], help="a consumer or share group (repeatable)")
    p.add_argument("--transactional-id", action="append", default=[], help="a transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default=None, type=str.upper,
                   choices=("LITERAL", "PREFIXED", "ANY", "MATCH"),
                   help="LITERAL or PREFIXED for --add (default LITERAL); also ANY or MATCH for --list and "
                        "--remove (default ANY)")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    p.set_defaults(func=run)


class UsageError(ValueError):
    pass


def _fail(message: str) -> int:
    print(f"kray acls: {message}", file=sys.stderr)
    return 1


def parse_operation(text: str) -> AclOperation:
    """Kafka's operation names in any case, with or without separators (DescribeConfigs, describe_configs)."""
    wanted = text.replace("_", "").replace("-", "").upper()
    for operation in AclOperation:
        if operation.name.replace("_", "") == wanted and operation not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return operation
    raise UsageError(f"unknown --operation {text!r}")


def _principal(text: str) -> str:
    try:
        KafkaPrincipal.parse(text)
    except ValueError:
        raise UsageError(f"principal {text!r} is not Type:name (e.g. User:alice)") from None
    return text


def resources(args) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if any(not name for _, name in out):
        raise UsageError("a resource name is empty")
    return out


def entries(args) -> list[tuple[str, str, AclOperation, AclPermissionType]]:
    """(principal, host, operation, permission) for every principal x host x operation asked."""
    operations = [parse_operation(o) for o in args.operation] or [AclOperation.ALL]
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            for host in hosts or [WILDCARD_HOST]:
                out += [(_principal(principal), host, op, permission) for op in operations]
    return out


def pattern_type(args, default: str) -> PatternType:
    return PatternType[args.resource_pattern_type or default]


def describe_pattern(resource_type, name, pattern) -> str:
    return (f"ResourcePattern(resourceType={ResourceType(resource_type).name}, name={name}, "
            f"patternType={PatternType(pattern).name})")


def describe_entry(principal, host, operation, permission) -> str:
    return (f"(principal={principal}, host={host}, operation={AclOperation(operation).name}, "
            f"permissionType={AclPermissionType(permission).name})")


def run(args) -> int:
    try:
        with KafkaConnection(args.bootstrap_server, client_id="kray-acls") as conn:
            if args.add:
                return _add(conn, args)
            if args.remove:
                return _remove(conn, args)
            return _list(conn, args)
    except (AdminError, UsageError) as e:
        return _fail(str(e))


def _add(conn, args) -> int:
    wanted_resources, wanted_entries = resources(args), entries(args)
    if not wanted_resources:
        raise UsageError("--add needs a resource: --topic, --group, --transactional-id or --cluster")
    if not wanted_entries:
        raise UsageError("--add needs --allow-principal or --deny-principal")
    pattern = pattern_type(args, "LITERAL")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add takes --resource-pattern-type LITERAL or PREFIXED")
    creations = [CreateAclsRequest.AclCreation(resource_type=int(rt), resource_name=name,
                                               resource_pattern_type=int(pattern), principal=principal, host=host,
                                               operation=int(op), permission_type=int(permission))
                 for rt, name in wanted_resources for principal, host, op, permission in wanted_entries]
    results = conn.send(CreateAclsRequest(creations=creations)).results
    status = 0
    for rt, name in wanted_resources:
        print(f"Adding ACLs for resource `{describe_pattern(rt, name, pattern)}`: ")
        for entry in wanted_entries:
            print(f" \t{describe_entry(*entry)} ")
        print()
    for creation, result in zip(creations, results):
        if result.error_code:
            status = _fail(f"cannot add {describe_entry(creation.principal, creation.host, creation.operation, creation.permission_type)} "
                           f"on {creation.resource_name}: {ErrorCode(result.error_code).name}: "
                           f"{result.error_message or ''}")
    if status == 0:
        _print_current(conn, [(rt, name, pattern) for rt, name in wanted_resources])
    return status


def _remove(conn, args) -> int:
    wanted_resources = resources(args)
    if not wanted_resources:
        raise UsageError("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
    pattern = pattern_type(args, "ANY")
    wanted_entries = entries(args)
    if not wanted_entries and not args.force:
        names = ", ".join(describe_pattern(rt, name, pattern) for rt, name in wanted_resources)
        answer = input(f"Are you sure you want to delete all ACLs for resource filter(s) `{names}`? (y/n)")
        if answer.strip().lower() not in ("y", "yes"):
            return 0
    if wanted_entries and not args.force:
        answer = input(f"Are you sure you want to remove ACLs: \n{chr(10).join(' ' + describe_entry(*e) for e in wanted_entries)} "
                       f"\n from resource filter(s) `{', '.join(describe_pattern(rt, n, pattern) for rt, n in wanted_resources)}`? (y/n)")
        if answer.strip().lower() not in ("y", "yes"):
            return 0
    filters = []
    for rt, name in wanted_resources:
        for principal, host, op, permission in wanted_entries or [(None, None, AclOperation.ANY, AclPermissionType.ANY)]:
            filters.append(DeleteAclsRequest.DeleteAclsFilter(
                resource_type_filter=int(rt), resource_name_filter=name, pattern_type_filter=int(pattern),
                principal_filter=principal, host_filter=host, operation=int(op), permission_type=int(permission)))
    results = conn.send(DeleteAclsRequest(filters=filters)).filter_results
    status = 0
    for result in results:
        if result.error_code:
            status = _fail(f"cannot remove ACLs: {ErrorCode(result.error_code).name}: {result.error_message or ''}")
        for m in result.matching_acls:
            print(f"Removed {describe_entry(m.principal, m.host, m.operation, m.permission_type)} from "
                  f"`{describe_pattern(m.resource_type, m.resource_name, m.pattern_type)}`")
    if status == 0:
        _print_current(conn, [(rt, name, pattern) for rt, name in wanted_resources])
    return status


def _list(conn, args) -> int:
    wanted = [(rt, name, pattern_type(args, "ANY")) for rt, name in resources(args)] or \
        [(ResourceType.ANY, None, PatternType.ANY)]
    principals = [_principal(p) for p in args.principal] or [None]
    return _print_current(conn, wanted, principals)


def _print_current(conn, wanted, principals=(None,)) -> int:
    shown: dict = {}
    for rt, name, pattern in wanted:
        for principal in principals:
            r = conn.send(DescribeAclsRequest(resource_type_filter=int(rt), resource_name_filter=name,
                                              pattern_type_filter=int(pattern), principal_filter=principal,
                                              host_filter=None, operation=int(AclOperation.ANY),
                                              permission_type=int(AclPermissionType.ANY)))
            if r.error_code:
                return _fail(f"cannot list ACLs: {ErrorCode(r.error_code).name}: {r.error_message or ''}")
            for resource in r.resources:
                key = (resource.resource_type, resource.resource_name, resource.pattern_type)
                acls = shown.setdefault(key, {})
                for a in resource.acls:
                    acls[(a.principal, a.host, a.operation, a.permission_type)] = None
    for key, acls in shown.items():
        print(f"Current ACLs for resource `{describe_pattern(*key)}`: ")
        for entry in acls:
            print(f" \t{describe_entry(*entry)} ")
        print()
    return 0
