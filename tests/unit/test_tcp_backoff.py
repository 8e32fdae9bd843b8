"""Kray's own TCP connections cap their retransmission backoff (actors/tcp_backoff.py), and an
operator whose host lets Ray's connections back off longer is told what to set."""
import asyncio
import socket

import pytest

from actors import tcp_backoff

KERNEL_HAS_CAP = tcp_backoff.host_rto_max_ms() is not None


@pytest.mark.skipif(not KERNEL_HAS_CAP, reason="this kernel has no TCP_RTO_MAX_MS (Linux 6.15+)")
def test_a_tcp_socket_is_capped_at_one_second():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert tcp_backoff.cap(sock)
        assert sock.getsockopt(socket.IPPROTO_TCP, tcp_backoff.TCP_RTO_MAX_MS_OPTION) == tcp_backoff.RTO_MAX_MS
        # capped retransmissions would give up ~13 s into a cut (tcp_retries2): the socket waits longer
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == tcp_backoff.USER_TIMEOUT_MS


def test_a_unix_socket_or_none_is_left_alone():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        assert not tcp_backoff.cap(sock)
    assert not tcp_backoff.cap(None)


@pytest.mark.skipif(not KERNEL_HAS_CAP, reason="this kernel has no TCP_RTO_MAX_MS (Linux 6.15+)")
def test_connections_kray_opens_and_accepts_are_capped(monkeypatch):
    """A PipelinedConnection (replica fetchers, share-state clients) and a gateway front end's
    accepted connection both carry the cap."""
    from actors.gateway.frontend import start_frontend
    from actors.pipelined import PipelinedConnection

    class Ctx:  # what start_frontend reads of a gateway's context before any request arrives
        config = {"socket.request.max.bytes": 1 << 20, "connections.max.idle.ms": 60000}
        advertised = None
        metadata = None  # (no client quotas nor dynamic connection limits: every connection is served)
        broker_id = 1

    async def run():
        server = await start_frontend(Ctx(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await PipelinedConnection.open_tcp("127.0.0.1", port, timeout_s=5, response_bytes_max=1024)
        try:
            mine = connection.writer.get_extra_info("socket")
            assert mine.getsockopt(socket.IPPROTO_TCP, tcp_backoff.TCP_RTO_MAX_MS_OPTION) == tcp_backoff.RTO_MAX_MS
            await asyncio.sleep(0.1)  # the server side accepted it
            local = mine.getsockname()
            theirs = [c for c in capped if c.getpeername() == local]
            assert theirs and theirs[0].getsockopt(socket.IPPROTO_TCP, tcp_backoff.TCP_RTO_MAX_MS_OPTION) \
                == tcp_backoff.RTO_MAX_MS
        finally:
            connection.close()
            server.close()

    capped = []  # every socket Kray capped: the front end's accepted one among them
    original = tcp_backoff.cap
    monkeypatch.setattr(tcp_backoff, "cap", lambda sock: capped.append(sock) or original(sock))
    asyncio.run(run())


def test_host_advice_names_the_setting_and_the_fix(tmp_path):
    setting = tmp_path / "tcp_rto_max_ms"
    setting.write_text("120000\n")
    advice = tcp_backoff.host_advice(setting)
    assert "net.ipv4.tcp_rto_max_ms is 120000" in advice and "sysctl -w net.ipv4.tcp_rto_max_ms=1000" in advice
    setting.write_text("1000\n")
    assert tcp_backoff.host_advice(setting) is None
    assert tcp_backoff.host_advice(tmp_path / "missing") is None  # a kernel without it: nothing to set
