"""Kafka 4.4's topic configs that Kray did not know before, through a real `kray start`: created, described,
honoured, and bad values refused as Kafka refuses them."""
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.test_delete_records import read_values, topic_with


def test_a_topic_created_with_kafkas_newer_configs_stores_and_serves_them(kray):
    """kafka-topics --create --config compression.type=lz4 (and the other configs Kray did not know): accepted,
    described back, honoured (the records come back through an lz4 topic), a bad value refused with
    INVALID_CONFIG (issue 35)."""
    from confluent_kafka.admin import ConfigResource, ResourceType
    topic = topic_with(kray, 20, config={"compression.type": "lz4", "compression.lz4.level": "12",
                                         "segment.ms": "3600000", "flush.messages": "1000", "preallocate": "true",
                                         "message.timestamp.before.max.ms": "86400000"})
    assert read_values(kray, topic, 20) == [(o, b"%d" % o) for o in range(20)]
    admin = AdminClient({"bootstrap.servers": kray})
    (described,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    configs = {k: v.value for k, v in described.result(30).items()}
    assert {k: configs[k] for k in ("compression.type", "compression.lz4.level", "segment.ms", "flush.messages",
                                     "preallocate", "remote.storage.enable")} == {
        "compression.type": "lz4", "compression.lz4.level": "12", "segment.ms": "3600000", "flush.messages": "1000",
        "preallocate": "true", "remote.storage.enable": "false"}
    bad = f"dr-bad-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic(bad, 1, 1, config={"compression.type": "brotli"})])[bad].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
