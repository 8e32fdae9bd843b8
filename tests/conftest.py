"""How the suite runs on several workers (`./dev test` runs it with pytest-xdist, `-n 2`).

Most of the full suite's time is waiting: deploys, faults whose length is the fault, clients' timeouts. Two
workers overlap that waiting. Each test belongs to one group, and a group runs on one worker, so that:

- a module's deployment (module-scoped fixtures) is made once, not once per worker: the group is the module;
- what a directory shares is not made twice and nothing fixed is taken twice: tests/hosts (one deployment in
  network namespaces on one fixed subnet), tests/kafka (one Apache Kafka JVM beside one Kray), tests/spark (one
  Spark on Ray), tests/actors (one embedded broker for the directory) are one group each.

Some groups are heavy (HEAVY): each runs a Ray cluster of several nodes (tests/cluster, tests/hosts, the
modules that run `kray start --nodes` or `kray chaos`) or Spark's JVMs beside Ray (tests/spark). Two of them
at once took a 2-core machine to load averages of 45 to 70, where Ray's own start-up limit (a raylet must
register within 30 s) and the tests' deadlines fail; each wants both CPUs, so they gain little from
overlapping. No two run at the same time: one worker runs them one after another (they are first in the
queue) while the other takes the light ones.

The groups are given to xdist by a scheduler of our own (xdist's `loadgroup` marks its groups by renaming test
ids, which pytest 9 no longer lets it do).
Run without workers: `-n 0` (or KRAY_TEST_WORKERS=0 ./dev test), as any pytest run without -n is.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


WHOLE_DIRECTORY = ("hosts", "kafka", "spark", "actors")   # one group each
# groups (or the start of their names) of which one runs at a time: several Ray nodes (LocalCluster, `kray start
# --nodes`, `kray chaos`, hosts of their own) or Spark's JVMs beside Ray
HEAVY = ("hosts", "spark", "tests/cluster/", "tests/e2e/test_broker_tool.py", "tests/e2e/test_chaos_output.py",
         "tests/e2e/test_reassign_partitions.py")


def group_of(nodeid: str) -> str:
    """"tests/hosts/test_x.py::test_y" -> "hosts"; "tests/e2e/test_z.py::test_w[1]" -> "tests/e2e/test_z.py"."""
    path = nodeid.split("::", 1)[0]
    parts = Path(path).parts
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in WHOLE_DIRECTORY:
        return parts[1]
    return path


def is_heavy(group: str) -> bool:
    return group.startswith(HEAVY)


def _queue_place(group: str) -> int:
    """Heavy groups first (one worker runs them in turn), then the whole directories, then the rest."""
    if is_heavy(group):
        return 0
    return 1 if group in WHOLE_DIRECTORY else 2


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: _queue_place(group_of(item.nodeid)))  # stable: order within kept


if importlib.util.find_spec("xdist") is not None:
    def pytest_xdist_make_scheduler(config, log):
        from xdist.scheduler import LoadScopeScheduling

        config.option.loadscopereorder = False  # (xdist would sort the groups by their number of tests)

        class GroupScheduling(LoadScopeScheduling):
            """xdist's scope scheduling (a scope's tests on one worker, scopes handed out in order as workers
            free up) with our groups as the scopes, and a heavy group handed out only while no other worker
            has one unfinished: a worker skips to the first light group, or waits (parked) for the heavy one
            to end when only heavy groups are left."""

            def __init__(self, config, log=None):
                super().__init__(config, log)
                self.parked: set = set()

            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid)

            def _heavy_elsewhere(self, node) -> bool:
                return any(is_heavy(scope) and not all(done.values())
                           for other, work in self.assigned_work.items() if other is not node
                           for scope, done in work.items())

            def _assign_work_unit(self, node) -> None:
                blocked = self._heavy_elsewhere(node)
                scope = next((s for s in self.workqueue if not (blocked and is_heavy(s))), None)
                if scope is None:
                    self.parked.add(node)
                    return
                work_unit = self.workqueue.pop(scope)
                self.assigned_work.setdefault(node, {})[scope] = work_unit
                collection = self.registered_collections[node]
                node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

            def mark_test_complete(self, node, item_index, duration=0) -> None:
                super().mark_test_complete(node, item_index, duration)
                for waiting in list(self.parked):  # (a heavy group may have just ended)
                    self.parked.discard(waiting)
                    self._reschedule(waiting)

            def remove_node(self, node):
                self.parked.discard(node)  # (a worker that crashed while it waited)
                return super().remove_node(node)

        return GroupScheduling(config, log)
