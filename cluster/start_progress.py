"""`kray start`'s progress lines while it deploys: what it is waiting for, in words.

A deploy waits on three things in turn: the metadata quorum's voters electing a leader (with
combined voters) and that leader's controller reading the metadata; every broker node's gateway
registering and its replicas listening (the broker serves clients); the internal topics. Under
load any of these can take a while, and an election may come in between (an active controller
whose voter loses its leadership starts again and another takes over): the line says which step
it is on, and which brokers it waits for, so a deploy that does not converge says where.

    line = progress_line(voters=(1, 2, 3), active=None, progress=None, expected=3)
    # "waiting for the metadata quorum's voters (brokers 1, 2, 3) to elect a leader whose controller
    #  reads the metadata"
"""
from __future__ import annotations

from typing import Any

PROGRESS_EVERY_S = 5.0        # how often the deploy is looked at
PROGRESS_REPEAT_S = 30.0      # a line that did not change is said again this often (still waiting)


def progress_line(voters: tuple[int, ...], active: int | None, progress: dict[str, Any] | None,
                  expected: int) -> str:
    """What the deploy waits for now. `voters`: the metadata quorum's voting brokers (() with a
    dedicated controller); `active`: the broker whose controller is active (None: none yet, or the
    dedicated controller); `progress`: the active controller's deploy_progress() (None: it did not
    answer); `expected`: brokers to serve."""
    if progress is None:
        if voters:
            return (f"waiting for the metadata quorum's voters (brokers {_list(voters)}) to elect a leader whose "
                    f"controller reads the metadata")
        return "waiting for the controller to read the metadata"
    controller = f"the controller on broker {active}" if active is not None else "the controller"
    brokers: dict[int, str] = {int(b): what for b, what in progress.get("brokers", {}).items()}
    serving = [b for b, what in brokers.items() if what == "serving"]
    if len(serving) < expected:
        by_state: dict[str, list[int]] = {}
        for b, what in sorted(brokers.items()):
            if what != "serving":
                by_state.setdefault(what, []).append(b)
        parts = [f"broker{'s' if len(bs) != 1 else ''} {_list(bs)} {_words(what, len(bs))}"
                 for what, bs in by_state.items()]
        unknown = expected - len(brokers)
        if unknown > 0:
            parts.append(f"{unknown} broker node{'s' if unknown != 1 else ''} not seen yet")
        return (f"waiting for brokers to serve clients: {len(serving)} of {expected} serve"
                + (f" ({_list(serving)})" if serving else "") + ("; " + "; ".join(parts) if parts else "")
                + f" ({controller} is active)")
    missing = progress.get("internal_topics_missing") or []
    if missing:
        return f"all {expected} brokers serve; {controller} creates the internal topics {', '.join(missing)}"
    return f"all {expected} brokers serve; waiting for the internal topics' leaders ({controller} is active)"


_STATE_WORDS = {  # (one broker, several)
    "starting": ("starting (its gateway has not registered with the controller yet)",
                 "starting (their gateways have not registered with the controller yet)"),
    "registered": ("registered (its replicas recover and start listening)",
                   "registered (their replicas recover and start listening)"),
    "cannot listen": ("cannot open its listener (see below)", "cannot open their listeners (see below)"),
}


def _words(state: str, count: int) -> str:
    one, several = _STATE_WORDS.get(state, (state, state))
    return one if count == 1 else several


def _list(ids) -> str:
    return ", ".join(str(i) for i in ids)
