"""A broker's voter: built and run inside the broker's gateway process (KRaft's combined mode) once
the controller has recorded the quorum's voters and this broker is one of them.

Its files are beside the broker's partitions (`<log.dirs>/broker-<id>/__cluster_metadata-0`); its
peers are the other voters' inter-broker listeners as the cluster metadata names them (looked up at
every connect, so a broker that came back at another address is found), reached over that
listener's security protocol with the brokers' own login.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from .node import QuorumNode
from .settings import quorum_config
from .transport import PeerTransport

log = logging.getLogger("kray.quorum")


def voter_log_dir(config: Mapping[str, Any], broker_id: int) -> Path:
    """The broker's own directory under log.dirs (where the controller puts its replicas too)."""
    return Path(config["log.dirs"]).resolve() / f"broker-{broker_id}"


def build_voter(config: Mapping[str, Any], broker_id: int, voters: tuple[int, ...], cluster_id: str | None,
                resolve: Callable[[int], tuple[str, int] | None]) -> QuorumNode:
    from actors.gateway.security.inter_broker import broker_transport
    quorum = quorum_config(config, voters)
    ssl_context, login = broker_transport(config)
    transport = PeerTransport(broker_id, cluster_id, resolve, request_timeout_ms=quorum.request_timeout_ms,
                              ssl_context=ssl_context, broker_login=login)
    node = QuorumNode(broker_id, quorum, str(voter_log_dir(config, broker_id)), transport)
    log.info("broker %d: voter of the metadata quorum %s (epoch %d)", broker_id, list(voters), node.status().epoch)
    return node
