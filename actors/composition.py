"""The one place where Kray's plain classes become Ray actors, with every option written out.

Handlers and cores never import Ray; shells are plain classes; this module places and restarts
them, under the names of actors/names.py.
"""
from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.names import NAMESPACE, controller_name, gateway_name, shard_name

# Ray ties an actor's life to its creator's unless it is detached. Gateways and shards (the hosts of
# the partition replicas, coordinators included) are created by the controller, and must survive a
# controller restart (which adopts them again by name); the controller kills them itself when
# their node goes or on shutdown, and `kray start` ends Ray whole.
OUTLIVES_ITS_CREATOR = "detached"


def on_node(node_id: str, *, soft: bool = False) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


def start_controller(controller_class: type, broker_config: dict[str, Any], node_id: str,
                     voter_id: int | None = None):
    """The controller, whose config every other actor gets; it carries the secret Kray's actors
    log in to each other's internal listeners with (made here unless the config has one): the
    dedicated controller (the metadata quorum's single voter inside it), or with combined voters
    one per voting broker (`voter_id`), on that broker's node: the one whose voter leads is active,
    the others stand by. Detached there: a controller started by another
    (a voter's node that returned) must outlive it. `controller_class` is
    actors.controller.actor.ControllerActor, given by the caller (the tools on top, or the
    controller itself), so that this module does not import the controller that imports it."""
    from actors.security.inter_broker import with_broker_secret
    if voter_id is None:
        broker_config = with_broker_secret(broker_config)
    return ray.remote(controller_class).options(
        name=controller_name(voter_id), namespace=NAMESPACE,
        lifetime=None if voter_id is None else OUTLIVES_ITS_CREATOR, max_restarts=-1,
        max_task_retries=0, num_cpus=0, max_concurrency=1000,
        scheduling_strategy=on_node(node_id),
    ).remote(broker_config, voter_id)


def start_gateway(broker_config: dict[str, Any], broker_id: int, node_id: str, controller, port: int | None):
    """A node's broker: its one client listener. Started by the controller, so it must outlive it."""
    from actors.gateway.actor import GatewayActor
    return ray.remote(GatewayActor).options(
        name=gateway_name(broker_id), namespace=NAMESPACE, lifetime=OUTLIVES_ITS_CREATOR, max_restarts=-1,
        max_task_retries=0, num_cpus=0, max_concurrency=10000,
        scheduling_strategy=on_node(node_id),
    ).remote(broker_config, broker_id, controller, port)


def start_on_node(node_id: str, fn, *args) -> "ray.ObjectRef":
    """Start a small function on a given node (e.g. to read a file on its disk): its result's ref."""
    return ray.remote(fn).options(num_cpus=0, max_retries=0, scheduling_strategy=on_node(node_id)).remote(*args)


async def run_on_node(node_id: str, fn, *args):
    """Run a small function on a given node and await its result."""
    return await start_on_node(node_id, fn, *args)


def start_shard(broker_id: int, index: int, broker_config: dict[str, Any], node_id: str):
    """One of a broker's shard actors, pinned to its node, whose disk holds its replicas' logs.
    Ray restarts it empty where it dies; the controller hosts its replicas on it again."""
    from actors.shard.actor import ShardActor
    return ray.remote(ShardActor).options(
        name=shard_name(broker_id, index), namespace=NAMESPACE, lifetime=OUTLIVES_ITS_CREATOR,
        max_restarts=-1, max_task_retries=0, num_cpus=0, max_concurrency=10000,
        scheduling_strategy=on_node(node_id),
    ).remote(broker_id, index, broker_config)
