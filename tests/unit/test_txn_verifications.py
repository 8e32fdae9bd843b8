"""A gateway's record of verified transactional partitions (KIP-890 part 1): kept until a marker of the producer
for the partition passes, and never kept when a marker came while the coordinator was asked."""
from actors.gateway.txn_verifications import TxnVerifications


def test_a_verification_holds_until_a_marker_of_the_producer_for_the_partition():
    v = TxnVerifications()
    guard = v.guard(7, "t", 0)
    assert v.keep("tx", 7, 0, "t", 0, guard)
    assert v.is_verified("tx", 7, 0, "t", 0)
    assert not v.is_verified("tx", 7, 1, "t", 0) and not v.is_verified("tx", 7, 0, "t", 1)
    v.marker(7, "t", 1)                      # another partition's marker: this one still holds
    assert v.is_verified("tx", 7, 0, "t", 0)
    v.marker(7, "t", 0)                      # the transaction ended here: a late batch is verified again
    assert not v.is_verified("tx", 7, 0, "t", 0)


def test_a_marker_during_the_coordinators_answer_is_not_forgotten():
    v = TxnVerifications()
    guard = v.guard(7, "t", 0)
    v.marker(7, "t", 0)
    assert not v.keep("tx", 7, 0, "t", 0, guard) and not v.is_verified("tx", 7, 0, "t", 0)


def test_bounded_tables_clear_safely():
    v = TxnVerifications(max_entries=2)
    guard = v.guard(9, "t", 0)
    v.marker(1, "t", 0)
    v.marker(2, "t", 0)
    v.marker(3, "t", 0)                      # full: cleared, and guards taken before no longer match
    assert not v.keep("tx", 9, 0, "t", 0, guard)
    assert v.keep("tx", 9, 0, "t", 0, v.guard(9, "t", 0))
