"""TCP's retransmission backoff, capped, so that connections resume soon after a network cut heals.

A TCP connection that had unacknowledged data during a cut sends nothing more until its
retransmission timer fires, and that timer doubles after each unanswered retransmission, up to
`net.ipv4.tcp_rto_max_ms` (120 s by default). When the cut heals the connection stays silent
until the next retransmission: on Kray's hosts harness, after a 60 s cut of the host that runs
the controller, a broker's heartbeats reached the controller 23-26 s after the heal over such a
connection, and writes resumed 10.8-28.5 s after it (benchmarks/results/partition-heal.md).
Kafka's clients and brokers meet this by closing a connection whose request timed out; Ray's
connections between processes are not Kray's to close.

Linux 6.15 caps the backoff per host (the `net.ipv4.tcp_rto_max_ms` sysctl, per network
namespace) and per socket (the TCP_RTO_MAX_MS option, which takes precedence). Kray caps its own
connections (the brokers' listeners, replica fetchers, share-state clients) at RTO_MAX_MS; Ray's
connections follow the host's sysctl, which the README asks broker hosts to set to the same
value. The cap changes nothing while packets flow (the timer follows the measured round trip);
after an outage a connection retries about once a second, a few packets per connection.
Where the kernel is older the option is refused and connections back off as before.

Capped retransmissions also run out sooner: Linux gives up on a connection after
`net.ipv4.tcp_retries2` (15) of them, ~13 s at 1 s apart instead of ~15 minutes. A broker's
connection to a client that waits for a long answer (a JoinGroup held by a rebalance) then died
13 s into a 60 s cut, and the client, with nothing to send, never learned it (seen on the hosts
harness). So a capped socket also gets TCP_USER_TIMEOUT = USER_TIMEOUT_MS: it gives up only
after data went unacknowledged that long, as long as Ray's health settings for brokers let a node
ride out a cut (README: about 2 minutes), and its answer goes out at the heal.
"""
from __future__ import annotations

import socket
from pathlib import Path

TCP_RTO_MAX_MS_OPTION = getattr(socket, "TCP_RTO_MAX_MS", 44)  # linux/tcp.h (6.15)
RTO_MAX_MS = 1000
USER_TIMEOUT_MS = 120_000
HOST_SETTING = Path("/proc/sys/net/ipv4/tcp_rto_max_ms")


def cap(sock: socket.socket | None) -> bool:
    """Cap `sock`'s retransmission backoff at RTO_MAX_MS, and let it give up only after
    USER_TIMEOUT_MS unacknowledged; False (nothing set) where the kernel (or the socket: a Unix
    socket) has no such cap."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS_OPTION, RTO_MAX_MS)
    except OSError:
        return False
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
    return True


def host_rto_max_ms(setting: Path = HOST_SETTING) -> int | None:
    """This host's (network namespace's) `net.ipv4.tcp_rto_max_ms`; None where the kernel has none."""
    try:
        return int(setting.read_text().strip())
    except (OSError, ValueError):
        return None


def host_advice(setting: Path = HOST_SETTING) -> str | None:
    """What to tell an operator whose host lets Ray's connections back off longer than Kray's own;
    None when the host is set as recommended, or its kernel can't be."""
    value = host_rto_max_ms(setting)
    if value is None or value <= RTO_MAX_MS:
        return None
    return (f"net.ipv4.tcp_rto_max_ms is {value} on this host: after a network cut heals, Ray's connections "
            f"between brokers may stay silent for up to {value / 1000:g} s (Kray's own connections are capped at "
            f"{RTO_MAX_MS} ms); set `sysctl -w net.ipv4.tcp_rto_max_ms={RTO_MAX_MS}` on every broker host "
            f"(and in /etc/sysctl.d/ to keep it)")
