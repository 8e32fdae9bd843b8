"""The secured benchmark's pure parts (benchmarks/secured.py): the broker's overrides and their TOML,
the clients' settings per listener, and the per-cell medians, from made-up runs."""
import tomllib

from benchmarks.secured import (MECHANISM, as_toml, cell_stats, client_config, kray_overrides, masked, per_gb,
                                table)

PORTS = {"PLAINTEXT": 9092, "SASL_PLAINTEXT": 9093, "SASL_SSL": 9094}


def test_overrides_name_three_listeners_scram_and_the_authorizer():
    overrides = dict(kv.split("=", 1) for kv in kray_overrides(PORTS, "/etc/kray/broker.pem"))
    assert overrides["listeners"] == ("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093,"
                                      "SASL_SSL://127.0.0.1:9094")
    assert overrides["sasl.enabled.mechanisms"].split(",")[0] == "SCRAM-SHA-512"
    assert overrides["ssl.keystore.type"] == "PEM"
    assert overrides["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert 'user_admin="' in overrides["listener.name.sasl_plaintext.plain.sasl.jaas.config"]


def test_toml_reads_back_as_the_same_settings():
    overrides = kray_overrides(PORTS, "/etc/kray/broker.pem")
    parsed = tomllib.loads(as_toml(overrides))["broker"]
    assert parsed == dict(kv.split("=", 1) for kv in overrides)


def test_client_settings_per_listener():
    assert client_config("PLAINTEXT", "/ca.pem") == {}
    sasl = client_config("SASL_PLAINTEXT", "/ca.pem")
    assert sasl["sasl.mechanism"] == MECHANISM and "ssl.ca.location" not in sasl
    tls = client_config("SASL_SSL", "/ca.pem")
    assert tls["security.protocol"] == "SASL_SSL" and tls["ssl.ca.location"] == "/ca.pem"
    assert masked(tls)["sasl.password"] == "***"


def _run(produce_mb_s, fetch_mb_s, load, broker_cpu_s=1.0):
    nbytes = 300_000_000
    return {"load_1m": load, "load_1m_end": load + 0.5,
            "produce": {"mb_s": produce_mb_s, "bytes": nbytes, "broker_cpu_s": broker_cpu_s, "client_cpu_s": 0.6,
                        "lat_p50_ms": produce_mb_s / 10, "lat_p99_ms": produce_mb_s / 5},
            "fetch": {"mb_s": fetch_mb_s, "bytes": nbytes, "broker_cpu_s": broker_cpu_s / 2, "client_cpu_s": 0.3}}


def test_cell_stats_are_medians_with_the_median_runs_latency_and_the_load_range():
    runs = [_run(100, 300, 1.0), _run(300, 100, 2.0, broker_cpu_s=3.0), _run(200, 200, 3.0), {"produce": {"error": "x"}}]
    s = cell_stats(runs)
    assert s["produce"]["mb_s"] == 200 and s["produce"]["runs"] == 3
    assert s["produce"]["lat_p99_ms"] == 40          # the run whose MB/s is the median's
    assert s["produce"]["broker_cpu_s_per_gb"] == 3.33  # median of 1/0.3, 3/0.3, 1/0.3
    assert s["fetch"]["mb_s"] == 200
    assert s["fetch"]["client_cpu_s_per_gb"] == 1.0
    assert s["load_1m"] == [1.0, 3.5]


def test_per_gb_of_nothing_is_unknown():
    assert per_gb(None, 10) is None and per_gb(1.0, 0) is None
    assert per_gb(2.0, 4_000_000_000) == 0.5


def test_table_compares_each_listener_with_plaintext_and_says_what_tansu_does_not_serve():
    doc = {"targets": ["tansu", "kray"], "cells": {
        "tansu PLAINTEXT tuned": {"stats": cell_stats([_run(200, 300, 1.0)])},
        "tansu SASL_SSL tuned": {"skipped": "no TLS"},
        "kray PLAINTEXT tuned": {"stats": cell_stats([_run(200, 400, 1.0)])},
        "kray SASL_SSL tuned": {"stats": cell_stats([_run(100, 100, 1.0)])},
    }}
    rows = table(doc, "tuned")
    assert any("| tansu | SASL_SSL (SCRAM-SHA-512) | not served" in r for r in rows)
    kray_tls = next(r for r in rows if r.startswith("| kray | SASL_SSL"))
    assert "0.50× / 0.25×" in kray_tls


def test_gateway_cpu_per_gb_comes_from_the_gateway_actors_share():
    run = _run(100, 100, 1.0)
    run["fetch"]["broker_cpu_s_by_role"] = {"GatewayActor": 0.15, "ShardActor": 0.05, "other": 0.3}
    assert cell_stats([run])["fetch"]["gateway_cpu_s_per_gb"] == 0.5
    assert cell_stats([_run(100, 100, 1.0)])["fetch"]["gateway_cpu_s_per_gb"] is None
