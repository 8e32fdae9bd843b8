"""Which voter to add or remove next, so that the metadata quorum keeps three voters on live brokers
(or one on a single node) as nodes come and go (issue 36 item 4). Pure: the caller (the active
controller) passes what it knows and carries out at most one step through AddRaftVoter /
RemoveRaftVoter (quorum_shell/node.py change_voters), then asks again once that change committed.

The rules, in order (one change at a time, as KIP-853 allows):
1. nothing while a change is uncommitted, or while the leader is unknown;
2. a voter whose broker is not live is removed first (the failed member out before a new one comes
   in, as etcd's and Kafka's operations guides advise: adding first would need every live voter of
   a larger set), never the last voter, and never when what is left would hold no live majority of
   the current set anyway (the change could not commit);
3. then a live, eligible broker that is not a voter is added while there are fewer voters than the
   target (three, or one when only one broker is live; two live brokers keep what they have:
   two voters survive no loss better than one), the lowest id first;
4. then, above the target, a voter is removed: never the leader, the highest id first.
`eligible`: the brokers that run a quorum node and so can catch up as observers (in Kray today, those
named in controller.quorum.voters); None: every live broker.

Not wired into the controller yet: the balancer's shell (actors/controller/actor.py) would call it.
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
    if live_count >= TARGET_VOTERS:
        return TARGET_VOTERS
    if live_count <= 1:
        return 1
    return max(1, min(current, live_count))


def next_voter_step(voters: Iterable[int], live: Iterable[int], *, leader_id: int | None,
                    change_pending: bool, eligible: Iterable[int] | None = None) -> VoterStep | None:
    voters, live = sorted(set(voters)), set(live)
    if change_pending or leader_id is None or not voters:
        return None
    dead = [v for v in voters if v not in live]
    live_voters = [v for v in voters if v in live]
    if dead and len(voters) > 1:
        majority = len(voters) // 2 + 1
        if len(live_voters) >= majority:
            victim = dead[-1]
            return VoterStep("remove", victim, f"broker {victim} is not live")
        return None   # no live majority: no change can commit; the quorum waits for its voters
    candidates = sorted((live if eligible is None else live & set(eligible)) - set(voters))
    target = target_voters(len(live), len(voters))
    if len(voters) < target and candidates:
        return VoterStep("add", candidates[0], f"{len(voters)} voters, {target} wanted on live brokers")
    if len(voters) > target:
        removable = [v for v in voters if v != leader_id]
        if removable:
            victim = removable[-1]
            return VoterStep("remove", victim, f"{len(voters)} voters, {target} wanted")
    return None
