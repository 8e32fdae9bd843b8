"""Property tests: random operation sequences against a naive per-offset model, and replay equality."""

import uuid

from hypothesis import given, settings, strategies as st

from actors.share_coordinator import ShareCoordinatorShard, combine_state_batches
from protocol.errors import ErrorCode

G = "grp"
TOPICS = [uuid.UUID(int=1), uuid.UUID(int=2)]
OFFSET_MAX = 40

batch = st.tuples(st.integers(0, OFFSET_MAX), st.integers(0, 6), st.sampled_from([0, 2, 4]), st.integers(0, 4)).map(
    lambda t: (t[0], t[0] + t[1], t[2], t[3]))
batches = st.lists(batch, max_size=4)


def per_offset(batch_list):
    model = {}
    for first, last, state, count in batch_list:
        for o in range(first, last + 1):
            model[o] = max(model.get(o, (-1, -1)), (count, state))
    return model


def expand(batch_tuple):
    out = {}
    for first, last, state, count in batch_tuple:
        for o in range(first, last + 1):
            assert o not in out, "overlapping batches"
            out[o] = (count, state)
    return out


def assert_canonical(batch_tuple):
    for a, b in zip(batch_tuple, batch_tuple[1:]):
        assert a.last_offset < b.first_offset
        assert not (a.last_offset + 1 == b.first_offset and a[2:] == b[2:]), "uncoalesced neighbours"


@given(batches, batches, st.integers(-1, OFFSET_MAX))
def test_combine_equals_per_offset_max(old, new, start_offset):
    combined = combine_state_batches(old, new, start_offset)
    model = {o: v for o, v in per_offset(old + new).items() if start_offset == -1 or o >= start_offset}
    assert expand(combined) == model
    assert_canonical(combined)


class Model:
    """What a share-partition's durable state should be: per-offset (count, state), start offset, epochs."""

    def __init__(self, state_epoch, start_offset):
        self.state_epoch, self.leader_epoch, self.start_offset = state_epoch, 0, start_offset
        self.offsets = {}

    def write(self, state_epoch, leader_epoch, start_offset, batch_list):
        if leader_epoch != -1 and self.leader_epoch > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if state_epoch != -1 and self.state_epoch > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        if leader_epoch != -1:
            self.leader_epoch = max(self.leader_epoch, leader_epoch)
        self.start_offset = max(self.start_offset, start_offset)
        for o, v in per_offset(batch_list).items():
            self.offsets[o] = max(self.offsets.get(o, (-1, -1)), v)
        if self.start_offset != -1:
            self.offsets = {o: v for o, v in self.offsets.items() if o >= self.start_offset}
        return ErrorCode.NONE


op = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 1), st.integers(-1, 2), st.integers(-1, 4),
              st.integers(-1, OFFSET_MAX), batches, st.integers(-1, 30)),
    st.tuples(st.just("read"), st.integers(0, 1), st.integers(-1, 4)),
    st.tuples(st.just("init"), st.integers(0, 1), st.integers(0, 3), st.integers(-1, OFFSET_MAX)),
    st.tuples(st.just("delete"), st.integers(0, 1)),
    st.tuples(st.just("cold"), st.integers(0, 1)),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4), st.lists(op, max_size=40))
def test_random_operations_match_model_and_replay(limit, ops):
    shard = ShareCoordinatorShard(snapshot_update_records_max=limit)
    log = []
    models = {}
    now_ms = 0

    def append(records):
        offsets = list(range(len(log), len(log) + len(records)))
        log.extend(records)
        shard.on_appended(records, offsets)

    for step in ops:
        now_ms += 100_000
        kind, t = step[0], TOPICS[step[1]]
        key = (G, t, 0)
        if kind == "write":
            _, _, state_epoch, leader_epoch, start_offset, batch_list, count = step
            result = shard.write(G, t, 0, state_epoch=state_epoch, leader_epoch=leader_epoch,
                                 start_offset=start_offset, state_batches=batch_list,
                                 delivery_complete_count=count, now_ms=now_ms)
            code, records = result.response.error_code, result.records
            expected = models[key].write(state_epoch, leader_epoch, start_offset, batch_list) if key in models \
                else ErrorCode.INVALID_REQUEST
            assert code == expected
            assert bool(records) == (code == ErrorCode.NONE)
        elif kind == "read":
            leader_epoch = step[2]
            result = shard.read(G, t, 0, leader_epoch=leader_epoch, now_ms=now_ms)
            records = result.records
            m = models.get(key)
            if m is None:
                assert result.response.error_code == ErrorCode.INVALID_REQUEST
            elif leader_epoch != -1 and m.leader_epoch > leader_epoch:
                assert result.response.error_code == ErrorCode.FENCED_LEADER_EPOCH and not records
            else:
                assert result.response.error_code == ErrorCode.NONE
                assert (result.response.start_offset, result.response.state_epoch) == (m.start_offset, m.state_epoch)
                assert expand(result.response.state_batches) == m.offsets
                assert bool(records) == (leader_epoch not in (-1, m.leader_epoch))
                m.leader_epoch = max(m.leader_epoch, leader_epoch)
        elif kind == "init":
            _, _, state_epoch, start_offset = step
            result = shard.initialize(G, t, 0, state_epoch=state_epoch, start_offset=start_offset, now_ms=now_ms)
            code, records = result.response.error_code, result.records
            m = models.get(key)
            if m is not None and m.state_epoch > state_epoch:
                assert code == ErrorCode.FENCED_STATE_EPOCH
            else:
                assert code == ErrorCode.NONE
                if m is None or (m.state_epoch, m.start_offset) != (state_epoch, start_offset):
                    new = Model(state_epoch, start_offset)
                    new.leader_epoch = m.leader_epoch if m else 0
                    models[key] = new
        elif kind == "delete":
            result = shard.delete(G, t, 0)
            code, records = result.response.error_code, result.records
            assert code == ErrorCode.NONE and bool(records) == (key in models)
            models.pop(key, None)
        else:
            records = shard.snapshot_cold_partitions(now_ms=now_ms, cold_partition_snapshot_interval_ms=150_000)
        append(records)

        # the live state agrees with the model
        assert set(shard.states()) == set(models)
        for k, m in models.items():
            s = shard.states()[k]
            assert (s.state_epoch, s.leader_epoch, s.start_offset) == (m.state_epoch, m.leader_epoch, m.start_offset)
            assert expand(s.state_batches) == m.offsets
            assert_canonical(s.state_batches)
            assert s.updates_since_snapshot <= limit

    # replaying the whole log, or only what pruning keeps, rebuilds exactly the live shard
    prune = shard.prunable_before_offset()
    assert 0 <= prune <= len(log)
    for from_offset in (0, prune):
        rebuilt = ShareCoordinatorShard(snapshot_update_records_max=limit)
        for offset in range(from_offset, len(log)):
            rebuilt.replay(*log[offset], offset)
        assert rebuilt.states() == shard.states()
        assert rebuilt.last_snapshot_offsets() == shard.last_snapshot_offsets()
        assert rebuilt.prunable_before_offset() == prune or not shard.states()
