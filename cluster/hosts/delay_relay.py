"""Latency and loss on a host's link where the kernel has no `tc netem`: packets that iptables
rules send to an NFQUEUE are held here, in userspace, for delay ± jitter, then let go (or
dropped, for loss). Pure Python over netlink sockets (nfnetlink_queue): no library, no payload
copies (the kernel keeps each packet and sends up its id and first PEEK_BYTES bytes, enough for
its flow), GSO packets kept whole.

    python -m cluster.hosts.delay_relay --queue 41234 --delay-ms 20 --jitter-ms 5 --loss-percent 1 \
        --netns /run/netns/krh1a2b-h1 --netns /proc/4242/ns/net --stats /tmp/krh1a2b/h2-delay.json

One relay per degraded host, started inside that host's namespace (so the harness's cleanup
kills it with the host); it binds its queue there and in every namespace given with --netns (the
other hosts', the clients'): cluster/hosts/plan.py's delay_rules say which packets each one
queues. Every queue point is an IP receive hook (PREROUTING), never a sender's OUTPUT: the
kernel has orphaned a packet from its socket by then, so a held packet does not count against the
sender's TCP Small Queues budget (holding packets at OUTPUT throttled a bulk TCP sender to
0.3 MB/s; netem orphans the packets it holds for the same reason).

What it applies, per packet: a delay drawn uniformly from [delay - jitter, delay + jitter]
(netem's default distribution), never releasing a packet before an earlier one of its flow
(addresses, protocol, ports): a link with jitter does not reorder one TCP connection, and
netem's reordering would measure TCP's reordering recovery rather than the latency. So under load
a flow's packets lean to the upper end of the range; the stats file records the delays applied.

The netlink encoding and the release rule are pure functions (tests/unit/test_delay_relay.py);
`main` is the shell.
"""
from __future__ import annotations

import argparse
import ctypes
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import time
from dataclasses import dataclass, field

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD = 1, 2, 10
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_GSO = 4
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
SO_RCVBUFFORCE, SOL_NETLINK, NETLINK_NO_ENOBUFS = 33, 270, 5
CLONE_NEWNET = 0x40000000

PEEK_BYTES = 64                 # of each packet copied up: IPv4 header (up to 60 bytes) and ports
QUEUE_MAXLEN = 20_000           # packets the kernel holds for us at most; beyond it drops them
RCVBUF_BYTES = 8 * 1024 * 1024  # the netlink socket's buffer (packet notices waiting to be read)
RECV_BYTES = 256 * 1024         # read at once
FLOWS_MAX = 65_536              # flows remembered for ordering; forgotten once their last packet left
STATS_EVERY_S = 1.0


# ---- netlink, pure ----------------------------------------------------------------------------
def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def message(msg: int, queue: int, attrs: bytes, *, seq: int = 0, flags: int = NLM_F_REQUEST, family: int = 0) -> bytes:
    """One nfnetlink_queue message: netlink header, nfgenmsg (family, version 0, queue), attributes."""
    body = struct.pack("=BBH", family, 0, socket.htons(queue)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq, 0) + body


def bind_messages(queue: int) -> list[bytes]:
    """Bind `queue`, copy PEEK_BYTES of each packet, hold up to QUEUE_MAXLEN, keep GSO packets whole."""
    return [message(NFQNL_MSG_CONFIG, queue, _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)),
                    seq=1, flags=NLM_F_REQUEST | NLM_F_ACK),
            message(NFQNL_MSG_CONFIG, queue,
                    _attr(NFQA_CFG_PARAMS, struct.pack("!IB", PEEK_BYTES, NFQNL_COPY_PACKET))
                    + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))
                    + _attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO))
                    + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO)),
                    seq=2, flags=NLM_F_REQUEST | NLM_F_ACK)]


def verdict_message(queue: int, packet_id: int, verdict: int) -> bytes:
    return message(NFQNL_MSG_VERDICT, queue, _attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id)))


@dataclass(frozen=True)
class Packet:
    queue: int
    packet_id: int
    hook: int
    peek: bytes  # the packet's first bytes (PEEK_BYTES at most)

    def flow(self) -> tuple:
        """(hook, addresses, protocol, ports) of an IPv4 packet; its whole peek otherwise."""
        p = self.peek
        if len(p) >= 20 and p[0] >> 4 == 4:
            ihl = (p[0] & 0x0F) * 4
            return self.hook, p[12:20], p[9], p[ihl:ihl + 4]
        return self.hook, p


def parse(data: bytes) -> tuple[list[Packet], list[int]]:
    """The packet notices in `data` (one recv), and the error codes of any netlink errors/acks
    (0: an ack)."""
    packets, errors = [], []
    offset = 0
    while offset + 16 <= len(data):
        length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
        if length < 16:
            break
        if kind == NLMSG_ERROR:
            errors.append(-struct.unpack_from("=i", data, offset + 16)[0])
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            queue = socket.ntohs(struct.unpack_from("=H", data, offset + 18)[0])
            packet_id = hook = None
            peek = b""
            a = offset + 20
            end = offset + length
            while a + 4 <= end:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                akind &= 0x7FFF
                if akind == NFQA_PACKET_HDR:
                    packet_id, _proto, hook = struct.unpack_from("!IHB", data, a + 4)
                elif akind == NFQA_PAYLOAD:
                    peek = bytes(data[a + 4:a + alen])
                a += (alen + 3) & ~3
            if packet_id is not None:
                packets.append(Packet(queue, packet_id, hook, peek))
        offset += (length + 3) & ~3
    return packets, errors


# ---- what to do with each packet, pure ----------------------------------------------------------
@dataclass
class Shaper:
    """Each packet's release time: now + U[delay - jitter, delay + jitter], not before the previous
    packet of its flow; or None (dropped) with probability loss."""
    delay_s: float
    jitter_s: float
    loss: float                        # 0..1
    rng: random.Random = field(default_factory=random.Random)
    last: dict = field(default_factory=dict)  # flow -> its latest release time

    def release_at(self, now: float, flow) -> float | None:
        if self.loss and self.rng.random() < self.loss:
            return None
        due = now + self.delay_s + (self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0)
        prev = self.last.get(flow)
        if prev is not None and prev > due:
            due = prev
        self.last[flow] = due
        if len(self.last) > FLOWS_MAX:
            self.last = {f: t for f, t in self.last.items() if t > now}
        return due


def percentile(histogram: dict, q: float) -> float | None:
    """The `q` quantile (0..1) of a stats file's histogram ({"whole ms": packets}), in whole ms."""
    items = sorted((int(k), v) for k, v in histogram.items())
    total = sum(v for _, v in items)
    if not total:
        return None
    seen = 0
    for k, v in items:
        seen += v
        if seen >= q * total:
            return k
    return items[-1][0]


# ---- the shell --------------------------------------------------------------------------------
class Stats:
    """Delays actually applied (receipt to verdict, in this process), as a histogram of ms."""

    def __init__(self, path: str | None):
        self.path = path
        self.received = self.dropped = 0
        self.held_ms: dict[int, int] = {}  # whole ms -> packets
        self.late_ms: dict[int, int] = {}  # how far past its release time a verdict went (whole ms) -> packets
        self.late_ms_max = 0.0
        self.errors: dict[int, int] = {}
        self.scheduling = "normal"

    def held(self, held_s: float, late_s: float) -> None:
        k = int(held_s * 1000)
        self.held_ms[k] = self.held_ms.get(k, 0) + 1
        k = int(late_s * 1000)
        self.late_ms[k] = self.late_ms.get(k, 0) + 1
        self.late_ms_max = max(self.late_ms_max, late_s * 1000)

    def write(self, args) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"delay_ms": args.delay_ms, "jitter_ms": args.jitter_ms, "loss_percent": args.loss_percent,
                       "scheduling": self.scheduling,
                       "received": self.received, "dropped": self.dropped, "late_ms_max": round(self.late_ms_max, 3),
                       "netlink_errors": self.errors, "held_ms": {str(k): v for k, v in sorted(self.held_ms.items())},
                       "late_ms": {str(k): v for k, v in sorted(self.late_ms.items())}},
                      f)
        os.replace(tmp, self.path)


def _open_queue(queue: int) -> socket.socket:
    """A netlink socket, in the calling thread's network namespace, bound to NFQUEUE `queue`."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)  # root: beyond rmem_max
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
    sock.bind((0, 0))
    for m in bind_messages(queue):
        sock.send(m)
        _, errors = parse(sock.recv(RECV_BYTES))
        if any(errors):
            sock.close()
            raise OSError(max(errors), f"binding NFQUEUE {queue}: {os.strerror(max(errors))}"
                          + (" (another process holds this queue number)" if max(errors) == 16 else ""))
    try:
        sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)  # an overrun loses notices, not the socket
    except OSError:
        pass
    sock.setblocking(False)
    return sock


def _setns(path_or_fd) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = path_or_fd if isinstance(path_or_fd, int) else os.open(path_or_fd, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path_or_fd}): {os.strerror(err)}")
    finally:
        if not isinstance(path_or_fd, int):
            os.close(fd)


def open_queues(queue: int, netns_paths: list[str]) -> list[socket.socket]:
    """The queue bound here and in each namespace of `netns_paths` (a socket keeps the namespace
    it was made in; this process returns to its own)."""
    socks = [_open_queue(queue)]
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        for path in netns_paths:
            _setns(path)
            try:
                socks.append(_open_queue(queue))
            finally:
                _setns(home)
    except BaseException:
        for s in socks:
            s.close()
        raise
    finally:
        os.close(home)
    return socks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--loss-percent", type=float, default=0.0)
    p.add_argument("--netns", action="append", default=[], help="another network namespace (a path) to bind the queue in")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stats", default=None, help="a JSON file rewritten every second with the delays applied")
    args = p.parse_args(argv)
    if args.delay_ms < 0 or not 0 <= args.jitter_ms <= args.delay_ms or not 0 <= args.loss_percent <= 100:
        p.error("need 0 <= jitter <= delay and 0 <= loss <= 100")
    shaper = Shaper(args.delay_ms / 1000, args.jitter_ms / 1000, args.loss_percent / 100, random.Random(args.seed))
    stats = Stats(args.stats)
    parent = os.getppid()
    try:
        # a link does not wait its turn for a CPU (netem runs in the kernel's softirqs): real-time
        # priority, so a loaded machine delays verdicts less (it blocks in poll() between them)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        stats.scheduling = "SCHED_FIFO 1"
    except (AttributeError, OSError):
        stats.scheduling = "normal"
    try:
        socks = open_queues(args.queue, args.netns)
    except OSError as e:
        print(f"delay_relay: {e}", flush=True)
        return 1

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    print(f"delay_relay: ready: queue {args.queue} in {len(socks)} namespaces: {args.delay_ms:g} ms "
          f"± {args.jitter_ms:g} ms, loss {args.loss_percent:g}%", flush=True)
    held: list[tuple[float, int, int, int, float]] = []  # (release time, n, socket index, packet id, receipt time)
    n = 0
    next_stats = time.monotonic() + STATS_EVERY_S
    poll = select.poll()
    for sock in socks:
        poll.register(sock, select.POLLIN)
    by_fd = {sock.fileno(): i for i, sock in enumerate(socks)}
    while not stopping:
        now = time.monotonic()
        while held and held[0][0] <= now:
            due, _, i, packet_id, got = heapq.heappop(held)
            socks[i].send(verdict_message(args.queue, packet_id, NF_ACCEPT))
            stats.held(now - got, now - due)
        if now >= next_stats:
            stats.write(args)
            next_stats = now + STATS_EVERY_S
            if os.getppid() != parent:  # the harness that started us is gone: so are we
                break
        wait_s = max(0.0, min((held[0][0] - now) if held else STATS_EVERY_S, next_stats - now))
        if 0 < wait_s < 0.001:
            # poll() counts whole milliseconds, rounding up: it would hold each packet ~0.5 ms too long
            time.sleep(wait_s)
            continue
        try:
            ready = poll.poll(int(wait_s * 1000))  # rounded down: the rest, if any, by the sleep above
        except InterruptedError:
            continue
        for fd, _ in ready:
            i = by_fd[fd]
            while True:
                try:
                    data = socks[i].recv(RECV_BYTES)
                except BlockingIOError:
                    break
                except OSError as e:  # ENOBUFS: notices lost (the kernel drops their packets)
                    stats.errors[e.errno] = stats.errors.get(e.errno, 0) + 1
                    continue
                got = time.monotonic()
                packets, errors = parse(data)
                for e in errors:
                    if e:
                        stats.errors[e] = stats.errors.get(e, 0) + 1
                for pkt in packets:
                    stats.received += 1
                    due = shaper.release_at(got, (i, pkt.flow()))
                    if due is None:
                        stats.dropped += 1
                        socks[i].send(verdict_message(args.queue, pkt.packet_id, NF_DROP))
                    else:
                        n += 1
                        heapq.heappush(held, (due, n, i, pkt.packet_id, got))
    for _, _, i, packet_id, _ in held:  # leaving: let what is held go at once
        socks[i].send(verdict_message(args.queue, packet_id, NF_ACCEPT))
    stats.write(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
