"""The delay relay's pure parts (cluster/hosts/delay_relay.py): nfnetlink_queue messages as the
kernel reads and writes them, and each packet's release time (delay ± jitter, a flow never
reordered, loss)."""
import random
import socket
import struct

from cluster.hosts import delay_relay as relay


def test_bind_and_verdict_messages_are_nfnetlink_queue_requests_for_the_queue():
    bind, params = relay.bind_messages(300)
    for m in (bind, params):
        length, kind, flags, _seq, _pid = struct.unpack_from("=IHHII", m)
        assert length == len(m) and length % 4 == 0
        assert kind == (3 << 8) | relay.NFQNL_MSG_CONFIG and flags & relay.NLM_F_ACK
        assert struct.unpack_from("!H", m, 18)[0] == 300       # res_id: the queue, big-endian
    assert bind[20:28] == struct.pack("=HH", 8, relay.NFQA_CFG_CMD) + bytes([relay.NFQNL_CFG_CMD_BIND, 0, 0, 0])
    # copy PEEK_BYTES of each packet, keep GSO packets whole (flag and mask)
    assert struct.pack("!IB", relay.PEEK_BYTES, relay.NFQNL_COPY_PACKET) in params
    assert params.count(struct.pack("!I", relay.NFQA_CFG_F_GSO)) == 2
    v = relay.verdict_message(300, 0xABCDEF, relay.NF_ACCEPT)
    assert struct.unpack_from("=IHH", v) == (len(v), (3 << 8) | relay.NFQNL_MSG_VERDICT, relay.NLM_F_REQUEST)
    assert v[20:32] == struct.pack("=HH", 12, relay.NFQA_VERDICT_HDR) + struct.pack("!II", 1, 0xABCDEF)


def _packet_notice(queue, packet_id, hook, payload):
    def attr(kind, data):
        return struct.pack("=HH", 4 + len(data), kind) + data + b"\0" * (-len(data) % 4)
    body = struct.pack("=BBH", socket.AF_INET, 0, socket.htons(queue)) + \
        attr(relay.NFQA_PACKET_HDR, struct.pack("!IHB", packet_id, 0x0800, hook) + b"\0") + \
        attr(relay.NFQA_PAYLOAD, payload)
    return struct.pack("=IHHII", 16 + len(body), (3 << 8) | relay.NFQNL_MSG_PACKET, 0, 0, 0) + body


def test_packet_notices_and_acks_are_read_from_one_receive():
    ip = bytes([0x45, 0, 0, 60, 0, 0, 0, 0, 64, 6, 0, 0]) + bytes([198, 18, 0, 1, 198, 18, 0, 2]) + \
        struct.pack("!HH", 40000, 9092) + b"rest"
    ack = struct.pack("=IHHII", 36, relay.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", 0) + b"\0" * 16
    data = _packet_notice(7, 41, 0, ip) + ack + _packet_notice(7, 42, 0, ip[:10])
    packets, errors = relay.parse(data)
    assert [(p.queue, p.packet_id, p.hook) for p in packets] == [(7, 41, 0), (7, 42, 0)]
    assert errors == [0]
    assert packets[0].flow() == (0, bytes([198, 18, 0, 1, 198, 18, 0, 2]), 6, struct.pack("!HH", 40000, 9092))
    assert packets[1].flow() == (0, ip[:10])   # too short for an IPv4 header: the bytes themselves


def test_each_packet_is_held_delay_plus_or_minus_jitter_and_a_flow_is_never_reordered():
    s = relay.Shaper(0.020, 0.005, 0.0, random.Random(1))
    lone = [s.release_at(10.0 + i, ("flow", i)) - (10.0 + i) for i in range(2000)]   # a flow each
    assert 0.015 <= min(lone) < 0.0152 and 0.0248 < max(lone) <= 0.025
    assert abs(sum(lone) / len(lone) - 0.020) < 0.0005
    busy = [s.release_at(20.0 + i * 0.0001, "one flow") for i in range(2000)]     # 10,000 packets/s
    assert busy == sorted(busy)
    assert all(0.015 <= t - (20.0 + i * 0.0001) <= 0.025 + 1e-9 for i, t in enumerate(busy))


def test_loss_drops_that_share_of_packets():
    s = relay.Shaper(0.0, 0.0, 0.25, random.Random(2))
    dropped = sum(s.release_at(1.0, i) is None for i in range(4000))
    assert 900 < dropped < 1100
    assert relay.Shaper(0.01, 0, 0.0).release_at(5.0, "f") == 5.01


def test_percentiles_of_a_stats_histogram():
    hist = {"0": 90, "1": 8, "30": 2}
    assert relay.percentile(hist, 0.5) == 0 and relay.percentile(hist, 0.95) == 1
    assert relay.percentile(hist, 0.99) == 30 and relay.percentile(hist, 1.0) == 30
    assert relay.percentile({}, 0.5) is None
