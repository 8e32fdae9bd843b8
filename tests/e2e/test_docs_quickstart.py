"""The README's, the quickstart's and the transactions guide's snippets, run exactly as printed
against a real `kray start`.

The README's ```python block runs on a broker of its own, as a newcomer runs it first. Every ```bash
and ```python block of docs/get-started/quickstart.md runs in order on another, then the transactions
guide's: shell blocks with bash (the venv's `kray` on PATH, as after `source .venv/bin/activate`),
Python blocks with this interpreter. The quickstart's first block, `./dev start`, is the broker: the
test runs `kray start` on 127.0.0.1:9092 in its place (./dev start is that command after an install),
with its data in a fresh directory. ```console blocks are not run.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kray_process import KrayProcess

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
SNIPPET_TIMEOUT_S = 120


def blocks(path: Path, languages=("bash", "python")) -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(path.read_text()) if lang in languages]


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run(lang: str, body: str, cwd: Path) -> str:
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                        "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    cmd = ["bash", "-euo", "pipefail", "-c", body] if lang == "bash" else [sys.executable, "-c", body]
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=SNIPPET_TIMEOUT_S)
    assert result.returncode == 0, f"this snippet failed ({result.returncode}):\n{body}\n--- output:\n" \
                                   f"{result.stdout}\n{result.stderr}"
    return result.stdout


def kray_on_9092(data_dir: Path) -> KrayProcess:
    if port_taken(9092):
        message = "127.0.0.1:9092 is taken: the snippets, as printed, need it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = KrayProcess(data_dir, port=9092)
    server.start()
    return server


def test_readme_example_runs_as_printed_on_a_new_broker(tmp_path):
    """What a newcomer runs first: the README's produce + share consumer example, on a fresh `./dev start`."""
    readme = blocks(REPO / "README.md", ("python",))
    assert len(readme) == 1, "the README's produce + share consumer example"
    server = kray_on_9092(tmp_path / "data")
    try:
        out = run(*readme[0], tmp_path)
    finally:
        server.stop()
    assert out.count("delivery 1") == 10, out      # each of the 10 records shared out once


def test_quickstart_and_guide_snippets_run_as_printed(tmp_path):
    quickstart = blocks(REPO / "docs" / "get-started" / "quickstart.md")
    guides = blocks(REPO / "docs" / "guides" / "transactions.md", ("python",))
    assert quickstart[0] == ("bash", "./dev start\n"), "the quickstart starts with ./dev start"
    server = kray_on_9092(tmp_path / "data")
    try:
        outputs = [run(lang, body, tmp_path) for lang, body in quickstart[1:] + guides]
    finally:
        server.stop()
    consumed, shared, described, txn = outputs[1], outputs[3], outputs[4], outputs[5]
    assert consumed.count("b'order ") == 10, consumed          # the consumer group read the 10 records
    assert shared.count("delivery 1") == 10, shared            # the share group got each record once
    assert "workers" in described and "orders" in described    # kray share-groups --describe
    assert txn.strip() == "b'invoice 11'", txn                 # the transactions guide's committed record


def test_guides_share_group_snippets_are_the_tested_ones():
    """The share-groups guide shows the quickstart's snippets, which the test above runs."""
    tested = set(blocks(REPO / "docs" / "get-started" / "quickstart.md"))
    guide = blocks(REPO / "docs" / "guides" / "share-groups.md")
    assert guide and all(block in tested for block in guide)
