"""Spark pipelines on Ray (RayDP) that read Kafka share groups and write topics.

    spark = start_spark("orders")
    reader = ShareGroupReader(spark, "127.0.0.1:9092", "order-workers", ["orders"], readers=2)
    for batch in reader.batches(max_records=100_000, timeout_s=5):
        with batch:                                  # commit on success, release on exception
            write_topic(aggregate(batch.df), "127.0.0.1:9092", "order-totals")
"""
from cluster.spark.reader import BatchSettleError, ShareBatch, ShareGroupReader
from cluster.spark.session import SparkStartError, start_spark, stop_spark
from cluster.spark.share_client import ShareClientError
from cluster.spark.writer import TopicWriteError, write_topic

__all__ = ["start_spark", "stop_spark", "ShareGroupReader", "ShareBatch", "write_topic",
           "BatchSettleError", "TopicWriteError", "SparkStartError", "ShareClientError"]
