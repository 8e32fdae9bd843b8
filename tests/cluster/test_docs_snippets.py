"""The multi-node guide's LocalCluster snippet, run exactly as printed (three broker nodes on this
machine, a topic created, its partition 0's leader printed)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^[ \t]*```(\w+)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)  # fenced, in a list item too


def test_local_cluster_snippet_runs_as_printed(tmp_path):
    text = (REPO / "docs" / "guides" / "multi-node.md").read_text()
    snippets = [textwrap.dedent(body) for lang, body in BLOCK.findall(text)
                if lang == "python" and "LocalCluster(" in body]
    assert len(snippets) == 1
    result = subprocess.run([sys.executable, "-c", snippets[0]], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env=os.environ | {"PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout + result.stderr
    bootstrap, brokers, leader = result.stdout.strip().splitlines()[-3:]
    assert len(bootstrap.split(",")) == 3 and brokers == "[1, 2, 3]" and leader in {"1", "2", "3"}
