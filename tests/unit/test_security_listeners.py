"""Kafka's listener configs (actors/security/listeners.py): parsing, defaults and every
check Kafka makes, with messages that say what to change."""
import pytest

from actors.security.listeners import (
    LISTENER_SECURITY_PROTOCOL_MAP_DEFAULT, Listener, ListenerConfigError, SecurityProtocol, listener_config,
    parse_listener_list, parse_security_protocol_map)

P = SecurityProtocol
DEFAULT_MAP = parse_security_protocol_map(LISTENER_SECURITY_PROTOCOL_MAP_DEFAULT)


def test_the_default_map_names_each_protocol_after_itself():
    assert DEFAULT_MAP == {p.value: p for p in P}
    assert P.SASL_SSL.uses_tls and P.SASL_SSL.uses_sasl and P.SSL.uses_tls and not P.SSL.uses_sasl
    assert P.SASL_PLAINTEXT.uses_sasl and not P.PLAINTEXT.uses_tls and not P.PLAINTEXT.uses_sasl


def test_kafkas_documented_listener_examples():
    assert parse_listener_list("PLAINTEXT://myhost:9092,SSL://:9091", DEFAULT_MAP) == [
        Listener("PLAINTEXT", "myhost", 9092, P.PLAINTEXT), Listener("SSL", "", 9091, P.SSL)]
    custom = parse_security_protocol_map("CLIENT:SSL,REPLICATION:PLAINTEXT")
    assert parse_listener_list("CLIENT://0.0.0.0:9092,REPLICATION://localhost:9093", custom) == [
        Listener("CLIENT", "0.0.0.0", 9092, P.SSL), Listener("REPLICATION", "localhost", 9093, P.PLAINTEXT)]
    assert parse_listener_list("PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092", DEFAULT_MAP) == [
        Listener("PLAINTEXT", "127.0.0.1", 9092, P.PLAINTEXT), Listener("SSL", "::1", 9092, P.SSL)]


def test_names_are_upper_cased_and_spaces_trimmed():
    protocol_map = parse_security_protocol_map(" internal : sasl_plaintext , EXTERNAL:SASL_SSL ")
    assert protocol_map == {"INTERNAL": P.SASL_PLAINTEXT, "EXTERNAL": P.SASL_SSL}
    listeners = parse_listener_list(" internal://:9094 , External://broker-1.example.com:9093 ", protocol_map)
    assert [(x.name, x.host, x.port) for x in listeners] == [("INTERNAL", "", 9094),
                                                             ("EXTERNAL", "broker-1.example.com", 9093)]


def test_empty_host_and_meta_addresses_bind_every_interface():
    assert Listener("A", "", 1, P.SSL).binds_every_interface
    assert Listener("A", "0.0.0.0", 1, P.SSL).binds_every_interface
    assert Listener("A", "::", 1, P.SSL).binds_every_interface
    assert not Listener("A", "10.0.0.1", 1, P.SSL).binds_every_interface
    assert Listener("SSL", "::1", 9093, P.SSL).connection_string == "SSL://[::1]:9093"
    assert Listener("SSL", "", 9093, P.SSL).connection_string == "SSL://:9093"


def test_ipv6_with_a_zone_in_brackets():
    [listener] = parse_listener_list("PLAINTEXT://[fe80::1%eth0]:9092", DEFAULT_MAP)
    assert listener.host == "fe80::1%eth0"


@pytest.mark.parametrize("text, message", [
    ("PLAINTEXT//localhost:9092", "unable to parse 'PLAINTEXT//localhost:9092'"),
    ("://localhost:9092", "unable to parse"),
    ("PLAINTEXT://localhost", "needs a port number"),
    ("PLAINTEXT://localhost:port", "needs a port number"),
    ("PLAINTEXT://localhost:-1", "needs a port number"),
    ("PLAINTEXT://localhost:65536", "above 65535"),
    ("PLAINTEXT://::1:9092", r"write an IPv6 address in brackets"),
    ("PLAINTEXT://[127.0.0.1]:9092", "only an IPv6 address may use"),
    ("PLAINTEXT://[::1:9092", "opens '\\[' without closing it"),
    ("PLAINTEXT://bad host:9092", "is not a host name or address"),
    ("CLIENT://:9092", "no security protocol defined for listener CLIENT: add CLIENT:<protocol>"),
    ("PLAINTEXT://:9092,plaintext://:9093", "PLAINTEXT appears more than once"),
    ("PLAINTEXT://:9092,SSL://:9092", "port 9092 is used by PLAINTEXT, SSL"),
    ("PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.2:9092", "one on an IPv4 address and the other on an IPv6"),
    ("PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092,SASL_SSL://[::2]:9092", "unless exactly two share it"),
    ("PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092,SASL_SSL://host:9092", "unless exactly two share it"),
])
def test_listener_lists_kafka_refuses(text, message):
    with pytest.raises(ListenerConfigError, match=message):
        parse_listener_list(text, DEFAULT_MAP)


def test_port_zero_may_repeat_and_advertised_ports_may_repeat():
    assert len(parse_listener_list("PLAINTEXT://:0,SSL://:0", DEFAULT_MAP)) == 2
    advertised = parse_listener_list("PLAINTEXT://lb:9092,SSL://lb:9092", DEFAULT_MAP,
                                     config_name="advertised.listeners", require_distinct_ports=False)
    assert [x.port for x in advertised] == [9092, 9092]


@pytest.mark.parametrize("text, message", [
    ("PLAINTEXT", "is not of the form LISTENER_NAME:SECURITY_PROTOCOL"),
    ("PLAINTEXT:", "is not of the form"),
    ("CLIENT:TLS", "Invalid security protocol `TLS` defined in listener.security.protocol.map: use one of"),
    ("CLIENT:SSL,client:PLAINTEXT", "maps listener CLIENT twice"),
])
def test_bad_protocol_maps(text, message):
    with pytest.raises(ListenerConfigError, match=message):
        parse_security_protocol_map(text)


def test_a_secured_broker_config():
    config = listener_config({
        "listeners": "SASL_SSL://0.0.0.0:9093,INTERNAL://10.0.0.5:9094,PLAINTEXT://127.0.0.1:9092",
        "advertised.listeners": "SASL_SSL://broker1.example.com:9093,INTERNAL://10.0.0.5:9094,"
                                "PLAINTEXT://127.0.0.1:9092",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,INTERNAL:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "internal",
    })
    assert config.inter_broker_listener == Listener("INTERNAL", "10.0.0.5", 9094, P.SASL_PLAINTEXT)
    assert config.listener("sasl_ssl").host == "0.0.0.0"
    assert config.advertised("SASL_SSL").host == "broker1.example.com"
    assert config.security_protocol_map["INTERNAL"] is P.SASL_PLAINTEXT


def test_kafkas_defaults():
    config = listener_config({})
    assert config.listeners == (Listener("PLAINTEXT", "", 9092, P.PLAINTEXT),)
    assert config.advertised_listeners == config.listeners, "advertised.listeners defaults to listeners"
    assert config.inter_broker_listener_name == "PLAINTEXT", "from security.inter.broker.protocol's default"
    assert listener_config({"listeners": "SSL://:9093", "security.inter.broker.protocol": "ssl"}
                           ).inter_broker_listener_name == "SSL"


def test_an_explicit_map_replaces_the_default():
    with pytest.raises(ListenerConfigError, match="no security protocol defined for listener SSL"):
        listener_config({"listeners": "SSL://:9093,CLIENT://:9094", "listener.security.protocol.map": "CLIENT:SSL",
                         "inter.broker.listener.name": "CLIENT"})


@pytest.mark.parametrize("configs, message", [
    ({"listeners": ""}, "listeners is empty"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "cannot use the nonroutable meta-address 0.0.0.0"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://[::]:9092"},
     "nonroutable meta-address ::"),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092"},
     "advertised.listeners is unset, so listeners is advertised, and it cannot use the nonroutable meta-address "
     "0.0.0.0 .* leave the host empty: PLAINTEXT://:9092; or set advertised.listeners"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://h:9092,SSL://h:9093"},
     "must be equal to or a subset of the ones defined in listeners. Found PLAINTEXT,SSL. The valid options "
     "based on the current configuration are PLAINTEXT"),
    ({"listeners": "SSL://:9093"}, "inter.broker.listener.name must be a listener name defined in "
                                   "advertised.listeners. The valid options based on currently configured "
                                   "listeners are SSL"),
    ({"listeners": "SSL://:9093", "inter.broker.listener.name": "REPLICATION"},
     "Listener with name REPLICATION defined in inter.broker.listener.name not found in "
     "listener.security.protocol.map"),
    ({"listeners": "SSL://:9093", "inter.broker.listener.name": "SSL", "security.inter.broker.protocol": "SSL"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set"),
    ({"listeners": "SSL://:9093", "security.inter.broker.protocol": "TLS"},
     "Invalid security protocol `TLS` defined in security.inter.broker.protocol"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", "advertised.listeners": "SSL://h:9093"},
     "inter.broker.listener.name must be a listener name defined in advertised.listeners"),
])
def test_broker_configs_kafka_refuses(configs, message):
    with pytest.raises(ListenerConfigError, match=message):
        listener_config(configs)
