"""Key-ordered sharing (share.key.ordering.enable) in the SharePartition core: one record per key
Acquired at a time, always the lowest of its key not done with, across releases, lock expiries and
members leaving; null keys and the config off unchanged. Manual clock, no Ray. ``Log`` plays the
shell: it reads whole batches from the batch holding the fetch offset and passes the keys of the
batches whose keys the core has not cached, as actors/share_partition/actor.py does.
"""
import random

import pytest

from actors.share_partition import Acquired, SharePartition
from actors.config_schema import (GROUP_CONFIG_SOURCES, ShareGroupLimits, effective_group_configs,
                                  validate_group_configs)
from actors.config_schema import ConfigError
from protocol.errors import ErrorCode
from protocol.record_batch import (COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY,
                                   COMPRESSION_ZSTD, build_batch, iter_batches, record_keys)

ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK_MS = 1000
OK = ErrorCode.NONE
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED = range(5)


class Log:
    """Batches of keys (None: a null key), offsets from 0."""

    def __init__(self, *batches):
        self.batches = []   # (base, last, keys)
        for keys in batches:
            self.append(keys)

    def append(self, keys):
        base = self.batches[-1][1] + 1 if self.batches else 0
        self.batches.append((base, base + len(keys) - 1, list(keys)))

    @property
    def end(self):
        return self.batches[-1][1] + 1 if self.batches else 0

    def key(self, offset):
        for base, last, keys in self.batches:
            if base <= offset <= last:
                return keys[offset - base]
        raise KeyError(offset)

    def fetch(self, sp, member, now_ms, max_records=100, max_batches=100, **kw):
        sp.expire_locks(now_ms)             # the shell's timer
        offset = sp.fetch_offset()
        if offset is None or offset >= self.end:
            return []
        read = [b for b in self.batches if b[1] >= offset][:max_batches]
        keys = {}
        for base, last, batch_keys in read:     # as the shell: only up to the key horizon
            if base <= sp.key_horizon() and not sp.keys_known(base, last):
                keys.update({base + i: k for i, k in enumerate(batch_keys)})
        got = sp.acquire(member, [(b, l) for b, l, _ in read], max_records=max_records, now_ms=now_ms,
                         fetch_offset=offset, keys=keys, **kw)
        sp.check_invariants()
        return got


def make(key_ordering=True, **kw):
    limits = dict(record_lock_duration_ms=LOCK_MS, delivery_count_limit=5, max_record_locks=2000,
                  renew_acknowledge_enable=True, key_ordering=key_ordering)
    sp = SharePartition("g", "topic-id", 0, **(limits | kw))
    sp.load(0, [])
    return sp


def persist(sp):
    """The shell's state write, succeeding: returns what the share coordinator now holds."""
    version = sp.durable_version
    sp.take_dirty()
    sp.made_durable(version)
    return sp.persistable()


def ack(sp, member, first, last, ack_type, now_ms=0, durable=True):
    assert sp.acknowledge(member, [(first, last, [ack_type])], now_ms=now_ms).error_codes == (OK,)
    if durable:
        persist(sp)
    sp.check_invariants()


def offsets(acquired):
    return [o for a in acquired for o in range(a.first_offset, a.last_offset + 1)]


def test_a_held_key_is_skipped_and_the_acquired_ranges_have_gaps():
    log = Log(["a", "b", "a", "c", "b", "a"])
    sp = make()
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 1, 1), Acquired(3, 3, 1)]
    # the others wait for their key: nobody gets them, and the fetch offset says nothing is there
    assert log.fetch(sp, "m2", 0) == []
    assert sp.fetch_offset() == sp.end_offset == 6
    ack(sp, "m1", 0, 0, ACCEPT)                 # a is free: its next record, offset 2 (not 5)
    assert log.fetch(sp, "m2", 0) == [Acquired(2, 2, 1)]
    ack(sp, "m1", 1, 1, ACCEPT)
    assert log.fetch(sp, "m1", 0) == [Acquired(4, 4, 1)]
    assert log.fetch(sp, "m1", 0) == []         # 5 (a) waits for 2
    ack(sp, "m2", 2, 2, ACCEPT)
    assert log.fetch(sp, "m1", 0) == [Acquired(5, 5, 1)]


def test_whole_batches_when_no_key_conflicts():
    log = Log(["a", "b", "c"], ["d", "e"], [None, None, "f"])
    sp = make()
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 7, 1)]


def test_a_key_is_free_only_once_its_record_s_new_state_is_durable():
    log = Log(["a", "b", "a", "b"])
    sp = make()
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 1, 1)]
    ack(sp, "m1", 0, 1, ACCEPT, durable=False)
    # not durable yet: a leader taking over now would deliver 0 and 1 again, so 2 and 3 wait
    assert sp.has_pending_keys() and log.fetch(sp, "m2", 0) == []
    version = sp.durable_version
    sp.take_dirty()
    ack_more = sp.acknowledge("m1", [], now_ms=0)          # nothing changes meanwhile
    assert ack_more.error_codes == ()
    assert sp.made_durable(version) and not sp.has_pending_keys()
    assert log.fetch(sp, "m2", 0) == [Acquired(2, 3, 1)]


def test_a_write_taken_before_the_acknowledgement_frees_nothing():
    log = Log(["a", "a"])
    sp = make()
    log.fetch(sp, "m1", 0)
    version = sp.durable_version              # a write of earlier changes is under way
    ack(sp, "m1", 0, 0, ACCEPT, durable=False)
    assert not sp.made_durable(version)
    assert log.fetch(sp, "m2", 0) == []
    persist(sp)
    assert log.fetch(sp, "m2", 0) == [Acquired(1, 1, 1)]


def test_a_released_record_goes_out_again_before_the_next_of_its_key():
    log = Log(["a", "b", "a", "a"])
    sp = make()
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 1, 1)]
    ack(sp, "m1", 0, 0, RELEASE)
    assert log.fetch(sp, "m2", 0) == [Acquired(0, 0, 2)]   # offset 0 again, never 2 first
    assert log.fetch(sp, "m1", 0) == []
    ack(sp, "m2", 0, 0, ACCEPT)
    assert log.fetch(sp, "m1", 0) == [Acquired(2, 2, 1)]


def test_an_expired_lock_redelivers_the_same_record_first():
    log = Log(["a", "a", "b"])
    sp = make()
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 0, 1), Acquired(2, 2, 1)]
    assert log.fetch(sp, "m2", LOCK_MS - 1) == []
    assert log.fetch(sp, "m2", LOCK_MS) == [Acquired(0, 0, 2), Acquired(2, 2, 2)]
    ack(sp, "m2", 0, 0, ACCEPT, now_ms=LOCK_MS)
    assert log.fetch(sp, "m1", LOCK_MS) == [Acquired(1, 1, 1)]


def test_a_departed_member_s_records_go_out_again_first():
    log = Log(["a", "b", "a", "b"])
    sp = make()
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 1, 1)]
    assert sp.release_member("m1", now_ms=5) == 2
    sp.check_invariants()
    assert log.fetch(sp, "m2", 5) == [Acquired(0, 1, 2)]
    assert log.fetch(sp, "m3", 5) == []


def test_rejected_and_delivery_limit_archived_records_free_their_key():
    log = Log(["a", "a", "a"])
    sp = make(delivery_count_limit=2)
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 0, 1)]
    ack(sp, "m1", 0, 0, REJECT)
    assert log.fetch(sp, "m1", 0) == [Acquired(1, 1, 1)]
    ack(sp, "m1", 1, 1, RELEASE)
    assert log.fetch(sp, "m1", 0) == [Acquired(1, 1, 2)]
    ack(sp, "m1", 1, 1, RELEASE)                # the limit: archived, the key is free
    assert log.fetch(sp, "m1", 0) == [Acquired(2, 2, 1)]


def test_archiving_for_a_dead_letter_queue_frees_the_key():
    log = Log(["a", "a"])
    sp = make(dead_letter_topic="dlq.x")
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 0, 1)]
    ack(sp, "m1", 0, 0, REJECT)
    assert sp.ranges()[0][2] == ARCHIVING
    assert log.fetch(sp, "m1", 0) == [Acquired(1, 1, 1)]


def test_null_keys_are_not_ordered():
    log = Log([None, "a", None, "a", None])
    sp = make()
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 2, 1), Acquired(4, 4, 1)]
    ack(sp, "m1", 0, 0, RELEASE)                # a released null-key record holds nothing back
    assert log.fetch(sp, "m2", 0) == [Acquired(0, 0, 2)]


def test_config_off_acquires_as_before():
    log = Log(["a", "b", "a", "c", "b", "a"])
    sp = make(key_ordering=False)
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 5, 1)]
    ack(sp, "m1", 0, 0, RELEASE)
    assert log.fetch(sp, "m2", 0) == [Acquired(0, 0, 2)]
    assert not sp._keys                 # nothing cached without the config


def test_max_records_counts_acquired_records_only():
    log = Log(["a", "a", "a", "b", "c", "d", "e"])
    sp = make()
    assert log.fetch(sp, "m1", 0, max_records=3) == [Acquired(0, 0, 1), Acquired(3, 4, 1)]
    # the SPEO stops after the third acquired record: the rest is not in flight yet
    assert sp.end_offset == 5
    assert log.fetch(sp, "m2", 0, max_records=3) == [Acquired(5, 6, 1)]


def test_blocked_records_count_in_flight_and_fill_the_window():
    log = Log(*[["a"] * 10] * 15, ["b"])
    sp = make(max_record_locks=100)
    assert log.fetch(sp, "m1", 0) == [Acquired(0, 0, 1)]
    assert sp.in_flight_count() == 100 and sp.fetch_offset() is None   # full of records waiting for a
    ack(sp, "m1", 0, 0, ACCEPT)
    assert log.fetch(sp, "m1", 0) == [Acquired(1, 1, 1)]


def test_a_new_leader_learns_the_keys_again_and_keeps_the_order():
    log = Log(["a", "b", "a", "c"], ["b", "a"])
    sp = make()
    log.fetch(sp, "m1", 0)
    ack(sp, "m1", 0, 0, RELEASE)
    ack(sp, "m1", 3, 3, ACCEPT)
    moved = make()
    moved.load(*sp.persistable())
    # offset 0 (a, released once) and 1 (b, whose acquisition the old leader never persisted) go
    # first; 2 (a) and 4 (b) wait for them, 5 (a) for 2
    assert log.fetch(moved, "m2", 0) == [Acquired(0, 0, 2), Acquired(1, 1, 1)]
    assert log.fetch(moved, "m3", 0) == []
    ack(moved, "m2", 0, 1, ACCEPT)
    assert log.fetch(moved, "m3", 0) == [Acquired(2, 2, 1), Acquired(4, 4, 1)]


def test_keys_are_dropped_as_the_start_offset_passes():
    log = Log(["a", "b"], ["c", "d"])
    sp = make()
    log.fetch(sp, "m1", 0)
    assert sp.keys_known(0, 1) and sp.keys_known(2, 3)
    ack(sp, "m1", 0, 2, ACCEPT)
    assert sorted(sp._keys) == [3]
    assert sp.keys_known(2, 3)          # the start offset is 3: offsets below it need no key


def test_turning_the_config_on_and_off_on_a_live_share_partition():
    log = Log(["a", "a"], ["a", "a"])
    sp = make(key_ordering=False)
    assert log.fetch(sp, "m1", 0, max_batches=1) == [Acquired(0, 1, 1)]
    limits = dict(record_lock_duration_ms=LOCK_MS, delivery_count_limit=5, max_record_locks=2000,
                  renew_acknowledge_enable=True)
    assert sp.configure(**limits, key_ordering=True)
    # records acquired while it was off hold no key; from now on one a at a time
    assert log.fetch(sp, "m2", 0) == [Acquired(2, 2, 1)]
    assert log.fetch(sp, "m2", 0) == []
    assert sp.configure(**limits, key_ordering=False)
    assert log.fetch(sp, "m2", 0) == [Acquired(3, 3, 1)]


def test_aborted_records_hold_no_key():
    log = Log(["a"], ["a"])
    sp = make(read_committed=True)
    assert log.fetch(sp, "m1", 0, aborted=[(0, 0)]) == [Acquired(1, 1, 1)]


def _check_key_order(sp, log):
    """For every key: at most one record Acquired, and only the lowest of its key not done with."""
    lowest_open: dict = {}
    for first, last, state, *_ in sp.ranges():
        for o in range(first, last + 1):
            key = log.key(o)
            if key is None or state not in (AVAILABLE, ACQUIRED):
                continue
            if state == ACQUIRED:
                assert key not in lowest_open, f"offset {o} (key {key}) Acquired above {lowest_open[key]}"
            lowest_open.setdefault(key, o)


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_keep_per_key_order(seed):
    rnd = random.Random(seed)
    log = Log()
    keys = [f"k{i}" for i in range(rnd.choice([2, 5, 20]))] + [None]
    sp = make(max_record_locks=rnd.choice([100, 2000]), delivery_count_limit=3)
    members = ["m1", "m2", "m3"]
    now = 0
    processed: dict = {}     # key -> offsets accepted, in the order they were accepted
    delivered: dict = {}     # key -> the highest offset delivered so far (redeliveries included)
    durable = (0, [])        # what the share coordinator holds: a new leader loads it
    for step in range(400):
        op = rnd.random()
        if op < 0.15:
            log.append([rnd.choice(keys) for _ in range(rnd.randint(1, 30))])
        elif op < 0.5:
            got = log.fetch(sp, rnd.choice(members), now, max_records=rnd.randint(1, 40),
                            max_batches=rnd.randint(1, 4))
            for o in offsets(got):
                key = log.key(o)
                if key is not None:
                    assert o >= delivered.get(key, -1), f"{key} delivered at {o} after {delivered[key]}"
                    delivered[key] = o
        elif op < 0.55:
            durable = persist(sp)
        elif op < 0.85:
            member = rnd.choice(members)
            for first, last, _ in sp.member_holdings(member):
                for o in range(first, last + 1):
                    t = rnd.choice([ACCEPT, ACCEPT, ACCEPT, RELEASE, REJECT])
                    ack(sp, member, o, o, t, now_ms=now, durable=False)
                    if rnd.random() < 0.5:
                        durable = persist(sp)
                    if t == ACCEPT and log.key(o) is not None:
                        processed.setdefault(log.key(o), []).append(o)
        elif op < 0.92:
            now += rnd.choice([100, LOCK_MS])
            sp.expire_locks(now)
        elif op < 0.96:
            sp.release_member(rnd.choice(members), now_ms=now)
        else:   # the leader moves: a new one loads what the last successful write left durable
            moved = make(max_record_locks=sp.max_record_locks, delivery_count_limit=3)
            moved.load(*durable)
            sp = moved
        sp.check_invariants()
        _check_key_order(sp, log)
    for key, accepted in processed.items():   # accepted again after a move: at least once, in order
        assert accepted == sorted(accepted), f"key {key} processed out of offset order: {accepted}"
    # and nothing is stuck: a member that accepts everything it gets finishes the log
    for _ in range(2 * log.end + 10):
        if sp.start_offset >= log.end:
            break
        now += LOCK_MS
        got = log.fetch(sp, "m9", now, max_records=rnd.randint(1, 40), max_batches=rnd.randint(1, 4))
        for a in got:
            ack(sp, "m9", a.first_offset, a.last_offset, ACCEPT, now_ms=now)
        _check_key_order(sp, log)
    assert sp.start_offset >= log.end, f"stuck at {sp.start_offset} of {log.end}: {sp.ranges()[:5]}"


def test_key_ordering_is_a_group_config():
    broker = {"errors.deadletterqueue.topic.name.prefix": "dlq."}
    assert "share.key.ordering.enable" in GROUP_CONFIG_SOURCES
    assert validate_group_configs({"share.key.ordering.enable": "TRUE"}, broker) == {"share.key.ordering.enable": True}
    with pytest.raises(ConfigError):
        validate_group_configs({"share.key.ordering.enable": "yes"}, broker)


@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY,
                                         COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_record_keys_of_a_batch(compression):
    records = [(b"k1", b"v" * 100, [("h", b"x")], 1000), (None, b"v", [], 1001), (b"", None, [], 1002)]
    batch = build_batch(records, base_offset=40, compression=compression)
    header = next(iter_batches(batch))
    assert record_keys(header) == [(40, b"k1"), (41, None), (42, b"")]
