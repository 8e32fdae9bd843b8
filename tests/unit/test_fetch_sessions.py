"""Incremental fetch sessions (KIP-227) as a broker keeps them (actors/gateway/fetch_sessions.py):
a full fetch opens one, later fetches name only what changed, answers carry only what is new, and
a lost or out-of-step session is refused so the client starts over."""
import random

from actors.gateway.fetch_sessions import FetchSessions
from protocol.errors import ErrorCode
from protocol.messages import FetchResponse


def _answer(hw=10, log_start=0, records=b"", error=0):
    return FetchResponse.PartitionData(partition_index=0, error_code=error, high_watermark=hw,
                                       last_stable_offset=hw, log_start_offset=log_start, records=records)


def test_a_full_fetch_opens_a_session_that_later_fetches_change():
    sessions = FetchSessions(rng=random.Random(1))
    opened = sessions.begin(0, 0, [("a", "fetch a@0"), ("b", "fetch b@0")], [])
    assert opened.session is not None and not opened.incremental and opened.session.session_id != 0
    session_id = opened.session.session_id
    step = sessions.begin(session_id, 1, [("a", "fetch a@5"), ("c", "fetch c@0")], ["b"])
    assert step.incremental and step.error_code == 0
    assert {k: p.fetch for k, p in step.session.partitions.items()} == {"a": "fetch a@5", "c": "fetch c@0"}


def test_a_wrong_epoch_or_an_unknown_session_is_refused():
    sessions = FetchSessions(rng=random.Random(2))
    session = sessions.begin(0, 0, [("a", "f")], []).session
    assert sessions.begin(session.session_id, 2, [], []).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert sessions.begin(session.session_id + 1, 1, [], []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    session.advance()  # the broker answered epoch 1
    assert sessions.begin(session.session_id, 1, [], []).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_closing_and_reopening():
    sessions = FetchSessions(rng=random.Random(3))
    old = sessions.begin(0, 0, [("a", "f")], []).session
    assert sessions.begin(old.session_id, -1, [], []).session is None  # closed: a full fetch without one
    assert sessions.begin(old.session_id, 1, [], []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    again = sessions.begin(0, 0, [("a", "f")], []).session
    new = sessions.begin(again.session_id, 0, [("b", "g")], []).session  # epoch 0 with an id: replaced
    assert new.session_id != again.session_id and list(new.partitions) == ["b"]
    assert sessions.begin(again.session_id, 1, [], []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_an_incremental_answer_carries_only_partitions_with_something_new():
    sessions = FetchSessions(rng=random.Random(4))
    held = sessions.begin(0, 0, [("a", "f")], []).session.partitions["a"]
    assert FetchSessions.changed(held, _answer()) is True        # first answer: all of it
    assert FetchSessions.changed(held, _answer()) is False       # nothing new
    assert FetchSessions.changed(held, _answer(hw=11)) is True   # the high watermark moved
    assert FetchSessions.changed(held, _answer(hw=11, log_start=3)) is True
    assert FetchSessions.changed(held, _answer(hw=11, log_start=3, records=b"batch")) is True
    assert FetchSessions.changed(held, _answer(hw=11, log_start=3, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)) is True
    assert FetchSessions.changed(held, _answer(hw=11, log_start=3)) is False


def test_the_cache_keeps_its_slots_and_evicts_the_least_recently_used():
    sessions = FetchSessions(slots=2, rng=random.Random(5))
    first = sessions.begin(0, 0, [], []).session
    second = sessions.begin(0, 0, [], []).session
    assert sessions.begin(first.session_id, 1, [], []).error_code == 0  # first is used again
    sessions.begin(0, 0, [], [])                                         # evicts second
    assert sessions.begin(second.session_id, 1, [], []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert len(sessions.sessions) == 2
    assert FetchSessions(slots=0).begin(0, 0, [("a", "f")], []).session is None  # no slots: no sessions
