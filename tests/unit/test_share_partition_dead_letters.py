"""Dead-letter queues for share groups (KIP-1191) in the pure SharePartition core and the DLQ record
builder: which records go Archiving, when they become Archived, what a new leader re-sends, and
what a DLQ record holds. Manual clock, no Ray.
"""
from actors.share_partition import SharePartition
from actors.share_partition.core import ARCHIVING, AVAILABLE, DeadLetter
from actors.share_partition import dead_letters as dlq
from protocol.record_batch import Record
from protocol.errors import ErrorCode

ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK_MS = 1000
OK = ErrorCode.NONE


def make(topic="dlq.orders", limit=3, **kw):
    sp = SharePartition("g", "topic-id", 0, record_lock_duration_ms=LOCK_MS, delivery_count_limit=limit,
                        dead_letter_topic=topic, **kw)
    sp.load(0, [])
    return sp


def acquire(sp, member="m1", first=0, last=9, now_ms=0):
    got = sp.acquire(member, [(first, last)], max_records=100, now_ms=now_ms, fetch_offset=sp.fetch_offset())
    sp.check_invariants()
    return got


def ack(sp, first, last, kind, member="m1", now_ms=0):
    assert sp.acknowledge(member, [(first, last, [kind])], now_ms=now_ms).error_codes == (OK,)
    sp.check_invariants()


def states(sp):
    return [(first, last, state) for first, last, state, *_ in sp.ranges()]


def test_rejected_records_wait_in_archiving_and_hold_the_start_offset_until_their_dlq_record_is_durable():
    sp = make()
    acquire(sp)
    ack(sp, 0, 2, REJECT)
    ack(sp, 3, 9, ACCEPT)
    assert states(sp)[0] == (0, 2, ARCHIVING)
    assert sp.start_offset == 0 and sp.in_flight_count() == 10   # counted in flight until durable
    assert sp.persistable() == (0, [(0, 2, 3, 1), (3, 9, 2, 1)])  # Archiving (3) is persisted
    letters = sp.take_dead_letters(100)
    assert letters == [DeadLetter(0, 2, 1, "REJECT")]
    assert sp.take_dead_letters(100) == []                          # handed out once
    assert sp.dead_letters_written(0, 2) == 3
    sp.check_invariants()
    assert sp.start_offset == 10 and sp.metrics.dead_lettered_records == 3


def test_without_a_dlq_topic_rejected_records_are_archived_at_once():
    sp = make(topic="")
    acquire(sp)
    ack(sp, 0, 9, REJECT)
    assert sp.start_offset == 10 and sp.take_dead_letters(100) == []


def test_records_released_or_timed_out_at_the_delivery_limit_become_dead_letters():
    sp = make(limit=2)
    acquire(sp, first=0, last=1)
    ack(sp, 0, 1, RELEASE)
    acquire(sp, first=0, last=1, now_ms=1)
    ack(sp, 0, 0, RELEASE, now_ms=1)        # second release: at the limit
    assert sp.expire_locks(1 + LOCK_MS) == 1  # second lock expiry: at the limit
    sp.check_invariants()
    assert states(sp) == [(0, 1, ARCHIVING)]
    assert sp.take_dead_letters(100) == [DeadLetter(0, 1, 2, "DELIVERY_COUNT_LIMIT")]
    assert sp.metrics.delivery_limit_archived_records == 2


def test_a_release_below_the_limit_makes_no_dead_letter():
    sp = make(limit=3)
    acquire(sp, first=0, last=0)
    ack(sp, 0, 0, RELEASE)
    assert states(sp) == [(0, 0, AVAILABLE)] and sp.take_dead_letters(10) == []


def test_archiving_records_are_neither_acquired_nor_acknowledged_again():
    sp = make()
    acquire(sp, first=0, last=4)
    ack(sp, 0, 1, REJECT)
    assert sp.acknowledge("m1", [(0, 1, [ACCEPT])], now_ms=0).error_codes == (ErrorCode.INVALID_RECORD_STATE,)
    ack(sp, 2, 4, RELEASE)
    got = acquire(sp, member="m2", first=0, last=4, now_ms=1)
    assert [(a.first_offset, a.last_offset) for a in got] == [(2, 4)]


def test_a_failed_write_hands_the_records_out_again():
    sp = make()
    acquire(sp)
    ack(sp, 0, 9, REJECT)
    assert sp.take_dead_letters(4) == [DeadLetter(0, 3, 1, "REJECT")]   # batched by max_records
    sp.dead_letters_failed(0, 3)
    sp.check_invariants()
    assert sp.take_dead_letters(100) == [DeadLetter(0, 9, 1, "REJECT")]


def test_the_dlq_write_of_later_records_does_not_wait_for_earlier_ones():
    sp = make()
    acquire(sp)
    ack(sp, 0, 0, REJECT)
    first = sp.take_dead_letters(100)
    ack(sp, 5, 5, REJECT)
    assert sp.take_dead_letters(100) == [DeadLetter(5, 5, 1, "REJECT")]
    sp.dead_letters_written(5, 5)
    assert first == [DeadLetter(0, 0, 1, "REJECT")] and states(sp)[0] == (0, 0, ARCHIVING)


def test_a_new_leader_resends_what_was_persisted_as_archiving():
    old = make(limit=3)
    acquire(old)
    ack(old, 0, 3, REJECT)
    ack(old, 4, 9, ACCEPT)
    old.take_dead_letters(100)                  # the old leader wrote them, then moved before Archived
    start, batches = old.persistable()
    new = make(limit=3)
    new.load(start, batches)
    new.check_invariants()
    assert new.take_dead_letters(100) == [DeadLetter(0, 3, 1, "REJECT")]   # at-least-once into the DLQ
    new.dead_letters_written(0, 3)
    assert new.start_offset == 10


def test_a_loaded_archiving_record_at_the_limit_is_named_by_its_count():
    sp = make(limit=2)
    sp.load(0, [(0, 0, 3, 2), (1, 1, 3, 1)])
    assert sp.take_dead_letters(10) == [DeadLetter(0, 0, 2, "DELIVERY_COUNT_LIMIT"), DeadLetter(1, 1, 1, "REJECT")]


def test_without_a_usable_dlq_topic_records_are_archived_without_a_copy():
    sp = make()
    acquire(sp)
    ack(sp, 0, 9, REJECT)
    letters = sp.take_dead_letters(100)
    sp.dead_letters_written(letters[0].first_offset, letters[-1].last_offset, copied=False)
    assert sp.start_offset == 10
    assert (sp.metrics.dead_lettered_records, sp.metrics.dead_letter_skipped_records) == (0, 10)


def test_turning_the_dlq_on_applies_to_the_next_rejection():
    sp = make(topic="")
    acquire(sp)
    ack(sp, 0, 0, REJECT)
    sp.configure(record_lock_duration_ms=LOCK_MS, delivery_count_limit=3, max_record_locks=2000,
                 renew_acknowledge_enable=True, dead_letter_topic="dlq.x")
    ack(sp, 1, 1, REJECT)
    assert sp.start_offset == 1 and states(sp)[0] == (1, 1, ARCHIVING)


# --- the DLQ records -----------------------------------------------------------------------------

def headers_of(record):
    return {k: v.decode() for k, v in record[2] if k.startswith("__dlq.")}


def test_a_dlq_record_without_copy_carries_the_coordinates_only():
    [record] = dlq.dead_letter_records("g", "orders", 2, [DeadLetter(7, 7, 5, "DELIVERY_COUNT_LIMIT")],
                                       copy_record=False, originals={7: Record(7, 1, b"k", b"v", [])}, now_ms=99)
    assert record[:2] == (None, None) and record[3] == 99
    assert headers_of(record) == {"__dlq.errors.group": "g", "__dlq.errors.topic": "orders",
                                  "__dlq.errors.partition": "2", "__dlq.errors.offset": "7",
                                  "__dlq.errors.delivery.count": "5",
                                  "__dlq.errors.message": "Offset delivery count exceeded the threshold."}
    assert [k for k, _ in record[2]] == ["__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset",
                                         "__dlq.errors.group", "__dlq.errors.delivery.count",
                                         "__dlq.errors.message"], "Kafka 4.4's order"


def test_a_dlq_record_with_copy_carries_the_original_key_value_and_headers():
    originals = {3: Record(3, 1234, b"key", b"value", [("trace", b"abc")]), 4: Record(4, 1235, None, b"v4", [])}
    records = dlq.dead_letter_records("g", "orders", 0, [DeadLetter(3, 5, 1, "REJECT")], copy_record=True,
                                      originals=originals, now_ms=99)
    assert [(r[0], r[1], r[3]) for r in records] == [(b"key", b"value", 1234), (None, b"v4", 1235), (None, None, 99)]
    assert records[0][2][0] == ("trace", b"abc")
    assert [headers_of(r)["__dlq.errors.offset"] for r in records] == ["3", "4", "5"]


def test_dlq_topic_names_follow_kafkas_rules_and_the_prefix():
    assert dlq.topic_name_error("", "dlq.") is None
    assert dlq.topic_name_error("dlq.orders", "dlq.") is None
    assert dlq.topic_name_error("orders", "dlq.") is not None
    assert dlq.topic_name_error("dlq.bad name", "dlq.") is not None
    assert dlq.topic_name_error("dlq." + "x" * 250, "dlq.") is not None
    assert dlq.topic_name_error("__consumer_offsets", "") is not None
    assert dlq.topic_name_error("anything", "") is None


def test_records_going_archiving_while_a_write_is_under_way_wait_for_their_own():
    sp = make()
    acquire(sp)
    ack(sp, 0, 0, REJECT)
    ack(sp, 5, 5, REJECT)
    assert sp.take_dead_letters(100) == [DeadLetter(0, 0, 1, "REJECT"), DeadLetter(5, 5, 1, "REJECT")]
    ack(sp, 3, 3, REJECT)                     # between the two being written
    assert sp.dead_letters_written(0, 5) == 2
    sp.check_invariants()
    assert sp.take_dead_letters(100) == [DeadLetter(3, 3, 1, "REJECT")]
