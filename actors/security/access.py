"""What one request may do: the broker's authorizer, the connection's principal and host.

`authorizer_config(config)` reads `authorizer.class.name` (Kafka's
`org.apache.kafka.metadata.authorizer.StandardAuthorizer` names Kray's own; empty: no authorizer,
everything allowed, as a Kafka broker without one), `super.users` and
`allow.everyone.if.no.acl.found`. Handlers ask an `Access` (see GatewayContext.access), never the
authorizer directly, so that one object answers the same way with and without an authorizer:

- without one, every check passes and authorized-operations fields list every operation the
  resource type supports (Kafka's AuthHelper does the same);
- with one, each check is StandardAuthorizer.authorize for the connection's principal and host.

Pure: no Ray, no sockets.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, TypeVar

from actors.security.authorizer import (AUTHORIZER_CLASS_NAME, CLUSTER_NAME, KAFKA_STANDARD_AUTHORIZER,
                                        SUPPORTED_OPERATIONS, AclOperation, AuthorizerConfig, ResourceType,
                                        StandardAuthorizer)
from actors.security.inter_broker import uses_generated_identity
from actors.security.principal import ANONYMOUS, BROKER_PRINCIPAL, KafkaPrincipal

AUTHORIZER_NAMES = (KAFKA_STANDARD_AUTHORIZER,)
T = TypeVar("T")


def authorizer_config(config: Mapping[str, Any]) -> AuthorizerConfig | None:
    """The authorizer's settings, or None when `authorizer.class.name` is empty (no authorizer).
    Raises ValueError naming what to set for a class Kray does not have or a bad `super.users`."""
    name = str(config.get(AUTHORIZER_CLASS_NAME) or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_NAMES:
        raise ValueError(f"{AUTHORIZER_CLASS_NAME}={name}: Kray's only authorizer has Kafka's StandardAuthorizer "
                         f"semantics; set {AUTHORIZER_CLASS_NAME}={KAFKA_STANDARD_AUTHORIZER} (or leave it empty "
                         f"for no authorizer)")
    settings = AuthorizerConfig.from_configs(config)
    if not uses_generated_identity(config):
        return settings  # the operator's inter-broker principal: in super.users or granted, as in Kafka
    # Kray's own brokers (followers fetching, with CLUSTER_ACTION) pass every check, as Kafka's
    # docs have the brokers' principal in super.users
    return dataclasses.replace(settings, super_users=settings.super_users | {str(BROKER_PRINCIPAL)})


@dataclass(frozen=True)
class Access:
    authorizer: StandardAuthorizer | None
    principal: KafkaPrincipal = ANONYMOUS
    host: str = ""

    @property
    def enforced(self) -> bool:
        return self.authorizer is not None

    def allows(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def allows_cluster(self, operation: AclOperation) -> bool:
        return self.allows(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def allows_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the principal do `operation` on some resource of this type (Kafka's authorizeByResourceType)?"""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(self.principal, self.host, operation, resource_type)

    def allowed(self, operation: AclOperation, resource_type: ResourceType, items: Iterable[T],
                name_of: Callable[[T], str] = str) -> set[str]:
        """The names among `items` the principal may do `operation` on (each name checked once)."""
        names = {name_of(item) for item in items}
        if self.authorizer is None:
            return names
        return {name for name in names if self.allows(operation, resource_type, name)}

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bitfield for one resource (bit N: operation code N)."""
        operations = SUPPORTED_OPERATIONS[resource_type]
        if self.authorizer is None:
            return sum(1 << int(op) for op in operations)
        return self.authorizer.authorized_operations(self.principal, self.host, resource_type, name, operations)


ALLOW_ALL = Access(None)


def connection_host(connection) -> str:
    """The client's address as ACL hosts name it (the peer's IP), '' when unknown."""
    peer = getattr(connection, "peer", None)
    return str(peer[0]) if peer else ""
