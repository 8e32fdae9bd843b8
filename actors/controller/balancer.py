"""The balancer's pure core: which partition moves next, and which leaders to elect, so that replicas and
leaders end spread evenly over the brokers that may hold them, and brokers being drained end with none.

Its inputs are the partitions as the metadata has them (each one's replicas, leader and ISR, whether a
reassignment of it runs, and where known its size in bytes and its produce rate), the brokers that may take
replicas, the brokers being drained, and how many moves may run at once. Its output is a `BalancePlan`:
reassignments (target replica lists, as AlterPartitionReassignments takes them) and preferred leader
elections. The controller's shell (actors/controller/balancing.py) starts them and calls `plan` again as
they complete; `plan` never touches a partition whose reassignment runs, so a plan that is cut short (a
controller failover) is simply planned again.

The rules:

- A target keeps its partition's replication factor: each replica that leaves is replaced by one that
  joins, and a reassignment (KIP-455) removes the leaving replica only once the joining one is in the ISR,
  so no plan step leaves a partition with fewer in-sync replicas than its replication factor.
- Only partitions whose replicas are all in the ISR move (one that is under-replicated waits).
- Drains first: every replica on a draining broker is replaced by the least loaded broker that may take it
  and does not hold the partition already. A partition with more replicas than there are brokers to take
  them cannot be drained: `stuck` says which and why.
- Then replicas: first each topic's (from the broker with most of its replicas to one with at least 2 fewer),
  then the totals: a replica moves from the most loaded broker to the least loaded one while that lowers the
  spread, without widening the spread of a topic whose partitions weigh alike. A broker's load is the sum of
  its replicas' weights: 1 per replica, plus, where known, the partition's bytes over the mean bytes and its
  produce rate over the mean rate (each rounded to a half). With nothing known this is the replica count, and
  the counts end at most 1 apart, per topic and in all.
- Then leaders: the preferred leader (first replica) is what Kafka's preferred leader election restores; a
  partition's replica list is reordered so preferred leaders are spread by count (at most 1 apart where
  the placement allows), and partitions whose leader is not their preferred replica (in the ISR, on a
  broker that may lead) get a preferred leader election.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

_EPSILON = 1e-9


@dataclass(frozen=True)
class PartitionLoad:
    topic: str
    partition: int
    replicas: tuple[int, ...]  # for a partition being moved: the replicas it ends with
    leader: int
    isr: tuple[int, ...]
    moving: bool = False  # a reassignment of it runs (the balancer's or an operator's)
    size_bytes: float | None = None
    produce_bytes_per_s: float | None = None


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]  # the target replica list; the first is the preferred leader


@dataclass
class BalancePlan:
    moves: list[Move] = field(default_factory=list)
    elections: list[tuple[str, int]] = field(default_factory=list)  # preferred leader elections
    stuck: list[str] = field(default_factory=list)  # what cannot be done, and why

    @property
    def empty(self) -> bool:
        return not self.moves and not self.elections


WEIGHT_STEP = 0.5  # a partition's bytes and rate over the means are rounded to this


def weights(partitions: list[PartitionLoad]) -> dict[tuple[str, int], float]:
    """Each partition's weight: 1, plus its bytes over the mean bytes and its produce rate over the mean rate
    (each only where known for some partition: an unknown value counts as the mean), each rounded to
    WEIGHT_STEP: sizes and rates change with every sample, and a balance of exact values would move a
    replica (copying its log) for every small change; rounded, partitions that weigh alike stay alike."""
    def relative(values: list[float | None]) -> list[float]:
        known = [v for v in values if v is not None]
        mean = sum(known) / len(known) if known else 0.0
        if mean <= 0:
            return [0.0] * len(values)
        return [round((v if v is not None else mean) / mean / WEIGHT_STEP) * WEIGHT_STEP for v in values]

    sizes = relative([p.size_bytes for p in partitions])
    rates = relative([p.produce_bytes_per_s for p in partitions])
    return {(p.topic, p.partition): 1.0 + s + r for p, s, r in zip(partitions, sizes, rates)}


def plan(partitions: Iterable[PartitionLoad], brokers: Iterable[int], draining: Iterable[int] = (),
         max_moves_in_flight: int = 10, balance: bool = True) -> BalancePlan:
    """The next reassignments and elections. `brokers`: those that may take replicas and lead (live, not
    draining); `draining`: those every replica leaves. With `balance` False only drains are planned."""
    partitions = sorted(partitions, key=lambda p: (p.topic, p.partition))
    eligible = sorted(set(brokers) - set(draining))
    draining = set(draining)
    eligible_set = set(eligible)
    result = BalancePlan()
    if not eligible:
        if draining and any(set(p.replicas) & draining for p in partitions):
            result.stuck.append("no broker may take the draining brokers' replicas")
        return result
    weight = weights(partitions)
    targets: dict[tuple[str, int], list[int]] = {(p.topic, p.partition): list(p.replicas) for p in partitions}
    load = {b: 0.0 for b in eligible}
    count = {b: 0 for b in eligible}
    for p in partitions:
        for b in p.replicas:
            if b in load:
                load[b] += weight[(p.topic, p.partition)]
                count[b] += 1
    budget = max(0, max_moves_in_flight - sum(1 for p in partitions if p.moving))
    moved: set[tuple[str, int]] = set()

    def movable(p: PartitionLoad) -> bool:
        return not p.moving and set(p.replicas) <= set(p.isr)

    def relocate(key: tuple[str, int], source: int, dest: int) -> None:
        target = targets[key]
        target[target.index(source)] = dest  # (the joining replica takes the leaving one's place)
        if source in load:
            load[source] -= weight[key]
            count[source] -= 1
        load[dest] += weight[key]
        count[dest] += 1
        moved.add(key)

    # 1. drains
    for p in partitions:
        key = (p.topic, p.partition)
        for source in [b for b in p.replicas if b in draining]:
            candidates = [b for b in eligible if b not in targets[key]]
            if not candidates:
                result.stuck.append(f"{p.topic}-{p.partition} has {len(p.replicas)} replicas and only "
                                    f"{len(eligible)} brokers may hold them: broker {source} cannot be drained of it")
                break
            if p.moving:
                continue  # (planned again once its move completes)
            if not movable(p):
                result.stuck.append(f"{p.topic}-{p.partition} waits for its ISR {list(p.isr)} to hold every replica "
                                    f"{list(p.replicas)} before it leaves broker {source}")
                break
            if key not in moved and budget == 0:
                break
            if key not in moved:
                budget -= 1
            relocate(key, source, min(candidates, key=lambda b: (load[b], count[b], b)))

    # 2. replicas: each topic's spread evenly first (without sizes, a topic's partitions are alike: this keeps a
    # joining broker from getting only some topic's empty partitions), then the totals
    by_key = {(p.topic, p.partition): p for p in partitions}
    topic_count: dict[str, dict[int, int]] = {}
    for key, target in targets.items():
        counts = topic_count.setdefault(key[0], {b: 0 for b in eligible})
        for b in target:
            if b in counts:
                counts[b] += 1
    if balance:
        for topic in sorted(topic_count):
            while budget > 0:
                best = _best_topic_move(topic, by_key, targets, moved, eligible, load, weight, movable,
                                        topic_count[topic])
                if best is None:
                    break
                key, source, dest = best
                budget -= 1
                relocate(key, source, dest)
                topic_count[topic][source] -= 1
                topic_count[topic][dest] += 1
        while budget > 0:
            best = _best_replica_move(by_key, targets, moved, eligible, load, weight, movable, topic_count)
            if best is None:
                break
            key, source, dest = best
            budget -= 1
            relocate(key, source, dest)
            topic_count[key[0]][source] -= 1
            topic_count[key[0]][dest] += 1

    # 3. leaders: reorder replica lists (a reorder moves no data: it completes at once), each topic's preferred
    # leaders spread first, then the totals
    if balance:
        leaders = {b: 0 for b in eligible}
        topic_leaders: dict[str, dict[int, int]] = {t: {b: 0 for b in eligible} for t in topic_count}
        for key, target in targets.items():
            if target and target[0] in leaders:
                leaders[target[0]] += 1
                topic_leaders[key[0]][target[0]] += 1

        def lead_by(key: tuple[str, int], new_leader: int) -> None:
            target = targets[key]
            old = target[0]
            target.remove(new_leader)
            target.insert(0, new_leader)
            for counts in (leaders, topic_leaders[key[0]]):
                counts[old] -= 1
                counts[new_leader] += 1
            moved.add(key)

        def reorderable(key: tuple[str, int], most: int, fewest: int) -> bool:
            target = targets[key]
            return (bool(target) and target[0] == most and fewest in target and fewest in by_key[key].isr
                    and not by_key[key].moving and set(target) <= eligible_set)

        for topic in sorted(topic_leaders):
            counts = topic_leaders[topic]
            keys = sorted(k for k in targets if k[0] == topic)
            while not _lead_once(counts, eligible, keys, reorderable, lead_by, lambda k, a, b: True):
                pass
        keys = sorted(targets)
        while not _lead_once(leaders, eligible, keys, reorderable, lead_by,
                             lambda k, a, b: topic_leaders[k[0]][a] > topic_leaders[k[0]][b]):
            pass

    originals = {(p.topic, p.partition): list(p.replicas) for p in partitions}
    result.moves = [Move(key[0], key[1], tuple(targets[key])) for key in sorted(moved) if targets[key] != originals[key]]
    changed = {(m.topic, m.partition) for m in result.moves}
    for p in partitions:
        key = (p.topic, p.partition)
        if key in changed or p.moving or not p.replicas:
            continue
        preferred = p.replicas[0]
        if p.leader != preferred and preferred in p.isr and preferred in eligible:
            result.elections.append(key)
    return result


def _lead_once(counts, eligible, keys, reorderable, lead_by, allowed) -> bool:
    """One preferred leader moved from the broker leading most to one leading fewer (at least 2 fewer), in a
    partition that has it in its ISR and where `allowed(key, from, to)`; True when there is none to move."""
    for most in sorted(eligible, key=lambda b: (-counts[b], b)):
        for fewest in sorted(eligible, key=lambda b: (counts[b], b)):
            if counts[most] - counts[fewest] < 2:
                break
            found = next((k for k in keys if reorderable(k, most, fewest) and allowed(k, most, fewest)), None)
            if found is not None:
                lead_by(found, fewest)
                return False
    return True


def _best_topic_move(topic, by_key, targets, moved, eligible, load, weight, movable, counts):
    """(partition of `topic`, from, to): from the broker with most of the topic's replicas to one with at least
    2 fewer, the partition whose weight best evens the brokers' total loads; None when the topic is spread."""
    for source in sorted(eligible, key=lambda b: (-counts[b], -load[b], b)):
        for dest in sorted(eligible, key=lambda b: (counts[b], load[b], b)):
            if counts[source] - counts[dest] < 2:
                break
            best, best_score = None, None
            for key, target in targets.items():
                if key[0] != topic or key in moved or source not in target or dest in target \
                        or not movable(by_key[key]):
                    continue
                score = abs((load[source] - load[dest]) / 2 - weight[key])
                if best_score is None or score < best_score - _EPSILON:
                    best, best_score = key, score
            if best is not None:
                return best, source, dest
    return None


def _best_replica_move(by_key, targets, moved, eligible, load, weight, movable, topic_count):
    """(partition, from, to) that lowers the load spread the most, from the most loaded brokers to the least
    loaded ones, never widening the spread of a topic whose partitions weigh alike (the topic has more replicas
    on `from` than on `to`); None when no move lowers it. A partition moves at most once per plan."""
    weights_of: dict[str, set[float]] = {}
    for key in targets:
        weights_of.setdefault(key[0], set()).add(round(weight[key], 6))
    alike = {t for t, ws in weights_of.items() if len(ws) == 1}
    for source in sorted(eligible, key=lambda b: (-load[b], b)):
        for dest in sorted(eligible, key=lambda b: (load[b], b)):
            gap = load[source] - load[dest]
            if gap <= _EPSILON:
                break
            best, best_score = None, None
            for key, target in targets.items():
                if key in moved or source not in target or dest in target or not movable(by_key[key]) \
                        or (key[0] in alike and topic_count[key[0]][source] <= topic_count[key[0]][dest]):
                    continue
                w = weight[key]
                if w >= gap - _EPSILON:
                    continue  # would not lower the spread
                score = abs(gap / 2 - w)
                if best_score is None or score < best_score - _EPSILON:
                    best, best_score = key, score
            if best is not None:
                return best, source, dest
    return None
