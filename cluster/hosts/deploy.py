"""Kray deployed on hosts of one machine as a user deploys it on machines of their own:

    h1:      ray start --head --node-ip-address H1 --labels kray-broker-id=1 ...
    h2..hN:  python -m cluster.node_supervisor -- \
                 ray start --address H1:6379 --block --node-ip-address Hn --labels kray-broker-id=n ...
    h1:      kray start --address H1:6379 --config configs/multinode.toml

each host with its own address, Ray temp dir and HOME, every broker on port 9092 of its own
address; clients run here, in the root namespace, and bootstrap from those addresses.

A host that joins runs its Ray node under the node supervisor (cluster/node_supervisor.py), as a
service manager would on a machine of one's own: when Ray's GCS declared the node dead (a cut
longer than its health checks allow) its raylet exits at the heal, and the supervisor starts
`ray start` again, so the broker returns with its id (its label) and its data by itself. The
head runs no supervisor: its GCS is the cluster (a new one would be a cluster of its own).
`ray_system_config` is given to the head's `ray start --system-config` (Ray hands it to every
node that joins): e.g. Ray's health-check settings (benchmarks/partition_heal.py measures them).

    with KrayHosts(3) as hosts:
        Producer({"bootstrap.servers": hosts.bootstrap})     # "198.18.0.1:9092,198.18.0.2:9092,..."
        hosts.isolate(3); time.sleep(10); hosts.heal(3)      # host h3 (broker 3) cut off, then back

Ray's token authentication, as a user sets it up: Ray 2.60's `ray start --head` turns it on by
itself when the head has a token (~/.ray/auth_token), and every other Ray process of the cluster
must then have the same token and RAY_AUTH_MODE=token: the joining `ray start --address` and the
`kray start --address` driver alike, or they can't connect. Here the head's token is made with
`ray get-auth-token --generate` in h1's HOME and copied into every host's HOME (as a user copies
it to each machine), and every Ray command runs with RAY_AUTH_MODE=token.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from actors import tcp_backoff
from cluster.hosts.net import CommandFailed, HostNetwork, kill_namespace_processes, record_daemon
from cluster.ray_node_start import start_ray_node

log = logging.getLogger("kray.hosts")
REPO = Path(__file__).resolve().parents[2]
MULTINODE_CONFIG = REPO / "configs" / "multinode.toml"
RAY_PORT = 6379
KAFKA_PORT = 9092
READY = re.compile(r"Kray is ready: bootstrap=(\S+)")
RAY_STARTED = "Ray runtime started."  # what `ray start` prints once its node joined
STARTUP_TIMEOUT_S = 180
REDIS_PORT = 6380  # the GCS's Redis (gcs_redis), on the bridge's address
STOP_TIMEOUT_S = 60
OBJECT_STORE_BYTES = 100 * 1024 * 1024
INTERNAL_TOPICS = ("__consumer_offsets", "__share_group_state")  # made at start: each is asked for by name too
HEALTH_POLL_S = 0.5


class KrayHosts:
    """`hosts` hosts h1..hN (network namespaces with their own addresses), a Ray node on each
    (the head on h1), Kray deployed onto them with `kray start --address` from h1."""

    def __init__(self, hosts: int = 3, *, config: Path = MULTINODE_CONFIG, overrides: tuple[str, ...] = (),
                 python: str = sys.executable, num_cpus: int | None = 1,
                 object_store_bytes: int | None = OBJECT_STORE_BYTES, ray_system_config: dict | None = None,
                 tcp_rto_max_ms: int | None = tcp_backoff.RTO_MAX_MS, gcs_redis: bool = False):
        """`num_cpus`: CPUs each Ray node declares (None: the machine's; it sets a broker's
        shard count), 1 by default as the hosts share this machine's cores; `object_store_bytes`:
        each node's Ray object store (Kray moves records over sockets, not Ray objects);
        `ray_system_config`: Ray's system config, set on the head for the whole cluster;
        `tcp_rto_max_ms`: each host's net.ipv4.tcp_rto_max_ms (None: the kernel's default);
        `gcs_redis`: Ray's GCS fault tolerance: a redis-server on the bridge (outside every host, as an
        HA Redis would be) that the head's GCS keeps the cluster's state in (RAY_REDIS_ADDRESS), so
        that a new head started on h1 (`restart_head`) takes the cluster over."""
        self.net = HostNetwork(hosts, tcp_rto_max_ms=tcp_rto_max_ms)
        self.config = Path(config)
        self.overrides = tuple(overrides)
        self.python = python
        self.num_cpus = num_cpus
        self.object_store_bytes = object_store_bytes
        self.ray_system_config = dict(ray_system_config or {})
        self.supervisors: dict[str, tuple[subprocess.Popen, Path]] = {}  # host name -> its node supervisor
        self.bin = Path(python).parent
        self.kray: subprocess.Popen | None = None
        self.output: list[str] = []          # kray start's console, line by line
        self.output_at: list[float] = []     # when each of those lines came (time.monotonic())
        self.bootstrap: str | None = None
        self.timings: dict[str, float] = {}  # seconds each phase took (network, ray, kray, stop)
        self.gcs_redis = gcs_redis
        self.redis: subprocess.Popen | None = None
        self.heads = 0  # how many times the Ray head was started

    @property
    def plan(self):
        return self.net.plan

    def address(self, host: int | str) -> str:
        return self.plan.host(host).address

    def broker_address(self, host: int | str) -> str:
        return f"{self.address(host)}:{KAFKA_PORT}"

    @property
    def head_address(self) -> str:
        return f"{self.address(1)}:{RAY_PORT}"

    # ---- environment of a host ---------------------------------------------------------------
    def home(self, host: int | str) -> Path:
        return self.net.run_dir / self.plan.host(host).name

    @property
    def redis_address(self) -> str | None:
        """host:port of the GCS's Redis (gcs_redis), reachable from every host."""
        return f"{self.plan.bridge_address}:{REDIS_PORT}" if self.gcs_redis and self.plan is not None else None

    def head_env(self) -> dict[str, str]:
        """The head's `ray start` environment: with gcs_redis, Ray's GCS fault-tolerance settings
        (RAY_REDIS_ADDRESS; RAY_external_storage_namespace names this cluster's keys in Redis: a
        new head must use the same one to take the cluster over)."""
        env = self.env(1)
        if self.gcs_redis:
            env |= {"RAY_REDIS_ADDRESS": self.redis_address,
                    "RAY_external_storage_namespace": f"kray-{self.plan.run_id}"}
        return env

    def env(self, host: int | str) -> dict[str, str]:
        """What a process on `host` runs with: its own HOME (its ~/.ray/auth_token), token auth,
        Kray importable (the checkout first, as an installed package would be), nothing of this
        machine's own Ray session (RAY_* variables of the caller are dropped)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONPATH"}
        pythonpath = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        return env | {"HOME": str(self.home(host)), "RAY_AUTH_MODE": "token", "PYTHONUNBUFFERED": "1",
                      "RAY_worker_niceness": "0",  # Kray's actors are the broker (docs/guides/multi-node.md)
                      "PYTHONPATH": os.pathsep.join(pythonpath), "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', '')}",
                      "RAY_USAGE_STATS_ENABLED": "0"}

    # ---- start and stop ----------------------------------------------------------------------
    def start(self) -> str:
        t0 = time.monotonic()
        self.net.create()
        try:
            self.timings["network_s"] = time.monotonic() - t0
            t1 = time.monotonic()
            if self.gcs_redis:
                self._start_redis()
            self._start_ray()
            self.timings["ray_s"] = time.monotonic() - t1
            t2 = time.monotonic()
            self.bootstrap = self._start_kray()
            self.timings["kray_s"] = time.monotonic() - t2
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def _ray_start_args(self, host) -> list[str]:
        h = self.plan.host(host)
        temp_dir = self.home(h.name) / "ray"
        args = [str(self.bin / "ray"), "start", f"--node-ip-address={h.address}", f"--temp-dir={temp_dir}",
                f"--labels=kray-broker-id={h.index}", "--disable-usage-stats"]
        if self.num_cpus is not None:
            args.append(f"--num-cpus={self.num_cpus}")
        if self.object_store_bytes is not None:
            args.append(f"--object-store-memory={self.object_store_bytes}")
        return args

    def _start_ray(self) -> None:
        for h in self.plan.hosts:
            (self.home(h.name) / ".ray").mkdir(parents=True)
        # the head's token, made on h1 and copied to every host, as a user copies it to each machine
        token = subprocess.run([str(self.bin / "ray"), "get-auth-token", "--generate"], env=self.env(1),
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        for h in self.plan.hosts[1:]:
            (self.home(h.name) / ".ray" / "auth_token").write_text(token)
        self._start_head()
        for h in self.plan.hosts[1:]:  # the others join at once, each under its node supervisor
            self.supervisors[h.name] = self.net.start(h.name, self.node_command(h.name), env=self.env(h.name))
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for h in self.plan.hosts[1:]:
            # (a `ray start` that gives up, e.g. after Ray's own 30 s registration wait on a loaded
            # machine, is started again by the supervisor)
            while self.node_starts(h.name) < 1:
                proc, _ = self.supervisors[h.name]
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise CommandFailed(f"on {h.name}: the Ray node did not start:\n{self.supervisor_output(h.name)[-4000:]}")
                time.sleep(0.2)

    def _start_head(self) -> None:
        head = self._ray_start_args(1) + ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"]
        if self.ray_system_config:
            head.append(f"--system-config={json.dumps(self.ray_system_config, separators=(',', ':'))}")
        self._retry_ray_start(self.plan.hosts[0], lambda: self.net.run(1, head, timeout_s=STARTUP_TIMEOUT_S,
                                                                       env=self.head_env()))
        self.heads += 1

    # ---- the Ray head's host lost, and a new head (GCS fault tolerance) ---------------------
    def _start_redis(self) -> None:
        """redis-server on the bridge's address, in this (the root) namespace: outside every host,
        so it outlives any of them, as an HA Redis on machines of its own would. Append-only file
        on, as Ray's docs advise for a GCS's Redis."""
        if shutil.which("redis-server") is None:
            raise CommandFailed("redis-server is not installed (apt-get install redis-server; ./dev test does)")
        directory = self.net.run_dir / "redis"
        directory.mkdir()
        self.redis = subprocess.Popen(
            ["redis-server", "--bind", self.plan.bridge_address, "--port", str(REDIS_PORT), "--protected-mode", "no",
             "--save", "", "--appendonly", "yes", "--dir", str(directory), "--daemonize", "no",
             "--logfile", str(directory / "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        record_daemon(self.net.run_dir, self.redis.pid, "redis-server")  # (a crashed run's is ended by the next)
        deadline = time.monotonic() + 30
        while not redis_ping(self.plan.bridge_address, REDIS_PORT):
            if self.redis.poll() is not None or time.monotonic() > deadline:
                raise CommandFailed(f"redis-server did not start: {(directory / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def kill_host(self, host: int | str) -> int:
        """Every process on `host` SIGKILLed at once, as a machine that loses its power: on h1 the
        Ray head (GCS, raylet), broker 1's actors, its controller and `kray start`. Its disk
        (data directory, HOME) stays. Returns how many processes there were."""
        h = self.plan.host(host)
        killed = kill_namespace_processes(h.netns, first_signal=signal.SIGKILL)
        if h.index == 1:  # the old head's Ray logs are kept beside the new head's
            old = self.home(h.name) / "ray"
            if old.exists():
                old.rename(self.home(h.name) / f"ray-lost-{self.heads}")
        return killed

    def restart_head(self) -> float:
        """`ray start --head` on h1 again, with the same address, labels and (gcs_redis) Redis: with
        GCS fault tolerance the new GCS reads the cluster's state from Redis and the other nodes'
        raylets reconnect to it. Returns the seconds `ray start` took."""
        t0 = time.monotonic()
        self._start_head()
        return time.monotonic() - t0

    def ray_nodes_seen_from(self, host: int | str, *, timeout_s: float = 60) -> list[dict]:
        """ray.nodes() as a driver on `host` sees it (the GCS's node table): [{NodeID, Alive,
        NodeManagerAddress, Labels}]."""
        code = ("import json, ray; ray.init(address=%r, log_to_driver=False, logging_level='ERROR'); "
                "print('NODES=' + json.dumps([{k: n.get(k) for k in ('NodeID', 'Alive', 'NodeManagerAddress', "
                "'Labels')} for n in ray.nodes()]))" % self.head_address)
        out = self.net.run(host, [self.python, "-c", code], timeout_s=timeout_s, env=self.env(host))
        line = next((l for l in out.splitlines() if l.startswith("NODES=")), "NODES=[]")
        return json.loads(line[len("NODES="):])

    def node_command(self, host: int | str) -> list[str]:
        """What runs on a host that joins, as on a machine of one's own under a service manager:
        `ray start --address HEAD --block` under the node supervisor, which starts it again when
        its node ends (Ray declared it dead during a long cut: its raylet exits at the heal)."""
        return [self.python, "-m", "cluster.node_supervisor", "--", *self._ray_start_args(host),
                f"--address={self.head_address}", "--block"]

    def supervisor_output(self, host: int | str) -> str:
        """What a joining host's node supervisor and its `ray start`s printed."""
        started = self.supervisors.get(self.plan.host(host).name) if self.plan is not None else None
        try:
            return "" if started is None else started[1].read_text(errors="replace")
        except OSError:  # the hosts were removed
            return ""

    def node_starts(self, host: int | str) -> int:
        """How many times the host's Ray node started (1 + the supervisor's restarts)."""
        return self.supervisor_output(host).count(RAY_STARTED)

    def _retry_ray_start(self, host, first) -> None:
        """`ray start` gives up when its node has not registered within 30 s (hard-coded in Ray),
        which a loaded 2-core machine can exceed: as cluster/ray_node_start.py retries a Ray node's
        start (the same attempts), each failed attempt's processes ended and the host's Ray
        directory cleared first."""
        def clear() -> int:
            ended = kill_namespace_processes(host.netns)
            shutil.rmtree(self.home(host.name) / "ray", ignore_errors=True)
            return ended
        start_ray_node(first, lambda line: log.warning("ray start on %s: %s", host.name, line), end_attempt=clear)

    def kray_command(self, *args: str) -> list[str]:
        """`kray ARGS` from this checkout (the `kray` console script runs cluster.cli:main)."""
        return [self.python, "-m", "cluster.cli", *args]

    def _start_kray(self) -> str:
        cmd = self.kray_command("start", "--address", self.head_address, "--config", str(self.config),
                                "--data-dir", str(self.net.run_dir / "data"))
        for o in self.overrides:
            cmd += ["--override", o]
        self.kray = self.net.popen(1, cmd, env=self.env(1), cwd=str(REPO), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        ready = threading.Event()
        found: list[str] = []

        def pump():
            for line in self.kray.stdout:
                self.output_at.append(time.monotonic())
                self.output.append(line.rstrip())
                m = READY.search(line)
                if m and not ready.is_set():
                    found.append(m.group(1))
                    ready.set()

        threading.Thread(target=pump, daemon=True, name="kray-start-console").start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.wait(0.2):
            if self.kray.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kray start did not become ready:\n" + "\n".join(self.output[-60:]))
        return found[0]

    def stop(self) -> None:
        """Stop `kray start` (SIGTERM, as Ctrl-C), then remove the hosts with every Ray process."""
        t0 = time.monotonic()
        if self.kray is not None and self.kray.poll() is None:
            self.kray.terminate()
            try:
                self.kray.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kray.kill()
        self.net.destroy()
        if self.redis is not None:
            self.redis.kill()
            self.redis.wait(10)
            self.redis = None
        self.timings["stop_s"] = time.monotonic() - t0

    def __enter__(self) -> "KrayHosts":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- what Kray's actors logged (the hosts' Ray worker logs) --------------------------------
    def kray_log(self, since: float, *, limit: int = 200) -> list[str]:
        """Kray's log lines on every host since `since` (epoch seconds), WARNING and above, and the
        controller's INFO lines: what a failed test prints to say what the cluster did."""
        lines = []
        for host in self.plan.hosts:
            logs = self.home(host.name) / "ray" / "session_latest" / "logs"
            for path in sorted(logs.glob("worker-*.err")) if logs.exists() else ():
                try:
                    text = path.read_text(errors="replace")
                except OSError:
                    continue
                for line in text.splitlines():
                    stamp = line[:19]
                    if not stamp[:2].isdigit() or not (" WARNING " in line or " ERROR " in line or
                                                       " CRITICAL " in line or "INFO kray.controller" in line):
                        continue
                    try:
                        at = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
                    except ValueError:
                        continue
                    if at >= since - 1:
                        lines.append(f"{line[:23]} {host.name} {line[24:]}")
        lines.sort()
        return lines[-limit:]

    # ---- health: is the deployment whole (e.g. again, after a fault healed)? --------------------
    def health_problems(self, timeout_s: float = 10, *, kray_start: bool = True) -> list[str]:
        """What keeps the deployment from being whole, [] when it is: `kray start` running, no
        host isolated or split, each broker answering at its own address and naming every broker
        at its address, and every partition of every topic (the internal ones too) with a leader
        and every replica in its ISR. Asks with Metadata only: nothing is created. `kray_start=False`:
        `kray start` need not run (it was lost with h1: the brokers serve without it)."""
        from confluent_kafka import KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient
        if self.bootstrap is None or (kray_start and self.kray is None):
            return ["Kray was not started"]
        if kray_start and self.kray.poll() is not None:
            return [f"kray start exited with {self.kray.returncode}: " + " / ".join(self.output[-5:])]
        problems = [f"{h} still isolated" for h in sorted(self.net.isolated)] + \
                   [f"{h} still split from the other hosts" for h in sorted(self.net.split_hosts)]
        expected = {h.index: (h.address, KAFKA_PORT) for h in self.plan.hosts}
        quiet = {"log_level": 0}  # a broker that does not answer is a finding here, not console noise
        for i in expected:
            try:
                brokers = AdminClient({"bootstrap.servers": self.broker_address(i)} | quiet) \
                    .list_topics(timeout=timeout_s).brokers
            except KafkaException as e:
                problems.append(f"broker {i} does not answer at {self.broker_address(i)}: {e}")
                continue
            named = {b.id: (b.host, b.port) for b in brokers.values()}
            if named != expected:
                problems.append(f"broker {i} names the brokers {named}, not {expected}")
        admin = AdminClient({"bootstrap.servers": self.bootstrap} | quiet)
        partitions: dict[str, list] = {}  # topic -> [(partition, error, leader, replicas, ISR)]
        try:
            for name, t in admin.list_topics(timeout=timeout_s).topics.items():
                partitions[name] = [(p, m.error, m.leader, m.replicas, m.isrs) for p, m in t.partitions.items()]
                if t.error is not None:
                    problems.append(f"topic {name}: {t.error}")
        except KafkaException as e:
            return problems + [f"no metadata from {self.bootstrap}: {e}"]
        for name, future in admin.describe_topics(TopicCollection(list(INTERNAL_TOPICS)),
                                                  request_timeout=timeout_s).items():
            try:
                d = future.result()
            except KafkaException as e:
                problems.append(f"topic {name}: {e}")
                continue
            partitions[name] = [(p.id, None, p.leader.id if p.leader is not None else -1,
                                 [r.id for r in p.replicas], [r.id for r in p.isr]) for p in d.partitions]
        for name, rows in sorted(partitions.items()):
            for p, error, leader, replicas, isr in sorted(rows, key=lambda r: r[0]):
                if error is not None or leader < 0:
                    problems.append(f"{name}-{p}: no leader ({error})")
                elif sorted(isr) != sorted(replicas):
                    problems.append(f"{name}-{p}: ISR {sorted(isr)} of replicas {sorted(replicas)}")
        return problems

    def wait_healthy(self, timeout_s: float, *, kray_start: bool = True) -> list[str]:
        """Wait up to `timeout_s` until health_problems() finds none; returns what it found last
        ([]: whole), at once when `kray start` is gone (nothing brings it back) unless `kray_start`
        is False."""
        deadline = time.monotonic() + timeout_s
        while True:
            problems = self.health_problems(timeout_s=max(1.0, min(10.0, deadline - time.monotonic())),
                                            kray_start=kray_start)
            if not problems or time.monotonic() >= deadline or \
                    (kray_start and (self.kray is None or self.kray.poll() is not None)):
                return problems
            time.sleep(HEALTH_POLL_S)

    # ---- faults ------------------------------------------------------------------------------
    def isolate(self, host: int | str) -> None:
        self.net.isolate(host)

    def heal(self, host: int | str) -> None:
        self.net.heal(host)

    def cut(self, a: int | str, b: int | str, *, both_ways: bool = True) -> None:
        self.net.cut(a, b, both_ways=both_ways)

    def uncut(self, a: int | str, b: int | str) -> None:
        self.net.uncut(a, b)

    def degrade(self, host: int | str, *, delay_ms: float = 0, jitter_ms: float = 0, loss_percent: float = 0,
                seed: int | None = None) -> None:
        """Latency and loss on `host`'s link, both ways (HostNetwork.degrade: tc netem, or the
        delay relay where the kernel has no netem)."""
        self.net.degrade(host, delay_ms=delay_ms, jitter_ms=jitter_ms, loss_percent=loss_percent, seed=seed)

    def restore(self, host: int | str) -> None:
        self.net.restore(host)

    def split(self, host: int | str) -> None:
        """`host` cut off from the other hosts (the controller's on h1, the other replicas) but
        not from the clients here."""
        self.net.split(host)

    def unsplit(self, host: int | str) -> None:
        self.net.unsplit(host)

    def lose(self, host: int | str, probability: float) -> None:
        """Random loss of `probability` on `host`'s link, both ways (iptables)."""
        self.net.lose(host, probability)

    def lose_from(self, receiver: int | str, sender: int | str, probability: float = 1.0) -> None:
        """One-way loss: packets from `sender` to `receiver` (iptables)."""
        self.net.lose_from(receiver, sender, probability)

    def unlose(self, host: int | str) -> None:
        self.net.unlose(host)

    def heal_all(self) -> None:
        self.net.heal_all()


def redis_ping(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a Redis answers PING at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False
