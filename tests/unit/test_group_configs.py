"""Share group configs (KIP-932, KIP-1240 and KIP-1263 as Kafka 4.3 has them): validation against
the broker's bounds, the values in force, IncrementalAlterConfigs through the controller core, and
DescribeConfigs with their sources. No Ray."""

from types import SimpleNamespace

import pytest

from actors.controller.core import ControllerCore
from actors.gateway.handlers.configs import (CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_GROUP, CONFIG_SOURCE_STATIC_BROKER,
                                             _describe_group)
from actors.config_schema import (BROKER_DEFAULTS, ConfigError, ShareGroupLimits, effective_group_configs,
                                  group_config_defaults, validate_group_configs)
from protocol.errors import ErrorCode

BROKER = dict(BROKER_DEFAULTS)


def test_kafka_4_3_defaults_and_broker_bounds():
    defaults = group_config_defaults(BROKER)
    assert defaults["share.delivery.count.limit"] == 5
    assert defaults["share.partition.max.record.locks"] == 2000
    assert defaults["share.renew.acknowledge.enable"] is True
    assert defaults["share.assignment.interval.ms"] == 1000
    assert (BROKER["group.share.min.delivery.count.limit"], BROKER["group.share.max.delivery.count.limit"]) == (2, 10)
    assert (BROKER["group.share.min.partition.max.record.locks"],
            BROKER["group.share.max.partition.max.record.locks"]) == (100, 4000)
    assert (BROKER["group.share.min.assignment.interval.ms"], BROKER["group.share.max.assignment.interval.ms"]) == (0, 15000)


@pytest.mark.parametrize("key, low, high", [
    ("share.delivery.count.limit", 2, 10),
    ("share.partition.max.record.locks", 100, 4000),
    ("share.assignment.interval.ms", 0, 15000),
    ("share.record.lock.duration.ms", 15000, 60000),
])
def test_integer_configs_are_bounded_by_the_broker(key, low, high):
    assert validate_group_configs({key: str(low)}, BROKER) == {key: low}
    assert validate_group_configs({key: high}, BROKER) == {key: high}
    broker_key = key.replace("share.", "group.share.min.", 1)
    # below Kafka's own floor (ConfigDef's atLeast) that is what is said, else the broker's bound
    with pytest.raises(ConfigError, match=f"{key} must be (greater than or equal to {broker_key}|at least {low})"):
        validate_group_configs({key: low - 1}, BROKER)
    with pytest.raises(ConfigError, match=f"{key} must be less than or equal to "
                                          f"{key.replace('share.', 'group.share.max.', 1)}"):
        validate_group_configs({key: high + 1}, BROKER)
    for bad in ("not_a_number", "-0.1", "1.2", ""):
        with pytest.raises(ConfigError, match="must be an integer"):
            validate_group_configs({key: bad}, BROKER)


def test_the_broker_moves_the_bounds():
    broker = BROKER | {"group.share.max.delivery.count.limit": 25, "group.share.min.partition.max.record.locks": 500}
    assert validate_group_configs({"share.delivery.count.limit": 25}, broker) == {"share.delivery.count.limit": 25}
    with pytest.raises(ConfigError, match=r"group.share.min.partition.max.record.locks \(500\), not 200"):
        validate_group_configs({"share.partition.max.record.locks": 200}, broker)


def test_kafkas_own_floors_hold_whatever_the_broker_says():
    broker = BROKER | {"group.share.min.delivery.count.limit": 1, "group.share.min.partition.max.record.locks": 1}
    with pytest.raises(ConfigError, match="share.delivery.count.limit must be at least 2"):
        validate_group_configs({"share.delivery.count.limit": 1}, broker)
    with pytest.raises(ConfigError, match="share.partition.max.record.locks must be at least 100"):
        validate_group_configs({"share.partition.max.record.locks": 99}, broker)


def test_renew_switch_is_a_boolean():
    assert validate_group_configs({"share.renew.acknowledge.enable": "false"}, BROKER) == \
        {"share.renew.acknowledge.enable": False}
    assert validate_group_configs({"share.renew.acknowledge.enable": "TRUE"}, BROKER) == \
        {"share.renew.acknowledge.enable": True}
    with pytest.raises(ConfigError, match="must be true or false"):
        validate_group_configs({"share.renew.acknowledge.enable": "yes"}, BROKER)


def test_unknown_keys_are_refused():
    with pytest.raises(ConfigError, match="unknown group config 'share.delivery.count'"):
        validate_group_configs({"share.delivery.count": 3}, BROKER)


def test_values_in_force_are_held_to_bounds_changed_since():
    # Kafka's GroupConfig.evaluate: an override set under wider bounds is capped, not dropped
    overrides = {"share.delivery.count.limit": 8, "share.partition.max.record.locks": 150}
    broker = BROKER | {"group.share.max.delivery.count.limit": 6, "group.share.min.partition.max.record.locks": 200}
    effective = effective_group_configs(overrides, broker)
    assert effective["share.delivery.count.limit"] == 6
    assert effective["share.partition.max.record.locks"] == 200
    assert effective["share.record.lock.duration.ms"] == 30000       # not overridden: the broker's default
    limits = ShareGroupLimits.of_group(overrides | {"share.renew.acknowledge.enable": False}, broker)
    assert limits == ShareGroupLimits(record_lock_duration_ms=30000, delivery_count_limit=6, max_record_locks=200,
                                      renew_acknowledge_enable=False)
    assert limits.as_list() == [30000, 6, 200, False, False, "", False, False]   # no DLQ topic, no key order
    assert ShareGroupLimits.of_group({"share.isolation.level": "read_committed"}, broker).read_committed
    # a broker default changed in the broker's config is what a group without overrides gets
    assert ShareGroupLimits.of_group({}, BROKER | {"group.share.delivery.count.limit": 3}).delivery_count_limit == 3


def test_incremental_alter_through_the_controller():
    core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    out = core.alter_group_configs("g", {"share.delivery.count.limit": "11"}, incremental=True)
    assert out.error_code == ErrorCode.INVALID_CONFIG
    assert "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit" in out.message
    assert core.group_configs.get("g") is None
    assert core.alter_group_configs("g", {"share.delivery.count.limit": "2"}, incremental=True).error_code == 0
    assert core.alter_group_configs("g", {"share.renew.acknowledge.enable": "false",
                                          "share.assignment.interval.ms": "0"}, incremental=True).error_code == 0
    assert core.group_configs["g"] == {"share.delivery.count.limit": 2, "share.renew.acknowledge.enable": False,
                                       "share.assignment.interval.ms": 0}
    assert core.alter_group_configs("g", {"share.delivery.count.limit": None}, incremental=True).error_code == 0
    assert "share.delivery.count.limit" not in core.group_configs["g"]


def _describe(overrides, broker=BROKER):
    ctx = SimpleNamespace(metadata=SimpleNamespace(group_configs={"g": overrides}), config=broker)
    error, _, configs = _describe_group(ctx, SimpleNamespace(resource_name="g"), True)
    assert error == 0
    return {c.name: c for c in configs}


def test_describe_shows_each_config_with_its_source():
    configs = _describe({"share.delivery.count.limit": 2, "share.renew.acknowledge.enable": False})
    limit = configs["share.delivery.count.limit"]
    assert (limit.value, limit.config_source) == ("2", CONFIG_SOURCE_GROUP)
    assert [(s.name, s.value, s.source) for s in limit.synonyms] == [
        ("share.delivery.count.limit", "2", CONFIG_SOURCE_GROUP),
        ("group.share.delivery.count.limit", "5", CONFIG_SOURCE_DEFAULT)]
    renew = configs["share.renew.acknowledge.enable"]
    assert (renew.value, renew.config_source) == ("false", CONFIG_SOURCE_GROUP)
    locks = configs["share.partition.max.record.locks"]
    assert (locks.value, locks.config_source) == ("2000", CONFIG_SOURCE_DEFAULT)
    assert configs["share.assignment.interval.ms"].value == "1000"
    # a default from a broker config set in the broker's file is STATIC_BROKER_CONFIG, as for topics
    configs = _describe({}, BROKER | {"group.share.partition.max.record.locks": 3000})
    locks = configs["share.partition.max.record.locks"]
    assert (locks.value, locks.config_source) == ("3000", CONFIG_SOURCE_STATIC_BROKER)


def test_dead_letter_queue_configs_of_kip_1191():
    defaults = group_config_defaults(BROKER)
    assert defaults["errors.deadletterqueue.topic.name"] == ""           # no DLQ
    assert defaults["errors.deadletterqueue.copy.record.enable"] is False
    assert BROKER["errors.deadletterqueue.topic.name.prefix"] == "dlq."
    assert BROKER["errors.deadletterqueue.auto.create.topics.enable"] is False
    assert validate_group_configs({"errors.deadletterqueue.topic.name": "dlq.orders",
                                   "errors.deadletterqueue.copy.record.enable": "true"}, BROKER) == \
        {"errors.deadletterqueue.topic.name": "dlq.orders", "errors.deadletterqueue.copy.record.enable": True}
    for bad in ("orders", "dlq.with space", "dlq." + "x" * 250):
        with pytest.raises(ConfigError, match="errors.deadletterqueue.topic.name"):
            validate_group_configs({"errors.deadletterqueue.topic.name": bad}, BROKER)
    # an empty prefix allows any legal name
    anything = BROKER | {"errors.deadletterqueue.topic.name.prefix": ""}
    assert validate_group_configs({"errors.deadletterqueue.topic.name": "orders"}, anything)
    limits = ShareGroupLimits.of_group({"errors.deadletterqueue.topic.name": "dlq.orders"}, BROKER)
    assert (limits.dead_letter_topic, limits.dead_letter_copy_record) == ("dlq.orders", False)


def test_a_topic_without_the_group_enable_config_is_refused_as_a_dead_letter_topic():
    from actors.controller.core import BrokerInfo
    core = ControllerCore(dict(BROKER_DEFAULTS), "cluster-1")
    core.register_broker(BrokerInfo(1, "127.0.0.1", 9093, None, "node-1"))
    assert core.create_topic("dlq.plain", 1, 1, {}).error_code == 0
    assert core.create_topic("dlq.ok", 1, 1, {"errors.deadletterqueue.group.enable": "true"}).error_code == 0
    out = core.alter_group_configs("g", {"errors.deadletterqueue.topic.name": "dlq.plain"}, incremental=True)
    assert out.error_code == ErrorCode.INVALID_CONFIG and "errors.deadletterqueue.group.enable" in out.message
    assert core.alter_group_configs("g", {"errors.deadletterqueue.topic.name": "dlq.ok"}, incremental=True).error_code == 0
    # a DLQ topic that does not exist yet may be named (it is created, or used once it exists)
    assert core.alter_group_configs("h", {"errors.deadletterqueue.topic.name": "dlq.later"},
                                    incremental=True).error_code == 0


def test_describe_shows_the_dead_letter_configs():
    configs = _describe({"errors.deadletterqueue.topic.name": "dlq.orders"})
    name, copy = configs["errors.deadletterqueue.topic.name"], configs["errors.deadletterqueue.copy.record.enable"]
    assert (name.value, name.config_source) == ("dlq.orders", CONFIG_SOURCE_GROUP)
    assert (copy.value, copy.config_source) == ("false", CONFIG_SOURCE_DEFAULT)
    assert _describe({})["errors.deadletterqueue.topic.name"].value == ""
