"""SharePartition against a naive per-offset model (hypothesis stateful testing).

The model keeps a dict offset -> [state, delivery_count, owner, deadline_ms] and re-states every
rule of the core one record at a time. Random sequences of produce / compaction / log-start moves
/ acquire / acknowledge (every type, per batch and per offset, valid and invalid) / member release
/ lock expiry / writes to a simulated share coordinator / restarts from it run against both; after
every step the core's ranges must expand to exactly the model's records, and its invariants hold.
"""

from bisect import bisect_right

from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from actors.share_partition import SharePartition

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
TERMINAL = (ACKNOWLEDGED, ARCHIVED)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
OK, BAD_REQUEST, BAD_STATE = 0, 42, 121
MEMBERS = ("a", "b", "c")


class Model:
    """Per-offset restatement of the share-partition rules."""

    def __init__(self, lock_ms, limit, max_locks):
        self.lock_ms, self.limit, self.max_locks = lock_ms, limit, max_locks
        self.renew = True   # share.renew.acknowledge.enable
        self.recs: dict[int, list] = {}
        self.start = self.end = self.log_start = 0

    # -- helpers
    def settle(self):
        for o in [o for o in self.recs if o < self.start and self.recs[o][0] != ACQUIRED]:
            del self.recs[o]
        while self.start < self.end and self.recs[self.start][0] in TERMINAL:
            del self.recs[self.start]
            self.start += 1

    def end_acquisition(self, o, event):
        """Release / lock expiry / member release of Acquired offset o."""
        r = self.recs[o]
        if o < self.start:
            del self.recs[o]
        else:
            self.recs[o] = [ARCHIVED if r[1] >= self.limit else AVAILABLE, r[1], None, None]

    def fetch_offset(self):
        for o in range(self.start, self.end):
            if self.recs[o][0] == AVAILABLE:
                return o
        return self.end if self.end - self.start < self.max_locks else None

    def next_deadline(self):
        ds = [r[3] for r in self.recs.values() if r[0] == ACQUIRED]
        return min(ds) if ds else None

    # -- operations
    def expire(self, now):
        hits = [o for o, r in self.recs.items() if r[0] == ACQUIRED and r[3] <= now]
        for o in hits:
            self.end_acquisition(o, "expire")
        self.settle()
        return len(hits)

    def acquire(self, member, batches, max_records, now, fetch_offset, aborted, record_limit=False):
        self.expire(now)
        if max_records <= 0 or not batches:
            return []
        batches = [b for b in batches if b[1] >= self.start]
        if not batches:
            return []
        bases = [b[0] for b in batches]

        def batch_end(x):
            k = bisect_right(bases, x) - 1
            return batches[k][1] if k >= 0 and x <= batches[k][1] else x

        base, hi = batches[0][0], batches[-1][1]
        if fetch_offset is not None and fetch_offset < base:
            for o in range(max(fetch_offset, self.start), min(base, self.end)):
                if self.recs[o][0] == AVAILABLE:
                    self.recs[o] = [ARCHIVED, self.recs[o][1], None, None]
        if base > self.end:
            for o in range(self.end, base):
                self.recs[o] = [ARCHIVED, 0, None, None]
            self.end = base
        self.settle()
        lo = max(base, self.start)
        remaining, stop, got = max_records, None, []
        for o in range(lo, min(hi, self.end - 1) + 1):
            if stop is not None and o > stop:
                break
            if self.recs[o][0] == AVAILABLE:
                self.recs[o] = [ACQUIRED, self.recs[o][1] + 1, member, now + self.lock_ms]
                got.append(o)
                if stop is None:
                    remaining -= 1
                    if remaining == 0:
                        stop = o                # MaxRecords is a hard limit in every acquire mode
        if hi >= self.end and stop is None:
            room = self.max_locks - (self.end - self.start)
            if room > 0:
                x = self.end + min(remaining, room) - 1
                # the in-flight window rounds up to a batch end (not in record_limit mode), never past MaxRecords
                last = min(hi, self.end + remaining - 1, x if record_limit else batch_end(x))
                for o in range(self.end, last + 1):
                    self.recs[o] = [ACQUIRED, 1, member, now + self.lock_ms]
                    got.append(o)
                self.end = last + 1
        out = []
        for o in got:
            if any(fa <= o <= la for fa, la in aborted):
                self.recs[o] = [ARCHIVED, self.recs[o][1], None, None]
            else:
                out.append((o, self.recs[o][1]))
        self.settle()
        return out

    def acknowledge(self, member, acks, now, all_or_nothing):
        self.expire(now)
        codes, prev_last = [], None
        for f, l, types in acks:
            if (f < 0 or f > l or len(types) not in (1, l - f + 1) or any(t not in (0, 1, 2, 3, 4) for t in types)
                    or (prev_last is not None and f <= prev_last) or l >= self.end):
                code = BAD_REQUEST
            elif not all(self.recs[o][0] == ACQUIRED and self.recs[o][2] == member
                         for o in range(f, l + 1) if o in self.recs):
                code = BAD_STATE
            elif not self.renew and RENEW in types:
                code = BAD_STATE
            else:
                code = OK
            codes.append(code)
            if f <= l:
                prev_last = l if prev_last is None else max(prev_last, l)
        if not (all_or_nothing and any(codes)):
            for (f, l, types), code in zip(acks, codes):
                if code:
                    continue
                for o in range(f, l + 1):
                    if o not in self.recs:
                        continue
                    t = types[0] if len(types) == 1 else types[o - f]
                    r = self.recs[o]
                    if t == RENEW:
                        r[3] = now + self.lock_ms
                    elif o < self.start:
                        del self.recs[o]
                    elif t == ACCEPT:
                        self.recs[o] = [ACKNOWLEDGED, r[1], None, None]
                    elif t == RELEASE:
                        self.end_acquisition(o, "release")
                    else:
                        self.recs[o] = [ARCHIVED, r[1], None, None]
            self.settle()
        return tuple(codes)

    def release_member(self, member, now):
        self.expire(now)
        hits = [o for o, r in self.recs.items() if r[0] == ACQUIRED and r[2] == member]
        for o in hits:
            self.end_acquisition(o, "member")
        self.settle()
        return len(hits)

    def on_log_start(self, lso):
        self.log_start = max(self.log_start, lso)
        if lso <= self.start:
            return False
        for o in range(self.start, min(lso, self.end)):
            if self.recs[o][0] != ACQUIRED:
                del self.recs[o]
        self.start = lso
        self.end = max(self.end, lso)
        self.settle()
        return True

    def persisted(self):
        """offset -> (state, count) as the KIP records it (Acquired n -> Available n-1)."""
        out = {}
        for o, (s, c, _, _) in self.recs.items():
            if o < self.start:
                continue
            if s == ACQUIRED:
                s, c = AVAILABLE, c - 1
            if (s, c) != (AVAILABLE, 0):
                out[o] = (s, c)
        return out

    def load(self, start, cmap, log_start):
        self.log_start = log_start
        self.start = max(start, log_start)
        self.recs = {}
        for o, (s, c) in cmap.items():
            if o < self.start:
                continue
            if s == ACQUIRED:
                s = AVAILABLE
            if s == AVAILABLE and c >= self.limit:
                s = ARCHIVED
            self.recs[o] = [s, c, None, None]
        self.end = max(self.recs) + 1 if self.recs else self.start
        for o in range(self.start, self.end):
            self.recs.setdefault(o, [AVAILABLE, 0, None, None])
        self.settle()


def expand(ranges):
    out = {}
    for first, last, state, count, owner, deadline in ranges:
        for o in range(first, last + 1):
            out[o] = [state, count, owner, deadline]
    return out


def runs(cmap):
    """offset -> (state, count) as maximal (first, last, state, count) state batches."""
    out = []
    for o in sorted(cmap):
        s, c = cmap[o]
        if out and out[-1][1] + 1 == o and out[-1][2:] == [s, c]:
            out[-1][1] = o
        else:
            out.append([o, o, s, c])
    return [tuple(b) for b in out]


ack_type = st.sampled_from([GAP, ACCEPT, ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT, RENEW])


class SharePartitionMachine(RuleBasedStateMachine):

    @initialize(limit=st.integers(2, 4), max_locks=st.integers(3, 16), start=st.integers(0, 3))
    def setup(self, limit, max_locks, start):
        self.lock_ms = 100
        self.sp = SharePartition("g", "t", 0, record_lock_duration_ms=self.lock_ms,
                                 delivery_count_limit=limit, max_record_locks=max_locks)
        self.model = Model(self.lock_ms, limit, max_locks)
        self.sp.load(start, [])
        self.model.load(start, {}, 0)
        self.coord_start, self.coord = start, {}     # the simulated share coordinator's state
        self.now = 0
        self.log: list[tuple[int, int]] = []          # (base, last) batches, possibly with gaps
        self.log_end = 0
        self.produce([3, 1, 4, 2, 2, 5, 1, 3], 0)

    # -- the log
    @rule(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4), gap=st.integers(0, 2))
    def produce(self, sizes, gap):
        pos = self.log_end + gap
        for n in sizes:
            self.log.append((pos, pos + n - 1))
            pos += n
        self.log_end = pos

    @rule(data=st.data())
    def compact(self, data):
        if len(self.log) > 1:
            del self.log[data.draw(st.integers(0, len(self.log) - 2))]

    @rule(delta=st.integers(0, 8))
    def move_log_start(self, delta):
        """Retention / DeleteRecords: often lands inside the in-flight window."""
        lso = max(self.model.log_start, min(self.model.start + delta, self.log_end))
        self.log = [b for b in self.log if b[1] >= lso]
        assert self.sp.on_log_start_offset(lso) == self.model.on_log_start(lso)

    # -- time
    @rule(delta=st.sampled_from([0, 1, 10, 40, 99, 100, 150]))
    def tick(self, delta):
        self.now += delta

    @rule()
    def expire(self):
        assert self.sp.expire_locks(self.now) == self.model.expire(self.now)

    # -- share-partition operations
    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(0, 12), n_batches=st.integers(1, 5),
          pass_fetch_offset=st.booleans(), batch_size=st.sampled_from([None, 1, 3]), record_limit=st.booleans(),
          data=st.data())
    def acquire(self, member, max_records, n_batches, pass_fetch_offset, batch_size, record_limit, data):
        self._acquire(member, max_records, n_batches, pass_fetch_offset, batch_size, data, record_limit)

    def _acquire(self, member, max_records, n_batches, pass_fetch_offset, batch_size, data, record_limit=False):
        self.sp.expire_locks(self.now)
        self.model.expire(self.now)
        fo = self.model.fetch_offset()
        assert self.sp.fetch_offset() == fo
        read_from = fo if fo is not None else self.model.start
        if self.log_end - read_from < 8:               # keep the log ahead of the readers
            self.produce(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)), data.draw(st.integers(0, 1)))
        batches = [b for b in self.log if b[1] >= read_from][:n_batches]
        aborted = []
        if batches and data.draw(st.integers(0, 5)) == 0:
            aborted = [data.draw(st.sampled_from(batches))]
        got = self.sp.acquire(member, batches, max_records=max_records, now_ms=self.now,
                              batch_size=batch_size, fetch_offset=read_from if pass_fetch_offset else None,
                              aborted=aborted, record_limit=record_limit)
        want = self.model.acquire(member, batches, max_records, self.now,
                                  read_from if pass_fetch_offset else None, aborted, record_limit)
        assert [(o, a.delivery_count) for a in got for o in range(a.first_offset, a.last_offset + 1)] == want
        assert all(a.first_offset <= a.last_offset for a in got)
        assert len(want) <= max_records   # a hard limit in every acquire mode (KIP-1206 record_limit, and issue 7 6a)
        if batch_size is None:       # returned ranges are maximal
            assert all(x.last_offset + 1 != y.first_offset or x.delivery_count != y.delivery_count
                       for x, y in zip(got, got[1:]))
        return got

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 8),
          how=st.sampled_from([RELEASE, RELEASE, GAP, "expire", "leave"]), data=st.data())
    def consumer_fails(self, member, max_records, how, data):
        """Acquire, then give everything back (release ack, gap ack, lock expiry, leaving)."""
        got = self._acquire(member, max_records, 5, True, None, data)
        if not got:
            return
        if how == "expire":
            self.now += self.lock_ms
            assert self.sp.expire_locks(self.now) == self.model.expire(self.now)
        elif how == "leave":
            self.release_member(member)
        else:
            acks = [(a.first_offset, a.last_offset, [how]) for a in got]
            out = self.sp.acknowledge(member, acks, now_ms=self.now)
            assert out.error_codes == self.model.acknowledge(member, acks, self.now, False)
            assert not any(out.error_codes)

    @rule(pick_holder=st.integers(0, 3), all_or_nothing=st.booleans(), data=st.data())
    def acknowledge(self, pick_holder, all_or_nothing, data):
        holders = sorted({r[4] for r in self.sp.ranges() if r[4] is not None})
        member = data.draw(st.sampled_from(holders if holders and pick_holder else MEMBERS))
        held = self.sp.member_holdings(member)
        acks = []
        for _ in range(data.draw(st.integers(1, 3))):
            if held and data.draw(st.integers(0, 3)):
                h = data.draw(st.sampled_from(held))
                f = data.draw(st.integers(h.first_offset, h.last_offset))
                l = data.draw(st.integers(f, h.last_offset + data.draw(st.sampled_from([0, 0, 0, 1]))))
            else:
                f = data.draw(st.integers(max(self.model.start - 4, 0), self.model.end + 1))
                l = f + data.draw(st.integers(-1, 4))
            if data.draw(st.booleans()) or l < f:
                types = [data.draw(ack_type)]
            else:
                types = data.draw(st.lists(ack_type, min_size=l - f + 1, max_size=l - f + 1))
            if data.draw(st.integers(0, 15)) == 0:
                types = types + [ACCEPT] if data.draw(st.booleans()) else [9]
            acks.append((f, l, types))
        if data.draw(st.integers(0, 3)):
            acks.sort()
        before = (self.model.start, self.model.persisted())
        out = self.sp.acknowledge(member, acks, now_ms=self.now, all_or_nothing=all_or_nothing)
        assert out.error_codes == self.model.acknowledge(member, acks, self.now, all_or_nothing)
        if (self.model.start, self.model.persisted()) != before:
            assert out.changed           # changed=False promises nothing to write

    @rule(member=st.sampled_from(MEMBERS))
    def release_member(self, member):
        assert self.sp.release_member(member, now_ms=self.now) == self.model.release_member(member, self.now)

    # -- persistence
    @rule()
    def write_state(self):
        """WriteShareGroupState with the delta; the coordinator merges it."""
        dirty = self.sp.take_dirty()
        if dirty is None:
            assert self.coord_start == self.model.start and self.coord == self.model.persisted()
            return
        start, batches = dirty
        assert start == self.model.start
        self.coord_start = start
        self.coord = {o: v for o, v in self.coord.items() if o >= start}
        for first, last, state, count in batches:
            assert first >= start and first <= last
            for o in range(first, last + 1):
                if (state, count) == (AVAILABLE, 0):
                    self.coord.pop(o, None)
                else:
                    self.coord[o] = (state, count)
        assert self.coord == self.model.persisted()

    @rule(limit=st.integers(2, 4), max_locks=st.integers(3, 16), lock_ms=st.sampled_from([50, 100, 150]),
          renew=st.booleans())
    def reconfigure(self, limit, max_locks, lock_ms, renew):
        """The group's configs change on a live share-partition (KIP-1240): the model applies the
        new delivery limit when an attempt ends, never when acquiring (a record past a lowered limit
        gets one final delivery), the new lock limit to the in-flight window, the new lock duration
        to the next lock."""
        self.sp.configure(record_lock_duration_ms=lock_ms, delivery_count_limit=limit, max_record_locks=max_locks,
                          renew_acknowledge_enable=renew)
        self.lock_ms = self.model.lock_ms = lock_ms
        self.model.limit, self.model.max_locks, self.model.renew = limit, max_locks, renew

    @rule(flush=st.booleans())
    def restart(self, flush):
        """The leader moves: a new SharePartition loads what the coordinator holds."""
        if flush:
            self.write_state()
        self.sp = SharePartition("g", "t", 0, record_lock_duration_ms=self.lock_ms,
                                 delivery_count_limit=self.model.limit, max_record_locks=self.model.max_locks,
                                 renew_acknowledge_enable=self.model.renew)
        self.sp.load(self.coord_start, runs(self.coord), log_start_offset=self.model.log_start)
        self.model.load(self.coord_start, self.coord, self.model.log_start)
        # what load changed (e.g. the log start overtook the stored start) is written next
        self.write_state()

    @invariant()
    def full_snapshot_matches(self):
        start, batches = self.sp.persistable()
        assert start == self.model.start
        assert {o: (s, c) for f, l, s, c in batches for o in range(f, l + 1)} == self.model.persisted()
        assert batches == runs(self.model.persisted())

    # -- after every step
    @invariant()
    def agrees_with_model(self):
        sp, m = self.sp, self.model
        sp.check_invariants()
        assert (sp.start_offset, sp.end_offset) == (m.start, m.end)
        assert sp.start_offset >= m.log_start
        assert expand(sp.ranges()) == m.recs
        assert sp.fetch_offset() == m.fetch_offset()
        assert sp.next_deadline_ms() == m.next_deadline()
        assert sp.in_flight_count() == m.end - m.start
        # SPSO is the first non-terminal in-flight offset (or the SPEO)
        assert m.start == m.end or m.recs[m.start][0] not in TERMINAL
        # coverage signals for --hypothesis-show-statistics
        if any(o < m.start for o in m.recs):
            event("records held below the SPSO")
        if any(r[1] >= m.limit for r in m.recs.values()):
            event("records at the delivery limit")
        if m.fetch_offset() is None:
            event("in-flight window full")


SharePartitionMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSharePartitionModel = SharePartitionMachine.TestCase
