"""ApiVersions: what this gateway speaks, straight from its routing table.

Features (v3+), as Kafka 4.4 reports them where Kray has what the level means: `transaction.version` 2
(KIP-890 part 2: an epoch bump at every EndTxn, partitions added by Produce v12+ and TxnOffsetCommit v5+; a Java
producer uses it only when finalized), `group.version` 1 (KIP-848 consumer groups), `share.version` 2 (KIP-932
share groups with RENEW), `streams.version` 1 (KIP-1071 streams groups: a Kafka Streams application with
group.protocol=streams looks for it), `metadata.version` 33 (4.4-IV2: the level of the APIs and versions Kray
serves). Not reported, as not built: `eligible.leader.replicas.version` (KIP-966), `kraft.version` (Kray's metadata
quorum is its own, not KRaft). Levels are fixed: no UpdateFeatures.

v5 (KIP-1242): a client that names the cluster and node it means to reach (both, or neither) gets
REBOOTSTRAP_REQUIRED where either is not this broker's, and INVALID_REQUEST where it names only
one, with no api keys, as Kafka 4.4 answers (measured against it: tests/kafka)."""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ApiVersionsResponse

NO_NODE_ID = -1
# feature -> (lowest supported level, highest supported level, finalized level), as Kafka 4.4 reports them
FEATURES = {
    "metadata.version": (7, 33, 33),
    "transaction.version": (0, 2, 2),
    "group.version": (0, 1, 1),
    "share.version": (0, 2, 2),
    "streams.version": (0, 1, 1),
}
FEATURES_EPOCH = 0   # the levels never change


def _intended_broker_error(ctx, request) -> int:
    cluster_id, node_id = getattr(request, "cluster_id", None), getattr(request, "node_id", NO_NODE_ID)
    if cluster_id is None and node_id == NO_NODE_ID:
        return ErrorCode.NONE
    if cluster_id is None or node_id == NO_NODE_ID:
        return ErrorCode.INVALID_REQUEST
    if cluster_id != ctx.metadata.cluster_id or node_id != ctx.broker_id:
        return ErrorCode.REBOOTSTRAP_REQUIRED
    return ErrorCode.NONE


async def handle_api_versions(ctx, header, request, connection=None) -> ApiVersionsResponse:
    error = _intended_broker_error(ctx, request) if header.api_version >= 5 else ErrorCode.NONE
    if error:
        return ApiVersionsResponse(error_code=error, throttle_time_ms=0, api_keys=[])
    R = ApiVersionsResponse
    return R(error_code=0, throttle_time_ms=0, api_keys=[
        R.ApiVersion(api_key=key, min_version=lo, max_version=hi) for key, lo, hi in ctx.advertised],
        supported_features=[R.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
                            for name, (lo, hi, _) in FEATURES.items()],
        finalized_features_epoch=FEATURES_EPOCH,
        finalized_features=[R.FinalizedFeatureKey(name=name, min_version_level=level, max_version_level=level)
                            for name, (_, _, level) in FEATURES.items()])
