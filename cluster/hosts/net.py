"""Hosts on one machine, made: network namespaces on a bridge (see cluster/hosts/plan.py), the
processes run in them, faults on their links, and removal of all of it.

    with HostNetwork(3) as net:                     # needs root and `ip netns`
        net.popen("h2", ["python", "-m", "http.server", "9092"])
        net.plan.host("h2").address                 # "198.18.0.2": reach it from here
        net.isolate("h2"); ...; net.heal("h2")      # h2's cable pulled, and back
        net.cut("h1", "h2"); ...; net.uncut("h1", "h2")   # h1 and h2 can't reach each other
        net.degrade("h2", delay_ms=20, jitter_ms=5); ...; net.restore("h2")  # a slow link, both ways

Leaving the block (an exception included) kills every process in the namespaces, then removes
the namespaces, the links, the bridge, the run's rules in this namespace (the delay relay's) and
the run's directory. A run that could not clean up (it
was SIGKILLed) is cleaned up by the next one: its names start with `krh<run id>-` and its
directory records its owner's pid, which is then gone, and the processes it started outside its
hosts (a GCS's Redis: record_daemon), which are ended (`python -m cluster.hosts clean` does the
same by hand).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from actors import tcp_backoff
from cluster.hosts import plan as planner
from cluster.hosts.plan import NetworkPlan

log = logging.getLogger("kray.hosts")
RUNS_DIR = Path("/tmp")          # each run's directory: /tmp/krh<run id> (homes, Ray temp dirs, data)
OWNER_FILE = "owner.pid"
KILL_GRACE_S = 5.0
REPO = Path(__file__).resolve().parents[2]
RELAY_READY_TIMEOUT_S = 30.0
NETEM = "netem"
RELAY = "relay"  # cluster/hosts/delay_relay.py, where the kernel has no netem


class HostsUnavailable(RuntimeError):
    """This machine can't make hosts (not root, no `ip netns`): the message says why."""


class CommandFailed(RuntimeError):
    pass


def unavailable_reason() -> str | None:
    """Why hosts can't be made here, or None when they can."""
    if os.geteuid() != 0:
        return "hosts are network namespaces: run as root (CI does)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed: apt-get install iproute2"
    name = f"{planner.PREFIX}probe{os.getpid() % 10000:04d}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    return None


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check)


def tc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["tc", *args], check)


def filter_unavailable_reason() -> str | None:
    """Why packet-filter faults (loss, one-way loss) can't be made here, or None when they can."""
    if shutil.which("iptables") is None:
        return "`iptables` is not installed (apt-get install iptables): loss faults need it; isolate, split and cut don't"
    return None


def _run(argv: list[str], check: bool) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise CommandFailed(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done


def netns_pids(netns: str) -> list[int]:
    out = ip("netns", "pids", netns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def kill_namespace_processes(*netns: str, grace_s: float = KILL_GRACE_S,
                             first_signal: signal.Signals = signal.SIGTERM) -> int:
    """SIGTERM every process in the namespaces `netns` (all of them the harness's: nothing else
    runs there), all namespaces at once, then SIGKILL what is left after `grace_s` (what started
    meanwhile too); returns how many there were at first. At once, not host by host: some of
    Ray's processes outlive a SIGTERM by the whole grace, which host by host cost 3 x 5 s.
    `first_signal=SIGKILL`: no process gets a chance to clean up (a machine that loses its power)."""
    def alive() -> list[int]:
        return [pid for name in netns for pid in netns_pids(name)]
    pids = alive()
    first = len(pids)
    for sig in dict.fromkeys((first_signal, signal.SIGKILL)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while (pids := alive()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not pids:
            break
    return first


def _owner_alive(run_id: str) -> bool:
    try:
        pid = int((RUNS_DIR / f"{planner.PREFIX}{run_id}" / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next((line.split()[1] for line in f if line.startswith("State:")), "?")
    except OSError:
        return False
    return state not in ("Z", "X")  # a killed owner may linger as a zombie until reaped


def clean_leftovers() -> list[str]:
    """Remove what crashed runs left (namespaces, their processes, links, run directories):
    every harness-made name whose run's owner process is gone. Returns what was removed."""
    netns = [line.split()[0] for line in ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    links = [line.split(":")[1].strip().split("@")[0] for line in ip("-o", "link", "show", check=False).stdout.splitlines()
             if line.count(":") >= 2]
    runs = {r for r in map(planner.run_id_of, netns + links) if r} | \
           {r for r in (planner.run_id_of(p.name + "-") for p in RUNS_DIR.glob(f"{planner.PREFIX}*")) if r}
    live = {r for r in runs if _owner_alive(r)}
    dead_netns, dead_links = planner.leftovers(netns, links, live)
    removed = []
    for name in dead_netns:
        kill_namespace_processes(name)
        ip("netns", "delete", name, check=False)
        removed.append(f"netns {name}")
    for name in dead_links:
        if ip("link", "delete", name, check=False).returncode == 0:
            removed.append(f"link {name}")
    if shutil.which("iptables") is not None:
        raw = _run(["iptables", "-w", "-t", "raw", "-S", "PREROUTING"], False).stdout
        for args in planner.leftover_root_delay_rules(raw, live):
            if _run(["iptables", *args], False).returncode == 0:
                removed.append(f"delay rule {' '.join(args[4:])}")
    for run in sorted(runs - live):
        directory = RUNS_DIR / f"{planner.PREFIX}{run}"
        for name in _kill_leftover_daemons(directory):
            removed.append(f"{name} of run {run}")
        if directory.is_dir():
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(f"directory {directory}")
    return removed


DAEMONS_FILE = "daemons.pid"  # processes a run started outside its hosts (the GCS's Redis): "pid name" lines


def record_daemon(run_dir: Path, pid: int, name: str) -> None:
    """Note a process the run started outside its hosts (in this namespace), for clean_leftovers."""
    with open(run_dir / DAEMONS_FILE, "a") as f:
        f.write(f"{pid} {name}\n")


def _kill_leftover_daemons(directory: Path) -> list[str]:
    """SIGKILL the processes a crashed run recorded (record_daemon) that still run under their name."""
    killed = []
    try:
        lines = (directory / DAEMONS_FILE).read_text().splitlines()
    except OSError:
        return killed
    for line in lines:
        pid, _, name = line.partition(" ")
        try:
            with open(f"/proc/{int(pid)}/comm") as f:
                if f.read().strip() != name[:15]:
                    continue
            os.kill(int(pid), signal.SIGKILL)
            killed.append(f"{name} (pid {pid})")
        except (OSError, ValueError):
            continue
    return killed


class HostNetwork:
    """`hosts` network namespaces h1..hN on a bridge, each with its own address."""

    def __init__(self, hosts: int = 3, *, tcp_rto_max_ms: int | None = tcp_backoff.RTO_MAX_MS):
        """`tcp_rto_max_ms`: each host's net.ipv4.tcp_rto_max_ms, as the README asks of broker hosts
        (None: the kernel's default, 120 s; ignored where the kernel has no such setting)."""
        self.count = hosts
        self.tcp_rto_max_ms = tcp_rto_max_ms
        self.plan: NetworkPlan | None = None
        self.run_dir: Path | None = None
        self.processes: list[subprocess.Popen] = []
        self.isolated: set[str] = set()
        self.split_hosts: set[str] = set()
        self.filtered: set[str] = set()   # hosts whose fault chains exist (cluster/hosts/plan.py FAULTS_IN/OUT)
        self.latency: str | None = None   # how degrade() works here: NETEM or RELAY (None: find out at first use)
        self.degraded: dict[str, str] = {}  # host name -> the mechanism its degrade() used
        self.relays: dict[str, tuple[subprocess.Popen, Path]] = {}  # host name -> its delay relay and output
        self._outputs = itertools.count(1)

    # ---- make and remove ---------------------------------------------------------------------
    def create(self) -> NetworkPlan:
        reason = unavailable_reason()
        if reason:
            raise HostsUnavailable(reason)
        for what in clean_leftovers():
            log.warning("removed a crashed run's leftover %s", what)
        run_id = secrets.token_hex(2)
        used = planner.used_networks(ip("-j", "addr").stdout, ip("-j", "route", "show", "table", "all").stdout)
        self.plan = planner.plan(self.count, run_id, used)
        self.run_dir = RUNS_DIR / f"{planner.PREFIX}{run_id}"
        self.run_dir.mkdir(mode=0o755)
        (self.run_dir / OWNER_FILE).write_text(str(os.getpid()))
        try:
            for args in self.plan.setup_commands():
                ip(*args)
            if self.tcp_rto_max_ms is not None and tcp_backoff.host_rto_max_ms() is not None:
                for h in self.plan.hosts:
                    ip("netns", "exec", h.netns, "sysctl", "-q", "-w", f"net.ipv4.tcp_rto_max_ms={self.tcp_rto_max_ms}")
        except BaseException:
            self.destroy()
            raise
        return self.plan

    def destroy(self) -> None:
        """Kill every process of the hosts, remove the namespaces, links, bridge and directory.
        Safe to call twice, and after a half-made create."""
        if self.plan is None:
            return
        for proc in self.processes:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for name in list(self.degraded):
            self._remove_delay_rules(name, root_only=True)  # the hosts' own rules go with their namespaces
        kill_namespace_processes(*(host.netns for host in self.plan.hosts))
        for proc in self.processes:
            try:
                proc.wait(KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        for args in self.plan.teardown_commands():
            ip(*args, check=False)
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        self.plan = None

    def __enter__(self) -> "HostNetwork":
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    # ---- run things on a host ----------------------------------------------------------------
    def command(self, host: int | str, argv: list[str]) -> list[str]:
        """`argv` as run on `host` (inside its namespace)."""
        return ["ip", "netns", "exec", self.plan.host(host).netns, *argv]

    def popen(self, host: int | str, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start `argv` on `host`; it is killed at destroy() if still running."""
        proc = subprocess.Popen(self.command(host, argv), **kwargs)
        self.processes.append(proc)
        return proc

    def run(self, host: int | str, argv: list[str], *, timeout_s: float = 120, **kwargs) -> str:
        """Run `argv` on `host` to its end and return its output; raises CommandFailed with the
        output when it fails. The output goes through a file, not a pipe: a command that leaves
        daemons behind (`ray start`) would hold a pipe open after it exits."""
        return self.wait(host, argv, self.start(host, argv, **kwargs), timeout_s)

    def start(self, host: int | str, argv: list[str], **kwargs) -> tuple[subprocess.Popen, Path]:
        """Start `argv` on `host` with its output in a file of the run's directory: (process, file)."""
        out = self.run_dir / f"{self.plan.host(host).name}-{next(self._outputs):03d}.out"
        with open(out, "wb") as f:
            proc = self.popen(host, argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs)
        return proc, out

    def wait(self, host: int | str, argv: list[str], started: tuple[subprocess.Popen, Path], timeout_s: float = 120) -> str:
        proc, out = started
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = f"nothing (killed after {timeout_s:.0f} s)"
        text = out.read_text(errors="replace")
        if code != 0:
            raise CommandFailed(f"on {host}: `{' '.join(argv)}` exited {code}:\n{text[-4000:]}")
        return text

    # ---- faults ------------------------------------------------------------------------------
    def isolate(self, host: int | str) -> None:
        """Cut `host` off from every other host and every client, both ways (its cable pulled)."""
        h = self.plan.host(host)
        for args in planner.isolate_commands(h):
            ip(*args)
        self.isolated.add(h.name)

    def heal(self, host: int | str) -> None:
        h = self.plan.host(host)
        for args in planner.heal_commands(h):
            ip(*args)
        self.isolated.discard(h.name)

    def cut(self, a: int | str, b: int | str, *, both_ways: bool = True) -> None:
        """Hosts `a` and `b` lose each other's packets (both ways, or only a -> b) while both keep
        reaching every other host and the clients: e.g. a leader cut off from the controller's
        host and the other replicas, but not from its clients."""
        for args in planner.cut_commands(self.plan, self.plan.host(a), self.plan.host(b), both_ways=both_ways):
            ip(*args)

    def uncut(self, a: int | str, b: int | str) -> None:
        for args in planner.uncut_commands(self.plan.host(a), self.plan.host(b)):
            ip(*args, check=False)

    def latency_mechanism(self) -> str:
        """How degrade() works on this machine: NETEM where the kernel has sch_netem (tried on a
        host's loopback), else RELAY (iptables' NFQUEUE and cluster/hosts/delay_relay.py);
        HostsUnavailable when neither can."""
        if self.latency is None:
            probe = self.command(self.plan.hosts[0].name, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
            if _run(probe, False).returncode == 0:
                _run(self.command(self.plan.hosts[0].name, ["tc", "qdisc", "del", "dev", "lo", "root"]), False)
                self.latency = NETEM
            elif shutil.which("iptables") is None:
                raise HostsUnavailable("latency needs tc netem (this kernel has no sch_netem) or iptables' NFQUEUE "
                                       "for the delay relay (apt-get install iptables)")
            else:
                self.latency = RELAY
        return self.latency

    def degrade(self, host: int | str, *, delay_ms: float = 0, jitter_ms: float = 0, loss_percent: float = 0,
                seed: int | None = None) -> None:
        """Latency (delay ± jitter, uniform) and loss on `host`'s link, both ways: each packet into
        or out of the host gets them once (so between two degraded hosts, twice). tc netem where
        the kernel has it, else the delay relay (cluster/hosts/delay_relay.py; `seed` seeds its
        draws). Replaces an earlier degrade() of the host; restore() or heal_all() clears it."""
        planner.check_degrade(delay_ms, jitter_ms, loss_percent)
        h = self.plan.host(host)
        how = self.latency_mechanism()
        self.restore(h.name)
        if how == NETEM:
            for args in planner.netem_commands(h, delay_ms=delay_ms, jitter_ms=jitter_ms, loss_percent=loss_percent):
                tc(*args)
            self.degraded[h.name] = NETEM
            return
        stats = self.run_dir / f"{h.name}-delay.json"
        argv = planner.relay_command(sys.executable, self.plan, h, delay_ms=delay_ms, jitter_ms=jitter_ms,
                                     loss_percent=loss_percent, root_netns=f"/proc/{os.getpid()}/ns/net",
                                     stats=str(stats), seed=seed)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(REPO)}
        started = self.start(h.name, argv, env=env, cwd=str(REPO))
        self.relays[h.name] = started
        self.degraded[h.name] = RELAY
        try:
            self._wait_relay_ready(h.name, *started)
            for netns, args in planner.delay_rule_commands(self.plan, h, add=True):
                _run(["iptables", *args] if netns is None else ["ip", "netns", "exec", netns, "iptables", *args], True)
        except BaseException:
            self.restore(h.name)
            raise

    @staticmethod
    def _wait_relay_ready(name: str, proc: subprocess.Popen, out: Path) -> None:
        deadline = time.monotonic() + RELAY_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            text = out.read_text(errors="replace") if out.exists() else ""
            if planner.RELAY_READY in text:
                return
            if proc.poll() is not None:
                raise CommandFailed(f"on {name}: the delay relay exited {proc.returncode}: {text[-2000:]}")
            time.sleep(0.05)
        raise CommandFailed(f"on {name}: the delay relay was not ready within {RELAY_READY_TIMEOUT_S:.0f} s")

    def _remove_delay_rules(self, name: str, *, root_only: bool = False) -> None:
        for netns, args in planner.delay_rule_commands(self.plan, self.plan.host(name), add=False):
            if netns is None:
                _run(["iptables", *args], False)
            elif not root_only:
                _run(["ip", "netns", "exec", netns, "iptables", *args], False)

    def restore(self, host: int | str) -> None:
        """Undo degrade() on `host`'s link (nothing when it has none)."""
        h = self.plan.host(host)
        how = self.degraded.pop(h.name, None)
        if how == NETEM:
            for args in planner.netem_clear_commands(h):
                tc(*args, check=False)
        elif how == RELAY:
            self._remove_delay_rules(h.name)  # first: packets pass again; then the relay lets go of what it holds
            proc, _ = self.relays.pop(h.name)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def relay_stats(self, host: int | str) -> dict | None:
        """What `host`'s delay relay applied so far (cluster/hosts/delay_relay.py's stats file,
        rewritten every second and at its end), or None when it never ran."""
        path = self.run_dir / f"{self.plan.host(host).name}-delay.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    # ---- faults by packet filter, and a host split from the others -----------------------------
    def iptables(self, host: int | str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run(self.command(host, ["iptables", *args]), check)

    def _filter_ready(self, host: int | str):
        reason = filter_unavailable_reason()
        if reason:
            raise HostsUnavailable(reason)
        h = self.plan.host(host)
        if h.name not in self.filtered:
            for args in planner.filter_setup_commands(h):
                self.iptables(h.name, *args)
            self.filtered.add(h.name)
        return h

    def lose(self, host: int | str, probability: float) -> None:
        """`host` loses each packet on its link with `probability`, both ways (iptables'
        statistic match; clear with unlose() or heal_all())."""
        h = self._filter_ready(host)
        for args in planner.link_loss_commands(h, probability):
            self.iptables(h.name, *args)

    def lose_from(self, receiver: int | str, sender: int | str, probability: float = 1.0) -> None:
        """Packets from `sender` to `receiver` are lost with `probability`; the other way is not."""
        h = self._filter_ready(receiver)
        for args in planner.one_way_loss_commands(h, self.plan.host(sender), probability):
            self.iptables(h.name, *args)

    def unlose(self, host: int | str) -> None:
        """Undo lose() and lose_from() on `host` (the receiver's side)."""
        h = self.plan.host(host)
        if h.name in self.filtered:
            for args in planner.filter_clear_commands():
                self.iptables(h.name, *args)

    def split(self, host: int | str) -> None:
        """Cut `host` off from every other host, both ways, but not from the clients (they run
        here, in the root namespace): a leader cut off from the controller and the other replicas
        while its clients still reach it."""
        h = self.plan.host(host)
        for args in planner.split_commands(self.plan, h):
            ip(*args)
        self.split_hosts.add(h.name)

    def unsplit(self, host: int | str) -> None:
        h = self.plan.host(host)
        for args in planner.unsplit_commands(self.plan, h):
            ip(*args, check=False)
        self.split_hosts.discard(h.name)

    def heal_all(self) -> None:
        """Undo every fault of every host: links up, cuts and splits gone, filters empty, links
        no longer degraded."""
        if self.plan is None:
            return
        hosts = self.plan.hosts
        for h in hosts:
            for args in planner.heal_commands(h):
                ip(*args, check=False)
        for i, a in enumerate(hosts):
            for b in hosts[i + 1:]:
                for args in planner.uncut_commands(a, b):
                    ip(*args, check=False)
        for name in list(self.filtered):
            for args in planner.filter_clear_commands():
                self.iptables(name, *args, check=False)
        for name in list(self.degraded):
            self.restore(name)
        self.isolated.clear()
        self.split_hosts.clear()
