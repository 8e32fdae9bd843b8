"""AddRaftVoter (80) and RemoveRaftVoter (81), KIP-853, on the brokers' listeners as Kafka 4.4's
brokers serve them (Kafka's brokers forward them to the active controller; Kray's to the broker
whose voter leads the metadata quorum). `kray metadata-quorum add-controller / remove-controller`
and Kafka's own kafka-metadata-quorum.sh send them. UpdateRaftVoter (82) is a controller-listener
API in Kafka, not advertised by its brokers: Kray does not serve it either (a voter's endpoints are
its broker's inter-broker listener, as the cluster metadata says).

Authorization is Kafka's: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

What Kray can change: the voters of combined mode (controller.quorum.voters names brokers). Every
broker named there runs a quorum node, a voter or (once removed) an observer that keeps fetching
the log, so a removed one can be added back once it has caught up. A broker not named there runs
no quorum node, so it cannot be added (REQUEST_TIMED_OUT says so); a dedicated controller (the
default, one voter in the controller on the Ray head) cannot take a second voter
(UNSUPPORTED_VERSION, as Kafka answers for a static quorum, kraft.version 0).

Directory ids: Kray's voters keep no meta.properties directory id; DescribeQuorum reports
voter_directory_id() for each (a fixed UUID per node id) and a request naming another directory
id (not the zero UUID) is refused with VOTER_NOT_FOUND (remove) or INVALID_REQUEST (add), as
Kafka refuses a voter key it does not know.
"""
from __future__ import annotations

import asyncio
import logging
import uuid

import ray

from protocol import messages as m
from protocol.errors import ErrorCode

from actors import names
from actors.controller.quorum_shell.settings import DEDICATED_CONTROLLER_ID
from actors.controller.quorum_shell.wire import voter_directory_id
from actors.security.authorizer import AclOperation

log = logging.getLogger("kray.gateway")
ZERO_UUID = uuid.UUID(int=0)
FORWARD_MARGIN_S = 5.0


def _answer(request, error: ErrorCode, message: str | None = None):
    cls = m.AddRaftVoterResponse if request.API_KEY == 80 else m.RemoveRaftVoterResponse
    return cls(error_code=int(error), error_message=message)


async def handle_raft_voter(ctx, header, request, connection):
    op = "add" if request.API_KEY == 80 else "remove"
    if not ctx.access(connection).allows_cluster(AclOperation.ALTER):
        return _answer(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    directory = request.voter_directory_id
    if directory not in (None, ZERO_UUID) and directory != voter_directory_id(request.voter_id):
        error = ErrorCode.INVALID_REQUEST if op == "add" else ErrorCode.VOTER_NOT_FOUND
        return _answer(request, error, f"node {request.voter_id}'s directory id is "
                                       f"{voter_directory_id(request.voter_id)}, not {directory} "
                                       f"(kray metadata-quorum describe --replication lists them)")
    timeout_ms = getattr(request, "timeout_ms", None) or 30_000
    error, message = await change_voters(ctx, op, request.voter_id, timeout_ms)
    return _answer(request, error, message)


async def change_voters(ctx, op: str, voter_id: int, timeout_ms: int) -> tuple[ErrorCode, str | None]:
    """Through this broker's voter if it leads, else through the leader's gateway (over Ray)."""
    node = getattr(ctx, "quorum", None)
    if node is not None:
        status = node.status()
    else:
        ask = getattr(ctx.controller, "quorum_status", None)
        try:
            status = await ask() if ask is not None else None
        except Exception as e:  # the controller restarting, or cut off
            return ErrorCode.REQUEST_TIMED_OUT, f"the controller did not answer ({e}): try again"
        if status is not None and status.node_id == DEDICATED_CONTROLLER_ID:
            return (ErrorCode.UNSUPPORTED_VERSION, "this cluster's metadata quorum is one dedicated controller "
                    "(controller.quorum.voters unset): its voters cannot change; combined voters "
                    "(process.roles=broker,controller) can")
    if status is None or status.leader_id is None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, "the metadata quorum has no leader right now: try again"
    if node is not None and status.leader_id == node.node_id:
        return await node.change_voters(op, voter_id, timeout_ms)
    try:
        gateway = await asyncio.to_thread(ray.get_actor, names.gateway_name(status.leader_id),
                                          namespace=names.NAMESPACE)
        error, message = await asyncio.wait_for(gateway.change_raft_voters.remote(op, voter_id, timeout_ms),
                                                timeout_ms / 1000 + FORWARD_MARGIN_S)
        return ErrorCode(error), message
    except Exception as e:
        log.info("%s voter %d: the leader's gateway (broker %s) did not answer: %s", op, voter_id,
                 status.leader_id, e)
        return ErrorCode.REQUEST_TIMED_OUT, f"the quorum leader (broker {status.leader_id}) did not answer: try again"
