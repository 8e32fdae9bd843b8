"""The hosts harness's network faults do what they say, seen by packets (no Ray, no Kray: a small
TCP and UDP listener on each host): isolate, split (cut from the other hosts, not from the
clients), one-way loss (by route and by packet filter), random loss on a link, latency (tc netem,
or the delay relay where the kernel has no netem), and heal_all.
Needs root and `ip netns`; the filter faults need iptables."""
import sys
import time

import pytest

from cluster.hosts.net import HostNetwork, filter_unavailable_reason, unavailable_reason

pytestmark = pytest.mark.hosts
TCP_PORT, UDP_PORT = 7000, 7001

LISTENER = f"""
import socket, sys, threading
out = open(sys.argv[1], "a", buffering=1)
def tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", {TCP_PORT})); s.listen(64)
    while True:
        s.accept()[0].close()
threading.Thread(target=tcp, daemon=True).start()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", {UDP_PORT}))
while True:
    data, (addr, _) = u.recvfrom(100)
    out.write(addr + "\\n")
"""
CONNECT = f"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], {TCP_PORT}), timeout=1.0).close()
except OSError:
    sys.exit(1)
"""
SEND = f"""
import socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[2])):
    u.sendto(b"x", (sys.argv[1], {UDP_PORT})); time.sleep(0.002)
"""


@pytest.fixture(scope="module")
def net():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"hosts harness unavailable: {reason}")
    n = HostNetwork(3)
    try:
        n.create()
        for h in n.plan.hosts:
            n.popen(h.name, [sys.executable, "-c", LISTENER, str(n.run_dir / f"{h.name}.udp")])
        time.sleep(1.0)
        yield n
    finally:
        n.destroy()


def reaches(net, src, dst) -> bool:
    """A TCP connection from host `src` (None: the clients' root namespace) to host `dst`."""
    import subprocess
    argv = [sys.executable, "-c", CONNECT, net.plan.host(dst).address]
    cmd = argv if src is None else net.command(src, argv)
    return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0


def udp_received(net, src, dst, count: int = 200) -> int:
    """How many of `count` datagrams from `src` (None: root) reached `dst`."""
    import subprocess
    log = net.run_dir / f"h{net.plan.host(dst).index}.udp"
    src_address = net.plan.bridge_address if src is None else net.plan.host(src).address
    before = log.read_text().split().count(src_address) if log.exists() else 0
    argv = [sys.executable, "-c", SEND, net.plan.host(dst).address, str(count)]
    subprocess.run(argv if src is None else net.command(src, argv), check=True, timeout=60)
    time.sleep(0.5)
    return log.read_text().split().count(src_address) - before


CONNECT_MS = f"""
import socket, statistics, sys, time
out = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    socket.create_connection((sys.argv[1], {TCP_PORT}), timeout=5.0).close()
    out.append((time.perf_counter() - t) * 1000)
print(statistics.median(out), min(out))
"""


def connect_ms(net, src, dst, count: int = 7) -> tuple[float, float]:
    """(median, min) of TCP connects (one round trip each) from `src` (None: root) to `dst`, in ms."""
    import subprocess
    argv = [sys.executable, "-c", CONNECT_MS, net.plan.host(dst).address, str(count)]
    out = subprocess.run(argv if src is None else net.command(src, argv), capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    return float(out[0]), float(out[1])


def all_reach(net) -> bool:
    hosts = [None, 1, 2, 3]
    return all(reaches(net, a, b) for a in hosts for b in (1, 2, 3) if a != b)


def test_isolate_cuts_a_host_off_from_every_host_and_client_and_heal_brings_it_back(net):
    assert all_reach(net)
    net.isolate(2)
    assert not reaches(net, None, 2) and not reaches(net, 1, 2) and not reaches(net, 2, 3)
    assert reaches(net, None, 1) and reaches(net, 1, 3)
    net.heal(2)
    assert all_reach(net)


def test_split_cuts_a_host_off_from_the_other_hosts_but_not_from_the_clients(net):
    net.split(1)
    assert reaches(net, None, 1) and reaches(net, None, 2) and reaches(net, 2, 3)
    assert not reaches(net, 1, 2) and not reaches(net, 3, 1)
    net.unsplit(1)
    assert all_reach(net)


def test_one_way_cut_loses_only_one_direction(net):
    net.cut(2, 1, both_ways=False)       # h2 -> h1 lost
    assert udp_received(net, 2, 1) == 0 and udp_received(net, 1, 2) == 200
    assert not reaches(net, 2, 1) and not reaches(net, 1, 2)  # TCP needs both ways
    assert reaches(net, 2, 3) and reaches(net, None, 2)
    net.uncut(2, 1)
    assert all_reach(net)


def test_filter_faults_lose_one_way_or_a_share_of_a_links_packets_and_heal_all_clears_them(net):
    reason = filter_unavailable_reason()
    if reason:
        pytest.skip(reason)
    net.lose_from(1, 3)                  # h3 -> h1 lost at h1's door
    assert udp_received(net, 3, 1) == 0 and udp_received(net, 1, 3) == 200 and udp_received(net, 2, 1) == 200
    net.unlose(1)
    assert udp_received(net, 3, 1) == 200
    net.lose(2, 0.5)
    got = udp_received(net, None, 2, 400)
    assert 100 < got < 300, f"{got} of 400 datagrams through a link losing half"
    assert reaches(net, 1, 3)
    net.split(3)
    net.isolate(1)
    net.heal_all()
    assert udp_received(net, None, 2) == 200 and all_reach(net)


def test_degrade_delays_a_hosts_link_both_ways_and_loses_a_share_and_restore_undoes_it(net):
    reason = filter_unavailable_reason()
    if reason:
        pytest.skip(reason)
    assert connect_ms(net, 1, 2)[0] < 5
    net.degrade(2, delay_ms=20, jitter_ms=5, seed=1)   # 15..25 ms each way: a connect's round trip 30..50 ms
    print(f"\nlatency by {net.latency_mechanism()}")
    for src in (1, None):                                  # from another host, from the clients
        median, fastest = connect_ms(net, src, 2)
        assert fastest >= 15 and 30 <= median < 80, (src, median, fastest)
    assert connect_ms(net, 1, 3)[0] < 5                    # h1 <-> h3 untouched
    net.degrade(2, delay_ms=0, loss_percent=50)            # replaces the delay
    got = udp_received(net, None, 2, 400)
    assert 100 < got < 300, f"{got} of 400 datagrams through a link losing half"
    net.restore(2)
    assert connect_ms(net, 1, 2)[0] < 5 and udp_received(net, None, 2) == 200
    net.degrade(3, delay_ms=20)
    net.heal_all()                                         # clears latency too
    assert connect_ms(net, 1, 3)[0] < 5 and not net.degraded
