"""`kray start` that cannot start says why, once, with what to do: a port another process holds is
a listening problem; a Ray cluster it cannot reach is a Ray problem, not a port problem (the
token-auth case, where Ray answers but refuses, is tried on hosts of their own: tests/hosts)."""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

KRAY = str(Path(sys.executable).parent / "kray")


def kray_start(*args, env=None, timeout=180):
    return subprocess.run([KRAY, "start", *args], capture_output=True, text=True, timeout=timeout,
                          env=env or os.environ, stdin=subprocess.DEVNULL)


def test_a_taken_port_is_reported_once_with_the_fix(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        r = kray_start("--port", str(port), "--data-dir", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.count("cannot listen") == 1, r.stderr
    assert f"port {port}" in r.stderr and "pick another port with --port" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_ray_cluster_it_cannot_reach_is_reported_as_that(tmp_path):
    with socket.socket() as s:  # a port where no Ray listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    started = time.monotonic()
    r = kray_start("--address", f"127.0.0.1:{port}", "--data-dir", str(tmp_path), env=env, timeout=60)
    assert r.returncode == 1
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in r.stderr, r.stderr
    assert "ray start --head" in r.stderr
    assert "cannot listen" not in r.stderr and "pick another port" not in r.stderr
    assert time.monotonic() - started < 30, "a wrong address must not take Ray's minutes of retries"


def test_a_wrong_plain_inter_broker_password_stops_kray_start_before_it_starts(tmp_path):
    """PLAIN's users are in the config: a broker login that the inter-broker listener's own users
    would refuse is found before Ray starts, and the message names what to make equal."""
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    started = time.monotonic()
    r = kray_start("--data-dir", str(tmp_path), "--port", "0",
                   "--override", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
                   "--override", "security.inter.broker.protocol=SASL_PLAINTEXT",
                   "--override", "sasl.enabled.mechanisms=PLAIN",
                   "--override", "sasl.mechanism.inter.broker.protocol=PLAIN",
                   "--override", f'listener.name.sasl_plaintext.plain.sasl.jaas.config={plain} required '
                                 f'username="broker" password="typo" user_broker="broker-secret";', timeout=60)
    assert r.returncode == 2, r.stderr
    assert "kray start: listener.name.sasl_plaintext.plain.sasl.jaas.config: the inter-broker password is wrong" \
        in r.stderr, r.stderr
    assert 'user_broker="..." to the same value' in r.stderr
    assert "typo" not in r.stderr and "broker-secret" not in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - started < 30, "refused before starting anything"
