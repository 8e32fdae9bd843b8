"""How the suite runs on several workers (`./dev test` runs it with pytest-xdist, `-n 2 --dist loadgroup`).

Most of the full suite's time is waiting: deploys, faults whose length is the fault, clients' timeouts. Two
workers overlap that waiting. Each test joins one xdist group, and a group runs on one worker, so that:

- a module's deployment (module-scoped fixtures) is made once, not once per worker: the group is the module;
- what a directory shares is not made twice and nothing fixed is taken twice: tests/hosts (one deployment in
  network namespaces of fixed names), tests/kafka (one Apache Kafka JVM beside one Kray), tests/spark (one
  Spark on Ray), tests/actors (one embedded broker for the directory) are one group each.

The long groups are put first so that the two workers end together. Run without workers: `-n 0` (or
KRAY_TEST_WORKERS=0 ./dev test), as any pytest run without -n is.
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
WHOLE_DIRECTORY = ("hosts", "kafka", "spark", "actors")   # one group each, in this order, before the rest


def xdist_group(item: pytest.Item) -> str:
    path = Path(item.path).resolve()
    relative = path.relative_to(HERE)
    if relative.parts[0] in WHOLE_DIRECTORY:
        return relative.parts[0]
    return str(relative)


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    first = {name: n for n, name in enumerate(WHOLE_DIRECTORY)}
    items.sort(key=lambda item: first.get(xdist_group(item), len(first)))  # stable: order within a group kept
