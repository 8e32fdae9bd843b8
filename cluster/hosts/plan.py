"""Hosts on one machine, planned: names, addresses and the `ip` / `tc` commands that make them, as
pure functions (no process is run here; cluster/hosts/net.py runs them).

Each host is a Linux network namespace with one veth pair: its end inside the namespace is `eth0`
with the host's address, the other end is a port of a bridge in the root namespace, which holds
the subnet's last usable address so that clients on this machine reach every host. Hosts reach
each other through the bridge. Nothing routes the subnet anywhere else and no host has a default
route, so traffic never leaves the machine.

Addresses come from 198.18.0.0/15, the range set aside for benchmarking network devices
(RFC 2544), never a real network: the first /24 of it that no address or route of this machine
overlaps. Every name the harness makes starts with `krh<run id>` (namespaces, links, the run's
directory under /tmp), so a crashed run's leftovers are found by that prefix and removed.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

PREFIX = "krh"                                          # every name the harness makes starts with it
TEST_RANGE = ipaddress.ip_network("198.18.0.0/15")      # RFC 2544: benchmarking, never routed
SUBNET_PREFIX_LEN = 24
HOSTS_MAX = 200  # of a /24's 254 addresses: the last is the bridge's, the one before it `nowhere`
LINK_NAME_BYTES_MAX = 15                                # Linux IFNAMSIZ - 1
RUN_ID = re.compile(rf"^{PREFIX}([0-9a-f]{{4}})-")


class PlanError(ValueError):
    """The hosts can't be planned as asked; the message says what to change."""


@dataclass(frozen=True)
class HostPlan:
    index: int          # 1-based: host h1 is broker 1
    name: str           # "h1"
    netns: str          # its network namespace
    veth: str           # its veth's end in the root namespace (a bridge port): down = host cut off
    veth_peer: str      # the other end's name until it moves into the namespace and becomes eth0
    address: str        # its IP address, on eth0

    @property
    def inner_link(self) -> str:
        return "eth0"


@dataclass(frozen=True)
class NetworkPlan:
    run_id: str
    subnet: ipaddress.IPv4Network
    bridge: str
    bridge_address: str  # the root namespace's address on the subnet: clients reach hosts through it
    hosts: tuple[HostPlan, ...]
    nowhere: str         # an address of the subnet no one answers for: routes via it lose packets silently

    @property
    def prefix(self) -> str:
        """What every name of this run starts with."""
        return f"{PREFIX}{self.run_id}-"

    def host(self, which: int | str) -> HostPlan:
        """A host by index (1), name ("h1") or address."""
        for h in self.hosts:
            if which in (h.index, h.name, h.address, h.netns):
                return h
        raise KeyError(f"no host {which!r}: the hosts are {', '.join(h.name for h in self.hosts)}")

    def setup_commands(self) -> list[list[str]]:
        """`ip` argument lists, in order, that make the bridge and the hosts."""
        cmds = [["link", "add", self.bridge, "type", "bridge"],
                ["addr", "add", f"{self.bridge_address}/{self.subnet.prefixlen}", "dev", self.bridge],
                ["link", "set", self.bridge, "up"]]
        for h in self.hosts:
            cmds += [["netns", "add", h.netns],
                     ["link", "add", h.veth, "type", "veth", "peer", "name", h.veth_peer],
                     ["link", "set", h.veth, "master", self.bridge],
                     ["link", "set", h.veth, "up"],
                     ["link", "set", h.veth_peer, "netns", h.netns],
                     ["-n", h.netns, "link", "set", h.veth_peer, "name", h.inner_link],
                     ["-n", h.netns, "addr", "add", f"{h.address}/{self.subnet.prefixlen}", "dev", h.inner_link],
                     ["-n", h.netns, "link", "set", h.inner_link, "up"],
                     ["-n", h.netns, "link", "set", "lo", "up"]]
        return cmds

    def teardown_commands(self) -> list[list[str]]:
        """`ip` argument lists that remove what setup made (deleting a namespace deletes its veth
        end, which deletes the pair); each may fail harmlessly when its object is already gone."""
        return [["netns", "delete", h.netns] for h in self.hosts] + \
               [["link", "delete", h.veth] for h in self.hosts] + [["link", "delete", self.bridge]]


def plan(hosts: int, run_id: str, used: list[ipaddress.IPv4Network]) -> NetworkPlan:
    """`hosts` hosts h1..hN with addresses .1...N of the first free /24 of the test range."""
    if not 1 <= hosts <= HOSTS_MAX:
        raise PlanError(f"hosts must be between 1 and {HOSTS_MAX} (got {hosts})")
    if not re.fullmatch(r"[0-9a-f]{4}", run_id):
        raise PlanError(f"run id {run_id!r} must be 4 lowercase hex digits")
    subnet = choose_subnet(used)
    prefix = f"{PREFIX}{run_id}-"
    addresses = list(subnet.hosts())
    members = tuple(HostPlan(i, f"h{i}", f"{prefix}h{i}", f"{prefix}h{i}", f"{prefix}h{i}x", str(addresses[i - 1]))
                    for i in range(1, hosts + 1))
    for name in [f"{prefix}br"] + [n for h in members for n in (h.veth, h.veth_peer)]:
        if len(name.encode()) > LINK_NAME_BYTES_MAX:
            raise PlanError(f"link name {name!r} is longer than Linux allows ({LINK_NAME_BYTES_MAX} bytes)")
    return NetworkPlan(run_id, subnet, f"{prefix}br", str(addresses[-1]), members, str(addresses[-2]))


def choose_subnet(used: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The first /24 of the test range that overlaps none of `used` (this machine's addresses and
    routes, other runs' bridges included)."""
    for candidate in TEST_RANGE.subnets(new_prefix=SUBNET_PREFIX_LEN):
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise PlanError(f"every /{SUBNET_PREFIX_LEN} of {TEST_RANGE} is in use on this machine: "
                    f"remove leftovers (python -m cluster.hosts clean)")


def used_networks(addr_json: str, route_json: str) -> list[ipaddress.IPv4Network]:
    """IPv4 networks this machine uses, from `ip -j addr` and `ip -j route` (all tables).
    A default route covers everything and is left out: it is where traffic *would* go, and the
    test range is never routed there from a host (hosts have no default route)."""
    nets = []
    for link in json.loads(addr_json or "[]"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                nets.append(ipaddress.ip_network(f"{a['local']}/{a.get('prefixlen', 32)}", strict=False))
    for route in json.loads(route_json or "[]"):
        dst = route.get("dst", "")
        if dst in ("", "default") or ":" in dst:
            continue
        try:
            nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
        except ValueError:
            continue
    return nets


def run_id_of(name: str) -> str | None:
    """The run id in a harness-made name ('krh1a2b-h1' -> '1a2b'), else None."""
    m = RUN_ID.match(name)
    return m.group(1) if m else None


def leftovers(netns_names: list[str], link_names: list[str], live_runs: set[str]) -> tuple[list[str], list[str]]:
    """Namespaces and links a run made whose owner is gone (not in `live_runs`): (netns, links)."""
    dead = lambda name: (run := run_id_of(name)) is not None and run not in live_runs  # noqa: E731
    return sorted(n for n in netns_names if dead(n)), sorted(n for n in link_names if dead(n))


# ---- faults: a host's cable pulled, a link between two hosts cut, a bad link (tc netem) --------
# (where the kernel has no netem, the delay relay gives the bad link instead: see below)
def isolate_commands(host: HostPlan) -> list[list[str]]:
    """Cut `host` off from every other host and from the clients, both ways: its bridge port goes
    down (a pulled cable: packets are lost, nothing is refused, connections time out)."""
    return [["link", "set", host.veth, "down"]]


def heal_commands(host: HostPlan) -> list[list[str]]:
    return [["link", "set", host.veth, "up"]]


def cut_commands(network: NetworkPlan, a: HostPlan, b: HostPlan, *, both_ways: bool = True) -> list[list[str]]:
    """Cut the link between hosts `a` and `b` only (each still reaches the others and the
    clients): `a` routes packets for `b` to an address no one answers for, so they are lost
    silently, as in a real partition (nothing is refused; connections time out); with
    `both_ways`, `b` does the same for `a`, else only a -> b is lost (one-way loss)."""
    cmds = [["-n", a.netns, "route", "replace", f"{b.address}/32", "via", network.nowhere, "dev", a.inner_link]]
    if both_ways:
        cmds.append(["-n", b.netns, "route", "replace", f"{a.address}/32", "via", network.nowhere, "dev", b.inner_link])
    return cmds


def uncut_commands(a: HostPlan, b: HostPlan) -> list[list[str]]:
    """Undo cut_commands (either direction; each may fail harmlessly where there was no cut)."""
    return [["-n", a.netns, "route", "del", f"{b.address}/32"], ["-n", b.netns, "route", "del", f"{a.address}/32"]]


def check_degrade(delay_ms: float, jitter_ms: float, loss_percent: float) -> None:
    """What degrade() accepts, whatever carries it out (netem or the delay relay)."""
    if delay_ms < 0 or jitter_ms < 0 or not 0 <= loss_percent <= 100:
        raise PlanError("delay_ms and jitter_ms must be >= 0 and loss_percent within 0..100")
    if jitter_ms > delay_ms:
        raise PlanError(f"jitter ({jitter_ms} ms) larger than the delay ({delay_ms} ms) would send packets back in time")
    if not (delay_ms or loss_percent):
        raise PlanError("give a delay or a loss (restore() clears the link)")


def netem_commands(host: HostPlan, *, delay_ms: float = 0, jitter_ms: float = 0, loss_percent: float = 0) -> list[list[str]]:
    """`tc` argument lists giving `host`'s link latency and loss, both ways (each direction gets
    them once: traffic to the host leaves the bridge port, traffic from it leaves its eth0)."""
    check_degrade(delay_ms, jitter_ms, loss_percent)
    spec = ["netem"]
    if delay_ms or jitter_ms:
        spec += ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
    if loss_percent:
        spec += ["loss", f"{loss_percent:g}%"]
    return [["qdisc", "replace", "dev", host.veth, "root"] + spec,
            ["-n", host.netns, "qdisc", "replace", "dev", host.inner_link, "root"] + spec]


def netem_clear_commands(host: HostPlan) -> list[list[str]]:
    return [["qdisc", "del", "dev", host.veth, "root"],
            ["-n", host.netns, "qdisc", "del", "dev", host.inner_link, "root"]]


# ---- faults by packet filter (iptables in a host's namespace): loss, one way or both -----------
# Each host's own rules live in two chains of ours: FAULTS_IN sees what arrives on its eth0,
# FAULTS_OUT what leaves by it; healing flushes them. Loopback traffic (a host's processes talking
# to each other) never passes them. The lists below are `iptables` argument lists, run inside the
# host's namespace (cluster/hosts/net.py does that).
FAULTS_IN = "KRAY-FAULTS-IN"
FAULTS_OUT = "KRAY-FAULTS-OUT"


def filter_setup_commands(host: HostPlan) -> list[list[str]]:
    """Make the two chains and send eth0's traffic through them (once per host)."""
    return [["-w", "-N", FAULTS_IN], ["-w", "-N", FAULTS_OUT],
            ["-w", "-A", "INPUT", "-i", host.inner_link, "-j", FAULTS_IN],
            ["-w", "-A", "OUTPUT", "-o", host.inner_link, "-j", FAULTS_OUT]]


def _drop(probability: float) -> list[str]:
    if not 0 < probability <= 1:
        raise PlanError(f"a loss probability is within (0, 1] (got {probability})")
    if probability >= 1:
        return ["-j", "DROP"]
    return ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}", "-j", "DROP"]


def link_loss_commands(host: HostPlan, probability: float) -> list[list[str]]:
    """`host` loses each packet on its link with `probability`, both ways (a bad cable or NIC):
    iptables' statistic match, what netem's loss would do without its latency."""
    return [["-w", "-A", FAULTS_IN] + _drop(probability), ["-w", "-A", FAULTS_OUT] + _drop(probability)]


def one_way_loss_commands(receiver: HostPlan, sender: HostPlan, probability: float = 1.0) -> list[list[str]]:
    """Packets from `sender` to `receiver` are lost with `probability` (all of them by default),
    the other direction is untouched: run on the receiver, which drops them as they arrive. TCP
    then stalls both ways (its acknowledgements are lost), as over a real one-way fault; UDP and
    Ray's health checks see the asymmetry."""
    return [["-w", "-A", FAULTS_IN, "-s", sender.address] + _drop(probability)]


def filter_clear_commands() -> list[list[str]]:
    """Heal every filter fault of a host (its chains stay, empty)."""
    return [["-w", "-F", FAULTS_IN], ["-w", "-F", FAULTS_OUT]]


def split_commands(network: NetworkPlan, host: HostPlan) -> list[list[str]]:
    """`host` cut off from every other host (the controller's, the other replicas') but not from
    the clients, both ways: a leader on the wrong side of a partition, its clients still with it.
    `ip` argument lists (routes to nowhere, as cut_commands)."""
    return [cmd for other in network.hosts if other != host for cmd in cut_commands(network, host, other)]


def unsplit_commands(network: NetworkPlan, host: HostPlan) -> list[list[str]]:
    return [cmd for other in network.hosts if other != host for cmd in uncut_commands(host, other)]


# ---- a bad link without netem: the delay relay (cluster/hosts/delay_relay.py) ---------------------
# degrade(host) there means the same as with netem: each packet into or out of `host` is held for
# delay ± jitter (or lost) once per direction, so traffic between two degraded hosts gets it twice.
# The packets are queued (iptables' NFQUEUE) where they are *received*, never at a sender's OUTPUT
# (there a held packet counts against its TCP socket's small-queue budget and throttles it):
#   into the host      in the host's namespace, mangle PREROUTING, from its eth0
#   out of the host    in every other host's namespace, raw PREROUTING, from its eth0 and its
#                      address; in the clients' (root) namespace, raw PREROUTING from the
#                      bridge, its address, to the bridge's address (bridged packets between
#                      hosts pass the root's hooks too where br_netfilter is on: not those)
# Different tables (raw at priority -300, mangle at -150), so a packet between two degraded hosts
# meets both relays: an NFQUEUE verdict continues with the next hook, not the next rule.
# Queues bypass when no relay listens (--queue-bypass): a relay that died lets packets through,
# it never blackholes a link. The root namespace's queue numbers are shared with every other run
# on this machine: each run takes its own block of them (delay_queue).
DELAY_QUEUE_BASE = 10_000
DELAY_QUEUES_PER_RUN = 16          # hosts 1..15 get a queue of their own; more hosts share them modulo
DELAY_QUEUE_BLOCKS = 3_000         # 10_000 + 3_000 * 16 < 65_536
RELAY_READY = "delay_relay: ready"


def delay_queue(network: NetworkPlan, host: HostPlan) -> int:
    """The NFQUEUE number of `host`'s relay: one block per run id, so concurrent runs rarely meet
    (a relay that finds its number taken says so and degrade() fails)."""
    block = int(network.run_id, 16) % DELAY_QUEUE_BLOCKS
    return DELAY_QUEUE_BASE + block * DELAY_QUEUES_PER_RUN + host.index % DELAY_QUEUES_PER_RUN


def delay_rules(network: NetworkPlan, host: HostPlan) -> list[tuple[str | None, list[str]]]:
    """(namespace, iptables rule spec) of every rule that sends `host`'s packets to its relay's
    queue; the namespace None is the root one (the clients'). Add a spec with `-A`, remove it
    with `-D` (delay_rule_commands)."""
    queue = ["-j", "NFQUEUE", "--queue-num", str(delay_queue(network, host)), "--queue-bypass"]
    rules = [(host.netns, ["-t", "mangle", "PREROUTING", "-i", host.inner_link] + queue)]
    rules += [(other.netns, ["-t", "raw", "PREROUTING", "-i", other.inner_link, "-s", host.address] + queue)
              for other in network.hosts if other != host]
    rules.append((None, ["-t", "raw", "PREROUTING", "-i", network.bridge, "-s", host.address,
                         "-d", network.bridge_address] + queue))
    return rules


def delay_rule_commands(network: NetworkPlan, host: HostPlan, *, add: bool) -> list[tuple[str | None, list[str]]]:
    """(namespace, iptables argument list) adding (or deleting) `host`'s delay rules."""
    return [(netns, ["-w", spec[0], spec[1], "-A" if add else "-D", *spec[2:]]) for netns, spec in delay_rules(network, host)]


def relay_command(python: str, network: NetworkPlan, host: HostPlan, *, delay_ms: float, jitter_ms: float,
                  loss_percent: float, root_netns: str, stats: str, seed: int | None = None) -> list[str]:
    """The relay of `host`, run in its namespace: its queue there, in the other hosts' namespaces
    and in the root one (`root_netns`, a path to it: /proc/<pid of the harness>/ns/net)."""
    check_degrade(delay_ms, jitter_ms, loss_percent)
    argv = [python, "-m", "cluster.hosts.delay_relay", "--queue", str(delay_queue(network, host)),
            "--delay-ms", f"{delay_ms:g}", "--jitter-ms", f"{jitter_ms:g}", "--loss-percent", f"{loss_percent:g}",
            "--stats", stats]
    for other in network.hosts:
        if other != host:
            argv += ["--netns", f"/run/netns/{other.netns}"]
    argv += ["--netns", root_netns]
    return argv + ([] if seed is None else ["--seed", str(seed)])


def leftover_root_delay_rules(raw_rules: str, live_runs: set[str]) -> list[list[str]]:
    """iptables argument lists deleting the root namespace's delay rules (`iptables -t raw -S
    PREROUTING`'s lines) of runs whose owner is gone: the rules name their run's bridge."""
    out = []
    for line in raw_rules.splitlines():
        words = line.split()
        if len(words) > 3 and words[0] == "-A" and "-i" in words and "NFQUEUE" in words:
            run = run_id_of(words[words.index("-i") + 1])
            if run is not None and run not in live_runs:
                out.append(["-w", "-t", "raw", "-D", *words[1:]])
    return out
