"""The quorum shell's durable half: the Output contract's order, and restart from the files after a
crash between any two steps (actors/controller/quorum_shell/store.py)."""
import os
import random

import pytest

from actors.controller.quorum import Accepted, Batch, ElectionState, LeaderChange, Output, QuorumConfig, RaftCore
from actors.controller.quorum_shell import store as store_mod
from actors.controller.quorum_shell.store import Crash, QuorumStore, VotersChanged


def _leader_alone(tmp_path, **store_kwargs):
    """A single-voter quorum driven until it leads, every Output persisted."""
    st = QuorumStore(tmp_path, (1,), **store_kwargs)
    now = 0
    core = RaftCore(1, QuorumConfig(voters=(1,)), now_ms=now, rng=random.Random(7), election=st.election,
                    log=st.batches)
    for _ in range(20):
        now = max(now, core.next_tick_ms())
        st.persist(core.tick(now))
        if core.status().leader_id == 1:
            break
    return st, core, now


def _restart(tmp_path, voters=(1,)):
    st = QuorumStore(tmp_path, voters)
    core = RaftCore(1, QuorumConfig(voters=voters), now_ms=0, rng=random.Random(8), election=st.election,
                    log=st.batches)
    return st, core


def test_a_leader_restarts_with_its_epoch_and_log(tmp_path):
    st, core, now = _leader_alone(tmp_path)
    assert core.status().leader_id == 1
    accepted, out = core.propose([b"topic-a", b"topic-b"], now)
    assert isinstance(accepted, Accepted)
    st.persist(out)
    epoch = core.status().epoch
    st.close()
    st2, core2 = _restart(tmp_path)
    assert st2.election.epoch == epoch
    assert [b.records for b in st2.batches if not b.control] == [(b"topic-a", b"topic-b")]
    assert isinstance(st2.batches[0].records[0], LeaderChange)
    assert core2.status().log_end_offset == core.status().log_end_offset


def test_crash_after_the_state_before_the_append(tmp_path):
    st = QuorumStore(tmp_path, (1, 2, 3), crash_after="state")
    with pytest.raises(Crash):
        st.persist(Output(persist_state=ElectionState(epoch=3, voted_id=2),
                          append=[Batch(0, 3, (b"never",))]))
    st.close()
    st2, _ = _restart(tmp_path, (1, 2, 3))
    assert st2.election == ElectionState(epoch=3, voted_id=2)
    assert st2.batches == []          # the append had not happened: nothing depended on it


def test_crash_after_truncate_before_append(tmp_path):
    st = QuorumStore(tmp_path, (1, 2, 3))
    st.persist(Output(append=[Batch(0, 1, (b"a", b"b")), Batch(2, 1, (b"c",)), Batch(3, 2, (b"d",))]))
    st.close()
    st = QuorumStore(tmp_path, (1, 2, 3), crash_after="truncate")
    with pytest.raises(Crash):
        st.persist(Output(truncate_to=2, append=[Batch(2, 3, (b"x",))]))
    st.close()
    st2 = QuorumStore(tmp_path, (1, 2, 3))
    assert st2.batches == [Batch(0, 1, (b"a", b"b"))]
    st2.persist(Output(append=[Batch(2, 3, (b"x",))]))
    st2.close()
    assert QuorumStore(tmp_path, (1, 2, 3)).batches == [Batch(0, 1, (b"a", b"b")), Batch(2, 3, (b"x",))]


def test_a_truncation_inside_a_batch_is_refused(tmp_path):
    st = QuorumStore(tmp_path, (1, 2, 3))
    st.persist(Output(append=[Batch(0, 1, (b"a", b"b"))]))
    with pytest.raises(ValueError):
        st.persist(Output(truncate_to=1))


def test_a_torn_append_is_cut_at_the_last_whole_batch(tmp_path):
    st = QuorumStore(tmp_path, (1, 2, 3))
    st.persist(Output(append=[Batch(0, 1, (b"a",)), Batch(1, 1, (b"b" * 100,))]))
    size = st.log_end_bytes
    st.close()
    path = tmp_path / store_mod.PARTITION_DIR / store_mod.LOG_FILE
    os.truncate(path, size - 7)       # the last batch torn by a crash mid-write
    st2 = QuorumStore(tmp_path, (1, 2, 3))
    assert st2.batches == [Batch(0, 1, (b"a",))]
    assert st2.log_end_bytes < size - 7  # the torn tail is gone from the file too


def test_a_corrupt_batch_ends_the_log(tmp_path):
    st = QuorumStore(tmp_path, (1, 2, 3))
    st.persist(Output(append=[Batch(0, 1, (b"a",)), Batch(1, 1, (b"bbbb",))]))
    st.close()
    path = tmp_path / store_mod.PARTITION_DIR / store_mod.LOG_FILE
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x55
    path.write_bytes(bytes(data))
    assert QuorumStore(tmp_path, (1, 2, 3)).batches == [Batch(0, 1, (b"a",))]


def test_the_voter_set_is_recorded_at_first_start(tmp_path):
    QuorumStore(tmp_path, (3, 1, 2)).close()
    QuorumStore(tmp_path, (1, 2, 3)).close()       # same set, any order
    with pytest.raises(VotersChanged):
        QuorumStore(tmp_path, (1, 2, 4))


def test_the_state_file_is_replaced_whole(tmp_path):
    st = QuorumStore(tmp_path, (1, 2, 3))
    st.persist(Output(persist_state=ElectionState(epoch=9, leader_id=2)))
    names = sorted(os.listdir(tmp_path / store_mod.PARTITION_DIR))
    assert names == [store_mod.LOG_FILE, store_mod.STATE_FILE]      # no temporary left behind
    assert QuorumStore(tmp_path, (1, 2, 3)).election == ElectionState(epoch=9, leader_id=2)


def test_once_the_log_holds_a_voters_record_it_decides_the_voters(tmp_path):
    """KIP-853: the log is the source of truth; quorum-state turns into Kafka's v1 (no currentVoters)
    and a changed controller.quorum.voters no longer stops the node (it only says where to look)."""
    import json
    from actors.controller.quorum import VotersRecord
    st = QuorumStore(tmp_path, (1, 2, 3))
    st.persist(Output(append=[Batch(0, 1, (LeaderChange(1, (1, 2, 3), (1, 2)),), control=True),
                              Batch(1, 1, (VotersRecord((1, 2)),), control=True)]))
    st.persist(Output(persist_state=ElectionState(epoch=2, leader_id=1)))
    st.close()
    state = json.loads((tmp_path / store_mod.PARTITION_DIR / store_mod.STATE_FILE).read_text())
    assert state["data_version"] == 1 and "currentVoters" not in state and state["leaderEpoch"] == 2
    again = QuorumStore(tmp_path, (1, 2, 4))        # another config: the log's set is in force
    core = RaftCore(1, QuorumConfig(voters=(1, 2, 4)), now_ms=0, rng=random.Random(1), election=again.election,
                    log=again.batches)
    assert core.voters == (1, 2) and again.batches[1].records == (VotersRecord((1, 2)),)
