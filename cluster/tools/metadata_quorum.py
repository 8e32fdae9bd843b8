"""`kray metadata-quorum`, after kafka-metadata-quorum.sh:
  kray metadata-quorum --bootstrap-server H:P describe --status
  kray metadata-quorum --bootstrap-server H:P describe --replication
  kray metadata-quorum --bootstrap-server H:P --command-config client.properties describe --status
  kray metadata-quorum --bootstrap-server H:P remove-controller --controller-id 3 --controller-directory-id ID
  kray metadata-quorum --bootstrap-server H:P add-controller --controller-id 3

add-controller / remove-controller send AddRaftVoter (80) / RemoveRaftVoter (81), KIP-853, as
Kafka's tool does; the broker named forwards them to the quorum's leader, which answers once the
change is committed. Kafka's add-controller reads the new controller's id, directory id and
listeners from its own properties (--command-config); Kray's voters are brokers, so the id is
given (--controller-id) and the directory id is optional (the one `describe --replication` lists,
Kafka's base64 form or a UUID). A voter can be added only while its broker runs a quorum node and
has caught up: in Kray, a broker named in controller.quorum.voters (a removed voter keeps fetching
as an observer, so it can be added back).

DescribeQuorum (55) to the broker named; any voter answers with its epoch, leader and high
watermark, the leader also with each replica's log end offset and last fetch. A broker without a
voter asks the dedicated controller (the default); with combined voters a non-voting broker
answers INVALID_REQUEST: ask a voting broker.
"""
from __future__ import annotations

import sys
import time

import base64
import uuid

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import AddRaftVoterRequest, DescribeQuorumRequest, RemoveRaftVoterRequest

METADATA_TOPIC = "__cluster_metadata"


def add_parser(sub) -> None:
    p = sub.add_parser("metadata-quorum", help="describe the metadata quorum, add or remove its voters "
                                               "(like kafka-metadata-quorum.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    commands = p.add_subparsers(dest="quorum_command", required=True)
    describe = commands.add_parser("describe", help="the quorum's status or its replicas")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true")
    what.add_argument("--replication", action="store_true")
    add = commands.add_parser("add-controller", help="make a broker a voter of the metadata quorum (AddRaftVoter)")
    add.add_argument("--controller-id", type=int, required=True, help="the broker id of the new voter")
    add.add_argument("--controller-directory-id", help="its directory id, as describe --replication lists it "
                                                       "(optional)")
    add.add_argument("--timeout-ms", type=int, default=30_000,
                     help="how long the leader waits for the voter to catch up and the change to commit")
    remove = commands.add_parser("remove-controller", help="remove a voter of the metadata quorum (RemoveRaftVoter)")
    remove.add_argument("--controller-id", type=int, required=True, help="the broker id of the voter")
    remove.add_argument("--controller-directory-id", required=True,
                        help="its directory id, as describe --replication lists it")
    p.set_defaults(func=run)


def parse_directory_id(text: str | None) -> uuid.UUID:
    """Kafka's base64 form (22 characters, as its tools print ids) or a UUID; none: the zero UUID."""
    if not text:
        return uuid.UUID(int=0)
    try:
        if len(text) == 22:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        return uuid.UUID(text)
    except ValueError:
        raise AdminError(f"--controller-directory-id {text!r} is neither Kafka's base64 form nor a UUID") from None


def format_directory_id(directory: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(directory.bytes).decode().rstrip("=")


def add_voter_request(voter_id: int, directory: uuid.UUID, timeout_ms: int) -> AddRaftVoterRequest:
    return AddRaftVoterRequest(cluster_id=None, timeout_ms=timeout_ms, voter_id=voter_id,
                               voter_directory_id=directory, listeners=[])


def remove_voter_request(voter_id: int, directory: uuid.UUID) -> RemoveRaftVoterRequest:
    return RemoveRaftVoterRequest(cluster_id=None, voter_id=voter_id, voter_directory_id=directory)


def change_voters(args) -> int:
    directory = parse_directory_id(args.controller_directory_id)
    if args.quorum_command == "add-controller":
        request, done = add_voter_request(args.controller_id, directory, args.timeout_ms), "Added"
    else:
        request, done = remove_voter_request(args.controller_id, directory), "Removed"
    with KafkaConnection(args.bootstrap_server, client_id="kray-metadata-quorum") as conn:
        response = conn.send(request)
    if response.error_code:
        raise AdminError(f"{ErrorCode(response.error_code).name}: {response.error_message or ''}")
    print(f"{done} controller {args.controller_id} with directory id {format_directory_id(directory)}")
    return 0


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
    lines = [f"{'NodeId':<8}{'DirectoryId':<24}{'LogEndOffset':<14}{'Lag':<8}{'LastFetchTimestamp':<20}{'LastCaughtUpTimestamp':<23}Status"]
    for status, replicas in (("Voter", part.current_voters), ("Observer", part.observers)):
        for r in replicas:
            role = "Leader" if r.replica_id == part.leader_id else ("Follower" if status == "Voter" else "Observer")
            lines.append(f"{r.replica_id:<8}{format_directory_id(r.replica_directory_id or uuid.UUID(int=0)):<24}"
                         f"{r.log_end_offset:<14}{max(part.high_watermark - r.log_end_offset, 0):<8}"
                         f"{r.last_fetch_timestamp:<20}{r.last_caught_up_timestamp:<23}{role}")
    return "\n".join(lines)


def run(args) -> int:
    try:
        if args.quorum_command in ("add-controller", "remove-controller"):
            return change_voters(args)
        with KafkaConnection(args.bootstrap_server, client_id="kray-metadata-quorum") as conn:
            part = partition_of(conn.send(describe_request()))
        now_ms = int(time.time() * 1000)
        print(format_status(part, now_ms) if args.status else format_replication(part, now_ms))
        return 0
    except AdminError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
