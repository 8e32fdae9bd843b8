"""How the suite runs on several workers (`./dev test` runs it with pytest-xdist, `-n 2`).

Most of the full suite's time is waiting: deploys, faults whose length is the fault, clients' timeouts. Two
workers overlap that waiting. Each test belongs to one group, and a group runs on one worker, so that:

- a module's deployment (module-scoped fixtures) is made once, not once per worker: the group is the module;
- what a directory shares is not made twice and nothing fixed is taken twice: tests/hosts (one deployment in
  network namespaces on one fixed subnet), tests/kafka (one Apache Kafka JVM beside one Kray), tests/spark (one
  Spark on Ray), tests/actors (one embedded broker for the directory) are one group each.

The groups are given to xdist by a scheduler of our own (xdist's `loadgroup` marks its groups by renaming test
ids, which pytest 9 no longer lets it do). The long groups are put first so that the two workers end together.
Run without workers: `-n 0` (or KRAY_TEST_WORKERS=0 ./dev test), as any pytest run without -n is.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


WHOLE_DIRECTORY = ("hosts", "kafka", "spark", "actors")   # one group each, in this order, before the rest


def group_of(nodeid: str) -> str:
    """"tests/hosts/test_x.py::test_y" -> "hosts"; "tests/e2e/test_z.py::test_w[1]" -> "tests/e2e/test_z.py"."""
    path = nodeid.split("::", 1)[0]
    parts = Path(path).parts
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in WHOLE_DIRECTORY:
        return parts[1]
    return path


def pytest_collection_modifyitems(session, config, items):
    first = {name: n for n, name in enumerate(WHOLE_DIRECTORY)}
    items.sort(key=lambda item: first.get(group_of(item.nodeid), len(first)))  # stable: order within kept


if importlib.util.find_spec("xdist") is not None:
    def pytest_xdist_make_scheduler(config, log):
        from xdist.scheduler import LoadScopeScheduling

        class GroupScheduling(LoadScopeScheduling):
            """xdist's scope scheduling (a scope's tests on one worker, scopes handed out as workers free up)
            with our groups as the scopes."""

            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid)

        return GroupScheduling(config, log)
