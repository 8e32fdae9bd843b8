"""The one place where Kray's plain classes become Ray actors, with every option written out.

Handlers and cores never import Ray; shells are plain classes; this module names, places and
restarts them.
"""
from __future__ import annotations

import functools
import uuid
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

NAMESPACE = "kray"
# Ray ties an actor's life to its creator's unless it is detached. Gateways and partition actors
# (coordinators included: they lead internal-topic partitions) are created by the controller, and
# must survive a controller restart (which adopts them again by name); the controller kills them
# itself when their topic goes or on shutdown, and `kray start` ends Ray whole.
OUTLIVES_ITS_CREATOR = "detached"
CONTROLLER_NAME = "controller"


def gateway_name(broker_id: int) -> str:
    return f"gateway-{broker_id}"


def partition_name(topic_id: uuid.UUID, partition: int, broker_id: int) -> str:
    """A partition replica's actor: one per (topic, partition, broker)."""
    return f"partition-{topic_id.hex}-{partition}-{broker_id}"


def on_node(node_id: str, *, soft: bool = False) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


def start_controller(broker_config: dict[str, Any], node_id: str):
    from actors.controller.actor import ControllerActor
    return ray.remote(ControllerActor).options(
        name=CONTROLLER_NAME, namespace=NAMESPACE, lifetime=None, max_restarts=-1,
        max_task_retries=0, num_cpus=0, max_concurrency=1000,
        scheduling_strategy=on_node(node_id),
    ).remote(broker_config)


def start_gateway(broker_config: dict[str, Any], broker_id: int, node_id: str, controller, port: int | None):
    """A node's broker: its one client listener. Started by the controller, so it must outlive it."""
    from actors.gateway.actor import GatewayActor
    return ray.remote(GatewayActor).options(
        name=gateway_name(broker_id), namespace=NAMESPACE, lifetime=OUTLIVES_ITS_CREATOR, max_restarts=-1,
        max_task_retries=0, num_cpus=0, max_concurrency=10000,
        scheduling_strategy=on_node(node_id),
    ).remote(broker_config, broker_id, controller, port)


async def run_on_node(node_id: str, fn, *args):
    """Run a small function on a given node (e.g. to read a file on its disk)."""
    return await ray.remote(fn).options(num_cpus=0, max_retries=0, scheduling_strategy=on_node(node_id)).remote(*args)


def partition_class(topic: str):
    """A partition's leader actor: plain for user topics; for an internal topic, the coordinator
    whose state that partition holds (its shard moves with the partition's leadership)."""
    from actors import internal_topics
    if topic == internal_topics.CONSUMER_OFFSETS:
        from actors.group_coordinator.actor import GroupCoordinatorActor
        return GroupCoordinatorActor
    if topic == internal_topics.SHARE_GROUP_STATE:
        from actors.share_coordinator.actor import ShareCoordinatorActor
        return ShareCoordinatorActor
    from actors.partition.actor import PartitionActor
    return PartitionActor


@functools.cache
def _remote(cls):
    """A class made remote once: each ray.remote() of it exports the class to the GCS again, which
    blocks the caller (the controller, starting many replicas) for a good part of a second."""
    return ray.remote(cls)


def start_partition(spec: dict[str, Any], node_id: str):
    """One actor per topic-partition replica, pinned to its broker's node, whose disk holds its log."""
    return _remote(partition_class(spec["topic"])).options(
        name=partition_name(spec["topic_id"], spec["partition"], spec["broker_id"]), namespace=NAMESPACE, lifetime=OUTLIVES_ITS_CREATOR,
        max_restarts=-1, max_task_retries=0, num_cpus=0, max_concurrency=10000,
        scheduling_strategy=on_node(node_id),
    ).remote(spec)
