"""Where a voter runs, and the three calls a controller makes of it.

- A broker's voter (combined voters, controller.quorum.voters): built and run inside the broker's
  gateway process once this broker is one of the voters. Its files are beside the broker's
  partitions (`<log.dirs>/broker-<id>/__cluster_metadata-0`); its peers are the other voters'
  inter-broker listeners as the cluster metadata names them (looked up at every connect, so a
  broker that came back at another address is found), reached over that listener's security
  protocol with the brokers' own login. Controllers call it through its gateway over Ray.
- The dedicated controller's voter (controller.quorum.voters unset): the quorum's only voter, run
  inside the controller actor itself (`<log.dirs>/__cluster_metadata-0`). It has no peers (NoPeers:
  a single voter elects itself and commits what it has written), so it opens no listener; the
  controller calls it in-process (LocalVoter).

`voter_status`, `propose_through` and `read_through` are those calls, the same for both.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from actors.controller.quorum import NotLeader

from .node import QuorumNode
from .settings import DEDICATED_CONTROLLER_ID, quorum_config
from .transport import PeerTransport

log = logging.getLogger("kray.quorum")


def voter_log_dir(config: Mapping[str, Any], broker_id: int) -> Path:
    """The broker's own directory under log.dirs (where the controller puts its replicas too)."""
    return Path(config["log.dirs"]).resolve() / f"broker-{broker_id}"


def build_voter(config: Mapping[str, Any], broker_id: int, voters: tuple[int, ...], cluster_id: str | None,
                resolve: Callable[[int], tuple[str, int] | None]) -> QuorumNode:
    from actors.security.inter_broker import broker_transport
    quorum = quorum_config(config, voters)
    ssl_context, login = broker_transport(config)
    transport = PeerTransport(broker_id, cluster_id, resolve, request_timeout_ms=quorum.request_timeout_ms,
                              ssl_context=ssl_context, broker_login=login)
    node = QuorumNode(broker_id, quorum, str(voter_log_dir(config, broker_id)), transport)
    log.info("broker %d: voter of the metadata quorum %s (epoch %d)", broker_id, list(voters), node.status().epoch)
    return node


class NoPeers:
    """The dedicated controller's transport: a single voter sends nothing to anyone."""

    async def request(self, dst: int, message) -> None:
        return None


def build_dedicated_voter(config: Mapping[str, Any]) -> QuorumNode:
    """The dedicated controller's voter, the quorum's only one, its files in <log.dirs>."""
    node_id = DEDICATED_CONTROLLER_ID
    node = QuorumNode(node_id, quorum_config(config, (node_id,)), str(Path(config["log.dirs"]).resolve()), NoPeers())
    log.info("dedicated controller %d: the metadata quorum's single voter (epoch %d)", node_id, node.status().epoch)
    return node


# ---- a controller's calls of a voter (the gateway's methods, or LocalVoter's) ---------------------------
def voter_status(node: QuorumNode | None):
    """(QuorumStatus, settled) of the voter, None without one; `settled`: it leads and has committed
    its whole log (it may be read from start to end)."""
    return None if node is None else (node.status(), node.settled())


async def propose_through(node: QuorumNode | None, payloads: list[bytes], epoch: int | None) -> tuple[str, Any]:
    """Append the controller's records (encoded) to the quorum's log through this voter:
    ("committed", the batch's base offset) once committed; ("not_leader", the leader's id or None):
    nothing was appended (also when the voter's epoch is not `epoch`, the one the controller read
    the metadata in); ("lost", why): appended, but a new leader's log replaced it."""
    if node is None:
        return "not_leader", None
    status = node.status()
    if epoch is not None and status.epoch != epoch:   # (checked and proposed with no await between)
        return "not_leader", status.leader_id
    try:
        result = await node.propose(payloads)
    except LookupError as e:
        return "lost", str(e)
    if isinstance(result, NotLeader):
        return "not_leader", result.leader_id
    return "committed", result.base_offset


def read_through(node: QuorumNode | None, from_offset: int) -> tuple[int, bool, list[tuple[int, list[bytes]]]]:
    """(the voter's epoch, whether it leads with its whole log committed, the controller's committed
    records from `from_offset` on as (base offset, payloads) per batch), in one step: a reader knows
    the epoch its records are whole for."""
    if node is None:
        return -1, False, []
    return (node.status().epoch, node.settled(),
            [(b.base_offset, list(b.records)) for b in node.committed_batches(from_offset) if not b.control])


class LocalVoter:
    """The dedicated controller's voter as QuorumMetadataLog calls it (the calls a gateway answers
    over Ray, here in-process)."""

    def __init__(self, node: QuorumNode):
        self.node = node

    async def quorum_status(self):
        return voter_status(self.node)

    async def propose_metadata(self, payloads: list[bytes], epoch: int | None = None) -> tuple[str, Any]:
        return await propose_through(self.node, payloads, epoch)

    async def read_metadata(self, from_offset: int):
        return read_through(self.node, from_offset)
