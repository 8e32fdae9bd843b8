"""The controller's pure state machine: brokers, topics (with topic ids), partitions, placement,
per-topic configs, producer-id blocks, ACL bindings and SCRAM credentials.

Every command validates, then returns the metadata records that express its effect; `apply` is the
only place state changes, so replaying the metadata log rebuilds exactly the same state.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from actors.config_schema import BROKER_DEFAULTS, ConfigError, topic_config_defaults, validate_dynamic_broker_configs, \
    validate_group_configs, validate_topic_configs
from actors.topic_names import topic_name_error
from protocol.errors import ErrorCode

from actors.security.authorizer import AclBinding, AclBindingFilter, acl_binding_problem, binding_from_row, \
    binding_row
from actors.security import scram_credentials
from actors import quotas

from .elections import DEFAULT_BROKER_SESSION_TIMEOUT_MS, PREFERRED, RECORD_TYPES as REPLICATION_RECORD_TYPES, \
    UNCLEAN, ReplicationControl, reassigning

PARTITIONS_PER_TOPIC_MAX = 10000
PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    node_id: str = ""  # the Ray node that hosts this broker
    # advertised listener name -> (host, port); host/port above are the inter-broker listener's
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)


@dataclass
class PartitionState:
    index: int
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = 0  # bumped by every leader or ISR change (KRaft's partition epoch)
    # a reassignment in progress (KIP-455): the replicas being added and removed; `replicas` holds both
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)


@dataclass
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionState]
    configs: dict[str, Any]  # overrides only; effective = defaults | configs
    internal: bool = False
    creation_id: str | None = None  # the CreateTopics that made it: its retries are answered as its success


@dataclass
class ControllerResult:
    """What a command answers: an error code (0 on success), a message, and records to persist."""
    error_code: int = 0
    message: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    broker_epoch: int = -1  # register_broker: the new incarnation's epoch
    validated: dict[str, Any] | None = None  # create_topic validate_only: what the topic would be


def _partition_state(record: dict[str, Any]) -> PartitionState:
    """Logs written before brokers were nodes also carry an `endpoint_id`: no longer used."""
    return PartitionState(**{k: v for k, v in record.items() if k != "endpoint_id"})


class ControllerCore:
    def __init__(self, broker_config: dict[str, Any], cluster_id: str):
        self.broker_config = broker_config
        self.cluster_id = cluster_id
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicState] = {}
        self.topics_by_id: dict[uuid.UUID, TopicState] = {}
        self.next_producer_id = 0
        self.producer_id_limit = 0  # ids below this are reserved in the log
        self.metadata_version = 0
        self.group_configs: dict[str, dict[str, Any]] = {}
        self.acls: dict[AclBinding, None] = {}  # ACL bindings, in the order they were created
        self.acl_version = 0  # ACL records applied: gateways rebuild their authorizer when it moves
        # SCRAM credentials (KIP-554), keyed (user name, mechanism): salts, iterations and keys only
        self.scram_credentials: dict[scram_credentials.CredentialKey, Any] = {}
        self.scram_version = 0  # SCRAM records applied: gateways re-index credentials when it moves
        self.client_quotas: dict[quotas.Entity, dict[str, float]] = {}  # (KIP-546) entity -> key -> value
        # partitions being reassigned, keyed as ReplicationControl's ((topic id bytes, index)), and the
        # topics whose replica placement changed since the shell last looked (`take_placement_changes`)
        self.reassigning: set[tuple[bytes, int]] = set()
        # dynamic broker configs (the replication throttles): broker id as a string, or "" for the cluster's
        # default -> key -> value (overrides of the static broker config)
        self.dynamic_broker_configs: dict[str, dict[str, Any]] = {}
        self.placement_changed: set[uuid.UUID] = set()
        # liveness, leaders, epochs and ISRs: partition keys are (topic_id bytes, index), the
        # partition objects are this core's own PartitionStates (updated in place by its records)
        self.replication = ReplicationControl(
            broker_session_timeout_ms=int(broker_config.get("broker.session.timeout.ms",
                                                            DEFAULT_BROKER_SESSION_TIMEOUT_MS)),
            unclean_leader_election_enable=self._unclean_leader_election_enable,
            on_apply=self._replication_applied)

    # ---- queries -------------------------------------------------------------------------
    def effective_configs(self, topic: TopicState) -> dict[str, Any]:
        return topic_config_defaults(self.broker_config) | topic.configs

    def controller_id(self) -> int:
        """The broker named as controller in Metadata and DescribeCluster: clients send it the
        requests any broker forwards to the controller (as a KRaft broker names a live broker), so
        a live one while there is one."""
        return min(self.live_brokers() or self.brokers, default=-1)

    def live_brokers(self) -> list[int]:
        """Registered, unfenced brokers: where new replicas may go (Kafka places on unfenced ones)."""
        return sorted(b for b in self.brokers if self.replication.is_live(b))

    def draining_brokers(self) -> set[int]:
        """Brokers being removed (the dynamic broker config kray.broker.draining, set by kray remove-broker or for
        a node Ray drains): every replica leaves them, and new partitions are not placed on them (as Kafka's
        cordoned brokers, KIP-1066)."""
        return {int(b) for b, configs in self.dynamic_broker_configs.items()
                if b.isdigit() and configs.get("kray.broker.draining") in (True, "true")}

    def placeable_brokers(self) -> list[int]:
        """Live brokers that new replicas may go to: not being drained."""
        draining = self.draining_brokers()
        return [b for b in self.live_brokers() if b not in draining]

    def unregister_broker(self, broker_id: int) -> ControllerResult:
        """A drained broker leaves the cluster (Kafka's UnregisterBroker): fenced (it holds no replica, so no
        leader moves), then forgotten. Refused while any partition still places a replica on it."""
        if broker_id not in self.brokers:
            return ControllerResult(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
        holding = [f"{t.name}-{p.index}" for t in self.topics.values() for p in t.partitions if broker_id in p.replicas]
        if holding:
            return ControllerResult(ErrorCode.INVALID_REQUEST, f"broker {broker_id} still holds replicas of "
                                                               f"{len(holding)} partitions ({', '.join(holding[:5])}"
                                                               f"...): drain it first")
        fenced = self.replication.broker_died(broker_id).records
        unregistered = self._commit([{"type": "unregister_broker", "broker_id": broker_id}]).records
        return ControllerResult(records=fenced + unregistered)

    def _unclean_leader_election_enable(self, key: Any) -> bool:
        topic = self.topics_by_id.get(uuid.UUID(bytes=key[0])) if isinstance(key, tuple) else None
        value = topic.configs.get("unclean.leader.election.enable") if topic is not None else None
        if value is None:
            value = self.broker_config.get("unclean.leader.election.enable", False)
        return value in (True, "true", "True")

    def _replication_applied(self, record: dict[str, Any]) -> None:
        if record["type"] == "partition_change":
            key = tuple(record["partition"])
            if record.get("adding") or record.get("removing"):
                self.reassigning.add(key)
                self.placement_changed.add(uuid.UUID(bytes=key[0]))
            elif key in self.reassigning:  # completed or cancelled: replicas left
                self.reassigning.discard(key)
                self.placement_changed.add(uuid.UUID(bytes=key[0]))
        self.metadata_version += 1

    def take_placement_changes(self) -> list[TopicState]:
        """The topics whose replica placement changed (a reassignment started, moved on, completed or
        was cancelled) since the last call: their new replicas start, removed ones stop."""
        changed, self.placement_changed = self.placement_changed, set()
        return [self.topics_by_id[t] for t in changed if t in self.topics_by_id]

    def _partition_key(self, name: str, index: int) -> tuple[bytes, int] | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.topic_id.bytes, index

    def replication_outcome(self, records: list[dict[str, Any]], error_code: int = 0) -> ControllerResult:
        """A ReplicationControl decision as an ControllerResult the shell persists like any other."""
        return ControllerResult(error_code, None, records)

    # ---- commands ------------------------------------------------------------------------
    def register_broker(self, info: BrokerInfo, now_ms: int = 0) -> ControllerResult:
        """A broker (re)starts: its endpoint, a new broker epoch (fencing its previous incarnation,
        whose partitions get new leaders), then unfenced at once: Kray's gateway registers only
        once it follows the metadata, which is what KRaft waits for before unfencing."""
        outcome = self._commit([{"type": "broker", "broker_id": info.broker_id, "host": info.host,
                                 "port": info.port, "rack": info.rack, "node_id": info.node_id,
                                 "endpoints": {name: list(address) for name, address in info.endpoints.items()}}])
        registered = self.replication.register_broker(info.broker_id, now_ms)
        unfenced = self.replication.heartbeat(info.broker_id, registered.broker_epoch, now_ms)
        outcome.records += registered.records + unfenced.records
        outcome.broker_epoch = registered.broker_epoch
        return outcome

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, Any], *, internal: bool = False,
                     assignments: dict[int, list[int]] | None = None,
                     validate_only: bool = False, creation_id: str | None = None) -> ControllerResult:
        """`creation_id`, unique per topic of a CreateTopics request, makes the creation idempotent:
        a retry of it (its answer lost to a timeout or a controller failover, after the record was
        committed) finds the topic it made and succeeds, where another request's answers
        TOPIC_ALREADY_EXISTS."""
        problem = topic_name_error(name)
        if problem:
            return ControllerResult(ErrorCode.INVALID_TOPIC_EXCEPTION, problem + "; use letters, digits, '.', '_' or '-'")
        if name in self.topics:
            if creation_id is not None and self.topics[name].creation_id == creation_id:
                return ControllerResult()
            return ControllerResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")  # Kafka's words
        collides = next((t for t in self.topics if t.replace(".", "_") == name.replace(".", "_")), None)
        if collides:
            return ControllerResult(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                    f"topic {name!r} collides with existing topic {collides!r} ('.' and '_' collide in metric names)")
        if name.startswith("__") and not internal:
            return ControllerResult(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic names starting with '__' are reserved for internal topics")
        if assignments:
            num_partitions = len(assignments)
            replication_factor = len(next(iter(assignments.values())))
        if num_partitions == -1:
            num_partitions = int(self.broker_config["num.partitions"])
        if replication_factor == -1:
            replication_factor = int(self.broker_config["default.replication.factor"])
        if not 1 <= num_partitions <= PARTITIONS_PER_TOPIC_MAX:
            return ControllerResult(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}")
        if replication_factor < 1:
            return ControllerResult(ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be at least 1")
        live = len(self.placeable_brokers())
        if replication_factor > live:
            return ControllerResult(ErrorCode.INVALID_REPLICATION_FACTOR,
                                    f"replication factor {replication_factor} is larger than the {live} available "
                                    f"brokers" + (" (brokers being removed take no new partitions)"
                                                  if self.draining_brokers() else ""))
        try:
            typed = validate_topic_configs(configs)
        except ConfigError as e:
            return ControllerResult(ErrorCode.INVALID_CONFIG, str(e))
        placement = assignments or self._place(len(self.topics), 0, num_partitions, replication_factor)
        if validate_only:  # answered as Kafka does: the partitions, replicas and configs it would have
            return ControllerResult(validated={"num_partitions": num_partitions, "replication_factor": replication_factor,
                                               "configs": topic_config_defaults(self.broker_config) | typed})
        topic_id = uuid.uuid4()
        record = {
            "type": "topic", "name": name, "topic_id": topic_id.bytes, "internal": internal, "configs": typed,
            "partitions": [{"index": i, "replicas": placement[i], "leader": placement[i][0], "leader_epoch": 0,
                            "isr": placement[i]} for i in range(num_partitions)],
        }
        if creation_id is not None:
            record["creation_id"] = creation_id
        return self._commit([record])

    def delete_topic(self, name: str) -> ControllerResult:
        topic = self.topics.get(name)
        if topic is None:
            return ControllerResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if not self.broker_config["delete.topic.enable"]:
            return ControllerResult(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false on this cluster")
        if topic.internal:
            return ControllerResult(ErrorCode.INVALID_TOPIC_EXCEPTION, f"internal topic {name!r} cannot be deleted")
        return self._commit([{"type": "delete_topic", "topic_id": topic.topic_id.bytes}])

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> ControllerResult:
        topic = self.topics.get(name)
        if topic is None:
            return ControllerResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count <= current:
            return ControllerResult(ErrorCode.INVALID_PARTITIONS,
                                    f"topic {name!r} has {current} partitions; the new count must be larger")
        if count > PARTITIONS_PER_TOPIC_MAX:
            return ControllerResult(ErrorCode.INVALID_PARTITIONS, f"at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic")
        rf = len(topic.partitions[0].replicas)
        if rf > len(self.placeable_brokers()):
            return ControllerResult(ErrorCode.INVALID_REPLICATION_FACTOR, "not enough brokers for the topic's replication factor")
        if validate_only:
            return ControllerResult()
        placement = self._place(len(self.topics), current, count - current, rf)
        return self._commit([{"type": "partitions", "topic_id": topic.topic_id.bytes, "added": [
            {"index": current + i, "replicas": placement[i], "leader": placement[i][0], "leader_epoch": 0,
             "isr": placement[i]} for i in range(count - current)]}])

    def alter_topic_configs(self, name: str, configs: dict[str, Any], *, incremental: bool,
                            validate_only: bool = False) -> ControllerResult:
        topic = self.topics.get(name)
        if topic is None:
            return ControllerResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        try:
            typed = validate_topic_configs({k: v for k, v in configs.items() if v is not None})
        except ConfigError as e:
            return ControllerResult(ErrorCode.INVALID_CONFIG, str(e))
        merged = dict(topic.configs) if incremental else {}
        merged.update(typed)
        for key in [k for k, v in configs.items() if v is None]:
            merged.pop(key, None)
        if validate_only:
            return ControllerResult()
        return self._commit([{"type": "topic_configs", "topic_id": topic.topic_id.bytes, "configs": merged}])

    def alter_group_configs(self, group_id: str, configs: dict[str, Any], *, incremental: bool,
                            validate_only: bool = False) -> ControllerResult:
        """Group-level configs (KIP-932 share group configs); None deletes a key."""
        if not group_id:
            return ControllerResult(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
        try:
            typed = validate_group_configs({k: v for k, v in configs.items() if v is not None}, self.broker_config)
        except ConfigError as e:
            return ControllerResult(ErrorCode.INVALID_CONFIG, str(e))
        dlq_topic = typed.get("errors.deadletterqueue.topic.name")
        if dlq_topic and dlq_topic in self.topics and not self.effective_configs(self.topics[dlq_topic]).get(
                "errors.deadletterqueue.group.enable"):
            return ControllerResult(ErrorCode.INVALID_CONFIG, f"topic {dlq_topic!r} cannot be a dead-letter topic: its "
                                                     "errors.deadletterqueue.group.enable is not true (KIP-1191)")
        merged = dict(self.group_configs.get(group_id, {})) if incremental else {}
        merged.update(typed)
        for key in [k for k, v in configs.items() if v is None]:
            merged.pop(key, None)
        if validate_only:
            return ControllerResult()
        return self._commit([{"type": "group_configs", "group_id": group_id, "configs": merged}])

    def alter_broker_configs(self, broker: str, configs: dict[str, Any], *, validate_only: bool = False) -> ControllerResult:
        """IncrementalAlterConfigs of a BROKER resource: `broker` is a broker id, or "" for the cluster's
        default; None deletes a key (a key that is not set: nothing to delete, no error, as Kafka)."""
        if broker != "" and not (broker.isdigit() and int(broker) >= 0):
            return ControllerResult(ErrorCode.INVALID_REQUEST, f"broker {broker!r}: a broker id, or \"\" for the cluster's "
                                                      f"default")
        try:
            typed = validate_dynamic_broker_configs({k: v for k, v in configs.items() if v is not None})
            validate_dynamic_broker_configs({k: BROKER_DEFAULTS.get(k) for k, v in configs.items() if v is None})
        except ConfigError as e:
            return ControllerResult(ErrorCode.INVALID_CONFIG, str(e))
        merged = dict(self.dynamic_broker_configs.get(broker, {}))
        merged.update(typed)
        for key in [k for k, v in configs.items() if v is None]:
            merged.pop(key, None)
        if validate_only or merged == self.dynamic_broker_configs.get(broker, {}):
            return ControllerResult()
        return self._commit([{"type": "broker_configs", "broker": broker, "configs": merged}])

    def create_acls(self, bindings: list[AclBinding]) -> tuple[list[tuple[int, str | None]], ControllerResult]:
        """CreateAcls: per binding (error code, message); a binding that exists already is a success
        that adds nothing, as in Kafka's AclControlManager."""
        results, new = [], {}
        for binding in bindings:
            problem = acl_binding_problem(binding)
            if problem:
                results.append((ErrorCode.INVALID_REQUEST, problem))
                continue
            if binding not in self.acls:
                new[binding] = None
            results.append((0, None))
        if not new:
            return results, ControllerResult()
        return results, self._commit([{"type": "acls", "bindings": [binding_row(b) for b in new]}])

    def delete_acls(self, filters: list[AclBindingFilter]) -> tuple[list[tuple[int, str | None, list[AclBinding]]],
                                                                    ControllerResult]:
        """DeleteAcls: per filter (error code, message, the bindings it matched and removed)."""
        results, gone = [], {}
        for acl_filter in filters:
            problem = acl_filter.problem()
            if problem:
                results.append((ErrorCode.INVALID_REQUEST, problem, []))
                continue
            matched = [b for b in self.acls if acl_filter.matches(b)]
            gone.update(dict.fromkeys(matched))
            results.append((0, None, matched))
        if not gone:
            return results, ControllerResult()
        return results, self._commit([{"type": "remove_acls", "bindings": [binding_row(b) for b in gone]}])

    def alter_user_scram_credentials(self, deletions: list, upsertions: list
                                     ) -> tuple[list[scram_credentials.AlterResult], ControllerResult]:
        """AlterUserScramCredentials (scram_credentials.Deletion / Upsertion): per user a result;
        what succeeded is committed together."""
        results, records = scram_credentials.alter_credentials(self.scram_credentials, deletions, upsertions)
        return results, self._commit(records) if records else ControllerResult()

    def alter_client_quotas(self, entries: list[tuple[list, list]], validate_only: bool = False
                            ) -> tuple[list[tuple[int, str | None]], ControllerResult]:
        """AlterClientQuotas: entries of (entity as [(type, name or None)...], ops as [(key, value, remove)...]);
        per entry (error code, message). An entry is all or nothing, as in Kafka's ClientQuotaControlManager."""
        results, records = [], []
        for pairs, ops in entries:
            pairs = [(str(t), None if n is None else str(n)) for t, n in pairs]
            problem = quotas.entity_problem(pairs)
            entity = quotas.entity_of(pairs)
            for key, value, remove in ops:
                if problem is None and not remove:
                    problem = quotas.value_problem(entity, key, float(value))
                elif problem is None and key not in (quotas.IP_KEYS if entity[0][0] == quotas.IP
                                                     else quotas.CLIENT_KEYS):
                    problem = f"Invalid configuration key {key}"
            if problem is not None:
                results.append((ErrorCode.INVALID_REQUEST, problem))
                continue
            results.append((0, None))
            records.extend({"type": "client_quota", "entity": [list(p) for p in entity], "key": key,
                            "value": None if remove else float(value)} for key, value, remove in ops)
        if validate_only or not records:
            return results, ControllerResult()
        return results, self._commit(records)

    def alter_partition_reassignments(self, topics: list[tuple[str, list[tuple[int, list[int] | None]]]],
                                      allow_replication_factor_change: bool = True
                                      ) -> tuple[list[tuple[str, list[tuple[int, int, str | None]]]], ControllerResult]:
        """AlterPartitionReassignments (KIP-455): per topic, per partition a target replica list or
        None (cancel). Answers per topic [(partition, error code, message)]; the records of every
        partition that succeeded are committed together, as Kafka's ControllerResult.atomicOf."""
        results, records = [], []
        for name, partitions in topics:
            answers = []
            for index, target in partitions:
                key = self._partition_key(name, index)
                if key is None:
                    message = (f"Unable to find a topic named {name}." if name not in self.topics
                               else f"Unable to find partition {name}:{index}.")
                    answers.append((index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
                    continue
                error, message, decided = self.replication.reassign(
                    key, None if target is None else list(target),
                    allow_replication_factor_change=allow_replication_factor_change, name=f"{name}:{index}")
                if not error:
                    self.replication.commit(decided)  # a later entry of the request sees this one's effect
                    records += decided
                answers.append((index, error, message))
            results.append((name, answers))
        return results, ControllerResult(records=records)

    def list_partition_reassignments(self, topics: list[tuple[str, list[int]]] | None
                                     ) -> list[tuple[str, list[tuple[int, list[int], list[int], list[int]]]]]:
        """ListPartitionReassignments: per topic with a reassignment in progress (of `topics`, None:
        all), [(partition, replicas, adding, removing)]; unknown topics and partitions are left out."""
        if topics is None:
            topics = [(t.name, [p.index for p in t.partitions]) for t in self.topics.values()
                      if any(reassigning(p) for p in t.partitions)]
        found = []
        for name, indexes in topics:
            topic = self.topics.get(name)
            if topic is None:
                continue
            ongoing = [(i, list(p.replicas), list(p.adding), list(p.removing)) for i in indexes
                       if 0 <= i < len(topic.partitions) and reassigning(p := topic.partitions[i])]
            if ongoing:
                found.append((name, ongoing))
        return found

    def elect_leaders(self, election_type: int, partitions: list[tuple[str, list[int]]] | None
                      ) -> tuple[list[tuple[str, list[tuple[int, int, str | None]]]], ControllerResult]:
        """ElectLeaders (KIP-460): PREFERRED (0) or UNCLEAN (1), for the partitions named (None: all;
        then the partitions that need no election are left out of the answer, as Kafka's)."""
        if election_type not in (PREFERRED, UNCLEAN):
            raise ValueError(f"Unknown election type {election_type}")
        every = partitions is None
        if every:
            partitions = [(t.name, [p.index for p in t.partitions]) for t in self.topics.values()]
        results, records = [], []
        for name, indexes in partitions:
            answers = []
            for index in indexes:
                key = self._partition_key(name, index)
                if key is None:
                    message = (f"No such topic as {name}" if name not in self.topics
                               else f"No such partition as {name}-{index}")
                    answers.append((index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
                    continue
                error, decided = self.replication.elect(key, election_type)
                self.replication.commit(decided)
                records += decided
                if not (every and error == ErrorCode.ELECTION_NOT_NEEDED):
                    answers.append((index, error, None))
            results.append((name, answers))
        return results, ControllerResult(records=records)

    def allocate_producer_id(self) -> tuple[int, ControllerResult]:
        """Hand out the next producer id; ids are reserved in the log a block at a time."""
        outcome = ControllerResult()
        if self.next_producer_id >= self.producer_id_limit:
            outcome = self._commit([{"type": "producer_ids",
                                     "limit": self.next_producer_id + PRODUCER_ID_BLOCK_SIZE}])
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        return producer_id, outcome

    # ---- replay --------------------------------------------------------------------------
    def apply(self, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind in REPLICATION_RECORD_TYPES:
            self.replication.apply(record)  # bumps metadata_version through _replication_applied
            return
        if kind == "broker":
            self.brokers[record["broker_id"]] = BrokerInfo(record["broker_id"], record["host"], record["port"],
                                                           record.get("rack"), record.get("node_id", ""),
                                                           {name: (address[0], address[1]) for name, address
                                                            in (record.get("endpoints") or {}).items()})
        elif kind == "unregister_broker":
            self.brokers.pop(record["broker_id"], None)
            self.replication.brokers.pop(record["broker_id"], None)
        elif kind == "topic":
            topic = TopicState(record["name"], uuid.UUID(bytes=record["topic_id"]),
                               [_partition_state(p) for p in record["partitions"]],
                               dict(record["configs"]), record["internal"], record.get("creation_id"))
            self.topics[topic.name] = topic
            self.topics_by_id[topic.topic_id] = topic
            self._track_partitions(topic, topic.partitions)
        elif kind == "delete_topic":
            topic = self.topics_by_id.pop(uuid.UUID(bytes=record["topic_id"]))
            del self.topics[topic.name]
            for p in topic.partitions:
                self.replication.partitions.pop((topic.topic_id.bytes, p.index), None)
                self.reassigning.discard((topic.topic_id.bytes, p.index))
        elif kind == "partitions":
            topic = self.topics_by_id[uuid.UUID(bytes=record["topic_id"])]
            added = [_partition_state(p) for p in record["added"]]
            topic.partitions.extend(added)
            self._track_partitions(topic, added)
        elif kind == "topic_configs":
            self.topics_by_id[uuid.UUID(bytes=record["topic_id"])].configs = dict(record["configs"])
        elif kind == "group_configs":
            if record["configs"]:
                self.group_configs[record["group_id"]] = dict(record["configs"])
            else:
                self.group_configs.pop(record["group_id"], None)
        elif kind == "broker_configs":
            if record["configs"]:
                self.dynamic_broker_configs[record["broker"]] = dict(record["configs"])
            else:
                self.dynamic_broker_configs.pop(record["broker"], None)
        elif kind == "producer_ids":
            self.producer_id_limit = record["limit"]
        elif kind == "acls":
            self.acls.update(dict.fromkeys(binding_from_row(row) for row in record["bindings"]))
            self.acl_version += 1
        elif kind == "remove_acls":
            for row in record["bindings"]:
                self.acls.pop(binding_from_row(row), None)
            self.acl_version += 1
        elif kind in scram_credentials.RECORD_KINDS:
            scram_credentials.apply_record(self.scram_credentials, record)
            self.scram_version += 1
        elif kind == "client_quota":
            entity = quotas.entity_of((t, n) for t, n in record["entity"])
            values = self.client_quotas.setdefault(entity, {})
            if record["value"] is None:
                values.pop(record["key"], None)
            else:
                values[record["key"]] = record["value"]
            if not values:
                del self.client_quotas[entity]
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")
        self.metadata_version += 1

    def _track_partitions(self, topic: TopicState, partitions: list[PartitionState]) -> None:
        for p in partitions:
            self.replication.partitions[(topic.topic_id.bytes, p.index)] = p

    def finish_replay(self, now_ms: int = 0) -> None:
        """After a restart, skip the rest of the last reserved block: some of it may be in use;
        every unfenced broker gets a fresh session from now."""
        self.next_producer_id = self.producer_id_limit
        self.replication.finish_replay(now_ms)

    def _commit(self, records: list[dict[str, Any]]) -> ControllerResult:
        for record in records:
            self.apply(record)
        return ControllerResult(records=records)

    def _place(self, seed: int, first_index: int, count: int, replication_factor: int) -> dict[int, list[int]]:
        """Round-robin replicas over the live brokers, each partition's replicas on distinct brokers."""
        ids = self.placeable_brokers()
        placement = {}
        for i in range(count):
            start = (seed + first_index + i) % len(ids)
            placement[i] = [ids[(start + r) % len(ids)] for r in range(replication_factor)]
        return placement
