"""The Spark bridge's pure parts, without Ray, Spark or a broker."""
import pyarrow as pa

from cluster.spark.reader import split_evenly
from cluster.spark.reader_actor import RECORD_SCHEMA, split, to_arrow
from cluster.spark.session import JAVA17_OPTIONS, JAVA_OPTION_KEYS, spark_configs
from cluster.spark.share_client import ACCEPT, REJECT, FetchedRecords, offset_ranges


def test_spark_configs_carry_the_java17_options_everywhere_and_keep_the_users_own():
    configs = spark_configs({"spark.executor.extraJavaOptions": "-Dmine=1", "spark.sql.shuffle.partitions": 8},
                            python="/venv/bin/python")
    for key in JAVA_OPTION_KEYS:
        assert all(opt in configs[key] for opt in JAVA17_OPTIONS), key
    assert configs["spark.executor.extraJavaOptions"].startswith("-Dmine=1 ")
    assert configs["spark.pyspark.python"] == "/venv/bin/python"
    assert configs["spark.sql.shuffle.partitions"] == "8"
    assert configs["spark.sql.execution.arrow.pyspark.enabled"] == "true"


def test_acknowledgements_go_as_contiguous_ranges():
    assert offset_ranges([5, 3, 4, 9, 10, 12], ACCEPT) == [(3, 5, ACCEPT), (9, 10, ACCEPT), (12, 12, ACCEPT)]
    assert offset_ranges([], REJECT) == []


def test_a_batch_asks_readers_in_proportion_to_what_they_hold():
    assert split_evenly(10, {0: 1, 1: 1}) == {0: 5, 1: 5}
    assert split_evenly(1000, {0: 900, 1: 0}) == {0: 999, 1: 1}  # a drained reader is still asked a little
    assert sum(split_evenly(7, {0: 3, 1: 3, 2: 3}).values()) == 7


def test_records_become_one_arrow_table_with_the_kafka_columns():
    chunk = FetchedRecords("orders", 2, [10, 11, 12], [1000, 1001, 1002], [b"a", None, b"c"], [b"1", b"2", None],
                           [[], [("trace", b"x")], []], [1, 1, 3])
    first, rest = split(chunk, 2)
    assert first.offsets == [10, 11] and rest.offsets == [12]
    table = to_arrow([first, rest])
    assert table.schema == RECORD_SCHEMA
    rows = table.to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 12]
    assert rows[1]["key"] is None and rows[1]["headers"] == [{"key": "trace", "value": b"x"}]
    assert rows[2]["value"] is None and rows[2]["delivery_count"] == 3
    assert table.column("timestamp").type == pa.timestamp("ms", tz="UTC")
