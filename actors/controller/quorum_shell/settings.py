"""The quorum's settings from a broker's config: whether it runs, who votes, and the timings.

- `kray.metadata.quorum.enable` (Kray's switch, false by default): while false no voter starts and
  the controller's metadata log is the only one, as on main before issue 17.
- `controller.quorum.voters` (Kafka's name): Kafka's "id@host:port,..." or plain ids "1,2,3"; the
  endpoints are the brokers' inter-broker listeners, as the voting brokers' gateways say (only the
  ids count here). Required with the switch on, as Kafka requires it: the voters must be known
  before the first metadata record, which they keep (LocalCluster sets its lowest broker ids, up
  to DEFAULT_VOTERS_MAX). The set a node first starts with is recorded in its quorum-state file
  (store.py) and a later start with another set is refused: a voter set never changes silently
  (KIP-853 will change it on purpose).
- `controller.quorum.*` timings, Kafka's names and defaults (actors/controller/quorum/config.py).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from actors.controller.quorum import QuorumConfig

ENABLE_KEY = "kray.metadata.quorum.enable"
VOTERS_KEY = "controller.quorum.voters"
DEFAULT_VOTERS_MAX = 3
_TIMINGS = {
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
}


def quorum_enabled(config: Mapping[str, Any]) -> bool:
    value = config.get(ENABLE_KEY, False)
    return value is True or str(value).strip().lower() == "true"


def parse_voters(value: Any) -> tuple[int, ...]:
    """"1@h1:9093,2@h2:9093" or "1,2,3" or [1, 2, 3] -> (1, 2, 3); ValueError when malformed."""
    items = value if isinstance(value, (list, tuple)) else [p for p in str(value).split(",") if p.strip()]
    ids = []
    for item in items:
        text = str(item).strip().split("@", 1)[0]
        if not text.lstrip("-").isdigit() or int(text) < 0:
            raise ValueError(f"{VOTERS_KEY}: {item!r} is not a node id (id or id@host:port)")
        ids.append(int(text))
    if not ids or len(set(ids)) != len(ids):
        raise ValueError(f"{VOTERS_KEY} must list distinct node ids, got {value!r}")
    return tuple(ids)


def configured_voters(config: Mapping[str, Any]) -> tuple[int, ...]:
    """controller.quorum.voters; ValueError, saying what to set, when it is missing."""
    if config.get(VOTERS_KEY) in (None, ""):
        raise ValueError(f"{ENABLE_KEY}=true needs {VOTERS_KEY}: the broker ids of the voters (three, e.g. "
                         f"\"1,2,3\": nodes started with `ray start --labels kray-broker-id=N`)")
    return parse_voters(config[VOTERS_KEY])


def default_voters(broker_ids: Iterable[int]) -> tuple[int, ...]:
    """The lowest DEFAULT_VOTERS_MAX broker ids (LocalCluster's choice when none is configured)."""
    return tuple(sorted(set(broker_ids))[:DEFAULT_VOTERS_MAX])


def quorum_config(config: Mapping[str, Any], voters: tuple[int, ...]) -> QuorumConfig:
    timings = {field: int(config[key]) for key, field in _TIMINGS.items() if key in config}
    return QuorumConfig(voters=voters, **timings)
