"""Run Kray on Ray: a broker per Ray node, the controller beside them.

- `LocalBroker(config)`: one node, on an embedded local Ray (what `kray start` runs);
  `LocalBroker(config, address="auto" | "HOST:PORT")` deploys onto an existing Ray cluster
  instead: the controller on its head node, a broker on every node (nodes that join later too).
- `LocalCluster(nodes=3)`: several broker nodes on one machine, on `ray.cluster_utils.Cluster`;
  the Ray head runs the controller and no broker, so losing a broker node never takes Ray down.

start() returns once clients can connect; stop() stops what Kray started (and the Ray it started).
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ray

from actors.controller.nodes import BROKER_ID_LABEL, CONTROLLER_ONLY, PORT_LABEL, ROLE_LABEL, NodeView
from cluster import composition

log = logging.getLogger("kray")
RAY_STARTUP_TIMEOUT_S = 120
# Failover (next step) needs Ray to notice a dead node in seconds, not the default ~30 s
FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                      "health_check_timeout_ms": 500, "health_check_initial_delay_ms": 500}


def _init_ray(address: str) -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Ray announces on every start that its token authentication is on: good, and nothing a Kray
    # user must act on (Kray's own listeners are PLAINTEXT; see README), so keep the console quiet
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    ray.init(address=address, namespace=composition.NAMESPACE, include_dashboard=False, log_to_driver=False,
             configure_logging=True, logging_level=logging.WARNING)


def _head_node_id() -> str:
    for node in ray.nodes():
        if node["Alive"] and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    return ray.get_runtime_context().get_node_id()


def stop_controller(controller) -> None:
    """Stop the brokers and partition actors the controller started, then the controller."""
    try:
        ray.get(controller.shutdown.remote(), timeout=60)
    except Exception as e:  # stopping anyway
        log.warning("controller did not shut down cleanly: %s", e)
    try:
        ray.kill(controller, no_restart=True)
    except Exception:
        pass


class LocalBroker:
    def __init__(self, broker_config: dict[str, Any], address: str | None = None):
        self.config = dict(broker_config)
        self.config["log.dirs"] = str(Path(self.config["log.dirs"]).resolve())
        self.address = address
        self.controller = None
        self.brokers: list = []
        self.bootstrap: str | None = None
        self._owns_ray = False

    def start(self) -> str:
        if not ray.is_initialized():
            _init_ray(self.address or "local")
            self._owns_ray = True
        if self.address is None:
            controller_node, expected = ray.get_runtime_context().get_node_id(), 1
        else:
            controller_node = _head_node_id()
            expected = sum(1 for n in map(NodeView.of, ray.nodes()) if n.alive and n.hosts_broker)
        self.controller = composition.start_controller(self.config, controller_node)
        self.brokers = ray.get(self.controller.deploy_brokers.remote(expected, RAY_STARTUP_TIMEOUT_S))
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in self.brokers)
        return self.bootstrap

    def stop(self) -> None:
        if self.controller is not None:
            stop_controller(self.controller)
        self.controller = None
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False

    def __enter__(self) -> "LocalBroker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class LocalCluster:
    """`nodes` broker nodes (broker ids 1..nodes) and a controller-only Ray head, on this machine.

        with LocalCluster(nodes=3) as cluster:
            Producer({"bootstrap.servers": cluster.bootstrap})
            cluster.leader("orders", 0)   # -> the broker id leading orders-0

    `overrides` are Kafka broker configs ({"num.partitions": 3}) over configs/local.toml (or
    `config_path`); `port` > 0 gives broker i the port `port + i - 1`, else ports are free ones.
    `data_dir` holds every broker's logs (`broker-<id>/`) and the controller's metadata; by
    default a temporary directory, removed by stop().
    """

    def __init__(self, nodes: int = 3, data_dir: str | Path | None = None, overrides: dict[str, Any] | None = None,
                 *, config_path: Path | None = None, port: int = 0, host: str = "127.0.0.1"):
        from cluster.config import DEFAULT_LOCAL_CONFIG, load_broker_config, with_listener
        if nodes < 1:
            raise ValueError("a cluster needs at least one broker node")
        self.nodes = nodes
        self._temp_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kray-cluster-")).resolve()
        texts = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in (overrides or {}).items()]
        self.config = with_listener(load_broker_config(config_path or DEFAULT_LOCAL_CONFIG, texts), host, port)
        self.config["log.dirs"] = str(self.data_dir)
        self.port = port
        self.ray_cluster = None
        self.controller = None
        self.bootstrap: str | None = None
        self._brokers: list = []

    def start(self) -> str:
        from ray.cluster_utils import Cluster
        if ray.is_initialized():
            raise RuntimeError("LocalCluster starts a Ray cluster of its own: call ray.shutdown() first")
        self.ray_cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "labels": {ROLE_LABEL: CONTROLLER_ONLY}, "_system_config": FAST_HEALTH_CHECKS})
        self._forget_current_cluster()
        try:
            for broker_id in range(1, self.nodes + 1):
                self.add_node(broker_id, wait=False)
            self.ray_cluster.wait_for_nodes()
            _init_ray(self.ray_cluster.address)
            self.controller = composition.start_controller(self.config, _head_node_id())
            self._brokers = ray.get(self.controller.deploy_brokers.remote(self.nodes, RAY_STARTUP_TIMEOUT_S))
        except BaseException:
            self.stop()
            raise
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in self._brokers)
        return self.bootstrap

    def add_node(self, broker_id: int, *, wait: bool = True):
        """A Ray node that is broker `broker_id` (its data in data_dir/broker-<id>)."""
        labels = {BROKER_ID_LABEL: str(broker_id)}
        if self.port > 0:
            labels[PORT_LABEL] = str(self.port + broker_id - 1)
        return self.ray_cluster.add_node(wait=wait, num_cpus=1, labels=labels)

    def _forget_current_cluster(self) -> None:
        """ray.cluster_utils records this cluster as the machine's current one, where any later
        ray.init() (another `kray start`, a notebook) would join it: undo that."""
        from ray._private.utils import get_ray_address_file
        try:
            path = get_ray_address_file(None)
            if os.path.exists(path) and open(path).read().strip() == self.ray_cluster.address:
                os.remove(path)
        except Exception as e:
            log.debug("could not remove Ray's current-cluster file: %s", e)

    @property
    def brokers(self) -> list[int]:
        return [b.broker_id for b in self._brokers]

    def metadata(self):
        return ray.get(self.controller.wait_for_metadata.remote(-1, 0))

    def leader(self, topic: str, partition: int) -> int:
        """The broker id that leads `topic`-`partition` now."""
        image = self.metadata()
        if topic not in image.topics:
            raise KeyError(f"topic {topic!r} does not exist")
        return image.leader_id(image.topics[topic], partition)

    def stop(self) -> None:
        if self.controller is not None:
            stop_controller(self.controller)
            self.controller = None
        if ray.is_initialized():
            ray.shutdown()
        if self.ray_cluster is not None:
            self.ray_cluster.shutdown()
            self.ray_cluster = None
        if self._temp_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
