"""The controller's replication state machine: broker liveness, partition leaders, leader epochs,
partition epochs and ISRs, Ray-free and clock-free.

Kafka's KRaft ReplicationControlManager/PartitionChangeBuilder/BrokerHeartbeatManager, reduced to
what Kray needs. Like ControllerCore, every command validates, then returns the metadata records
that express its effect; `apply` is the only place state changes (commands apply their own records
at once, as ControllerCore._commit does), so replaying the metadata log rebuilds the same state.
The shell appends the records to the metadata log *before* telling any broker.

Records (dicts with a "type", like ControllerCore's):
  {"type": "broker_registration", "broker_id", "broker_epoch"}  a broker (re)starts: new epoch, fenced
  {"type": "unfence_broker", "broker_id", "broker_epoch"}       it heartbeats: may lead and join ISRs
  {"type": "fence_broker", "broker_id", "broker_epoch"}         session expired / node died
  {"type": "partition_change", "partition": key, "leader", "leader_epoch", "partition_epoch",
   "isr", "replicas", "adding", "removing"}                     Kafka's PartitionChangeRecord (full state;
                                                                adding/removing: a reassignment's, absent
                                                                in records written before reassignments)
A partition key is whatever the owner uses (e.g. [topic_id bytes, index]); keys are kept as tuples.

Semantics (as KRaft's):
* a registered broker starts fenced and is unfenced by its first heartbeat with its current broker
  epoch; a heartbeat with another epoch answers STALE_BROKER_EPOCH; no heartbeat for
  `broker.session.timeout.ms` fences it, as does a reported node death or a re-registration (a new
  incarnation);
* fencing a broker removes it from every ISR (except the last member: an ISR never becomes empty,
  so the last in-sync replica can lead again cleanly when it returns) and moves leadership away from
  it: to the first replica (assignment order) that is in the new ISR and unfenced; else to no one
  (leader -1) unless `unclean.leader.election.enable`, which picks the first unfenced replica and
  makes it the whole ISR;
* every change bumps the partition epoch; a leader change bumps the leader epoch too;
* unfencing a broker elects a leader for leaderless partitions it can lead;
* AlterPartition (from the leader, with its broker epoch, leader epoch, partition epoch and a
  proposal id; each proposal id is decided once, duplicates get the same answer):
  STALE_BROKER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER (the request is newer than our
  state), FENCED_LEADER_EPOCH (older leader epoch), INVALID_REQUEST (not the leader, or an ISR not
  within the replicas / without the leader), INVALID_UPDATE_VERSION (older partition epoch),
  INELIGIBLE_REPLICA (a fenced or unregistered broker in the new ISR); else the change is made and
  the new state answered;
* preferred leader election (`auto.leader.rebalance.enable`): a partition whose first replica is
  in its ISR, unfenced and not leading gets it back as leader;
* reassignment (KIP-455, Kafka's PartitionReassignmentReplicas): a target replica set makes the
  replicas target + the removed ones, with `adding` and `removing` set; every change after that
  (an ISR expansion by AlterPartition, a fence) completes it once the ISR without the removing
  replicas holds every remaining replica: replicas = target, removing replicas leave the ISR, the
  leader moves if it was removed (to the first target replica in the ISR and unfenced), and the
  leader epoch is bumped since replicas left. A cancel reverts to the original replicas (the ISR
  without the adding ones; if none is left, only by an unclean election, when the topic allows it);
* ElectLeaders (Kafka's electLeader): PREFERRED makes the first replica leader when it is in the
  ISR and unfenced (ELECTION_NOT_NEEDED when it leads, PREFERRED_LEADER_NOT_AVAILABLE when it
  cannot); UNCLEAN elects a leader for a leaderless partition, an unfenced replica outside the ISR
  if no ISR member is (ELECTION_NOT_NEEDED when it has a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

from protocol.errors import ErrorCode

NO_LEADER = -1
DEFAULT_BROKER_SESSION_TIMEOUT_MS = 9000  # broker.session.timeout.ms
DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS = 2000  # broker.heartbeat.interval.ms
RECORD_TYPES = frozenset({"broker_registration", "unfence_broker", "fence_broker", "partition_change"})
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types (Kafka's ElectionType)


@dataclass
class BrokerLiveness:
    broker_id: int
    broker_epoch: int
    fenced: bool = True
    last_heartbeat_ms: int | None = None


@dataclass
class ControllerPartition:
    """The controller's view of one partition when the owner brings none of its own (KRaft's
    PartitionRegistration; ControllerCore uses its PartitionState objects instead)."""
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    adding: list[int] = field(default_factory=list)  # an ongoing reassignment's replicas being added
    removing: list[int] = field(default_factory=list)  # ... and being removed


def reassigning(p: Any) -> bool:
    """Whether a reassignment of partition `p` is in progress (Kafka's isReassignmentInProgress)."""
    return bool(getattr(p, "adding", None) or getattr(p, "removing", None))


def completed_reassignment(replicas: list[int], adding: list[int], removing: list[int],
                           isr: list[int]) -> tuple[list[int], list[int]] | None:
    """Kafka's maybeCompleteReassignment: (replicas, ISR) once a reassignment in progress can
    complete with ISR `isr`, else None: the ISR less the removing replicas holds every replica
    that stays (and is not empty)."""
    if not adding and not removing:
        return None
    new_isr = [r for r in isr if r not in removing]
    new_replicas = [r for r in replicas if r not in removing]
    if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def reassignment_target(current: list[int], target: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Kafka's PartitionReassignmentReplicas(current, target): (replicas, adding, removing); the
    replicas are the target's, then the removed ones; adding and removing are sorted."""
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return list(target) + removing, adding, removing


def assignment_problem(target: list[int], registered: Iterable[int]) -> str | None:
    """Kafka's validateManualPartitionAssignment (its words): an empty list, an unregistered broker
    or a broker named twice (checked in broker id order) is INVALID_REPLICA_ASSIGNMENT."""
    if not target:
        return "The manual partition assignment includes an empty replica list."
    registered = set(registered)
    previous = None
    for broker_id in sorted(target):
        if broker_id not in registered:
            return (f"The manual partition assignment includes broker {broker_id}, but no such broker is "
                    f"registered.")
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {previous} more than once."
        previous = broker_id
    return None


def partition_snapshot(p: Any) -> dict[str, Any]:
    """The state an AlterPartition response carries (works for any partition object)."""
    return {"leader": p.leader, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
            "isr": list(p.isr), "replicas": list(p.replicas)}


@dataclass
class Decision:
    """A command's answer: error code (0 on success), the records to append, and for
    AlterPartition the partition's state after the change."""
    error_code: int = ErrorCode.NONE
    records: list[dict[str, Any]] = field(default_factory=list)
    partition: dict[str, Any] | None = None
    broker_epoch: int = -1


class ReplicationControl:
    def __init__(self, *, broker_session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS,
                 unclean_leader_election_enable: bool | Callable[[Hashable], bool] = False,
                 on_apply: Callable[[dict[str, Any]], None] | None = None):
        """`unclean_leader_election_enable`: a bool, or a function of the partition key (per-topic
        configs). `partitions` may hold the owner's own partition objects (anything with replicas,
        leader, leader_epoch, partition_epoch and isr attributes): records update them in place.
        `on_apply` is called after each applied record (the owner bumps its metadata version)."""
        self.broker_session_timeout_ms = broker_session_timeout_ms
        self._unclean = (unclean_leader_election_enable if callable(unclean_leader_election_enable)
                         else (lambda key, v=bool(unclean_leader_election_enable): v))
        self._on_apply = on_apply
        self.brokers: dict[int, BrokerLiveness] = {}
        self.partitions: dict[Hashable, Any] = {}
        self.next_broker_epoch = 1
        # the last AlterPartition answered per partition: (broker id, broker epoch, proposal id, decision)
        self._answered: dict[Hashable, tuple[int, int, int, Decision]] = {}

    # ---- queries -------------------------------------------------------------------------
    def is_live(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and not b.fenced

    def partitions_led_by(self, broker_id: int) -> list[Hashable]:
        return [k for k, p in self.partitions.items() if p.leader == broker_id]

    # ---- broker liveness -----------------------------------------------------------------
    def register_broker(self, broker_id: int, now_ms: int) -> Decision:
        """A broker process (re)starts. A previous incarnation is fenced first."""
        records = []
        old = self.brokers.get(broker_id)
        if old is not None and not old.fenced:
            records += self._commit(self._fence_records(broker_id))
        epoch = self.next_broker_epoch
        records += self._commit([{"type": "broker_registration", "broker_id": broker_id, "broker_epoch": epoch}])
        self.brokers[broker_id].last_heartbeat_ms = now_ms
        return Decision(records=records, broker_epoch=epoch)

    def heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> Decision:
        b = self.brokers.get(broker_id)
        if b is None or b.broker_epoch != broker_epoch:
            return Decision(ErrorCode.STALE_BROKER_EPOCH)
        b.last_heartbeat_ms = now_ms
        if not b.fenced:
            return Decision(broker_epoch=broker_epoch)
        records = self._commit([{"type": "unfence_broker", "broker_id": broker_id, "broker_epoch": broker_epoch}])
        for key, p in self.partitions.items():
            if p.leader == NO_LEADER and broker_id in p.replicas:
                records += self._commit(self._elect(key, p))
        return Decision(records=records, broker_epoch=broker_epoch)

    def tick(self, now_ms: int) -> Decision:
        """Fence brokers whose session expired (no heartbeat for broker.session.timeout.ms)."""
        records = []
        for b in list(self.brokers.values()):
            if not b.fenced and b.last_heartbeat_ms is not None \
                    and now_ms - b.last_heartbeat_ms > self.broker_session_timeout_ms:
                records += self._commit(self._fence_records(b.broker_id))
        return Decision(records=records)

    def broker_died(self, broker_id: int) -> Decision:
        """Ray reported the node (or the broker's process) dead: fence without waiting."""
        b = self.brokers.get(broker_id)
        if b is None or b.fenced:
            return Decision()
        return Decision(records=self._commit(self._fence_records(broker_id)))

    def _fence_records(self, broker_id: int) -> list[dict[str, Any]]:
        b = self.brokers[broker_id]
        out = [{"type": "fence_broker", "broker_id": broker_id, "broker_epoch": b.broker_epoch}]
        live = {i for i, x in self.brokers.items() if not x.fenced and i != broker_id}
        for key, p in self.partitions.items():
            if broker_id not in p.isr and p.leader != broker_id:
                continue
            isr = [r for r in p.isr if r != broker_id] or list(p.isr)  # never empty the ISR
            change = self._change(key, p, isr=isr, live=live)
            if change is not None:
                out.append(change)
        return out

    # ---- partitions ----------------------------------------------------------------------
    def create_partition(self, key: Hashable, replicas: Iterable[int]) -> Decision:
        """A new partition: leader = first live replica (or -1), ISR = all replicas (they are all
        empty, so all in sync)."""
        replicas = list(replicas)
        if key in self.partitions:
            return Decision(ErrorCode.INVALID_REQUEST)
        if not replicas or len(set(replicas)) != len(replicas):
            return Decision(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        leader = next((r for r in replicas if self.is_live(r)), NO_LEADER)
        record = {"type": "partition_change", "partition": key, "leader": leader, "leader_epoch": 0,
                  "partition_epoch": 0, "isr": list(replicas), "replicas": list(replicas)}
        return Decision(records=self._commit([record]))

    def alter_partition(self, broker_id: int, broker_epoch: int, key: Hashable, *, leader_epoch: int,
                        partition_epoch: int, new_isr: Iterable[int], proposal_id: int = -1) -> Decision:
        """With a `proposal_id` (>= 0) each proposal is decided once: a duplicate or resend of the
        last proposal answered for this partition gets the same answer and changes nothing, an
        older one is refused (INVALID_UPDATE_VERSION). So a leader may trust a refusal: no late
        copy of the proposal will be applied after it. (The memory of answers is volatile: after a
        controller restart, copies sent to the previous incarnation are gone with its connections.)"""
        if proposal_id >= 0:
            last = self._answered.get(key)
            if last is not None and last[:2] == (broker_id, broker_epoch):
                if proposal_id == last[2]:
                    return Decision(last[3].error_code, [], last[3].partition)
                if proposal_id < last[2]:
                    return Decision(ErrorCode.INVALID_UPDATE_VERSION)
            decision = self._alter_partition(broker_id, broker_epoch, key, leader_epoch=leader_epoch,
                                             partition_epoch=partition_epoch, new_isr=new_isr)
            if key in self.partitions:
                self._answered[key] = (broker_id, broker_epoch, proposal_id, decision)
            return decision
        return self._alter_partition(broker_id, broker_epoch, key, leader_epoch=leader_epoch,
                                     partition_epoch=partition_epoch, new_isr=new_isr)

    def _alter_partition(self, broker_id: int, broker_epoch: int, key: Hashable, *, leader_epoch: int,
                         partition_epoch: int, new_isr: Iterable[int]) -> Decision:
        b = self.brokers.get(broker_id)
        if b is None or b.broker_epoch != broker_epoch:
            return Decision(ErrorCode.STALE_BROKER_EPOCH)
        p = self.partitions.get(key)
        if p is None:
            return Decision(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if leader_epoch > p.leader_epoch or partition_epoch > p.partition_epoch:
            return Decision(ErrorCode.NOT_CONTROLLER)
        if leader_epoch < p.leader_epoch:
            return Decision(ErrorCode.FENCED_LEADER_EPOCH)
        if broker_id != p.leader:
            return Decision(ErrorCode.INVALID_REQUEST)
        if partition_epoch < p.partition_epoch:
            return Decision(ErrorCode.INVALID_UPDATE_VERSION)
        isr = list(dict.fromkeys(new_isr))
        if not isr or any(r not in p.replicas for r in isr) or p.leader not in isr:
            return Decision(ErrorCode.INVALID_REQUEST)
        if any(not self.is_live(r) for r in isr):
            return Decision(ErrorCode.INELIGIBLE_REPLICA)
        isr = [r for r in p.replicas if r in isr]  # assignment order, as a canonical form
        if isr == p.isr:
            return Decision(partition=partition_snapshot(p))
        live = {i for i, x in self.brokers.items() if not x.fenced}
        change = self._change(key, p, isr=isr, live=live)  # (completes a reassignment it makes possible)
        records = self._commit([change] if change is not None else [])
        p = self.partitions[key]
        return Decision(ErrorCode.NEW_LEADER_ELECTED if p.leader != broker_id else ErrorCode.NONE,
                        records, partition_snapshot(p))

    def balance_leaders(self) -> Decision:
        """Preferred leader election (auto.leader.rebalance.enable): the first replica leads when
        it is in the ISR and unfenced."""
        records = []
        for key, p in self.partitions.items():
            preferred = p.replicas[0]
            if p.leader != preferred and preferred in p.isr and self.is_live(preferred):
                records += self._commit([self._record(key, p, leader=preferred, isr=p.isr,
                                                      leader_epoch=p.leader_epoch + 1)])
        return Decision(records=records)

    def _elect(self, key: Hashable, p: ControllerPartition) -> list[dict[str, Any]]:
        live = {i for i, x in self.brokers.items() if not x.fenced}
        change = self._change(key, p, isr=list(p.isr), live=live)
        return [change] if change is not None else []

    def _change(self, key: Hashable, p: ControllerPartition, *, isr: list[int], live: set[int],
                replicas: list[int] | None = None, adding: list[int] | None = None,
                removing: list[int] | None = None, election: str = "online") -> dict[str, Any] | None:
        """PartitionChangeBuilder: the target replicas, adding, removing and ISR (default: as they
        are), a reassignment completed if the target ISR allows; then the leader: `online` keeps a
        valid leader (in the ISR, unfenced), else the first valid replica in assignment order, else
        (unclean, by the topic's config or `election` "unclean") the first live replica, else no
        leader; `preferred` tries the first replica before the current leader. The leader epoch
        goes up with a new leader, or when replicas leave the partition. None: nothing changes."""
        replicas = list(p.replicas if replicas is None else replicas)
        adding = list(getattr(p, "adding", []) if adding is None else adding)
        removing = list(getattr(p, "removing", []) if removing is None else removing)
        completed = completed_reassignment(replicas, adding, removing, isr)
        if completed is not None:
            (replicas, isr), adding, removing = completed, [], []
        valid = [r for r in replicas if r in isr and r in live]
        leader = p.leader
        if election == "preferred" and valid and valid[0] == replicas[0]:
            leader = replicas[0]
        elif leader not in valid:
            leader = valid[0] if valid else NO_LEADER
            if leader == NO_LEADER and election != "preferred" and (election == "unclean" or self._unclean(key)):
                leader = next((r for r in replicas if r in live), NO_LEADER)
                if leader != NO_LEADER:
                    isr = [leader]
        if (leader, isr, replicas, adding, removing) == (p.leader, p.isr, p.replicas, getattr(p, "adding", []),
                                                         getattr(p, "removing", [])):
            return None
        bump = leader != p.leader or not set(p.replicas) <= set(replicas)
        return self._record(key, p, leader=leader, isr=isr, leader_epoch=p.leader_epoch + (1 if bump else 0),
                            replicas=replicas, adding=adding, removing=removing)

    @staticmethod
    def _record(key: Hashable, p: ControllerPartition, *, leader: int, isr: list[int], leader_epoch: int,
                replicas: list[int] | None = None, adding: list[int] | None = None,
                removing: list[int] | None = None) -> dict[str, Any]:
        return {"type": "partition_change", "partition": key, "leader": leader, "leader_epoch": leader_epoch,
                "partition_epoch": p.partition_epoch + 1, "isr": list(isr),
                "replicas": list(p.replicas if replicas is None else replicas),
                "adding": list(getattr(p, "adding", []) if adding is None else adding),
                "removing": list(getattr(p, "removing", []) if removing is None else removing)}

    # ---- reassignment and elections (AlterPartitionReassignments, ElectLeaders) ------------
    def reassign(self, key: Hashable, target: list[int] | None, *, allow_replication_factor_change: bool = True,
                 name: str = "") -> tuple[int, str | None, list[dict[str, Any]]]:
        """Start, change or (`target` None) cancel partition `key`'s reassignment, as Kafka's
        alterPartitionReassignment: (error code, message, records). The records are not applied:
        a request's are applied together once every partition of it was decided (see `commit`)."""
        p = self.partitions[key]
        live = {i for i, x in self.brokers.items() if not x.fenced}
        if target is None:
            if not reassigning(p):
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.", []
            original = [r for r in p.replicas if r not in p.adding]
            isr = [r for r in p.isr if r not in p.adding]
            unclean = not isr
            if unclean:
                if not self._unclean(key):
                    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unable to revert partition assignment for {name} "
                            "because it would require an unclean leader election.", [])
                isr = original[:1]
            change = self._change(key, p, isr=isr, live=live, replicas=original, adding=[], removing=[],
                                  election="unclean" if self._unclean(key) else "online")
            return ErrorCode.NONE, None, [change] if change is not None else []
        problem = assignment_problem(target, self.brokers)
        if problem:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem, []
        if not allow_replication_factor_change:
            original = [r for r in p.replicas if r not in getattr(p, "adding", [])]
            if len(target) != len(original):
                return (ErrorCode.INVALID_REPLICATION_FACTOR, f"The replication factor is changed from "
                        f"{len(original)} to {len(target)} but allowReplicationFactorChange is false.", [])
        replicas, adding, removing = reassignment_target(p.replicas, target)
        change = self._change(key, p, isr=list(p.isr), live=live, replicas=replicas, adding=adding,
                              removing=removing)
        return ErrorCode.NONE, None, [change] if change is not None else []

    def elect(self, key: Hashable, election_type: int) -> tuple[int, list[dict[str, Any]]]:
        """ElectLeaders for one partition (Kafka's electLeader): (error code, records, not applied)."""
        p = self.partitions[key]
        if (election_type == PREFERRED and p.leader == p.replicas[0]) or \
                (election_type == UNCLEAN and p.leader != NO_LEADER):
            return ErrorCode.ELECTION_NOT_NEEDED, []
        live = {i for i, x in self.brokers.items() if not x.fenced}
        change = self._change(key, p, isr=list(p.isr), live=live,
                              election="preferred" if election_type == PREFERRED else "unclean")
        if change is None:
            return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election_type == PREFERRED
                    else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE), []
        return ErrorCode.NONE, [change]

    def commit(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply records that `reassign` or `elect` decided."""
        return self._commit(records)

    # ---- replay --------------------------------------------------------------------------
    def apply(self, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind == "broker_registration":
            self.brokers[record["broker_id"]] = BrokerLiveness(record["broker_id"], record["broker_epoch"])
            self.next_broker_epoch = max(self.next_broker_epoch, record["broker_epoch"] + 1)
        elif kind == "unfence_broker":
            b = self.brokers[record["broker_id"]]
            if b.broker_epoch == record["broker_epoch"]:
                b.fenced = False
        elif kind == "fence_broker":
            b = self.brokers[record["broker_id"]]
            if b.broker_epoch == record["broker_epoch"]:
                b.fenced = True
        elif kind == "partition_change":
            key = _key(record["partition"])
            p = self.partitions.get(key)
            if p is None:
                p = self.partitions[key] = ControllerPartition(list(record["replicas"]), record["leader"],
                                                                 record["leader_epoch"], record["partition_epoch"],
                                                                 list(record["isr"]))
            else:
                p.replicas, p.leader, p.isr = list(record["replicas"]), record["leader"], list(record["isr"])
                p.leader_epoch, p.partition_epoch = record["leader_epoch"], record["partition_epoch"]
            p.adding, p.removing = list(record.get("adding", ())), list(record.get("removing", ()))
        else:
            raise ValueError(f"unknown replication record type {kind!r}")
        if self._on_apply is not None:
            self._on_apply(record)

    def finish_replay(self, now_ms: int) -> None:
        """After a controller restart: every unfenced broker gets a fresh session from now."""
        for b in self.brokers.values():
            b.last_heartbeat_ms = now_ms

    def _commit(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for record in records:
            self.apply(record)
        return records


def _key(raw: Any) -> Hashable:
    """msgpack turns tuples into lists: keys come back as tuples."""
    return tuple(raw) if isinstance(raw, list) else raw
