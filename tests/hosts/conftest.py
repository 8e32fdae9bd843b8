"""One Kray deployment on three hosts for every test here that needs one (deploying takes 20 s
to 2 minutes on this 2-core machine, and the tests used to deploy one each per module).

`hosts` hands a test the shared deployment (cluster/hosts/deploy.py: KrayHosts), whole:
`kray start` running, every broker answering at its own address, every partition of every
topic with a leader and every replica in its ISR (KrayHosts.health_problems). After the test it
heals every fault (heal_all) and waits until the deployment is whole again; one that is not
within HEALTHY_AFTER_TEST_S is an error of that test (a cluster that does not come back after a
healed fault is a finding), and it is removed: the next test deploys afresh. So each test starts
on a whole cluster whatever ran before, and a file runs alone as well as with the others.

Tests share the deployment, not state: each makes topics and groups of its own names.

One configuration serves them all: configs/multinode.toml with benchmarks.partition_heal's
OVERRIDES and QUORUM (the metadata quorum: each broker runs a voter and a controller, so that no
host's loss stops the cluster's decisions), as all three modules' fixtures had (6 partitions for each internal topic instead of
Kafka's 50, as Kafka's own tests do: 300 replicas on 2 cores take most of a minute to create,
and these tests are about hosts, not scale), and Ray's health checks as Kray advises for brokers
(RAY_HEALTH["broker"]), which only test_partition_heal's fixture set. That test needs them: its
60 s cut lasts about as long as Ray's default checks allow (a node is declared dead ~65 s into a
cut), and it is about a broker that heals by itself, not a node Ray restarts. For the other
tests they change nothing: Ray's checks act only on a cut of a minute or more (a node dead after
5 or 10 failed checks of ~13 s; raylets give up on an unreachable GCS after 60 or 180 s), and
their faults last at most 14 s.

Order (pytest_collection_modifyitems below): the network-only tests first (no Kray beside them),
the tests that deploy a cluster of their own (a deploy on busy CPUs, the Ray head's loss: before
the shared deployment exists, so that no two run at once), then the lighter Kray tests, the 60 s cut, and the seeded fault schedule (it isolates h1, the
Ray head and the controller) last, so that a test that leaves damage harms as little as possible;
the health check above makes any order work.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from cluster.hosts.net import unavailable_reason

HEALTHY_AFTER_TEST_S = 120   # from the heal_all after a test until the deployment is whole again
HEALTHY_BEFORE_TEST_S = 60   # a deployment found not whole before a test gets this long, then is replaced
ORDER = ("test_net_faults.py", "test_busy_deploy.py", "test_head_failure.py", "test_three_hosts.py", "test_latency.py", "test_partition_heal.py",
         "test_chaos_checked.py")
HERE = Path(__file__).resolve().parent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each test's call report on its item: the `hosts` fixture prints Kray's log after a failure."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.call_report = report


def pytest_collection_modifyitems(session, config, items):
    """Run this directory's tests in ORDER of their files (stable within a file; files not named
    there after them), leaving every other test where it was."""
    slots = [i for i, item in enumerate(items) if Path(item.path).resolve().parent == HERE]
    rank = {name: n for n, name in enumerate(ORDER)}
    ordered = sorted((items[i] for i in slots), key=lambda item: rank.get(Path(item.path).name, len(ORDER)))
    for i, item in zip(slots, ordered):
        items[i] = item


class SharedDeployment:
    """The one KrayHosts of this directory's tests, deployed at first use, replaced when broken."""

    def __init__(self):
        self.hosts = None
        self.deployments = 0

    def whole(self):
        """The deployment, whole: deployed now if there is none, replaced if it is not whole
        within HEALTHY_BEFORE_TEST_S."""
        if self.hosts is not None:
            problems = self.hosts.wait_healthy(HEALTHY_BEFORE_TEST_S)
            if problems:
                print(f"\nthe shared deployment is not whole ({'; '.join(problems[:5])}): deploying afresh")
                self.discard()
        if self.hosts is None:
            self.deploy()
        return self.hosts

    def deploy(self) -> None:
        from benchmarks.partition_heal import OVERRIDES, QUORUM, RAY_HEALTH
        from cluster.hosts.deploy import KrayHosts
        h = KrayHosts(3, overrides=OVERRIDES + QUORUM, ray_system_config=RAY_HEALTH["broker"])
        h.start()  # removes what it made when it fails
        self.hosts = h
        self.deployments += 1
        print(f"\n3 hosts up: {h.bootstrap}; " + ", ".join(f"{k} {v:.1f}" for k, v in h.timings.items()))

    def discard(self) -> None:
        h, self.hosts = self.hosts, None
        if h is not None:
            h.stop()
            print(f"\n3 hosts removed in {h.timings['stop_s']:.1f} s")


@pytest.fixture(scope="package")
def shared_deployment():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"hosts harness unavailable: {reason}")
    shared = SharedDeployment()
    try:
        yield shared
    finally:
        shared.discard()


@pytest.fixture
def hosts(shared_deployment, request):
    """Kray on three hosts of their own, whole; healed and whole again after the test. A test
    that failed prints what Kray logged meanwhile (warnings, the controllers' decisions)."""
    h = shared_deployment.whole()
    started = time.time()
    yield h
    report = getattr(request.node, "call_report", None)
    if report is not None and report.failed:
        print(f"\nKray's log on the hosts during the test (warnings and the controllers):\n" +
              "\n".join(h.kray_log(started)))
    h.heal_all()
    problems = h.wait_healthy(HEALTHY_AFTER_TEST_S)
    if problems:
        shared_deployment.discard()
        pytest.fail(f"the cluster was not whole again after the test (every fault healed, waited up to "
                    f"{HEALTHY_AFTER_TEST_S} s; the next test deploys afresh): " + "; ".join(problems[:10]),
                    pytrace=False)
