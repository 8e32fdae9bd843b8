"""Which voter to add or remove next, so that the metadata quorum keeps three voters on live brokers
(or one on a single node) as nodes come and go (issue 36 item 4). Pure: the caller (the active
controller) passes what it knows and carries out at most one step through AddRaftVoter /
RemoveRaftVoter (quorum_shell/node.py change_voters), then asks again once that change committed.

The rules, in order (one change at a time, as KIP-853 allows):
1. nothing while a change is uncommitted, or while the leader is unknown;
2. a voter whose broker is not live is removed first (the failed member out before a new one comes
   in, as etcd's and Kafka's operations guides advise: adding first would need every live voter of
   a larger set), but only when a live broker can take its place (or there are more voters than
   the target): never the last voter, and never when what is left would hold no live majority of
   the current set anyway (the change could not commit); while a dead voter stays, nothing else
   changes;
3. then a live, eligible broker that is not a voter is added while there are fewer voters than the
   target (three, or one when only one eligible broker is live; two keep what they have: two
   voters survive no loss better than one), the lowest id first;
4. then, above the target, a voter is removed: never the leader, the highest id first.
`eligible`: the brokers that run a quorum node and so can catch up as observers (in Kray, those
named in controller.quorum.voters: each runs a voter or an observer, and a controller); None: every
live broker. `live`: as the caller judges it (Absences: a broker gone for a while).

The balancer's shell (actors/controller/balancing.py `keep_voters`) calls it with kray.balancer.enable.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

TARGET_VOTERS = 3


@dataclass(frozen=True)
class VoterStep:
    op: str          # "add" or "remove"
    broker_id: int
    reason: str


def target_voters(live_count: int, current: int) -> int:
    """Three voters once three eligible brokers are live, one on a single one; with two, as many as
    there are (up to three: a third voter, gone for now, costs nothing the two do not already need)."""
    if live_count >= TARGET_VOTERS:
        return TARGET_VOTERS
    if live_count <= 1:
        return 1
    return max(1, min(current, TARGET_VOTERS))


def next_voter_step(voters: Iterable[int], live: Iterable[int], *, leader_id: int | None,
                    change_pending: bool, eligible: Iterable[int] | None = None) -> VoterStep | None:
    voters, live = sorted(set(voters)), set(live)
    if change_pending or leader_id is None or not voters:
        return None
    dead = [v for v in voters if v not in live]
    live_voters = [v for v in voters if v in live]
    candidates = sorted((live if eligible is None else live & set(eligible)) - set(voters))
    target = target_voters(len(live_voters) + len(candidates), len(voters))
    if dead:
        majority = len(voters) // 2 + 1
        if len(voters) > 1 and len(live_voters) >= majority and (candidates or len(voters) > target):
            victim = dead[-1]
            return VoterStep("remove", victim, f"broker {victim} is not live")
        # no live majority (no change could commit), or no live broker to take its place: the voter
        # stays (were it removed, the quorum would survive no more failures than now, and its
        # broker's return restores the margin at once, without a change)
        return None
    if len(voters) < target and candidates:
        return VoterStep("add", candidates[0], f"{len(voters)} voters, {target} wanted on live brokers")
    if len(voters) > target:
        removable = [v for v in voters if v != leader_id]
        if removable:
            victim = removable[-1]
            return VoterStep("remove", victim, f"{len(voters)} voters, {target} wanted")
    return None


class Absences:
    """Since when each broker has not been live, so that a voter is replaced only once its broker has been
    gone for a while (a broker fenced for a moment, a node restarting, keeps its vote)."""

    def __init__(self):
        self.since: dict[int, float] = {}

    def live(self, brokers: Iterable[int], serving: Iterable[int], now_s: float, delay_s: float) -> set[int]:
        """`brokers` that serve now, or stopped serving less than `delay_s` ago."""
        serving = set(serving)
        for b in serving:
            self.since.pop(b, None)
        out = set()
        for b in set(brokers):
            if b in serving or now_s - self.since.setdefault(b, now_s) < delay_s:
                out.add(b)
        return out
