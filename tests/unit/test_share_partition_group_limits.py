"""Per-group share-partition limits (KIP-1240, Kafka 4.3) in the SharePartition core: the delivery
count limit, the in-flight record limit, the lock duration and the RENEW switch, set when the
share-partition is made and changed on a live one with ``configure``. Manual clock, no Ray.
"""

from actors.share_partition import Acquired, SharePartition, StateBatch
from protocol.errors import ErrorCode

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
LOCK_MS = 1000
OK, BAD_STATE = ErrorCode.NONE, ErrorCode.INVALID_RECORD_STATE


def make(**kw):
    limits = dict(record_lock_duration_ms=LOCK_MS, delivery_count_limit=5, max_record_locks=2000,
                  renew_acknowledge_enable=True)
    sp = SharePartition("g", "topic-id", 0, **(limits | kw))
    sp.load(0, [])
    return sp


def configure(sp, **kw):
    limits = dict(record_lock_duration_ms=sp.record_lock_duration_ms, delivery_count_limit=sp.delivery_count_limit,
                  max_record_locks=sp.max_record_locks, renew_acknowledge_enable=sp.renew_acknowledge_enable)
    return sp.configure(**(limits | kw))


def release_round(sp, member, now_ms, first=0, last=0):
    """Acquire what is there at the fetch offset and release it; the acquired ranges."""
    got = sp.acquire(member, [(first, last)], max_records=10, now_ms=now_ms, fetch_offset=sp.fetch_offset())
    for a in got:
        assert sp.acknowledge(member, [(a.first_offset, a.last_offset, [RELEASE])], now_ms=now_ms).error_codes == (OK,)
    sp.check_invariants()
    return got


def test_a_group_limit_of_2_archives_after_the_second_delivery():
    sp = make(delivery_count_limit=2)
    assert release_round(sp, "m1", 0) == [Acquired(0, 0, 1)]
    assert release_round(sp, "m1", 1) == [Acquired(0, 0, 2)]
    assert sp.fetch_offset() == 1 and sp.start_offset == 1 and sp.ranges() == []    # archived: never a third
    assert release_round(sp, "m1", 2) == []
    assert sp.metrics.delivery_limit_archived_records == 1


def test_the_broker_default_of_5_allows_five_deliveries():
    sp = make()
    counts = [release_round(sp, "m1", t)[0].delivery_count for t in range(5)]
    assert counts == [1, 2, 3, 4, 5] and sp.start_offset == 1


def test_a_lowered_limit_gives_records_past_it_one_final_delivery():
    # KIP-1240: the limit is checked when a delivery attempt ends, not when records are acquired
    sp = make()
    for t in range(3):
        release_round(sp, "m1", t, 0, 1)
    assert [r[:4] for r in sp.ranges()] == [(0, 1, 0, 3)]       # Available, delivered 3 times
    assert configure(sp, delivery_count_limit=2) is True
    sp.check_invariants()
    got = sp.acquire("m1", [(0, 1)], max_records=10, now_ms=10, fetch_offset=0)
    assert got == [Acquired(0, 1, 4)]                            # the final attempt, past the new limit
    sp.acknowledge("m1", [(0, 1, [RELEASE])], now_ms=11)
    assert sp.start_offset == 2 and sp.ranges() == []            # archived when it ends
    sp.check_invariants()


def test_a_lowered_limit_archives_an_acquired_record_when_its_attempt_ends():
    sp = make()
    release_round(sp, "m1", 0)
    sp.acquire("m1", [(0, 0)], max_records=10, now_ms=1, fetch_offset=0)   # delivery 2, in flight
    configure(sp, delivery_count_limit=2)
    sp.expire_locks(1 + LOCK_MS)                                  # the attempt ends by its lock
    assert sp.start_offset == 1 and sp.ranges() == []


def test_a_raised_limit_gives_more_attempts_to_records_not_archived():
    sp = make(delivery_count_limit=2)
    release_round(sp, "m1", 0)
    sp.acquire("m1", [(0, 0)], max_records=10, now_ms=1, fetch_offset=0)   # delivery 2 of 2
    configure(sp, delivery_count_limit=4)
    sp.acknowledge("m1", [(0, 0, [RELEASE])], now_ms=2)
    assert [r[:4] for r in sp.ranges()] == [(0, 0, 0, 2)]       # Available again, not archived
    assert release_round(sp, "m1", 3) == [Acquired(0, 0, 3)]
    assert release_round(sp, "m1", 4) == [Acquired(0, 0, 4)]
    assert sp.ranges() == []
    sp.check_invariants()


def test_the_limit_persists_as_counts_only():
    # the limit is not part of the share coordinator's state: what is written is the same whatever it is
    sp = make(delivery_count_limit=2)
    release_round(sp, "m1", 0, 0, 3)
    assert sp.take_dirty() == (0, [StateBatch(0, 3, 0, 1)])


def test_max_record_locks_bounds_the_in_flight_window_per_group():
    sp = make(max_record_locks=100)
    got = sp.acquire("m1", [(0, 149)], max_records=500, now_ms=0, record_limit=True)
    assert got == [Acquired(0, 99, 1)] and sp.fetch_offset() is None
    # lowered below what is in flight: nothing new until the window is below it; nothing is taken back
    configure(sp, max_record_locks=50)
    sp.acknowledge("m1", [(0, 29, [ACCEPT])], now_ms=1)
    assert sp.in_flight_count() == 70 and sp.fetch_offset() is None
    sp.acknowledge("m1", [(30, 59, [ACCEPT])], now_ms=2)
    assert sp.fetch_offset() == 100
    got = sp.acquire("m1", [(100, 149)], max_records=500, now_ms=3, fetch_offset=100, record_limit=True)
    assert got == [Acquired(100, 109, 1)] and sp.in_flight_count() == 50
    # raised: room again at once
    configure(sp, max_record_locks=1000)
    got = sp.acquire("m1", [(110, 149)], max_records=500, now_ms=4, fetch_offset=110)
    assert got == [Acquired(110, 149, 1)]
    sp.check_invariants()


def test_renew_refused_when_the_group_turns_it_off():
    sp = make(renew_acknowledge_enable=False)
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0)
    out = sp.acknowledge("m1", [(0, 4, [RENEW]), (5, 9, [ACCEPT])], now_ms=500)
    assert out.error_codes == (BAD_STATE, OK)
    assert [r[:4] for r in sp.ranges()] == [(0, 4, 1, 1), (5, 9, 2, 1)]
    assert sp.ranges()[0][5] == LOCK_MS                                  # the lock was not renewed
    # a mixed batch with a RENEW in it changes nothing either
    assert sp.acknowledge("m1", [(0, 4, [ACCEPT, RENEW, ACCEPT, ACCEPT, ACCEPT])], now_ms=600).error_codes == (BAD_STATE,)
    assert [r[:3] for r in sp.ranges()] == [(0, 4, 1), (5, 9, 2)]
    # turned on: renewed
    configure(sp, renew_acknowledge_enable=True)
    assert sp.acknowledge("m1", [(0, 4, [RENEW])], now_ms=700).error_codes == (OK,)
    assert sp.ranges()[0][5] == 700 + LOCK_MS
    sp.check_invariants()


def test_a_changed_lock_duration_applies_to_the_next_acquisition():
    sp = make()
    sp.acquire("m1", [(0, 0)], max_records=1, now_ms=0)
    assert configure(sp, record_lock_duration_ms=5000) is True
    assert configure(sp, record_lock_duration_ms=5000) is False        # unchanged
    sp.acquire("m1", [(1, 1)], max_records=1, now_ms=10, fetch_offset=1)
    assert [r[5] for r in sp.ranges()] == [LOCK_MS, 10 + 5000]            # the held lock keeps its deadline
    sp.check_invariants()
