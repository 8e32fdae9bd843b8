"""`kray leader-election`, after Kafka's kafka-leader-election.sh (LeaderElectionCommand): elect partitions'
leaders with ElectLeaders. PREFERRED gives a partition back to its first replica when that replica is in the
ISR; UNCLEAN elects a leader for a partition that has none, from outside the ISR if no ISR member is alive
(records the old leader had that the new one lacks are lost). The partitions: --topic T --partition P,
--all-topic-partitions, or Kafka's JSON file ({"partitions": [{"topic": "t", "partition": 0}]}). The lines
printed are Kafka's; the exit status is 1 when a partition could not be elected."""
from __future__ import annotations

import json
import sys

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import ElectLeadersRequest

CLIENT_ID = "kray-leader-election"
TIMEOUT_MS = 30_000
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}


def add_parser(sub) -> None:
    p = sub.add_parser("leader-election", help="elect partition leaders: preferred or unclean "
                                               "(like kafka-leader-election.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", "--admin.config", metavar="FILE", dest="command_config",
                   help=COMMAND_CONFIG_HELP)
    p.add_argument("--election-type", required=True, type=str.upper, choices=sorted(ELECTION_TYPES),
                   help="PREFERRED: the first replica leads if it is in the ISR; UNCLEAN: a partition without a "
                        "leader gets one, from outside the ISR if need be")
    p.add_argument("--topic", help="the topic of --partition")
    p.add_argument("--partition", type=int, help="the partition to elect a leader for (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic": T, "partition": P}]}')
    p.set_defaults(func=run)


def read_partitions(path: str) -> list[tuple[str, int]]:
    """Kafka's parseReplicaElectionData, with its words."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise AdminError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError:
        raise AdminError("Replica election data is empty") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if entries is None:
        raise AdminError('Replica election data is missing "partitions" field')
    out = []
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)):
            raise AdminError('each partition needs "topic" (a string) and "partition" (an integer)')
        out.append((e["topic"], e["partition"]))
    twice = sorted({f"{t}-{p}" for t, p in out if out.count((t, p)) > 1})
    if twice:
        raise AdminError(f"Replica election data contains duplicate partitions: {','.join(twice)}")
    return out


def _partitions(args) -> list[tuple[str, int]] | None:
    given = [name for name, on in (("--all-topic-partitions", args.all_topic_partitions),
                                   ("--topic", args.topic is not None),
                                   ("--path-to-json-file", args.path_to_json_file is not None)) if on]
    if len(given) != 1:
        raise AdminError("One and only one of the following options is required: --all-topic-partitions, --topic, "
                         "--path-to-json-file")
    if args.partition is not None and args.topic is None:
        raise AdminError("Option --partition is only allowed if --topic is used")
    if args.topic is not None:
        if args.partition is None:
            raise AdminError("Missing required option(s): partition")
        return [(args.topic, args.partition)]
    if args.path_to_json_file:
        return read_partitions(args.path_to_json_file)
    return None


def elect(conn: KafkaConnection, election_type: str, partitions: list[tuple[str, int]] | None
          ) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(elected, needing no election, [(failed partition, why)]), partitions as topic-partition."""
    topics: dict[str, list[int]] = {}
    for t, p in partitions or []:
        topics.setdefault(t, []).append(p)
    answer = conn.send(ElectLeadersRequest(election_type=ELECTION_TYPES[election_type], timeout_ms=TIMEOUT_MS,
                                           topic_partitions=None if partitions is None else [
                                               ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
                                               for t, ps in topics.items()]))
    if getattr(answer, "error_code", 0) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        raise AdminError("Not authorized to perform leader election")
    done, noop, failed = [], [], []
    for r in answer.replica_election_results:
        for p in r.partition_result:
            name = f"{r.topic}-{p.partition_id}"
            if p.error_code == 0:
                done.append(name)
            elif p.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                noop.append(name)
            else:
                failed.append((name, f"{ErrorCode(p.error_code).name}: {p.error_message or ''}".rstrip(": ")))
    return done, noop, failed


def run(args) -> int:
    try:
        partitions = _partitions(args)
        with KafkaConnection(args.bootstrap_server, client_id=CLIENT_ID) as conn:
            done, noop, failed = elect(conn, args.election_type, partitions)
    except AdminError as e:
        print(f"kray leader-election: {e}", file=sys.stderr)
        return 1
    if done:
        print(f"Successfully completed leader election ({args.election_type}) for partitions {', '.join(done)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for name, why in failed:
        print(f"Error completing leader election ({args.election_type}) for partition: {name}: {why}")
    if failed:
        print(f"kray leader-election: {len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
