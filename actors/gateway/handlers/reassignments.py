"""AlterPartitionReassignments (45), ListPartitionReassignments (46) and ElectLeaders (43), forwarded to
the controller, which decides them as Kafka 4.4's controller does (actors/controller/elections.py:
`reassign`, `elect`; actors/controller/core.py). As Kafka's ControllerApis: altering and electing need
ALTER on the cluster, listing DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED, at the top and
for every partition named). The gateway catches up with the metadata before answering, so a Metadata
request that follows on the same broker sees the change (the full replica set during a move)."""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import (AlterPartitionReassignmentsResponse, ElectLeadersResponse,
                               ListPartitionReassignmentsResponse)

from actors.security.authorizer import AclOperation

CLUSTER_REFUSED = "Cluster authorization failed: an ACL allowing {} on the CLUSTER resource is needed"


async def handle_alter_partition_reassignments(ctx, header, request, connection=None
                                               ) -> AlterPartitionReassignmentsResponse:
    R = AlterPartitionReassignmentsResponse
    allow_change = getattr(request, "allow_replication_factor_change", True)
    if not ctx.access(connection).allows_cluster(AclOperation.ALTER):
        error, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED.format("ALTER")
        return R(throttle_time_ms=0, allow_replication_factor_change=allow_change, error_code=error,
                 error_message=message, responses=[R.ReassignableTopicResponse(name=t.name, partitions=[
                     R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=error,
                                                     error_message=message) for p in t.partitions])
                     for t in request.topics])
    topics = [(t.name, [(p.partition_index, None if p.replicas is None else list(p.replicas)) for p in t.partitions])
              for t in request.topics]
    results = await ctx.controller.alter_partition_reassignments(topics, allow_change) if topics else []
    if any(error == 0 for _, answers in results for _, error, _ in answers):
        await ctx.refresh_metadata()
    return R(throttle_time_ms=0, allow_replication_factor_change=allow_change, error_code=0, error_message=None,
             responses=[R.ReassignableTopicResponse(name=name, partitions=[
                 R.ReassignablePartitionResponse(partition_index=index, error_code=error, error_message=message)
                 for index, error, message in answers]) for name, answers in results])


async def handle_list_partition_reassignments(ctx, header, request, connection=None
                                              ) -> ListPartitionReassignmentsResponse:
    R = ListPartitionReassignmentsResponse
    if not ctx.access(connection).allows_cluster(AclOperation.DESCRIBE):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=CLUSTER_REFUSED.format("DESCRIBE"), topics=[])
    topics = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    found = await ctx.controller.list_partition_reassignments(topics)
    return R(throttle_time_ms=0, error_code=0, error_message=None, topics=[
        R.OngoingTopicReassignment(name=name, partitions=[
            R.OngoingPartitionReassignment(partition_index=index, replicas=replicas, adding_replicas=adding,
                                           removing_replicas=removing)
            for index, replicas, adding, removing in partitions]) for name, partitions in found])


async def handle_elect_leaders(ctx, header, request, connection=None) -> ElectLeadersResponse:
    R = ElectLeadersResponse
    election_type = getattr(request, "election_type", 0)  # v0: preferred only
    named = None if request.topic_partitions is None else [(t.topic, list(t.partitions))
                                                           for t in request.topic_partitions]
    if not ctx.access(connection).allows_cluster(AclOperation.ALTER):
        error, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED.format("ALTER")
        return R(throttle_time_ms=0, error_code=error, replica_election_results=[
            R.ReplicaElectionResult(topic=name, partition_result=[
                R.PartitionResult(partition_id=i, error_code=error, error_message=message) for i in indexes])
            for name, indexes in named or []])
    if election_type not in (0, 1):
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, replica_election_results=[
            R.ReplicaElectionResult(topic=name, partition_result=[
                R.PartitionResult(partition_id=i, error_code=ErrorCode.INVALID_REQUEST,
                                  error_message=f"Unknown election type {election_type}") for i in indexes])
            for name, indexes in named or []])
    results = await ctx.controller.elect_leaders(election_type, named)
    if any(error == 0 for _, answers in results for _, error, _ in answers):
        await ctx.refresh_metadata()
    return R(throttle_time_ms=0, error_code=0, replica_election_results=[
        R.ReplicaElectionResult(topic=name, partition_result=[
            R.PartitionResult(partition_id=index, error_code=error, error_message=message)
            for index, error, message in answers]) for name, answers in results])
