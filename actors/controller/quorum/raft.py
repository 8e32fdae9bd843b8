"""One node of the metadata quorum: KRaft's semantics (KIP-595, with KIP-996's pre-vote and check
quorum) as a pure state machine. No I/O, no clock, no Ray: the shell passes `now_ms` and a seeded
`random.Random`, delivers messages with `handle`, calls `tick` when time passes and `propose` to
write, and carries out each returned Output as output.py's contract says.

Roles (Kafka's EpochState classes):
  Unattached   no leader known in this epoch (perhaps voted); a voter becomes Prospective when its
               randomized election timeout (election.timeout.ms, jittered to [1x, 2x)) expires;
  Prospective  pre-vote (KIP-996): asks the voters whether they *would* vote for it in the next
               epoch, without bumping its own or theirs; a majority makes it a Candidate, a majority
               of refusals or the election timeout sends it back to Follower (leader known) or
               Unattached. So a node coming back from a partition cannot depose a healthy leader;
  Candidate    epoch + 1, votes for itself, asks for votes; a majority makes it Leader; refused by a
               majority it backs off (random, up to election.backoff.max.ms), then pre-votes again;
  Leader       writes a LeaderChange control batch at the start of its epoch, announces itself with
               BeginQuorumEpoch, answers fetches, advances the high watermark, and resigns when no
               majority of voters fetched within the last 1.5 x fetch.timeout.ms (check quorum);
  Follower     pulls from the leader (Fetch); no successful fetch for fetch.timeout.ms makes a
               voter Prospective;
  Resigned     a leader that gave up its epoch (check quorum, `resign`, or a restart of a leader):
               takes no writes, tells the voters with EndQuorumEpoch (most caught up first), and
               pre-votes after an election timeout.
Observers (ids not in the voter set) are only ever Unattached, Follower or (a leader removed from
the set) Resigned: they find the leader by fetching from any voter (or bootstrap voter), fetch from
it, and never count toward the high watermark or start an election.

Voter changes (KIP-853): the voter set is in the log. It is the set of the last VotersRecord in the
log, committed or not (a truncation that removes one brings the previous set back), else the
bootstrap set (config.voters). The leader takes one change at a time (`add_voter`,
`remove_voter`): only once it has committed an entry of its own epoch and no VotersRecord is
uncommitted (Raft's single-server changes: any majority of the old set meets any majority of the
new one), and it adds only an observer that fetched lately and has reached its high watermark.
A leader that removes itself keeps leading, without counting itself, until the removal commits,
then resigns. Votes, BeginQuorumEpoch and EndQuorumEpoch are taken from any node (a voter's log may
not hold the VotersRecord naming the sender yet); a candidate counts only the votes of its own set.

Votes (one per epoch, durable before it leaves) go only to a candidate whose log end (last epoch,
log end offset) is at least ours. A pre-vote needs the same, and is refused by a leader and by a
follower that has fetched successfully since it began following (a follower that never reached
its leader grants, else two followers of a dead leader could refuse each other forever).

Replication is pulled: a fetch carries (fetch_offset, last_fetched_epoch); the leader answers a
diverging epoch (where that epoch ends in its log) when the fetcher's log is not a prefix of its
own, else whole batches from fetch_offset and its high watermark, or holds the fetch up to its
max_wait_ms when there is nothing new. The high watermark is the largest offset a majority of
voters (the leader counts itself) has, once that covers the leader's own control batch (an entry
of its epoch); followers take min(leader's, their log end). It never goes back on a node within one
life, and a truncation below it is refused (QuorumStateError).

Where this differs from Kafka's raft module, on purpose:
* check quorum is a sliding window (fewer than a majority fetched within the last 1.5 x
  fetch.timeout.ms): Kafka's timer counts fetches since its last reset, so a leader cut off with a
  minority could take writes for up to twice that (the simulator's isolated_leader scenario saw
  315 ms against a 300 ms bound);
* responses repeat what they answer (VoteResponse.pre_vote, FetchResponse's fetch position)
  where Kafka relies on correlation ids, so a late, duplicated or pre-restart answer is ignored;
* a held fetch is also answered when the high watermark moves (and a fetch that moves it is not
  held), so followers apply commits without waiting out fetch_max_wait_ms;
* the leader counts its own log end at once: the shell persists `append` before anything leaves
  (output.py); Kafka counts the leader's flushed offset and flushes asynchronously;
* a Candidate refused by a majority backs off, then pre-votes again; a Prospective that led its
  epoch (Resigned, then timed out) goes back to Resigned, never to Unattached, so that no restart
  can make it lead that epoch again;
* voter ids only: directory ids and endpoints of KIP-853's voter keys are the shell's; no
  kraft.version feature (the log may hold a VotersRecord from its start), no snapshots
  (FetchSnapshot), no cluster id checks: the transport's job or a later step; a change is refused
  at once (REQUEST_TIMED_OUT) when it cannot start yet, where Kafka waits up to its timeout: the
  shell retries.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Sequence

from protocol.errors import ErrorCode

from .config import QuorumConfig
from .log import Batch, LeaderChange, LogError, QuorumLog, VotersRecord
from .messages import (
    NO_LEADER, BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest, EndQuorumEpochResponse,
    EpochEndOffset, FetchRequest, FetchResponse, Message, VoteRequest, VoteResponse,
)
from .output import (
    Accepted, ElectionState, LeaderAndEpoch, NotLeader, Output, QuorumStatus, Refused, ReplicaStatus,
)


class Role(Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


class QuorumStateError(RuntimeError):
    """A message contradicts what the quorum guarantees (two leaders in one epoch, a truncation
    below the high watermark, a malformed log from the leader): this node must stop, as Kafka's
    raft client does on IllegalStateException, rather than act on it."""


@dataclass
class _Nominee:
    """Prospective (pre_vote) or Candidate: the election in progress."""
    pre_vote: bool
    granted: set[int]
    rejected: set[int] = field(default_factory=set)
    sent_ms: dict[int, int] = field(default_factory=dict)
    backoff_until_ms: int | None = None   # a Candidate refused by a majority waits until then


@dataclass
class _Replica:
    """The leader's view of one follower or observer."""
    end_offset: int = -1
    last_fetch_ms: int | None = None
    last_caught_up_ms: int | None = None


@dataclass
class _Leadership:
    epoch_start_offset: int
    since_ms: int
    replicas: dict[int, _Replica]                 # the other voters
    begin_quorum_due_ms: int
    observers: dict[int, _Replica] = field(default_factory=dict)
    parked: dict[int, tuple[FetchRequest, int]] = field(default_factory=dict)  # replica -> (fetch, deadline)


@dataclass
class _Fetching:
    """A follower's (or observer's) side of Fetch."""
    fetch_deadline_ms: int
    has_fetched: bool = False                     # a successful fetch from the leader in this state
    in_flight: tuple[int, FetchRequest, int] | None = None   # (destination, request, sent ms)
    backoff_until_ms: int = 0


@dataclass
class _Resignation:
    successors: tuple[int, ...]
    unacked: set[int]
    sent_ms: dict[int, int] = field(default_factory=dict)


class RaftCore:
    def __init__(self, node_id: int, config: QuorumConfig, *, now_ms: int, rng: random.Random,
                 election: ElectionState | None = None, log: Sequence[Batch] = (), high_watermark: int = 0):
        """Start (or restart) from the persisted election state and durable log. `high_watermark`:
        an offset known committed and already applied by the shell (a snapshot's), else 0."""
        self.node_id = node_id
        self.config = config
        self.bootstrap_voters: tuple[int, ...] = tuple(sorted(config.voters))
        self._rng = rng
        self._leadership: _Leadership | None = None
        self.log = QuorumLog(log)
        self._voters_changed()
        if not (0 <= high_watermark <= self.log.end_offset and self.log.is_boundary(high_watermark)):
            raise ValueError(f"high watermark {high_watermark} is not a batch boundary of the log")
        self.high_watermark = high_watermark
        self._applied_offset = high_watermark
        election = election or ElectionState()
        self._persisted = election
        self._reported: LeaderAndEpoch | None = None
        self._now = now_ms
        self._out = Output()
        self._orphaned: list[FetchRequest] = []
        self._election_retries = 0
        self._election_deadline_ms: int | None = None
        self._nominee: _Nominee | None = None
        self._fetching: _Fetching | None = None
        self._resignation: _Resignation | None = None
        # (a leader, when this node last had a fetch answered by it): kept through elections, so a
        # new leader can say how long its predecessor has been silent
        self._leader_heard: tuple[int, int] | None = None
        self.epoch = election.epoch
        self.leader_id = election.leader_id
        self.voted_id = election.voted_id
        self.role = Role.UNATTACHED
        # Kafka's QuorumState.initialize: resume in the state the persisted election implies
        if self.epoch < self.log.last_epoch:
            self._to_unattached(self.log.last_epoch)
        elif self.leader_id == node_id:
            self._to_resigned(())   # never lead an epoch twice: its first leader's log of it is the only one
        elif self.voted_id == node_id and self.leader_id is None and self.is_voter:
            self._to_candidate(bump=False)
        elif self.leader_id is not None:
            self._to_follower(self.epoch, self.leader_id)
        else:
            self._to_unattached(self.epoch)

    # ---- the shell's calls -------------------------------------------------------------------------
    def handle(self, message: Message, now_ms: int) -> Output:
        self._begin(now_ms)
        name = _HANDLERS.get(type(message))
        if name is None:
            raise TypeError(f"not a quorum message: {message!r}")
        getattr(self, name)(message)
        return self._end()

    def tick(self, now_ms: int) -> Output:
        self._begin(now_ms)
        return self._end()

    def propose(self, records: Sequence[Any], now_ms: int) -> tuple[Accepted | NotLeader, Output]:
        """Append `records` as one batch if this node leads; committed once `committed` brings it."""
        if not records or len(records) > self.config.batch_max_records:
            raise ValueError(f"a proposal holds 1 to {self.config.batch_max_records} records, not {len(records)}")
        self._begin(now_ms)
        if self.role is not Role.LEADER:
            hint = None if self.leader_id == self.node_id else self.leader_id
            return NotLeader(hint, self.epoch), self._end()
        base = self.log.end_offset
        self._append(Batch(base, self.epoch, tuple(records)))
        self._leader_log_grew()
        return Accepted(self.epoch, base, self.log.end_offset - 1), self._end()

    def add_voter(self, voter_id: int, now_ms: int) -> tuple[Accepted | Refused, Output]:
        """KIP-853's AddVoter on the leader: append a VotersRecord with `voter_id` added (in force at
        once); done when `committed` brings the Accepted batch. `voter_id` must be an observer that
        fetched within fetch.timeout.ms and has reached the high watermark."""
        self._begin(now_ms)
        refused = self._refuse_voter_change()
        if refused is None and voter_id in self.voters:
            refused = ErrorCode.DUPLICATE_VOTER, f"node {voter_id} is a voter already"
        if refused is None:
            state = self._leadership.observers.get(voter_id)
            if (state is None or state.last_fetch_ms is None
                    or self._now - state.last_fetch_ms > self.config.fetch_timeout_ms):
                refused = (ErrorCode.REQUEST_TIMED_OUT, f"node {voter_id} has not fetched from the leader "
                           f"within {self.config.fetch_timeout_ms} ms: start it (as an observer) first")
            elif state.end_offset < self.high_watermark:
                refused = (ErrorCode.REQUEST_TIMED_OUT, f"node {voter_id} is catching up (at offset "
                           f"{state.end_offset}, high watermark {self.high_watermark}): try again")
        return self._voter_change(refused, tuple(sorted(self.voters + (voter_id,))))

    def remove_voter(self, voter_id: int, now_ms: int) -> tuple[Accepted | Refused, Output]:
        """KIP-853's RemoveVoter on the leader: append a VotersRecord without `voter_id` (in force at
        once). A leader that removes itself resigns once that commits."""
        self._begin(now_ms)
        refused = self._refuse_voter_change()
        if refused is None and voter_id not in self.voters:
            refused = ErrorCode.VOTER_NOT_FOUND, f"node {voter_id} is not a voter (voters: {list(self.voters)})"
        if refused is None and self.voters == (voter_id,):
            refused = ErrorCode.INVALID_REQUEST, f"node {voter_id} is the only voter: add another one first"
        return self._voter_change(refused, tuple(v for v in self.voters if v != voter_id))

    @property
    def voter_change_pending(self) -> bool:
        """A VotersRecord in the log is not committed yet."""
        return self.voters_offset >= self.high_watermark

    def _refuse_voter_change(self) -> tuple[ErrorCode, str] | None:
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} does not lead the quorum"
        if self.high_watermark <= self._leadership.epoch_start_offset:
            return (ErrorCode.REQUEST_TIMED_OUT, f"leader {self.node_id} has not committed an entry of its epoch "
                    f"{self.epoch} yet: try again")
        if self.voter_change_pending:
            return (ErrorCode.REQUEST_TIMED_OUT, f"the voter change at offset {self.voters_offset} is not "
                    f"committed yet (one change at a time): try again")
        return None

    def _voter_change(self, refused: tuple[ErrorCode, str] | None,
                      voters: tuple[int, ...]) -> tuple[Accepted | Refused, Output]:
        if refused is not None:
            hint = None if self.leader_id == self.node_id and self.role is not Role.LEADER else self.leader_id
            return Refused(refused[0], refused[1], hint, self.epoch), self._end()
        base = self.log.end_offset
        self._append(Batch(base, self.epoch, (VotersRecord(voters),), control=True))
        self._leader_log_grew()
        return Accepted(self.epoch, base, base), self._end()

    def resign(self, now_ms: int) -> Output:
        """A leader gives up its epoch on purpose (shutdown): EndQuorumEpoch to the voters."""
        self._begin(now_ms)
        if self.role is Role.LEADER:
            self._resign()
        return self._end()

    def status(self) -> QuorumStatus:
        voters: tuple[ReplicaStatus, ...] = ()
        observers: tuple[ReplicaStatus, ...] = ()
        lead = self._leadership
        if lead is not None:
            voters = tuple(
                ReplicaStatus(v, self.log.end_offset, self._now, self._now) if v == self.node_id else
                ReplicaStatus(v, lead.replicas[v].end_offset, lead.replicas[v].last_fetch_ms,
                              lead.replicas[v].last_caught_up_ms)
                for v in self.voters)
            observers = tuple(ReplicaStatus(o, r.end_offset, r.last_fetch_ms, r.last_caught_up_ms)
                              for o, r in sorted(lead.observers.items()))
        return QuorumStatus(self.node_id, self.role.value, self.epoch, self.leader_id, self.voted_id,
                            self.high_watermark, self.log.end_offset, voters, observers, self._leader_heard)

    def next_tick_ms(self) -> int:
        """The latest time by which the shell should call `tick` (it may call it more often)."""
        times = [self._now + self.config.request_timeout_ms]
        if self._election_deadline_ms is not None:
            times.append(self._election_deadline_ms)
        if self._nominee is not None and self._nominee.backoff_until_ms is not None:
            times.append(self._nominee.backoff_until_ms)
        fetching = self._fetching
        if fetching is not None:
            if fetching.fetch_deadline_ms > self._now:   # (an observer past it looks for the leader on the
                times.append(fetching.fetch_deadline_ms)  # in-flight fetch's timeout, not at once again)
            if fetching.backoff_until_ms > self._now:
                times.append(fetching.backoff_until_ms)
            if fetching.in_flight is not None:
                times.append(fetching.in_flight[2] + self.config.request_timeout_ms)
        if self._leadership is not None:
            lead = self._leadership
            times += [self._check_quorum_deadline_ms(), lead.begin_quorum_due_ms]
            times += [deadline for _, deadline in lead.parked.values()]
        return min(times)

    @property
    def election_state(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id)

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    @property
    def has_fetched_from_leader(self) -> bool:
        return self._fetching is not None and self._fetching.has_fetched

    # ---- one step: collect what the shell must do --------------------------------------------------
    def _begin(self, now_ms: int) -> None:
        """Time passes first: a leader past its check-quorum deadline refuses the write or fetch
        that finds it so, even if the shell has not ticked it yet."""
        if now_ms < self._now:
            raise ValueError(f"time went back from {self._now} to {now_ms}")
        self._now = now_ms
        self._poll_all()

    def _poll_all(self) -> None:
        for _ in range(16):   # a timer may fire a transition whose state has a due timer of its own
            if not self._poll():
                break

    def _end(self) -> Output:
        self._poll_all()
        while self._orphaned:  # fetches held by a leader that lost its epoch: answered as new ones would be
            orphans, self._orphaned = self._orphaned, []
            for request in orphans:
                self._on_fetch_request(request)
        out, self._out = self._out, Output()
        persisted = self._persisted
        if (persisted.epoch, persisted.leader_id, persisted.voted_id) != (self.epoch, self.leader_id, self.voted_id):
            out.persist_state = self._persisted = self.election_state
        if self.high_watermark > self._applied_offset:
            out.committed = self.log.batches_between(self._applied_offset, self.high_watermark)
            self._applied_offset = self.high_watermark
        reported = self._reported
        if reported is None or reported.leader_id != self.leader_id or reported.epoch != self.epoch:
            out.leader = self._reported = LeaderAndEpoch(self.leader_id, self.epoch)
        return out

    def _send(self, destination: int, message: Message) -> None:
        self._out.messages.append((destination, message))

    def _append(self, batch: Batch) -> None:
        self.log.append(batch)
        self._out.append.append(batch)
        if batch.control:
            self._voters_changed()

    def _voters_changed(self) -> None:
        """The log's voter set (its last VotersRecord, else the bootstrap set) is the one in force."""
        latest = self.log.latest_voters()
        self.voters_offset, self.voters = latest if latest is not None else (-1, self.bootstrap_voters)
        self.is_voter = self.node_id in self.voters
        self._majority = len(self.voters) // 2 + 1
        lead = self._leadership
        if lead is not None:
            for v in self.voters:
                if v != self.node_id and v not in lead.replicas:
                    lead.replicas[v] = lead.observers.pop(v, None) or _Replica()
            for r in [r for r in lead.replicas if r not in self.voters]:
                lead.observers[r] = lead.replicas.pop(r)

    def _truncate(self, offset: int) -> None:
        if offset >= self.log.end_offset:
            return
        if self._out.append:
            raise AssertionError("a truncation after an append in one step")  # never: one fetch answer is one or the other
        self.log.truncate_to(offset)
        self._voters_changed()
        out = self._out
        out.truncate_to = offset if out.truncate_to is None else min(out.truncate_to, offset)

    def _random_election_timeout_ms(self) -> int:
        if self.voters == (self.node_id,):
            # the only voter (a dedicated controller's): no one else can win an election, and no
            # one's vote is waited for; it runs one at once, as Kafka's KafkaRaftClient does
            return 0
        timeout = self.config.election_timeout_ms
        return timeout + self._rng.randrange(timeout)

    def _leader_hint(self) -> int:
        return NO_LEADER if self.leader_id is None else self.leader_id

    # ---- transitions ---------------------------------------------------------------------------------
    def _leave(self) -> None:
        if self._leadership is not None:
            self._orphaned.extend(request for request, _ in self._leadership.parked.values())
        self._leadership = self._nominee = self._fetching = self._resignation = None
        self._election_deadline_ms = None

    def _to_unattached(self, epoch: int) -> None:
        """A new epoch without a known leader, or (same epoch) a Prospective that gave up."""
        self._leave()
        if epoch > self.epoch:
            self.voted_id = None
        self.epoch, self.leader_id, self.role = epoch, None, Role.UNATTACHED
        if self.is_voter:
            self._election_deadline_ms = self._now + self._random_election_timeout_ms()
        else:
            self._fetching = _Fetching(fetch_deadline_ms=self._now)   # an observer looks for the leader

    def _to_voted(self, candidate: int) -> None:
        self._leave()
        self.leader_id, self.voted_id, self.role = None, candidate, Role.UNATTACHED
        if self.is_voter:
            # the candidate has at least our chance of winning: give it a whole election timeout
            self._election_deadline_ms = self._now + self._random_election_timeout_ms()
        else:
            self._fetching = _Fetching(fetch_deadline_ms=self._now)   # (a voter in the candidate's log)

    def _to_follower(self, epoch: int, leader_id: int) -> None:
        if leader_id == self.node_id:
            raise QuorumStateError(f"node {self.node_id} told to follow itself in epoch {epoch}")
        self._leave()
        if epoch > self.epoch:
            self.voted_id = None
        self.epoch, self.leader_id, self.role = epoch, leader_id, Role.FOLLOWER
        self._fetching = _Fetching(fetch_deadline_ms=self._now + self.config.fetch_timeout_ms)
        self._election_retries = 0

    def _to_prospective(self) -> None:
        self._leave()
        self.role = Role.PROSPECTIVE    # same epoch, leader and vote: nothing to persist
        self._nominee = _Nominee(pre_vote=True, granted={self.node_id})
        self._election_deadline_ms = self._now + self._random_election_timeout_ms()
        if len(self._nominee.granted) >= self._majority:
            self._to_candidate()

    def _to_candidate(self, bump: bool = True) -> None:
        self._leave()
        if bump:
            self.epoch += 1
        self.leader_id, self.voted_id, self.role = None, self.node_id, Role.CANDIDATE
        self._election_retries += 1
        self._nominee = _Nominee(pre_vote=False, granted={self.node_id})
        self._election_deadline_ms = self._now + self._random_election_timeout_ms()
        if len(self._nominee.granted) >= self._majority:
            self._to_leader()

    def _to_leader(self) -> None:
        granting = tuple(sorted(self._nominee.granted))
        self._leave()
        self.leader_id, self.role = self.node_id, Role.LEADER
        self._election_retries = 0
        start = self.log.end_offset
        self._leadership = _Leadership(
            epoch_start_offset=start,
            since_ms=self._now,
            replicas={v: _Replica() for v in self.voters if v != self.node_id},
            begin_quorum_due_ms=self._now)
        # the high watermark may only cover earlier epochs' entries once one of ours is committed
        self._append(Batch(start, self.epoch, (LeaderChange(self.node_id, self.voters, granting),), control=True))
        self._leader_log_grew()

    def _resign(self) -> None:
        lead = self._leadership
        successors = tuple(v for v, _ in sorted(lead.replicas.items(), key=lambda kv: (-kv[1].end_offset, kv[0])))
        self._to_resigned(successors)

    def _to_resigned(self, successors: tuple[int, ...], announce: bool = True) -> None:
        self._leave()
        self.role = Role.RESIGNED      # leader_id stays: this epoch was ours, no vote in it
        unacked = {v for v in self.voters if v != self.node_id} if announce else set()
        self._resignation = _Resignation(successors, unacked)
        self._election_deadline_ms = self._now + self._random_election_timeout_ms()

    def _prospective_gives_up(self) -> None:
        if self.leader_id == self.node_id:
            self._to_resigned((), announce=False)   # it led this epoch: never again, even after a restart
        elif self.leader_id is not None:
            self._to_follower(self.epoch, self.leader_id)
        else:
            self._to_unattached(self.epoch)

    def _maybe_transition(self, leader_id: int | None, epoch: int) -> None:
        """A request or response named (leader, epoch): follow it if it is news (Kafka's maybeTransition)."""
        if leader_id == self.node_id:
            if not (self.leader_id == self.node_id and epoch == self.epoch):
                raise QuorumStateError(f"node {self.node_id} named leader of epoch {epoch}, which it does not lead "
                                       f"(it is {self.role.value} in epoch {self.epoch})")
            return
        if (epoch == self.epoch and leader_id is not None and self.leader_id is not None
                and leader_id != self.leader_id):
            raise QuorumStateError(f"two leaders in epoch {epoch}: {self.leader_id} and {leader_id}")
        if epoch > self.epoch:
            if leader_id is not None:
                self._to_follower(epoch, leader_id)
            else:
                self._to_unattached(epoch)
        elif epoch == self.epoch and leader_id is not None and self.leader_id is None:
            self._to_follower(epoch, leader_id)

    # ---- timers and the requests they send ---------------------------------------------------------
    def _poll(self) -> bool:
        """Kafka's pollCurrentState: fire due timers, send due requests. True if the role changed."""
        now, role = self._now, self.role
        if role is Role.LEADER:
            lead = self._leadership
            if not self.is_voter and not self.voter_change_pending:
                self._resign()    # its own removal is committed: an observer from now on
                return True
            if now >= self._check_quorum_deadline_ms():
                self._resign()    # no majority fetched lately: we may be cut off, take no more writes
                return True
            for replica, (request, deadline) in list(lead.parked.items()):
                if now >= deadline:
                    del lead.parked[replica]
                    self._answer_fetch(request)
            if now >= lead.begin_quorum_due_ms:
                lead.begin_quorum_due_ms = now + self.config.fetch_timeout_ms // 2
                for v in self.voters:
                    if v != self.node_id:
                        self._send(v, BeginQuorumEpochRequest(self.node_id, self.epoch, self.node_id))
            return False
        if role is Role.RESIGNED:
            if not self.is_voter:
                # a leader removed from the voters: it looks for the next leader as observers do
                if self._fetching is None:
                    self._fetching = _Fetching(fetch_deadline_ms=now)
                self._send_fetch(discover=True)
            elif now >= self._election_deadline_ms:
                self._to_prospective()
                return True
            res = self._resignation
            for v in sorted(res.unacked):
                sent = res.sent_ms.get(v)
                if sent is None or now - sent >= self.config.request_timeout_ms:
                    res.sent_ms[v] = now
                    self._send(v, EndQuorumEpochRequest(self.node_id, self.epoch, self.node_id, res.successors))
            return False
        if role is Role.FOLLOWER:
            if now >= self._fetching.fetch_deadline_ms:
                if self.is_voter:
                    self._to_prospective()
                    return True
                # an observer asks any voter who leads now; cut off from its leader, it no longer
                # refuses pre-votes (a voter it lags behind, in a set its log does not hold yet,
                # may need its vote)
                self._fetching.has_fetched = False
                self._send_fetch(discover=True)
            else:
                self._send_fetch(discover=False)
            return False
        if role is Role.UNATTACHED:
            if not self.is_voter:
                self._send_fetch(discover=True)
            elif now >= self._election_deadline_ms:
                self._to_prospective()
                return True
            return False
        nominee = self._nominee
        if role is Role.CANDIDATE:
            if now >= self._election_deadline_ms or (nominee.backoff_until_ms is not None
                                                      and now >= nominee.backoff_until_ms):
                self._to_prospective()
                return True
            if nominee.backoff_until_ms is None:
                self._send_votes()
            return False
        # Prospective
        if now >= self._election_deadline_ms or self._vote_rejected(nominee):
            self._prospective_gives_up()
            return True
        self._send_votes()
        return False

    def _check_quorum_deadline_ms(self) -> int:
        """Check quorum as a sliding window: the leader resigns once fewer than a majority of voters
        (itself included) fetched within the last check_quorum_timeout_ms (1.5 x fetch.timeout.ms;
        becoming leader counts as a fetch from all). Kafka's timer counts fetches since its last
        reset, so a majority completed by one fetch after a cut can keep a leader cut off with a
        minority for up to twice that; the window bounds it at once."""
        if self.voters == (self.node_id,):
            return 1 << 62
        lead = self._leadership
        recent = sorted((r.last_fetch_ms for r in lead.replicas.values() if r.last_fetch_ms is not None), reverse=True)
        needed = self._majority - (1 if self.is_voter else 0)   # a leader removing itself does not count
        newest_majority_ms = recent[needed - 1] if len(recent) >= needed else lead.since_ms
        return max(newest_majority_ms, lead.since_ms) + self.config.check_quorum_timeout_ms

    def _vote_rejected(self, nominee: _Nominee) -> bool:
        """No majority is possible any more."""
        return len(nominee.rejected) > len(self.voters) - self._majority

    def _send_votes(self) -> None:
        nominee, now = self._nominee, self._now
        request = VoteRequest(self.node_id, self.epoch, self.log.last_epoch, self.log.end_offset, nominee.pre_vote)
        for v in self.voters:
            if v == self.node_id or v in nominee.granted or v in nominee.rejected:
                continue
            sent = nominee.sent_ms.get(v)
            if sent is None or now - sent >= self.config.request_timeout_ms:
                nominee.sent_ms[v] = now
                self._send(v, request)

    def _send_fetch(self, discover: bool) -> None:
        fetching, now = self._fetching, self._now
        if fetching.in_flight is not None and now - fetching.in_flight[2] < self.config.request_timeout_ms:
            return
        if now < fetching.backoff_until_ms:
            return
        if discover or self.leader_id is None:
            others = sorted(v for v in set(self.voters) | set(self.bootstrap_voters) if v != self.node_id)
            if not others:
                return
            destination = self._rng.choice(others)
        else:
            destination = self.leader_id
        request = FetchRequest(self.node_id, self.epoch, self.log.end_offset, self.log.last_epoch,
                               self.config.fetch_max_wait_ms)
        fetching.in_flight = (destination, request, now)
        self._send(destination, request)

    def _election_backoff_ms(self) -> int:
        """A refused Candidate waits a random, exponentially growing while (Kafka's
        binaryExponentialElectionBackoffMs), so that two of them stop splitting the vote."""
        cap = self.config.election_backoff_max_ms
        grow = min(cap, self.config.retry_backoff_ms << min(20, max(0, self._election_retries - 1)))
        return self._rng.randint(0, max(grow, 1))

    def _end_epoch_backoff_ms(self, successors: tuple[int, ...]) -> int:
        """After EndQuorumEpoch: the first preferred successor starts at once, the others later
        (Kafka's strictExponentialElectionBackoffMs)."""
        cap = self.config.election_backoff_max_ms
        if not successors:
            return 0      # a leader that restarted names none: anyone may start at once (as Kafka)
        if self.node_id not in successors:
            return cap
        position = successors.index(self.node_id)
        if position == 0:
            return 0
        return min(cap, (cap >> (len(successors) - 1)) << (position - 1))

    # ---- Vote -------------------------------------------------------------------------------------
    def _on_vote_request(self, request: VoteRequest) -> None:
        def answer(error: ErrorCode, granted: bool = False) -> None:
            # a granted pre-vote names no leader, so that the prospective does not follow it
            leader = NO_LEADER if (granted and request.pre_vote) else self._leader_hint()
            self._send(request.src, VoteResponse(self.node_id, error, self.epoch, leader, granted, request.pre_vote))

        if request.src == self.node_id:   # (any other node: our log may not name it a voter yet)
            return answer(ErrorCode.INVALID_REQUEST)
        illegal_epoch = (request.last_epoch > request.epoch if request.pre_vote
                         else request.last_epoch >= request.epoch)
        if request.last_offset < 0 or request.last_epoch < 0 or illegal_epoch:
            return answer(ErrorCode.INVALID_REQUEST)
        if request.epoch < self.epoch:
            return answer(ErrorCode.FENCED_LEADER_EPOCH)
        if request.epoch > self.epoch:
            self._to_unattached(request.epoch)
        up_to_date = (request.last_epoch, request.last_offset) >= (self.log.last_epoch, self.log.end_offset)
        granted = self._can_grant_vote(request.src, up_to_date, request.pre_vote)
        if granted and not request.pre_vote and self.voted_id is None:
            self._to_voted(request.src)
        answer(ErrorCode.NONE, granted)

    def _can_grant_vote(self, candidate: int, up_to_date: bool, pre_vote: bool) -> bool:
        role = self.role
        if pre_vote:
            if role is Role.LEADER:
                return False
            if role is Role.FOLLOWER:
                return up_to_date and not self._fetching.has_fetched
            return up_to_date
        if role is Role.UNATTACHED or role is Role.PROSPECTIVE:
            if self.voted_id is not None:
                return self.voted_id == candidate
            if self.leader_id is not None:
                return False
            return up_to_date
        return False

    def _on_vote_response(self, response: VoteResponse) -> None:
        if self._common_response(response.error, response.epoch, response.leader_id) or response.error:
            return
        nominee = self._nominee
        if nominee is None or response.pre_vote != nominee.pre_vote or response.src not in self.voters:
            return    # an answer to another round (a pre-vote before a restart, a vote of an older role)
        if response.vote_granted:
            nominee.rejected.discard(response.src)
            nominee.granted.add(response.src)
            if len(nominee.granted) >= self._majority:
                if self.role is Role.PROSPECTIVE:
                    self._to_candidate()
                else:
                    self._to_leader()
        elif response.src not in nominee.granted:
            nominee.rejected.add(response.src)
            if self.role is Role.CANDIDATE and self._vote_rejected(nominee) and nominee.backoff_until_ms is None:
                nominee.backoff_until_ms = self._now + self._election_backoff_ms()

    def _common_response(self, error: ErrorCode, epoch: int, leader_id: int) -> bool:
        """Kafka's maybeHandleCommonResponse: True when the response was about epochs only (stale,
        or news of a newer epoch or leader) and its handler has nothing more to do."""
        leader = None if leader_id == NO_LEADER else leader_id
        if epoch < self.epoch or error == ErrorCode.UNKNOWN_LEADER_EPOCH:
            return True
        if epoch > self.epoch or error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER):
            self._maybe_transition(leader, epoch)
            return True
        if leader is not None and self.leader_id is None:
            self._maybe_transition(leader, epoch)
            return error != ErrorCode.NONE
        return error == ErrorCode.INVALID_REQUEST

    # ---- BeginQuorumEpoch / EndQuorumEpoch ------------------------------------------------------------
    def _on_begin_quorum_epoch(self, request: BeginQuorumEpochRequest) -> None:
        if request.leader_id != request.src or request.src == self.node_id:
            error = ErrorCode.INVALID_REQUEST
        elif request.epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        else:
            self._maybe_transition(request.leader_id, request.epoch)
            error = ErrorCode.NONE
        self._send(request.src, BeginQuorumEpochResponse(self.node_id, error, self.epoch, self._leader_hint()))

    def _on_begin_quorum_epoch_response(self, response: BeginQuorumEpochResponse) -> None:
        self._common_response(response.error, response.epoch, response.leader_id)

    def _on_end_quorum_epoch(self, request: EndQuorumEpochRequest) -> None:
        if request.leader_id != request.src or request.src == self.node_id:
            error = ErrorCode.INVALID_REQUEST
        elif request.epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        else:
            self._maybe_transition(request.leader_id, request.epoch)
            if self.role is Role.FOLLOWER and self.leader_id == request.leader_id:
                self._fetching.fetch_deadline_ms = self._now + self._end_epoch_backoff_ms(request.preferred_successors)
            error = ErrorCode.NONE
        self._send(request.src, EndQuorumEpochResponse(self.node_id, error, self.epoch, self._leader_hint()))

    def _on_end_quorum_epoch_response(self, response: EndQuorumEpochResponse) -> None:
        if self._common_response(response.error, response.epoch, response.leader_id) or response.error:
            return
        if self.role is Role.RESIGNED:
            self._resignation.unacked.discard(response.src)

    # ---- Fetch: the leader's side --------------------------------------------------------------------
    def _on_fetch_request(self, request: FetchRequest) -> None:
        if (request.src == self.node_id or request.fetch_offset < 0 or request.last_fetched_epoch < 0
                or request.last_fetched_epoch > request.epoch or request.max_wait_ms < 0):
            return self._fetch_error(request, ErrorCode.INVALID_REQUEST)
        if request.epoch < self.epoch:
            return self._fetch_error(request, ErrorCode.FENCED_LEADER_EPOCH)
        if request.epoch > self.epoch:
            return self._fetch_error(request, ErrorCode.UNKNOWN_LEADER_EPOCH)
        if self.role is not Role.LEADER:
            return self._fetch_error(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        diverging = self.log.diverging(request.fetch_offset, request.last_fetched_epoch)
        if diverging is not None:
            return self._send(request.src, FetchResponse(
                self.node_id, ErrorCode.NONE, self.epoch, self.node_id, self.high_watermark, (),
                EpochEndOffset(*diverging), request.fetch_offset, request.last_fetched_epoch))
        lead = self._leadership
        lead.parked.pop(request.src, None)   # its older fetch gave up waiting
        high_watermark = self.high_watermark
        self._update_replica(request.src, request.fetch_offset)
        # hold it if there is nothing to send: no records, and no new high watermark that this
        # very fetch made (the others held were woken with it)
        if (request.fetch_offset == self.log.end_offset and self.high_watermark == high_watermark
                and request.max_wait_ms > 0 and len(lead.parked) < self.config.parked_fetches_max):
            lead.parked[request.src] = (request, self._now + request.max_wait_ms)
            return
        self._answer_fetch(request)

    def _fetch_error(self, request: FetchRequest, error: ErrorCode) -> None:
        self._send(request.src, FetchResponse(self.node_id, error, self.epoch, self._leader_hint(), -1, (), None,
                                              request.fetch_offset, request.last_fetched_epoch))

    def _answer_fetch(self, request: FetchRequest) -> None:
        records = self.log.read(request.fetch_offset, self.config.fetch_max_records)
        self._send(request.src, FetchResponse(self.node_id, ErrorCode.NONE, self.epoch, self.node_id,
                                              self.high_watermark, records, None, request.fetch_offset,
                                              request.last_fetched_epoch))

    def _update_replica(self, replica_id: int, fetch_offset: int) -> None:
        lead, now = self._leadership, self._now
        if replica_id in lead.replicas:
            state = lead.replicas[replica_id]
        else:
            state = lead.observers.get(replica_id)
            if state is None:
                if len(lead.observers) >= self.config.observers_max:   # forget the longest silent one
                    del lead.observers[min(lead.observers, key=lambda o: lead.observers[o].last_fetch_ms or 0)]
                state = lead.observers[replica_id] = _Replica()
        state.end_offset, state.last_fetch_ms = fetch_offset, now
        if fetch_offset >= self.log.end_offset:
            state.last_caught_up_ms = now
        if replica_id in lead.replicas:
            self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> None:
        """The largest offset a majority of voters holds, once it covers our epoch's first batch."""
        lead = self._leadership
        own = [self.log.end_offset] if self.is_voter else []   # a leader removing itself does not count
        ends = sorted(own + [r.end_offset for r in lead.replicas.values()], reverse=True)
        offset = ends[self._majority - 1]
        if offset > lead.epoch_start_offset and offset > self.high_watermark:
            self.high_watermark = offset
            self._wake_parked()

    def _leader_log_grew(self) -> None:
        self._maybe_advance_high_watermark()
        self._wake_parked()

    def _wake_parked(self) -> None:
        """Answer held fetches: there are new records, or a new high watermark to pass on."""
        lead = self._leadership
        if lead.parked:
            parked, lead.parked = lead.parked, {}
            for request, _ in parked.values():
                self._answer_fetch(request)

    # ---- Fetch: the follower's side ------------------------------------------------------------------
    def _on_fetch_response(self, response: FetchResponse) -> None:
        fetching = self._fetching
        if fetching is not None and fetching.in_flight is not None:
            destination, request, _ = fetching.in_flight
            if (destination == response.src and request.fetch_offset == response.fetch_offset
                    and request.last_fetched_epoch == response.last_fetched_epoch):
                fetching.in_flight = None
        if self._common_response(response.error, response.epoch, response.leader_id):
            if response.error and self._fetching is fetching and fetching is not None:
                fetching.backoff_until_ms = self._now + self.config.retry_backoff_ms
            return
        if self.role is not Role.FOLLOWER or response.src != self.leader_id:
            return
        fetching = self._fetching
        if response.error:
            fetching.backoff_until_ms = self._now + self.config.retry_backoff_ms
            return
        if response.fetch_offset != self.log.end_offset or response.last_fetched_epoch != self.log.last_epoch:
            return   # an answer for another log end (late or duplicated): its records would not fit
        if response.diverging_epoch is not None:
            offset = self.log.truncation_offset(response.diverging_epoch.epoch, response.diverging_epoch.end_offset)
            if offset < self.high_watermark:
                raise QuorumStateError(f"leader {response.src} asks node {self.node_id} to truncate to {offset}, "
                                       f"below its high watermark {self.high_watermark}")
            self._truncate(offset)
        else:
            for batch in response.records:
                if batch.epoch > response.epoch:
                    raise QuorumStateError(f"leader {response.src} of epoch {response.epoch} sent a batch of "
                                           f"epoch {batch.epoch}")
                try:
                    self._append(batch)
                except LogError as misfit:
                    raise QuorumStateError(f"leader {response.src} sent a batch that does not fit: {misfit}") from misfit
            if response.high_watermark >= 0:
                offset = min(self.log.end_offset, response.high_watermark)
                if offset > self.high_watermark:
                    if not self.log.is_boundary(offset):
                        raise QuorumStateError(f"high watermark {offset} from {response.src} cuts a batch")
                    self.high_watermark = offset
        fetching.has_fetched = True
        fetching.fetch_deadline_ms = self._now + self.config.fetch_timeout_ms
        self._leader_heard = (response.src, self._now)


# by name, so that a test may patch one handler (tests/quorum/breaks.py)
_HANDLERS = {
    VoteRequest: "_on_vote_request",
    VoteResponse: "_on_vote_response",
    BeginQuorumEpochRequest: "_on_begin_quorum_epoch",
    BeginQuorumEpochResponse: "_on_begin_quorum_epoch_response",
    EndQuorumEpochRequest: "_on_end_quorum_epoch",
    EndQuorumEpochResponse: "_on_end_quorum_epoch_response",
    FetchRequest: "_on_fetch_request",
    FetchResponse: "_on_fetch_response",
}
