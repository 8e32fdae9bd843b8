"""Committed offsets (OffsetStore): commit, fetch, delete, topic deletion, retention and replay, as Kafka's
OffsetMetadataManager keeps them (pure core, no Ray)."""
from actors.group_coordinator import classic_records as crec
from actors.group_coordinator.classic_records import OffsetCommitValue
from actors.group_coordinator.offsets import OffsetStore
from protocol.errors import ErrorCode

MINUTE_MS = 60_000


def commit(store, group_id, partitions, now_ms):
    """A plain OffsetCommit as the group shard makes it: the store's records, applied (replay's path)."""
    errors, records = store.commit(group_id, partitions, now_ms)
    store.apply(records)
    return errors, records


def decoded(records):
    return [crec.decode_offset_commit(k, v) for k, v in records]


def test_commit_then_fetch():
    store = OffsetStore()
    errors, records = commit(store, "g", [("orders", 0, 10, 3, "m"), ("orders", 1, 20, -1, None)], now_ms=500)
    assert errors == [0, 0]
    assert decoded(records) == [(("g", "orders", 0), OffsetCommitValue(10, 3, "m", 500)),
                                (("g", "orders", 1), OffsetCommitValue(20, -1, "", 500))]
    assert store.fetch("g", [("orders", [1, 0])]) == [("orders", 1, OffsetCommitValue(20, -1, "", 500)),
                                                      ("orders", 0, OffsetCommitValue(10, 3, "m", 500))]
    assert store.groups() == {"g"} and store.has_offsets("g") and store.topics("g") == {"orders"}


def test_a_later_commit_replaces_the_earlier():
    store = OffsetStore()
    commit(store, "g", [("orders", 0, 10, 1, "")], now_ms=1)
    commit(store, "g", [("orders", 0, 15, 2, "x")], now_ms=2)
    assert store.fetch("g", [("orders", [0])]) == [("orders", 0, OffsetCommitValue(15, 2, "x", 2))]


def test_fetch_of_unknown_partitions_and_groups_gives_none():
    store = OffsetStore()
    commit(store, "g", [("orders", 0, 10, -1, "")], now_ms=0)
    assert store.fetch("g", [("orders", [5]), ("other", [0])]) == [("orders", 5, None), ("other", 0, None)]
    assert store.fetch("nope", [("orders", [0])]) == [("orders", 0, None)]
    assert store.fetch("nope", None) == []


def test_fetch_all_offsets_of_a_group():
    store = OffsetStore()
    commit(store, "g", [("b", 1, 2, -1, ""), ("a", 0, 1, -1, ""), ("b", 0, 3, -1, "")], now_ms=0)
    commit(store, "other", [("a", 0, 9, -1, "")], now_ms=0)
    assert [(t, p, v.offset) for t, p, v in store.fetch("g", None)] == [("a", 0, 1), ("b", 0, 3), ("b", 1, 2)]


def test_metadata_too_large_fails_only_that_partition():
    store = OffsetStore({"offset.metadata.max.bytes": 4})
    errors, records = commit(store, "g", [("t", 0, 1, -1, "abcd"), ("t", 1, 1, -1, "abcde"), ("t", 2, 1, -1, "")],
                                   now_ms=0)
    assert errors == [0, ErrorCode.OFFSET_METADATA_TOO_LARGE, 0]
    assert [key for key, _ in decoded(records)] == [("g", "t", 0), ("g", "t", 2)]
    assert store.fetch("g", [("t", [1])]) == [("t", 1, None)]


def test_a_commit_that_stores_nothing_leaves_no_group_behind():
    store = OffsetStore({"offset.metadata.max.bytes": 1})
    errors, records = commit(store, "g", [("t", 0, 1, -1, "too long")], now_ms=0)
    assert errors == [ErrorCode.OFFSET_METADATA_TOO_LARGE] and records == []
    assert store.groups() == set() and not store.has_offsets("g")


def test_delete_writes_tombstones_for_offsets_that_exist():
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, -1, ""), ("t", 1, 1, -1, "")], now_ms=0)
    records = store.delete("g", [("t", 0), ("t", 9)])
    assert decoded(records) == [(("g", "t", 0), None)]
    assert store.fetch("g", None) == [("t", 1, OffsetCommitValue(1, -1, "", 0))]
    assert decoded(store.delete_group("g")) == [(("g", "t", 1), None)]
    assert store.groups() == set()


def test_deleted_topics_drop_their_offsets_in_every_group():
    store = OffsetStore()
    commit(store, "g1", [("gone", 0, 1, -1, ""), ("kept", 0, 1, -1, "")], now_ms=0)
    commit(store, "g2", [("gone", 3, 1, -1, "")], now_ms=0)
    records = store.on_topics_deleted({"gone"})
    assert sorted(key for key, _ in decoded(records)) == [("g1", "gone", 0), ("g2", "gone", 3)]
    assert all(value is None for _, value in decoded(records))
    assert store.groups() == {"g1"} and store.topics("g1") == {"kept"}


def test_retention_expires_offsets_of_empty_groups_only():
    store = OffsetStore({"offsets.retention.minutes": 10})
    retention = 10 * MINUTE_MS
    commit(store, "empty", [("t", 0, 1, -1, "")], now_ms=0)
    commit(store, "active", [("t", 0, 1, -1, "")], now_ms=0)
    commit(store, "simple", [("t", 0, 1, -1, ""), ("t", 1, 1, -1, "")], now_ms=0)
    commit(store, "simple", [("t", 1, 2, -1, "")], now_ms=5 * MINUTE_MS)   # a later commit: it lives longer
    since = {"empty": 2 * MINUTE_MS, "active": None, "simple": -1}
    assert store.expire(retention - 1, since.get) == []
    assert decoded(store.expire(retention, since.get)) == [(("simple", "t", 0), None)], \
        "a simple group's offset expires by its commit time"
    records = store.expire(retention + 2 * MINUTE_MS, since.get)          # the later of commit and "became empty"
    assert decoded(records) == [(("empty", "t", 0), None)], "an emptied group's by the time it became empty"
    assert store.fetch("active", [("t", [0])])[0][2] is not None, "a group with members keeps its offsets"
    assert decoded(store.expire(retention + 5 * MINUTE_MS, since.get)) == [(("simple", "t", 1), None)]
    assert store.groups() == {"active"}


def test_config_from_broker_config():
    store = OffsetStore({"offsets.retention.minutes": "2", "offset.metadata.max.bytes": "10",
                         "offsets.retention.check.interval.ms": 1000})
    assert (store.retention_ms, store.metadata_max_bytes, store.check_interval_ms) == (2 * MINUTE_MS, 10, 1000)
    defaults = OffsetStore()
    assert (defaults.retention_ms, defaults.metadata_max_bytes) == (7 * 24 * 60 * MINUTE_MS, 4096)


def test_replay_rebuilds_the_store():
    store = OffsetStore()
    log = []
    log += commit(store, "g", [("t", 0, 1, 2, "a"), ("t", 1, 5, -1, "")], now_ms=10)[1]
    log += commit(store, "h", [("u", 0, 7, -1, "")], now_ms=20)[1]
    log += commit(store, "g", [("t", 0, 3, 2, "b")], now_ms=30)[1]
    log += store.delete("g", [("t", 1)])
    log += store.delete_group("h")
    fresh = OffsetStore()
    assert [fresh.replay(k, v) for k, v in log] == ["g", "g", "h", "g", "g", "h"]
    assert fresh.fetch("g", None) == store.fetch("g", None) == [("t", 0, OffsetCommitValue(3, 2, "b", 30))]
    assert fresh.groups() == store.groups() == {"g"}


def test_a_commit_changes_nothing_until_applied_and_a_revert_takes_back_exactly_it():
    """OffsetCommit computes records only; applying them is replay's path, and until settled it can be taken back
    (the shell does when their append fails), leaving the offsets as they were, other commits kept."""
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, -1, "")], now_ms=1)
    store.settle()                                           # appended
    before = store.fetch("g", None)
    errors, records = store.commit("g", [("t", 0, 7, -1, ""), ("t", 1, 8, -1, "")], now_ms=2)
    assert errors == [0, 0] and store.fetch("g", None) == before, "a commit alone changes nothing"
    mark = store.changes_mark()
    store.apply(records)
    assert [v.offset for _, _, v in store.fetch("g", None)] == [7, 8]
    assert store.revert(mark)
    assert store.fetch("g", None) == before and store.topics("g") == {"t"}
    replayed = OffsetStore()
    replayed.replay(*crec.offset_commit("g", "t", 0, OffsetCommitValue(1, -1, "", 1)))   # the log: the first
    assert replayed.fetch("g", None) == store.fetch("g", None), "the store is what the log holds"


def test_a_tombstone_a_marker_or_compaction_after_an_applied_commit_makes_it_unrevertable():
    """Once the offsets change otherwise (OffsetDelete, a transaction's marker) or compaction writes them, reverting the commit alone could
    leave what no replay of the log gives: revert refuses, and the shell reloads from the log."""
    for change in (lambda store: store.delete("g", [("t", 1)]), lambda store: store.complete_transaction(5, True),
                   lambda store: store.live_records()):                   # (compaction rewrites them)
        store = OffsetStore()
        mark = store.changes_mark()
        commit(store, "g", [("t", 0, 7, -1, "")], now_ms=2)
        change(store)
        assert not store.revert(mark)
        assert [v.offset for _, _, v in store.fetch("g", None)] == [7], "a refused revert changes nothing"
        store.settle()
        mark = store.changes_mark()
        commit(store, "g", [("t", 0, 8, -1, "")], now_ms=3)
        assert store.revert(mark), "after settling, commits are revertable again"
        assert [v.offset for _, _, v in store.fetch("g", None)] == [7]
