"""ShareFetch responses encode for every partition outcome (records are nullable only in v0)."""
import uuid

from actors.gateway.handlers.share_fetch import _fetch_response
from actors.gateway.share_sessions import ShareSessionCache
from actors.share_partition.core import ShareFetchResult
from protocol.errors import ErrorCode
from protocol.messages import ShareFetchResponse


class Image:
    def topic_by_id(self, topic_id):
        return None


class Ctx:
    metadata = Image()


def test_ack_only_error_and_data_partitions_all_encode_in_v1():
    t = uuid.uuid4()
    results = {(t, 0): ShareFetchResult(),                                   # only acknowledged, nothing new
               (t, 1): ErrorCode.NOT_LEADER_OR_FOLLOWER,                    # no leader here
               (t, 2): ShareFetchResult(records=b"\x00" * 70, acquired=[(5, 5, 2)])}
    response = _fetch_response(Ctx(), results, {(t, 0): [(0, 4, [1])]}, lock_ms=30000)
    decoded = ShareFetchResponse.decode(response.encode(1), 1)
    parts = {p.partition_index: p for p in decoded.responses[0].partitions}
    assert set(parts) == {0, 1, 2}
    assert len(parts[0].records) == 0 and parts[0].acquired_records == []
    assert parts[1].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in parts[2].acquired_records] == [(5, 5, 2)]


def test_share_session_epochs():
    cache = ShareSessionCache(max_sessions=1)
    assert cache.begin("g", "m", 1, 7, may_open=True)[0] == ErrorCode.SHARE_SESSION_NOT_FOUND
    error, session, replaced = cache.begin("g", "m", 0, 7, may_open=True)
    assert error == 0 and replaced is None
    assert cache.begin("g", "m", 2, 7, may_open=True)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.begin("g", "m", 1, 7, may_open=True)[0] == 0
    assert cache.begin("g", "m", 2, 7, may_open=True)[0] == 0
    assert cache.begin("g", "other", 0, 8, may_open=True)[0] == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert cache.begin("g", "m", 0, 7, may_open=False)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    error, new, replaced = cache.begin("g", "m", 0, 9, may_open=True)
    assert error == 0 and replaced is session, "epoch 0 replaces the member's session; the old one is released"
    assert [s.member_id for s in cache.close_connection(9)] == ["m"]
    assert cache.sessions == {}


def test_partitions_rotate_so_none_starves():
    cache = ShareSessionCache(max_sessions=10)
    _, s, _ = cache.begin("g", "m", 0, 1, may_open=True)
    t = uuid.uuid4()
    s.add([(t, 0), (t, 1), (t, 2), (t, 1)])
    assert [s.rotated()[0][1] for _ in range(4)] == [0, 1, 2, 0]
    s.forget([(t, 1)])
    assert s.partitions == [(t, 0), (t, 2)]
