"""`--bootstrap-server a,b,c`: Kray's tools read every address of the list (cluster/admin.py), so a
tool still reaches the cluster when the first broker is down or cut off."""
import socket

import pytest

from cluster.admin import AdminError, KafkaConnection, parse_bootstrap, parse_bootstrap_servers


def test_every_address_of_the_list_is_read_in_order():
    assert parse_bootstrap_servers("198.18.0.3:9092, 198.18.0.1:9092,[::1]:9093,") == [
        ("198.18.0.3", 9092), ("198.18.0.1", 9092), ("::1", 9093)]
    assert parse_bootstrap("a:1,b:2") == ("a", 1)
    with pytest.raises(AdminError, match="'b' is not HOST:PORT"):
        parse_bootstrap_servers("a:1,b")
    with pytest.raises(AdminError, match="names no broker"):
        parse_bootstrap_servers(" , ")


def test_when_no_address_answers_the_error_names_each_with_its_reason():
    closed = []
    for _ in range(2):  # two ports nothing listens on
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed.append(s.getsockname()[1])
    with pytest.raises(AdminError) as e:
        KafkaConnection(f"127.0.0.1:{closed[0]},127.0.0.1:{closed[1]}", timeout_s=2)
    assert f"127.0.0.1:{closed[0]}: " in str(e.value) and f"127.0.0.1:{closed[1]}: " in str(e.value)
    assert "kray start" in str(e.value)
