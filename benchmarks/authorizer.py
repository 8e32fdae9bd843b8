#!/usr/bin/env python3
"""The authorizer's cost per request with 10 and 10,000 ACLs (issue 18), in one process, no broker.

    python -m benchmarks.authorizer [--repeat 20000]

What a request costs is the checks its handler makes through `Access` (actors/security/
access.py), the same objects a gateway uses:

- produce: WRITE on one topic (a Produce to one topic; a Fetch or ShareFetch is one READ per topic
  in the same way);
- refused: a principal without ACLs on the topic (a check that scans everything applicable, then
  says no);
- prefixed: WRITE allowed by a PREFIXED ACL (the index looks up every prefix length in use);
- super user: `super.users` short-circuits;
- metadata 1,000 topics: a Metadata request for every topic checks DESCRIBE on each one;
- by resource type, allowed / refused: `Access.allows_any` (Kafka's authorizeByResourceType), what
  InitProducerId asks of an idempotent producer without IDEMPOTENT_WRITE on the cluster (WRITE on
  any topic). Refused is its costliest answer: every binding of the principal is looked at.

ACL sets: "10" (a small cluster's: a few topics, groups and prefixes), "10,000 spread" (1,000
principals, each with READ/WRITE on its own 4 topics, READ on 2 groups, a prefix; the resources
share nothing) and "10,000 on one topic" (10,000 principals allowed to READ one topic: every check
on that topic walks all of them). Also the time to build the authorizer from the metadata image's
ACLs, which every gateway does whole when the ACLs change.

Results: benchmarks/results/authorizer.{json,md}. Figures are medians of --rounds rounds. With
--label, the run is also kept under that label in authorizer.json's "runs" (the figures of
earlier code, e.g. "before"), and the markdown shows every kept run's by-resource-type figures.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import statistics
import time
from pathlib import Path

from actors.security.access import Access
from actors.security.authorizer import (AccessControlEntry, AclBinding, AclOperation, AclPermissionType,
                                        AuthorizerConfig, PatternType, ResourcePattern, ResourceType,
                                        StandardAuthorizer)
from actors.security.principal import KafkaPrincipal

RESULTS = Path(__file__).resolve().parent / "results"
HOST = "10.0.0.7"
Op, Res, Perm = AclOperation, ResourceType, AclPermissionType


def acl(resource_type, name, principal, operation, permission=Perm.ALLOW, pattern=PatternType.LITERAL, host="*"):
    return AclBinding(ResourcePattern(resource_type, name, pattern),
                      AccessControlEntry(principal, host, operation, permission))


def small_set() -> list[AclBinding]:
    return [acl(Res.TOPIC, "orders", "User:user-1", Op.WRITE), acl(Res.TOPIC, "orders", "User:user-2", Op.READ),
            acl(Res.GROUP, "workers", "User:user-2", Op.READ), acl(Res.TOPIC, "app-", "User:user-1", Op.WRITE,
                                                                  pattern=PatternType.PREFIXED),
            acl(Res.TOPIC, "payments", "User:user-3", Op.ALL), acl(Res.TOPIC, "orders", "User:user-9", Op.ALL,
                                                                  Perm.DENY),
            acl(Res.TOPIC, "*", "User:monitor", Op.DESCRIBE), acl(Res.CLUSTER, "kafka-cluster", "User:user-1",
                                                                 Op.IDEMPOTENT_WRITE),
            acl(Res.GROUP, "app-", "User:user-1", Op.READ, pattern=PatternType.PREFIXED),
            acl(Res.TOPIC, "logs", "User:user-4", Op.READ, host=HOST)]


def spread_set() -> list[AclBinding]:
    bindings = []
    for u in range(1000):
        principal = f"User:user-{u}"
        for t in range(4):
            bindings.append(acl(Res.TOPIC, f"topic-{u}-{t}", principal, Op.WRITE if t % 2 else Op.READ))
        bindings += [acl(Res.GROUP, f"group-{u}-{g}", principal, Op.READ) for g in range(2)]
        bindings += [acl(Res.TOPIC, f"team-{u}-", principal, Op.WRITE, pattern=PatternType.PREFIXED),
                     acl(Res.GROUP, f"team-{u}-", principal, Op.READ, pattern=PatternType.PREFIXED),
                     acl(Res.TOPIC, f"topic-{u}-0", principal, Op.DESCRIBE, host=HOST),
                     acl(Res.TOPIC, f"topic-{u}-1", f"User:other-{u}", Op.ALL, Perm.DENY)]
    return bindings


def hot_topic_set() -> list[AclBinding]:
    return [acl(Res.TOPIC, "orders", f"User:user-{u}", Op.READ) for u in range(10_000)]


def per_call_ns(fn, repeat: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        for _ in range(repeat):
            fn()
        samples.append((time.perf_counter_ns() - started) / repeat)
    return statistics.median(samples)


def per_call_ns_timed(fn, rounds: int, min_s: float = 0.2) -> float:
    """per_call_ns for calls whose cost is unknown (microseconds to milliseconds): each round makes
    as many calls as fill `min_s`."""
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < min_s / 4:
        fn()
        calls += 1
    return per_call_ns(fn, max(10, calls * 4), rounds)


def measure(name: str, bindings: list[AclBinding], cases: dict, by_type: dict, repeat: int, rounds: int) -> dict:
    config = AuthorizerConfig(super_users=frozenset({"User:admin"}))
    build_s = []
    for _ in range(rounds):
        started = time.perf_counter()
        authorizer = StandardAuthorizer(config, bindings)
        build_s.append(time.perf_counter() - started)
    row = {"acls": len(authorizer), "set": name, "build_ms": statistics.median(build_s) * 1000, "checks_ns": {}}
    for case, (principal, operation, resource_type, resource, expected) in cases.items():
        access = Access(authorizer, KafkaPrincipal.parse(principal), HOST)
        assert access.allows(operation, resource_type, resource) is expected, (name, case)
        row["checks_ns"][case] = per_call_ns(lambda: access.allows(operation, resource_type, resource),
                                             repeat, rounds)
    row["by_type_ns"] = {}
    for case, (principal, operation, resource_type, expected) in by_type.items():
        access = Access(authorizer, KafkaPrincipal.parse(principal), HOST)
        assert access.allows_any(operation, resource_type) is expected, (name, case)
        row["by_type_ns"][case] = per_call_ns_timed(lambda: access.allows_any(operation, resource_type), rounds)
    topics = [f"topic-{i // 4}-{i % 4}" for i in range(1000)]
    reader = Access(authorizer, KafkaPrincipal.parse(cases["produce"][0]), HOST)
    row["metadata_1000_topics_us"] = per_call_ns(lambda: reader.allowed(Op.DESCRIBE, Res.TOPIC, topics),
                                                 max(1, repeat // 1000), rounds) / 1000
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20000, help="checks per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", help="keep this run's figures in authorizer.json under this label")
    args = parser.parse_args(argv)
    sets = {
        "10": (small_set(), {
            "produce": ("User:user-1", Op.WRITE, Res.TOPIC, "orders", True),
            "refused": ("User:user-5", Op.WRITE, Res.TOPIC, "orders", False),
            "prefixed": ("User:user-1", Op.WRITE, Res.TOPIC, "app-clicks", True),
            "super user": ("User:admin", Op.WRITE, Res.TOPIC, "orders", True)}, {
            "allowed": ("User:user-1", Op.WRITE, Res.TOPIC, True),
            "refused": ("User:user-5", Op.WRITE, Res.TOPIC, False)}),
        "10,000 spread": (spread_set(), {
            "produce": ("User:user-500", Op.WRITE, Res.TOPIC, "topic-500-1", True),
            "refused": ("User:user-5", Op.WRITE, Res.TOPIC, "topic-500-1", False),
            "prefixed": ("User:user-500", Op.WRITE, Res.TOPIC, "team-500-clicks", True),
            "super user": ("User:admin", Op.WRITE, Res.TOPIC, "topic-500-1", True)}, {
            "allowed": ("User:user-500", Op.WRITE, Res.TOPIC, True),
            "refused": ("User:other-500", Op.WRITE, Res.TOPIC, False)}),  # a DENY of its own, nothing allowed
        "10,000 on one topic": (hot_topic_set(), {
            "produce": ("User:user-9999", Op.READ, Res.TOPIC, "orders", True),
            "refused": ("User:nobody", Op.READ, Res.TOPIC, "orders", False),
            "prefixed": ("User:user-1", Op.WRITE, Res.TOPIC, "orders-eu", False),
            "super user": ("User:admin", Op.READ, Res.TOPIC, "orders", True)}, {
            "allowed": ("User:user-9999", Op.READ, Res.TOPIC, True),
            "refused": ("User:nobody", Op.READ, Res.TOPIC, False)}),
    }
    rows = [measure(name, bindings, cases, by_type, args.repeat, args.rounds)
            for name, (bindings, cases, by_type) in sets.items()]
    result = {"benchmark": "authorizer", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "python": platform.python_version(), "machine": platform.machine(), "repeat": args.repeat,
              "rounds": args.rounds, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    try:
        runs = json.loads((RESULTS / "authorizer.json").read_text()).get("runs", {})
    except (OSError, ValueError):
        runs = {}
    if args.label:
        runs[args.label] = {"date": result["date"], "rows": rows}
    result["runs"] = runs
    (RESULTS / "authorizer.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Authorizer cost per check", "",
             f"`python -m benchmarks.authorizer --repeat {args.repeat} --rounds {args.rounds}`, "
             f"{result['date']}, Python {result['python']}, one core of a shared 2-core machine; medians of "
             f"{args.rounds} rounds. A check is one `Access.allows` (a handler's question for one resource); "
             "a Produce or Fetch to one topic makes one, a Metadata request for every topic one per topic. "
             "\"prefixed\" on the one-topic set is a refusal (no prefixed ACLs there).", "",
             "| ACL set | ACLs | build ms | allowed µs | refused µs | prefixed µs | super user µs "
             "| Metadata, 1,000 topics, ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        c = r["checks_ns"]
        lines.append(f"| {r['set']} | {r['acls']:,} | {r['build_ms']:.1f} | {c['produce'] / 1000:.2f} | "
                     f"{c['refused'] / 1000:.2f} | {c['prefixed'] / 1000:.2f} | {c['super user'] / 1000:.2f} | "
                     f"{r['metadata_1000_topics_us'] / 1000:.2f} |")
    if runs:
        lines += ["", "## By resource type (`Access.allows_any`, Kafka's authorizeByResourceType)", "",
                  "What InitProducerId asks of an idempotent producer without IDEMPOTENT_WRITE on the cluster: "
                  "WRITE (READ on the one-topic set) on any topic. Each run kept with `--label`, µs per check:", "",
                  "| run | date | ACL set | allowed µs | refused µs |", "|---|---|---|---:|---:|"]
        for label, run in runs.items():
            for r in run["rows"]:
                c = r["by_type_ns"]
                lines.append(f"| {label} | {run['date'][:10]} | {r['set']} | {c['allowed'] / 1000:,.2f} | "
                             f"{c['refused'] / 1000:,.2f} |")
    (RESULTS / "authorizer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
