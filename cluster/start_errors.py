"""What `kray start` says when it can't start or a broker can't serve, with what to do next: pure
functions of the failure and the environment (cluster/local.py and cluster/cli.py print them).
"""
from __future__ import annotations

import re
from typing import Mapping

AUTH_DOC = "https://docs.ray.io/en/latest/ray-security/token-auth.html"


class RayUnreachable(RuntimeError):
    """`kray start --address` could not connect to the Ray cluster (not a port problem)."""


class CannotListen(RuntimeError):
    """A broker's gateway could not open its listener."""


class DeployTimedOut(RuntimeError):
    """Not every broker served within the deploy's time: the message names those that do not, and why."""


class RayDidNotStart(RuntimeError):
    """The Ray that `kray start` starts on this machine did not come up (its raylet did not register in time)."""


def ray_did_not_start(load_average: float, cpus: int | None, attempts: int) -> str:
    return (f"Ray's processes on this machine did not start in time, {attempts} times (a new Ray node's raylet "
            f"must register with its GCS within 30 s, a limit of Ray's own); the load average is "
            f"{load_average:.1f} on {cpus or '?'} CPUs: the machine is probably too busy. Stop what else runs on "
            f"it, then start Kray again")


class InterBrokerLoginFailed(RuntimeError):
    """Brokers cannot log in to each other (cluster/inter_broker_login.py); the message says what to fix."""


def _chain(error: BaseException) -> list[str]:
    texts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        texts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return texts


def ray_unreachable(address: str, error: BaseException, env: Mapping[str, str], home_token: bool,
                    ray_said: list[str] = ()) -> str:
    """Why `ray.init(address)` failed, and the fix. `home_token`: ~/.ray/auth_token exists here;
    `ray_said`: the distinct lines Ray logged meanwhile."""
    texts = _chain(error) + list(ray_said)
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    lines = [f"cannot reach the Ray cluster at {address}: {first}"]
    lines += [f"Ray said: {line}" for line in list(ray_said)[-3:]]
    mode = env.get("RAY_AUTH_MODE", "").lower()
    has_token = home_token or bool(env.get("RAY_AUTH_TOKEN")) or bool(env.get("RAY_AUTH_TOKEN_PATH"))
    refused = any(re.search(r"unauthenticated|invalidauthtoken|token is missing", t, re.I) for t in texts)
    if address == "auto" and any("Could not find any running Ray instance" in t for t in texts):
        lines.append("no Ray runs on this machine: start it first (`ray start --head`), or give the head's "
                     "address: kray start --address HEAD_IP:6379")
        return "\n".join(lines)
    if mode != "token":
        lines.append(("the cluster uses token authentication and refused this process, which has none"
                      if refused else "if the cluster uses token authentication")
                     + " (Ray 2.60's `ray start --head` turns it on by "
                     "itself when ~/.ray/auth_token exists on the head): every process that joins it needs "
                     "RAY_AUTH_MODE=token and the head's token: "
                     + ("" if has_token else "copy the head's ~/.ray/auth_token to this machine (or set "
                                             "RAY_AUTH_TOKEN), then ")
                     + f"run: RAY_AUTH_MODE=token kray start --address {address} ...  ({AUTH_DOC})")
    elif not has_token:
        lines.append("RAY_AUTH_MODE=token is set but this machine has no token: copy the head's "
                     "~/.ray/auth_token here (or set RAY_AUTH_TOKEN to it)")
    elif refused:
        lines.append("the head refused this machine's token: use the head's own (its ~/.ray/auth_token)")
    lines.append(f"check that Ray runs there and this machine reaches it: `ray status --address {address}` "
                 f"(with the same RAY_AUTH_MODE); Ray's ports (6379 and the node ports) must be open between "
                 f"the machines")
    return "\n".join(lines)


def ray_port_closed(address: str, error: BaseException) -> str:
    """Nothing answers at the Ray head's HOST:PORT (checked before ray.init, which would retry
    for minutes)."""
    return (f"cannot reach the Ray cluster at {address}: {error}\n"
            f"is Ray's head running there (`ray start --head --port PORT` on that machine; 6379 unless "
            f"--port says otherwise), and is that port open from this machine?")


def cannot_listen(broker_id: int, host: str | None, reason: str, port: int | None = None, *,
                  own_ray: bool = False, retrying: bool = True) -> str:
    """A broker's listener failed to open (`reason`: the gateway's error text), and the fix.
    `own_ray`: Kray started its Ray here (plain `kray start`), so --port is the way out."""
    where = f"broker {broker_id}" + (f" (Ray node {host})" if host else "")
    m = re.search(r"\(\s*'([^']*)',\s*(\d+)\s*\)", reason)
    port = int(m.group(2)) if m else port
    port_text = f"port {port}" if port else "its port"
    low = reason.lower()
    if "address already in use" in low or "errno 98" in low:
        fix = (f"another process listens on {port_text} on that machine (`ss -ltnp` there shows which): stop it, "
               + ("or pick another port with --port" if own_ray else
                  "or give that node's broker another port (`ray start ... --labels kray-port=N` on it)"))
    elif "permission denied" in low or "errno 13" in low:
        fix = f"{port_text} is privileged there: use a port above 1023 in `listeners` (or --port)"
    elif "cannot assign requested address" in low or "errno 99" in low:
        fix = ("`listeners` names an address that machine does not have: use PLAINTEXT://:9092 (every interface) and let "
               "each broker advertise its node's own address")
    else:
        fix = "see the broker's log on that node (Ray's session logs) for more"
    return f"{where} cannot listen: {reason.strip()}; {fix}" + (". It retries until it can." if retrying else "")


class ProblemLog:
    """Says each (broker, reason) once: `new_lines` returns the lines not yet said."""

    def __init__(self, *, own_ray: bool = False):
        self.said: set[tuple[int, str]] = set()
        self.own_ray = own_ray

    def new_lines(self, failures: Mapping[int, str], hosts: Mapping[int, str], port: int | None = None, *,
                  retrying: bool = True) -> list[str]:
        """`retrying`: the brokers retry (Kray runs); False when `kray start` gives up."""
        out = []
        for broker_id, reason in sorted(failures.items()):
            if (broker_id, reason) not in self.said:
                self.said.add((broker_id, reason))
                out.append(cannot_listen(broker_id, hosts.get(broker_id), reason, port, own_ray=self.own_ray,
                                         retrying=retrying))
        return out
