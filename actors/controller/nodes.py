"""Which Ray nodes are brokers, and under which broker id: pure decisions the controller's node
watcher acts on.

A broker is a Ray node. Its id comes, in this order, from
1. the node's label `kray-broker-id` (LocalCluster labels its nodes; on a cluster of your own:
   `ray start --labels kray-broker-id=N`), needed where several nodes share one disk;
2. `meta.properties` in `log.dirs` on that node, written the first time (as Kafka keeps its
   node id beside its logs), so a machine that restarts finds its id and its data again;
3. else a new id: the `broker.id` config if free, otherwise the lowest id no live broker uses.
A node labelled `kray-role=controller` runs no broker (LocalCluster's Ray head: losing a broker
node must never take Ray down). `kray-port` sets a node's listener port (several nodes on one
machine); otherwise the `listeners` port applies.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

BROKER_ID_LABEL = "kray-broker-id"
PORT_LABEL = "kray-port"
ROLE_LABEL = "kray-role"
CONTROLLER_ONLY = "controller"
META_PROPERTIES = "meta.properties"


@dataclass(frozen=True)
class NodeView:
    node_id: str
    alive: bool
    address: str
    labels: dict[str, str]

    @classmethod
    def of(cls, ray_node: dict[str, Any]) -> "NodeView":
        return cls(ray_node["NodeID"], bool(ray_node["Alive"]), ray_node.get("NodeManagerAddress", ""),
                   dict(ray_node.get("Labels") or {}))

    @property
    def hosts_broker(self) -> bool:
        return self.labels.get(ROLE_LABEL) != CONTROLLER_ONLY

    @property
    def labelled_broker_id(self) -> int | None:
        raw = self.labels.get(BROKER_ID_LABEL)
        if raw is None:
            return None
        if not raw.isdigit():
            raise ValueError(f"node {self.node_id[:12]}: label {BROKER_ID_LABEL}={raw!r} is not a broker id "
                             f"(a non-negative integer)")
        return int(raw)

    @property
    def port(self) -> int | None:
        raw = self.labels.get(PORT_LABEL)
        return int(raw) if raw is not None and raw.isdigit() else None


def replaces(old: NodeView | None, new: NodeView) -> bool:
    """Whether `new`, a node that claims the broker id of live node `old`, takes its place: it is
    on the same host (its address), so the Ray node there was started again while Ray has not yet
    declared the old one dead (its raylet crashed, or a node supervisor restarted it after a cut;
    with health checks that tolerate long cuts that takes minutes). A node elsewhere with the same
    id is a configuration error: it waits, and the live broker stays."""
    return old is None or (bool(new.address) and old.address == new.address)


def proposed_broker_id(configured: int, taken: set[int]) -> int:
    """A new broker's id: the configured broker.id if no live broker has it, else the lowest free id."""
    if configured >= 0 and configured not in taken:
        return configured
    candidate = 0
    while candidate in taken:
        candidate += 1
    return candidate


def recorded_broker_id(log_dirs: str, proposed: int) -> int:
    """Runs on the node itself: the broker id in its meta.properties, or `proposed`, recorded there."""
    path = Path(log_dirs) / META_PROPERTIES
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "broker.id" and value.strip().isdigit():
                return int(value.strip())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# written by Kray: this node's broker id, found again after a restart\n"
                    f"version=1\nbroker.id={proposed}\n")
    return proposed
