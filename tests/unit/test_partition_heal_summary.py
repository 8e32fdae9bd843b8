"""The partition-heal measurements (benchmarks/partition_heal.summarize) from made-up timings."""
from benchmarks.partition_heal import markdown, summarize


def test_resumed_is_the_first_acknowledgement_of_a_record_sent_after_the_cut():
    cut, heal, end = 100.0, 160.0, 200.0
    sent = {b"a": 99.0, b"b": 101.0, b"c": 102.0, b"d": 170.0}
    acked = {b"a": (0, 110.0),   # sent before the cut: not a resumption
             b"b": (0, 112.5), b"c": (0, 111.0),
             b"d": (1, 171.0)}
    out = summarize(sent, acked, cut, heal, end, partitions=2)
    assert out[0]["resumed_s"] == 11.0
    assert out[1]["resumed_s"] == 71.0


def test_gap_after_heal_counts_from_the_heal_to_the_end():
    cut, heal, end = 0.0, 60.0, 80.0
    sent = {b"%d" % i: 61.0 for i in range(4)}
    acked = {b"0": (0, 61.0), b"1": (0, 62.0), b"2": (0, 70.0), b"3": (0, 79.0)}
    out = summarize(sent, acked, cut, heal, end, partitions=2)
    assert out[0]["gap_after_heal_s"] == 9.0     # 70 -> 79
    assert out[1]["gap_after_heal_s"] == 20.0    # no acknowledgement at all: the whole window
    assert out[1]["resumed_s"] is None


def test_markdown_has_a_row_per_partition():
    run = {"when": "t", "victim": "h3", "cut_s": 60.0, "ray_health": "broker", "ray_nodes_restarted": [],
           "partitions": {"0": {"leader_before": 1, "resumed_s": 9.5, "isr_whole_s": 2.0, "gap_after_heal_s": 0.1},
                          "1": {"leader_before": 3, "moved_s": 9.6, "resumed_s": 31.0, "isr_whole_s": 2.5, "gap_after_heal_s": 0.1}},
           "acknowledged": 10, "lost": 0, "load_1min": {"cut": 3.0, "heal": 4.0, "end": 4.5},
           "cut_at": "14:00:00", "healed_at": "14:01:00", "console": ["broker 3 fenced"]}
    text = markdown([run])
    assert "| 0 (1) | None | 9.5 | 2.0 | 0.1 |" in text and "| 1 (3) | 9.6 | 31.0 | 2.5 | 0.1 |" in text
    assert "broker 3 fenced" in text
