#!/usr/bin/env python3
"""What sendfile loses over TLS: the gateway's own fetch send path, alone, on loopback.

    python -m benchmarks.tls_fetch_path            # 256 MiB × 5 rounds per path, ~1 min

A server process sends one segment-like file region to a client process over 127.0.0.1 with
the gateway's code (actors/gateway/file_region.py: write_frame on an asyncio StreamWriter), three
ways:

- sendfile: PLAINTEXT, FileRegion.send (loop.sendfile: the kernel copies page cache to the socket)
- copy: PLAINTEXT, FileRegion.send_through (os.pread in TLS_CHUNK_BYTES pieces, written by
  asyncio): the user-space copy alone, without encryption; Kray does not serve this way, it
  splits the TLS cost into its copy and its encryption
- tls: TLS (what SSL and SASL_SSL listeners do: write_frame on a TLS transport sends through
  FileRegion.send_through; asyncio encrypts with OpenSSL over memory BIOs)

It reports the server's CPU seconds (user + system, getrusage of its process) per GB sent, the
client's, and the wall time, median of --rounds. Nothing else of Kray runs, so the numbers do not
carry Ray's or the shards' CPU and vary far less with the machine's load than a whole-broker run.

Results: benchmarks/results/tls_fetch_path.{json,md} (see --out).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import platform
import resource
import shlex
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PATHS = ("sendfile", "copy", "tls")
MIB = 1 << 20


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ---------------------------------------------------------------------------------------------
# server and client (each its own process: `tls_fetch_path.py server|client '<json>'`)
# ---------------------------------------------------------------------------------------------

def server_main(p: dict) -> None:
    from actors.gateway.file_region import FileRegion, write_frame

    ctx = None
    if p["path"] == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(p["keystore"])

    async def serve(reader, writer):
        await reader.readexactly(1)  # the client's "fetch"
        cpu0, t0 = _cpu(), time.perf_counter()
        region = FileRegion.open(p["file"], 0, p["size"])
        if p["path"] == "copy":
            await region.send_through(writer)
            await writer.drain()
        else:
            await write_frame(writer, [region])  # sendfile on PLAINTEXT, send_through on TLS
        await reader.readexactly(1)  # the client has read everything
        print("RESULT " + json.dumps({"server_cpu_s": _cpu() - cpu0, "server_wall_s": time.perf_counter() - t0,
                                      "cipher": (writer.get_extra_info("cipher") or [None])[0],
                                      "tls_version": (writer.get_extra_info("cipher") or [None, None])[1]}),
              flush=True)
        writer.close()
        done.set()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx)
        print("PORT " + str(server.sockets[0].getsockname()[1]), flush=True)
        await done.wait()
        server.close()

    done = asyncio.Event()
    asyncio.run(main())


def client_main(p: dict) -> None:
    sock = socket.create_connection(("127.0.0.1", p["port"]))
    if p["path"] == "tls":
        ctx = ssl.create_default_context(cafile=p["ca"])
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    cpu0, t0 = _cpu(), time.perf_counter()
    sock.sendall(b"f")
    got, buf = 0, bytearray(MIB)
    view = memoryview(buf)
    while got < p["size"]:
        n = sock.recv_into(view, min(MIB, p["size"] - got))
        if not n:
            raise ConnectionError(f"closed after {got} bytes")
        got += n
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    sock.sendall(b"k")
    print("RESULT " + json.dumps({"client_cpu_s": cpu, "wall_s": wall, "bytes": got}), flush=True)
    sock.close()


# ---------------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------------

def one_round(path: str, file: Path, size: int, pki) -> dict:
    me = str(Path(__file__).resolve())
    env = os.environ | {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    server = subprocess.Popen([sys.executable, me, "server", json.dumps(
        {"path": path, "file": str(file), "size": size, "keystore": str(pki.server_keystore)})],
        stdout=subprocess.PIPE, text=True, env=env, cwd=str(REPO))
    try:
        port = int(server.stdout.readline().split()[1])
        client = subprocess.run([sys.executable, me, "client", json.dumps(
            {"path": path, "port": port, "size": size, "ca": str(pki.ca_file)})],
            capture_output=True, text=True, env=env, cwd=str(REPO), timeout=300)
        if client.returncode != 0:
            raise RuntimeError(f"client: {client.stderr.strip().splitlines()[-1:]}")
        out = json.loads(client.stdout.split("RESULT ", 1)[1])
        line = server.stdout.readline()
        out.update(json.loads(line.split("RESULT ", 1)[1]))
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    gb = out["bytes"] / 1e9
    out.update(mb_s=round(out["bytes"] / out["wall_s"] / 1e6, 1), server_cpu_s_per_gb=round(out["server_cpu_s"] / gb, 3),
               client_cpu_s_per_gb=round(out["client_cpu_s"] / gb, 3), load_1m=round(os.getloadavg()[0], 2))
    return out


def summarize(runs: list[dict]) -> dict:
    def med(key):
        return round(statistics.median(r[key] for r in runs), 3)
    return {"mb_s": med("mb_s"), "server_cpu_s_per_gb": med("server_cpu_s_per_gb"),
            "client_cpu_s_per_gb": med("client_cpu_s_per_gb"),
            "server_cpu_s_per_gb_runs": [r["server_cpu_s_per_gb"] for r in runs],
            "load_1m": [min(r["load_1m"] for r in runs), max(r["load_1m"] for r in runs)],
            "cipher": runs[0].get("cipher"), "tls_version": runs[0].get("tls_version")}


def write_outputs(doc: dict, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "tls_fetch_path.json").write_text(json.dumps(doc, indent=2) + "\n")
    s = doc["paths"]
    base = s.get("sendfile", {}).get("server_cpu_s_per_gb")
    what = {"sendfile": "PLAINTEXT: FileRegion.send (loop.sendfile)",
            "copy": "PLAINTEXT: FileRegion.send_through (pread + write, no encryption; not served by Kray)",
            "tls": "TLS: FileRegion.send_through through asyncio's TLS transport (SSL, SASL_SSL)"}
    lines = ["# The gateway's fetch send path: sendfile, copy, TLS", "",
             f"{doc['date']} · {doc['machine']['nproc']} CPU · Python {doc['machine']['python']} · "
             f"{doc['machine']['openssl']} · kernel {doc['machine']['kernel']} ({doc['machine']['kernel_tls']})", "",
             f"One file region of {doc['size_bytes'] // MIB} MiB (page-cached) sent by a server process with "
             "actors/gateway/file_region.py to a client process over 127.0.0.1; median of "
             f"{doc['rounds']} rounds per path. CPU = user + system seconds of the process, per GB (10⁹ B) sent.", "",
             "| path | MB/s | server CPU s/GB | vs sendfile | client CPU s/GB | cipher | load 1-min |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for path in PATHS:
        r = s.get(path)
        if not r:
            continue
        vs = "–" if path == "sendfile" or not base else f"{r['server_cpu_s_per_gb'] / base:.1f}×"
        lines.append(f"| {what[path]} | {r['mb_s']:,.0f} | {r['server_cpu_s_per_gb']:.3f} | {vs} | "
                     f"{r['client_cpu_s_per_gb']:.3f} | {r['cipher'] or '–'} | "
                     f"{r['load_1m'][0]:.1f}-{r['load_1m'][1]:.1f} |")
    lines += ["", "Made by:", "", "```", doc["command"], "```", ""]
    (outdir / "tls_fetch_path.md").write_text("\n".join(lines))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("server", "client"):
        (server_main if argv[0] == "server" else client_main)(json.loads(argv[1]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from benchmarks.secured import kernel_tls_probe
    from tests.tls_certs import make_pki
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": ("python -m benchmarks.tls_fetch_path " + shlex.join(argv)).strip(),
           "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "openssl": ssl.OPENSSL_VERSION,
                       "kernel": platform.release(), "kernel_tls": kernel_tls_probe(),
                       "ssl_has_OP_ENABLE_KTLS": hasattr(ssl, "OP_ENABLE_KTLS")},
           "size_bytes": args.size_mib * MIB, "rounds": args.rounds, "paths": {}, "runs": {p: [] for p in PATHS}}
    with tempfile.TemporaryDirectory(prefix="kray-tlspath-") as tmp:
        pki = make_pki(Path(tmp) / "pki")
        file = Path(tmp) / "segment.log"
        with open(file, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(MIB))
        for r in range(args.rounds):  # the paths in turn, so the machine's load falls on each alike
            for path in PATHS:
                res = one_round(path, file, args.size_mib * MIB, pki)
                doc["runs"][path].append(res)
                print(f"round {r + 1}/{args.rounds} {path}: {res['mb_s']:,.0f} MB/s, server "
                      f"{res['server_cpu_s_per_gb']:.3f} CPU s/GB, client {res['client_cpu_s_per_gb']:.3f}, "
                      f"load {res['load_1m']}", flush=True)
    doc["paths"] = {p: summarize(runs) for p, runs in doc["runs"].items() if runs}
    write_outputs(doc, Path(args.out))
    print((Path(args.out) / "tls_fetch_path.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
