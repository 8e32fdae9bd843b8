"""The names Kray's Ray actors are registered under, in one namespace: how any actor or tool
finds another (`ray.get_actor(gateway_name(1), namespace=NAMESPACE)`). A bottom module: it imports
nothing of Kray's, so every layer may use it."""
from __future__ import annotations

NAMESPACE = "kray"
CONTROLLER_NAME = "controller"


def controller_name(voter_id: int | None = None) -> str:
    """The dedicated controller, or (combined voters) the controller of one voting broker's node."""
    return CONTROLLER_NAME if voter_id is None else f"{CONTROLLER_NAME}-{voter_id}"


def gateway_name(broker_id: int) -> str:
    return f"gateway-{broker_id}"


def shard_name(broker_id: int, index: int) -> str:
    """A shard actor: one of the `num.partition.shards` hosts of a broker's partition replicas."""
    return f"shard-{broker_id}-{index}"
