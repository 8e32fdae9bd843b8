"""The Jepsen-style checker (cluster/checker.py): each rule finds what breaks it and nothing else."""
import pytest

from cluster.checker import (
    Ack, Commit, CommittedRead, Fault, Read, ShareEvent, check, committed_backwards, divergent_offsets,
    lost_acknowledged, markdown, reads_then_lost, resumed_after, resumed_per_partition, share_redelivered,
)


def ack(p, o, v, sent=0.0, acked=0.1):
    return Ack(p, o, v, sent, acked)


def test_an_acknowledged_record_is_lost_when_its_offset_is_gone_or_holds_another_record():
    final = {0: {0: b"a", 1: b"b"}, 1: {0: b"x"}}
    acks = [ack(0, 0, b"a"), ack(0, 1, b"b"), ack(0, 2, b"c"), ack(1, 0, b"y"), ack(2, 0, b"z")]
    assert lost_acknowledged(acks, final) == [acks[2], acks[3], acks[4]]
    assert lost_acknowledged(acks[:2], final) == []


def test_an_acknowledgement_without_an_offset_is_lost_only_if_its_record_is_nowhere_in_its_partition():
    """librdkafka reports a record delivered at an unknown offset (None) when the request carrying it
    timed out and a later one of the same idempotent producer succeeded."""
    final = {0: {0: b"a", 1: b"b"}, 1: {0: b"c"}}
    acks = [ack(0, None, b"b"), ack(0, None, b"c"), ack(1, None, b"c"), ack(2, None, b"d")]
    assert lost_acknowledged(acks, final) == [acks[1], acks[3]]


def test_replicas_diverge_only_below_the_high_watermark_and_a_missing_offset_is_not_a_fork():
    replicas = {0: {1: {0: b"a", 1: b"b", 2: b"c"}, 2: {0: b"a", 1: b"B", 2: b"C"}, 3: {0: b"a"}},
                1: {1: {0: b"x"}, 2: {0: b"x", 1: b"y"}}}
    assert divergent_offsets(replicas, {0: 2, 1: 2}) == [(0, 1, {1: b"b", 2: b"B"})]  # offset 2 is past the HW
    assert divergent_offsets(replicas, {0: 3, 1: 2}) == [(0, 1, {1: b"b", 2: b"B"}), (0, 2, {1: b"c", 2: b"C"})]
    assert divergent_offsets(replicas, {}) == []


def test_a_read_is_lost_when_the_final_log_holds_something_else_there():
    final = {0: {0: b"a", 1: b"b"}}
    reads = [Read(0, 0, b"a"), Read(0, 1, b"stale"), Read(0, 5, b"gone")]
    assert reads_then_lost(reads, final) == reads[1:]


def test_committed_offsets_must_not_fall_below_an_acknowledged_commit_or_an_earlier_read():
    commits = [Commit(0, 10, done_s=1.0), Commit(0, 20, done_s=3.0), Commit(1, 5, done_s=1.0)]
    fine = [CommittedRead(0, None, 0.0, 0.1), CommittedRead(0, 10, 2.0, 2.1), CommittedRead(0, 20, 3.5, 3.6),
            CommittedRead(0, 20, 2.9, 3.2),   # asked before the commit of 20 was answered: 10 or 20 both fine
            CommittedRead(1, 5, 1.5, 1.6)]
    assert committed_backwards(commits, fine) == []
    assert len(committed_backwards(commits, fine + [CommittedRead(0, 10, 4.0, 4.1)])) == 1
    assert len(committed_backwards(commits, fine + [CommittedRead(1, None, 2.0, 2.1)])) == 1  # commit forgotten
    # reads alone: a value read and answered, then a lower one asked afterwards
    assert len(committed_backwards([], [CommittedRead(2, 7, 0, 1), CommittedRead(2, 6, 2, 3)])) == 1
    assert committed_backwards([], [CommittedRead(2, 7, 0, 3), CommittedRead(2, 6, 2, 4)]) == []  # overlapping


def test_a_share_record_may_come_back_before_its_acceptance_is_acknowledged_but_never_after():
    events = [ShareEvent("delivered", 0, 1, 1.0), ShareEvent("delivered", 0, 1, 2.0),   # lock expired: allowed
              ShareEvent("accepted", 0, 1, 2.5),
              ShareEvent("delivered", 0, 1, 3.0),                                      # after the accept: not
              ShareEvent("delivered", 1, 1, 3.0)]                                      # another partition
    assert share_redelivered(events) == [events[3]]
    assert share_redelivered(events[:3]) == []


def test_unavailability_is_until_the_slowest_partition_acknowledges_a_record_sent_after_the_moment():
    acks = [Ack(0, 0, b"", 9.0, 9.1), Ack(0, 1, b"", 10.0, 10.2), Ack(1, 0, b"", 10.5, 17.0),
            Ack(1, 1, b"", 11.0, 17.0)]
    assert resumed_after(acks, 10.0, [0, 1]) == 7.0
    assert resumed_after(acks, 10.0, [0]) == pytest.approx(0.2)
    assert resumed_after(acks, 12.0, [0, 1]) is None
    assert resumed_per_partition(acks, 10.0, [0, 1, 2]) == {0: pytest.approx(0.2), 1: 7.0, 2: None}


def test_check_builds_a_report_whose_safety_counts_are_zero_on_a_clean_history_and_markdown_shows_them():
    acks = [Ack(0, 0, b"a", 0.0, 0.1), Ack(0, 1, b"b", 5.0, 9.0), Ack(0, 2, b"c", 12.0, 12.1)]
    final = {0: {0: b"a", 1: b"b", 2: b"c"}}
    report = check(acks=acks, final=final, replicas={0: {1: final[0], 2: final[0]}}, high_watermarks={0: 3},
                   reads=[Read(0, 0, b"a")], commits=[Commit(0, 1, 1.0)], observed=[CommittedRead(0, 1, 2.0, 2.1)],
                   share=[ShareEvent("delivered", 0, 0, 1.0), ShareEvent("accepted", 0, 0, 1.1)],
                   faults=[Fault("isolate h2", 4.0, 11.0), Fault("split h3", 20.0, None)], partitions=[0],
                   info={"reads": 1})
    assert report.safe and set(report.safety_counts().values()) == {0}
    assert report.faults[0] == {"fault": "isolate h2", "start_s": 4.0, "healed_s": 11.0, "unavailable_s": 5.0,
                                "after_heal_s": 1.1, "per_partition_s": {0: 5.0}}
    assert report.faults[1]["unavailable_s"] is None
    text = markdown(report, "seed 1")
    assert "| acknowledged records lost (must be 0) | 0 |" in text and "| split h3 | 20.0 | never | never | never | 0:never |" in text
    assert report.to_json()["safe"] is True
    bad = check(acks=acks + [Ack(0, 3, b"d", 13.0, 13.1)], final=final, replicas={}, high_watermarks={}, reads=[],
                commits=[], observed=[], share=[], faults=[], partitions=[0])
    assert not bad.safe and bad.safety_counts()["acknowledged records lost"] == 1


def test_replica_logs_are_read_from_each_brokers_segment_files_up_to_a_torn_tail(tmp_path):
    from cluster.jepsen import replica_logs
    from protocol.record_batch import build_batch
    for broker, values in ((1, [b"a", b"b", b"c"]), (2, [b"a", b"b"])):
        d = tmp_path / f"broker-{broker}" / "t-0"
        d.mkdir(parents=True)
        first = build_batch([(None, v, [], 0) for v in values[:2]], base_offset=0)
        rest = build_batch([(None, v, [], 0) for v in values[2:]], base_offset=2) if values[2:] else b""
        (d / "00000000000000000000.log").write_bytes(first + rest[: len(rest) // 2] if broker == 2 else first + rest)
    (tmp_path / "broker-3").mkdir()  # a broker that hosts no replica of the topic
    logs = replica_logs(tmp_path, "t", 2)
    assert logs == {0: {1: {0: b"a", 1: b"b", 2: b"c"}, 2: {0: b"a", 1: b"b"}}, 1: {}}
