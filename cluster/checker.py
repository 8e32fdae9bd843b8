"""A Jepsen-style checker: what clients saw during a fault schedule (histories), checked against
what the replicas hold afterwards. Pure functions of plain data, no clients and no clock: the
workload that records the histories is cluster/jepsen.py.

Kafka's rules, one check each (every safety count must be 0):

- `lost`: a record a producer saw acknowledged (acks=all) is not in the partition's log at the
  offset it was acknowledged at (gone, or another record there) once faults are healed.
- `divergent`: below the high watermark, two replicas hold different records at one offset
  (split brain: the committed log forked).
- `read_then_lost`: a consumer read a record at an offset that the final log holds a different
  record at, or none (a consumer saw data that was never committed).
- `committed_backwards`: a consumer group's committed offset, read back after a commit of a
  higher offset had been acknowledged, was lower (or fell between two reads).
- `share_redelivered`: a record a share group's acceptance of was acknowledged (commit_sync
  answered it without error) was delivered again afterwards.

Unavailability per fault: seconds from the fault (and from its heal) until acks=all produce
resumes on every partition, i.e. until the first record sent after that moment is acknowledged,
for the partition that took longest.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Ack:
    """A produced record acknowledged by the cluster."""
    partition: int
    offset: int
    value: bytes
    sent_s: float
    acked_s: float


@dataclass(frozen=True)
class Read:
    """A record a plain consumer read."""
    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True)
class Commit:
    """A consumer group's commit that the coordinator acknowledged: `offset` = next to read."""
    partition: int
    offset: int
    done_s: float


@dataclass(frozen=True)
class CommittedRead:
    """A read of the group's committed offset (None: no offset committed yet), asked at
    `asked_s` and answered at `answered_s`."""
    partition: int
    offset: int | None
    asked_s: float
    answered_s: float


@dataclass(frozen=True)
class ShareEvent:
    """A share consumer's delivery of (partition, offset) at `at_s`, or the acknowledged
    acceptance of it (`accepted`: commit_sync answered it without error at `at_s`)."""
    kind: str          # "delivered" | "accepted"
    partition: int
    offset: int
    at_s: float


@dataclass(frozen=True)
class Fault:
    name: str          # e.g. "isolate h2", "split h1", "one-way h3->h1", "loss 20% h2"
    start_s: float
    end_s: float | None  # when it was healed (None: never)


# ---- the checks ----------------------------------------------------------------------------------
def lost_acknowledged(acks: list[Ack], final: dict[int, dict[int, bytes]]) -> list[Ack]:
    """Acknowledged records not at their acknowledged offset in the final log (`final`:
    partition -> offset -> value, as read back after the heal). An acknowledgement without an
    offset (librdkafka's idempotent producer reports a record delivered at an unknown offset when
    the request that carried it timed out and a later request of the same producer succeeded: the
    sequence says it was written) is lost only if its value is nowhere in its partition."""
    values: dict[int, set[bytes]] = {}
    lost = []
    for a in acks:
        log = final.get(a.partition, {})
        if a.offset is None or a.offset < 0:
            if a.value not in values.setdefault(a.partition, set(log.values())):
                lost.append(a)
        elif log.get(a.offset) != a.value:
            lost.append(a)
    return lost


def divergent_offsets(replicas: dict[int, dict[int, dict[int, bytes]]],
                      high_watermarks: dict[int, int]) -> list[tuple[int, int, dict[int, bytes]]]:
    """(partition, offset, {broker: value}) for every offset below the partition's high
    watermark at which two replicas hold different records (`replicas`: partition -> broker ->
    offset -> value; a replica that lacks the offset does not count)."""
    out = []
    for partition, by_broker in sorted(replicas.items()):
        hw = high_watermarks.get(partition, 0)
        offsets = sorted({o for log in by_broker.values() for o in log if o < hw})
        for offset in offsets:
            held = {b: log[offset] for b, log in sorted(by_broker.items()) if offset in log}
            if len(set(held.values())) > 1:
                out.append((partition, offset, held))
    return out


def reads_then_lost(reads: list[Read], final: dict[int, dict[int, bytes]]) -> list[Read]:
    """Records consumers read that the final log does not hold at that offset."""
    return [r for r in reads if final.get(r.partition, {}).get(r.offset) != r.value]


def committed_backwards(commits: list[Commit], observed: list[CommittedRead]) -> list[str]:
    """Each read of a group's committed offset that is lower than a commit acknowledged before
    the read was asked, or lower than an earlier read answered before it was asked."""
    problems = []
    for r in sorted(observed, key=lambda o: o.asked_s):
        floor_commit = max((c.offset for c in commits if c.partition == r.partition and c.done_s <= r.asked_s),
                           default=None)
        floor_read = max((o.offset for o in observed if o.partition == r.partition and o.offset is not None
                          and o.answered_s <= r.asked_s), default=None)
        got = -1 if r.offset is None else r.offset
        if floor_commit is not None and got < floor_commit:
            problems.append(f"partition {r.partition}: committed offset read {r.offset} at {r.asked_s:.2f} s "
                            f"after a commit of {floor_commit} was acknowledged")
        elif floor_read is not None and got < floor_read:
            problems.append(f"partition {r.partition}: committed offset read {r.offset} at {r.asked_s:.2f} s "
                            f"after {floor_read} had been read")
    return problems


def share_redelivered(events: list[ShareEvent]) -> list[ShareEvent]:
    """Deliveries of a record after its acceptance had been acknowledged."""
    accepted: dict[tuple[int, int], float] = {}
    for e in events:
        if e.kind == "accepted":
            key = (e.partition, e.offset)
            accepted[key] = min(accepted.get(key, e.at_s), e.at_s)
    return [e for e in events if e.kind == "delivered" and (e.partition, e.offset) in accepted
            and e.at_s > accepted[(e.partition, e.offset)]]


def resumed_per_partition(acks: list[Ack], at_s: float, partitions: list[int]) -> dict[int, float | None]:
    """Per partition: seconds from `at_s` until it acknowledged a record sent at or after `at_s`
    (None: it never did)."""
    first: dict[int, float] = {}
    for a in acks:
        if a.sent_s >= at_s and a.partition in partitions:
            first[a.partition] = min(first.get(a.partition, a.acked_s), a.acked_s)
    return {p: (first[p] - at_s if p in first else None) for p in partitions}


def resumed_after(acks: list[Ack], at_s: float, partitions: list[int]) -> float | None:
    """Seconds from `at_s` until every partition has acknowledged a record sent at or after
    `at_s` (the slowest partition's first such ack); None when one never did."""
    waits = resumed_per_partition(acks, at_s, partitions).values()
    return None if None in waits else max(waits, default=0.0)


# ---- the report ----------------------------------------------------------------------------------
@dataclass
class Report:
    acknowledged: int
    lost: list[Ack]
    divergent: list[tuple[int, int, dict[int, bytes]]]
    read_then_lost: list[Read]
    committed_backwards: list[str]
    share_redelivered: list[ShareEvent]
    faults: list[dict]                      # name, start_s, healed_s, unavailable_s, after_heal_s
    info: dict = field(default_factory=dict)  # counts that are not rules: reads, commits, failures ...

    @property
    def safe(self) -> bool:
        return not (self.lost or self.divergent or self.read_then_lost or self.committed_backwards
                    or self.share_redelivered)

    def safety_counts(self) -> dict[str, int]:
        return {"acknowledged records lost": len(self.lost),
                "offsets with two records below the HW": len(self.divergent),
                "records read, then not in the log": len(self.read_then_lost),
                "committed offsets gone backwards": len(self.committed_backwards),
                "share records redelivered after an acknowledged accept": len(self.share_redelivered)}

    def to_json(self) -> dict:
        return {"safe": self.safe, "acknowledged": self.acknowledged, "safety": self.safety_counts(),
                "faults": self.faults, "info": self.info,
                "examples": {"lost": [repr(a) for a in self.lost[:10]],
                             "divergent": [f"partition {p} offset {o}: " + ", ".join(f"broker {b} {v!r}" for b, v in h.items())
                                           for p, o, h in self.divergent[:10]],
                             "read_then_lost": [repr(r) for r in self.read_then_lost[:10]],
                             "committed_backwards": self.committed_backwards[:10],
                             "share_redelivered": [repr(e) for e in self.share_redelivered[:10]]}}


def check(*, acks: list[Ack], final: dict[int, dict[int, bytes]], replicas: dict[int, dict[int, dict[int, bytes]]],
          high_watermarks: dict[int, int], reads: list[Read], commits: list[Commit],
          observed: list[CommittedRead], share: list[ShareEvent], faults: list[Fault],
          partitions: list[int], info: dict | None = None) -> Report:
    windows = []
    for f in faults:
        per_partition = resumed_per_partition(acks, f.start_s, partitions)
        windows.append({"fault": f.name, "start_s": round(f.start_s, 2),
                        "healed_s": None if f.end_s is None else round(f.end_s, 2),
                        "unavailable_s": _round(resumed_after(acks, f.start_s, partitions)),
                        "after_heal_s": None if f.end_s is None else _round(resumed_after(acks, f.end_s, partitions)),
                        "per_partition_s": {p: _round(w) for p, w in per_partition.items()}})
    return Report(len(acks), lost_acknowledged(acks, final), divergent_offsets(replicas, high_watermarks),
                  reads_then_lost(reads, final), committed_backwards(commits, observed), share_redelivered(share),
                  windows, dict(info or {}))


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def markdown(report: Report, title: str = "") -> str:
    """The checker's tables: safety counts (each must be 0), then unavailability per fault."""
    lines = [f"### {title}", ""] if title else []
    lines += ["| check | count |", "| --- | ---: |", f"| acknowledged records (acks=all) | {report.acknowledged} |"]
    lines += [f"| {name} (must be 0) | {n} |" for name, n in report.safety_counts().items()]
    lines += ["", "| fault | at (s) | healed (s) | acks=all resumed after the fault (s) | after the heal (s) "
                  "| per partition after the fault (s) |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    show = lambda x: "never" if x is None else f"{x:.1f}"  # noqa: E731
    for w in report.faults:
        parts = " ".join(f"{p}:{show(x)}" for p, x in sorted(w.get("per_partition_s", {}).items()))
        lines.append(f"| {w['fault']} | {w['start_s']:.1f} | {show(w['healed_s'])} | {show(w['unavailable_s'])} | "
                     f"{show(w['after_heal_s'])} | {parts} |")
    if any("leader_isr_before" in w for w in report.faults):
        lines += ["", "| fault | each partition's leader [ISR] just before it (Metadata) |", "| --- | --- |"]
        lines += [f"| {w['fault']} at {w['start_s']:.1f} | {w.get('leader_isr_before', '?')} |" for w in report.faults]
    if report.info:
        lines += ["", "| also seen | |", "| --- | ---: |"] + [f"| {k} | {v} |" for k, v in report.info.items()]
    return "\n".join(lines) + "\n"
