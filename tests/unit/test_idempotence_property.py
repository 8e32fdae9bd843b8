"""Property: one idempotent producer's records land in the log once each, in send order.

A model of Kafka's client (up to 5 unacknowledged batches in flight, consecutive sequences,
retries of anything not acknowledged; an OUT_OF_ORDER_SEQUENCE_NUMBER answer means "retry later,
after the earlier ones") sends batches to a PartitionCore over a model network that reorders,
delays, duplicates and loses requests and responses. Between deliveries the partition commits
(acks=all: a success is answered once the high watermark passes the batch), truncates its
uncommitted tail at a batch boundary (a leader change) and restarts, cleanly or not; both drop
the connections, so requests in flight and unanswered responses are lost and the client retries.

One precondition is Kafka's, not the partition's: while the partition does not know the producer
(before its first batch, or after a truncation removed all of it), the first batch to arrive must
be the lowest unacknowledged one, since an unknown producer's first sequence is taken as it comes
(KIP-360). Kafka keeps that by handling one request per connection at a time and by resending
retries one at a time, in order; the model keeps it by holding back other requests until then.

Then the log must hold every record exactly once, in send order, and every acknowledged batch's
offsets must point at its records.
"""

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.partition.core import PartitionConfig, PartitionCore
from actors.partition.producer_state import INT32_MAX
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch, decode_records, iter_batches

NOW = 1_700_000_000_000
PID, EPOCH = 7, 0
MAX_IN_FLIGHT = 5
CONFIG = PartitionConfig(segment_bytes=1200)       # a few rolls: snapshots at rolls take part
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None   # rolls fsync; keep that cheap


@dataclass
class Response:
    batch: int
    error_code: int
    base_offset: int


@dataclass
class World:
    directory: Path
    sizes: list                      # records per batch, in send order
    start_seq: int
    core: PartitionCore = None
    high_watermark: int = 0
    created: int = 0                 # batches handed to the network at least once
    acked: dict = field(default_factory=dict)       # batch -> base offset the client was told
    in_flight: list = field(default_factory=list)   # batch indexes of requests not yet delivered
    responses: list = field(default_factory=list)   # Responses not yet back at the client

    def __post_init__(self):
        self.core = PartitionCore.open(self.directory, CONFIG, now_ms=NOW)
        self.first_seq = []
        seq = self.start_seq
        for size in self.sizes:
            self.first_seq.append(seq)
            seq = (seq + size) % (INT32_MAX + 1)

    # --- the client ---------------------------------------------------------------------------

    def lowest_unacked(self) -> int:
        return next((i for i in range(len(self.sizes)) if i not in self.acked), len(self.sizes))

    def batch_bytes(self, i: int) -> bytes:
        return build_batch([(None, b"%d:%d" % (i, j), [], NOW + i) for j in range(self.sizes[i])],
                           producer_id=PID, producer_epoch=EPOCH, base_sequence=self.first_seq[i])

    def send_new(self) -> None:
        if self.created < len(self.sizes) and self.created < self.lowest_unacked() + MAX_IN_FLIGHT:
            self.in_flight.append(self.created)
            self.created += 1

    def resend(self, k: int) -> None:
        unacked = [i for i in range(self.created) if i not in self.acked]
        if unacked:
            self.in_flight.append(unacked[k % len(unacked)])

    def receive(self, k: int) -> None:
        # A connection answers in request order (as Kafka's): the oldest response first, once it
        # may go (an acks=all success waits for the high watermark, and what came after waits
        # behind it). Requests may still arrive reordered (a model of retries over new connections),
        # but an error answered before an earlier batch's success cannot overtake that success.
        if not self.responses:
            return
        response = self.responses[0]
        if response.error_code == ErrorCode.NONE and response.base_offset + self.sizes[response.batch] > self.high_watermark:
            return
        self.responses.pop(0)
        if response.error_code == ErrorCode.NONE:
            known = self.acked.setdefault(response.batch, response.base_offset)
            assert known == response.base_offset, f"batch {response.batch} acked at {known} and {response.base_offset}"
        else:
            assert response.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, response
            # Kafka's client bumps the epoch when the batch right after the acknowledged ones is
            # out of order: the partition lost its state. That must not happen here.
            assert response.batch != self.lowest_unacked() or response.batch in self.acked, \
                f"next batch {response.batch} answered OUT_OF_ORDER_SEQUENCE_NUMBER"
            # else: retried later by a resend

    # --- the network and the partition --------------------------------------------------------

    def deliver(self, k: int, duplicate: bool) -> None:
        candidates = self.in_flight
        if self.core.producers.entry(PID) is None:   # the precondition above
            candidates = [i for i in self.in_flight if i == self.lowest_unacked()]
        if not candidates:
            return
        i = candidates[k % len(candidates)]
        if not duplicate:
            self.in_flight.remove(i)
        result = self.core.produce(memoryview(self.batch_bytes(i)), now_ms=NOW, leader_epoch=0)
        self.responses.append(Response(i, result.error_code, result.base_offset))

    def lose_request(self, k: int) -> None:
        if self.in_flight:
            del self.in_flight[k % len(self.in_flight)]

    def lose_response(self, k: int) -> None:
        if self.responses:
            del self.responses[k % len(self.responses)]

    def commit(self) -> None:
        self.high_watermark = self.core.log_end_offset
        self.core.log.high_watermark = self.high_watermark

    def drop_connections(self) -> None:
        self.in_flight.clear()
        self.responses.clear()

    def truncate(self, k: int) -> None:
        bounds = [h.base_offset for h in self.core.log.iter_batch_headers(self.high_watermark)]
        bounds = sorted({b for b in bounds if b >= self.high_watermark} | {self.core.log_end_offset})
        self.core.truncate_to(bounds[k % len(bounds)], now_ms=NOW)
        self.drop_connections()

    def restart(self, clean: bool) -> None:
        if clean:
            self.core.close()
        else:
            self.core.log.close()     # a crash: the page cache keeps what was written
        self.core = PartitionCore.open(self.directory, CONFIG, now_ms=NOW)
        self.core.log.high_watermark = self.high_watermark
        self.drop_connections()

    # --- the end ------------------------------------------------------------------------------

    def drain(self) -> None:
        """No more faults: the client resends its lowest unacknowledged batch until every batch
        is acknowledged (each round makes progress)."""
        for _ in range(4 * len(self.sizes) + 10):
            self.commit()
            while any(r.error_code != ErrorCode.NONE or r.base_offset + self.sizes[r.batch] <= self.high_watermark
                      for r in self.responses):
                self.receive(0)
            i = self.lowest_unacked()
            if i == len(self.sizes):
                return
            if i == self.created:
                self.send_new()
            else:
                self.in_flight = [i]
            self.deliver(0, duplicate=False)
        raise AssertionError(f"no progress: acked {sorted(self.acked)}")

    def check_log(self) -> None:
        self.commit()
        values, offsets = [], []
        position = self.core.log_start_offset
        while position < self.high_watermark:      # a fetch answers from one segment
            headers = list(iter_batches(self.core.fetch(position, 1 << 30).records))
            assert headers, f"nothing at {position}"
            for header in headers:
                for record in decode_records(header):
                    values.append(record.value)
                    offsets.append(record.offset)
            position = headers[-1].last_offset + 1
        expected = [b"%d:%d" % (i, j) for i, size in enumerate(self.sizes) for j in range(size)]
        assert values == expected
        where = dict(zip(values, offsets))
        for i, base_offset in self.acked.items():
            assert [where[b"%d:%d" % (i, j)] for j in range(self.sizes[i])] == \
                list(range(base_offset, base_offset + self.sizes[i]))


TRAFFIC = {"send_new": 10, "deliver": 12, "deliver_twice": 2, "resend": 3, "receive": 10,
           "commit": 6}
FAULTS = ("lose_request", "lose_response", "truncate", "restart_clean", "restart_crash")


def step(world: World, rng, name: str) -> None:
    k = rng.randrange(1 << 16)
    if name == "deliver_twice":          # the network duplicates a request
        world.deliver(k, duplicate=True)
    elif name == "deliver":
        world.deliver(k, duplicate=False)
    elif name.startswith("restart"):
        world.restart(clean=name == "restart_clean")
    elif name in ("send_new", "commit"):
        getattr(world, name)()
    else:
        getattr(world, name)(k)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 4), min_size=10, max_size=40),
       start_seq=st.sampled_from([0, 0, INT32_MAX - 5]),
       fault_weights=st.lists(st.integers(0, 3), min_size=len(FAULTS), max_size=len(FAULTS)),
       rng=st.randoms(use_true_random=False),
       steps=st.integers(20, 400))
def test_one_producers_records_land_once_each_in_send_order(sizes, start_seq, fault_weights, rng, steps):
    """A seeded schedule of ``steps`` steps: mostly traffic, each kind of fault at a rate of its
    own (0 to 3 in 46)."""
    names = list(TRAFFIC) + list(FAULTS)
    weights = list(TRAFFIC.values()) + fault_weights
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        world = World(Path(tmp), sizes, start_seq)
        for name in rng.choices(names, weights, k=steps):
            step(world, rng, name)
        world.drain()
        world.check_log()
        world.core.close()
