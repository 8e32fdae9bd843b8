"""SharePartition: the share-partition leader's pure state machine (KIP-932), Ray-free.

One instance per (group, topic-partition). No clock, no I/O: time comes in as ``now_ms``, the
records to acquire come in as the ``(base_offset, last_offset)`` pairs of the log batches the shell
read, and the state to persist goes out through ``take_dirty()`` / ``persistable()``.

In-flight records live between the SPSO (``start_offset``) and the SPEO (``end_offset``, exclusive:
one past the last offset ever acquired) as *ranges*: a run of offsets with the same state,
delivery count, owner member and lock deadline is one entry of a list kept sorted by first offset
(bisect over a parallel list of first offsets). Operations split ranges at their boundaries, change
whole ranges and merge equal neighbours again, so their cost grows with the number of ranges
touched, never with the number of records.

Invariants (``check_invariants``): ranges sorted, non-overlapping, equal touching neighbours merged;
``[start_offset, end_offset)`` covered without holes; the first range at the SPSO is not terminal;
ranges below the SPSO exist only while Acquired (records the log start offset overtook while a
consumer held them: KIP-932 "Log retention" lets that consumer still acknowledge them, with any
type, after which they are Archived and dropped).

KIP-932 decisions (section names of the KIP):

* States and transitions ("In-flight records"): one table, ``TRANSITIONS``, read by one function,
  ``next_state``. A client asking for something the table does not allow gets
  INVALID_RECORD_STATE; an internal call that the table refuses raises ``IllegalTransition``.
* Delivery count ("In-flight records"): incremented on every acquisition; a record whose count has
  reached ``group.share.delivery.count.limit`` goes to Archived instead of Available when it is
  released, its lock expires or its member leaves.
* In-flight limit (``group.share.partition.max.record.locks``, formerly
  ``group.share.record.lock.partition.limit``): it bounds the *distance between SPSO and SPEO*
  ("The share-partition leader limits the distance between the SPSO and the SPEO"), i.e. all
  in-flight records whatever their state, exactly like Kafka's ``SharePartition`` (in-flight count
  = SPEO - SPSO). Available in-flight records can always be re-acquired; new records beyond the
  SPEO are acquired only while the window has room, rounded up to the end of the log batch (so the
  window may overshoot by less than one batch, as in Kafka), but never past ``max_records``.
* Batches and MaxRecords ("Batching"; KIP-1206): ``max_records`` is a hard limit in every acquire
  mode; a log batch is acquired partially when it must (its bytes are still sent whole, and
  AcquiredRecords lists only the acquired offsets: the client drops the rest). Kafka's default
  ``batch_optimized`` mode rounds up to whole batches instead; with producer batches of ~1,000
  records and librdkafka's MaxRecords of 500, that let idle members' waiting ShareFetches hoard
  records a joining member then waited a lock duration (30 s) for (issue 7, item 6a). In
  ``record_limit`` mode the in-flight window is not rounded up either.
* Gaps ("Fetching and acknowledging records", unmaterialized batches; "Log compaction"): the range
  from the first fetched batch's base offset to the last batch's last offset is acquired as a
  whole, including offsets the log lacks (compaction, control records); the consumer acknowledges
  those with type 0 (gap), which archives them. Available in-flight records between the fetch
  offset and the first batch returned by the log no longer exist and are archived (Kafka:
  ``maybeArchiveStaleBatches``); so are never-acquired offsets between the SPEO and that batch.
* Isolation ("Reading transactional records"): the shell reads only up to the last stable offset
  for read_committed and passes the offset ranges of aborted transactional batches as
  ``aborted``; those records are archived instead of delivered.
* Acknowledgement types (ShareAcknowledge): 0 gap and 3 reject -> Archived, 1 accept ->
  Acknowledged, 2 release -> Available (Archived at the delivery limit), 4 renew (v2, KIP-1222)
  -> still Acquired with a fresh lock. Only records Acquired by the acknowledging member under a
  live lock can be acknowledged. Version gating of type 4 belongs to the request handler.
* Log start ("Log retention"): SPSO >= log start offset; records below it are Archived, except
  Acquired ones, which stay until acknowledged (any type -> Archived) or until their lock expires.
* Persistence (share coordinator, WriteShareGroupState): Kafka's leader sends the *changed* state
  batches plus the current start offset, and the coordinator merges them into its state; we do
  the same with ``take_dirty()`` (a diff of the persisted view against the last one handed out,
  ``None`` when nothing changed); ``persistable()`` gives the full view (for a snapshot, or a
  rewrite after a failed write). Acquired is transient and not persisted: an Acquired record with
  delivery count n is persisted as Available with count n - 1 (KIP-932 "Recording the
  share-partition state": "an Acquired record with a delivery count of 1 is recorded as Available
  with a delivery count of 0"); Available records with count 0 are left out entirely, so acquiring
  never needs a write. ``load()`` treats offsets between the SPSO and the last state batch that no
  batch covers as Available with count 0 (Kafka's "gap window").
* The start offset is always written (never -1), as Kafka's leader does.

* Per-group limits (KIP-1240, Kafka 4.3): ``configure()`` changes the lock duration, the delivery
  count limit, the in-flight limit and whether RENEW is allowed on a live share-partition, as
  Kafka's leader reads its group's configs on every use. The delivery count limit is checked when
  a delivery attempt ends (release, lock expiry, member leaving), never when records are acquired:
  after the limit is lowered, an Available record already at or past it gets one final delivery
  and is archived when that ends; after it is raised, records not yet archived get the extra
  attempts. A lowered in-flight limit acquires nothing new until the in-flight window is below
  it; records already in flight stay. Locks already held keep their deadlines.
* RENEW with ``share.renew.acknowledge.enable=false`` (Kafka 4.3, KIP-1222's group switch): the
  batch is refused with INVALID_RECORD_STATE and changes nothing.

* Dead-letter queues (KIP-1191, Kafka 4.4): with a DLQ topic configured for the group
  (``dead_letter_topic``), a record REJECTed, or whose delivery attempt ends at the delivery limit
  (release, lock expiry, member leaving), goes to Archiving (3) instead of Archived. Archiving is
  persisted like any state, is not terminal (it holds the SPSO back and counts in flight until its
  DLQ record is durable) and cannot be acquired or acknowledged. The shell takes the Archiving
  records to write with ``take_dead_letters()`` and reports ``dead_letters_written()`` (durable:
  -> Archived) or ``dead_letters_failed()`` (handed out again). A new leader loads Archiving
  records as they were persisted and writes them again: at-least-once into the DLQ. Records
  below the SPSO (the log start overtook them) are archived without a DLQ record.

* Key-ordered sharing (Kray's group config ``share.key.ordering.enable``, default false; Pulsar's
  Key_Shared within a partition): a record whose key is K is acquired only while it is the lowest
  record with key K in the share-partition that is not yet done with (Available or Acquired), and
  no record with key K is Acquired. So one record per key is in the hands of a consumer at a time,
  and records of one key are processed in offset order across releases (the released record is
  Available again and still the lowest: it goes out before the next one), lock expiries and
  members leaving. Acknowledged, Archiving and Archived records free their key once that state is
  durable (the shell reports successful state writes with ``made_durable``), so that a new
  leader never delivers a record again after a later record of its key went out. Records with a
  null key, and offsets the log lacks (gaps), are acquired as without the config. The locks are
  derived state: from the record states and the records' keys, nothing new is persisted; a new
  leader learns the keys again as it reads. The shell passes the keys of the log batches it read
  to ``acquire`` (``keys``: offset -> key, ``None`` for a null key); the core keeps those of the
  in-flight window (``keys_known`` tells the shell which batches it need not decode again) and
  drops them as the SPSO passes. A record skipped because its key is held stays Available in
  flight (the SPEO moves past it, and it counts against ``max_record_locks``), so AcquiredRecords
  then has gaps inside a batch whose bytes are sent whole (the client delivers only acquired
  offsets); where no key conflicts, whole batches are acquired as without the config. Records
  Acquired while the config was off have no known key and hold none, nor do records below the
  SPSO (the log start overtook them while they were Acquired).

Not done (later Kafka behaviour beyond KIP-932): delivering a record on its last attempt alone /
throttling batches of much-redelivered records; decrementing the delivery count when a session
closes with records it may never have handed over (Kafka 4.1+; here a closed session counts as a
delivery attempt, as the KIP says). ``load()`` archives an Available record at or past the
delivery limit (one that reaches a new leader after the limit was lowered is not given the final
attempt a record kept by its leader gets).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, Iterable, NamedTuple, Sequence

from protocol.errors import ErrorCode

__all__ = [
    "AckOutcome", "AckType", "Acquired", "Event", "IllegalTransition", "RecordState",
    "DeadLetter", "ShareMetrics", "SharePartition", "StateBatch", "TRANSITIONS", "next_state",
    "parse_iso_duration_ms", "start_offset_timestamp",
]

DEFAULT_RECORD_LOCK_DURATION_MS = 30_000      # group.share.record.lock.duration.ms
DEFAULT_DELIVERY_COUNT_LIMIT = 5              # group.share.delivery.count.limit
DEFAULT_MAX_RECORD_LOCKS = 2000               # group.share.partition.max.record.locks
# the least delivery count limit Kafka takes (the broker's bounds, group.share.{min,max}.delivery.count.limit,
# are checked where configs are set: actors/config_schema.py)
DELIVERY_COUNT_LIMIT_MIN = 2
LATEST_TIMESTAMP, EARLIEST_TIMESTAMP = -1, -2  # ListOffsets: the end offset, the log start offset
ISO_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_iso_duration_ms(text: str) -> int:
    """ISO-8601 durations as share.auto.offset.reset=by_duration:<duration> takes them (PnDTnHnMnS)."""
    m = ISO_DURATION.match(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as PT1H or P1DT30M")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def start_offset_timestamp(reset: str | None, now_ms: int) -> int:
    """Where a new share-partition starts, by ``share.auto.offset.reset``, as the ListOffsets
    timestamp to look up: latest (the default) -> -1, the end offset; earliest -> -2, the log start;
    by_duration:<ISO-8601 duration> -> ``now_ms`` minus the duration, the first record at or after
    it (when there is none, the end offset: the caller looks up -1 then). Raises ValueError for
    anything else."""
    reset = reset or "latest"
    if reset == "latest":
        return LATEST_TIMESTAMP
    if reset == "earliest":
        return EARLIEST_TIMESTAMP
    if reset.startswith("by_duration:"):
        return now_ms - parse_iso_duration_ms(reset.split(":", 1)[1])
    raise ValueError(f"share.auto.offset.reset must be latest, earliest or by_duration:<duration>, not {reset!r}")


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3       # KIP-1191: Archived once its dead-letter record is durable
    ARCHIVED = 4


AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED = (
    RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVING,
    RecordState.ARCHIVED)
TERMINAL = frozenset({ACKNOWLEDGED, ARCHIVED})


class AckType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class Event(Enum):
    ACQUIRE = "acquire"
    ACCEPT = "accept"
    RELEASE = "release"
    REJECT = "reject"
    GAP = "gap"
    RENEW = "renew"
    LOCK_EXPIRED = "lock_expired"
    MEMBER_RELEASED = "member_released"
    ARCHIVE = "archive"          # leader's own: log start moved, compacted away, aborted txn
    DEAD_LETTERED = "dead_lettered"  # leader's own: the DLQ record is durable (or none will be written)


ACK_EVENTS = {AckType.GAP: Event.GAP, AckType.ACCEPT: Event.ACCEPT, AckType.RELEASE: Event.RELEASE,
              AckType.REJECT: Event.REJECT, AckType.RENEW: Event.RENEW}

# (state, event) -> ((to, count delta), (to, count delta) once the delivery count has reached
# the limit). Anything absent is an illegal transition. Acquiring is not checked against the limit
# (KIP-1240): only a record whose limit was lowered under it is Available at the limit, and it gets
# one final delivery.
TRANSITIONS: dict[tuple[RecordState, Event], tuple[tuple[RecordState, int], tuple[RecordState, int]]] = {
    (AVAILABLE, Event.ACQUIRE): ((ACQUIRED, 1), (ACQUIRED, 1)),
    (AVAILABLE, Event.ARCHIVE): ((ARCHIVED, 0), (ARCHIVED, 0)),
    (ACQUIRED, Event.ACCEPT): ((ACKNOWLEDGED, 0), (ACKNOWLEDGED, 0)),
    (ACQUIRED, Event.RELEASE): ((AVAILABLE, 0), (ARCHIVED, 0)),
    (ACQUIRED, Event.REJECT): ((ARCHIVED, 0), (ARCHIVED, 0)),
    (ACQUIRED, Event.GAP): ((ARCHIVED, 0), (ARCHIVED, 0)),
    (ACQUIRED, Event.RENEW): ((ACQUIRED, 0), (ACQUIRED, 0)),
    (ACQUIRED, Event.LOCK_EXPIRED): ((AVAILABLE, 0), (ARCHIVED, 0)),
    (ACQUIRED, Event.MEMBER_RELEASED): ((AVAILABLE, 0), (ARCHIVED, 0)),
    (ACQUIRED, Event.ARCHIVE): ((ARCHIVED, 0), (ARCHIVED, 0)),
    (ARCHIVING, Event.DEAD_LETTERED): ((ARCHIVED, 0), (ARCHIVED, 0)),
}

# With a DLQ topic, these events go to Archiving where the table says Archived (KIP-1191): a
# rejection, or a delivery attempt ending at the delivery limit. Gaps and the leader's own
# archiving (log start, aborted transactions) never make dead letters.
DEAD_LETTER_EVENTS = frozenset({Event.REJECT, Event.RELEASE, Event.LOCK_EXPIRED, Event.MEMBER_RELEASED})
# why a record is dead-lettered (dead_letters.MESSAGES gives the __dlq.errors.message Kafka writes for each)
REASON_REJECT = "REJECT"
REASON_DELIVERY_COUNT_LIMIT = "DELIVERY_COUNT_LIMIT"

# Below the SPSO a record can never be delivered again: whatever ends its acquisition archives it.
_ARCHIVE_BELOW_START = frozenset({Event.ACCEPT, Event.RELEASE, Event.REJECT, Event.GAP,
                                  Event.LOCK_EXPIRED, Event.MEMBER_RELEASED})
_HOLDS_KEY = frozenset({AVAILABLE, ACQUIRED})   # key ordering: the states in which a record holds its key


class IllegalTransition(RuntimeError):
    """The leader itself attempted a transition the table forbids: a bug."""


def next_state(state: RecordState, event: Event, delivery_count: int,
               delivery_count_limit: int, dead_letters: bool = False) -> tuple[RecordState, int] | None:
    """The one place transitions are decided: (new state, new delivery count), or None if illegal.
    ``dead_letters``: the group has a DLQ topic (Archived becomes Archiving for DEAD_LETTER_EVENTS)."""
    rule = TRANSITIONS.get((state, event))
    if rule is None:
        return None
    to, delta = rule[1] if delivery_count >= delivery_count_limit else rule[0]
    if to is ARCHIVED and dead_letters and event in DEAD_LETTER_EVENTS:
        to = ARCHIVING
    return to, delivery_count + delta


class Acquired(NamedTuple):
    """One AcquiredRecords entry of a ShareFetch response."""
    first_offset: int
    last_offset: int
    delivery_count: int


class DeadLetter(NamedTuple):
    """A run of Archiving records handed to the shell to write to the DLQ topic."""
    first_offset: int
    last_offset: int
    delivery_count: int
    reason: str


class StateBatch(NamedTuple):
    """One StateBatch of Read/WriteShareGroupState."""
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckOutcome:
    """Per acknowledgement batch error codes (0 = applied); ``changed`` is conservative: False
    promises the durable state did not change (nothing to write), True means it may have."""
    error_codes: tuple[int, ...]
    changed: bool

    @property
    def error_code(self) -> int:
        """The first error, for the partition-level error code of the response."""
        return next((c for c in self.error_codes if c), ErrorCode.NONE)


@dataclass(slots=True)
class ShareMetrics:
    """Plain counters (records, not batches) for the shell's metrics."""
    acquired_records: int = 0
    acknowledged_records: dict[int, int] = field(default_factory=lambda: {int(t): 0 for t in AckType})
    lock_expired_records: int = 0
    member_released_records: int = 0
    delivery_limit_archived_records: int = 0
    log_start_archived_records: int = 0
    aborted_archived_records: int = 0
    stale_archived_records: int = 0
    dead_lettered_records: int = 0            # Archiving -> Archived with a durable DLQ record
    dead_letter_skipped_records: int = 0      # Archiving -> Archived without one (no usable DLQ topic)


@dataclass
class ShareFetchResult:
    """What the leaders of one topic-partition answer a ShareFetch with (the gateway's handler
    makes the response's partition from it)."""
    error_code: int = 0
    error_message: str | None = None
    ack_error_code: int = 0
    ack_error_message: str | None = None
    records: Any = None  # a FileSlice of the segment holding the acquired batches (sent from the file)
    acquired: list = field(default_factory=list)  # [(first_offset, last_offset, delivery_count)]


class _Range:
    # reason: why an Archiving range is one (None when loaded: see DeadLetter's reason); sending:
    # an Archiving range handed out by take_dead_letters whose write has not ended yet
    __slots__ = ("first", "last", "state", "count", "owner", "deadline_ms", "reason", "sending")

    def __init__(self, first: int, last: int, state: RecordState, count: int,
                 owner: str | None = None, deadline_ms: int | None = None,
                 reason: str | None = None, sending: bool = False) -> None:
        self.first, self.last, self.state, self.count = first, last, state, count
        self.owner, self.deadline_ms = owner, deadline_ms
        self.reason, self.sending = reason, sending

    def same(self, other: _Range) -> bool:
        return (self.state == other.state and self.count == other.count
                and self.owner == other.owner and self.deadline_ms == other.deadline_ms
                and self.reason == other.reason and self.sending == other.sending)

    def with_bounds(self, first: int, last: int) -> _Range:
        return _Range(first, last, self.state, self.count, self.owner, self.deadline_ms, self.reason, self.sending)

    def as_tuple(self) -> tuple:
        return (self.first, self.last, int(self.state), self.count, self.owner, self.deadline_ms)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"_Range{self.as_tuple()}"


def _batch_end(bases: list[int], batches: Sequence[tuple[int, int]], offset: int) -> int:
    """Last offset of the log batch holding ``offset``; ``offset`` itself if it is in no batch."""
    k = bisect_right(bases, offset) - 1
    if k >= 0 and offset <= batches[k][1]:
        return batches[k][1]
    return offset


def _diff_views(old: Sequence[StateBatch], new: Sequence[StateBatch], start: int) -> list[StateBatch]:
    """Runs at/after ``start`` where ``new`` differs from ``old`` (both: sorted, disjoint, absent
    offsets meaning Available with count 0), given with their values in ``new``."""
    points = sorted({p for b in (*old, *new) if b.last_offset >= start
                     for p in (max(b.first_offset, start), b.last_offset + 1)})
    out: list[StateBatch] = []
    oi = ni = 0
    for p, q in zip(points, points[1:]):
        while oi < len(old) and old[oi].last_offset < p:
            oi += 1
        while ni < len(new) and new[ni].last_offset < p:
            ni += 1
        vo = (old[oi].delivery_state, old[oi].delivery_count) if oi < len(old) and old[oi].first_offset <= p else (0, 0)
        vn = (new[ni].delivery_state, new[ni].delivery_count) if ni < len(new) and new[ni].first_offset <= p else (0, 0)
        if vo == vn:
            continue
        if out and out[-1].last_offset + 1 == p and (out[-1].delivery_state, out[-1].delivery_count) == vn:
            out[-1] = out[-1]._replace(last_offset=q - 1)
        else:
            out.append(StateBatch(p, q - 1, *vn))
    return out


class SharePartition:
    """In-flight record state of one share-partition (see the module docstring)."""

    def __init__(self, group_id: str, topic_id: object, partition: int, *,
                 record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS,
                 delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT,
                 max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS, renew_acknowledge_enable: bool = True,
                 read_committed: bool = False, dead_letter_topic: str = "",
                 dead_letter_copy_record: bool = False, key_ordering: bool = False) -> None:
        self.group_id = group_id
        self._keys: dict[int, bytes | None] = {}   # offset -> key of records read (key ordering)
        self._key_counts: dict = {}                 # key -> how many offsets of self._keys have it
        self._keys_floor = 0                        # no cached key below it
        self._changes = 0                           # bumped by every change of ranges (memo stamps)
        self._pending_keys: dict = {}               # key -> durable version once its record was done with
        self._none_acquirable_at = -1               # _changes when no in-flight record was acquirable
        self.topic_id = topic_id
        self.partition = partition
        self._highest_limit = 0       # the highest delivery count limit ever in force (invariants)
        self.configure(record_lock_duration_ms=record_lock_duration_ms, delivery_count_limit=delivery_count_limit,
                       max_record_locks=max_record_locks, renew_acknowledge_enable=renew_acknowledge_enable,
                       read_committed=read_committed, dead_letter_topic=dead_letter_topic,
                       dead_letter_copy_record=dead_letter_copy_record, key_ordering=key_ordering)
        self.metrics = ShareMetrics()
        self._ranges: list[_Range] = []
        self._firsts: list[int] = []
        self._start = 0
        self._end = 0
        self._log_start = 0
        self._deadline_floor: int | None = None   # <= every Acquired deadline; None: none Acquired
        self._deadline_exact = True
        self._durable_version = 0
        self._baseline: tuple[int, list[StateBatch]] = (0, [])

    def configure(self, *, record_lock_duration_ms: int, delivery_count_limit: int, max_record_locks: int,
                  renew_acknowledge_enable: bool, read_committed: bool = False, dead_letter_topic: str = "",
                  dead_letter_copy_record: bool = False, key_ordering: bool = False) -> bool:
        """The group's limits now (share.record.lock.duration.ms, share.delivery.count.limit,
        share.partition.max.record.locks, share.renew.acknowledge.enable, share.isolation.level:
        ``read_committed`` tells the shell to read up to the last stable offset and pass aborted
        batches to ``acquire``; errors.deadletterqueue.topic.name and .copy.record.enable;
        share.key.ordering.enable: ``key_ordering``, the shell passes record keys to ``acquire``); they
        apply from the next operation on (see the module docstring). Returns True if any changed.
        Raises ValueError for values no config validation lets through."""
        if record_lock_duration_ms <= 0:
            raise ValueError(f"record_lock_duration_ms must be > 0, got {record_lock_duration_ms}")
        if delivery_count_limit < DELIVERY_COUNT_LIMIT_MIN:
            raise ValueError(f"delivery_count_limit must be >= {DELIVERY_COUNT_LIMIT_MIN}, got {delivery_count_limit}")
        if max_record_locks <= 0:
            raise ValueError(f"max_record_locks must be > 0, got {max_record_locks}")
        now = (record_lock_duration_ms, delivery_count_limit, max_record_locks, bool(renew_acknowledge_enable),
               dead_letter_topic or "", bool(dead_letter_copy_record))
        before = (getattr(self, "record_lock_duration_ms", None), getattr(self, "delivery_count_limit", None),
                  getattr(self, "max_record_locks", None), getattr(self, "renew_acknowledge_enable", None),
                  getattr(self, "dead_letter_topic", None), getattr(self, "dead_letter_copy_record", None))
        (self.record_lock_duration_ms, self.delivery_count_limit, self.max_record_locks,
         self.renew_acknowledge_enable, self.dead_letter_topic, self.dead_letter_copy_record) = now
        self._highest_limit = max(self._highest_limit, delivery_count_limit)
        changed = (now != before or bool(read_committed) != getattr(self, "read_committed", None)
                   or bool(key_ordering) != getattr(self, "key_ordering", None))
        self.read_committed = bool(read_committed)
        if not key_ordering:
            self._keys.clear()          # keys are read again if it is turned on later
            self._key_counts.clear()
            self._pending_keys.clear()
        if changed:
            self._changes = getattr(self, "_changes", 0) + 1
        self.key_ordering = bool(key_ordering)
        return changed

    # ------------------------------------------------------------------ queries

    @property
    def start_offset(self) -> int:
        """SPSO."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO: one past the last offset ever acquired (or the SPSO when nothing is in flight)."""
        return self._end

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    def in_flight_count(self) -> int:
        """Records in flight, whatever their state: what max_record_locks bounds."""
        return self._end - self._start

    def fetch_offset(self) -> int | None:
        """Where to read the log next: the first Available in-flight offset, else the SPEO while
        the in-flight window has room, else None (nothing can be acquired now). Call
        ``expire_locks`` first so that expired locks count as Available. With key ordering,
        Available records whose key is held (by an Acquired record or an earlier Available one)
        are passed over: the first Available offset whose key is free or not known yet."""
        if self.key_ordering:
            return self._first_acquirable_by_key()
        for k in range(bisect_left(self._firsts, self._start), len(self._ranges)):
            if self._ranges[k].state is AVAILABLE:
                return self._ranges[k].first
        return self._end if self.in_flight_count() < self.max_record_locks else None

    def keys_known(self, first: int, last: int) -> bool:
        """True when the keys of the log batch [first, last] need not be passed to ``acquire``
        again (key ordering: they are cached, or all of it is below the SPSO)."""
        if last < self._start:
            return True
        return max(first, self._start) in self._keys and last in self._keys

    def key_horizon(self) -> int:
        """With key ordering, the last offset whose key ``acquire`` may need now: the in-flight
        window's, and as many beyond the SPEO as it has room for (``acquire`` rounds that up to
        the end of the log batch holding it: pass the keys of every batch that starts at or below
        it). Batches beyond it need not be decoded: nothing of theirs can be acquired yet."""
        return self._end - 1 + max(self.max_record_locks - self.in_flight_count(), 0)

    def _first_acquirable_by_key(self) -> int | None:
        room = self._end if self.in_flight_count() < self.max_record_locks else None
        if self._none_acquirable_at == self._changes:
            return room                 # nothing changed since the last scan found nothing
        blocked = self._held_keys(available_below=self._start)   # the keys of Acquired records
        keys = self._keys
        if (len(keys) == self._end - self._start and None not in self._key_counts
                and all(key in blocked for key in self._key_counts)):
            # every offset of the window has its key cached (the cache holds offsets of the window
            # only), none is null, and every key is held: nothing Available is acquirable
            self._none_acquirable_at = self._changes
            return room
        for k in range(bisect_left(self._firsts, self._start), len(self._ranges)):
            r = self._ranges[k]
            if r.state is not AVAILABLE:
                continue
            for o in range(r.first, r.last + 1):
                if o not in keys:
                    return o            # read it to learn its key
                key = keys[o]
                if key is None or key not in blocked:
                    return o
        self._none_acquirable_at = self._changes
        return room

    def _held_keys(self, available_below: int | None = None) -> set:
        """Keys held now: those of Acquired records (below the SPSO too), of Available records
        below ``available_below`` (default: all of them: keys that are not free for any record),
        and of records done with whose new state is not durable yet."""
        keys = self._keys
        held = set(self._pending_keys)
        for r in self._ranges:
            if r.state is ACQUIRED:
                last = r.last
            elif r.state is AVAILABLE and (available_below is None or r.first < available_below):
                last = r.last if available_below is None else min(r.last, available_below - 1)
            else:
                continue
            for o in range(r.first, last + 1):
                key = keys.get(o)
                if key is not None:
                    held.add(key)
        return held

    def next_deadline_ms(self) -> int | None:
        """Earliest acquisition-lock deadline, or None when nothing is Acquired."""
        if not self._deadline_exact:
            self._recompute_deadline()
        return self._deadline_floor

    def member_holdings(self, member_id: str) -> list[Acquired]:
        """What ``member_id`` holds Acquired right now (including records below the SPSO)."""
        return [Acquired(r.first, r.last, r.count) for r in self._ranges
                if r.state is ACQUIRED and r.owner == member_id]

    def ranges(self) -> list[tuple]:
        """(first, last, state, delivery_count, owner, deadline_ms) of every tracked range."""
        return [r.as_tuple() for r in self._ranges]

    def delivery_complete_count(self) -> int:
        """Terminal records at/after the SPSO (WriteShareGroupState v1 DeliveryCompleteCount)."""
        k = bisect_left(self._firsts, self._start)
        return sum(r.last - r.first + 1 for r in self._ranges[k:] if r.state in TERMINAL)

    # ------------------------------------------------------------------ persistence

    def load(self, start_offset: int, state_batches: Iterable[Sequence[int]], *,
             log_start_offset: int = 0) -> None:
        """(Re)initialise from the share coordinator (ReadShareGroupState): the SPSO and
        (first_offset, last_offset, delivery_state, delivery_count) batches. Every lock is gone:
        an Acquired batch comes back Available with its count; Available at the delivery limit is
        archived; the SPSO never stays below the log start offset."""
        if start_offset < 0 or log_start_offset < 0:
            raise ValueError(f"start_offset {start_offset} / log_start_offset {log_start_offset} < 0")
        batches = sorted(StateBatch(*map(int, b)) for b in state_batches)
        prev_last = None
        for b in batches:
            if b.first_offset > b.last_offset or b.delivery_count < 0 or b.first_offset < 0:
                raise ValueError(f"invalid state batch {b}")
            if b.delivery_state not in RecordState._value2member_map_:
                raise ValueError(f"invalid delivery state in {b}")
            if prev_last is not None and b.first_offset <= prev_last:
                raise ValueError(f"overlapping state batches at {b}")
            prev_last = b.last_offset
        self._ranges, self._firsts = [], []
        self._deadline_floor, self._deadline_exact = None, True
        self._keys.clear()
        self._key_counts.clear()
        self._keys_floor = max(start_offset, log_start_offset)
        self._pending_keys.clear()      # what was loaded is durable
        self._changes += 1
        self._log_start = log_start_offset
        start = max(start_offset, log_start_offset)
        pos = start
        for b in batches:
            if b.last_offset < start:
                continue
            first = max(b.first_offset, start)
            if first > pos:
                self._append(_Range(pos, first - 1, AVAILABLE, 0))
            state = RecordState(b.delivery_state)
            if state is ACQUIRED:
                state = AVAILABLE
            if state is AVAILABLE and b.delivery_count >= self.delivery_count_limit:
                state = ARCHIVED
            self._append(_Range(first, b.last_offset, state, b.delivery_count))
            pos = b.last_offset + 1
        self._start, self._end = start, pos
        self._coalesce(1, len(self._ranges))
        held = [StateBatch(max(b.first_offset, start_offset), *b[1:]) for b in batches
                if b.last_offset >= start_offset and (b.delivery_state, b.delivery_count) != (0, 0)]
        self._baseline = (start_offset, held)
        self._durable_version += 1
        self._settle()

    def persistable(self) -> tuple[int, list[StateBatch]]:
        """The full durable state: (SPSO, state batches at/after it). Acquired with count n is
        written as Available with count n - 1; Available with count 0 is left out."""
        return self._start, self._view()

    def take_dirty(self) -> tuple[int, list[StateBatch]] | None:
        """What changed since the last call (or load): (SPSO, changed state batches) for a
        WriteShareGroupState the coordinator merges into its state; None if nothing changed.
        If that write fails, call ``invalidate_persisted()`` so the next call sends everything."""
        view = self._view()
        base_start, base_view = self._baseline
        changed = _diff_views(base_view, view, self._start)
        if not changed and base_start == self._start:
            return None
        self._baseline = (self._start, view)
        return self._start, changed

    def invalidate_persisted(self) -> None:
        """Forget what the coordinator holds: the next ``take_dirty`` returns the full state."""
        self._baseline = (-1, [])

    @property
    def durable_version(self) -> int:
        """A stamp of the durable state's changes so far: read it before ``take_dirty`` and pass it
        to ``made_durable`` once that write succeeded."""
        return self._durable_version

    def made_durable(self, version: int) -> bool:
        """A state write taken at ``durable_version`` ``version`` succeeded: the keys of records
        done with up to then are free (key ordering). True if any key was freed."""
        freed = [key for key, v in self._pending_keys.items() if v <= version]
        for key in freed:
            del self._pending_keys[key]
        if freed:
            self._changes += 1
        return bool(freed)

    def has_pending_keys(self) -> bool:
        """Key ordering: some keys wait for a state write to succeed before they are free."""
        return bool(self._pending_keys)

    # ------------------------------------------------------------------ acquisition

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int]], *, max_records: int,
                now_ms: int, batch_size: int | None = None, fetch_offset: int | None = None,
                aborted: Sequence[tuple[int, int]] = (), record_limit: bool = False,
                keys: dict[int, bytes | None] | None = None) -> list[Acquired]:
        """Acquire for ``member_id`` what the log read returned.

        ``batches``: (base_offset, last_offset) of the log batches read, in offset order, from
        ``fetch_offset`` (the value of ``fetch_offset()`` the read used; if given, Available
        records between it and the first batch are archived as no longer in the log).
        ``max_records``: a hard limit in every acquire mode, splitting a log batch if it must (the
        whole batch is still sent; the client keeps the acquired records); ``record_limit``
        (ShareFetch v2 acquire mode record_limit, KIP-1206) also keeps the in-flight window from
        rounding up to the end of a log batch. ``batch_size``: split the
        returned ranges at log batch boundaries once they hold that many records (ShareFetch
        BatchSize). ``aborted``: offset ranges of aborted transactional batches (read_committed).
        ``keys``: with key ordering, offset -> key (None: a null key) of the records of the
        batches read whose keys ``keys_known`` does not have; records of a held key are skipped
        (the AcquiredRecords ranges then have gaps).
        Returns the AcquiredRecords ranges, in offset order."""
        self._expire(now_ms)
        self._changes += 1              # keys may be learned
        if max_records <= 0 or not batches:
            return []
        prev_last = None
        for base, last in batches:
            if base > last or (prev_last is not None and base <= prev_last):
                raise ValueError(f"log batches must be sorted and disjoint: {batches!r}")
            prev_last = last
        batches = [b for b in batches if b[1] >= self._start]
        if not batches:
            return []
        bases = [b[0] for b in batches]
        base, hi = batches[0][0], batches[-1][1]
        if fetch_offset is not None and fetch_offset < base:
            self._archive_available(max(fetch_offset, self._start), min(base, self._end) - 1, "stale")
        if base > self._end:            # never-acquired offsets the log no longer has
            self._append(_Range(self._end, base - 1, ARCHIVED, 0))
            self._coalesce(len(self._ranges) - 1, len(self._ranges))
            self._end = base
            self._durable_version += 1
        self._settle()
        lo = max(base, self._start)
        if self.key_ordering:
            spans = self._acquire_by_key(member_id, batches, bases, lo, hi, max_records, now_ms, record_limit,
                                         keys or {}, aborted)
            return self._finish_acquire(spans, bases, batches, batch_size, aborted)

        # 1. Available in-flight records in [lo, min(hi, SPEO - 1)], at most max_records of them
        remaining = max_records
        spans: list[tuple[int, int]] = []
        k = max(bisect_right(self._firsts, lo) - 1, 0)
        in_flight_hi = min(hi, self._end - 1)
        while k < len(self._ranges) and remaining > 0:
            r = self._ranges[k]
            k += 1
            if r.first > in_flight_hi:
                break
            if r.state is not AVAILABLE or r.last < lo:
                continue
            a = max(r.first, lo)
            b = min(r.last, in_flight_hi, a + remaining - 1)
            remaining -= b - a + 1
            spans.append((a, b))
        for a, b in spans:
            self._update(a, b, Event.ACQUIRE, member_id=member_id, now_ms=now_ms)

        # 2. new records beyond the SPEO, up to max_records in all, while the in-flight window has room
        # (batch_optimized: the window rounds up to the end of a log batch, never past max_records)
        new_span = None
        if hi >= self._end and remaining > 0:
            room = self.max_record_locks - self.in_flight_count()
            if room > 0:
                x = self._end + min(remaining, room) - 1
                end = min(hi, self._end + remaining - 1, x if record_limit else _batch_end(bases, batches, x))
                new_span = (self._end, end)
                deadline = now_ms + self.record_lock_duration_ms
                self._append(_Range(self._end, end, ACQUIRED, 1, member_id, deadline))
                self._coalesce(len(self._ranges) - 1, len(self._ranges))
                self._note_deadline(deadline)
                self._end = end + 1
                self.metrics.acquired_records += end - new_span[0] + 1
                spans.append(new_span)

        return self._finish_acquire(spans, bases, batches, batch_size, aborted)

    def _finish_acquire(self, spans, bases, batches, batch_size, aborted) -> list[Acquired]:
        # 3. read_committed: records of aborted transactions are archived, not delivered
        for fa, la in aborted:
            for a, b in spans:
                lo2, hi2 = max(fa, a), min(la, b)
                if lo2 <= hi2:
                    for x, y in self._spans_where(lo2, hi2, lambda r: r.state is ACQUIRED):
                        n = self._update(x, y, Event.ARCHIVE)
                        self.metrics.aborted_archived_records += n
        self._settle()
        return self._acquired_output(spans, bases, batches, batch_size)

    def _acquire_by_key(self, member_id: str, batches, bases, lo: int, hi: int, max_records: int, now_ms: int,
                        record_limit: bool, keys: dict, aborted) -> list[tuple[int, int]]:
        """acquire's steps 1 and 2 with key ordering (see the module docstring): the records of
        [lo, hi] in offset order, each acquired unless its key is held; returns the acquired spans."""
        cached = self._keys

        def key_of(o: int):
            if aborted and any(fa <= o <= la for fa, la in aborted):
                return None             # archived below, never delivered: holds no key
            return keys[o] if o in keys else cached.get(o)

        blocked = self._held_keys(available_below=lo)
        remaining = max_records
        spans: list[list[int]] = []

        def take(o: int) -> None:
            if spans and spans[-1][1] + 1 == o:
                spans[-1][1] = o
            else:
                spans.append([o, o])

        # 1. Available in-flight records in [lo, min(hi, SPEO - 1)]
        in_flight_hi = min(hi, self._end - 1)
        k = max(bisect_right(self._firsts, lo) - 1, 0)
        while k < len(self._ranges) and remaining > 0:
            r = self._ranges[k]
            k += 1
            if r.first > in_flight_hi:
                break
            if r.state is not AVAILABLE or r.last < lo:
                continue
            for o in range(max(r.first, lo), min(r.last, in_flight_hi) + 1):
                key = key_of(o)
                if key is not None:
                    if key in blocked:
                        continue
                    blocked.add(key)
                take(o)
                remaining -= 1
                if remaining == 0:
                    break
        old_spans = [(a, b) for a, b in spans]
        for a, b in old_spans:
            self._update(a, b, Event.ACQUIRE, member_id=member_id, now_ms=now_ms)

        # 2. new records beyond the SPEO while the in-flight window has room; those of a held key
        # join the window as Available (so that the next fetch knows they wait for their key)
        new_spans: list[tuple[int, int]] = []
        if hi >= self._end and remaining > 0:
            room = self.max_record_locks - self.in_flight_count()
            if room > 0:
                x = self._end + room - 1
                cap = min(hi, x if record_limit else _batch_end(bases, batches, x))
                spans = []
                o = self._end
                while o <= cap and remaining > 0:
                    key = key_of(o)
                    if key is None or key not in blocked:
                        if key is not None:
                            blocked.add(key)
                        take(o)
                        remaining -= 1
                    o += 1
                new_spans = [(a, b) for a, b in spans]
                deadline = now_ms + self.record_lock_duration_ms
                pos, first_new = self._end, len(self._ranges)
                for a, b in new_spans:
                    if a > pos:
                        self._append(_Range(pos, a - 1, AVAILABLE, 0))
                    self._append(_Range(a, b, ACQUIRED, 1, member_id, deadline))
                    self.metrics.acquired_records += b - a + 1
                    pos = b + 1
                if o > pos:
                    self._append(_Range(pos, o - 1, AVAILABLE, 0))
                if o > self._end:
                    self._coalesce(first_new, first_new + 1)   # with the range before, if equal
                    if new_spans:
                        self._note_deadline(deadline)
                    self._end = o
        # keep the keys of the in-flight window only (the rest is decoded again when read again)
        counts = self._key_counts
        for o, key in keys.items():
            if self._start <= o < self._end and o not in cached:
                cached[o] = key
                counts[key] = counts.get(key, 0) + 1
        return old_spans + new_spans

    def _prune_keys(self) -> None:
        """Drop cached keys below the SPSO: the cache holds offsets of [SPSO, SPEO) only."""
        start = self._start
        if start <= self._keys_floor:
            return
        keys, counts = self._keys, self._key_counts
        if start - self._keys_floor > len(keys):
            kept = {o: k for o, k in keys.items() if o >= start}
            keys.clear()
            keys.update(kept)
            counts.clear()
            for k in kept.values():
                counts[k] = counts.get(k, 0) + 1
        else:
            for o in range(self._keys_floor, start):
                if o in keys:
                    k = keys.pop(o)
                    if counts[k] == 1:
                        del counts[k]
                    else:
                        counts[k] -= 1
        self._keys_floor = start

    def _acquired_output(self, spans, bases, batches, batch_size) -> list[Acquired]:
        out: list[Acquired] = []
        for a, b in spans:
            for x, y in self._spans_where(a, b, lambda r: r.state is ACQUIRED):
                r = self._ranges[bisect_right(self._firsts, x) - 1]
                if out and out[-1].last_offset + 1 == x and out[-1].delivery_count == r.count:
                    out[-1] = out[-1]._replace(last_offset=y)
                else:
                    out.append(Acquired(x, y, r.count))
        if batch_size is None or batch_size <= 0:
            return out
        split: list[Acquired] = []
        for a, b, count in out:
            cur = a
            if b - a + 1 > batch_size:
                for k in range(bisect_right(bases, a), bisect_right(bases, b)):
                    p = bases[k]
                    if p - cur >= batch_size:
                        split.append(Acquired(cur, p - 1, count))
                        cur = p
            split.append(Acquired(cur, b, count))
        return split

    # ------------------------------------------------------------------ acknowledgement

    def acknowledge(self, member_id: str, acks: Sequence[tuple[int, int, Sequence[int]]], *,
                    now_ms: int, all_or_nothing: bool = False) -> AckOutcome:
        """Apply ShareAcknowledge/ShareFetch acknowledgement batches (first, last, ack_types),
        ack_types holding one type for the whole batch or one per offset.

        Per batch: malformed (first > last, negative, wrong ack_types length, unknown type, not
        after the previous batch, past the SPEO) -> INVALID_REQUEST; any record in it not Acquired
        by ``member_id`` under a live lock -> INVALID_RECORD_STATE; else applied (records already
        below the SPSO and not held are skipped). With ``all_or_nothing`` (Kafka's behaviour for a
        partition) one failing batch means none is applied."""
        version = self._durable_version
        self._expire(now_ms)
        codes: list[int] = []
        prev_last = None
        for first, last, types in acks:
            code = ErrorCode.NONE
            if (first < 0 or first > last or len(types) not in (1, last - first + 1)
                    or any(t not in AckType._value2member_map_ for t in types)
                    or (prev_last is not None and first <= prev_last) or last >= self._end):
                code = ErrorCode.INVALID_REQUEST
            elif not self._all_held(member_id, first, last):
                code = ErrorCode.INVALID_RECORD_STATE
            elif not self.renew_acknowledge_enable and AckType.RENEW in types:
                code = ErrorCode.INVALID_RECORD_STATE   # share.renew.acknowledge.enable=false (Kafka 4.3)
            codes.append(int(code))
            if first <= last:
                prev_last = last if prev_last is None else max(prev_last, last)
        if not (all_or_nothing and any(codes)):
            for (first, last, types), code in zip(acks, codes):
                if code:
                    continue
                if len(types) == 1 or first == last:
                    self._ack_run(first, last, AckType(types[0]), now_ms)
                    continue
                run_start = first
                for i in range(1, last - first + 2):
                    if i == last - first + 1 or types[i] != types[i - 1]:
                        self._ack_run(run_start, first + i - 1, AckType(types[i - 1]), now_ms)
                        run_start = first + i
            self._settle()
        return AckOutcome(tuple(codes), self._durable_version != version)

    def _all_held(self, member_id: str, first: int, last: int) -> bool:
        """Every tracked record of [first, last] at/after the SPSO, and every record below it
        still tracked, is Acquired by ``member_id`` (live: locks are expired before the check)."""
        k = max(bisect_right(self._firsts, first) - 1, 0)
        while k < len(self._ranges) and self._ranges[k].first <= last:
            r = self._ranges[k]
            k += 1
            if r.last < first:
                continue
            if r.state is not ACQUIRED or r.owner != member_id:
                return False
        return True

    def _ack_run(self, first: int, last: int, ack_type: AckType, now_ms: int) -> None:
        n = 0
        for x, y in self._spans_where(first, last, lambda r: True):
            n += self._update(x, y, ACK_EVENTS[ack_type], now_ms=now_ms)
        self.metrics.acknowledged_records[int(ack_type)] += n

    # ------------------------------------------------------------------ releases and time

    def release_member(self, member_id: str, *, now_ms: int) -> int:
        """The member's share session closed / it left: release all it holds (Available, or
        Archived at the delivery limit). Returns the number of records released."""
        self._expire(now_ms)
        spans = [(r.first, r.last) for r in self._ranges if r.state is ACQUIRED and r.owner == member_id]
        n = sum(self._update(a, b, Event.MEMBER_RELEASED) for a, b in spans)
        self.metrics.member_released_records += n
        self._settle()
        return n

    def expire_locks(self, now_ms: int) -> int:
        """Locks whose deadline is <= now_ms end: records go back to Available (Archived at the
        delivery limit, or below the SPSO). Returns the number of records affected."""
        n = self._expire(now_ms)
        return n

    def on_log_start_offset(self, log_start_offset: int) -> bool:
        """Retention moved the log start: records below it are archived and the SPSO follows,
        except Acquired records, which stay acknowledgeable (KIP-932 "Log retention")."""
        self._log_start = max(self._log_start, log_start_offset)
        if log_start_offset <= self._start:
            return False
        self._archive_available(self._start, min(log_start_offset, self._end) - 1, "log_start")
        self._split(log_start_offset)
        self._start = log_start_offset
        self._end = max(self._end, log_start_offset)
        self._settle()                  # drops what is now below the SPSO unless Acquired
        self._coalesce(1, bisect_left(self._firsts, self._start))   # records held below it
        self._durable_version += 1
        return True

    # ------------------------------------------------------------------ dead letters (KIP-1191)

    def take_dead_letters(self, max_records: int) -> list[DeadLetter]:
        """Archiving records not being written yet, at most ``max_records``, in offset order; they
        are marked as being written until ``dead_letters_written`` or ``dead_letters_failed``.
        A loaded range has no reason: delivery count at the limit says DELIVERY_COUNT_LIMIT, else
        REJECT (a record rejected on its last attempt is named by its count)."""
        out: list[DeadLetter] = []
        remaining = max_records
        for x, y in self._spans_where(self._start, self._end - 1,
                                      lambda r: r.state is ARCHIVING and not r.sending):
            if remaining <= 0:
                break
            y = min(y, x + remaining - 1)
            i, j = self._split(x), self._split(y + 1)
            for k in range(i, j):
                r = self._ranges[k]
                r.sending = True
                reason = r.reason or (REASON_DELIVERY_COUNT_LIMIT if r.count >= self.delivery_count_limit
                                      else REASON_REJECT)
                out.append(DeadLetter(r.first, r.last, r.count, reason))
            self._coalesce(i, j)
            remaining -= y - x + 1
        return out

    def dead_letters_written(self, first: int, last: int, *, copied: bool = True) -> int:
        """The DLQ records of the Archiving records in [first, last] handed out by
        take_dead_letters are durable (``copied``), or none will be written (no usable DLQ topic):
        they are Archived (records that went Archiving meanwhile wait for their own write). Returns how many; the
        caller persists the state."""
        n = 0
        for x, y in self._spans_where(first, last, lambda r: r.state is ARCHIVING and r.sending):
            n += self._update(x, y, Event.DEAD_LETTERED)
        if copied:
            self.metrics.dead_lettered_records += n
        else:
            self.metrics.dead_letter_skipped_records += n
        self._settle()
        return n

    def dead_letters_failed(self, first: int, last: int) -> None:
        """Writing the DLQ records of [first, last] failed: the next take_dead_letters hands them out again."""
        for x, y in self._spans_where(first, last, lambda r: r.state is ARCHIVING and r.sending):
            i, j = self._split(x), self._split(y + 1)
            for k in range(i, j):
                self._ranges[k].sending = False
            self._coalesce(i, j)

    def archiving_count(self) -> int:
        """Records waiting for their DLQ record (Archiving), being written or not."""
        return sum(r.last - r.first + 1 for r in self._ranges if r.state is ARCHIVING)

    # ------------------------------------------------------------------ internals

    def _expire(self, now_ms: int) -> int:
        if self._deadline_floor is None or now_ms < self._deadline_floor:
            return 0
        spans = [(r.first, r.last) for r in self._ranges
                 if r.state is ACQUIRED and r.deadline_ms <= now_ms]
        n = sum(self._update(a, b, Event.LOCK_EXPIRED) for a, b in spans)
        self.metrics.lock_expired_records += n
        self._recompute_deadline()
        self._settle()
        return n

    def _archive_available(self, first: int, last: int, reason: str) -> None:
        n = 0
        for x, y in self._spans_where(first, last, lambda r: r.state is AVAILABLE):
            n += self._update(x, y, Event.ARCHIVE)
        if reason == "stale":
            self.metrics.stale_archived_records += n
        else:
            self.metrics.log_start_archived_records += n

    def _spans_where(self, first: int, last: int, pred) -> list[tuple[int, int]]:
        """[first, last] clipped to the tracked ranges that satisfy ``pred``."""
        out = []
        k = max(bisect_right(self._firsts, first) - 1, 0)
        while k < len(self._ranges) and self._ranges[k].first <= last:
            r = self._ranges[k]
            k += 1
            if r.last >= first and pred(r):
                out.append((max(r.first, first), min(r.last, last)))
        return out

    def _update(self, first: int, last: int, event: Event, *, member_id: str | None = None,
                now_ms: int = 0) -> int:
        """Apply ``event`` to every tracked record of [first, last]; returns how many. Raises
        IllegalTransition if the table refuses any of them (callers validate first)."""
        i = self._split(first)
        j = self._split(last + 1)
        n = 0
        limit = self.delivery_count_limit
        self._changes += 1
        for k in range(i, j):
            r = self._ranges[k]
            ev = Event.ARCHIVE if (r.last < self._start and event in _ARCHIVE_BELOW_START) else event
            result = next_state(r.state, ev, r.count, limit, bool(self.dead_letter_topic))
            if result is None:
                raise IllegalTransition(f"{r.state.name} --{ev.name}--> ? for offsets {r.first}-{r.last}")
            to, count = result
            owner = deadline = None
            if to is ACQUIRED:
                owner = member_id if ev is Event.ACQUIRE else r.owner
                deadline = now_ms + self.record_lock_duration_ms
                self._note_deadline(deadline)
                if ev is Event.RENEW:
                    self._deadline_exact = False
            elif r.state is ACQUIRED:
                self._deadline_exact = False
            size = r.last - r.first + 1
            if ev is Event.ACQUIRE:
                self.metrics.acquired_records += size
            elif to in (ARCHIVED, ARCHIVING) and ev in (Event.RELEASE, Event.LOCK_EXPIRED, Event.MEMBER_RELEASED):
                self.metrics.delivery_limit_archived_records += size
            if ev not in (Event.ACQUIRE, Event.RENEW) or to in TERMINAL:
                self._durable_version += 1
            if self.key_ordering and r.state in _HOLDS_KEY and to not in _HOLDS_KEY and self._keys:
                self._note_freed_keys(r.first, r.last)
            reason = None
            if to is ARCHIVING:
                reason = REASON_REJECT if ev is Event.REJECT else REASON_DELIVERY_COUNT_LIMIT
            self._ranges[k] = _Range(r.first, r.last, to, count, owner, deadline, reason)
            n += size
        self._coalesce(i, j)
        return n

    def _note_freed_keys(self, first: int, last: int) -> None:
        """The records of [first, last] are done with: their keys are free once that is durable
        (``made_durable``), not before (see the module docstring)."""
        keys, pending, version = self._keys, self._pending_keys, self._durable_version
        for o in range(first, last + 1):
            key = keys.get(o)
            if key is not None:
                pending[key] = version

    def _split(self, offset: int) -> int:
        """Make ``offset`` start a range if a range covers it; return the index of the first
        range starting at or after ``offset``."""
        k = bisect_right(self._firsts, offset) - 1
        if k < 0:
            return 0
        r = self._ranges[k]
        if r.first == offset:
            return k
        if offset <= r.last:
            self._ranges[k] = r.with_bounds(r.first, offset - 1)
            self._ranges.insert(k + 1, r.with_bounds(offset, r.last))
            self._firsts.insert(k + 1, offset)
        return k + 1

    def _coalesce(self, i: int, j: int) -> None:
        """Merge equal touching neighbours among indices i-1 .. j (never across the SPSO)."""
        ranges, firsts = self._ranges, self._firsts
        k = max(i, 1)
        stop = min(j, len(ranges) - 1)
        while k <= stop:
            a, b = ranges[k - 1], ranges[k]
            if a.last + 1 == b.first and b.first != self._start and a.same(b):
                ranges[k - 1] = a.with_bounds(a.first, b.last)
                del ranges[k]
                del firsts[k]
                stop -= 1
            else:
                k += 1

    def _append(self, r: _Range) -> None:
        self._changes += 1
        self._ranges.append(r)
        self._firsts.append(r.first)

    def _settle(self) -> None:
        """Drop resolved records below the SPSO and advance the SPSO over a terminal prefix."""
        k = bisect_left(self._firsts, self._start)
        if k:
            keep = [r for r in self._ranges[:k] if r.state is ACQUIRED]
            if len(keep) != k:
                self._ranges[:k] = keep
                self._firsts[:k] = [r.first for r in keep]
                k = len(keep)
        j = k
        while j < len(self._ranges) and self._ranges[j].state in TERMINAL:
            j += 1
        if j > k:
            self._start = self._ranges[j - 1].last + 1
            del self._ranges[k:j]
            del self._firsts[k:j]
            self._durable_version += 1
        if self._keys_floor < self._start:
            self._prune_keys()

    def _note_deadline(self, deadline_ms: int) -> None:
        if self._deadline_floor is None or deadline_ms < self._deadline_floor:
            self._deadline_floor = deadline_ms

    def _recompute_deadline(self) -> None:
        deadlines = [r.deadline_ms for r in self._ranges if r.state is ACQUIRED]
        self._deadline_floor = min(deadlines) if deadlines else None
        self._deadline_exact = True

    def _view(self) -> list[StateBatch]:
        out: list[StateBatch] = []
        for r in self._ranges[bisect_left(self._firsts, self._start):]:
            state, count = (AVAILABLE, r.count - 1) if r.state is ACQUIRED else (r.state, r.count)
            if state is AVAILABLE and count == 0:
                continue
            if out and out[-1].last_offset + 1 == r.first and out[-1][2:] == (state, count):
                out[-1] = out[-1]._replace(last_offset=r.last)
            else:
                out.append(StateBatch(r.first, r.last, int(state), count))
        return out

    def check_invariants(self) -> None:
        """Raise RuntimeError if the range structure is inconsistent (for tests and debugging)."""
        def fail(msg: str) -> None:
            raise RuntimeError(f"{msg}: start={self._start} end={self._end} ranges={self.ranges()}")
        if self._firsts != [r.first for r in self._ranges]:
            fail("firsts out of sync")
        if self._start < self._log_start or self._end < self._start:
            fail("offsets out of order")
        prev = None
        for r in self._ranges:
            if r.first > r.last:
                fail("empty range")
            if prev is not None:
                if r.first <= prev.last:
                    fail("overlap or unsorted")
                if r.first == prev.last + 1 and r.first != self._start and r.same(prev):
                    fail("unmerged neighbours")
            if (r.state is ACQUIRED) != (r.owner is not None and r.deadline_ms is not None):
                fail("owner/deadline iff Acquired")
            # at or past the limit only if it was lowered meanwhile (KIP-1240: one final delivery)
            if r.state is AVAILABLE and r.count >= self._highest_limit:
                fail("Available at the delivery limit")
            if r.state is ACQUIRED and not 1 <= r.count <= self._highest_limit:
                fail("bad delivery count")
            if r.sending and r.state is not ARCHIVING:
                fail("only Archiving ranges are being dead-lettered")
            if r.first < self._start and (r.last >= self._start or r.state is not ACQUIRED):
                fail("below the SPSO only Acquired ranges")
            if r.state is ACQUIRED and (self._deadline_floor is None or r.deadline_ms < self._deadline_floor):
                fail("deadline floor above a deadline")
            prev = r
        in_flight = self._ranges[bisect_left(self._firsts, self._start):]
        pos = self._start
        for r in in_flight:
            if r.first != pos:
                fail("hole in flight")
            pos = r.last + 1
        if pos != self._end:
            fail("ranges do not reach the SPEO")
        if in_flight and in_flight[0].state in TERMINAL:
            fail("SPSO not advanced over a terminal prefix")
        counts: dict = {}
        for k in self._keys.values():
            counts[k] = counts.get(k, 0) + 1
        if counts != self._key_counts:
            fail("key counts out of step with the cached keys")
        if any(not self._start <= o < self._end for o in self._keys):
            fail("keys cached outside [SPSO, SPEO)")
