"""Partitions heal by themselves (issue 17, item 5) on three hosts of their own (the deployment
shared by tests/hosts: conftest.py, with the metadata quorum): the host whose voter leads the
quorum, and so runs the active controller, cut off from every other host and every client for 60 s
under an idempotent acks=all producer (3 partitions, replication factor 3, min.insync.replicas=2), then healed. Nothing
acknowledged is lost; every partition gets a live leader and takes acks=all writes again during
the cut (a controller on another host takes over), and a consumer group member and a share
consumer get its records again during the cut and read every acknowledged record; the cut-off broker comes back by itself (no
call from the test) and every ISR is whole again after the heal. The measurements (benchmarks/partition_heal.py) are printed beside the
goal (writes again within broker.session.timeout.ms + 3 s of the cut, ISRs whole within 5 s of
the heal); the assertions leave room for a loaded machine.

Ray's health checks are the ones Kray advises for brokers (benchmarks.partition_heal.RAY_HEALTH
"broker", set by conftest.py for every test here: this one needs them), and every joining host runs its Ray node under the node supervisor, as the README's
multi-node steps say. KRAY_HEAL_CUT_S changes the cut's length (e.g. 150 to try a cut that Ray's
health checks end, ~130 s with these settings: the supervisor path). Needs root and `ip netns`; skipped otherwise."""
import os

import pytest

from benchmarks.partition_heal import quorum_leader, run_scenario

pytestmark = pytest.mark.hosts
CUT_S = float(os.environ.get("KRAY_HEAL_CUT_S", 60))
SESSION_S = 9.0         # broker.session.timeout.ms of configs/multinode.toml (the default)
RESUME_GOAL_S = SESSION_S + 3   # the goals (and 5 s after the heal) are printed; asserted with room for load:
RESUME_MAX_S = 25
ISR_AFTER_HEAL_MAX_S = 60
# librdkafka waits socket.timeout.ms (60 s) for an answer to a request in flight to a leader that
# was cut off, before it asks the new leader: here a user's 10 s, so the partition that h3 led
# resumes within the test's bounds (with the default it resumes at the heal; Kafka's Java client
# waits its request.timeout.ms, 30 s)
PRODUCER = {"socket.timeout.ms": 10000}
# the readers a little less: librdkafka's share consumer has one ShareFetch in flight across all
# brokers, and gives up on one sent to the cut-off broker socket.timeout.ms + fetch.wait.max.ms
# after sending it (checked once a second), which may be a second or two into the cut; with 10 s
# that partition came back 13.1 and 13.8 s in (two benchmark runs of four), with 8 s by 11.2 s
READERS = {"socket.timeout.ms": 8000}


def test_the_active_controllers_host_cut_off_for_60_s_heals_by_itself(hosts):
    victim = quorum_leader(hosts.bootstrap)
    print(f"cutting off h{victim}: its voter leads the metadata quorum")
    result = run_scenario(hosts, victim=victim, cut_s=CUT_S, say=print, producer_config=PRODUCER,
                          reader_config=READERS)
    rows = result["partitions"]
    print("\npartition (leader before): moved / acks=all resumed / consumed again / share-consumed again after "
          "the cut; ISR whole / longest gap after the heal")
    for p, d in sorted(rows.items()):
        print(f"  {p} ({d['leader_before']}): {d['moved_s']} s / {d['resumed_s']} s / {d['consume_resumed_s']} s / "
              f"{d['share_resumed_s']} s; {d['isr_whole_s']} s / {d['gap_after_heal_s']} s")
    print(f"load (1 min) {result['load_1min']}; Ray nodes restarted: {result['ray_nodes_restarted'] or 'none'}")
    print("kray start said:\n" + "\n".join(result["console"]))
    assert result["lost"] == 0, f"{result['lost']} acknowledged records lost"
    assert result["duplicates"] == 0, "an idempotent producer's record was written twice"
    assert result["failed"] == 0 and result["unflushed"] == 0, result["failed_examples"]
    for p, d in rows.items():
        assert d["isr_whole_s"] is not None and d["isr_whole_s"] <= ISR_AFTER_HEAL_MAX_S, \
            f"partition {p}: broker {victim} not back in its ISR {ISR_AFTER_HEAL_MAX_S} s after the heal"
        assert d["moved_s"] is not None and d["moved_s"] <= RESUME_MAX_S, \
            f"partition {p}: no live leader and ISR without broker {victim} {RESUME_MAX_S} s after the cut"
        assert d["resumed_s"] is not None and d["resumed_s"] <= RESUME_MAX_S, \
            f"partition {p}: acks=all writes resumed {d['resumed_s']} s after the cut (goal {RESUME_GOAL_S} s)"
        # readers are served during the cut too (a share-partition leader that moved loads its state
        # from a share coordinator that moved as well)
        for reader in ("consume", "share"):
            assert d[f"{reader}_resumed_s"] is not None and d[f"{reader}_resumed_s"] <= RESUME_MAX_S, \
                f"partition {p}: the {reader} reader got records again {d[f'{reader}_resumed_s']} s after the cut"
    assert result["readers_warm"], "the readers had not received records of every partition before the cut"
    # (after the producer stops the readers get up to READERS_CATCH_UP_TIMEOUT_S to receive the rest)
    assert result["consumed"] == result["share_consumed"] == result["acknowledged"], \
        (result["consumed"], result["share_consumed"], result["acknowledged"], result["reader_errors"])
    met = all(d["resumed_s"] <= RESUME_GOAL_S and d["isr_whole_s"] <= 5 for d in rows.values())
    print(f"goal (resumed <= {RESUME_GOAL_S:g} s after the cut, ISR whole <= 5 s after the heal): "
          f"{'met' if met else 'missed'}")
    assert any(f"broker {victim} fenced" in line for line in result["console"]), result["console"]
    assert any(f"broker {victim} back" in line for line in result["console"]), result["console"]
