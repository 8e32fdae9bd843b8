"""What handlers see: the broker's identity and configs, the current metadata image, and typed
clients for the actors they call. Ray stays behind `RayPartitions` and `RayController`; tests may
hand handlers other implementations of the same methods.

A gateway serves the data path (produce, fetch, share fetch) only for partitions whose leader is
its own broker, over the Unix socket each of those partition replicas listens on; for any other
partition the handlers answer NOT_LEADER_OR_FOLLOWER, as a Kafka broker does. While the broker's
session with the controller may have expired (broker_session.py) it serves as leader of nothing
and leaves itself out of the brokers it describes, as the controller would after fencing it.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


from actors import controller_client
from actors.gateway.broker_session import BrokerSession
from actors.gateway.partition_client import DataPaths, RayPartition, SocketPartition
from actors.gateway.txn_verifications import TxnVerifications
from actors.security.access import ALLOW_ALL, Access, authorizer_config, connection_host
from actors.security.authorizer import StandardAuthorizer
from actors.security.inter_broker import broker_credentials
from actors.security.principal import BROKER_USER

log = logging.getLogger("kray.gateway")


class PartitionClient(Protocol):
    """A partition leader as the data-path handlers see it (partition_client.SocketPartition)."""
    async def produce(self, records: Any, *, leader_epoch: int, acks: int, timeout_ms: int) -> Any: ...
    async def fetch(self, offset: int, max_bytes: int, *, leader_epoch: int, isolation_level: int) -> Any: ...
    async def replica_fetch(self, replica_id: int, offset: int, max_bytes: int, *, leader_epoch: int,
                            last_fetched_epoch: int) -> Any: ...
    async def wait_for_data(self, offset: int, timeout_ms: int, replica: bool = False) -> bool: ...
    async def list_offsets(self, timestamp: int, *, leader_epoch: int, isolation_level: int) -> Any: ...
    async def describe_producers(self) -> tuple[int, list]: ...


CONTROLLER_RETRY_S = 30.0
CATCH_UP_TIMEOUT_S = 5.0  # a request waiting for a route waits this long for the controller at most
BROKER_READY_TIMEOUT_S = 120.0  # broker_ready waits for the broker's replicas to recover and listen
# creating partitions answers once their replicas listen (the controller waits up to 60 s for them)
PARTITIONS_COMMAND_TIMEOUT_S = 90.0


class RayController:
    """Typed wrappers around the controller actor's methods, each attempt bounded by a timeout
    (actors/controller_client.py). Commands wait `controller.socket.timeout.ms` per attempt; while
    Ray restarts the controller they are retried (with backoff, for up to CONTROLLER_RETRY_S)
    instead of failing the client's request. A create that did land before its answer was lost is
    recognized by its creation id and answers success (Kafka answers TOPIC_ALREADY_EXISTS to a
    retry of its own creation); a retry of a deletion answers UNKNOWN_TOPIC_OR_PARTITION, as in Kafka."""

    def __init__(self, handle, config: dict | None = None):
        self.handle = handle
        self.timeout_s = controller_client.socket_timeout_s(config or {})

    async def _call(self, method: str, *args, timeout_s: float | None = None):
        return await controller_client.call(self.handle, method, *args, timeout_s=timeout_s or self.timeout_s,
                                            retry_for_s=CONTROLLER_RETRY_S)

    async def create_topic(self, name, num_partitions, replication_factor, configs, validate_only, assignments):
        # one creation id for every attempt: a retry of a creation that landed answers its success
        return await self._call("create_topic", name, num_partitions, replication_factor, configs, validate_only,
                                assignments, uuid.uuid4().hex,
                                timeout_s=max(self.timeout_s, PARTITIONS_COMMAND_TIMEOUT_S))

    async def delete_topic(self, name):
        return await self._call("delete_topic", name)

    async def create_partitions(self, name, count, validate_only):
        return await self._call("create_partitions", name, count, validate_only,
                                timeout_s=max(self.timeout_s, PARTITIONS_COMMAND_TIMEOUT_S))

    async def alter_topic_configs(self, name, configs, incremental, validate_only):
        return await self._call("alter_topic_configs", name, configs, incremental, validate_only)

    async def alter_group_configs(self, group_id, configs, incremental, validate_only):
        return await self._call("alter_group_configs", group_id, configs, incremental, validate_only)

    async def topic_configs(self, name):
        return await self._call("topic_configs", name)

    async def quorum_status(self):
        """The dedicated controller's voter's QuorumStatus (DescribeQuorum), None with combined voters."""
        return await self._call("quorum_status")

    async def allocate_producer_id(self):
        return await self._call("allocate_producer_id")

    async def ensure_internal_topic(self, name):
        return await controller_client.ensure_internal_topic(self.handle, name, retry_for_s=CONTROLLER_RETRY_S)

    async def wait_for_metadata(self, known_version, timeout_s):
        return await controller_client.wait_for_metadata(self.handle, known_version, timeout_s,
                                                         retry_for_s=CONTROLLER_RETRY_S)

    async def heartbeat(self, broker_id, broker_epoch, timeout_s):
        """One attempt (the heartbeat loop is the retry), waiting up to `timeout_s` for the answer."""
        return await controller_client.call(self.handle, "heartbeat", broker_id, broker_epoch, timeout_s=timeout_s)

    async def register_broker(self, info, gateway):
        return await self._call("register_broker", info, gateway)

    async def broker_ready(self, broker_id):
        return await self._call("broker_ready", broker_id, timeout_s=BROKER_READY_TIMEOUT_S)

    async def create_acls(self, bindings):
        return await self._call("create_acls", bindings)

    async def delete_acls(self, filters):
        return await self._call("delete_acls", filters)

    async def alter_user_scram_credentials(self, deletions, upsertions):
        return await self._call("alter_user_scram_credentials", deletions, upsertions)

    async def alter_client_quotas(self, entries, validate_only):
        return await self._call("alter_client_quotas", entries, validate_only)

    async def controller_mutation_throttle_ms(self, user, client_id):
        return await self._call("controller_mutation_throttle_ms", user, client_id)

    async def record_controller_mutations(self, user, client_id, partitions):
        return await self._call("record_controller_mutations", user, client_id, partitions)

    async def alter_partition_reassignments(self, topics, allow_replication_factor_change):
        """(a retry of a move that landed changes nothing: the same target is no change)"""
        return await self._call("alter_partition_reassignments", topics, allow_replication_factor_change)

    async def alter_broker_configs(self, broker, configs, validate_only):
        return await self._call("alter_broker_configs", broker, configs, validate_only)

    async def list_partition_reassignments(self, topics):
        return await self._call("list_partition_reassignments", topics)

    async def elect_leaders(self, election_type, partitions):
        return await self._call("elect_leaders", election_type, partitions)


@dataclass
class GatewayContext:
    broker_id: int
    config: dict[str, Any]
    controller: Any
    # (key, listener address) -> the data-path client of a partition this broker leads (default:
    # a SocketPartition over this gateway's connection to that listener)
    client_for: Callable[[tuple[uuid.UUID, int], str], Any] | None = None
    metadata: Any = None  # actors.controller.image.MetadataImage, replaced whole on each refresh
    advertised: list[tuple[int, int, int]] = field(default_factory=list)
    share_sessions: Any = None
    _clients: dict[tuple[uuid.UUID, int], Any] = field(default_factory=dict)
    _addresses: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    _catching_up: asyncio.Lock = field(default_factory=asyncio.Lock)
    _caught_up_at: float = float("-inf")  # monotonic time a catch-up asked the controller
    # the broker's session with the controller (set once registered; monotonic milliseconds)
    session: BrokerSession | None = None
    published: Any = None  # the controller's image as received (`metadata` is what this broker serves)
    # this broker's voter of the metadata quorum (quorum_shell/node.py QuorumNode), when it runs one
    quorum: Any = None

    def __post_init__(self):
        # with authorizer.class.name set: ACLs from the metadata image, nothing allowed before the
        # first image but what super.users and allow.everyone.if.no.acl.found allow
        self._broker_scram = broker_credentials(self.config)  # (salted once: PBKDF2 is slow on purpose)
        self.authorizer_config = authorizer_config(self.config)
        self.authorizer = StandardAuthorizer(self.authorizer_config) if self.authorizer_config else None
        self._acl_version: int | None = None
        # SCRAM credentials per mechanism (user -> credential), from the metadata image; a login
        # reads the mapping current at its SaslHandshake
        self._scram: dict = {}
        self._scram_version: int | None = None
        from actors.gateway.fetch_sessions import SESSION_CACHE_SLOTS_DEFAULT, FetchSessions
        from actors.gateway.share_sessions import ShareSessionCache
        self.share_sessions = ShareSessionCache(int(self.config.get("group.share.max.share.sessions", 2000)))
        self.fetch_sessions = FetchSessions(int(self.config.get("max.incremental.fetch.session.cache.slots",
                                                                SESSION_CACHE_SLOTS_DEFAULT)))
        self.data_paths = DataPaths()
        # (transactional id, producer id, epoch, topic, partition) a transactional Produce v12+ added here, oldest
        # first (actors/gateway/handlers/transactions.py add_produced_partitions)
        self.txn_partitions_added: collections.OrderedDict = collections.OrderedDict()
        # transaction version 1 partitions verified with their coordinator (KIP-890 part 1)
        self.txn_verifications = TxnVerifications()
        self.quota_throttles: dict = {}  # quota key -> actors.quotas.Throttles (actors/gateway/quota_throttles.py)
        self.connection_rates = None  # actors.quotas.ConnectionRates, made at the first connection_creation_rate
        self.connection_gate = None  # actors.gateway.connection_gate.ConnectionGate, made by the first listener
        if self.client_for is None:
            self.client_for = lambda key, address: SocketPartition(address, key, self.data_paths)

    def fenced(self) -> bool:
        """This broker's session may have expired (the controller may have fenced it and moved its
        leadership elsewhere): it serves as leader of nothing until the controller answers again."""
        return self.session is not None and (self.session.lost or self.session.expired(monotonic_ms()))

    def set_metadata(self, image) -> None:
        self.published = image
        self.metadata = image
        if self.session is not None and self.session.lost and self.broker_id in image.brokers:
            # what the controller would publish once it fenced this broker: without it, so that no
            # partition it leads is advertised (Metadata answers LEADER_NOT_AVAILABLE for them);
            # the routes below stay (followers fetch; `partition` refuses clients)
            self.metadata = dataclasses.replace(image, brokers={b: info for b, info in image.brokers.items()
                                                                if b != self.broker_id})
        acl_version = getattr(image, "acl_version", 0)
        if self.authorizer_config is not None and acl_version != self._acl_version:
            # built whole, then swapped in: requests in flight finish with the ACLs they started with
            self.authorizer = StandardAuthorizer(self.authorizer_config, getattr(image, "acls", ()))
            self._acl_version = acl_version
        scram_version = getattr(image, "scram_version", 0)
        if scram_version != self._scram_version:
            from actors.security.scram_credentials import by_mechanism
            self._scram = by_mechanism(getattr(image, "scram_credentials", {}))
            self._scram_version = scram_version
        clients, addresses = {}, {}
        for key, address in (image.partition_listeners.items() if self.broker_id in image.brokers else ()):
            topic = image.topic_by_id(key[0])
            if topic is None or key[1] >= len(topic.partitions) or topic.partitions[key[1]].leader != self.broker_id:
                continue
            same = key in self._clients and self._addresses.get(key) == address
            clients[key] = self._clients[key] if same else self.client_for(key, address)
            addresses[key] = address
        self._clients, self._addresses = clients, addresses
        self.data_paths.keep_only(set(addresses.values()))

    def scram_credentials(self, mechanism) -> dict:
        """user -> ScramCredential of one mechanism (actors.security.scram.ScramMechanism):
        the users' from the metadata, and Kray's own brokers' (User:kray-broker, whose name no
        user's credential may take: it is a super user)."""
        users = self._scram.get(mechanism, {})
        if BROKER_USER in users:
            users = {name: c for name, c in users.items() if name != BROKER_USER}
        broker = self._broker_scram.get(mechanism)
        return {**users, **broker} if broker else users

    def access(self, connection) -> Access:
        """What a request on `connection` may do: checked against the current ACLs, so an ACL change
        applies to the next request of every live connection. Connections of no listener (a front
        end started without listener settings, as tests do) and handlers called without a
        connection are not checked."""
        if self.authorizer is None or connection is None or getattr(connection, "listener_name", None) is None:
            return ALLOW_ALL
        return Access(self.authorizer, connection.principal, connection_host(connection))

    def partition(self, topic_id: uuid.UUID, index: int, follower: bool = False):
        """The data-path client of a partition this broker leads, else None; None for clients also
        while fenced (checked at each lookup, so no request is routed a moment after the session ran
        out). Followers still fetch while it is fenced: the replica fences stale leader epochs
        itself, and a controller that is merely away (restarting) then finds every ISR intact;
        records the followers take were appended by a leader that was in the ISR, as in Kafka."""
        client = self._clients.get((topic_id, index))
        return None if client is None or (not follower and self.fenced()) else client

    def led_partitions(self) -> list:
        """The data-path clients of every partition this broker leads by its last metadata (kept
        while fenced)."""
        return list(self._clients.values())

    def any_partition(self, topic_id: uuid.UUID, index: int) -> RayPartition | None:
        """A partition on any broker, for admin steps (Ray calls)."""
        handle = self.metadata.partition_replicas.get((topic_id, index)) if self.metadata else None
        return RayPartition(handle) if handle is not None else None

    async def catch_up_metadata(self) -> None:
        """Make the image at least as new as the controller's was when this was called: before a
        request that changes a partition is refused for want of a route, its answer is decided on
        metadata no older than what the client routed by (another broker may have told it first).
        Concurrent callers share one controller call where it was asked after they called."""
        if self.fenced():  # the controller is away: refuse on the image we have, at once
            return
        asked_at = time.monotonic()
        async with self._catching_up:
            if self._caught_up_at >= asked_at:
                return
            started = time.monotonic()
            try:
                await asyncio.wait_for(self.refresh_metadata(), CATCH_UP_TIMEOUT_S)
            except Exception as e:  # the controller is away: decide on the image we have
                log.warning("could not catch up with the controller's metadata: %r", e)
                return
            self._caught_up_at = started

    async def refresh_metadata(self) -> None:
        """Pull the controller's newest image now (after an admin change made through us)."""
        image = await self.controller.wait_for_metadata(-1, 0)
        if self.metadata is None or image.version >= self.metadata.version:
            self.set_metadata(image)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000
