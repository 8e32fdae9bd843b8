"""Every topic config Kafka 4.4 documents is accepted (15 of 34 were), validated as Kafka's ConfigDef does, and
honoured where it applies to Kray: compression.type recompresses, segment.ms and the timestamp bounds reach
the partition."""
import pytest

from actors.partition.core import PartitionConfig, PartitionCore
from actors.config_schema import (BROKER_DEFAULTS, TOPIC_CONFIGS_WITHOUT_EFFECT, ConfigError, TopicConfig,
                                  topic_config_defaults, validate_topic_configs)
from protocol.errors import ErrorCode
from protocol.record_batch import COMPRESSION_LZ4, COMPRESSION_NONE, build_batch, decode_records, iter_batches

# the topic-level configs of Kafka 4.4's documentation
KAFKA_44_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type", "compression.zstd.level",
    "delete.retention.ms", "errors.deadletterqueue.group.enable", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms",
    "max.message.bytes", "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas",
    "preallocate", "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable",
    "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable"}


def test_every_kafka_topic_config_is_accepted_with_its_default():
    assert len(KAFKA_44_TOPIC_CONFIGS) == 34
    defaults = topic_config_defaults(BROKER_DEFAULTS)
    assert set(defaults) == KAFKA_44_TOPIC_CONFIGS
    assert validate_topic_configs({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in defaults.items()})
    assert set(TOPIC_CONFIGS_WITHOUT_EFFECT) < KAFKA_44_TOPIC_CONFIGS
    assert (defaults["compression.type"], defaults["segment.ms"], defaults["message.timestamp.after.max.ms"]) == (
        "producer", 604800000, 3600000)


@pytest.mark.parametrize("key,value", [
    ("compression.type", "brotli"), ("compression.lz4.level", "18"), ("compression.gzip.level", "0"),
    ("compression.zstd.level", "23"), ("segment.ms", "0"), ("flush.messages", "0"), ("local.retention.ms", "-3"),
    ("message.timestamp.after.max.ms", "-1"), ("preallocate", "maybe"), ("remote.storage.enable", "true"),
    ("leader.replication.throttled.replicas", "0:x"), ("segment.jitter.ms", "soon")])
def test_bad_values_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") if key != "remote.storage.enable" else "Tiered"):
        validate_topic_configs({key: value})


def test_good_values_are_typed():
    typed = validate_topic_configs({"compression.type": "lz4", "compression.gzip.level": "-1", "segment.ms": "1000",
                                    "follower.replication.throttled.replicas": "0:1,1:2", "preallocate": "true",
                                    "leader.replication.throttled.replicas": "*", "remote.storage.enable": "false"})
    assert typed == {"compression.type": "lz4", "compression.gzip.level": -1, "segment.ms": 1000,
                     "follower.replication.throttled.replicas": "0:1,1:2", "preallocate": True,
                     "leader.replication.throttled.replicas": "*", "remote.storage.enable": False}


def partition_config(**overrides) -> PartitionConfig:
    effective = topic_config_defaults(BROKER_DEFAULTS) | validate_topic_configs(overrides)
    return PartitionConfig.of(TopicConfig.from_kafka(effective))


def test_segment_ms_and_the_timestamp_bounds_reach_the_partition():
    config = partition_config(**{"segment.ms": "1000", "message.timestamp.after.max.ms": "5000",
                                 "message.timestamp.before.max.ms": "7000"})
    assert (config.segment_ms, config.message_timestamp_after_max_ms, config.message_timestamp_before_max_ms) == (
        1000, 5000, 7000)


def test_a_timestamp_beyond_the_topics_bound_is_refused(tmp_path):
    core = PartitionCore.open(tmp_path, partition_config(**{"message.timestamp.after.max.ms": "5000"}), now_ms=0)
    now = 1_000_000
    assert core.produce(build_batch([(b"k", b"v", [], now + 4000)]), now_ms=now, leader_epoch=0).error_code == 0
    late = core.produce(build_batch([(b"k", b"v", [], now + 6000)]), now_ms=now, leader_epoch=0)
    assert late.error_code == ErrorCode.INVALID_TIMESTAMP


def test_compression_type_recompresses_what_producers_send(tmp_path):
    core = PartitionCore.open(tmp_path, partition_config(**{"compression.type": "lz4"}), now_ms=0)
    sent = [(b"k%d" % i, b"value %d " % i * 20, [("h", b"x")], 1000 + i) for i in range(50)]
    batch = build_batch(sent, producer_id=7, producer_epoch=0, base_sequence=0)
    assert core.produce(batch, now_ms=2000, leader_epoch=0).error_code == 0
    stored = list(iter_batches(memoryview(core.log.read(0, 1 << 20))))
    assert [b.compression for b in stored] == [COMPRESSION_LZ4]
    assert (stored[0].producer_id, stored[0].base_sequence, stored[0].records_count) == (7, 0, 50)
    assert [(r.key, r.value, list(r.headers), r.timestamp_ms) for r in decode_records(stored[0])] == \
        [(k, v, h, t) for k, v, h, t in sent]
    assert core.produce(batch, now_ms=2000, leader_epoch=0).base_offset == 0, "a retry is still a duplicate"


def test_producer_keeps_the_producers_codec(tmp_path):
    core = PartitionCore.open(tmp_path, partition_config(), now_ms=0)
    core.produce(build_batch([(b"k", b"v", [], 1000)], compression=COMPRESSION_LZ4), now_ms=2000, leader_epoch=0)
    core.produce(build_batch([(b"k", b"v", [], 1000)]), now_ms=2000, leader_epoch=0)
    assert [b.compression for b in iter_batches(memoryview(core.log.read(0, 1 << 20)))] == [COMPRESSION_LZ4,
                                                                                           COMPRESSION_NONE]
