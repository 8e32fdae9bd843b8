"""Broker, topic and group configuration, spelled as Kafka spells it: the schema.

`BROKER_DEFAULTS` holds Kafka's shipped defaults for the keys Kray understands; a TOML file
(`configs/local.toml` by default for `kray start`) and `--override key=value` flags layer on top
(cluster/config.py loads them). Topic configs derive from broker configs the way Kafka's do
(`log.segment.bytes` is the default of the topic config `segment.bytes`). The validators, and the
effective configs the actors work with (`TopicConfig`, `ShareGroupLimits`), are here, in the
actors' layer, so that cores and shells need nothing of the tools on top.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from actors.share_partition.dead_letters import topic_name_error

BROKER_DEFAULTS: dict[str, Any] = {
    "broker.id": 0,
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "log.dirs": "./data",
    "auto.create.topics.enable": True,
    "num.partitions": 1,
    # Kray's own: how many shard actors (processes) host a broker's partition replicas; 0: as many
    # as the CPUs Ray gives the broker's node (see actors/shard/)
    "num.partition.shards": 0,
    "default.replication.factor": 1,
    "delete.topic.enable": True,
    "log.segment.bytes": 1073741824,
    "log.index.interval.bytes": 4096,
    "log.retention.ms": 604800000,
    "log.retention.bytes": -1,
    "log.retention.check.interval.ms": 300000,
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": 9223372036854775807,
    "log.message.timestamp.after.max.ms": 3600000,
    "log.roll.ms": 604800000,
    "log.roll.jitter.ms": 0,
    "log.segment.delete.delay.ms": 60000,
    "log.flush.interval.messages": 9223372036854775807,
    "log.flush.interval.ms": 9223372036854775807,
    "log.preallocate": False,
    "log.local.retention.ms": -2,
    "log.local.retention.bytes": -2,
    "compression.type": "producer",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "message.max.bytes": 1048588,
    "min.insync.replicas": 1,
    "socket.request.max.bytes": 104857600,
    "connections.max.idle.ms": 600000,
    # Kafka's broker-wide connection limits (actors/connection_limits.py), dynamic broker configs too
    "max.connections": 2147483647,
    "max.connections.per.ip": 2147483647,
    "max.connections.per.ip.overrides": "",
    "max.connection.creation.rate": 2147483647,
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.segment.bytes": 104857600,
    "share.coordinator.state.topic.num.partitions": 50,
    "share.coordinator.state.topic.segment.bytes": 104857600,
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.state.topic.min.isr": 2,
    # transactions (Kafka 4's shipped defaults)
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.state.log.segment.bytes": 104857600,
    "transaction.max.timeout.ms": 900000,
    # KIP-890 part 1: a transaction version 1 Produce is appended only to a partition the coordinator has in the
    # producer's transaction (actors/gateway/handlers/transactions.py); version 2 adds partitions whatever this says
    "transaction.partition.verification.enable": True,
    "quota.window.num": 11,                # client quotas' rate: samples (actors/quotas.py)
    "quota.window.size.seconds": 1,        # ... of this length
    "controller.quota.window.num": 11,     # controller_mutation_rate's bucket: quota x samples x length (KIP-599)
    "controller.quota.window.size.seconds": 1,
    "transactional.id.expiration.ms": 604800000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
    "cluster.id": "",
    # replication and failover (Kafka 4's shipped defaults)
    "broker.heartbeat.interval.ms": 2000,
    "broker.session.timeout.ms": 9000,
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.max.bytes": 1048576,
    "replica.fetch.response.max.bytes": 10485760,
    "unclean.leader.election.enable": False,
    # replication throttles (bytes/s; Kafka's names), also dynamic broker configs (DYNAMIC_BROKER_CONFIGS):
    # kray reassign-partitions --throttle sets them per broker while a move runs
    "leader.replication.throttled.rate": 9223372036854775807,
    "follower.replication.throttled.rate": 9223372036854775807,
    "replica.alter.log.dirs.io.max.bytes.per.second": 9223372036854775807,
    "auto.leader.rebalance.enable": True,
    "leader.imbalance.check.interval.seconds": 300,
    # Kray's own balancer (actors/controller/balancer.py, docs/operations/balancer.md): replicas and leaders
    # moved onto brokers that join, off brokers being removed (kray remove-broker, a node Ray drains)
    "kray.balancer.enable": False,
    "kray.balancer.max.moves.in.flight": 10,
    "kray.balancer.replication.throttled.rate": 9223372036854775807,  # bytes/s per broker while it moves
    "kray.balancer.check.interval.ms": 5000,
    "kray.balancer.load.weights.enable": False,  # weigh partitions by bytes and produce rate (else by count)
    "kray.balancer.load.sample.interval.ms": 30000,  # partitions' sizes asked of their leaders' brokers this often
    "kray.balancer.voter.replacement.delay.ms": 60000,  # a voter's broker gone this long gives its vote to another
    "kray.broker.draining": False,  # a dynamic broker config: set per broker by kray remove-broker
    # classic and consumer (KIP-848) groups, committed offsets: Kafka 4's shipped defaults
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.initial.rebalance.delay.ms": 3000,
    "group.max.size": 2147483647,
    "group.consumer.session.timeout.ms": 45000,
    "group.consumer.min.session.timeout.ms": 45000,
    "group.consumer.max.session.timeout.ms": 60000,
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.min.heartbeat.interval.ms": 5000,
    "group.consumer.max.heartbeat.interval.ms": 15000,
    "group.consumer.max.size": 2147483647,
    "group.consumer.assignors": "uniform,range",
    # streams groups (KIP-1071), Kafka 4.4's shipped defaults (actors/group_coordinator/streams_group.py)
    "group.streams.session.timeout.ms": 45000,
    "group.streams.heartbeat.interval.ms": 5000,
    "group.streams.max.size": 2147483647,
    "group.streams.num.standby.replicas": 0,
    "group.streams.max.standby.replicas": 2,
    "group.streams.initial.rebalance.delay.ms": 3000,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offset.metadata.max.bytes": 4096,
    "log.cleaner.min.cleanable.ratio": 0.5,
    # the log cleaner of compacted topics (Kafka 4's shipped defaults; actors/partition/cleaner.py)
    "log.cleaner.enable": True,
    "log.cleaner.min.compaction.lag.ms": 0,
    "log.cleaner.max.compaction.lag.ms": 9223372036854775807,
    "log.cleaner.delete.retention.ms": 86400000,
    "log.cleaner.io.max.bytes.per.second": 1.7976931348623157e308,
    "log.cleaner.backoff.ms": 15000,
    "max.incremental.fetch.session.cache.slots": 1000,  # KIP-227 fetch sessions per broker
    # share groups (KIP-932), Kafka 4.2's shipped defaults
    "group.share.delivery.count.limit": 5,
    # bounds of the group configs share.delivery.count.limit and share.partition.max.record.locks
    # (KIP-1240, Kafka 4.3's defaults)
    "group.share.min.delivery.count.limit": 2,
    "group.share.max.delivery.count.limit": 10,
    "group.share.record.lock.duration.ms": 30000,
    "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000,
    "group.share.partition.max.record.locks": 2000,
    "group.share.min.partition.max.record.locks": 100,
    "group.share.max.partition.max.record.locks": 4000,
    # KIP-1263 (Kafka 4.3): the default and bounds of the group config share.assignment.interval.ms
    "group.share.assignment.interval.ms": 1000,
    "group.share.min.assignment.interval.ms": 0,
    "group.share.max.assignment.interval.ms": 15000,
    "group.share.max.share.sessions": 2000,
    "group.share.max.size": 200,
    "group.share.session.timeout.ms": 45000,
    "group.share.min.session.timeout.ms": 45000,
    "group.share.max.session.timeout.ms": 60000,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.min.heartbeat.interval.ms": 5000,
    "group.share.max.heartbeat.interval.ms": 15000,
    "group.share.assignors": "simple",
    "group.share.initialize.retry.interval.ms": 30000,
    "share.coordinator.snapshot.update.records.per.snapshot": 500,
    # KIP-1191 (Kafka 4.4): share groups' dead-letter topics: whether a missing one is created, and
    # the prefix every one's name must start with ("" allows any name)
    "errors.deadletterqueue.auto.create.topics.enable": False,
    "errors.deadletterqueue.topic.name.prefix": "dlq.",
    # listeners and security (Kafka's names and shipped defaults; actors/security/settings.py
    # reads them; each ssl.*/sasl.* key may also be set per listener as listener.name.<name>.<key>)
    "advertised.listeners": "",  # empty: the addresses of `listeners`
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "inter.broker.listener.name": None,  # unset: the listener named after security.inter.broker.protocol
    "security.inter.broker.protocol": "PLAINTEXT",
    "ssl.keystore.type": "JKS",  # Kray reads PEM only: set PEM
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.key.password": None,
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.principal.mapping.rules": "DEFAULT",
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.jaas.config": None,
    # how brokers log in to each other (actors/security/inter_broker.py): PLAIN, SCRAM-SHA-256
    # or SCRAM-SHA-512 with listener.name.<inter-broker listener>.<mechanism>.sasl.jaas.config's
    # username/password; unset (Kafka's default is GSSAPI): Kray's own User:kray-broker
    "sasl.mechanism.inter.broker.protocol": None,
    "connections.max.reauth.ms": 0,
    "connection.failed.authentication.delay.ms": 100,
    # ACLs: empty = no authorizer (everything allowed); Kafka's
    # org.apache.kafka.metadata.authorizer.StandardAuthorizer turns on Kray's own (same rules)
    "authorizer.class.name": "",
    "super.users": "",  # principals separated by ';', e.g. User:admin;User:ANONYMOUS
    "allow.everyone.if.no.acl.found": False,
    # the metadata quorum (actors/controller/quorum_shell/settings.py) keeps the controller's
    # metadata. Voters unset: one dedicated controller voter on the Ray head (Kafka's
    # process.roles=controller); broker ids, as Kafka's id@host:port list or plain ids: those brokers
    # vote (process.roles=broker,controller; configs/multinode.toml). process.roles, where set, must
    # agree. Timings are Kafka's names and defaults
    "process.roles": None,
    "controller.quorum.voters": "",
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 2000,
    "controller.quorum.election.backoff.max.ms": 1000,
    "controller.quorum.request.timeout.ms": 2000,
    "controller.quorum.retry.backoff.ms": 20,
}

# keys that may also be set for one listener as `listener.name.<listener>.<key>` (as Kafka's
# ListenerName.configPrefix); the JAAS config takes the mechanism too: listener.name.<l>.plain.sasl.jaas.config
LISTENER_SCOPED_KEYS = {key for key in BROKER_DEFAULTS if key.startswith(("ssl.", "sasl."))} | {
    "connections.max.reauth.ms", "connection.failed.authentication.delay.ms"}
LISTENER_PREFIX = "listener.name."
_LISTENER_KEY = re.compile(r"^listener\.name\.([A-Za-z0-9_-]+)\.(?:([a-z0-9-]+)\.(sasl\.jaas\.config)|(.+))$")
# Kafka's PASSWORD-typed keys: DescribeConfigs answers them without their value (is_sensitive)
SENSITIVE_KEYS = {"ssl.keystore.password", "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.key.password",
                  "ssl.truststore.password", "ssl.truststore.certificates", "sasl.jaas.config",
                  "kray.inter.broker.secret"}  # Kray's own: actors/security/inter_broker.py


def base_key(key: str) -> str | None:
    """The broker key a `listener.name.<listener>.…` key scopes to one listener, else None."""
    match = _LISTENER_KEY.match(key)
    if match is None:
        return None
    if match.group(3):
        return match.group(3)
    return match.group(4) if match.group(4) in LISTENER_SCOPED_KEYS else None


def is_sensitive(key: str) -> bool:
    return (base_key(key) or key) in SENSITIVE_KEYS

# topic config -> the broker config that supplies its default
TOPIC_CONFIG_SOURCES: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "cleanup.policy": "",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "errors.deadletterqueue.group.enable": "",  # KIP-1191: true lets a share group use the topic as its DLQ
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "preallocate": "log.preallocate",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "remote.storage.enable": "",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    "remote.log.copy.disable": "",
    "remote.log.delete.on.disable": "",
}
TOPIC_CONFIG_FIXED_DEFAULTS: dict[str, Any] = {"segment.index.bytes": 10485760, "cleanup.policy": "delete",
                                               "errors.deadletterqueue.group.enable": False,
                                               "leader.replication.throttled.replicas": "",
                                               "follower.replication.throttled.replicas": "",
                                               "remote.storage.enable": False, "remote.log.copy.disable": False,
                                               "remote.log.delete.on.disable": False}
# Kafka 4.4's topic configs that Kray accepts, validates and describes but does not act on, with why (the
# generated config reference says so too); every other topic config is honoured
TOPIC_CONFIGS_WITHOUT_EFFECT: dict[str, str] = {
    "segment.jitter.ms": "segments roll at segment.ms exactly",
    "file.delete.delay.ms": "a deleted segment's files are removed at once",
    "flush.messages": "Kray flushes as its durability rules say (acks=all: replicated), not every N messages",
    "flush.ms": "Kray flushes as its durability rules say (acks=all: replicated), not on a timer",
    "preallocate": "segment files grow as they are written",
    "local.retention.ms": "Kray has no tiered storage (remote.storage.enable is refused)",
    "local.retention.bytes": "Kray has no tiered storage (remote.storage.enable is refused)",
    "remote.log.copy.disable": "Kray has no tiered storage (remote.storage.enable is refused)",
    "remote.log.delete.on.disable": "Kray has no tiered storage (remote.storage.enable is refused)",
}

# Broker configs that Kray honours only in part, with what it does instead (the generated config reference
# says so); a broker config that supplies a topic config of TOPIC_CONFIGS_WITHOUT_EFFECT has no effect either
BROKER_CONFIGS_IN_PART: dict[str, str] = {
    "ssl.keystore.type": "PEM only: a JKS or PKCS12 keystore is refused at start",
    "ssl.truststore.type": "PEM only: a JKS or PKCS12 truststore is refused at start",
    "ssl.keystore.password": "not read: PEM keystores only (an encrypted private key takes ssl.key.password)",
    "ssl.truststore.password": "not read: PEM truststores only",
    "sasl.enabled.mechanisms": "PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are served; GSSAPI and OAUTHBEARER are not",
    "sasl.mechanism.inter.broker.protocol": "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; unset: Kray's own broker login "
                                            "(User:kray-broker), where Kafka would use GSSAPI",
    "process.roles": "broker,controller (combined voters) or controller (one dedicated controller on the Ray head); "
                     "several dedicated controller voters are not supported",
    "controller.quorum.voters": "static voters (no KIP-853 AddVoter/RemoveVoter); broker ids or Kafka's id@host:port",
    "group.share.assignment.interval.ms": "accepted, validated and described; the assignor recomputes a group's "
                                          "assignment at the next heartbeat after any change (as with 0)",
    "replica.alter.log.dirs.io.max.bytes.per.second": "accepted (a dynamic broker config too), no effect: a Kray "
                                                      "broker has one log directory",
}

# Broker configs that IncrementalAlterConfigs may change while Kray runs (for one broker, or the cluster's
# default with the resource name ""), as Kafka's dynamic broker configs: the replication throttles and the
# connection limits
DYNAMIC_BROKER_CONFIGS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                          "replica.alter.log.dirs.io.max.bytes.per.second", "kray.broker.draining",
                          "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
                          "max.connection.creation.rate")


def validate_dynamic_broker_configs(configs: dict[str, Any]) -> dict[str, Any]:
    """Dynamic broker config overrides, typed; ConfigError naming a key Kray cannot alter while it runs."""
    out = {}
    for key, value in configs.items():
        if key not in DYNAMIC_BROKER_CONFIGS:
            raise ConfigError(f"Cannot update these configs dynamically: {key} (Kray's dynamic broker configs: "
                              f"{', '.join(DYNAMIC_BROKER_CONFIGS)}; the others are set in the config file)")
        out[key] = broker_value(key, value)
    return out


def effective_dynamic_broker_config(key: str, broker_id: int, static: dict[str, Any],
                                    dynamic: dict[str, dict[str, Any]]) -> Any:
    """A dynamic broker config's value for `broker_id`: its own dynamic value, else the cluster default
    (resource name ""), else the static config."""
    for scope in (str(broker_id), ""):
        if key in dynamic.get(scope, {}):
            return dynamic[scope][key]
    return static.get(key, BROKER_DEFAULTS.get(key))


def replica_listed(replicas: str, partition: int, broker_id: int) -> bool:
    """Whether a leader/follower.replication.throttled.replicas value names replica (partition, broker)."""
    text = (replicas or "").strip()
    if text == "*":
        return True
    return any(pair.strip() == f"{partition}:{broker_id}" for pair in text.split(",") if pair.strip())

LONG_MAX = 9223372036854775807
INT_TOPIC_CONFIGS = {"segment.bytes", "segment.index.bytes", "index.interval.bytes", "retention.ms",
                     "retention.bytes", "max.message.bytes", "min.insync.replicas", "min.compaction.lag.ms",
                     "max.compaction.lag.ms", "delete.retention.ms", "segment.ms", "segment.jitter.ms",
                     "message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "compression.gzip.level",
                     "compression.lz4.level", "compression.zstd.level", "file.delete.delay.ms", "flush.messages",
                     "flush.ms", "local.retention.ms", "local.retention.bytes"}
# (least, greatest) of an integer topic config, as Kafka's ConfigDef validators have them
INT_TOPIC_CONFIG_RANGES: dict[str, tuple[int, int]] = {
    # segment.bytes: Kafka 4 refuses below 1 MiB (KIP-1030); Kray keeps 14 bytes, the pre-4.0 floor, which its
    # tests of retention and compaction rely on (Kafka's own tests use an internal config for this)
    "segment.bytes": (14, 2**31 - 1), "segment.ms": (1, LONG_MAX), "segment.jitter.ms": (0, LONG_MAX),
    "segment.index.bytes": (4, 2**31 - 1), "index.interval.bytes": (0, 2**31 - 1),
    "max.message.bytes": (0, 2**31 - 1), "min.insync.replicas": (1, 2**31 - 1),
    "min.compaction.lag.ms": (0, LONG_MAX), "max.compaction.lag.ms": (1, LONG_MAX),
    "delete.retention.ms": (0, LONG_MAX), "retention.ms": (-1, LONG_MAX), "retention.bytes": (-1, LONG_MAX),
    "message.timestamp.before.max.ms": (0, LONG_MAX), "message.timestamp.after.max.ms": (0, LONG_MAX),
    "compression.lz4.level": (1, 17), "compression.zstd.level": (-131072, 22),
    "file.delete.delay.ms": (0, LONG_MAX), "flush.messages": (1, LONG_MAX), "flush.ms": (0, LONG_MAX),
    "local.retention.ms": (-2, LONG_MAX), "local.retention.bytes": (-2, LONG_MAX),
}
FLOAT_TOPIC_CONFIGS = {"min.cleanable.dirty.ratio": (0.0, 1.0)}
COMPRESSION_TYPES = {"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}
ENUM_TOPIC_CONFIGS = {"message.timestamp.type": {"CreateTime", "LogAppendTime"}, "compression.type": COMPRESSION_TYPES}
CLEANUP_POLICIES = {"delete", "compact"}   # cleanup.policy: a list of them (compact,delete)
BOOL_TOPIC_CONFIGS = {"unclean.leader.election.enable", "errors.deadletterqueue.group.enable", "preallocate",
                      "remote.storage.enable", "remote.log.copy.disable", "remote.log.delete.on.disable"}
THROTTLED_REPLICAS_CONFIGS = {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}


class ConfigError(ValueError):
    """A config key or value Kray cannot accept; the message says which and why."""


INT_MIN, INT_MAX = -2**31, 2**31 - 1
LONG_MIN = -2**63
SHORT_MAX = 2**15 - 1
# (least, greatest) of each integer broker config: Kafka 4.4's ConfigDef validator where it has one,
# else the width of its type (INT, LONG or SHORT); tests/kafka/test_broker_configs.py compares
# them with Kafka's jars. Deliberate differences: log.segment.bytes keeps the pre-4.0 floor of 14
# bytes (as the topic config segment.bytes, see INT_TOPIC_CONFIG_RANGES); broker.id is Kafka's
# node.id (at least 0); num.partition.shards is Kray's own.
BROKER_INT_RANGES: dict[str, tuple[int, int]] = {
    "broker.id": (0, INT_MAX), "num.partitions": (1, INT_MAX), "num.partition.shards": (0, INT_MAX),
    "default.replication.factor": (INT_MIN, INT_MAX), "log.segment.bytes": (14, INT_MAX),
    "log.index.interval.bytes": (0, INT_MAX), "log.retention.ms": (LONG_MIN, LONG_MAX),
    "log.retention.bytes": (LONG_MIN, LONG_MAX), "log.retention.check.interval.ms": (1, LONG_MAX),
    "log.message.timestamp.before.max.ms": (0, LONG_MAX), "log.message.timestamp.after.max.ms": (0, LONG_MAX),
    "log.roll.ms": (LONG_MIN, LONG_MAX), "log.roll.jitter.ms": (LONG_MIN, LONG_MAX),
    "log.segment.delete.delay.ms": (0, LONG_MAX), "log.flush.interval.messages": (1, LONG_MAX),
    "log.flush.interval.ms": (LONG_MIN, LONG_MAX), "log.local.retention.ms": (-2, LONG_MAX),
    "log.local.retention.bytes": (-2, LONG_MAX), "compression.gzip.level": (1, 9), "compression.lz4.level": (1, 17),
    "compression.zstd.level": (-131072, 22), "message.max.bytes": (0, INT_MAX), "min.insync.replicas": (1, INT_MAX),
    "socket.request.max.bytes": (1, INT_MAX), "connections.max.idle.ms": (LONG_MIN, LONG_MAX),
    "max.connections": (0, INT_MAX), "max.connections.per.ip": (0, INT_MAX),
    "max.connection.creation.rate": (0, INT_MAX),
    "offsets.topic.num.partitions": (1, INT_MAX), "offsets.topic.replication.factor": (1, SHORT_MAX),
    "offsets.topic.segment.bytes": (1, INT_MAX), "share.coordinator.state.topic.num.partitions": (1, INT_MAX),
    "share.coordinator.state.topic.segment.bytes": (1, INT_MAX),
    "share.coordinator.state.topic.replication.factor": (1, SHORT_MAX),
    "share.coordinator.state.topic.min.isr": (1, SHORT_MAX), "transaction.state.log.num.partitions": (1, INT_MAX),
    "transaction.state.log.replication.factor": (1, SHORT_MAX), "transaction.state.log.min.isr": (1, INT_MAX),
    "transaction.state.log.segment.bytes": (1, INT_MAX), "transaction.max.timeout.ms": (1, INT_MAX),
    "quota.window.num": (1, INT_MAX), "quota.window.size.seconds": (1, INT_MAX),
    "controller.quota.window.num": (1, INT_MAX), "controller.quota.window.size.seconds": (1, INT_MAX),
    "transactional.id.expiration.ms": (1, INT_MAX),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (1, INT_MAX),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (1, INT_MAX),
    "broker.heartbeat.interval.ms": (INT_MIN, INT_MAX), "broker.session.timeout.ms": (INT_MIN, INT_MAX),
    "replica.lag.time.max.ms": (LONG_MIN, LONG_MAX), "replica.fetch.wait.max.ms": (INT_MIN, INT_MAX),
    "replica.fetch.max.bytes": (0, INT_MAX), "replica.fetch.response.max.bytes": (0, INT_MAX),
    "leader.replication.throttled.rate": (0, LONG_MAX), "follower.replication.throttled.rate": (0, LONG_MAX),
    "replica.alter.log.dirs.io.max.bytes.per.second": (0, LONG_MAX),
    "kray.balancer.max.moves.in.flight": (1, INT_MAX), "kray.balancer.replication.throttled.rate": (1, LONG_MAX),
    "kray.balancer.check.interval.ms": (100, INT_MAX), "kray.balancer.load.sample.interval.ms": (1000, INT_MAX),
    "kray.balancer.voter.replacement.delay.ms": (0, INT_MAX),
    "leader.imbalance.check.interval.seconds": (1, LONG_MAX), "group.min.session.timeout.ms": (INT_MIN, INT_MAX),
    "group.max.session.timeout.ms": (INT_MIN, INT_MAX), "group.initial.rebalance.delay.ms": (INT_MIN, INT_MAX),
    "group.max.size": (1, INT_MAX), "group.consumer.session.timeout.ms": (1, INT_MAX),
    "group.consumer.min.session.timeout.ms": (1, INT_MAX), "group.consumer.max.session.timeout.ms": (1, INT_MAX),
    "group.consumer.heartbeat.interval.ms": (1, INT_MAX), "group.consumer.min.heartbeat.interval.ms": (1, INT_MAX),
    "group.consumer.max.heartbeat.interval.ms": (1, INT_MAX), "group.consumer.max.size": (1, INT_MAX),
    "offsets.retention.minutes": (1, INT_MAX), "offsets.retention.check.interval.ms": (1, LONG_MAX),
    "offset.metadata.max.bytes": (INT_MIN, INT_MAX), "log.cleaner.min.compaction.lag.ms": (0, LONG_MAX),
    "log.cleaner.max.compaction.lag.ms": (1, LONG_MAX), "log.cleaner.delete.retention.ms": (0, LONG_MAX),
    "log.cleaner.backoff.ms": (0, LONG_MAX), "max.incremental.fetch.session.cache.slots": (0, INT_MAX),
    "group.share.delivery.count.limit": (2, 10), "group.share.min.delivery.count.limit": (2, 5),
    "group.share.max.delivery.count.limit": (5, 25), "group.share.record.lock.duration.ms": (1000, 3600000),
    "group.share.min.record.lock.duration.ms": (1000, 30000),
    "group.share.max.record.lock.duration.ms": (30000, 3600000),
    "group.share.partition.max.record.locks": (100, 10000), "group.share.min.partition.max.record.locks": (100, 2000),
    "group.share.max.partition.max.record.locks": (2000, 10000), "group.share.assignment.interval.ms": (0, INT_MAX),
    "group.share.min.assignment.interval.ms": (0, INT_MAX), "group.share.max.assignment.interval.ms": (0, INT_MAX),
    "group.share.max.share.sessions": (1, INT_MAX), "group.share.max.size": (1, 1000),
    "group.share.session.timeout.ms": (1, INT_MAX), "group.share.min.session.timeout.ms": (1, INT_MAX),
    "group.share.max.session.timeout.ms": (1, INT_MAX), "group.share.heartbeat.interval.ms": (1, INT_MAX),
    "group.share.min.heartbeat.interval.ms": (1, INT_MAX), "group.share.max.heartbeat.interval.ms": (1, INT_MAX),
    "group.share.initialize.retry.interval.ms": (1, INT_MAX),
    "share.coordinator.snapshot.update.records.per.snapshot": (0, 500),
    "connections.max.reauth.ms": (LONG_MIN, LONG_MAX), "connection.failed.authentication.delay.ms": (0, INT_MAX),
    "controller.quorum.election.timeout.ms": (0, INT_MAX), "controller.quorum.fetch.timeout.ms": (0, INT_MAX),
    "controller.quorum.election.backoff.max.ms": (0, INT_MAX), "controller.quorum.request.timeout.ms": (0, INT_MAX),
    "controller.quorum.retry.backoff.ms": (0, INT_MAX),
}
BROKER_INT_ALSO: dict[str, set[int]] = {"compression.gzip.level": {-1}}  # Kafka's "[1,...,9] or -1"
BROKER_FLOAT_RANGES: dict[str, tuple[float, float]] = {"log.cleaner.min.cleanable.ratio": (0.0, 1.0)}
BROKER_CHOICES: dict[str, tuple[str, ...]] = {"log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
                                              "compression.type": tuple(sorted(COMPRESSION_TYPES))}
KIND_WORDS = {"int": "an integer", "long": "an integer", "short": "an integer", "double": "a number",
              "boolean": "true or false", "string": "a string", "password": "a string", "class": "a class name",
              "list": "a comma-separated list"}


def broker_config_kind(key: str) -> str:
    """The Kafka type (lower case: int, double, boolean, string, list) of a broker config Kray knows."""
    default = BROKER_DEFAULTS.get(base_key(key) or key)
    if isinstance(default, bool):
        return "boolean"
    if isinstance(default, int) or key in BROKER_INT_RANGES:
        return "int"
    if isinstance(default, float):
        return "double"
    return "string"


def parse_config_value(key: str, value: Any, kind: str, *, at_least=None, at_most=None, also=(), choices=()) -> Any:
    """`value` of config `key` as a Kafka `kind` (int, long, short, double, boolean, string, password,
    class, list) with its range: a string (a server.properties line, an --override) is parsed as
    Kafka's ConfigDef parses it; a TOML value must have the type already (a number for an integer,
    true/false unquoted or quoted). Raises ConfigError naming the key and what it takes."""
    kind = kind.lower()
    words = KIND_WORDS.get(kind, kind)
    if kind in ("int", "long", "short"):
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError(f"{key} must be an integer, not {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, not {value!r}")
    elif kind == "double":
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ConfigError(f"{key} must be a number, not {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} must be a number, not {value!r}")
        value = float(value)
    elif kind == "boolean":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        elif not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, not {value!r}")
    elif kind == "list" and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    elif not isinstance(value, str):
        raise ConfigError(f"{key} must be {words}" + (" (in quotes in a TOML file)" if kind != "list" else "")
                          + f", not {value!r}")
    if value in also:
        return value
    if at_least is not None and value < at_least or at_most is not None and value > at_most:
        low_is_width = at_least is None or at_least in (INT_MIN, LONG_MIN)
        high_is_width = at_most is None or at_most in (INT_MAX, LONG_MAX)
        too_high = at_most is not None and value > at_most
        if low_is_width or (high_is_width and not too_high):
            bound = f"at most {at_most}" if too_high else f"at least {at_least}"
        else:
            bound = f"between {at_least} and {at_most}"
        extra = "".join(f" or {v}" for v in sorted(also))
        raise ConfigError(f"{key}={value}: must be {bound}{extra}")
    if choices and value not in choices:
        raise ConfigError(f"{key}={value}: must be one of {', '.join(choices)}")
    return value


def broker_value(key: str, value: Any) -> Any:
    """A broker config's value checked for its type and range (see parse_config_value); None
    (unset) stays None."""
    if value is None:
        return None
    name = base_key(key) or key
    kind = broker_config_kind(name)
    if name in ("listeners", "advertised.listeners", "log.dirs", "sasl.enabled.mechanisms", "ssl.enabled.protocols",
                "group.consumer.assignors", "group.share.assignors", "controller.quorum.voters", "process.roles"):
        kind = "list"
    at_least, at_most = BROKER_INT_RANGES.get(name, BROKER_FLOAT_RANGES.get(name, (None, None)))
    if name == "max.connections.per.ip.overrides":
        from actors.connection_limits import OverridesError, parse_overrides
        try:
            parse_overrides(str(value))
        except OverridesError as e:
            raise ConfigError(str(e)) from None
    return parse_config_value(key, value, kind, at_least=at_least, at_most=at_most,
                              also=BROKER_INT_ALSO.get(name, ()), choices=BROKER_CHOICES.get(name, ()))


def _listeners(config: dict[str, Any]):
    from actors.security.listeners import ListenerConfigError, listener_config, set_keys
    try:  # (security.inter.broker.protocol's default is no setting: cluster/config.py refuses both set)
        return listener_config(set_keys(config))
    except ListenerConfigError as e:
        raise ConfigError(str(e)) from None


def listener_address(config: dict[str, Any]) -> tuple[str, int]:
    """(host, port) of the broker's primary listener: the inter-broker one (PLAINTEXT by default),
    which `kray start --port` sets, brokers register as their address and followers fetch from."""
    primary = _listeners(config).inter_broker_listener
    return primary.host or "127.0.0.1", primary.port


def inter_broker_listener(config: dict[str, Any]):
    """The inter-broker listener (actors.security.listeners.Listener): where followers
    fetch from, over its security protocol."""
    return _listeners(config).inter_broker_listener


def with_listener(config: dict[str, Any], host: str | None, port: int | None, *,
                  all_ports: int | None = None) -> dict[str, Any]:
    """`host` for every listener, `port` for the primary one (see listener_address); `all_ports`=0
    gives every listener a free port (several brokers on one machine without a base port)."""
    from actors.security.listeners import Listener
    listeners = _listeners(config)
    primary = listeners.inter_broker_listener.name
    changed = []
    for listener in listeners.listeners:
        new_port = listener.port
        if all_ports is not None:
            new_port = all_ports
        elif listener.name == primary and port is not None:
            new_port = port
        changed.append(Listener(listener.name, host if host is not None else listener.host, new_port,
                                listener.security_protocol))
    return config | {"listeners": ",".join(listener.connection_string for listener in changed)}


def topic_config_defaults(broker: dict[str, Any]) -> dict[str, Any]:
    out = dict(TOPIC_CONFIG_FIXED_DEFAULTS)
    for key, source in TOPIC_CONFIG_SOURCES.items():
        if source:
            out[key] = broker[source]
    return out


def _throttled_replicas(key: str, value: Any) -> str:
    """A throttled-replicas list as Kafka's ThrottledReplicaListValidator takes it: "", "*", or
    partition:broker pairs separated by commas."""
    text = str(value).strip()
    pairs = [p.strip() for p in text.split(",")] if text else []
    if text == "*" or all(len(p.split(":")) == 2 and all(x.strip().isdigit() for x in p.split(":")) for p in pairs):
        return text
    raise ConfigError(f"topic config {key} must be the list of replicas partitionId:brokerId,partitionId:brokerId,... "
                      f"or the wildcard '*', not {value!r}")


def validate_topic_configs(configs: dict[str, Any]) -> dict[str, Any]:
    """Check topic config overrides; return them typed. Raises ConfigError naming the bad key."""
    out: dict[str, Any] = {}
    for key, value in configs.items():
        if key not in TOPIC_CONFIG_SOURCES:
            raise ConfigError(f"unknown topic config {key!r}")
        if value is None:
            continue
        if key in INT_TOPIC_CONFIGS:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ConfigError(f"topic config {key} must be an integer, not {value!r}") from None
            least, greatest = INT_TOPIC_CONFIG_RANGES.get(key, (-LONG_MAX - 1, LONG_MAX))
            if key == "compression.gzip.level" and value != -1 and not 1 <= value <= 9:
                raise ConfigError(f"topic config {key} must be -1 (the codec's default) or in [1, 9], not {value}")
            if not least <= value <= greatest:
                raise ConfigError(f"topic config {key} must be in [{least}, {greatest}], not {value}")
        elif key in FLOAT_TOPIC_CONFIGS:
            low, high = FLOAT_TOPIC_CONFIGS[key]
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"topic config {key} must be a number, not {value!r}") from None
            if not low <= value <= high:
                raise ConfigError(f"topic config {key} must be in [{low}, {high}], not {value}")
        elif key == "cleanup.policy":
            policies = [p.strip() for p in str(value).strip("[]").split(",") if p.strip()]
            if not policies or any(p not in CLEANUP_POLICIES for p in policies):
                raise ConfigError(f"topic config cleanup.policy must be a list of delete | compact, not {value!r}")
            value = ",".join(dict.fromkeys(policies))
        elif key in BOOL_TOPIC_CONFIGS:
            if str(value).lower() not in ("true", "false"):
                raise ConfigError(f"topic config {key} must be true or false, not {value!r}")
            value = str(value).lower() == "true"
            if key == "remote.storage.enable" and value:  # as a Kafka broker without remote.log.storage.system.enable
                raise ConfigError("Tiered Storage functionality is disabled in the broker. Topic cannot be "
                                  "configured with remote log storage (Kray has no tiered storage).")
        elif key in THROTTLED_REPLICAS_CONFIGS:
            value = _throttled_replicas(key, value)
        elif key in ENUM_TOPIC_CONFIGS and value not in ENUM_TOPIC_CONFIGS[key]:
            allowed = " | ".join(sorted(ENUM_TOPIC_CONFIGS[key]))
            raise ConfigError(f"topic config {key} must be one of {allowed}, not {value!r}")
        out[key] = value
    return out


# group configs (KIP-932, KIP-1240, KIP-1263) -> the broker config that supplies their default
GROUP_CONFIG_SOURCES: dict[str, str] = {
    "share.auto.offset.reset": "",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.isolation.level": "",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
    "share.partition.max.record.locks": "group.share.partition.max.record.locks",
    "share.renew.acknowledge.enable": "",
    "share.assignment.interval.ms": "group.share.assignment.interval.ms",
    "errors.deadletterqueue.topic.name": "",          # KIP-1191: "" = no dead-letter topic
    "errors.deadletterqueue.copy.record.enable": "",  # KIP-1191: copy key, value and headers too
    "share.key.ordering.enable": "",   # Kray's: one record per key acquired at a time, in offset order
}
GROUP_CONFIG_FIXED_DEFAULTS = {"share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted",
                               "share.renew.acknowledge.enable": True,  # Kafka 4.3's default: RENEW allowed
                               "errors.deadletterqueue.topic.name": "",
                               "errors.deadletterqueue.copy.record.enable": False,
                               "share.key.ordering.enable": False}
BOOL_GROUP_CONFIGS = {"share.renew.acknowledge.enable", "errors.deadletterqueue.copy.record.enable",
                      "share.key.ordering.enable"}
# integer group configs: (the least value Kafka's GroupConfig takes whatever the broker says, the broker
# configs of their bounds with {} for min/max)
GROUP_CONFIG_INT_BOUNDS: dict[str, tuple[int, str]] = {
    "share.record.lock.duration.ms": (1000, "group.share.{}.record.lock.duration.ms"),
    "share.session.timeout.ms": (1, "group.share.{}.session.timeout.ms"),
    "share.heartbeat.interval.ms": (1, "group.share.{}.heartbeat.interval.ms"),
    "share.delivery.count.limit": (2, "group.share.{}.delivery.count.limit"),
    "share.partition.max.record.locks": (100, "group.share.{}.partition.max.record.locks"),
    "share.assignment.interval.ms": (0, "group.share.{}.assignment.interval.ms"),
}
BY_DURATION = re.compile(r"^by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$", re.I)


def group_config_defaults(broker: dict[str, Any]) -> dict[str, Any]:
    return GROUP_CONFIG_FIXED_DEFAULTS | {k: broker[src] for k, src in GROUP_CONFIG_SOURCES.items() if src}


def _group_bounds(key: str, broker: dict[str, Any]) -> tuple[int, int, str, str]:
    """(min, max, the broker config of each) bounding the integer group config `key`."""
    _, template = GROUP_CONFIG_INT_BOUNDS[key]
    low_key, high_key = template.format("min"), template.format("max")
    return int(broker[low_key]), int(broker[high_key]), low_key, high_key


def validate_group_configs(configs: dict[str, Any], broker: dict[str, Any]) -> dict[str, Any]:
    """Check group config overrides against Kafka's rules and the broker's bounds (Kafka's
    GroupConfig.validate: the messages name the broker config that bounds the value)."""
    out: dict[str, Any] = {}
    for key, value in configs.items():
        if key not in GROUP_CONFIG_SOURCES:
            raise ConfigError(f"unknown group config {key!r}; known: {', '.join(sorted(GROUP_CONFIG_SOURCES))}")
        if key == "share.auto.offset.reset":
            value = str(value)
            if value not in ("latest", "earliest") and not BY_DURATION.match(value):
                raise ConfigError("share.auto.offset.reset must be latest, earliest or by_duration:<ISO-8601 "
                                  f"duration> such as by_duration:PT1H, not {value!r}")
        elif key == "share.isolation.level":
            if value not in ("read_uncommitted", "read_committed"):
                raise ConfigError(f"share.isolation.level must be read_uncommitted or read_committed, not {value!r}")
        elif key == "errors.deadletterqueue.topic.name":
            value = str(value).strip()
            error = topic_name_error(value, str(broker.get("errors.deadletterqueue.topic.name.prefix", "dlq.")))
            if error:
                raise ConfigError(f"{key}: {error}")
        elif key in BOOL_GROUP_CONFIGS:
            if isinstance(value, bool):
                pass
            elif str(value).strip().lower() in ("true", "false"):
                value = str(value).strip().lower() == "true"
            else:
                raise ConfigError(f"group config {key} must be true or false, not {value!r}")
        else:
            try:
                value = int(str(value).strip())
            except (TypeError, ValueError):
                raise ConfigError(f"group config {key} must be an integer, not {value!r}") from None
            least = GROUP_CONFIG_INT_BOUNDS[key][0]
            if value < least:
                raise ConfigError(f"group config {key} must be at least {least}, not {value}")
            low, high, low_key, high_key = _group_bounds(key, broker)
            if value < low:
                raise ConfigError(f"{key} must be greater than or equal to {low_key} ({low}), not {value}")
            if value > high:
                raise ConfigError(f"{key} must be less than or equal to {high_key} ({high}), not {value}")
        out[key] = value
    return out


def effective_group_configs(overrides: dict[str, Any], broker: dict[str, Any]) -> dict[str, Any]:
    """A group's configs in force: the broker's defaults under its overrides, an override outside
    the broker's bounds now (they were changed after it was set) held to them, as Kafka's
    GroupConfig.evaluate does."""
    out = group_config_defaults(broker) | dict(overrides)
    for key in GROUP_CONFIG_INT_BOUNDS:
        if key in overrides:
            low, high, _, _ = _group_bounds(key, broker)
            out[key] = min(max(int(out[key]), low), high)
    return out


@dataclass(frozen=True)
class ShareGroupLimits:
    """What a share-partition leader takes from its group's configs (see effective_group_configs)."""
    record_lock_duration_ms: int
    delivery_count_limit: int
    max_record_locks: int
    renew_acknowledge_enable: bool
    read_committed: bool = False    # share.isolation.level=read_committed
    dead_letter_topic: str = ""              # errors.deadletterqueue.topic.name (KIP-1191)
    dead_letter_copy_record: bool = False    # errors.deadletterqueue.copy.record.enable
    key_ordering: bool = False               # share.key.ordering.enable (Kray's)

    @classmethod
    def from_kafka(cls, effective: dict[str, Any]) -> "ShareGroupLimits":
        return cls(record_lock_duration_ms=int(effective["share.record.lock.duration.ms"]),
                   delivery_count_limit=int(effective["share.delivery.count.limit"]),
                   max_record_locks=int(effective["share.partition.max.record.locks"]),
                   renew_acknowledge_enable=bool(effective["share.renew.acknowledge.enable"]),
                   read_committed=effective.get("share.isolation.level") == "read_committed",
                   dead_letter_topic=str(effective.get("errors.deadletterqueue.topic.name") or ""),
                   dead_letter_copy_record=bool(effective.get("errors.deadletterqueue.copy.record.enable")),
                   key_ordering=bool(effective.get("share.key.ordering.enable")))

    @classmethod
    def of_group(cls, overrides: dict[str, Any], broker: dict[str, Any]) -> "ShareGroupLimits":
        return cls.from_kafka(effective_group_configs(overrides, broker))

    def as_list(self) -> list:
        """For the data-path frame (actors/partition/wire.py): a plain list."""
        return [self.record_lock_duration_ms, self.delivery_count_limit, self.max_record_locks,
                self.renew_acknowledge_enable, self.read_committed, self.dead_letter_topic,
                self.dead_letter_copy_record, self.key_ordering]


@dataclass(frozen=True)
class TopicConfig:
    """The effective configs of one topic, with units in the names."""
    segment_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    log_append_time: bool
    min_insync_replicas: int
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 9223372036854775807
    delete_retention_ms: int = 86400000
    segment_ms: int = 604800000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    leader_throttled_replicas: str = ""  # leader.replication.throttled.replicas ("p:broker,..." or "*")
    follower_throttled_replicas: str = ""  # follower.replication.throttled.replicas

    @classmethod
    def from_kafka(cls, effective: dict[str, Any]) -> "TopicConfig":
        return cls(
            segment_bytes=int(effective["segment.bytes"]),
            index_interval_bytes=int(effective["index.interval.bytes"]),
            retention_ms=int(effective["retention.ms"]),
            retention_bytes=int(effective["retention.bytes"]),
            max_message_bytes=int(effective["max.message.bytes"]),
            log_append_time=effective["message.timestamp.type"] == "LogAppendTime",
            min_insync_replicas=int(effective["min.insync.replicas"]),
            cleanup_policy=str(effective.get("cleanup.policy", "delete")),
            min_cleanable_dirty_ratio=float(effective.get("min.cleanable.dirty.ratio", 0.5)),
            min_compaction_lag_ms=int(effective.get("min.compaction.lag.ms", 0)),
            max_compaction_lag_ms=int(effective.get("max.compaction.lag.ms", 9223372036854775807)),
            delete_retention_ms=int(effective.get("delete.retention.ms", 86400000)),
            segment_ms=int(effective.get("segment.ms", 604800000)),
            message_timestamp_before_max_ms=int(effective.get("message.timestamp.before.max.ms", LONG_MAX)),
            message_timestamp_after_max_ms=int(effective.get("message.timestamp.after.max.ms", 3600000)),
            compression_type=str(effective.get("compression.type", "producer")),
            compression_gzip_level=int(effective.get("compression.gzip.level", -1)),
            compression_lz4_level=int(effective.get("compression.lz4.level", 9)),
            compression_zstd_level=int(effective.get("compression.zstd.level", 3)),
            leader_throttled_replicas=str(effective.get("leader.replication.throttled.replicas", "") or ""),
            follower_throttled_replicas=str(effective.get("follower.replication.throttled.replicas", "") or ""),
        )
