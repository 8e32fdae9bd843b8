"""The docs: the README stays a page a newcomer reads, the generated reference pages match the code,
and the site builds with `mkdocs build --strict` (no broken link, no page left out of the nav)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cluster import reference

REPO = Path(__file__).resolve().parents[2]


def test_readme_is_short_and_keeps_the_test_command():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert "./dev test" in text  # .ci/run runs the README's test command
    assert "./dev start" in text


def test_generated_reference_pages_are_current():
    stale = reference.stale_pages()
    assert not stale, f"stale: {stale}; run: python -m cluster.reference"


def test_reference_lists_every_config_command_and_api():
    from actors.config_schema import BROKER_DEFAULTS, GROUP_CONFIG_SOURCES, TOPIC_CONFIG_SOURCES
    from actors.gateway.handlers import ROUTES
    configs, cli, apis = reference.configs_page(), reference.cli_page(), reference.apis_page()
    for key in [*BROKER_DEFAULTS, *TOPIC_CONFIG_SOURCES, *GROUP_CONFIG_SOURCES]:
        assert f"| `{key}` |" in configs, key
    from cluster.cli import build_parser
    for name, _, _ in reference._subcommands(build_parser()):
        assert f"## kray {name}\n" in cli, name
    for key in ROUTES:
        assert f"\n| {key} | " in apis, key


def test_docs_build_in_strict_mode(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=300,
                            env=os.environ | {"NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "configs" / "index.html").exists()
