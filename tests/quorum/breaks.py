"""Planted bugs: each breaks one rule of the quorum core (or of its shell's contract), to show that
the simulation catches it, and to keep showing it in CI (test_simulation.py)."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from actors.controller.quorum import Accepted, Batch, QuorumConfig, RaftCore, Role
from actors.controller.quorum.log import QuorumLog
from actors.controller.quorum.raft import _Replica


def _grant_two_votes_per_epoch(original):
    def can_grant_vote(self, candidate, up_to_date, pre_vote):
        # the bug: a voter forgets it already voted (or knows a leader) in this epoch
        if not pre_vote and self.role in (Role.UNATTACHED, Role.PROSPECTIVE):
            return up_to_date
        return original(self, candidate, up_to_date, pre_vote)
    return can_grant_vote


def _vote_for_stale_log(original):
    def can_grant_vote(self, candidate, up_to_date, pre_vote):
        # the bug: votes (and pre-votes) ignore whether the candidate's log is up to date
        return original(self, candidate, True, pre_vote)
    return can_grant_vote


def _hw_from_minority(original):
    def advance(self):
        # the bug: the leader's high watermark follows its own log end, as if it were a majority
        lead = self._leadership
        if self.log.end_offset > lead.epoch_start_offset and self.log.end_offset > self.high_watermark:
            self.high_watermark = self.log.end_offset
            self._wake_parked()
    return advance


def _hw_before_own_epoch(original):
    def advance(self):
        # the bug: the high watermark may cover earlier epochs' entries before an entry of the
        # leader's own epoch is on a majority (Raft's figure 8)
        lead = self._leadership
        ends = sorted([self.log.end_offset] + [r.end_offset for r in lead.replicas.values()], reverse=True)
        offset = ends[self._majority - 1]
        if offset > self.high_watermark:
            self.high_watermark = offset
            self._wake_parked()
    return advance


def _observer_counts_toward_hw(original):
    def update_replica(self, replica_id, fetch_offset):
        # the bug: an observer's fetches count toward the high watermark like a voter's
        lead = self._leadership
        if replica_id not in lead.replicas and replica_id not in self.voters:
            lead.replicas[replica_id] = _Replica()
        return original(self, replica_id, fetch_offset)
    return update_replica


def _no_divergence_check(original):
    def diverging(self, fetch_offset, last_fetched_epoch):
        # the bug: the leader checks the fetch offset but not the fetcher's last epoch (Kafka before
        # KIP-101): a follower with another epoch's tail appends the leader's records after it
        if fetch_offset > self.end_offset or not self.is_boundary(fetch_offset):
            return self.last_epoch, self.end_offset
        return None
    return diverging


def _no_truncation_on_divergence(original):
    def on_fetch_response(self, response):
        # the bug: the follower ignores a diverging epoch (it never truncates, so never catches up)
        if response.diverging_epoch is not None:
            response = dataclasses.replace(response, diverging_epoch=None, high_watermark=-1)
        return original(self, response)
    return on_fetch_response


def _no_pre_vote(original):
    def to_prospective(self):
        # the bug: an election timeout goes straight to Candidate, bumping the epoch
        original(self)
        if self.role is Role.PROSPECTIVE:
            self._to_candidate()
    return to_prospective


def _no_check_quorum(original):
    # the bug: a leader never notices that no majority fetches from it any more
    return property(lambda self: 10 ** 12)


def _next_tick_forgets_check_quorum(original):
    def next_tick_ms(self):
        # the bug: the leader's check-quorum deadline is left out of the shell's wake-up time
        if self._leadership is not None:
            return self._now + self.config.request_timeout_ms
        return original(self)
    return next_tick_ms


def _write_before_timers(original):
    def propose(self, records, now_ms):
        # the bug: a proposal is taken before due timers fire, so a leader past its check-quorum
        # deadline (paused, or not ticked yet) still accepts it
        if self.role is Role.LEADER and records:
            self._now = max(self._now, now_ms)
            base = self.log.end_offset
            self._append(Batch(base, self.epoch, tuple(records)))
            self._leader_log_grew()
            return Accepted(self.epoch, base, self.log.end_offset - 1), self._end()
        return original(self, records, now_ms)
    return propose


def _two_voter_changes_at_once(original):
    def refuse(self):
        # the bug: a leader takes a voter change while another is uncommitted (two changes at once:
        # a majority of the newest set may miss every majority of the committed one)
        if self.role is Role.LEADER and self.high_watermark > self._leadership.epoch_start_offset:
            return None
        return original(self)
    return refuse


@dataclass(frozen=True)
class Break:
    what: str
    patch: tuple[type, str, Callable[[Any], Any]] | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    caught_by: str = "simulation"     # or a scenario of tests/quorum/scenarios.py


BREAKS = {
    "grant_two_votes_per_epoch": Break("a voter grants a second vote in one epoch",
                                       (RaftCore, "_can_grant_vote", _grant_two_votes_per_epoch)),
    "vote_for_stale_log": Break("votes ignore the candidate's log end",
                                (RaftCore, "_can_grant_vote", _vote_for_stale_log)),
    "hw_from_minority": Break("the leader's HW is its own log end",
                              (RaftCore, "_maybe_advance_high_watermark", _hw_from_minority)),
    "hw_before_own_epoch": Break("the HW commits older epochs' entries before one of the leader's own",
                                 (RaftCore, "_maybe_advance_high_watermark", _hw_before_own_epoch)),
    "observer_counts_toward_hw": Break("an observer's fetch counts toward the HW",
                                       (RaftCore, "_update_replica", _observer_counts_toward_hw)),
    "no_divergence_check": Break("the leader does not check the fetcher's last epoch",
                                 (QuorumLog, "diverging", _no_divergence_check)),
    "no_truncation_on_divergence": Break("a follower ignores a diverging epoch",
                                         (RaftCore, "_on_fetch_response", _no_truncation_on_divergence)),
    "send_before_persist": Break("the shell sends messages before persisting",
                                 options={"simulation": {"send_before_persist": True}}),
    "no_check_quorum": Break("a leader never resigns for want of fetches",
                             (QuorumConfig, "check_quorum_timeout_ms", _no_check_quorum)),
    "next_tick_forgets_check_quorum": Break("next_tick_ms leaves out the check-quorum deadline",
                                            (RaftCore, "next_tick_ms", _next_tick_forgets_check_quorum)),
    "write_before_timers": Break("a proposal is taken before due timers fire",
                                 (RaftCore, "propose", _write_before_timers)),
    "two_voter_changes_at_once": Break("a leader takes a voter change while another is uncommitted",
                                       (RaftCore, "_refuse_voter_change", _two_voter_changes_at_once),
                                       options={"simulation": {"voter_changes": 6, "check_voter_rules": False}}),
    "no_pre_vote": Break("an election timeout bumps the epoch without a pre-vote",
                         (RaftCore, "_to_prospective", _no_pre_vote), caught_by="returning_voter"),
}


@contextlib.contextmanager
def broken(rule: str | None) -> Iterator[dict[str, dict[str, Any]]]:
    """Plant one bug for the duration of the block (None: nothing is broken); yields the keyword
    options the Simulation needs for it (shell breaks)."""
    if rule is None:
        yield {}
        return
    planted = BREAKS[rule]
    if planted.patch is None:
        yield planted.options
        return
    cls, name, make = planted.patch
    original = cls.__dict__[name]
    setattr(cls, name, make(original))
    try:
        yield planted.options
    finally:
        setattr(cls, name, original)
