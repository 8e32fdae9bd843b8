"""Which Ray nodes are brokers, and under which broker id: pure decisions the controller's node
watcher acts on.

A broker is a Ray node. Its id comes, in this order, from
1. the node's label `kray-broker-id` (LocalCluster labels its nodes; on a cluster of your own:
   `ray start --labels kray-broker-id=N`), needed where several nodes share one disk;
2. `meta.properties` in `log.dirs` on that node, written the first time (as Kafka keeps its
   node id beside its logs), so a machine that restarts finds its id and its data again;
3. else a new id: the `broker.id` config if free, otherwise the lowest id no live broker uses.
Combined voters (brokers that vote in the metadata quorum) named by `controller.quorum.voters` are
recorded in the unlabelled nodes' meta.properties at a cluster's first start, so that later starts
find the same set (a voter set never changes silently); with none named or recorded, one dedicated
controller keeps the metadata (actors/controller/quorum_shell/settings.py).
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
VOTERS_PROPERTY = "controller.quorum.voters"


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


def read_meta_properties(log_dirs: str) -> dict[str, str]:
    """Runs on the node: meta.properties beside its logs, as key -> value ({} without one)."""
    path = Path(log_dirs) / META_PROPERTIES
    if not path.exists():
        return {}
    meta = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            meta[key.strip()] = value.strip()
    return meta


def _write_meta_properties(log_dirs: str, meta: dict[str, str]) -> None:
    path = Path(log_dirs) / META_PROPERTIES
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(META_PROPERTIES + ".tmp")
    temp.write_text("# written by Kray: this node's broker id (and the metadata quorum's voters), found again "
                    "after a restart\n" + "".join(f"{k}={v}\n" for k, v in meta.items()))
    temp.replace(path)


def read_broker_id(log_dirs: str) -> int | None:
    """Runs on the node: the broker id in its meta.properties, None without one."""
    value = read_meta_properties(log_dirs).get("broker.id", "")
    return int(value) if value.isdigit() else None


def recorded_broker_id(log_dirs: str, proposed: int) -> int:
    """Runs on the node: the broker id in its meta.properties, or `proposed`, recorded there."""
    recorded = read_broker_id(log_dirs)
    if recorded is not None:
        return recorded
    _write_meta_properties(log_dirs, {"version": "1", **read_meta_properties(log_dirs), "broker.id": str(proposed)})
    return proposed


def recorded_voters(log_dirs: str, chosen: str | None = None) -> str | None:
    """Runs on the node: the metadata quorum's voters in its meta.properties ("1,2,3"); `chosen`
    recorded there if it has none (the set picked at a cluster's first start, kept for its life)."""
    meta = read_meta_properties(log_dirs)
    if meta.get(VOTERS_PROPERTY) or chosen is None:
        return meta.get(VOTERS_PROPERTY) or None
    _write_meta_properties(log_dirs, {"version": "1", **meta, VOTERS_PROPERTY: chosen})
    return chosen


def chosen_voters(configured: tuple[int, ...], recorded: set[str]) -> tuple[int, ...] | str:
    """The voting brokers: the configured ones (controller.quorum.voters), else those the nodes
    recorded at the cluster's first start, else none (() : one dedicated controller). A string says
    why there are none: the nodes recorded different sets."""
    if configured:
        return configured
    if len(recorded) > 1:
        return (f"the nodes' meta.properties name different voter sets ({' and '.join(sorted(recorded))}): set "
                f"controller.quorum.voters to the one this cluster's metadata is on")
    if recorded:
        return tuple(int(v) for v in next(iter(recorded)).split(","))
    return ()
