"""DescribeLogDirs (35): the log directory of this broker (Kray's brokers have one: <log.dirs>/broker-<id>), with
the size on disk of each partition replica placed on this broker, and the directory's filesystem's total and
usable bytes (v4+). As Kafka: DESCRIBE on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED); topics null
asks for every partition; a replica placed here whose directory does not exist yet (its replica starting) is
left out, as Kafka lists only the replicas a log directory holds. Kafka's admin client asks each broker for its
own log directories (kafka-log-dirs.sh; kafka-reassign-partitions.sh prints the replicas' log directories)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsResponse as R

from actors.security.authorizer import AclOperation


def log_dir(ctx) -> Path:
    """Where this broker's partition replicas keep their logs (as the controller's replica specs say)."""
    return Path(ctx.config["log.dirs"]).resolve() / f"broker-{ctx.broker_id}"


def dir_bytes(path: Path) -> int:
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:  # a segment deleted meanwhile
                    pass
    except OSError:
        return -1
    return total


def led_partition_sizes(ctx) -> dict[tuple[str, int], int]:
    """The size on disk of each partition this broker leads (as its metadata says), for the balancer
    (actors/controller/load_samples.py); a partition whose directory is not there yet is left out."""
    directory = log_dir(ctx)
    sizes = {}
    for topic in ctx.metadata.topics.values():
        for p in topic.partitions:
            if p.leader == ctx.broker_id:
                size = dir_bytes(directory / f"{topic.name}-{p.index}")
                if size >= 0:
                    sizes[(topic.name, p.index)] = size
    return sizes


async def handle_describe_log_dirs(ctx, header, request, connection=None) -> R:
    if not ctx.access(connection).allows_cluster(AclOperation.DESCRIBE):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    directory = log_dir(ctx)
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    topics = []
    for topic in sorted(ctx.metadata.topics.values(), key=lambda t: t.name):
        partitions = []
        for p in topic.partitions:
            if ctx.broker_id not in p.replicas or (wanted is not None and (topic.name, p.index) not in wanted):
                continue
            size = dir_bytes(directory / f"{topic.name}-{p.index}")
            if size >= 0:
                partitions.append(R.DescribeLogDirsPartition(partition_index=p.index, partition_size=size,
                                                             offset_lag=0, is_future_key=False))
        if partitions:
            topics.append(R.DescribeLogDirsTopic(name=topic.name, partitions=partitions))
    try:
        usage = shutil.disk_usage(directory)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    return R(throttle_time_ms=0, error_code=0, results=[R.DescribeLogDirsResult(
        error_code=0, log_dir=str(directory), topics=topics, total_bytes=total, usable_bytes=usable,
        is_cordoned=False)])
