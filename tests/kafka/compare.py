"""Runs the corpus (tests/kafka/corpus.py) against Apache Kafka 4.4 and Kray and compares the answers."""
from __future__ import annotations

from dataclasses import dataclass, field

from cluster.admin import KafkaConnection
from protocol.apis import API_BY_KEY
from protocol import messages as m
from tests.kafka.corpus import CASES, Case, as_data, ids, normalise


@dataclass
class Outcome:
    case: Case
    version: int | None
    kafka: object = None
    kray: object = None
    differs: bool = False
    fields: list[str] = field(default_factory=list)   # the normalised paths that differ


def connect(bootstrap: str) -> KafkaConnection:
    return KafkaConnection(bootstrap, client_id="kray-reference-suite")


def api_versions(conn: KafkaConnection) -> dict[int, tuple[int, int]]:
    return dict(conn.versions)


def finalized_features(bootstrap: str) -> dict[str, int]:
    with connect(bootstrap) as conn:
        r = conn._call(m.ApiVersionsRequest(client_software_name="kray-reference-suite",
                                            client_software_version="1"), 18, 3)
    return {f.name: f.max_version_level for f in r.finalized_features}


def diff_paths(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += diff_paths(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff_paths(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [path or "(whole)"]


def value_at(data, path: str):
    import re
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            data = data[int(part[1:-1])] if isinstance(data, list) and int(part[1:-1]) < len(data) else None
        else:
            data = data.get(part) if isinstance(data, dict) else None
    return data


def run(kafka: str, kray: str, cases: list[Case] = CASES) -> list[Outcome]:
    with connect(kafka) as k, connect(kray) as r:
        names = {"kafka": ids(k), "kray": ids(r)}
        out = []
        for case in cases:
            requests = {"kafka": case.request(names["kafka"]), "kray": case.request(names["kray"])}
            api_key = requests["kafka"].API_KEY
            spec = API_BY_KEY[api_key]
            both = [c.versions.get(api_key) for c in (k, r)]
            if None in both:
                served = "kafka" if both[0] else "kray"
                out.append(Outcome(case, None, differs=True, fields=[f"{spec.name} served only by {served}"]))
                continue
            top = spec.max_version - 1 if spec.latest_version_unstable else spec.max_version
            version = case.version if case.version is not None else min(both[0][1], both[1][1], top)
            answers = {}
            for side, conn in (("kafka", k), ("kray", r)):
                try:
                    answers[side] = normalise(as_data(conn._call(requests[side], api_key, version)), case.ignored)
                except Exception as e:  # a closed connection is an answer too
                    answers[side] = f"no answer: {type(e).__name__}: {e}"
                    (k if side == "kafka" else r).close()
                    if side == "kafka":
                        k = connect(kafka)
                    else:
                        r = connect(kray)
            paths = diff_paths(answers["kafka"], answers["kray"])
            out.append(Outcome(case, version, answers["kafka"], answers["kray"], bool(paths), paths))
        return out
