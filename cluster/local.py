"""Run Kray on an embedded local Ray: the controller and one gateway on this node.

`LocalBroker` is what `kray start` and the tests use: start() returns once clients can connect;
stop() shuts Ray down so no process is left behind.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import ray

from cluster import composition

log = logging.getLogger("kray")
RAY_STARTUP_TIMEOUT_S = 120


class LocalBroker:
    def __init__(self, broker_config: dict[str, Any]):
        self.config = dict(broker_config)
        self.config["log.dirs"] = str(Path(self.config["log.dirs"]).resolve())
        self.controller = None
        self.gateway = None
        self.bootstrap: str | None = None
        self._owns_ray = False

    def start(self) -> str:
        if not ray.is_initialized():
            os.environ.setdefault("RAY_DEDUP_LOGS", "0")
            ray.init(namespace=composition.NAMESPACE, include_dashboard=False, log_to_driver=False,
                     configure_logging=True, logging_level=logging.WARNING)
            self._owns_ray = True
        node_id = ray.get_runtime_context().get_node_id()
        self.controller = composition.start_controller(self.config, node_id)
        broker_id = int(self.config["broker.id"])
        self.gateway = composition.start_gateway(self.config, broker_id, node_id, self.controller)
        host, port = ray.get(self.gateway.start.remote(), timeout=RAY_STARTUP_TIMEOUT_S)
        self.bootstrap = f"{host}:{port}"
        return self.bootstrap

    def stop(self) -> None:
        try:
            if self.gateway is not None:
                ray.get(self.gateway.stop.remote(), timeout=10)
        except Exception as e:  # stopping anyway
            log.warning("gateway did not stop cleanly: %s", e)
        try:
            if self.controller is not None:
                ray.get(self.controller.shutdown.remote(), timeout=30)
        except Exception as e:
            log.warning("controller did not shut down cleanly: %s", e)
        for handle in (self.gateway, self.controller):
            if handle is not None:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:
                    pass
        self.gateway = self.controller = None
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False

    def __enter__(self) -> "LocalBroker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
