"""CreateAcls, DescribeAcls, DeleteAcls: ACL bindings live in the controller's metadata log and
reach every gateway with the metadata image (actors/gateway/context.py rebuilds its authorizer).

As in Kafka: CreateAcls and DeleteAcls need ALTER on the cluster, DescribeAcls DESCRIBE
(CLUSTER_AUTHORIZATION_FAILED otherwise, changing nothing); a broker without an authorizer answers
SECURITY_DISABLED; the CLUSTER resource is named `kafka-cluster`. The gateway that made a change
catches up with the controller before answering, so the next request on it sees the change; other
gateways see it with their next image (a long poll: at once, unless the controller is away).
"""
from __future__ import annotations

import enum

from protocol.errors import ErrorCode
from protocol.messages import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from actors.security.authorizer import (CLUSTER_NAME, AccessControlEntry, AccessControlEntryFilter,
                                        AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                        PatternType, ResourcePattern, ResourcePatternFilter, ResourceType)

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _enum(kind: type[enum.IntEnum], code: int):
    """A wire code as Kafka's enum; codes Kafka does not know are UNKNOWN (refused by the checks)."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def binding_of(creation) -> AclBinding:
    return AclBinding(ResourcePattern(_enum(ResourceType, creation.resource_type), creation.resource_name,
                                      _enum(PatternType, creation.resource_pattern_type)),
                      AccessControlEntry(creation.principal, creation.host, _enum(AclOperation, creation.operation),
                                         _enum(AclPermissionType, creation.permission_type)))


def filter_of(f) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter (the same fields) as an AclBindingFilter."""
    return AclBindingFilter(ResourcePatternFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                                                  _enum(PatternType, f.pattern_type_filter)),
                            AccessControlEntryFilter(f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
                                                     _enum(AclPermissionType, f.permission_type)))


def _cluster_name_problem(binding: AclBinding) -> str | None:
    pattern = binding.pattern
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    return None


async def handle_create_acls(ctx, header, request, connection=None) -> CreateAclsResponse:
    R = CreateAclsResponse

    def every(code, message):
        return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=code, error_message=message)
                                              for _ in request.creations])
    if not ctx.access(connection).allows_cluster(AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.authorizer is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    bindings = [binding_of(c) for c in request.creations]
    results: list = [None] * len(bindings)
    valid = []
    for i, binding in enumerate(bindings):
        problem = _cluster_name_problem(binding)
        if problem:
            results[i] = (ErrorCode.INVALID_REQUEST, problem)
        else:
            valid.append(i)
    if valid:
        answers = await ctx.controller.create_acls([bindings[i] for i in valid])
        for i, answer in zip(valid, answers):
            results[i] = tuple(answer)
        await ctx.refresh_metadata()
    return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=code, error_message=message)
                                          for code, message in results])


def describe_resources(bindings) -> list:
    """DescribeAcls' resources: bindings grouped by resource pattern, in a stable order."""
    R = DescribeAclsResponse
    by_pattern: dict = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    return [R.DescribeAclsResource(
        resource_type=int(p.resource_type), resource_name=p.name, pattern_type=int(p.pattern_type),
        acls=[R.AclDescription(principal=e.principal, host=e.host, operation=int(e.operation),
                               permission_type=int(e.permission_type))
              for e in sorted(entries, key=lambda e: (e.principal, e.host, int(e.operation), int(e.permission_type)))])
        for p, entries in sorted(by_pattern.items(), key=lambda kv: (int(kv[0].resource_type), kv[0].name,
                                                                       int(kv[0].pattern_type)))]


async def handle_describe_acls(ctx, header, request, connection=None) -> DescribeAclsResponse:
    R = DescribeAclsResponse
    if not ctx.access(connection).allows_cluster(AclOperation.DESCRIBE):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message="Cluster authorization failed.", resources=[])
    if ctx.authorizer is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER,
                 resources=[])
    acl_filter = filter_of(request)
    problem = acl_filter.problem()
    if problem:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=problem, resources=[])
    return R(throttle_time_ms=0, error_code=0, error_message=None,
             resources=describe_resources(ctx.authorizer.acls(acl_filter)))


async def handle_delete_acls(ctx, header, request, connection=None) -> DeleteAclsResponse:
    R = DeleteAclsResponse

    def every(code, message):
        return R(throttle_time_ms=0, filter_results=[
            R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])
            for _ in request.filters])
    if not ctx.access(connection).allows_cluster(AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.authorizer is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    answers = await ctx.controller.delete_acls([filter_of(f) for f in request.filters])
    await ctx.refresh_metadata()
    return R(throttle_time_ms=0, filter_results=[
        R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[
            R.DeleteAclsMatchingAcl(error_code=0, error_message=None, resource_type=int(b.pattern.resource_type),
                                    resource_name=b.pattern.name, pattern_type=int(b.pattern.pattern_type),
                                    principal=b.entry.principal, host=b.entry.host, operation=int(b.entry.operation),
                                    permission_type=int(b.entry.permission_type))
            for b in matched])
        for code, message, matched in answers])
