"""The quorum's settings from a broker's config: who votes, where, and the timings.

The metadata quorum always keeps the controller's metadata (`__cluster_metadata-0`); its voters run
in one of two places, as Kafka's `process.roles` puts them:

- **A dedicated controller** (Kafka's `process.roles=controller`; the default, with
  `controller.quorum.voters` unset): ONE voter, node id DEDICATED_CONTROLLER_ID, inside the
  controller actor on the Ray head (`kray start`'s own node; LocalCluster's controller-only head),
  its files in `<log.dirs>/__cluster_metadata-0/`. No broker votes, so killing, pausing or loading
  brokers never touches the quorum. A single voter needs no peers: it opens no listener and sends
  nothing. Several dedicated voters (a controller quorum apart from the brokers) are NOT supported:
  they would need controller processes on nodes of their own with listeners of their own; for a
  quorum that survives a machine's loss use combined voters.
- **Combined voters** (Kafka's `process.roles=broker,controller`, configs/multinode.toml):
  `controller.quorum.voters` names broker ids (Kafka's "id@host:port,..." or plain ids "1,2,3"; the
  endpoints are the brokers' inter-broker listeners, as the voting brokers' gateways say: only the
  ids count here). Each voting broker's gateway runs a voter and its node a controller; the one
  whose voter leads is active. The set a node first starts with is recorded in its quorum-state
  file (store.py) and a later start with another set is refused: a voter set never changes
  silently (KIP-853 will change it on purpose).
- `process.roles`, where set, must agree: `broker` (the brokers' role beside a dedicated
  controller) or `broker,controller` (combined voters: needs controller.quorum.voters).
- `kray.metadata.quorum.enable` (Kray's switch while the quorum was new; cluster/config.py): true is
  accepted and ignored, false refused with the reason.
- `controller.quorum.*` timings, Kafka's names and defaults (actors/controller/quorum/config.py).
"""
from __future__ import annotations

from typing import Any, Mapping

from actors.controller.quorum import QuorumConfig

VOTERS_KEY = "controller.quorum.voters"
ROLES_KEY = "process.roles"
# the dedicated controller's node id: apart from any broker's (Kafka's own test kit numbers its
# controllers from 3000 too)
DEDICATED_CONTROLLER_ID = 3000
_TIMINGS = {
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
}


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


def combined_voters(config: Mapping[str, Any]) -> tuple[int, ...]:
    """The voting brokers (controller.quorum.voters), or () for one dedicated controller voter.
    ValueError, saying why, when the voters are malformed or process.roles disagrees."""
    voters = () if config.get(VOTERS_KEY) in (None, "") else parse_voters(config[VOTERS_KEY])
    roles = config.get(ROLES_KEY)
    if roles not in (None, ""):
        named = {r.strip() for r in str(roles).split(",") if r.strip()}
        if named == {"broker"} and voters:
            raise ValueError(f"{ROLES_KEY}=broker runs no voter in a broker, but {VOTERS_KEY} names brokers "
                             f"{list(voters)}: unset {VOTERS_KEY} (one dedicated controller) or set "
                             f"{ROLES_KEY}=broker,controller")
        if named == {"broker", "controller"} and not voters:
            raise ValueError(f"{ROLES_KEY}=broker,controller needs {VOTERS_KEY}: the broker ids of the voters "
                             f"(three, e.g. \"1,2,3\")")
        if named not in ({"broker"}, {"broker", "controller"}):
            raise ValueError(f"{ROLES_KEY}={roles}: Kray's brokers are `broker` (beside one dedicated controller "
                             f"on the Ray head) or `broker,controller` (voters of {VOTERS_KEY}); a controller-only "
                             f"process is the dedicated controller, started by Kray itself")
    return voters


def configured_voters(config: Mapping[str, Any]) -> tuple[int, ...]:
    """controller.quorum.voters; ValueError, saying what to set, when it is missing."""
    voters = combined_voters(config)
    if not voters:
        raise ValueError(f"combined voters need {VOTERS_KEY}: the broker ids of the voters (three, e.g. "
                         f"\"1,2,3\": nodes started with `ray start --labels kray-broker-id=N`)")
    return voters


def quorum_config(config: Mapping[str, Any], voters: tuple[int, ...]) -> QuorumConfig:
    timings = {field: int(config[key]) for key, field in _TIMINGS.items() if key in config}
    return QuorumConfig(voters=voters, **timings)
