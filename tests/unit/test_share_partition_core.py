"""SharePartition core (KIP-932 share-partition leader state machine): example-based tests.

Offsets are small integers; the "log" is given as (base_offset, last_offset) batches; time is a
plain integer passed as now_ms (a manual clock).
"""

import time

import pytest

from actors.share_partition import (
    TRANSITIONS, AckType, Acquired, Event, IllegalTransition, RecordState, SharePartition,
    StateBatch, next_state,
)
from protocol.errors import ErrorCode

ACCEPT, RELEASE, REJECT, GAP, RENEW = 1, 2, 3, 0, 4
LOCK_MS = 1000
OK, BAD_STATE, BAD_REQ = ErrorCode.NONE, ErrorCode.INVALID_RECORD_STATE, ErrorCode.INVALID_REQUEST


def singles(first, last):
    """One single-record log batch per offset, so rounding up to batches never matters."""
    return [(o, o) for o in range(first, last + 1)]


def make(start=0, **kw):
    kw.setdefault("record_lock_duration_ms", LOCK_MS)
    sp = SharePartition("g", "topic-id", 0, **kw)
    sp.load(start, [])
    return sp


def offsets(acquired):
    return [(o, a.delivery_count) for a in acquired for o in range(a.first_offset, a.last_offset + 1)]


# ---------------------------------------------------------------------------- basics

def test_acquire_accept_advances_spso():
    sp = make(100)
    assert sp.fetch_offset() == 100
    got = sp.acquire("m1", [(100, 109)], max_records=500, now_ms=0)
    assert got == [Acquired(100, 109, 1)]
    assert (sp.start_offset, sp.end_offset, sp.in_flight_count()) == (100, 110, 10)
    assert sp.fetch_offset() == 110
    out = sp.acknowledge("m1", [(100, 109, [ACCEPT])], now_ms=10)
    assert out.error_codes == (OK,) and out.changed and out.error_code == OK
    assert (sp.start_offset, sp.end_offset, sp.ranges()) == (110, 110, [])
    assert sp.take_dirty() == (110, [])
    assert sp.take_dirty() is None
    assert sp.metrics.acknowledged_records[ACCEPT] == 10
    sp.check_invariants()


def test_release_comes_back_with_delivery_count_2():
    sp = make()
    sp.acquire("m1", [(0, 4)], max_records=10, now_ms=0)
    sp.acknowledge("m1", [(0, 4, [RELEASE])], now_ms=1)
    assert sp.fetch_offset() == 0
    assert sp.take_dirty() == (0, [StateBatch(0, 4, 0, 1)])
    got = sp.acquire("m2", [(0, 4)], max_records=10, now_ms=2, fetch_offset=0)
    assert got == [Acquired(0, 4, 2)]
    assert sp.member_holdings("m2") == [Acquired(0, 4, 2)]
    assert sp.member_holdings("m1") == []
    assert sp.take_dirty() is None      # Acquired(2) persists as Available(1): unchanged


def test_reject_never_comes_back():
    sp = make()
    sp.acquire("m1", [(0, 4)], max_records=10, now_ms=0)
    sp.acknowledge("m1", [(0, 1, [ACCEPT]), (2, 2, [REJECT]), (3, 4, [RELEASE])], now_ms=1)
    assert sp.start_offset == 3
    got = sp.acquire("m1", [(0, 4), (5, 9)], max_records=100, now_ms=2, fetch_offset=sp.fetch_offset())
    assert offsets(got) == [(3, 2), (4, 2)] + [(o, 1) for o in range(5, 10)]
    sp.acknowledge("m1", [(3, 9, [ACCEPT])], now_ms=3)
    assert sp.start_offset == 10 and sp.ranges() == []


def test_delivery_limit_archives_a_poison_record():
    sp = make(delivery_count_limit=3)
    for attempt in range(1, 4):
        got = sp.acquire("m1", [(0, 0), (1, 1)], max_records=1, now_ms=attempt,
                         fetch_offset=sp.fetch_offset())
        assert got == [Acquired(0, 0, attempt)]
        sp.acknowledge("m1", [(0, 0, [RELEASE])], now_ms=attempt)
    # third release reached the limit: archived, SPSO moves past it, never delivered again
    assert sp.start_offset == 1 and sp.fetch_offset() == 1
    assert sp.metrics.delivery_limit_archived_records == 1
    assert sp.acquire("m1", [(0, 0), (1, 1)], max_records=5, now_ms=9) == [Acquired(1, 1, 1)]


def test_lock_expiry_with_a_manual_clock():
    sp = make()
    assert sp.next_deadline_ms() is None
    sp.acquire("m1", [(0, 4)], max_records=10, now_ms=0)
    sp.acquire("m2", [(5, 9)], max_records=10, now_ms=500)
    assert sp.next_deadline_ms() == LOCK_MS
    assert sp.expire_locks(999) == 0
    assert sp.expire_locks(1000) == 5
    assert sp.next_deadline_ms() == 1500
    assert sp.fetch_offset() == 0
    assert sp.ranges()[0] == (0, 4, RecordState.AVAILABLE, 1, None, None)
    # m1 lost the lock: acknowledging now fails
    assert sp.acknowledge("m1", [(0, 4, [ACCEPT])], now_ms=1001).error_codes == (BAD_STATE,)
    # acknowledge itself applies expiry at its own now_ms
    assert sp.acknowledge("m2", [(5, 9, [ACCEPT])], now_ms=1500).error_codes == (BAD_STATE,)
    assert sp.next_deadline_ms() is None
    got = sp.acquire("m2", [(0, 4), (5, 9)], max_records=100, now_ms=2000, fetch_offset=0)
    assert got == [Acquired(0, 9, 2)]
    assert sp.metrics.lock_expired_records == 10


def test_lock_expiry_at_limit_archives():
    sp = make(delivery_count_limit=2)
    sp.acquire("m1", [(0, 1)], max_records=10, now_ms=0)
    sp.expire_locks(LOCK_MS)
    sp.acquire("m1", [(0, 1)], max_records=10, now_ms=LOCK_MS, fetch_offset=0)
    sp.expire_locks(2 * LOCK_MS)
    assert sp.start_offset == 2 and sp.ranges() == [] and sp.fetch_offset() == 2


def test_member_release_on_close():
    sp = make(delivery_count_limit=2)
    sp.acquire("m1", singles(0, 2), max_records=3, now_ms=0)
    sp.acquire("m2", singles(3, 5), max_records=3, now_ms=0)
    sp.acknowledge("m1", [(1, 1, [RELEASE])], now_ms=1)
    sp.acquire("m1", singles(1, 1), max_records=1, now_ms=2, fetch_offset=1)   # offset 1 at count 2
    assert sp.release_member("m1", now_ms=3) == 3
    assert sp.member_holdings("m1") == []
    assert sp.member_holdings("m2") == [Acquired(3, 5, 1)]
    # 0 and 2 Available again (count 1); 1 reached the limit -> Archived
    assert [r[:4] for r in sp.ranges()] == [(0, 0, 0, 1), (1, 1, 4, 2), (2, 2, 0, 1), (3, 5, 1, 1)]
    assert sp.release_member("nobody", now_ms=4) == 0


def test_invalid_record_state_cases():
    sp = make()
    sp.acquire("m1", [(0, 4)], max_records=5, now_ms=0)
    sp.acquire("m2", [(5, 9)], max_records=5, now_ms=0)
    # another member's records
    assert sp.acknowledge("m1", [(5, 5, [ACCEPT])], now_ms=1).error_codes == (BAD_STATE,)
    # spanning own and another's: the whole batch fails, nothing applied
    out = sp.acknowledge("m1", [(3, 6, [ACCEPT])], now_ms=1)
    assert out.error_codes == (BAD_STATE,) and not out.changed
    # already acknowledged
    assert sp.acknowledge("m1", [(1, 1, [ACCEPT])], now_ms=1).error_codes == (OK,)
    assert sp.acknowledge("m1", [(1, 1, [REJECT])], now_ms=1).error_codes == (BAD_STATE,)
    # per-batch results: good batches apply, bad ones report
    out = sp.acknowledge("m1", [(2, 2, [ACCEPT]), (5, 5, [ACCEPT]), (3, 3, [ACCEPT])], now_ms=2)
    assert out.error_codes == (OK, BAD_STATE, BAD_REQ)     # (3,3) comes after (5,5): out of order
    assert out.error_code == BAD_STATE
    # Available (never acquired by anyone now) is not acknowledgeable
    sp.release_member("m2", now_ms=3)
    assert sp.acknowledge("m2", [(5, 9, [ACCEPT])], now_ms=3).error_codes == (BAD_STATE,)


def test_invalid_request_cases():
    sp = make()
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    cases = [
        (5, 4, [ACCEPT]),            # first > last
        (0, 2, [ACCEPT, ACCEPT]),    # wrong number of types
        (0, 0, [7]),                 # unknown type
        (0, 0, []),                  # no type
        (8, 12, [ACCEPT]),           # past the SPEO
        (-1, 0, [ACCEPT]),
    ]
    for case in cases:
        out = sp.acknowledge("m1", [case], now_ms=1)
        assert out.error_codes == (BAD_REQ,), case
        assert not out.changed
    assert sp.member_holdings("m1") == [Acquired(0, 9, 1)]


def test_all_or_nothing():
    sp = make()
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    out = sp.acknowledge("m1", [(0, 4, [ACCEPT]), (5, 20, [ACCEPT])], now_ms=1, all_or_nothing=True)
    assert out.error_codes == (OK, BAD_REQ) and not out.changed
    assert sp.member_holdings("m1") == [Acquired(0, 9, 1)]


def test_per_offset_ack_types_and_gaps():
    sp = make()
    # compacted log: batches 0-4 and 10-14, offsets 5-9 are gone; acquired as one range
    got = sp.acquire("m1", [(0, 4), (10, 14)], max_records=100, now_ms=0)
    assert got == [Acquired(0, 14, 1)]
    types = [ACCEPT] * 5 + [GAP] * 5 + [ACCEPT, RELEASE, REJECT, ACCEPT, RENEW]
    out = sp.acknowledge("m1", [(0, 14, types)], now_ms=100)
    assert out.error_codes == (OK,)
    assert sp.start_offset == 11
    assert [r[:4] for r in sp.ranges()] == [(11, 11, 0, 1), (12, 12, 4, 1), (13, 13, 2, 1), (14, 14, 1, 1)]
    assert sp.ranges()[-1][5] == 100 + LOCK_MS      # renewed lock
    m = sp.metrics.acknowledged_records
    assert (m[ACCEPT], m[GAP], m[RELEASE], m[REJECT], m[RENEW]) == (7, 5, 1, 1, 1)


def test_renew_extends_the_lock_without_a_write():
    sp = make()
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    sp.take_dirty()
    out = sp.acknowledge("m1", [(0, 9, [RENEW])], now_ms=900)
    assert out.error_codes == (OK,) and not out.changed
    assert sp.take_dirty() is None
    assert sp.next_deadline_ms() == 1900
    assert sp.expire_locks(1500) == 0
    assert sp.acknowledge("m1", [(0, 9, [ACCEPT])], now_ms=1800).error_codes == (OK,)


def test_spso_follows_the_kip_example():
    """KIP-932's worked example (three consumers on 110-119), with the writes it implies."""
    sp = make(100, record_lock_duration_ms=30_000)
    log = singles(100, 120)
    read = lambda: [b for b in log if b[0] >= sp.fetch_offset()]   # noqa: E731
    sp.acquire("c1", read(), max_records=10, now_ms=0)
    sp.acknowledge("c1", [(100, 109, [ACCEPT])], now_ms=0)
    assert sp.take_dirty() == (110, [])
    assert offsets(sp.acquire("c1", read(), max_records=3, now_ms=0)) == [(110, 1), (111, 1), (112, 1)]
    assert offsets(sp.acquire("c2", read(), max_records=6, now_ms=1000))[0] == (113, 1)
    assert sp.acquire("c3", read(), max_records=1, now_ms=2000) == [Acquired(119, 119, 1)]
    assert sp.end_offset == 120 and sp.take_dirty() is None
    sp.acknowledge("c1", [(110, 110, [RELEASE])], now_ms=3000)
    assert sp.take_dirty() == (110, [StateBatch(110, 110, 0, 1)])
    sp.acknowledge("c3", [(119, 119, [ACCEPT])], now_ms=3000)
    assert sp.take_dirty() == (110, [StateBatch(119, 119, 2, 1)])
    fo = sp.fetch_offset()
    assert offsets(sp.acquire("c1", read(), max_records=2, now_ms=5000, fetch_offset=fo)) == [(110, 2), (120, 1)]
    assert sp.end_offset == 121 and sp.take_dirty() is None
    assert sp.expire_locks(30_000) == 2                      # c1's 111-112
    assert sp.take_dirty() == (110, [StateBatch(111, 112, 0, 1)])
    sp.acknowledge("c2", [(113, 118, [ACCEPT])], now_ms=30_500)
    assert sp.take_dirty() == (110, [StateBatch(113, 118, 2, 1)])
    assert offsets(sp.acquire("c3", read(), max_records=2, now_ms=30_600, fetch_offset=sp.fetch_offset())) == [
        (111, 2), (112, 2)]
    sp.acknowledge("c1", [(110, 110, [ACCEPT])], now_ms=31_000)
    assert sp.start_offset == 111 and sp.take_dirty() == (111, [])
    sp.acknowledge("c3", [(111, 112, [ACCEPT])], now_ms=31_000)
    assert (sp.start_offset, sp.end_offset) == (120, 121)
    assert sp.persistable() == (120, [])            # 120 is Acquired(1) = Available(0): not written
    assert sp.take_dirty() == (120, [])


# ---------------------------------------------------------------------------- limits and batches

def test_max_records_is_a_hard_limit_in_every_acquire_mode():
    """Issue 7 item 6a: librdkafka asks for 500 records and producers write batches of ~1,000; acquiring
    whole batches let idle members' waiting ShareFetches hoard records a joining member then waited 30 s
    for. A log batch is split instead (its bytes are sent whole; AcquiredRecords lists what is held)."""
    for record_limit in (False, True):
        sp = make()
        assert sp.acquire("m1", [(0, 999)], max_records=500, now_ms=0, record_limit=record_limit) == [
            Acquired(0, 499, 1)]
        assert sp.fetch_offset() == 500
        assert sp.acquire("m2", [(0, 999)], max_records=500, now_ms=0, fetch_offset=500,
                          record_limit=record_limit) == [Acquired(500, 999, 1)]
        sp = make()
        assert sp.acquire("m1", [(0, 4), (5, 9)], max_records=3, now_ms=0, record_limit=record_limit) == [
            Acquired(0, 2, 1)]
        assert sp.acquire("m1", [(0, 4), (5, 9)], max_records=6, now_ms=0, fetch_offset=3,
                          record_limit=record_limit) == [Acquired(3, 8, 1)]
        # Available in-flight records too: a released batch goes out MaxRecords at a time
        sp = make()
        sp.acquire("m1", [(0, 999)], max_records=1000, now_ms=0)
        sp.acknowledge("m1", [(0, 999, [RELEASE])], now_ms=1)
        assert sp.acquire("m2", [(0, 999)], max_records=300, now_ms=2, fetch_offset=0,
                          record_limit=record_limit) == [Acquired(0, 299, 2)]
        assert sp.acquire("m3", [(0, 999)], max_records=300, now_ms=2, fetch_offset=300,
                          record_limit=record_limit) == [Acquired(300, 599, 2)]


def test_partial_batch_only_when_states_differ():
    sp = make()
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    sp.acknowledge("m1", [(0, 9, [RELEASE, ACCEPT, RELEASE, RELEASE, ACCEPT, RELEASE, RELEASE, RELEASE,
                                  RELEASE, RELEASE])], now_ms=1)
    # 0 Available, 1 Ack, 2-3 Available, 4 Ack, 5-9 Available
    got = sp.acquire("m2", [(0, 9)], max_records=6, now_ms=2, fetch_offset=0)
    assert got == [Acquired(0, 0, 2), Acquired(2, 3, 2), Acquired(5, 7, 2)]


def test_max_record_locks_bounds_the_in_flight_window():
    sp = make(max_record_locks=10)
    log = [(o, o + 3) for o in range(0, 40, 4)]        # batches of 4
    got = sp.acquire("m1", log, max_records=100, now_ms=0)
    # 10 allowed, rounded up to the end of the batch holding offset 9: 0-11
    assert got == [Acquired(0, 11, 1)] and sp.in_flight_count() == 12
    # rounded up to the batch, but never past MaxRecords; record_limit stops at the window exactly
    assert make(max_record_locks=10).acquire("m1", log, max_records=11, now_ms=0) == [Acquired(0, 10, 1)]
    assert make(max_record_locks=10).acquire("m1", log, max_records=11, now_ms=0, record_limit=True) == [
        Acquired(0, 9, 1)]
    assert sp.fetch_offset() is None
    assert sp.acquire("m2", log[3:], max_records=100, now_ms=0) == []
    # Available in-flight records are still handed out at the limit
    sp.acknowledge("m1", [(4, 7, [RELEASE])], now_ms=1)
    assert sp.fetch_offset() == 4
    assert sp.acquire("m2", log[1:], max_records=100, now_ms=1, fetch_offset=4) == [Acquired(4, 7, 2)]
    assert sp.end_offset == 12
    # acknowledging the head frees the window
    sp.acknowledge("m1", [(0, 3, [ACCEPT])], now_ms=2)
    assert sp.in_flight_count() == 8 and sp.fetch_offset() == 12
    assert sp.acquire("m3", log[3:], max_records=100, now_ms=2) == [Acquired(12, 15, 1)]
    assert sp.fetch_offset() is None


def test_batch_size_splits_acquired_records_at_batch_boundaries():
    sp = make()
    log = [(o, o + 2) for o in range(0, 30, 3)]
    got = sp.acquire("m1", log, max_records=30, now_ms=0, batch_size=7)
    assert got == [Acquired(0, 8, 1), Acquired(9, 17, 1), Acquired(18, 26, 1), Acquired(27, 29, 1)]


def test_stale_records_and_holes_are_archived():
    sp = make(10)
    sp.acquire("m1", [(10, 19)], max_records=10, now_ms=0)
    sp.acknowledge("m1", [(10, 19, [RELEASE])], now_ms=1)
    # the log no longer has 10-14 (compacted): a read from 10 starts at 15
    got = sp.acquire("m1", [(15, 19), (25, 29)], max_records=100, now_ms=2, fetch_offset=10)
    assert got == [Acquired(15, 19, 2), Acquired(20, 29, 1)]
    assert sp.start_offset == 15 and sp.metrics.stale_archived_records == 5
    sp.acknowledge("m1", [(15, 29, [ACCEPT])], now_ms=3)
    # read from 30 returns a batch at 40: 30-39 do not exist and are skipped
    assert sp.acquire("m1", [(40, 41)], max_records=100, now_ms=4, fetch_offset=30) == [Acquired(40, 41, 1)]
    assert sp.start_offset == 40


def test_aborted_transactions_are_archived_not_delivered():
    sp = make()
    got = sp.acquire("m1", [(0, 4), (5, 9), (10, 14)], max_records=100, now_ms=0, aborted=[(5, 9)])
    assert got == [Acquired(0, 4, 1), Acquired(10, 14, 1)]
    sp.acknowledge("m1", [(0, 4, [ACCEPT])], now_ms=1)
    assert sp.start_offset == 10
    assert sp.metrics.aborted_archived_records == 5


def test_batches_below_spso_and_empty_reads():
    sp = make(10)
    assert sp.acquire("m1", [], max_records=10, now_ms=0) == []
    assert sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0) == []
    assert sp.acquire("m1", [(5, 14)], max_records=0, now_ms=0) == []
    assert sp.acquire("m1", [(5, 14)], max_records=10, now_ms=0) == [Acquired(10, 14, 1)]
    with pytest.raises(ValueError):
        sp.acquire("m1", [(20, 25), (22, 30)], max_records=10, now_ms=0)


# ---------------------------------------------------------------------------- persistence

def test_restart_never_redelivers_terminal_records_and_frees_acquired_ones():
    sp = make()
    sp.acquire("m1", [(0, 19)], max_records=20, now_ms=0)
    types = [RELEASE] * 2 + [ACCEPT] * 3 + [REJECT] * 2 + [RELEASE] * 3 + [ACCEPT] * 10
    sp.acknowledge("m1", [(0, 19, types)], now_ms=1)
    sp.acquire("m2", [(0, 19)], max_records=2, now_ms=2, fetch_offset=0)     # 0-1 at count 2
    sp.acquire("m3", [(20, 24)], max_records=5, now_ms=2)                  # 20-24 at count 1
    start, batches = sp.persistable()
    assert (start, batches) == (0, [StateBatch(0, 1, 0, 1), StateBatch(2, 4, 2, 1), StateBatch(5, 6, 4, 1),
                                    StateBatch(7, 9, 0, 1), StateBatch(10, 19, 2, 1)])
    fresh = SharePartition("g", "topic-id", 0, record_lock_duration_ms=LOCK_MS)
    fresh.load(start, batches, log_start_offset=0)
    fresh.check_invariants()
    assert fresh.end_offset == 20 and fresh.fetch_offset() == 0
    got = fresh.acquire("m9", [(0, 19), (20, 24)], max_records=100, now_ms=0, fetch_offset=0)
    # acknowledged/rejected never again; 0-1 and 7-9 redelivered at count 2; 20-24 as new (count 1)
    assert offsets(got) == [(0, 2), (1, 2), (7, 2), (8, 2), (9, 2)] + [(o, 1) for o in range(20, 25)]


def test_load_rules():
    sp = SharePartition("g", "t", 0, delivery_count_limit=3)
    # Acquired comes back Available with its count; at the limit it is archived; holes are
    # Available with count 0; everything below the log start is gone
    sp.load(5, [(5, 6, 2, 1), (8, 9, 1, 2), (10, 10, 0, 3), (12, 12, 4, 1), (2, 3, 0, 1)],
            log_start_offset=6)
    sp.check_invariants()
    assert (sp.start_offset, sp.end_offset) == (7, 13)
    assert [r[:4] for r in sp.ranges()] == [(7, 7, 0, 0), (8, 9, 0, 2), (10, 10, 4, 3), (11, 11, 0, 0),
                                           (12, 12, 4, 1)]
    # the coordinator is told about what load changed
    assert sp.take_dirty() == (7, [StateBatch(8, 9, 0, 2), StateBatch(10, 10, 4, 3)])
    assert sp.take_dirty() is None
    with pytest.raises(ValueError):
        sp.load(0, [(3, 2, 0, 1)])
    with pytest.raises(ValueError):
        sp.load(0, [(0, 5, 0, 1), (5, 6, 2, 1)])
    with pytest.raises(ValueError):
        sp.load(0, [(0, 5, 5, 1)])  # no such state (3 is Archiving: KIP-1191)
    with pytest.raises(ValueError):
        sp.load(-1, [])


def test_take_dirty_and_invalidate():
    sp = make()
    assert sp.take_dirty() is None
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    assert sp.take_dirty() is None
    sp.acknowledge("m1", [(3, 4, [ACCEPT])], now_ms=1)
    assert sp.take_dirty() == (0, [StateBatch(3, 4, 2, 1)])
    sp.invalidate_persisted()
    assert sp.take_dirty() == (0, [StateBatch(3, 4, 2, 1)])
    assert sp.delivery_complete_count() == 2


# ---------------------------------------------------------------------------- log start offset

def test_on_log_start_offset():
    sp = make()
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    sp.acknowledge("m1", [(0, 9, [RELEASE] * 3 + [ACCEPT] * 2 + [RELEASE] * 5)], now_ms=1)
    sp.acquire("m2", singles(0, 9), max_records=3, now_ms=2, fetch_offset=0)  # m2 holds 0-2
    sp.acquire("m3", [(10, 14)], max_records=5, now_ms=2)                 # m3 holds 10-14
    assert sp.on_log_start_offset(8)
    sp.check_invariants()
    assert (sp.start_offset, sp.log_start_offset) == (8, 8)
    assert sp.fetch_offset() == 8
    # m2's records below the log start can still be acknowledged (any type archives them)
    assert sp.member_holdings("m2") == [Acquired(0, 2, 2)]
    assert sp.acknowledge("m2", [(0, 1, [RELEASE]), (2, 2, [ACCEPT])], now_ms=3).error_codes == (OK, OK)
    assert sp.member_holdings("m2") == []
    assert sp.ranges()[0][0] == 8
    assert not sp.on_log_start_offset(5)
    # beyond the SPEO: everything Available goes, m3's locks stay until they expire
    assert sp.on_log_start_offset(20)
    assert (sp.start_offset, sp.end_offset) == (20, 20)
    assert sp.member_holdings("m3") == [Acquired(10, 14, 1)]
    assert sp.expire_locks(2 + LOCK_MS) == 5
    assert sp.ranges() == [] and sp.fetch_offset() == 20
    assert sp.metrics.log_start_archived_records == 5       # 5-7, then 8-9


def test_log_start_inside_an_acquired_range_and_renew_below_it():
    sp = make()
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    sp.on_log_start_offset(5)
    sp.on_log_start_offset(7)
    sp.check_invariants()
    assert [r[:2] for r in sp.ranges()] == [(0, 6), (7, 9)]
    assert sp.acknowledge("m1", [(0, 6, [RENEW])], now_ms=500).error_codes == (OK,)
    assert sp.expire_locks(LOCK_MS) == 3                          # 7-9 back to Available
    assert sp.member_holdings("m1") == [Acquired(0, 6, 1)]
    assert sp.acknowledge("m1", [(0, 6, [RELEASE])], now_ms=LOCK_MS).error_codes == (OK,)
    assert [r[:4] for r in sp.ranges()] == [(7, 9, 0, 1)]
    sp.check_invariants()


# ---------------------------------------------------------------------------- table and config

def test_transition_table():
    A, Q, K, X = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
    assert next_state(A, Event.ACQUIRE, 0, 5) == (Q, 1)
    assert next_state(Q, Event.RELEASE, 4, 5) == (A, 4)
    assert next_state(Q, Event.RELEASE, 5, 5) == (X, 5)
    assert next_state(Q, Event.LOCK_EXPIRED, 5, 5) == (X, 5)
    assert next_state(Q, Event.ACCEPT, 5, 5) == (K, 5)
    for state in (K, X):
        assert all(next_state(state, ev, 1, 5) is None for ev in Event)
    assert next_state(A, Event.ACCEPT, 1, 5) is None
    assert all(key[0] in (A, Q) for key in TRANSITIONS if key[0] is not RecordState.ARCHIVING)
    # KIP-1191: with a DLQ topic, a rejection or an attempt ending at the limit goes to Archiving,
    # which only its durable DLQ record moves on (to Archived)
    W = RecordState.ARCHIVING
    assert next_state(Q, Event.REJECT, 1, 5, dead_letters=True) == (W, 1)
    assert next_state(Q, Event.RELEASE, 5, 5, dead_letters=True) == (W, 5)
    assert next_state(Q, Event.RELEASE, 4, 5, dead_letters=True) == (A, 4)
    assert next_state(Q, Event.GAP, 1, 5, dead_letters=True) == (X, 1)
    assert next_state(W, Event.DEAD_LETTERED, 1, 5) == (X, 1)
    assert [ev for ev in Event if next_state(W, ev, 1, 5) is not None] == [Event.DEAD_LETTERED]
    sp = make()
    sp.acquire("m1", [(0, 4)], max_records=5, now_ms=0)
    sp.acknowledge("m1", [(0, 4, [ACCEPT])], now_ms=0)
    sp.acquire("m1", [(5, 9)], max_records=5, now_ms=0)
    with pytest.raises(IllegalTransition):
        sp._update(5, 9, Event.ACQUIRE, member_id="m1", now_ms=0)   # Acquired -> acquire: a bug


def test_config_validation():
    # the broker's bounds (group.share.{min,max}.delivery.count.limit, up to 25) are checked where configs are set
    for kw in ({"delivery_count_limit": 1}, {"record_lock_duration_ms": 0}, {"max_record_locks": 0}):
        with pytest.raises(ValueError):
            SharePartition("g", "t", 0, **kw)
    assert AckType.RENEW == 4


# ---------------------------------------------------------------------------- cost

def test_cost_grows_with_ranges_not_records():
    sp = make(max_record_locks=10_000_000)
    t0 = time.perf_counter()
    got = sp.acquire("m1", [(0, 999_999)], max_records=1_000_000, now_ms=0)
    assert got == [Acquired(0, 999_999, 1)] and len(sp.ranges()) == 1
    sp.acknowledge("m1", [(0, 999_999, [ACCEPT])], now_ms=1)
    assert time.perf_counter() - t0 < 0.05
    assert sp.start_offset == 1_000_000
    # a steady fetch/ack loop of 500-record fetches stays a handful of ranges
    base = 1_000_000
    log = [(base + o, base + o + 99) for o in range(0, 100_000, 100)]
    t0 = time.perf_counter()
    for i in range(200):
        fo = sp.fetch_offset()
        k = (fo - base) // 100
        got = sp.acquire(f"m{i % 3}", log[k:k + 5], max_records=500, now_ms=i, fetch_offset=fo)
        assert sum(a.last_offset - a.first_offset + 1 for a in got) == 500
        assert len(sp.ranges()) <= 3
        sp.acknowledge(f"m{i % 3}", [(got[0].first_offset, got[-1].last_offset, [ACCEPT])], now_ms=i)
    assert sp.start_offset == base + 100_000
    assert time.perf_counter() - t0 < 0.5


# ---------------------------------------------------------------------------- acquire mode record_limit (KIP-1206)

def test_record_limit_splits_a_log_batch():
    batches = [(0, 9), (10, 19)]
    hard = make()
    assert [tuple(a) for a in hard.acquire("m1", batches, max_records=3, now_ms=0, record_limit=True)] == [(0, 2, 1)]
    assert [tuple(a) for a in hard.acquire("m2", batches, max_records=12, now_ms=0, record_limit=True)] == \
        [(3, 14, 1)], "the rest of the first batch and part of the next, for another member"
    # a released record in flight counts against the limit like a new one
    assert hard.acknowledge("m1", [(1, 1, [RELEASE])], now_ms=1).error_codes == (OK,)
    assert [tuple(a) for a in hard.acquire("m3", batches, max_records=2, now_ms=2, record_limit=True)] == \
        [(1, 1, 2), (15, 15, 1)]
