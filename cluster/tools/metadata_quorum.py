"""`kray metadata-quorum`, after kafka-metadata-quorum.sh:
  kray metadata-quorum --bootstrap-server H:P describe --status
  kray metadata-quorum --bootstrap-server H:P describe --replication
  kray metadata-quorum --bootstrap-server H:P --command-config client.properties describe --status

DescribeQuorum (55) to the broker named; any voter answers with its epoch, leader and high
watermark, the leader also with each replica's log end offset and last fetch. A broker without a
voter asks the dedicated controller (the default); with combined voters a non-voting broker
answers INVALID_REQUEST: ask a voting broker.
"""
from __future__ import annotations

import sys
import time

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import DescribeQuorumRequest

METADATA_TOPIC = "__cluster_metadata"


def add_parser(sub) -> None:
    p = sub.add_parser("metadata-quorum", help="describe the metadata quorum (like kafka-metadata-quorum.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    commands = p.add_subparsers(dest="quorum_command", required=True)
    describe = commands.add_parser("describe", help="the quorum's status or its replicas")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true")
    what.add_argument("--replication", action="store_true")
    p.set_defaults(func=run)


def describe_request() -> DescribeQuorumRequest:
    R = DescribeQuorumRequest
    return R(topics=[R.TopicData(topic_name=METADATA_TOPIC, partitions=[R.PartitionData(partition_index=0)])])


def partition_of(response):
    if response.error_code:
        raise AdminError(f"{ErrorCode(response.error_code).name}: {getattr(response, 'error_message', '') or ''}")
    part = response.topics[0].partitions[0]
    if part.error_code:
        raise AdminError(f"{ErrorCode(part.error_code).name}: {getattr(part, 'error_message', '') or ''}")
    return part


def format_status(part, now_ms: int) -> str:
    """kafka-metadata-quorum.sh's --status lines; lag only where the leader reported replicas."""
    followers = [r for r in part.current_voters if r.replica_id != part.leader_id]
    lag = max((part.high_watermark - r.log_end_offset for r in followers if r.log_end_offset >= 0), default=0)
    lag_ms = max((now_ms - r.last_caught_up_timestamp for r in followers if r.last_caught_up_timestamp >= 0),
                 default=0)
    rows = [("LeaderId", part.leader_id), ("LeaderEpoch", part.leader_epoch), ("HighWatermark", part.high_watermark),
            ("MaxFollowerLag", max(lag, 0)), ("MaxFollowerLagTimeMs", max(lag_ms, 0)),
            ("CurrentVoters", "[" + ",".join(str(r.replica_id) for r in part.current_voters) + "]"),
            ("CurrentObservers", "[" + ",".join(str(r.replica_id) for r in part.observers) + "]")]
    return "\n".join(f"{name + ':':<24}{value}" for name, value in rows)


def format_replication(part, now_ms: int) -> str:
    lines = [f"{'NodeId':<8}{'LogEndOffset':<14}{'Lag':<8}{'LastFetchTimestamp':<20}{'LastCaughtUpTimestamp':<23}Status"]
    for status, replicas in (("Voter", part.current_voters), ("Observer", part.observers)):
        for r in replicas:
            role = "Leader" if r.replica_id == part.leader_id else ("Follower" if status == "Voter" else "Observer")
            lines.append(f"{r.replica_id:<8}{r.log_end_offset:<14}{max(part.high_watermark - r.log_end_offset, 0):<8}"
                         f"{r.last_fetch_timestamp:<20}{r.last_caught_up_timestamp:<23}{role}")
    return "\n".join(lines)


def run(args) -> int:
    try:
        with KafkaConnection(args.bootstrap_server, client_id="kray-metadata-quorum") as conn:
            part = partition_of(conn.send(describe_request()))
        now_ms = int(time.time() * 1000)
        print(format_status(part, now_ms) if args.status else format_replication(part, now_ms))
        return 0
    except AdminError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
