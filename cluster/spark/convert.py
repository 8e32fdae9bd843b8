"""Arrow tables into Spark DataFrames without pandas and without a row at a time.

pyspark 3.5's `createDataFrame(pandas_df)` turns every binary value into a Python object and back
(and the prototype's row-by-row `createDataFrame` moved ~800 records/s). Here the reader's Arrow
table is streamed as Arrow IPC straight into the JVM, the path pyspark itself uses after its pandas
step (and Spark 4's `createDataFrame(pyarrow.Table)`), one Arrow record batch per Spark partition.
"""
from __future__ import annotations

import math

import pyarrow as pa

# what Spark's JVM reads for each column (TimestampType is microseconds in the session time zone)
SPARK_ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ("delivery_count", pa.int32()),
])


def spark_schema():
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField,
                                   StructType, TimestampType)
    return StructType([
        StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
        StructField("partition", IntegerType()), StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())]))),
        StructField("delivery_count", IntegerType()),
    ])


def arrow_to_spark(spark, table: pa.Table, partitions: int | None = None):
    """A DataFrame over the records of `table` (RECORD_SCHEMA), in `partitions` Spark partitions
    (default: Spark's default parallelism)."""
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    if spark.conf.get("spark.sql.session.timeZone") != "UTC":
        raise ValueError("the share-group reader needs spark.sql.session.timeZone=UTC (start_spark sets it)")
    table = table.cast(SPARK_ARROW_SCHEMA)
    partitions = max(1, partitions or spark.sparkContext.defaultParallelism)
    rows_per_partition = max(1, math.ceil(table.num_rows / partitions))
    batches = table.combine_chunks().to_batches(max_chunksize=rows_per_partition) or \
        [pa.RecordBatch.from_pylist([], schema=SPARK_ARROW_SCHEMA)]
    jvm = spark._jvm

    def reader_func(path):
        return jvm.PythonSQLUtils.readArrowStreamFromFile(path)

    def create_iter_server():
        return jvm.ArrowIteratorServer()

    schema = spark_schema()
    jiter = spark.sparkContext._serialize_to_jvm(batches, ArrowStreamSerializer(), reader_func, create_iter_server)
    jdf = jvm.PythonSQLUtils.toDataFrame(jiter, schema.json(), spark._jsparkSession)
    df = DataFrame(jdf, spark)
    df._schema = schema
    return df
