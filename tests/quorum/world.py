"""A deterministic simulation of the metadata quorum (actors/controller/quorum): 3 or 5 voters and
one observer, each a RaftCore behind a small shell that carries out its Outputs, all stepped by
one seeded scheduler.

The world: messages take 1..max_delay_ms (a few take up to 3 fetch timeouts: stale messages), so
they are reordered; the scheduler may drop or duplicate any message in flight; links can be cut
(one-way or both ways: a node isolated, the leader isolated, the leader cut inbound or outbound
only, a minority/majority split) and healed; nodes crash (their core and everything in memory is
gone) and restart from what their shell persisted: the last election state and the durable log;
they also pause (a stalled process: nothing reaches it, its timers do not run) and resume.
Voter changes (KIP-853): on some seeds a node (the leader, mostly) is asked to add a non-voter or
remove a voter, at random, among the faults; the voter set is what each node's log says.
A shell may also crash in the middle of carrying out an Output (before anything, after the
election state, after the truncation, in the middle of the append or after it, after sending), so
a write it had not made yet is lost. There is no clock skew, but every core draws its own election timeouts from its
own seeded Random. Each seed first draws its own mix of actions (swarm testing), as tests/sim does,
and whether its shells tick every core whenever time moves or only once the core's next_tick_ms()
has come (as a real shell would: a timer it reports late shows up as a check-quorum or liveness
failure).

Invariants, checked after every step (`check` and the shell's own checks):
  I1 election safety: at most one leader per epoch; no voter persists two different votes (or
     leaders) in one epoch, and no two granted votes of one voter in one epoch leave it;
  I2 log matching: two logs holding a batch with the same base offset and epoch hold the same
     batches up to it (every durable batch's prefix hash is checked against the first seen);
  I3 leader completeness: every committed batch is in the log of every leader of its epoch or later;
  I4 state machine safety: what any node applies (`committed`) at an offset is what every other
     node applies there, and the committed log never changes;
  I5 durability: every committed batch is on the durable logs of a majority of the voter set the
     committed log names last (its last VotersRecord, else the bootstrap voters), or of a set one
     change away from it (a leader's uncommitted set, perhaps lost since: see _check_durability),
     across crashes, restarts, truncations and voter changes;
  I6 per node life: HW never moves back, HW <= log end, the durable log and election state equal
     the core's after each Output, `committed` is contiguous;
  I7 check quorum: 1.5 x fetch.timeout.ms after the later of (its start as leader, the time by
     which Fetches from a majority of its voters, itself included if it is one, had last reached
     it) a node neither leads nor takes a write: a leader cut off alone or with a minority, or
     paused, stops;
  I8 voter changes: a leader takes a change only with no other uncommitted and after committing
     an entry of its epoch; a leader whose removal is committed leads no more.
Liveness, at the end of a run (`settle`): the network heals, every node restarts, faults stop; a
leader followed by every voter must exist and a proposal must commit on every node (observer
included) within SETTLE_BOUND_MS. tests/quorum/scenarios.py adds the targeted liveness checks
(a voter back from a partition does not depose a healthy leader; an isolated leader stops taking
writes and the majority elects another).
"""
from __future__ import annotations

import bisect
import collections
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from actors.controller.quorum import (
    CHECK_QUORUM_TIMEOUT_FACTOR, Accepted, Batch, ElectionState, EndQuorumEpochRequest, FetchRequest, FetchResponse,
    LogError, QuorumConfig, QuorumStateError, RaftCore, Role, VoteResponse, VotersRecord,
)
from actors.controller.quorum.output import Output

# controller.quorum.* scaled down 10x (Kafka's ratios kept), so that a run of 2,000 steps sees
# many elections
SIM_TIMING = dict(election_timeout_ms=100, fetch_timeout_ms=200, election_backoff_max_ms=100,
                  request_timeout_ms=200, retry_backoff_ms=5, fetch_max_wait_ms=50, fetch_max_records=6)
OBSERVER = 10
ADVANCE_MS_MAX = 10           # the clock moves 1..this per advance, then running nodes are ticked (see lazy_ticks)
SETTLE_STEP_MS = 5
SETTLE_BOUND_MS = 5000        # 25 fetch timeouts: see settle()
TIMELINE_STEPS = 80

ACTIONS = ("deliver", "advance", "propose", "drop", "duplicate", "partition", "heal", "crash", "restart",
           "pause", "resume", "resign", "change_voters")
WEIGHT_CHOICES = {
    "deliver": (50, 60, 70), "advance": (10, 15, 25), "propose": (4, 8, 15), "drop": (0, 0.5, 2),
    "duplicate": (0, 0.5, 2), "partition": (0, 0.5, 1.5), "heal": (0.5, 1, 2), "crash": (0, 0.3, 1),
    "restart": (0.5, 1, 3), "pause": (0, 0.3, 1), "resume": (0.5, 1, 3), "resign": (0, 0.1),
}
# voter changes are drawn from a Random of their own (VOTER_CHANGE_CHOICES), so that seeds drawing
# none replay as before this action existed
VOTER_CHANGE_CHOICES = (0, 0, 0.5, 1.5)
CALM = {"deliver": 60, "advance": 15, "propose": 8}
MAX_DELAY_CHOICES = (1, 3, 8)
LONG_DELAY_CHOICES = (0, 0.01, 0.04)
CRASH_MID_WRITE_CHOICES = (0, 0.005, 0.02)
PARTITION_KINDS = ("isolate", "isolate_leader", "split", "one_way", "leader_outbound", "leader_inbound")
STAGES = ("persist_state", "truncate", "append", "messages", "committed")


class InvariantViolation(AssertionError):
    pass


class LivenessViolation(InvariantViolation):
    pass


def chain_hash(previous: int, batch: Batch) -> int:
    return hash((previous, batch.base_offset, batch.epoch, batch.records))


@dataclass
class Node:
    node_id: int
    voter: bool
    election: ElectionState = field(default_factory=ElectionState)   # durable
    log: list[Batch] = field(default_factory=list)                    # durable
    chain: list[int] = field(default_factory=list)                    # prefix hash of log[:i+1]
    core: RaftCore | None = None
    paused: bool = False            # a stalled process: it neither receives nor ticks (messages to it wait)
    life: int = 0
    hw: int = 0                     # I6: the highest HW seen in this life
    applied_next: int = 0           # I6: the offset the next `committed` batch must start at
    leading: tuple[int, int] = (-1, -1)   # (epoch, since ms) of its current leadership, for I7
    voter_fetch_ms: dict[int, int] = field(default_factory=dict)   # I7: voter -> when its last Fetch reached it

    @property
    def up(self) -> bool:
        return self.core is not None

    @property
    def running(self) -> bool:
        return self.core is not None and not self.paused

    @property
    def bases(self) -> list[int]:
        return [b.base_offset for b in self.log]


class Simulation:
    def __init__(self, seed: int, *, verbose: bool = False, voters: int | None = None,
                 weights: dict[str, float] | None = None, send_before_persist: bool = False,
                 voter_changes: float | None = None, check_voter_rules: bool = True):
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.verbose = verbose
        n = voters or rng.choice((3, 3, 5))
        self.voter_ids = tuple(range(1, n + 1))
        self.majority = n // 2 + 1
        self.config = QuorumConfig(voters=self.voter_ids, **SIM_TIMING)
        self.weights = weights or {a: rng.choice(WEIGHT_CHOICES[a]) for a in ACTIONS if a in WEIGHT_CHOICES}
        if weights is None or voter_changes is not None:
            self.weights["change_voters"] = (voter_changes if voter_changes is not None else
                                             random.Random(f"voters-{seed}").choice(VOTER_CHANGE_CHOICES))
        self.actions = [a for a in ACTIONS if self.weights.get(a)]
        self.thresholds = list(itertools.accumulate(self.weights[a] for a in self.actions))
        self.max_delay_ms = rng.choice(MAX_DELAY_CHOICES)
        self.long_delay_share = rng.choice(LONG_DELAY_CHOICES) if weights is None else 0
        self.crash_mid_write = rng.choice(CRASH_MID_WRITE_CHOICES) if weights is None else 0
        # a lazy shell ticks a core only once its next_tick_ms() has come, as a real one would
        self.lazy_ticks = weights is None and rng.random() < 0.5
        # the shell's order (a break sends before persisting: tests/quorum/breaks.py)
        self.stages = STAGES if not send_before_persist else ("messages",) + tuple(s for s in STAGES if s != "messages")
        self.now_ms = 0
        self.step_no = 0
        self.nodes = {i: Node(i, True) for i in self.voter_ids}
        self.nodes[OBSERVER] = Node(OBSERVER, False)
        self.node_list = tuple(self.nodes.values())
        self.blocked: set[tuple[int, int]] = set()
        self.network: list[tuple[int, int, int, int, Any]] = []   # (deliver at ms, seq, src, dst, message)
        self._seq = itertools.count()
        self.timeline: collections.deque = collections.deque(maxlen=TIMELINE_STEPS)
        self.stats: collections.Counter = collections.Counter()
        self.next_write = 1
        # invariant state
        self.leader_of_epoch: dict[int, int] = {}
        self.votes: dict[tuple[int, int], int] = {}          # (voter, epoch) -> candidate granted
        self.canonical: dict[tuple[int, int], int] = {}      # (base offset, epoch) -> prefix hash (I2)
        self.committed: list[Batch] = []                     # the committed log (I4)
        self.committed_chain: list[int] = []
        self.committed_bases: list[int] = []
        self.committed_end = 0
        self.committed_voters = self.voter_ids               # I5: the voters the committed log names last
        self.check_voter_rules = check_voter_rules           # I8 (off: the other invariants must see a break)
        self.proposed: dict[tuple[int, int], tuple] = {}      # (epoch, base offset) -> records of an Accepted
        self._durability_due = False
        self.settle_ms: int | None = None
        self.replay: str | None = None     # how to replay a failure, if not as a random run (scenarios)
        self.log(f"{n} voters {self.voter_ids} + observer {OBSERVER}; max delay {self.max_delay_ms} ms, long "
                 f"{self.long_delay_share}, crash mid-write {self.crash_mid_write}, lazy ticks {self.lazy_ticks}; mix: "
                 + ", ".join(f"{a} {w}" for a, w in self.weights.items()))
        for node in self.node_list:
            self.start(node)

    # ---- plumbing ---------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        line = f"[{self.step_no:5d} t={self.now_ms:6d}] {text}"
        self.timeline.append(line)
        if self.verbose:
            print(line)

    def fail(self, what: str, kind: type[InvariantViolation] = InvariantViolation) -> None:
        replay = self.replay or f"python -m tests.quorum --seed {self.seed} --steps {self.step_no} -v"
        raise kind(
            f"seed {self.seed}, step {self.step_no}: {what}\n"
            f"replay: {replay}\n"
            + "nodes: " + "; ".join(self.describe(n) for n in self.node_list) + "\n"
            "last steps:\n" + "\n".join(self.timeline))

    def describe(self, node: Node) -> str:
        if not node.up:
            return f"{node.node_id} down (log end {node.log[-1].next_offset if node.log else 0})"
        c = node.core
        return (f"{node.node_id} {c.role.value} e{c.epoch} leader {c.leader_id} voted {c.voted_id} "
                f"hw {c.high_watermark} end {c.log_end_offset}")

    def send(self, src: int, dst: int, message: Any) -> None:
        if self.long_delay_share and self.rng.random() < self.long_delay_share:
            delay = self.rng.randint(1, 3 * self.config.fetch_timeout_ms)
        else:
            delay = self.rng.randint(1, self.max_delay_ms)
        self.network.append((self.now_ms + delay, next(self._seq), src, dst, message))

    def start(self, node: Node) -> None:
        """A node (re)starts from what its shell persisted."""
        node.life += 1
        node.core = RaftCore(node.node_id, self.config, now_ms=self.now_ms, rng=random.Random(self.rng.getrandbits(32)),
                             election=node.election, log=node.log)
        node.hw = node.applied_next = 0
        node.leading = (-1, -1)
        node.voter_fetch_ms = {}
        self.observe(node)

    def crash(self, node: Node, why: str = "") -> None:
        node.core = None
        self.stats["crashes"] += 1
        self.log(f"CRASH {node.node_id}{why} (durable: e{node.election.epoch} leader {node.election.leader_id} "
                 f"voted {node.election.voted_id}, log end {node.log[-1].next_offset if node.log else 0})")

    # ---- the shell: carry out one Output ----------------------------------------------------------
    def carry_out(self, node: Node, out: Output) -> None:
        if self.committed_end < node.core.high_watermark:
            self.learn_committed(node)
        if not (out.messages or out.append or out.committed or out.persist_state or out.truncate_to is not None):
            return self.observe(node)
        crash_at = None
        if self.crash_mid_write and self.rng.random() < self.crash_mid_write:
            crash_at = self.rng.randrange(len(self.stages))
        for i, stage in enumerate(self.stages):
            if i == crash_at:
                self.stats["crashes_mid_write"] += 1
                if stage == "append" and len(out.append) > 1 and self.rng.random() < 0.5:
                    # torn: the first batches made it to disk (a torn frame is dropped on replay)
                    kept = self.rng.randrange(1, len(out.append))
                    self._append(node, Output(append=out.append[:kept]))
                    self.stats["torn_appends"] += 1
                    stage = f"append (wrote {kept} of {len(out.append)} batches)"
                self.crash(node, f" mid-write, before {stage}")
                return
            getattr(self, "_" + stage)(node, out)
        self.observe(node)

    def _persist_state(self, node: Node, out: Output) -> None:
        new = out.persist_state
        if new is None:
            return
        old = node.election
        if new.epoch < old.epoch:
            self.fail(f"I1: node {node.node_id} persisted epoch {new.epoch} after {old.epoch}")
        if new.epoch == old.epoch:
            if old.voted_id is not None and new.voted_id != old.voted_id:
                self.fail(f"I1: node {node.node_id} changed its vote in epoch {new.epoch}: {old.voted_id} -> "
                          f"{new.voted_id}")
            if old.leader_id is not None and new.leader_id != old.leader_id:
                self.fail(f"I1: node {node.node_id} changed the leader of epoch {new.epoch}: {old.leader_id} -> "
                          f"{new.leader_id}")
        node.election = new

    def _truncate(self, node: Node, out: Output) -> None:
        offset = out.truncate_to
        if offset is None:
            return
        i = bisect.bisect_left(node.bases, offset)
        self.log(f"node {node.node_id}: truncate {node.log[-1].next_offset if node.log else 0} -> {offset}")
        del node.log[i:]
        del node.chain[i:]
        self.stats["truncations"] += 1
        self._durability_due = True

    def _append(self, node: Node, out: Output) -> None:
        for batch in out.append:
            end = node.log[-1].next_offset if node.log else 0
            if batch.base_offset != end:
                self.fail(f"I6: node {node.node_id} asked to append at {batch.base_offset}, its log ends at {end}")
            h = chain_hash(node.chain[-1] if node.chain else 0, batch)
            known = self.canonical.setdefault((batch.base_offset, batch.epoch), h)
            if known != h:
                self.fail(f"I2: node {node.node_id} holds a batch at {batch.base_offset} of epoch {batch.epoch} "
                          f"whose log up to it differs from another node's ({batch.records})")
            node.log.append(batch)
            node.chain.append(h)
        self.stats["appended"] += len(out.append)

    def _messages(self, node: Node, out: Output) -> None:
        stats = self.stats
        for dst, message in out.messages:
            kind = type(message)
            if kind is VoteResponse:
                if message.vote_granted and not message.pre_vote:
                    granted = self.votes.setdefault((node.node_id, message.epoch), dst)
                    if granted != dst:
                        self.fail(f"I1: voter {node.node_id} granted its vote in epoch {message.epoch} to {granted} "
                                  f"and to {dst}")
                stats[("pre_vote_" if message.pre_vote else "vote_")
                      + ("granted" if message.vote_granted else "refused")] += 1
            elif kind is FetchResponse:
                if message.error:
                    stats["fetch_" + message.error.name] += 1
                elif message.diverging_epoch is not None:
                    stats["diverging_epochs"] += 1
                elif dst == OBSERVER:
                    stats["observer_fetches"] += 1
            elif kind is EndQuorumEpochRequest:
                stats["end_quorum_epoch"] += 1
            self.send(node.node_id, dst, message)
        stats["messages"] += len(out.messages)

    def _committed(self, node: Node, out: Output) -> None:
        for batch in out.committed:
            if batch.base_offset != node.applied_next:
                self.fail(f"I6: node {node.node_id} applied a batch at {batch.base_offset}, expected "
                          f"{node.applied_next}")
            i = bisect.bisect_left(self.committed_bases, batch.base_offset)
            if i == len(self.committed) or self.committed[i] != batch:
                self.fail(f"I4: node {node.node_id} applied {batch} but "
                          f"{self.committed[i] if i < len(self.committed) else 'nothing'} was committed there")
            node.applied_next = batch.next_offset
        self.stats["applied"] += len(out.committed)

    # ---- what the cores know ---------------------------------------------------------------------
    def learn_committed(self, node: Node) -> None:
        """I4: the batches below a node's HW are committed, and the same as what was committed before."""
        core = node.core
        hw = core.high_watermark
        end = self.committed_end
        if hw <= end:
            return
        batches = core.log.batches
        known = len(self.committed)
        if known and (len(batches) < known or batches[known - 1] != self.committed[-1]):
            self.fail(f"I4: node {node.node_id} has HW {hw} but its log differs from the committed log at "
                      f"{self.committed[-1].base_offset}")
        for batch in core.log.batches_between(end, hw):
            self.committed.append(batch)
            h = chain_hash(self.committed_chain[-1] if self.committed_chain else 0, batch)
            self.committed_chain.append(h)
            self.committed_bases.append(batch.base_offset)
            known_hash = self.canonical.get((batch.base_offset, batch.epoch))
            if known_hash is not None and known_hash != h:
                self.fail(f"I2/I4: committed batch at {batch.base_offset} of epoch {batch.epoch} has another prefix "
                          f"than the logs holding it")
            if not batch.control and (batch.epoch, batch.base_offset) in self.proposed:
                self.stats["acknowledged"] += 1
            for record in batch.records if batch.control else ():
                if isinstance(record, VotersRecord):
                    old, new = set(self.committed_voters), set(record.voters)
                    self.stats["voters_added"] += len(new - old)
                    self.stats["voters_removed"] += len(old - new)
                    self.log(f"committed VOTERS {sorted(new)} at {batch.base_offset}")
                    self.committed_voters = tuple(sorted(new))
        self.committed_end = hw
        self.log(f"committed up to {hw} (node {node.node_id})")
        self._durability_due = True
        last_epoch = self.committed[-1].epoch
        for other in self.node_list:   # I3: leaders of this epoch or later hold it
            c = other.core
            if c is not None and c.role is Role.LEADER and c.epoch >= last_epoch:
                self._check_holds_committed(other)

    def _check_holds_committed(self, node: Node) -> None:
        known = len(self.committed)
        batches = node.core.log.batches
        if known and (len(batches) < known or batches[known - 1] != self.committed[-1]):
            self.fail(f"I3: leader {node.node_id} of epoch {node.core.epoch} lacks committed batch "
                      f"{self.committed[-1]}")

    def observe(self, node: Node) -> None:
        """I1, I3, I6 on one node after an Output was carried out."""
        core = node.core
        if len(node.log) != len(core.log) or (node.log and node.log[-1] != core.log.batches[-1]):
            self.fail(f"I6: node {node.node_id}'s durable log (end {node.log[-1].next_offset if node.log else 0}) "
                      f"differs from its core's (end {core.log_end_offset})")
        e = node.election
        if e.epoch != core.epoch or e.leader_id != core.leader_id or e.voted_id != core.voted_id:
            self.fail(f"I6: node {node.node_id} persisted {node.election}, its core is in {core.election_state}")
        hw = core.high_watermark
        if hw < node.hw or hw > core.log_end_offset:
            self.fail(f"I6: node {node.node_id} HW {hw} (was {node.hw}, log end {core.log_end_offset})")
        node.hw = hw
        if core.role is Role.LEADER:
            leader = self.leader_of_epoch.setdefault(core.epoch, node.node_id)
            if leader != node.node_id:
                self.fail(f"I1: nodes {leader} and {node.node_id} both lead epoch {core.epoch}")
            if node.leading[0] != core.epoch:
                node.leading = (core.epoch, self.now_ms)
                self.stats["leaders"] += 1
                self.log(f"node {node.node_id} LEADS epoch {core.epoch} (log end {core.log_end_offset}, hw {hw})")
                self._check_holds_committed(node)
        elif node.leading[0] >= 0:
            self.log(f"node {node.node_id} no longer leads epoch {node.leading[0]}: {core.role.value} e{core.epoch}")
            if core.role is Role.RESIGNED:
                self.stats["resigned"] += 1
                if node.node_id not in core.voters:
                    self.stats["removed_leader_resigned"] += 1
            node.leading = (-1, -1)

    # ---- the scheduler ----------------------------------------------------------------------------
    def run(self, steps: int) -> "Simulation":
        for _ in range(steps):
            self.step()
        return self

    def step(self) -> None:
        self.step_no += 1
        action = self.actions[bisect.bisect_right(self.thresholds, self.rng.random() * self.thresholds[-1])]
        try:
            getattr(self, "do_" + action)()
        except (QuorumStateError, LogError) as refused:
            self.fail(f"a core refused a step: {refused!r}")
        self.check()

    def _due(self) -> list[int]:
        """Messages in flight that may arrive now (those to a paused node wait)."""
        now, nodes = self.now_ms, self.nodes
        return [i for i, m in enumerate(self.network) if m[0] <= now and not nodes[m[3]].paused]

    def do_deliver(self) -> None:
        due = self._due()
        if not due:
            return self.do_advance()
        self.deliver(self.network.pop(self.rng.choice(due)))

    def deliver(self, item) -> None:
        _, _, src, dst, message = item
        if (src, dst) in self.blocked:
            self.stats["cut_off"] += 1
            return
        node = self.nodes[dst]
        if not node.up:
            return
        if isinstance(message, FetchRequest):
            node.voter_fetch_ms[src] = self.now_ms    # (I7 counts those of the leader's voters)
        if self.verbose:
            self.log(f"{src} -> {dst}: {message}")
        self.stats["delivered"] += 1
        self.carry_out(node, node.core.handle(message, self.now_ms))

    def do_advance(self, ms: int | None = None) -> None:
        now = self.now_ms = self.now_ms + (ms if ms is not None else self.rng.randint(1, ADVANCE_MS_MAX))
        for node in self.node_list:
            if node.running and (not self.lazy_ticks or now >= node.core.next_tick_ms()):
                self.carry_out(node, node.core.tick(now))

    def do_propose(self) -> None:
        up = [n for n in self.node_list if n.running]
        if not up:
            return
        leaders = [n for n in up if n.core.role is Role.LEADER]
        node = self.rng.choice(leaders if leaders and self.rng.random() < 0.85 else up)
        self.propose(node, self.rng.randint(1, 3))

    def propose(self, node: Node, count: int = 1) -> Any:
        records = tuple(range(self.next_write, self.next_write + count))
        self.next_write += count
        result, out = node.core.propose(records, self.now_ms)
        if isinstance(result, Accepted):
            self._check_quorum(node, "accepted a write")
            self.proposed[(result.epoch, result.base_offset)] = records
            self.stats["accepted"] += 1
            self.log(f"node {node.node_id} accepted {records} at {result.base_offset} e{result.epoch}")
        else:
            self.stats["not_leader"] += 1
        self.carry_out(node, out)
        return result

    def do_drop(self) -> None:
        if self.network:
            self.network.pop(self.rng.randrange(len(self.network)))
            self.stats["dropped"] += 1

    def do_duplicate(self) -> None:
        if self.network:
            _, _, src, dst, message = self.rng.choice(self.network)
            self.send(src, dst, message)
            self.stats["duplicated"] += 1

    def leader(self) -> Node | None:
        """The live leader of the highest epoch, if any."""
        leaders = [n for n in self.node_list if n.running and n.core.role is Role.LEADER]
        return max(leaders, key=lambda n: n.core.epoch) if leaders else None

    def cut(self, src: int, dst: int) -> None:
        if src != dst:
            self.blocked.add((src, dst))

    def isolate(self, node_id: int, inbound: bool = True, outbound: bool = True) -> None:
        for other in self.nodes:
            if inbound:
                self.cut(other, node_id)
            if outbound:
                self.cut(node_id, other)

    def do_partition(self) -> None:
        rng = self.rng
        kind = rng.choice(PARTITION_KINDS)
        leader = self.leader()
        target = leader.node_id if leader is not None else rng.choice(self.voter_ids)
        if kind == "isolate":
            self.isolate(rng.choice(list(self.nodes)))
        elif kind == "isolate_leader":
            self.isolate(target)
        elif kind == "split":
            ids = list(self.nodes)
            minority = set(rng.sample(ids, rng.randint(1, len(self.voter_ids) // 2)))
            for a in minority:
                for b in ids:
                    if b not in minority:
                        self.cut(a, b)
                        self.cut(b, a)
        elif kind == "one_way":
            a, b = rng.sample(list(self.nodes), 2)
            self.cut(a, b)
        elif kind == "leader_outbound":
            self.isolate(target, inbound=False)
        else:
            self.isolate(target, outbound=False)
        self.stats["partitions"] += 1
        self.log(f"PARTITION {kind} (leader {target}): cut {sorted(self.blocked)}")

    def do_heal(self) -> None:
        if not self.blocked:
            return
        if self.rng.random() < 0.5:
            self.blocked.clear()
        else:
            self.blocked.discard(self.rng.choice(sorted(self.blocked)))
        self.log(f"HEAL: cut {sorted(self.blocked)}")

    def do_crash(self) -> None:
        up = [n for n in self.node_list if n.up]
        if not up:
            return
        leader = self.leader()
        node = leader if leader is not None and self.rng.random() < 0.3 else self.rng.choice(up)
        node.paused = False
        self.crash(node)

    def do_pause(self) -> None:
        running = [n for n in self.node_list if n.running]
        if running:
            leader = self.leader()
            node = leader if leader is not None and leader.running and self.rng.random() < 0.3 else \
                self.rng.choice(running)
            node.paused = True
            self.stats["pauses"] += 1
            self.log(f"PAUSE {self.describe(node)}")

    def do_resume(self) -> None:
        paused = [n for n in self.node_list if n.paused]
        if paused:
            node = self.rng.choice(paused)
            node.paused = False
            self.log(f"RESUME {self.describe(node)}")
            if node.core.role is Role.LEADER and self.rng.random() < 0.5:
                self.propose(node)      # a write that waited in its mailbox comes first
            else:
                self.carry_out(node, node.core.tick(self.now_ms))

    def do_restart(self) -> None:
        down = [n for n in self.node_list if not n.up]
        if down:
            node = self.rng.choice(down)
            self.start(node)
            self.stats["restarts"] += 1
            self.log(f"RESTART {node.node_id}: {self.describe(node)}")

    def do_change_voters(self) -> None:
        """Ask a node (the leader, mostly) to add a non-voter or remove a voter (KIP-853)."""
        rng = self.rng
        running = [n for n in self.node_list if n.running]
        if not running:
            return
        leader = self.leader()
        node = leader if leader is not None and rng.random() < 0.9 else rng.choice(running)
        core = node.core
        voters = core.voters
        outside = [i for i in self.nodes if i not in voters]
        add = bool(outside) and (len(voters) < 3 or rng.random() < 0.5)
        target = rng.choice(outside) if add else rng.choice(voters)
        was_leader = core.role is Role.LEADER
        pending, own_commit = core.voter_change_pending, was_leader and core.high_watermark > (
            core._leadership.epoch_start_offset)
        result, out = (core.add_voter if add else core.remove_voter)(target, self.now_ms)
        what = f"{'add' if add else 'remove'} voter {target} on node {node.node_id} (voters {list(voters)})"
        if isinstance(result, Accepted):
            if self.check_voter_rules and (pending or not own_commit):   # I8
                self.fail(f"I8: {what} accepted with a change uncommitted ({pending}) or before an entry of its "
                          f"epoch committed ({not own_commit})")
            self._check_quorum(node, "accepted a voter change", voters)
            self.stats["voter_changes_accepted"] += 1
            self.log(f"{what}: accepted at {result.base_offset} e{result.epoch}")
        else:
            self.stats["voter_change_" + result.error.name] += 1
            self.log(f"{what}: {result.error.name} ({result.reason})")
        self.carry_out(node, out)

    def do_resign(self) -> None:
        leader = self.leader()
        if leader is not None:
            self.stats["resign_calls"] += 1
            self.carry_out(leader, leader.core.resign(self.now_ms))

    # ---- invariants --------------------------------------------------------------------------------
    def check(self) -> None:
        if self._durability_due:
            self._durability_due = False
            self._check_durability()
        for node in self.node_list:
            if node.running and node.core.role is Role.LEADER:
                self._check_quorum(node, "still leads")
                core = node.core
                if node.node_id not in core.voters and core.voters_offset < core.high_watermark:
                    self.fail(f"I8: node {node.node_id} still leads epoch {core.epoch} though its removal "
                              f"(offset {core.voters_offset}) is committed")

    def _check_quorum(self, node: Node, what: str, voters: tuple[int, ...] | None = None) -> None:
        """I7 for one leader: Fetches from a majority of its voters (with itself, if one) reached
        it within the window."""
        voters = voters if voters is not None else node.core.voters
        if voters == (node.node_id,):
            return
        bound = int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
        recent = sorted((t for v, t in node.voter_fetch_ms.items() if v in voters and v != node.node_id), reverse=True)
        needed = len(voters) // 2 + 1 - (1 if node.node_id in voters else 0)
        since = max(node.leading[1], recent[needed - 1] if len(recent) >= needed else -1)
        if self.now_ms > since + bound:
            self.fail(f"I7: node {node.node_id} {what} in epoch {node.core.epoch} at {self.now_ms}, though Fetches "
                      f"from a majority last reached it by {since} (check quorum: {bound} ms)")

    def _check_durability(self) -> None:
        """I5: the committed log is a prefix of the durable logs of a majority of voters (for an odd
        number of voters, as without voter changes, exactly that)."""
        known = len(self.committed)
        if not known:
            return
        # the committed voter set C, or a set one change away from it (C without one of its
        # voters, or with one more node): a leader counts its newest set, committed or not, at
        # once, and that set may be lost with the leader afterwards (KIP-853, Raft's single-server
        # changes). Safe even so: any majority of such a set meets any majority of C, and a leader
        # commits an entry of its own epoch under its set before it takes a change. Whether a
        # leader lacks a committed batch is I3's to catch; this checks the durable copies only.
        prefix = {n.node_id: self._common_prefix(n) for n in self.node_list}
        committed_set = set(self.committed_voters)
        holders = {n for n, count in prefix.items() if count >= known}
        held = len(holders & committed_set)
        size = len(committed_set)
        if (held >= size // 2 + 1
                or (size > 1 and held < size and held >= (size - 1) // 2 + 1)       # one voter out
                or (holders - committed_set and held + 1 >= (size + 1) // 2 + 1)):  # one node in
            return
        self.fail(f"I5: the committed log (up to {self.committed[-1].next_offset}) is whole on the durable logs of "
                  f"{sorted(holders)} only, voters {sorted(committed_set)}: "
                  + ", ".join(f"{v}: {prefix[v]} batches" for v in sorted(prefix)))

    def _common_prefix(self, node: Node) -> int:
        """How many batches of the committed log start node's durable log (prefix hashes: binary search)."""
        lo, hi = 0, min(len(node.chain), len(self.committed_chain))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if node.chain[mid - 1] == self.committed_chain[mid - 1]:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # ---- liveness ---------------------------------------------------------------------------------
    def calm_step(self, ms: int = SETTLE_STEP_MS) -> None:
        """Deliver everything due (in random order), then let `ms` pass: no faults, no drops."""
        self.step_no += 1
        while True:
            due = self._due()
            if not due:
                break
            try:
                self.deliver(self.network.pop(self.rng.choice(due)))
            except (QuorumStateError, LogError) as refused:
                self.fail(f"a core refused a step: {refused!r}")
            self.check()
        try:
            self.do_advance(ms)
        except (QuorumStateError, LogError) as refused:
            self.fail(f"a core refused a step: {refused!r}")
        self.check()

    def heal_all(self) -> None:
        """The network is whole again (messages take 1..max_delay_ms, none lost) and every node is up."""
        self.blocked.clear()
        self.crash_mid_write = self.long_delay_share = 0
        for node in self.node_list:
            if node.paused:
                node.paused = False
                self.carry_out(node, node.core.tick(self.now_ms))
            if not node.up:
                self.start(node)
                self.stats["restarts"] += 1
        self.log("SETTLE: network healed, every node up")

    def settle(self, bound_ms: int = SETTLE_BOUND_MS) -> int:
        """Heal everything; then a leader followed by every voter must exist and a proposal must
        commit on every node within bound_ms. Returns the ms it took.

        The bound: a voter notices a dead or cut-off leader within fetch.timeout.ms (200) and a
        leader resigns within 1.5x (300); an election round (pre-vote, vote) takes an election
        timeout (100..200) plus message delays, and split votes back off up to 100 ms: a handful of
        rounds fits well inside 5,000 ms (25 fetch timeouts). 5,000 seeds x 2,000 steps took at
        most 1,015 ms (median 190 ms); 500 seeds x 10,000 steps, with longer logs to catch up, at
        most 1,590 ms (`python -m tests.quorum --seeds A:B --steps N` prints the figures)."""
        self.heal_all()
        start = self.now_ms
        pending: tuple[int, int, int] | None = None   # (node, epoch, next offset) of our proposal
        while self.now_ms - start <= bound_ms:
            self.calm_step()
            leader = self.leader()
            if leader is None or not self._followed_by_all(leader):
                continue
            c = leader.core
            if pending is None or pending[:2] != (leader.node_id, c.epoch):
                result = self.propose(leader)
                if isinstance(result, Accepted):
                    pending = (leader.node_id, c.epoch, result.last_offset + 1)
                continue
            if all(n.core.high_watermark >= pending[2] for n in self.node_list):
                self.settle_ms = self.now_ms - start
                self.stats["settled"] += 1
                return self.settle_ms
        self.fail(f"liveness: no leader followed by every voter with a proposal committed everywhere within "
                  f"{bound_ms} ms of healing", LivenessViolation)

    def _followed_by_all(self, leader: Node) -> bool:
        c = leader.core
        for node in self.node_list:
            if node is leader:
                continue
            o = node.core
            if o.role is not Role.FOLLOWER or o.epoch != c.epoch or o.leader_id != leader.node_id:
                return False
        return True


def run_seed(seed: int, steps: int, *, verbose: bool = False, settle: bool = True) -> Simulation:
    sim = Simulation(seed, verbose=verbose).run(steps)
    if settle:
        sim.settle()
    return sim
