"""A deterministic simulation of Kray's replication and election cores (issue 8, item 7).

Three brokers (each: an in-memory log of (leader epoch, write id) entries, a ReplicaCore with its
leader-epoch cache), one controller (ReplicationControl), producers (acks=all and acks=1) and
consumers, all stepped by one seeded scheduler. Each seed first draws its own mix of actions
(swarm testing), then each step picks one action with `random.Random(seed)`: deliver any in-flight
message (so messages are reordered freely), drop or duplicate one,
advance the clock, tick a broker or the controller, produce, consume, crash / restart / pause /
resume a broker, restart the controller. Messages to a paused broker wait; messages to a crashed
broker (or to and from the controller when it restarts) are lost.

Durability assumption (stated, kept simple): every append and every truncation is fsynced before
the broker does anything else, so a crash loses only volatile state (role, follower states,
waiters, in-flight fetches, broker epoch); the log, its leader-epoch cache (rebuilt from the log's
epochs, as Kafka does without a checkpoint) and the last high watermark survive. The controller's
metadata log (a list, appended before anything is published) survives its restarts; its
heartbeat times and its memory of AlterPartition answers do not.

Invariants, checked after every step (see `check`):
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
Records deleted on purpose (DeleteRecords on a leader, below its high watermark; followers follow
the leader's log start) are exempt from I2/I3 below each replica's log start.
"""
from __future__ import annotations

import bisect
import collections
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from actors.controller.elections import NO_LEADER, ReplicationControl
from actors.partition.epoch_cache import LeaderEpochCache
from actors.partition.replication import (
    ACKS_ALL, AlterPartitionResponse, BatchSpan, FollowerAction, PartitionRegistration, ReplicaCore,
    ReplicationConfig, Role,
)
from protocol.errors import ErrorCode

KEY = ("orders", 0)
BROKERS = (0, 1, 2)
CONTROLLER = "controller"
CLIENT = "client"

SESSION_TIMEOUT_MS = 400        # broker.session.timeout.ms (scaled down)
HEARTBEAT_INTERVAL_MS = 100     # broker.heartbeat.interval.ms (scaled down)
REPLICA_LAG_TIME_MAX_MS = 250   # replica.lag.time.max.ms (scaled down)
MIN_INSYNC_REPLICAS = 2
FETCH_RETRY_MS = 150            # a follower re-sends a fetch that got no answer after this
REQUEST_TIMEOUT_MS = 800        # acks=all waiters time out after this
FETCH_BATCH_MAX = 16            # entries per follower fetch answer
TIMELINE_STEPS = 60

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


class InvariantViolation(AssertionError):
    pass


@dataclass
class Message:
    dst: Any
    kind: str
    body: tuple
    src: Any = None


@dataclass
class Broker:
    broker_id: int
    # (leader epoch, write id) per offset; None below the log start (deleted records)
    log: list[tuple[int, int] | None] = field(default_factory=list)
    log_start: int = 0
    hw_checkpoint: int = 0
    core: ReplicaCore | None = None
    alive: bool = True
    paused: bool = False
    broker_epoch: int = -1
    fetch_in_flight: tuple | None = None          # (request, sent_ms)
    waiters: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # waiter -> (write, offset, since)
    verified_upto: int = 0                         # I2: offsets below this were checked
    last_heartbeat_ms: int = -10**9

    def start(self, config: ReplicationConfig) -> None:
        epochs = LeaderEpochCache()
        for offset in range(self.log_start, len(self.log)):
            epochs.assign(self.log[offset][0], offset)
        self.core = ReplicaCore(self.broker_id, log_end_offset=len(self.log), log_start_offset=self.log_start,
                                high_watermark=self.hw_checkpoint, epochs=epochs, config=config)
        self.broker_epoch = -1
        self.last_heartbeat_ms = -10**9
        self.fetch_in_flight = None
        self.waiters = {}

    @property
    def runnable(self) -> bool:
        return self.alive and not self.paused

    def delete_below(self, offset: int) -> None:
        """Retention / DeleteRecords: records below `offset` are gone (durably)."""
        for o in range(self.log_start, min(offset, len(self.log))):
            self.log[o] = None
        if offset > len(self.log):
            self.log.extend([None] * (offset - len(self.log)))
        self.log_start = max(self.log_start, offset)


class Simulation:
    def __init__(self, seed: int, *, verbose: bool = False, unclean_leader_election_enable: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.weights = {a: self.rng.choice(WEIGHT_CHOICES[a]) for a in ACTIONS}
        self.thresholds = list(itertools.accumulate(self.weights[a] for a in ACTIONS))
        self.verbose = verbose
        self.now_ms = 0
        self.step_no = 0
        self.config = ReplicationConfig(replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS,
                                        min_insync_replicas=MIN_INSYNC_REPLICAS)
        self._unclean = unclean_leader_election_enable
        self.controller = ReplicationControl(broker_session_timeout_ms=SESSION_TIMEOUT_MS,
                                             unclean_leader_election_enable=unclean_leader_election_enable)
        self.metadata_log: list[dict] = []
        self.brokers = {b: Broker(b) for b in BROKERS}
        self.network: list[Message] = []
        self.timeline: collections.deque[str] = collections.deque(maxlen=TIMELINE_STEPS)
        self.next_write_id = 1
        # invariant state
        self.writer_of_epoch: dict[int, int] = {}
        self.leader_of_epoch: dict[int, int] = {}
        self.committed: list[tuple[int, int]] = []
        self.acked: dict[int, int] = {}            # acks=all write id -> offset
        self.leader_hw: dict[tuple[int, int], int] = {}
        self.checked_leaders: set[tuple[int, int]] = set()
        self.stats = collections.Counter()
        self.log("mix: " + ", ".join(f"{a} {w}" for a, w in self.weights.items()))
        # the cluster starts: brokers register and heartbeat, the partition is created
        for b in self.brokers.values():
            b.start(self.config)
            decision = self.controller.register_broker(b.broker_id, self.now_ms)
            self._append_metadata(decision.records)
            b.broker_epoch = decision.broker_epoch
            self._append_metadata(self.controller.heartbeat(b.broker_id, b.broker_epoch, self.now_ms).records)
        self._append_metadata(self.controller.create_partition(KEY, BROKERS).records)
        self._publish_all()

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
                epoch, leader = record["leader_epoch"], record["leader"]
                known = self.leader_of_epoch.setdefault(epoch, leader)
                if known != leader:
                    self.fail(f"I1: the controller elected {leader} and {known} in leader epoch {epoch}")
                self.log(f"controller: {record['type']} leader={leader} epoch={epoch} "
                         f"pe={record['partition_epoch']} isr={record['isr']}")
                self._check_isr_holds_acked(record["isr"])
            else:
                self.log(f"controller: {record['type']} broker={record['broker_id']}")

    def _registration(self) -> PartitionRegistration:
        p = self.controller.partitions[KEY]
        return PartitionRegistration(p.leader, p.leader_epoch, p.partition_epoch, tuple(p.replicas), tuple(p.isr))

    def _publish_all(self) -> None:
        reg = self._registration()
        for b in BROKERS:
            self.send(CONTROLLER, b, "metadata", reg)

    def _controller_did(self, records: list[dict]) -> None:
        self._append_metadata(records)
        if any(r["type"] == "partition_change" for r in records):
            self._publish_all()

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
            deliverable = [i for i, m in enumerate(self.network) if self._deliverable(m)]
            if deliverable:
                self.deliver(self.network.pop(rng.choice(deliverable)))
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
                self.log(f"RESUME broker {b.broker_id} (role {b.core.role.value}, epoch {b.core.leader_epoch})")
            else:
                b.alive = True
                b.start(self.config)
                self.stats["restarts"] += 1
                self.log(f"RESTART broker {b.broker_id} (log end {len(b.log)}, hw {b.hw_checkpoint})")
                self.send(b.broker_id, CONTROLLER, "register", b.broker_id)
            return
        if len(down) >= 2:
            return
        b = rng.choice([x for x in self.brokers.values() if x.runnable])
        if rng.random() < 0.4:
            b.alive = False
            self.stats["crashes"] += 1
            self.log(f"CRASH broker {b.broker_id} (log end {len(b.log)}, hw {b.hw_checkpoint})")
            if rng.random() < 0.5:  # Ray reports the node's death
                self.send(None, CONTROLLER, "node_died", b.broker_id)
        else:
            b.paused = True
            self.stats["pauses"] += 1
            self.log(f"PAUSE broker {b.broker_id} (role {b.core.role.value}, epoch {b.core.leader_epoch})")

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
        self.log(f"RESTART controller (replayed {len(self.metadata_log)} records, {len(lost)} messages lost)")

    def tick_controller(self) -> None:
        self._controller_did(self.controller.tick(self.now_ms).records)
        if self.rng.random() < 0.3:
            records = self.controller.balance_leaders().records
            self.stats["preferred_elections"] += len(records)
            self._controller_did(records)
        if self.rng.random() < 0.5:
            self._publish_all()  # brokers that missed an update catch up (they read the metadata log)

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
            broker_id, epoch, request = m.body
            decision = c.alter_partition(broker_id, epoch, KEY, leader_epoch=request.leader_epoch,
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
            self.log(f"controller: alter_partition from {broker_id} {request.new_isr} -> error {decision.error_code}")
            self.send(CONTROLLER, broker_id, "alter_partition_response", request, response)

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

    def _effects(self, b: Broker, effects) -> None:
        if effects.high_watermark is not None:
            b.hw_checkpoint = b.core.high_watermark
        for waiter_id, error in effects.released:
            write_id, offset, _ = b.waiters.pop(waiter_id)
            self.send(b.broker_id, CLIENT, "produce_response", write_id, ACKS_ALL, error, offset, b.broker_id)
        if effects.alter_partition is not None:
            self.send(b.broker_id, CONTROLLER, "alter_partition", b.broker_id, b.broker_epoch,
                      effects.alter_partition)

    def tick_broker(self, b: Broker) -> None:
        core = b.core
        if b.broker_epoch >= 0 and self.now_ms - b.last_heartbeat_ms >= HEARTBEAT_INTERVAL_MS:
            b.last_heartbeat_ms = self.now_ms
            self.send(b.broker_id, CONTROLLER, "heartbeat", b.broker_id, b.broker_epoch)
        if core.role is Role.FOLLOWER:
            if b.fetch_in_flight is None or self.now_ms - b.fetch_in_flight[1] >= FETCH_RETRY_MS:
                request = core.next_fetch()
                if request is not None:
                    b.fetch_in_flight = (request, self.now_ms)
                    self.send(b.broker_id, core.leader_id, "fetch", request)
        elif core.role is Role.LEADER:
            self._effects(b, core.tick(self.now_ms))
            for waiter_id, (write_id, offset, since) in list(b.waiters.items()):
                if self.now_ms - since >= REQUEST_TIMEOUT_MS and core.cancel_waiter(waiter_id):
                    del b.waiters[waiter_id]
                    self.send(b.broker_id, CLIENT, "produce_response", write_id, ACKS_ALL,
                              ErrorCode.REQUEST_TIMED_OUT, offset, b.broker_id)

    def broker_receive(self, b: Broker, m: Message) -> None:
        core = b.core
        if m.kind == "registered":
            if b.broker_epoch < 0:
                b.broker_epoch = m.body[0]
        elif m.kind == "metadata":
            (reg,) = m.body
            before = (core.role, core.leader_epoch)
            self._effects(b, core.apply_registration(reg, self.now_ms))
            if (core.role, core.leader_epoch) != before:
                self.log(f"broker {b.broker_id}: {core.role.value} in epoch {core.leader_epoch} "
                         f"(log end {len(b.log)}, hw {core.high_watermark})")
                b.fetch_in_flight = None
        elif m.kind == "alter_partition_response":
            request, response = m.body
            self._effects(b, core.on_alter_partition_response(request, response, self.now_ms))
        elif m.kind == "fetch":
            (request,) = m.body
            answer, effects = core.handle_follower_fetch(request, self.now_ms)
            if answer.error_code:
                self.stats[f"fetch_{ErrorCode(answer.error_code).name}"] += 1
            elif answer.diverging_epoch is not None:
                self.stats["diverging_epochs"] += 1
            entries = []
            if answer.read_from is not None:
                entries = [(o, *b.log[o]) for o in range(answer.read_from,
                                                          min(len(b.log), answer.read_from + FETCH_BATCH_MAX))]
            self._effects(b, effects)
            self.send(b.broker_id, m.src, "fetch_response", request, answer, entries)
        elif m.kind == "fetch_response":
            request, answer, entries = m.body
            if b.fetch_in_flight is not None and b.fetch_in_flight[0] == request:
                b.fetch_in_flight = None
            step = core.on_fetch_response(request, answer, [BatchSpan(o, o, e) for o, e, _ in entries])
            if step.action is FollowerAction.RESET:
                self.stats["resets"] += 1
                self.log(f"broker {b.broker_id}: reset, log starts empty at {step.truncate_to}")
                b.log = []
                b.log_start = 0
                b.delete_below(step.truncate_to)
                b.verified_upto = min(b.verified_upto, step.truncate_to)
            if step.action is FollowerAction.TRUNCATE:
                self.stats["truncations"] += 1
                self.log(f"broker {b.broker_id}: truncate {len(b.log)} -> {step.truncate_to} "
                         f"(diverging {answer.diverging_epoch})")
                del b.log[step.truncate_to:]
                b.verified_upto = min(b.verified_upto, step.truncate_to)
            elif step.action is FollowerAction.APPEND:
                b.log.extend((e, w) for _, e, w in entries)
            if step.log_start_offset is not None:
                b.delete_below(step.log_start_offset)
            b.hw_checkpoint = core.high_watermark
        elif m.kind == "produce":
            write_id, acks = m.body
            self.broker_produce(b, write_id, acks)

    def broker_produce(self, b: Broker, write_id: int, acks: int) -> None:
        core = b.core
        error = core.check_produce(acks)
        if error:
            self.stats[f"produce_{ErrorCode(error).name}"] += 1
            self.send(b.broker_id, CLIENT, "produce_response", write_id, acks, error, -1, b.broker_id)
            return
        offset = len(b.log)
        b.log.append((core.leader_epoch, write_id))
        writer = self.writer_of_epoch.setdefault(core.leader_epoch, b.broker_id)
        if writer != b.broker_id:
            self.fail(f"I1: brokers {writer} and {b.broker_id} both accepted writes in leader epoch {core.leader_epoch}")
        if self.leader_of_epoch.get(core.leader_epoch) != b.broker_id:
            self.fail(f"I1: broker {b.broker_id} wrote in epoch {core.leader_epoch}, whose elected leader is "
                      f"{self.leader_of_epoch.get(core.leader_epoch)}")
        if core.leader_epoch < self.controller.partitions[KEY].leader_epoch:
            self.stats["stale_leader_appends"] += 1  # a deposed leader that does not know it yet
        self.log(f"broker {b.broker_id}: append write {write_id} at {offset} epoch {core.leader_epoch} acks={acks}")
        self._effects(b, core.on_leader_append(len(b.log), self.now_ms))
        if acks != ACKS_ALL:
            self.send(b.broker_id, CLIENT, "produce_response", write_id, acks, ErrorCode.NONE, offset, b.broker_id)
            return
        waiter_id, error = core.register_waiter(offset + 1)
        if error is not None:
            self.send(b.broker_id, CLIENT, "produce_response", write_id, acks, error, offset, b.broker_id)
        else:
            b.waiters[waiter_id] = (write_id, offset, self.now_ms)

    # ---- clients -----------------------------------------------------------------------------
    def produce(self, acks: int) -> None:
        leader = self.controller.partitions[KEY].leader
        target = leader if leader != NO_LEADER and self.rng.random() < 0.75 else self.rng.choice(BROKERS)
        write_id = self.next_write_id
        self.next_write_id += 1
        self.send(CLIENT, target, "produce", write_id, acks)

    def client_receive(self, m: Message) -> None:
        write_id, acks, error, offset, broker_id = m.body
        if error:
            self.stats[f"client_{ErrorCode(error).name}"] += 1
        if acks != ACKS_ALL or error != ErrorCode.NONE or write_id in self.acked:
            return
        if offset >= len(self.committed) or self.committed[offset][1] != write_id:
            self.fail(f"I3: write {write_id} acknowledged at offset {offset} by broker {broker_id} "
                      f"but the committed log has {self.committed[offset] if offset < len(self.committed) else None}")
        self.acked[write_id] = offset
        self.stats["acked"] += 1
        self._check_isr_holds_acked(self.controller.partitions[KEY].isr, only=(write_id, offset))
        self.log(f"client: write {write_id} acknowledged (acks=all) at {offset} by broker {broker_id}")

    def consume(self) -> None:
        """A consumer fetches from a broker that believes it leads (perhaps a stale one)."""
        b = self.brokers[self.rng.choice(BROKERS)]
        if not b.runnable or b.core.role is not Role.LEADER or b.core.high_watermark == 0:
            return
        hw = b.core.high_watermark
        if hw <= b.log_start:
            return
        offset = self.rng.randrange(b.log_start, hw)
        if offset >= hw:
            self.fail(f"I5: consumer read offset {offset} at or above the high watermark {hw}")
        if offset >= len(self.committed) or b.log[offset] != self.committed[offset]:
            self.fail(f"I5: consumer read {b.log[offset]} at {offset} from broker {b.broker_id}: not committed")
        self.stats["consumed"] += 1

    def delete_records(self) -> None:
        """DeleteRecords on a broker that believes it leads: its log start moves up to at most its HW."""
        b = self.brokers[self.rng.choice(BROKERS)]
        if not b.runnable or b.core.role is not Role.LEADER or b.core.high_watermark <= b.log_start:
            return
        offset = self.rng.randint(b.log_start + 1, b.core.high_watermark)
        b.core.advance_log_start_offset(offset)
        b.delete_below(offset)
        self.stats["deleted_records"] += 1
        self.log(f"broker {b.broker_id}: delete records below {offset}")

    # ---- invariants --------------------------------------------------------------------------
    def _check_isr_holds_acked(self, isr, only: tuple[int, int] | None = None) -> None:
        """I3b: every replica in the controller's ISR holds every acknowledged write (checked when
        the ISR changes and when a write is acknowledged)."""
        writes = [only] if only is not None else self.acked.items()
        for r in isr:
            broker = self.brokers[r]
            log = broker.log
            for write_id, offset in writes:
                if offset < broker.log_start:
                    continue  # deleted on purpose
                if offset >= len(log) or log[offset][1] != write_id:
                    self.fail(f"I3: acknowledged write {write_id} at offset {offset} is not on broker {r}, "
                              f"a member of the controller's ISR {list(isr)}")

    def check(self) -> None:
        committed = self.committed
        for b in self.brokers.values():
            core = b.core
            if len(b.log) != core.log_end_offset:
                self.fail(f"I6: broker {b.broker_id} log has {len(b.log)} entries, core says {core.log_end_offset}")
            if core.high_watermark > core.log_end_offset:
                self.fail(f"I4: broker {b.broker_id} HW {core.high_watermark} above its LEO {core.log_end_offset}")
            if core.log_start_offset != b.log_start:
                self.fail(f"I6: broker {b.broker_id} log starts at {b.log_start}, core says {core.log_start_offset}")
            if len(b.log) > b.log_start and core.epochs.epoch_for_offset(len(b.log) - 1) != b.log[-1][0]:
                self.fail(f"I6: broker {b.broker_id} epoch cache {core.epochs.entries()} disagrees with its log")
            if core.role is Role.LEADER and b.alive:
                key = (b.broker_id, core.leader_epoch)
                last = self.leader_hw.get(key, -1)
                if core.high_watermark < last:
                    self.fail(f"I4: leader {b.broker_id} HW went back from {last} to {core.high_watermark}")
                self.leader_hw[key] = core.high_watermark
                for o in range(len(committed), core.high_watermark):
                    if b.log[o] is None:
                        self.fail(f"I2: leader {b.broker_id} exposes offset {o} below its HW, but that record "
                                  f"was deleted before any leader committed it")
                    committed.append(b.log[o])
        for b in self.brokers.values():
            hw = min(b.core.high_watermark, len(b.log))
            if hw > len(committed):
                self.fail(f"I2: broker {b.broker_id} has HW {hw} but only {len(committed)} offsets were "
                          f"ever committed by a leader")
            for o in range(max(b.verified_upto, b.log_start), hw):
                if b.log[o] != committed[o]:
                    self.fail(f"I2: broker {b.broker_id} has {b.log[o]} at offset {o}, below its HW {hw}, "
                              f"but {committed[o]} was committed there")
            b.verified_upto = max(b.verified_upto, hw)
        p = self.controller.partitions[KEY]
        if p.leader != NO_LEADER:
            b = self.brokers[p.leader]
            key = (p.leader, p.leader_epoch)
            if (b.alive and b.core.role is Role.LEADER and b.core.leader_epoch == p.leader_epoch
                    and key not in self.checked_leaders):
                self.checked_leaders.add(key)
                self.stats["leaders"] += 1
                for write_id, offset in self.acked.items():
                    if offset < b.log_start:
                        continue  # deleted on purpose
                    if offset >= len(b.log) or b.log[offset][1] != write_id:
                        self.fail(f"I3: acknowledged write {write_id} at offset {offset} is missing on the new "
                                  f"leader {p.leader} (epoch {p.leader_epoch})")


def run_seed(seed: int, steps: int, *, verbose: bool = False) -> Simulation:
    return Simulation(seed, verbose=verbose).run(steps)
