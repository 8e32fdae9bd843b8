"""Kafka's broker-wide connection limits (actors/connection_limits.py), pure: what a listener does with a
new connection under max.connections, max.connections.per.ip (and its overrides) and
max.connection.creation.rate. tests/kafka/test_connection_limits.py checks the same against Kafka 4.4."""
import pytest

from actors.config_schema import ConfigError, broker_value, validate_dynamic_broker_configs
from actors.connection_limits import ConnectionCounts, Limits, OverridesError, parse_overrides


def test_overrides_are_parsed_as_kafka_writes_them():
    assert parse_overrides("") == {}
    assert parse_overrides("127.0.0.1:5, ::1:2,[::2]:3") == {"127.0.0.1": 5, "::1": 2, "::2": 3}
    assert parse_overrides("localhost:4") == {"127.0.0.1": 4}  # a host name: its address
    for bad in ("127.0.0.1", "127.0.0.1:", "127.0.0.1:x", ":3", "127.0.0.1:-1"):
        with pytest.raises(OverridesError):
            parse_overrides(bad)


def test_a_malformed_override_is_refused_when_set():
    with pytest.raises(ConfigError):
        validate_dynamic_broker_configs({"max.connections.per.ip.overrides": "10.0.0.1"})
    assert validate_dynamic_broker_configs({"max.connections.per.ip.overrides": "10.0.0.1:3",
                                            "max.connections": "100"}) == {
        "max.connections.per.ip.overrides": "10.0.0.1:3", "max.connections": 100}
    with pytest.raises(ConfigError):
        broker_value("max.connections", -1)


def test_an_address_at_its_maximum_is_refused_and_its_override_wins():
    counts = ConnectionCounts()
    limits = Limits(max_connections_per_ip=2, per_ip_overrides={"10.0.0.9": 3})
    assert [counts.add("10.0.0.1", limits) for _ in range(3)] == [True, True, False]
    assert [counts.add("10.0.0.9", limits) for _ in range(4)] == [True, True, True, False]
    assert counts.total == 5  # (refused ones are not counted)
    counts.remove("10.0.0.1")
    assert counts.add("10.0.0.1", limits) is True


def test_max_connections_leaves_no_slot_until_one_closes_except_on_the_protected_listener():
    counts, limits = ConnectionCounts(), Limits(max_connections=2)
    for address in ("a", "b"):
        assert counts.slot_available(limits, protected=False) and counts.add(address, limits)
    assert not counts.slot_available(limits, protected=False)
    assert counts.slot_available(limits, protected=True)
    counts.remove("a")
    assert counts.slot_available(limits, protected=False)


def test_the_creation_rate_delays_connections_over_it_by_at_most_one_sample():
    counts, limits = ConnectionCounts(samples=11, sample_ms=1000), Limits(max_connection_creation_rate=2)
    now_ms = 1_000_000
    # a young rate is measured over 10 s plus the current sample's part (Kafka's Rate.windowSize): 20 go at once
    assert [counts.creation_throttle_ms(limits, False, now_ms) for _ in range(20)] == [0] * 20
    waits = [counts.creation_throttle_ms(limits, False, now_ms) for _ in range(5)]
    assert all(0 < w <= 1000 for w in waits) and waits == sorted(waits), waits
    assert counts.creation_throttle_ms(limits, True, now_ms) == 0  # the inter-broker listener of several
    assert ConnectionCounts().creation_throttle_ms(Limits(), False, now_ms) == 0  # unlimited: not even counted
