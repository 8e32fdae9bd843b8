"""A deterministic simulation of Kray's replication and election cores (issue 8, item 7; batched
follower fetches: issue 16, item 3).

Three brokers, one to three partitions (drawn per seed, each replicated on all three brokers in an
order drawn per seed, so that one broker often leads several of them), one controller
(ReplicationControl, holding every partition's registration, leader and ISR), producers (acks=all
and acks=1) and consumers, all stepped by one seeded scheduler. Each broker holds, per partition,
an in-memory log of (leader epoch, write id) entries and a ReplicaCore with its leader-epoch
cache. Each seed first draws its own mix of actions (swarm testing), then each step picks one
action with `random.Random(seed)`: deliver any in-flight message (so messages are reordered
freely), drop or duplicate one, advance the clock, tick a broker or the controller, produce,
consume, crash / restart / pause / resume a broker, restart the controller. Messages to a paused
broker wait; messages to a crashed broker (or to and from the controller when it restarts) are
lost.

Followers fetch as actors/partition/fetcher.py's ReplicaFetcher does: a broker has one fetcher per
source (leader) broker, holding every partition it follows from that broker; a fetcher keeps at
most one batched fetch in flight (resent after FETCH_RETRY_MS without an answer) carrying
(partition, FetchRequest) for each of its partitions that has a fetch to send and is not delayed.
The metadata of a partition moves it from one fetcher to another when its leader moves (and
clears its delay). The leader answers every partition of the batch in one message (its
handle_follower_fetch per partition, at most FETCH_PARTITION_MAX entries each and
FETCH_RESPONSE_MAX in all, the first non-empty partition always kept, as KIP-74), at once if any
partition has data, an error or a diverging epoch, else it holds the fetch (long poll) until data
arrives or FETCH_MAX_WAIT_MS pass and then reads every partition again, as the gateway's fetch
handler does; a few answers are request-level errors, which apply to every partition. The
follower matches answers to its requests by partition, drops the answer of a partition that left
the fetcher while the fetch was out, hands each other answer to that partition's core, and delays
a partition whose answer was refused (an error: not leader, other epoch, ...) with a doubling
backoff without delaying the others. Answers that arrive late, twice, or after the partition left
and came back (leader moved away and back) reach the core, which must ignore the stale ones.

Durability assumption (stated, kept simple): every append and every truncation is fsynced before
the broker does anything else, so a crash loses only volatile state (roles, follower states,
waiters, fetchers and their fetches in flight, held fetches, broker epoch); each log, its
leader-epoch cache (rebuilt from the log's epochs, as Kafka does without a checkpoint) and its
last high watermark survive. The controller's metadata log (a list, appended before anything is
published) survives its restarts; its heartbeat times and its memory of AlterPartition answers do
not.

Invariants, checked per partition after every step (see `check`):
  I1 one writer per leader epoch, and it is the leader the controller elected for that epoch;
  I2 logs agree below the high watermark: every replica's entries below its own high watermark
     equal the committed log (the entries any leader has ever exposed below its HW), and the
     committed log never changes;
  I3 every acknowledged acks=all write is committed at its offset, is held by every replica of
     the controller's ISR (checked at each ISR change and each acknowledgement), and is present on
     the current leader once one is elected (from the ISR: unclean election is off);
  I4 a leader's high watermark never goes backwards within its leader epoch, and HW <= LEO;
  I5 a consumer only reads offsets below the high watermark, and what it reads is committed;
  I6 the shell and the core agree: log length == core log end offset, same log start offset; the
     epoch cache agrees with the epoch of the last entry.
Write ids are unique across partitions, so a record of one partition that lands in another breaks
I2 (or I3, I5) there. Records deleted on purpose (DeleteRecords on a leader, below its high
watermark; followers follow the leader's log start) are exempt from I2/I3 below each replica's log
start.
"""
from __future__ import annotations

import bisect
import collections
import itertools
import os
import random
from dataclasses import dataclass, field
from typing import Any

from actors.controller.elections import NO_LEADER, ReplicationControl
from actors.partition.epoch_cache import LeaderEpochCache
from actors.partition.replication import (
    ACKS_ALL, AlterPartitionResponse, BatchSpan, FetchAnswer, FollowerAction, PartitionRegistration,
    ReplicaCore, ReplicationConfig, Role,
)
from protocol.errors import ErrorCode

# Partition keys (topic, index); two of them share index 0, so answers must be matched by topic
# and index. A seed uses the first 1, 2 or 3.
PARTITION_KEYS = (("orders", 0), ("events", 0), ("orders", 1))
PARTITION_COUNTS = (1, 2, 3)
BROKERS = (0, 1, 2)
CONTROLLER = "controller"
CLIENT = "client"

SESSION_TIMEOUT_MS = 400        # broker.session.timeout.ms (scaled down)
HEARTBEAT_INTERVAL_MS = 100     # broker.heartbeat.interval.ms (scaled down)
REPLICA_LAG_TIME_MAX_MS = 250   # replica.lag.time.max.ms (scaled down)
MIN_INSYNC_REPLICAS = 2
FETCH_RETRY_MS = 150            # a fetcher re-sends a fetch that got no answer after this
FETCH_MAX_WAIT_MS = 60          # replica.fetch.wait.max.ms (scaled down): a leader holds an empty fetch
FETCH_BACKOFF_MS = 20           # replica.fetch.backoff.ms (scaled down), doubling for a refused partition
FETCH_BACKOFF_MAX_MS = 160
FETCH_REQUEST_ERROR = 0.01      # share of fetches answered with a request-level error
REQUEST_TIMEOUT_MS = 800        # acks=all waiters time out after this
FETCH_PARTITION_MAX = 16        # entries per partition of a follower fetch answer
FETCH_RESPONSE_MAX = 24         # entries per follower fetch answer (the first non-empty partition is kept whole)
TIMELINE_STEPS = 60
CHECK_ALL = os.environ.get("KRAY_SIM_CHECK_ALL") == "1"  # check every partition after every step

# Swarm testing: each seed draws its own mix of actions (weights in percent), so that some runs
# are calm and some are storms of drops, duplicates or faults; rare schedules come up far more
# often than with one fixed mix.
ACTIONS = ("deliver", "drop", "duplicate", "advance_clock", "tick_broker", "tick_controller",
           "produce", "consume", "fault", "delete_records")
WEIGHT_CHOICES = {
    "deliver": (50, 60, 70), "drop": (0, 0.5, 1, 3), "duplicate": (0, 1, 3), "advance_clock": (6, 9, 14),
    "tick_broker": (10, 14, 20), "tick_controller": (1, 2, 4), "produce": (5, 9, 15), "consume": (2,),
    "fault": (0.5, 2, 4), "delete_records": (0, 0.3, 1),
}

Key = tuple[str, int]


def name(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


class InvariantViolation(AssertionError):
    pass


@dataclass
class Message:
    dst: Any
    kind: str
    body: tuple
    src: Any = None


@dataclass
class Replica:
    """One partition's replica on one broker: its durable log and its core."""
    key: Key
    broker_id: int
    # (leader epoch, write id) per offset; None below the log start (deleted records)
    log: list[tuple[int, int] | None] = field(default_factory=list)
    log_start: int = 0
    hw_checkpoint: int = 0
    core: ReplicaCore | None = None
    waiters: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # waiter -> (write, offset, since)
    verified_upto: int = 0                         # I2: offsets below this were checked
    leader_hw: tuple[int, int] = (-1, -1)          # I4: (leader epoch, HW) last seen while leading

    def start(self, config: ReplicationConfig) -> None:
        epochs = LeaderEpochCache()
        for offset in range(self.log_start, len(self.log)):
            epochs.assign(self.log[offset][0], offset)
        self.core = ReplicaCore(self.broker_id, log_end_offset=len(self.log), log_start_offset=self.log_start,
                                high_watermark=self.hw_checkpoint, epochs=epochs, config=config)
        self.waiters = {}

    def delete_below(self, offset: int) -> None:
        """Retention / DeleteRecords: records below `offset` are gone (durably)."""
        for o in range(self.log_start, min(offset, len(self.log))):
            self.log[o] = None
        if offset > len(self.log):
            self.log.extend([None] * (offset - len(self.log)))
        self.log_start = max(self.log_start, offset)


@dataclass
class Fetcher:
    """A broker's replica fetcher for one source broker (fetcher.py's ReplicaFetcher)."""
    leader: int
    followers: dict[Key, None] = field(default_factory=dict)     # the partitions it fetches, in join order
    delayed: dict[Key, tuple[int, int]] = field(default_factory=dict)  # key -> (until ms, backoff ms)
    in_flight: tuple[int, int] | None = None                     # (fetch id, sent ms)


@dataclass
class Broker:
    broker_id: int
    replicas: dict[Key, Replica]
    alive: bool = True
    paused: bool = False
    broker_epoch: int = -1
    last_heartbeat_ms: int = -10**9
    fetchers: dict[int, Fetcher] = field(default_factory=dict)   # source broker -> its fetcher
    source: dict[Key, int] = field(default_factory=dict)         # partition -> the fetcher it is in
    held: list[tuple[int, int, tuple, int]] = field(default_factory=list)  # (fetch id, follower, wanted, since)

    def start(self, config: ReplicationConfig) -> None:
        for r in self.replicas.values():
            r.start(config)
        self.broker_epoch = -1
        self.last_heartbeat_ms = -10**9
        self.fetchers, self.source, self.held = {}, {}, []

    @property
    def runnable(self) -> bool:
        return self.alive and not self.paused

    def follow(self, key: Key, leader: int) -> bool:
        """ReplicaFetchers.follow: `key` fetches from `leader` (at once, if it was delayed). True
        when it moved from another fetcher."""
        moved = self.source.get(key) not in (None, leader)
        if self.source.get(key) != leader:
            self.unfollow(key)
        fetcher = self.fetchers.setdefault(leader, Fetcher(leader))
        fetcher.followers[key] = None
        fetcher.delayed.pop(key, None)
        self.source[key] = leader
        return moved

    def unfollow(self, key: Key) -> None:
        leader = self.source.pop(key, None)
        fetcher = self.fetchers.get(leader) if leader is not None else None
        if fetcher is not None:
            fetcher.followers.pop(key, None)
            fetcher.delayed.pop(key, None)
            if not fetcher.followers:  # closed, with its connection: an answer to it is lost
                del self.fetchers[leader]


class Simulation:
    def __init__(self, seed: int, *, verbose: bool = False, unclean_leader_election_enable: bool = False,
                 check_all: bool = CHECK_ALL):
        self.seed = seed
        self.rng = random.Random(seed)
        self.weights = {a: self.rng.choice(WEIGHT_CHOICES[a]) for a in ACTIONS}
        self.thresholds = list(itertools.accumulate(self.weights[a] for a in ACTIONS))
        self.keys: tuple[Key, ...] = PARTITION_KEYS[:self.rng.choice(PARTITION_COUNTS)]
        assignment = {key: tuple(self.rng.sample(BROKERS, len(BROKERS))) for key in self.keys}
        self.verbose = verbose
        self.now_ms = 0
        self.step_no = 0
        self.config = ReplicationConfig(replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS,
                                        min_insync_replicas=MIN_INSYNC_REPLICAS)
        self._unclean = unclean_leader_election_enable
        self.controller = ReplicationControl(broker_session_timeout_ms=SESSION_TIMEOUT_MS,
                                             unclean_leader_election_enable=unclean_leader_election_enable)
        self.metadata_log: list[dict] = []
        self.brokers = {b: Broker(b, {key: Replica(key, b) for key in self.keys}) for b in BROKERS}
        self.broker_list = tuple(self.brokers.values())
        self.network: list[Message] = []
        self.timeline: collections.deque[str] = collections.deque(maxlen=TIMELINE_STEPS)
        self.next_write_id = 1
        self.next_fetch_id = 1
        # invariant state, per partition
        self.writer_of_epoch: dict[Key, dict[int, int]] = {k: {} for k in self.keys}
        self.leader_of_epoch: dict[Key, dict[int, int]] = {k: {} for k in self.keys}
        self.committed: dict[Key, list[tuple[int, int]]] = {k: [] for k in self.keys}
        self.acked: dict[Key, dict[int, int]] = {k: {} for k in self.keys}  # acks=all write id -> offset
        self.checked_leader: dict[Key, tuple[int, int]] = {k: (NO_LEADER, -1) for k in self.keys}  # I3c
        self.stats = collections.Counter()
        # partitions whose state this step may have changed: `check` looks at these (all of them
        # with check_all, or KRAY_SIM_CHECK_ALL=1)
        self.touched: set[Key] = set(self.keys)
        self.check_all = check_all
        self.log("mix: " + ", ".join(f"{a} {w}" for a, w in self.weights.items()))
        self.log("partitions: " + ", ".join(f"{name(k)} on {list(assignment[k])}" for k in self.keys))
        # the cluster starts: brokers register and heartbeat, the partitions are created
        for b in self.brokers.values():
            b.start(self.config)
            decision = self.controller.register_broker(b.broker_id, self.now_ms)
            self._append_metadata(decision.records)
            b.broker_epoch = decision.broker_epoch
            self._append_metadata(self.controller.heartbeat(b.broker_id, b.broker_epoch, self.now_ms).records)
        for key in self.keys:
            self._append_metadata(self.controller.create_partition(key, assignment[key]).records)
        self._publish(self.keys)

    # ---- plumbing ----------------------------------------------------------------------------
    def log(self, text: str) -> None:
        line = f"[{self.step_no:4d} t={self.now_ms:5d}] {text}"
        self.timeline.append(line)
        if self.verbose:
            print(line)

    def send(self, src: Any, dst: Any, kind: str, *body: Any) -> None:
        self.network.append(Message(dst, kind, body, src))

    def _append_metadata(self, records: list[dict]) -> None:
        """The controller's metadata log: appended before anything is published."""
        for record in records:
            self.metadata_log.append(record)
            if record["type"] == "partition_change":
                key = tuple(record["partition"])
                epoch, leader = record["leader_epoch"], record["leader"]
                self.touched.add(key)
                known = self.leader_of_epoch[key].setdefault(epoch, leader)
                if known != leader:
                    self.fail(f"I1: the controller elected {leader} and {known} in leader epoch {epoch} of {name(key)}")
                self.log(f"controller: {record['type']} {name(key)} leader={leader} epoch={epoch} "
                         f"pe={record['partition_epoch']} isr={record['isr']}")
                self._check_isr_holds_acked(key, record["isr"])
            else:
                self.log(f"controller: {record['type']} broker={record['broker_id']}")

    def _registration(self, key: Key) -> PartitionRegistration:
        p = self.controller.partitions[key]
        return PartitionRegistration(p.leader, p.leader_epoch, p.partition_epoch, tuple(p.replicas), tuple(p.isr))

    def _publish(self, keys) -> None:
        """The controller tells every broker the state of these partitions (one message each)."""
        for key in keys:
            reg = self._registration(key)
            for b in BROKERS:
                self.send(CONTROLLER, b, "metadata", key, reg)

    def _controller_did(self, records: list[dict]) -> None:
        self._append_metadata(records)
        changed = dict.fromkeys(tuple(r["partition"]) for r in records if r["type"] == "partition_change")
        if changed:
            self._publish(changed)

    def fail(self, what: str) -> None:
        raise InvariantViolation(
            f"seed {self.seed}, step {self.step_no}: {what}\n"
            f"replay: python -m tests.sim --seed {self.seed} --steps {self.step_no} -v\n"
            "mix: " + ", ".join(f"{a} {w}" for a, w in self.weights.items()) + "\n"
            "last steps:\n" + "\n".join(self.timeline))

    # ---- the scheduler -----------------------------------------------------------------------
    def run(self, steps: int) -> "Simulation":
        for _ in range(steps):
            self.step()
        return self

    def step(self) -> None:
        self.step_no += 1
        rng = self.rng
        action = ACTIONS[bisect.bisect_right(self.thresholds, rng.random() * self.thresholds[-1])]
        if action == "deliver":
            if any(b.paused and b.alive for b in self.broker_list):
                deliverable = [i for i, m in enumerate(self.network) if self._deliverable(m)]
                if deliverable:
                    self.deliver(self.network.pop(rng.choice(deliverable)))
            elif self.network:
                self.deliver(self.network.pop(rng.randrange(len(self.network))))
        elif action == "drop":
            if self.network:
                m = self.network.pop(rng.randrange(len(self.network)))
                self.stats["dropped"] += 1
                self.log(f"drop {m.kind} -> {m.dst}")
        elif action == "duplicate":
            if self.network:
                # ISR changes are rare and subtle: their requests and answers are duplicated more often
                control = [m for m in self.network if m.kind.startswith("alter_partition")]
                m = rng.choice(control if control and rng.random() < 0.5 else self.network)
                self.network.append(Message(m.dst, m.kind, m.body, m.src))
                self.stats["duplicated"] += 1
                self.log(f"duplicate {m.kind} -> {m.dst}")
        elif action == "advance_clock":
            self.now_ms += rng.randint(1, 80)
        elif action == "tick_broker":
            b = self.brokers[rng.choice(BROKERS)]
            if b.runnable:
                self.tick_broker(b)
        elif action == "tick_controller":
            self.tick_controller()
        elif action == "produce":
            self.produce(ACKS_ALL if rng.random() < 0.6 else 1)
        elif action == "consume":
            self.consume()
        elif action == "delete_records":
            self.delete_records()
        else:
            self.fault()
        self.stats["max_in_flight"] = max(self.stats["max_in_flight"], len(self.network))
        self.check()

    def _deliverable(self, m: Message) -> bool:
        """Messages to a paused broker wait; to a crashed one they are delivered (and lost)."""
        if m.dst == CONTROLLER or m.dst == CLIENT:
            return True
        b = self.brokers[m.dst]
        return not b.paused or not b.alive

    def fault(self) -> None:
        """Recover a broker that is down (60% when one is), else crash or pause a running one
        (never more than two down at once: one in-sync replica must be able to survive)."""
        rng = self.rng
        if rng.random() < 0.08:
            self.restart_controller()
            return
        down = [b for b in self.brokers.values() if not b.runnable]
        if down and rng.random() < 0.6:
            b = rng.choice(down)
            if b.alive:
                b.paused = False
                self.log(f"RESUME broker {b.broker_id} ({self._roles(b)})")
            else:
                b.alive = True
                b.start(self.config)
                self.stats["restarts"] += 1
                self.log(f"RESTART broker {b.broker_id} ({self._logs(b)})")
                self.touched.update(self.keys)
                self.send(b.broker_id, CONTROLLER, "register", b.broker_id)
            return
        if len(down) >= 2:
            return
        b = rng.choice([x for x in self.brokers.values() if x.runnable])
        self.touched.update(self.keys)
        if rng.random() < 0.4:
            b.alive = False
            self.stats["crashes"] += 1
            self.log(f"CRASH broker {b.broker_id} ({self._logs(b)})")
            if rng.random() < 0.5:  # Ray reports the node's death
                self.send(None, CONTROLLER, "node_died", b.broker_id)
        else:
            b.paused = True
            self.stats["pauses"] += 1
            self.log(f"PAUSE broker {b.broker_id} ({self._roles(b)})")

    @staticmethod
    def _roles(b: Broker) -> str:
        return ", ".join(f"{name(k)}: {r.core.role.value} epoch {r.core.leader_epoch}" for k, r in b.replicas.items())

    @staticmethod
    def _logs(b: Broker) -> str:
        return ", ".join(f"{name(k)}: log end {len(r.log)} hw {r.hw_checkpoint}" for k, r in b.replicas.items())

    # ---- controller --------------------------------------------------------------------------
    def restart_controller(self) -> None:
        """The controller's process restarts: a new ReplicationControl replays the metadata log
        (heartbeat times and its memory of AlterPartition answers are gone); requests in flight to
        the old incarnation and its answers die with its connections (a Ray actor restart fails
        pending calls)."""
        self.controller = ReplicationControl(broker_session_timeout_ms=SESSION_TIMEOUT_MS,
                                             unclean_leader_election_enable=self._unclean)
        for record in self.metadata_log:
            self.controller.apply(record)
        self.controller.finish_replay(self.now_ms)
        lost = [m for m in self.network if CONTROLLER in (m.dst, m.src)]
        self.network = [m for m in self.network if CONTROLLER not in (m.dst, m.src)]
        self.stats["controller_restarts"] += 1
        self.touched.update(self.keys)
        self.log(f"RESTART controller (replayed {len(self.metadata_log)} records, {len(lost)} messages lost)")

    def tick_controller(self) -> None:
        self._controller_did(self.controller.tick(self.now_ms).records)
        if self.rng.random() < 0.3:
            records = self.controller.balance_leaders().records
            self.stats["preferred_elections"] += len(records)
            self._controller_did(records)
        if self.rng.random() < 0.5:
            self._publish(self.keys)  # brokers that missed an update catch up (they read the metadata log)

    def controller_receive(self, m: Message) -> None:
        c = self.controller
        if m.kind == "register":
            (broker_id,) = m.body
            decision = c.register_broker(broker_id, self.now_ms)
            self._controller_did(decision.records)
            self.send(CONTROLLER, broker_id, "registered", decision.broker_epoch)
        elif m.kind == "heartbeat":
            broker_id, epoch = m.body
            self._controller_did(c.heartbeat(broker_id, epoch, self.now_ms).records)
        elif m.kind == "node_died":
            (broker_id,) = m.body
            self._controller_did(c.broker_died(broker_id).records)
        elif m.kind == "alter_partition":
            broker_id, epoch, key, request = m.body
            decision = c.alter_partition(broker_id, epoch, key, leader_epoch=request.leader_epoch,
                                         partition_epoch=request.partition_epoch, new_isr=request.new_isr,
                                         proposal_id=request.proposal_id)
            self._controller_did(decision.records)
            if decision.records:
                self.stats["isr_changes"] += 1
            elif decision.error_code:
                self.stats[f"alter_partition_{ErrorCode(decision.error_code).name}"] += 1
            p = decision.partition or {}
            response = AlterPartitionResponse(decision.error_code, p.get("leader", NO_LEADER),
                                              p.get("leader_epoch", -1), p.get("partition_epoch", -1),
                                              tuple(p.get("isr", ())))
            self.log(f"controller: alter_partition {name(key)} from {broker_id} {request.new_isr} "
                     f"-> error {decision.error_code}")
            self.send(CONTROLLER, broker_id, "alter_partition_response", key, request, response)

    # ---- brokers -----------------------------------------------------------------------------
    def deliver(self, m: Message) -> None:
        if m.dst == CONTROLLER:
            self.controller_receive(m)
        elif m.dst == CLIENT:
            self.client_receive(m)
        else:
            b = self.brokers[m.dst]
            if b.alive:
                self.broker_receive(b, m)

    def _effects(self, b: Broker, r: Replica, effects) -> None:
        if effects.high_watermark is not None:
            r.hw_checkpoint = r.core.high_watermark
        for waiter_id, error in effects.released:
            write_id, offset, _ = r.waiters.pop(waiter_id)
            self.send(b.broker_id, CLIENT, "produce_response", r.key, write_id, ACKS_ALL, error, offset, b.broker_id)
        if effects.alter_partition is not None:
            self.send(b.broker_id, CONTROLLER, "alter_partition", b.broker_id, b.broker_epoch, r.key,
                      effects.alter_partition)

    def tick_broker(self, b: Broker) -> None:
        self.touched.update(self.keys)
        if b.broker_epoch >= 0 and self.now_ms - b.last_heartbeat_ms >= HEARTBEAT_INTERVAL_MS:
            b.last_heartbeat_ms = self.now_ms
            self.send(b.broker_id, CONTROLLER, "heartbeat", b.broker_id, b.broker_epoch)
        for fetcher in list(b.fetchers.values()):
            if fetcher.in_flight is None or self.now_ms - fetcher.in_flight[1] >= FETCH_RETRY_MS:
                self._send_fetch(b, fetcher)
        for r in b.replicas.values():
            core = r.core
            if core.role is Role.LEADER:
                self._effects(b, r, core.tick(self.now_ms))
                for waiter_id, (write_id, offset, since) in list(r.waiters.items()):
                    if self.now_ms - since >= REQUEST_TIMEOUT_MS and core.cancel_waiter(waiter_id):
                        del r.waiters[waiter_id]
                        self.send(b.broker_id, CLIENT, "produce_response", r.key, write_id, ACKS_ALL,
                                  ErrorCode.REQUEST_TIMED_OUT, offset, b.broker_id)
        if b.held:
            self._answer_held(b)

    def _send_fetch(self, b: Broker, fetcher: Fetcher) -> None:
        """ReplicaFetcher._due: one fetch for every partition of the fetcher that has a fetch to
        send and is not waiting out a refusal."""
        wanted = []
        for key in fetcher.followers:
            delay = fetcher.delayed.get(key)
            if delay is not None and delay[0] > self.now_ms:
                continue
            request = b.replicas[key].core.next_fetch()
            if request is not None:
                wanted.append((key, request))
        if not wanted:
            return
        fetch_id = self.next_fetch_id
        self.next_fetch_id += 1
        fetcher.in_flight = (fetch_id, self.now_ms)
        self.stats["fetches"] += 1
        if len(wanted) > 1:
            self.stats["batched_fetches"] += 1
        self.send(b.broker_id, fetcher.leader, "fetch", fetch_id, tuple(wanted))

    # -- leader side of a follower fetch (actors/gateway/handlers/fetch.py) --
    def _read_fetch(self, b: Broker, wanted: tuple) -> list[list]:
        """Every partition's answer: [key, FetchAnswer, entries]."""
        answers = []
        for key, request in wanted:
            r = b.replicas[key]
            self.touched.add(key)
            answer, effects = r.core.handle_follower_fetch(request, self.now_ms)
            if answer.error_code:
                self.stats[f"fetch_{ErrorCode(answer.error_code).name}"] += 1
            elif answer.diverging_epoch is not None:
                self.stats["diverging_epochs"] += 1
            entries = []
            if answer.read_from is not None:
                entries = [(o, *r.log[o]) for o in range(answer.read_from,
                                                          min(len(r.log), answer.read_from + FETCH_PARTITION_MAX))]
            answers.append([key, answer, entries])
            self._effects(b, r, effects)
        return answers

    def _receive_fetch(self, b: Broker, m: Message) -> None:
        fetch_id, wanted = m.body
        if self.rng.random() < FETCH_REQUEST_ERROR:
            self.stats["fetch_request_errors"] += 1
            self.send(b.broker_id, m.src, "fetch_response", fetch_id, wanted, ErrorCode.UNKNOWN_SERVER_ERROR, [])
            return
        answers = self._read_fetch(b, wanted)
        if any(a.error_code or a.diverging_epoch is not None or entries for _, a, entries in answers):
            self._send_answers(b, m.src, fetch_id, wanted, answers)
        else:  # long poll: nothing to send yet
            self.stats["held_fetches"] += 1
            b.held.append((fetch_id, m.src, wanted, self.now_ms))

    def _answer_held(self, b: Broker) -> None:
        """A held fetch is answered (every partition read again) when one of its partitions has
        records past its fetch offset, or after FETCH_MAX_WAIT_MS."""
        still = []
        for held in b.held:
            fetch_id, follower, wanted, since = held
            if self.now_ms - since >= FETCH_MAX_WAIT_MS or any(
                    len(b.replicas[key].log) > request.fetch_offset for key, request in wanted):
                self._send_answers(b, follower, fetch_id, wanted, self._read_fetch(b, wanted))
            else:
                still.append(held)
        b.held = still

    def _send_answers(self, b: Broker, follower: int, fetch_id: int, wanted: tuple, answers: list[list]) -> None:
        total = 0
        for answer in answers:  # keep the response within FETCH_RESPONSE_MAX, the first non-empty kept (KIP-74)
            size = len(answer[2])
            if size and total and total + size > FETCH_RESPONSE_MAX:
                answer[2] = []
                self.stats["trimmed_answers"] += 1
            total += len(answer[2])
        self.send(b.broker_id, follower, "fetch_response", fetch_id, wanted, ErrorCode.NONE,
                  [tuple(a) for a in answers])

    # -- follower side (actors/partition/fetcher.py ReplicaFetcher._run) --
    def _match_answers(self, wanted: tuple, answers: list) -> list:
        """Each request of the batch with its partition's answer (decode_fetch keys answers by
        topic and partition); a partition missing from the answer is refused."""
        by_key = {key: (answer, entries) for key, answer, entries in answers}
        return [(key, request, *by_key.get(key, (FetchAnswer(ErrorCode.UNKNOWN_SERVER_ERROR), [])))
                for key, request in wanted]

    def _receive_fetch_response(self, b: Broker, m: Message) -> None:
        fetch_id, wanted, request_error, answers = m.body
        fetcher = b.fetchers.get(m.src)
        if fetcher is not None and fetcher.in_flight is not None and fetcher.in_flight[0] == fetch_id:
            fetcher.in_flight = None
        if request_error:
            matched = [(key, request, FetchAnswer(request_error), []) for key, request in wanted]
        else:
            matched = self._match_answers(wanted, answers)
        for key, request, answer, entries in matched:
            if fetcher is None or key not in fetcher.followers:
                self.stats["answers_dropped_left_fetcher"] += 1  # left this fetcher while the fetch was out
                continue
            if self._apply_fetched(b, b.replicas[key], request, answer, entries):
                fetcher.delayed.pop(key, None)
            else:  # refused: this partition waits, the others of the fetcher do not
                _, backoff = fetcher.delayed.get(key, (0, FETCH_BACKOFF_MS // 2))
                backoff = min(backoff * 2, FETCH_BACKOFF_MAX_MS)
                fetcher.delayed[key] = (self.now_ms + backoff, backoff)
                self.stats["delayed_partitions"] += 1

    def _apply_fetched(self, b: Broker, r: Replica, request, answer, entries) -> bool:
        """PartitionReplica._step: the core decides, the shell writes. False when refused."""
        core = r.core
        self.touched.add(r.key)
        stale = request.current_leader_epoch != core.leader_epoch
        step = core.on_fetch_response(request, answer, [BatchSpan(o, o, e) for o, e, _ in entries])
        if step.action is FollowerAction.IGNORE and stale:
            self.stats["stale_answers_ignored"] += 1
        if step.action is FollowerAction.RESET:
            self.stats["resets"] += 1
            self.log(f"broker {b.broker_id}: {name(r.key)} reset, log starts empty at {step.truncate_to}")
            r.log = []
            r.log_start = 0
            r.delete_below(step.truncate_to)
            r.verified_upto = min(r.verified_upto, step.truncate_to)
        if step.action is FollowerAction.TRUNCATE:
            self.stats["truncations"] += 1
            self.log(f"broker {b.broker_id}: {name(r.key)} truncate {len(r.log)} -> {step.truncate_to} "
                     f"(diverging {answer.diverging_epoch})")
            del r.log[step.truncate_to:]
            r.verified_upto = min(r.verified_upto, step.truncate_to)
        elif step.action is FollowerAction.APPEND:
            r.log.extend((e, w) for _, e, w in entries)
        if step.log_start_offset is not None:
            r.delete_below(step.log_start_offset)
        r.hw_checkpoint = core.high_watermark
        if b.held and step.action in (FollowerAction.APPEND, FollowerAction.TRUNCATE, FollowerAction.RESET):
            self._answer_held(b)  # its log end moved: a fetch held by this broker may be answered
        return step.error_code == ErrorCode.NONE

    def broker_receive(self, b: Broker, m: Message) -> None:
        if m.kind == "registered":
            if b.broker_epoch < 0:
                b.broker_epoch = m.body[0]
        elif m.kind == "metadata":
            key, reg = m.body
            r = b.replicas[key]
            core = r.core
            self.touched.add(key)
            if (reg.leader_epoch, reg.partition_epoch) < (core.leader_epoch, core.partition_epoch):
                return  # PartitionReplica.update: overtaken by a newer state
            before = (core.role, core.leader_epoch)
            self._effects(b, r, core.apply_registration(reg, self.now_ms))
            if (core.role, core.leader_epoch) != before:
                self.log(f"broker {b.broker_id}: {name(key)} {core.role.value} in epoch {core.leader_epoch} "
                         f"(log end {len(r.log)}, hw {core.high_watermark})")
            if core.role is Role.FOLLOWER and reg.leader != NO_LEADER:
                if b.follow(key, reg.leader):
                    self.stats["fetcher_moves"] += 1
                    self.log(f"broker {b.broker_id}: {name(key)} moves to its fetcher for broker {reg.leader}")
            elif core.role is not Role.FOLLOWER:
                b.unfollow(key)
        elif m.kind == "alter_partition_response":
            key, request, response = m.body
            r = b.replicas[key]
            self.touched.add(key)
            self._effects(b, r, r.core.on_alter_partition_response(request, response, self.now_ms))
        elif m.kind == "fetch":
            self._receive_fetch(b, m)
        elif m.kind == "fetch_response":
            self._receive_fetch_response(b, m)
        elif m.kind == "produce":
            key, write_id, acks = m.body
            self.broker_produce(b, b.replicas[key], write_id, acks)

    def broker_produce(self, b: Broker, r: Replica, write_id: int, acks: int) -> None:
        core, key = r.core, r.key
        self.touched.add(key)
        error = core.check_produce(acks)
        if error:
            self.stats[f"produce_{ErrorCode(error).name}"] += 1
            self.send(b.broker_id, CLIENT, "produce_response", key, write_id, acks, error, -1, b.broker_id)
            return
        offset = len(r.log)
        r.log.append((core.leader_epoch, write_id))
        writer = self.writer_of_epoch[key].setdefault(core.leader_epoch, b.broker_id)
        if writer != b.broker_id:
            self.fail(f"I1: brokers {writer} and {b.broker_id} both accepted writes to {name(key)} "
                      f"in leader epoch {core.leader_epoch}")
        if self.leader_of_epoch[key].get(core.leader_epoch) != b.broker_id:
            self.fail(f"I1: broker {b.broker_id} wrote to {name(key)} in epoch {core.leader_epoch}, whose elected "
                      f"leader is {self.leader_of_epoch[key].get(core.leader_epoch)}")
        if core.leader_epoch < self.controller.partitions[key].leader_epoch:
            self.stats["stale_leader_appends"] += 1  # a deposed leader that does not know it yet
        self.log(f"broker {b.broker_id}: {name(key)} append write {write_id} at {offset} epoch {core.leader_epoch} "
                 f"acks={acks}")
        self._effects(b, r, core.on_leader_append(len(r.log), self.now_ms))
        if b.held:
            self._answer_held(b)
        if acks != ACKS_ALL:
            self.send(b.broker_id, CLIENT, "produce_response", key, write_id, acks, ErrorCode.NONE, offset, b.broker_id)
            return
        waiter_id, error = core.register_waiter(offset + 1)
        if error is not None:
            self.send(b.broker_id, CLIENT, "produce_response", key, write_id, acks, error, offset, b.broker_id)
        else:
            r.waiters[waiter_id] = (write_id, offset, self.now_ms)

    # ---- clients -----------------------------------------------------------------------------
    def produce(self, acks: int) -> None:
        key = self.rng.choice(self.keys)
        leader = self.controller.partitions[key].leader
        target = leader if leader != NO_LEADER and self.rng.random() < 0.75 else self.rng.choice(BROKERS)
        write_id = self.next_write_id
        self.next_write_id += 1
        self.send(CLIENT, target, "produce", key, write_id, acks)

    def client_receive(self, m: Message) -> None:
        key, write_id, acks, error, offset, broker_id = m.body
        self.touched.add(key)
        if error:
            self.stats[f"client_{ErrorCode(error).name}"] += 1
        acked = self.acked[key]
        if acks != ACKS_ALL or error != ErrorCode.NONE or write_id in acked:
            return
        committed = self.committed[key]
        if offset >= len(committed) or committed[offset][1] != write_id:
            self.fail(f"I3: write {write_id} acknowledged at offset {offset} of {name(key)} by broker {broker_id} "
                      f"but the committed log has {committed[offset] if offset < len(committed) else None}")
        acked[write_id] = offset
        self.stats["acked"] += 1
        self._check_isr_holds_acked(key, self.controller.partitions[key].isr, only=(write_id, offset))
        self.log(f"client: write {write_id} acknowledged (acks=all) at {name(key)} {offset} by broker {broker_id}")

    def consume(self) -> None:
        """A consumer fetches from a broker that believes it leads (perhaps a stale one)."""
        b = self.brokers[self.rng.choice(BROKERS)]
        key = self.rng.choice(self.keys)
        r = b.replicas[key]
        if not b.runnable or r.core.role is not Role.LEADER or r.core.high_watermark == 0:
            return
        hw = r.core.high_watermark
        if hw <= r.log_start:
            return
        offset = self.rng.randrange(r.log_start, hw)
        if offset >= hw:
            self.fail(f"I5: consumer read offset {offset} of {name(key)} at or above the high watermark {hw}")
        committed = self.committed[key]
        if offset >= len(committed) or r.log[offset] != committed[offset]:
            self.fail(f"I5: consumer read {r.log[offset]} at {offset} of {name(key)} from broker {b.broker_id}: "
                      f"not committed")
        self.stats["consumed"] += 1

    def delete_records(self) -> None:
        """DeleteRecords on a broker that believes it leads: its log start moves up to at most its HW."""
        b = self.brokers[self.rng.choice(BROKERS)]
        r = b.replicas[self.rng.choice(self.keys)]
        if not b.runnable or r.core.role is not Role.LEADER or r.core.high_watermark <= r.log_start:
            return
        offset = self.rng.randint(r.log_start + 1, r.core.high_watermark)
        self.touched.add(r.key)
        r.core.advance_log_start_offset(offset)
        r.delete_below(offset)
        self.stats["deleted_records"] += 1
        self.log(f"broker {b.broker_id}: {name(r.key)} delete records below {offset}")

    # ---- invariants --------------------------------------------------------------------------
    def _check_isr_holds_acked(self, key: Key, isr, only: tuple[int, int] | None = None) -> None:
        """I3b: every replica in the controller's ISR holds every acknowledged write (checked when
        the ISR changes and when a write is acknowledged)."""
        writes = [only] if only is not None else self.acked[key].items()
        for b in isr:
            r = self.brokers[b].replicas[key]
            log = r.log
            for write_id, offset in writes:
                if offset < r.log_start:
                    continue  # deleted on purpose
                if offset >= len(log) or log[offset][1] != write_id:
                    self.fail(f"I3: acknowledged write {write_id} at offset {offset} of {name(key)} is not on "
                              f"broker {b}, a member of the controller's ISR {list(isr)}")

    def check(self) -> None:
        """The invariants of every partition this step may have changed (a step that only moves
        the clock or the network changes none)."""
        touched = self.touched
        if touched or self.check_all:
            for key in self.keys:
                if key in touched or self.check_all:
                    self._check_partition(key)
            touched.clear()

    def _check_partition(self, key: Key) -> None:
        committed = self.committed[key]
        brokers = self.broker_list
        for b in brokers:
            r = b.replicas[key]
            core, log = r.core, r.log
            leo, hw = len(log), core.high_watermark
            if leo != core.log_end_offset:
                self.fail(f"I6: broker {b.broker_id} log of {name(key)} has {leo} entries, core says "
                          f"{core.log_end_offset}")
            if hw > leo:
                self.fail(f"I4: broker {b.broker_id} HW {hw} of {name(key)} above its LEO {core.log_end_offset}")
            if core.log_start_offset != r.log_start:
                self.fail(f"I6: broker {b.broker_id} log of {name(key)} starts at {r.log_start}, core says "
                          f"{core.log_start_offset}")
            if leo > r.log_start and core.epochs.epoch_for_offset(leo - 1) != log[-1][0]:
                self.fail(f"I6: broker {b.broker_id} epoch cache {core.epochs.entries()} of {name(key)} disagrees "
                          f"with its log")
            if core.role is Role.LEADER and b.alive:
                # (a replica leads one leader epoch at most once; a restart may resume it)
                epoch, last = r.leader_hw
                if epoch == core.leader_epoch and hw < last:
                    self.fail(f"I4: leader {b.broker_id} HW of {name(key)} went back from {last} to {hw}")
                r.leader_hw = (core.leader_epoch, hw)
                for o in range(len(committed), hw):
                    if log[o] is None:
                        self.fail(f"I2: leader {b.broker_id} exposes offset {o} of {name(key)} below its HW, but "
                                  f"that record was deleted before any leader committed it")
                    committed.append(log[o])
        for b in brokers:
            r = b.replicas[key]
            log = r.log
            hw = min(r.core.high_watermark, len(log))
            if hw <= r.verified_upto:
                continue  # (verified_upto <= len(committed), which never shrinks)
            if hw > len(committed):
                self.fail(f"I2: broker {b.broker_id} has HW {hw} of {name(key)} but only {len(committed)} offsets "
                          f"were ever committed by a leader")
            for o in range(max(r.verified_upto, r.log_start), hw):
                if log[o] != committed[o]:
                    self.fail(f"I2: broker {b.broker_id} has {log[o]} at offset {o} of {name(key)}, below its HW "
                              f"{hw}, but {committed[o]} was committed there")
            r.verified_upto = hw
        p = self.controller.partitions[key]
        if p.leader != NO_LEADER and self.checked_leader[key] != (p.leader, p.leader_epoch):
            b = self.brokers[p.leader]
            r = b.replicas[key]
            if b.alive and r.core.role is Role.LEADER and r.core.leader_epoch == p.leader_epoch:
                self.checked_leader[key] = (p.leader, p.leader_epoch)
                self.stats["leaders"] += 1
                for write_id, offset in self.acked[key].items():
                    if offset < r.log_start:
                        continue  # deleted on purpose
                    if offset >= len(r.log) or r.log[offset][1] != write_id:
                        self.fail(f"I3: acknowledged write {write_id} at offset {offset} of {name(key)} is missing "
                                  f"on the new leader {p.leader} (epoch {p.leader_epoch})")


def run_seed(seed: int, steps: int, *, verbose: bool = False) -> Simulation:
    return Simulation(seed, verbose=verbose).run(steps)
