"""`kray remove-broker`: take a broker out of the cluster without any partition losing a replica, as Confluent's
kafka-remove-brokers does beside Kafka (Apache Kafka itself has only `kafka-cluster.sh unregister`, for a broker
that holds nothing any more, and leaves the moves to the operator):

    kray remove-broker --bootstrap-server localhost:9092 --broker 4 --wait

It sets the dynamic broker config `kray.broker.draining=true` on the broker (IncrementalAlterConfigs, as
`kray configs --entity-type brokers --entity-name 4 --alter --add-config kray.broker.draining=true` would). The
controller then moves every replica off it, at most kray.balancer.max.moves.in.flight at once, each move a
KIP-455 reassignment (the new replica catches up and joins the ISR before the old one leaves), throttled by
kray.balancer.replication.throttled.rate; new partitions are not placed on it. Once it holds nothing its gateway
stops and it unregisters: its node may go. --wait follows the moves until then; --describe says where a removal
stands; --cancel stops one (the broker takes new partitions again; what moved stays moved).
"""
from __future__ import annotations

import sys
import time

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from cluster.tools.reassign_partitions import RESOURCE_BROKER, _metadata, alter_configs, ongoing

CLIENT_ID = "kray-remove-broker"
DRAINING = "kray.broker.draining"
POLL_S = 1.0


def add_parser(sub) -> None:
    p = sub.add_parser("remove-broker", help="move every replica off a broker, then unregister it "
                                             "(like Confluent's kafka-remove-brokers)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a Kray broker")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--broker", "--broker-id", dest="broker", type=int, required=True, metavar="ID",
                   help="the broker to remove")
    p.add_argument("--wait", action="store_true", help="follow the moves until the broker has unregistered")
    p.add_argument("--describe", action="store_true", help="say where the broker's removal stands")
    p.add_argument("--cancel", action="store_true", help="stop removing the broker (it takes new partitions "
                                                         "again; what moved stays)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="--wait gives up after this long "
                                                                            "(default 600)")
    p.set_defaults(func=run)


class State:
    """Where a removal stands, from one Metadata answer (and the moves in progress)."""

    def __init__(self, conn: KafkaConnection, broker: int):
        answer = _metadata(conn, None)
        self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in answer.brokers}
        self.registered = broker in self.brokers
        self.replicas = sorted((t.name, p.partition_index) for t in answer.topics for p in t.partitions
                               if broker in p.replica_nodes)
        self.leaders = sum(1 for t in answer.topics for p in t.partitions if p.leader_id == broker)
        self.replication = {t.name: len(t.partitions[0].replica_nodes) for t in answer.topics if t.partitions}
        moves = ongoing(conn)
        self.moving = sorted(part for part, (_, adding, removing) in moves.items() if broker in removing)

    @property
    def done(self) -> bool:
        return not self.registered and not self.replicas

    def line(self, broker: int) -> str:
        if self.done:
            return f"Broker {broker} removed: no partition has a replica on it, and it has unregistered."
        if not self.replicas:
            return f"Broker {broker}: no replica left; it stops and unregisters."
        n = len(self.replicas)
        return (f"Broker {broker}: {n} replica{'s' if n != 1 else ''} left ({self.leaders} leading), "
                f"{len(self.moving)} moving off now.")


def _connect(bootstrap: str, avoid: str | None = None) -> KafkaConnection:
    """A connection to one of `bootstrap`'s brokers, the one being removed last (it stops at the end)."""
    servers = [s for s in bootstrap.split(",") if s.strip()]
    if avoid is not None and len(servers) > 1:
        servers = [s for s in servers if s != avoid] + [s for s in servers if s == avoid]
    return KafkaConnection(",".join(servers), client_id=CLIENT_ID)


def _config(conn: KafkaConnection, broker: int, value: str | None) -> None:
    try:
        alter_configs(conn, [(RESOURCE_BROKER, str(broker), [(DRAINING, value)])])
    except AdminError as e:
        raise AdminError(str(e).replace("the throttle configs", DRAINING)) from None


def run(args) -> int:
    broker = args.broker
    try:
        with _connect(args.bootstrap_server) as conn:
            state = State(conn, broker)
            every = ",".join([args.bootstrap_server] + list(state.brokers.values()))
            address = state.brokers.get(broker)
            if args.describe:
                print(state.line(broker) if state.registered or state.replicas else
                      f"Broker {broker} is not registered (removed, or never part of this cluster).")
                return 0
            if args.cancel:
                _config(conn, broker, None)
                print(f"Removal of broker {broker} cancelled: it takes new partitions again; the replicas that "
                      f"moved off it stay where they are.")
                return 0
            if not state.registered:
                if state.replicas:
                    raise AdminError(f"broker {broker} is not registered but {len(state.replicas)} partitions still "
                                     f"name it: it is down; start its node again to drain it, or move them with "
                                     f"kray reassign-partitions")
                print(f"Broker {broker} is not registered: nothing to remove.")
                return 0
            others = len(state.brokers) - 1
            too_wide = sorted(t for t, rf in state.replication.items() if rf > others)
            if too_wide:
                raise AdminError(f"cannot remove broker {broker}: topic{'s' if len(too_wide) > 1 else ''} "
                                 f"{', '.join(too_wide[:5])} {'have' if len(too_wide) > 1 else 'has'} a replication "
                                 f"factor larger than the {others} other brokers; add a broker first, or lower the "
                                 f"replication factor with kray reassign-partitions")
            _config(conn, broker, "true")
        print(f"Removing broker {broker}: its {len(state.replicas)} replicas ({state.leaders} leaders) move to "
              f"brokers {','.join(str(b) for b in sorted(state.brokers) if b != broker)}, then it unregisters.")
        if not args.wait:
            print(f"Follow it with: kray remove-broker --bootstrap-server {args.bootstrap_server} --broker {broker} "
                  f"--describe")
            return 0
        return _wait(every, address, broker, args.timeout)
    except AdminError as e:
        print(f"kray remove-broker: {e}", file=sys.stderr)
        return 1


def _wait(bootstrap: str, avoid: str | None, broker: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    said = None
    while True:
        try:
            with _connect(bootstrap, avoid) as conn:
                state = State(conn, broker)
        except (AdminError, OSError) as e:  # (a broker stopping under us: the next poll asks another)
            line = None
            if time.monotonic() > deadline:
                raise AdminError(f"no broker answered: {e}") from None
        else:
            line = state.line(broker)
            if line != said:
                print(line, flush=True)
                said = line
            if state.done:
                return 0
        if time.monotonic() > deadline:
            print(f"kray remove-broker: broker {broker} not removed after {timeout_s:.0f} s; the moves go on "
                  f"(--describe follows them; the controller's log says what blocks one)", file=sys.stderr)
            return 1
        time.sleep(POLL_S)
