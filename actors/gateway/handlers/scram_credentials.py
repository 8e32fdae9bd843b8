"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554, v0).

SCRAM credentials live in the controller's metadata log and reach every gateway with its metadata
image (actors/gateway/context.py indexes them for SCRAM logins); the rules are in
actors/security/scram_credentials.py. As in Kafka: describing needs DESCRIBE on the
cluster (else the whole answer is CLUSTER_AUTHORIZATION_FAILED), altering needs ALTER on the
cluster (else every user named answers CLUSTER_AUTHORIZATION_FAILED and nothing changes); both
work without an authorizer. Describing answers from this broker's image; the gateway that
altered catches up with the controller before answering, so its next describe or login sees the
change, other gateways with their next image.
"""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse

from actors.security.authorizer import AclOperation
from actors.security.scram_credentials import Deletion, Upsertion, describe_credentials

CLUSTER_REFUSED = "Cluster authorization failed."


async def handle_describe_user_scram_credentials(ctx, header, request,
                                                 connection=None) -> DescribeUserScramCredentialsResponse:
    R = DescribeUserScramCredentialsResponse
    users = [u.name for u in request.users] if request.users else None
    if not ctx.access(connection).allows_cluster(AclOperation.DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return R(throttle_time_ms=0, error_code=code, error_message=CLUSTER_REFUSED, results=[
            R.DescribeUserScramCredentialsResult(user=user, error_code=code, error_message=CLUSTER_REFUSED,
                                                 credential_infos=[]) for user in users or ()])
    store = getattr(ctx.metadata, "scram_credentials", None) or {}
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=[
        R.DescribeUserScramCredentialsResult(
            user=result.user, error_code=result.error_code, error_message=result.error_message,
            credential_infos=[R.CredentialInfo(mechanism=mechanism, iterations=iterations)
                              for mechanism, iterations in result.credentials])
        for result in describe_credentials(store, users)])


async def handle_alter_user_scram_credentials(ctx, header, request,
                                              connection=None) -> AlterUserScramCredentialsResponse:
    R = AlterUserScramCredentialsResponse
    if not ctx.access(connection).allows_cluster(AclOperation.ALTER):
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(
            user=user, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_REFUSED)
            for user in users])
    deletions = [Deletion(d.name, d.mechanism) for d in request.deletions]
    upsertions = [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt or b""), bytes(u.salted_password or b""))
                  for u in request.upsertions]
    results = await ctx.controller.alter_user_scram_credentials(deletions, upsertions) \
        if deletions or upsertions else []
    if any(r.error_code == 0 for r in results):
        await ctx.refresh_metadata()
    return R(throttle_time_ms=0, results=[
        R.AlterUserScramCredentialsResult(user=r.user, error_code=r.error_code, error_message=r.error_message)
        for r in results])
