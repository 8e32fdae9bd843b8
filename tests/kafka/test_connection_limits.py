"""Kafka's broker-wide connection limits against Apache Kafka 4.4 and Kray, compared: max.connections.per.ip
(through its overrides, for one address of this host), max.connections and max.connection.creation.rate, each
set as a dynamic cluster-wide broker config and removed again."""
import random
import socket
import time

from cluster.admin import KafkaConnection
from protocol import messages as m
from protocol.headers import RequestHeader, encode_request

SHOW_S = 15      # a dynamic config shows in the cluster default's DescribeConfigs within this
SETTLE_S = 1.0   # then every listener has it (Kafka applies it from its metadata log)
SILENT_S = 3.0   # a connection held unanswered this long is held, not slow
BROKER, SET, DELETE = 4, 0, 1  # (resource type; IncrementalAlterConfigs operations)
REQUEST = encode_request(RequestHeader(18, 0, 7, "kray-connection-limits"), m.ApiVersionsRequest().encode(0))


def set_cluster_default(bootstrap: str, key: str, value: str | None) -> None:
    """Set (or with None delete) a cluster-wide dynamic broker config (the broker resource named ""); returns once
    the broker describes it so."""
    A, D = m.IncrementalAlterConfigsRequest, m.DescribeConfigsRequest
    with KafkaConnection(bootstrap, client_id="kray-connection-limits") as conn:
        r = conn.send(A(validate_only=False, resources=[A.AlterConfigsResource(resource_type=BROKER, resource_name="",
                                                                               configs=[A.AlterableConfig(
            name=key, config_operation=SET if value is not None else DELETE, value=value)])]))
        assert [x.error_code for x in r.responses] == [0], r
        deadline = time.monotonic() + SHOW_S
        while time.monotonic() < deadline:
            r = conn.send(D(include_synonyms=False, include_documentation=False, resources=[
                D.DescribeConfigsResource(resource_type=BROKER, resource_name="", configuration_keys=[key])]))
            shown = {c.name: c.value for c in r.results[0].configs or ()}
            if shown.get(key) == value:
                break
            time.sleep(0.2)
    time.sleep(SETTLE_S)


def connect(bootstrap: str, source_ip: str = "127.0.0.1") -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5, source_address=(source_ip, 0))


def ask(s: socket.socket, wait_s: float) -> tuple[str, float]:
    """Send ApiVersions: ("answered" | "closed" | "silent", ms until then)."""
    started = time.monotonic()
    s.settimeout(wait_s)
    try:
        s.sendall(REQUEST)
        what = "answered" if len(s.recv(4)) == 4 else "closed"
    except (ConnectionResetError, BrokenPipeError):
        what = "closed"
    except socket.timeout:
        what = "silent"
    return what, (time.monotonic() - started) * 1000


def test_an_address_over_its_max_connections_per_ip_is_closed_at_once_as_on_kafka(both):
    """max.connections.per.ip.overrides gives one address 3 connections: a fourth is closed unanswered at once, other
    addresses are served, and once one of the three closes the address gets a connection again."""
    seen = {}
    for broker, bootstrap in both.items():
        source = f"127.0.{random.randrange(1, 255)}.{random.randrange(2, 255)}"
        set_cluster_default(bootstrap, "max.connections.per.ip.overrides", f"{source}:3")
        try:
            held = [connect(bootstrap, source) for _ in range(3)]
            first = [ask(s, 5)[0] for s in held]
            fourth = ask(connect(bootstrap, source), 5)
            elsewhere = ask(connect(bootstrap), 5)[0]
            held.pop().close()
            time.sleep(0.5)
            again = ask(connect(bootstrap, source), 5)[0]
            for s in held:
                s.close()
        finally:
            set_cluster_default(bootstrap, "max.connections.per.ip.overrides", None)
        seen[broker] = first, fourth, elsewhere, again
    for broker, (first, (fourth, fourth_ms), elsewhere, again) in seen.items():
        print(broker, first, fourth, round(fourth_ms), elsewhere, again)
        assert first == ["answered"] * 3, (broker, first)
        assert fourth == "closed" and fourth_ms < 2_000, (broker, fourth, fourth_ms)  # (not held: closed at once)
        assert (elsewhere, again) == ("answered", "answered"), (broker, elsewhere, again)


def test_at_max_connections_a_new_connection_waits_for_one_to_close_as_on_kafka(both):
    """max.connections 20: connections beyond what the broker holds are taken by TCP but not answered (the listener
    accepts nothing more) and not closed; once one of them closes, the waiting one is answered."""
    limit = 20
    seen = {}
    for broker, bootstrap in both.items():
        set_cluster_default(bootstrap, "max.connections", str(limit))
        held, outcomes = [], []
        try:
            while len(held) < limit + 5:
                held.append(connect(bootstrap))
                what, _ = ask(held[-1], SILENT_S)
                outcomes.append(what)
                if what != "answered":
                    break
            held[0].close()
            later = ask(held[-1], 5) if outcomes[-1] == "silent" else (None, 0)
        finally:
            for s in held:
                s.close()
            set_cluster_default(bootstrap, "max.connections", None)
        seen[broker] = outcomes, later
    for broker, (outcomes, (later, later_ms)) in seen.items():
        print(broker, outcomes.count("answered"), outcomes[-1], later, round(later_ms))
        # (Kafka 4.4 answered 20 here and held the 21st; a connection another test left open counts too)
        assert outcomes[-1] == "silent" and limit - 10 <= outcomes.count("answered") <= limit, (broker, outcomes)
        assert later == "answered", (broker, later, later_ms)  # (within 5 s of another's close: 1-4 ms here)


def test_max_connection_creation_rate_delays_connections_over_it_and_closes_none_as_on_kafka(both):
    """max.connection.creation.rate 2/s: 20 connections in a row are taken at once (a young rate is measured over
    10 s), then each further one is answered late, by up to one window (1 s), and none is closed."""
    seen = {}
    for broker, bootstrap in both.items():
        set_cluster_default(bootstrap, "max.connection.creation.rate", "2")
        try:
            outcomes = []
            for _ in range(26):
                with connect(bootstrap) as s:
                    outcomes.append(ask(s, 5))
        finally:
            set_cluster_default(bootstrap, "max.connection.creation.rate", None)
        seen[broker] = outcomes
    for broker, outcomes in seen.items():
        shown = [(what[0], round(ms)) for what, ms in outcomes]
        print(broker, shown[18:])
        assert [what for what, _ in outcomes] == ["answered"] * 26, (broker, shown)
        late = [ms for _, ms in outcomes[20:] if ms >= 300]
        assert len(late) >= 3 and all(ms <= 3_000 for _, ms in outcomes), (broker, shown)  # (a wait is <= 1 s)


def test_the_cluster_wide_default_describes_only_what_is_set_there_as_kafka_does(both):
    """DescribeConfigs of the broker resource "" (kafka-configs --entity-type brokers --entity-default --describe):
    only the dynamic cluster-wide defaults, each with that source (Kafka 4.4 also has min.insync.replicas there,
    written when its storage was formatted)."""
    D = m.DescribeConfigsRequest
    seen = {}
    for broker, bootstrap in both.items():
        set_cluster_default(bootstrap, "max.connections.per.ip", "1000")
        try:
            with KafkaConnection(bootstrap, client_id="kray-connection-limits") as conn:
                r = conn.send(D(include_synonyms=True, include_documentation=False, resources=[
                    D.DescribeConfigsResource(resource_type=BROKER, resource_name="", configuration_keys=None)]))
        finally:
            set_cluster_default(bootstrap, "max.connections.per.ip", None)
        seen[broker] = r.results[0].error_code, [(c.name, c.value, c.config_source, [(s.name, s.source) for s in c.synonyms])
                                                 for c in r.results[0].configs]
    for broker, (error, configs) in seen.items():
        assert error == 0 and all(source == 3 for _, _, source, _ in configs), (broker, configs)
        assert ("max.connections.per.ip", "1000", 3, [("max.connections.per.ip", 3)]) in configs, (broker, configs)
        assert len(configs) <= 3, (broker, configs)
