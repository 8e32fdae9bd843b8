"""KRaft's quorum APIs on the broker's listeners: Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch
(54) from the other voters (combined voters: the voter runs in the broker's process), and
DescribeQuorum (55) from operators (`kray metadata-quorum describe --status`).

Authorization is Kafka's: the voters' RPCs need CLUSTER_ACTION on the cluster (the brokers'
principal), DescribeQuorum needs DESCRIBE on it; refused, they answer CLUSTER_AUTHORIZATION_FAILED.

The voter is `ctx.quorum` (an actors/controller/quorum_shell/node.py QuorumNode), None unless this
broker is in controller.quorum.voters; without one the voters' RPCs answer INVALID_REQUEST. Any
voter answers DescribeQuorum with the leader's view (asked of the leader's gateway, as Kafka's
brokers forward it to the active controller; its own epoch, leader and high watermark if the leader
does not answer): only the leader knows the replicas' states. A broker without a voter asks the controller, as Kafka's brokers forward
DescribeQuorum to theirs: the dedicated controller answers with its single voter's view; with
combined voters it has none, and the broker answers INVALID_REQUEST (ask a voting broker).
"""
from __future__ import annotations

import asyncio
import logging

import ray

from protocol import messages as m
from protocol.errors import ErrorCode

from actors import names
from actors.controller.quorum_shell import wire
from actors.security.authorizer import AclOperation

log = logging.getLogger("kray.gateway")
LEADER_STATUS_TIMEOUT_S = 5.0
NO_QUORUM_MESSAGE = ("this broker is not a voter of the metadata quorum (controller.quorum.voters), or its voter is "
                     "starting: ask a voting broker")


def _refusal(request, error: ErrorCode):
    """The response of `request`'s API with `error` at the top."""
    response_class = {52: m.VoteResponse, 53: m.BeginQuorumEpochResponse,
                      54: m.EndQuorumEpochResponse}[request.API_KEY]
    return response_class(error_code=int(error), topics=[])


async def handle_quorum_rpc(ctx, header, request, connection):
    if not ctx.access(connection).allows_cluster(AclOperation.CLUSTER_ACTION):
        log.warning("a %s from %s as %s refused: it needs CLUSTER_ACTION on the cluster",
                    type(request).__name__, getattr(connection, "peer", None), getattr(connection, "principal", None))
        return _refusal(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    node = getattr(ctx, "quorum", None)
    if node is None:
        return _refusal(request, ErrorCode.INVALID_REQUEST)
    try:
        if request.API_KEY == 52:
            answer = await node.handle_request(wire.vote_request_from_wire(request))
            to_wire = wire.vote_response_to_wire
        elif request.API_KEY == 53:
            answer = await node.handle_request(wire.begin_request_from_wire(request))
            to_wire = wire.begin_response_to_wire
        else:
            answer = await node.handle_request(wire.end_request_from_wire(request, header.api_version))
            to_wire = wire.end_response_to_wire
    except wire.BadQuorumMessage:
        return _refusal(request, ErrorCode.INVALID_REQUEST)
    if answer is None:                  # the node stopped, or too many requests from that peer wait
        return _refusal(request, ErrorCode.REQUEST_TIMED_OUT)
    return to_wire(answer)


async def handle_quorum_fetch(ctx, header, request, connection):
    """A voter's Fetch of __cluster_metadata-0 (replica id = its node id), KRaft's replication:
    handle_fetch sends it here when this broker runs a voter. CLUSTER_ACTION, as a follower's fetch."""
    version = header.api_version
    if not ctx.access(connection).allows_cluster(AclOperation.CLUSTER_ACTION):
        return m.FetchResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), responses=[])
    try:
        fetch = wire.fetch_request_from_wire(request, version)
    except wire.BadQuorumMessage:
        return m.FetchResponse(error_code=int(ErrorCode.INVALID_REQUEST), responses=[])
    answer = await ctx.quorum.handle_request(fetch)
    if answer is None:
        return m.FetchResponse(error_code=int(ErrorCode.REQUEST_TIMED_OUT), responses=[])
    return wire.fetch_response_to_wire(answer)


async def leader_status(leader_id: int):
    """The quorum leader's QuorumStatus, from its broker's gateway (over Ray); None if it does not
    answer within LEADER_STATUS_TIMEOUT_S or no longer leads."""
    try:
        gateway = await asyncio.to_thread(ray.get_actor, names.gateway_name(leader_id), namespace=names.NAMESPACE)
        answer = await asyncio.wait_for(gateway.quorum_status.remote(), LEADER_STATUS_TIMEOUT_S)
    except Exception as e:
        log.info("DescribeQuorum: the leader's gateway (broker %d) did not answer: %s", leader_id, e)
        return None
    if answer is None or answer[0].role != "leader":
        return None
    return answer[0]


def describe_quorum_response(status, version: int, endpoints=None) -> m.DescribeQuorumResponse:
    """DescribeQuorum from RaftCore.status(): replicas' states are the leader's (empty elsewhere);
    v2 adds each replica's directory id (wire.voter_directory_id) and the voters' endpoints
    (`endpoints`: node id -> (listener name, host, port), from the cluster metadata)."""
    cls = m.DescribeQuorumResponse

    def replicas(states):
        return [cls.ReplicaState(replica_id=r.replica_id, replica_directory_id=wire.voter_directory_id(r.replica_id),
                                 log_end_offset=r.log_end_offset,
                                 last_fetch_timestamp=-1 if r.last_fetch_ms is None else r.last_fetch_ms,
                                 last_caught_up_timestamp=-1 if r.last_caught_up_ms is None else r.last_caught_up_ms)
                for r in states]

    part = cls.PartitionData(partition_index=wire.METADATA_PARTITION, error_code=0,
                             leader_id=-1 if status.leader_id is None else status.leader_id,
                             leader_epoch=status.epoch, high_watermark=status.high_watermark,
                             current_voters=replicas(status.voters), observers=replicas(status.observers))
    nodes = [cls.Node(node_id=v.replica_id, listeners=[cls.Listener(name=e[0], host=e[1], port=e[2])])
             for v in status.voters if (e := (endpoints or {}).get(v.replica_id)) is not None]
    return cls(error_code=0, topics=[cls.TopicData(topic_name=wire.METADATA_TOPIC, partitions=[part])], nodes=nodes)


def voter_endpoints(ctx) -> dict:
    """node id -> (listener name, host, port) of each broker's inter-broker listener, as the
    cluster metadata names them (a voter's endpoint)."""
    metadata = getattr(ctx, "metadata", None)
    brokers = getattr(metadata, "brokers", None) or {}
    out = {}
    for broker_id, broker in brokers.items():
        host, port = getattr(broker, "host", None), getattr(broker, "port", None)
        if host is not None and port is not None:
            out[broker_id] = (getattr(broker, "listener", None) or "PLAINTEXT", host, port)
    return out


async def handle_describe_quorum(ctx, header, request, connection):
    cls = m.DescribeQuorumResponse
    if not ctx.access(connection).allows_cluster(AclOperation.DESCRIBE):
        return cls(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                   error_message="Cluster authorization failed.", topics=[])
    node = getattr(ctx, "quorum", None)
    if node is not None:
        status = node.status()
        if status.role != "leader" and status.leader_id is not None:
            # as Kafka's brokers forward DescribeQuorum to the active controller: the leader's view,
            # with every voter's and observer's state (this voter's own, if the leader is silent)
            status = await leader_status(status.leader_id) or status
        return describe_quorum_response(status, header.api_version, voter_endpoints(ctx))
    ask = getattr(ctx.controller, "quorum_status", None)
    try:
        status = await ask() if ask is not None else None
    except Exception as e:  # the controller restarting, or cut off
        log.info("DescribeQuorum: the controller did not answer: %s", e)
        return cls(error_code=int(ErrorCode.REQUEST_TIMED_OUT), error_message="the controller did not answer",
                   topics=[])
    if status is None:
        return cls(error_code=int(ErrorCode.INVALID_REQUEST), error_message=NO_QUORUM_MESSAGE, topics=[])
    return describe_quorum_response(status, header.api_version)
