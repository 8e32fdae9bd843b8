"""The hosts harness's plan (cluster/hosts/plan.py): addresses from a range this machine does not
use, names Linux accepts and a crashed run can be found by, and the commands that make, cut and
remove hosts."""
import ipaddress
import json

import pytest

from cluster.hosts import plan as planner


def nets(*texts):
    return [ipaddress.ip_network(t) for t in texts]


def test_hosts_get_addresses_of_the_first_free_slice_of_the_benchmark_range():
    p = planner.plan(3, "1a2b", nets("192.0.2.0/24", "198.18.0.0/24", "198.18.1.7/32"))
    assert str(p.subnet) == "198.18.2.0/24"
    assert [h.address for h in p.hosts] == ["198.18.2.1", "198.18.2.2", "198.18.2.3"]
    assert p.bridge_address == "198.18.2.254"
    assert p.host(2) == p.host("h2") == p.host("198.18.2.2")
    with pytest.raises(KeyError, match="h1, h2, h3"):
        p.host("h4")


def test_a_machine_route_covering_the_range_pushes_the_hosts_out_of_it_or_refuses():
    with pytest.raises(planner.PlanError, match="clean"):
        planner.plan(3, "1a2b", nets("198.16.0.0/12"))


def test_every_name_starts_with_the_run_prefix_and_fits_linux():
    p = planner.plan(99, "beef", [])
    names = [p.bridge] + [n for h in p.hosts for n in (h.netns, h.veth, h.veth_peer)]
    assert all(n.startswith("krhbeef-") and len(n) <= 15 for n in names)
    links = [p.bridge] + [n for h in p.hosts for n in (h.veth, h.veth_peer)]
    assert len(set(links)) == len(links)
    assert {planner.run_id_of(n) for n in names} == {"beef"}
    with pytest.raises(planner.PlanError):
        planner.plan(3, "NOT-HEX", [])
    with pytest.raises(planner.PlanError):
        planner.plan(0, "1a2b", [])


def test_used_networks_come_from_ip_json_and_skip_the_default_route():
    addr = json.dumps([{"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8},
                                                       {"family": "inet6", "local": "::1", "prefixlen": 128}]},
                       {"ifname": "eth0", "addr_info": [{"family": "inet", "local": "198.18.0.9", "prefixlen": 24}]}])
    route = json.dumps([{"dst": "default", "gateway": "192.0.2.1"}, {"dst": "198.18.1.0/24"},
                        {"dst": "10.1.2.3"}, {"dst": "fe80::/64"}])
    used = planner.used_networks(addr, route)
    assert set(used) == set(nets("127.0.0.0/8", "198.18.0.0/24", "198.18.1.0/24", "10.1.2.3/32"))
    assert str(planner.choose_subnet(used)) == "198.18.2.0/24"


def test_setup_moves_each_veth_end_into_its_host_and_teardown_removes_everything():
    p = planner.plan(2, "00aa", [])
    setup = p.setup_commands()
    assert setup[0] == ["link", "add", "krh00aa-br", "type", "bridge"]
    h2 = p.host(2)
    assert ["link", "set", h2.veth_peer, "netns", h2.netns] in setup
    assert ["-n", h2.netns, "addr", "add", "198.18.0.2/24", "dev", "eth0"] in setup
    assert ["-n", h2.netns, "link", "set", "lo", "up"] in setup
    assert not any("default" in c for c in setup)  # no host has a way off the machine
    teardown = p.teardown_commands()
    assert ["netns", "delete", h2.netns] in teardown and teardown[-1] == ["link", "delete", "krh00aa-br"]


def test_leftovers_are_the_names_of_runs_whose_owner_is_gone():
    netns = ["krh1111-h1", "krh2222-h1", "other", "krhprobe0001"]
    links = ["eth0", "krh1111-br", "krh1111-h1", "krh2222-br", "docker0"]
    assert planner.leftovers(netns, links, live_runs={"2222"}) == (["krh1111-h1"], ["krh1111-br", "krh1111-h1"])


def test_isolating_a_host_downs_its_bridge_port_and_netem_shapes_both_directions():
    h = planner.plan(3, "1a2b", []).host(3)
    assert planner.isolate_commands(h) == [["link", "set", "krh1a2b-h3", "down"]]
    assert planner.heal_commands(h) == [["link", "set", "krh1a2b-h3", "up"]]
    cmds = planner.netem_commands(h, delay_ms=20, jitter_ms=5, loss_percent=1.5)
    assert cmds == [["qdisc", "replace", "dev", "krh1a2b-h3", "root", "netem", "delay", "20ms", "5ms", "loss", "1.5%"],
                    ["-n", "krh1a2b-h3", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", "20ms", "5ms",
                     "loss", "1.5%"]]
    with pytest.raises(planner.PlanError):
        planner.netem_commands(h, delay_ms=5, jitter_ms=20)
    with pytest.raises(planner.PlanError):
        planner.netem_commands(h)


def test_cutting_two_hosts_apart_routes_their_packets_to_an_address_no_one_answers():
    p = planner.plan(3, "1a2b", [])
    assert p.nowhere == "198.18.0.253" and p.nowhere not in {h.address for h in p.hosts} | {p.bridge_address}
    h1, h3 = p.host(1), p.host(3)
    assert planner.cut_commands(p, h1, h3) == [
        ["-n", h1.netns, "route", "replace", "198.18.0.3/32", "via", "198.18.0.253", "dev", "eth0"],
        ["-n", h3.netns, "route", "replace", "198.18.0.1/32", "via", "198.18.0.253", "dev", "eth0"]]
    assert planner.cut_commands(p, h1, h3, both_ways=False) == planner.cut_commands(p, h1, h3)[:1]
    assert planner.uncut_commands(h1, h3) == [["-n", h1.netns, "route", "del", "198.18.0.3/32"],
                                              ["-n", h3.netns, "route", "del", "198.18.0.1/32"]]


def test_loss_rules_live_in_chains_of_their_own_on_the_hosts_link_and_heal_by_a_flush():
    p = planner.plan(3, "1a2b", [])
    h2, h3 = p.host(2), p.host(3)
    assert planner.filter_setup_commands(h2) == [
        ["-w", "-N", "KRAY-FAULTS-IN"], ["-w", "-N", "KRAY-FAULTS-OUT"],
        ["-w", "-A", "INPUT", "-i", "eth0", "-j", "KRAY-FAULTS-IN"],
        ["-w", "-A", "OUTPUT", "-o", "eth0", "-j", "KRAY-FAULTS-OUT"]]
    stat = ["-m", "statistic", "--mode", "random", "--probability", "0.2000", "-j", "DROP"]
    assert planner.link_loss_commands(h2, 0.2) == [["-w", "-A", "KRAY-FAULTS-IN"] + stat,
                                                   ["-w", "-A", "KRAY-FAULTS-OUT"] + stat]
    # one way: h3 -> h2 lost at h2's door, h2 -> h3 untouched
    assert planner.one_way_loss_commands(h2, h3) == [["-w", "-A", "KRAY-FAULTS-IN", "-s", "198.18.0.3", "-j", "DROP"]]
    assert planner.one_way_loss_commands(h2, h3, 0.5)[0][-7:] == ["-m", "statistic", "--mode", "random",
                                                                  "--probability", "0.5000", "-j", "DROP"][-7:]
    assert planner.filter_clear_commands() == [["-w", "-F", "KRAY-FAULTS-IN"], ["-w", "-F", "KRAY-FAULTS-OUT"]]
    for bad in (0, -0.1, 1.5):
        with pytest.raises(planner.PlanError):
            planner.link_loss_commands(h2, bad)


def test_a_split_host_loses_every_other_host_both_ways_but_keeps_the_clients():
    p = planner.plan(3, "1a2b", [])
    h1, h2, h3 = p.hosts
    cmds = planner.split_commands(p, h2)
    assert cmds == planner.cut_commands(p, h2, h1) + planner.cut_commands(p, h2, h3)
    assert not any(p.bridge_address in c for c in cmds)  # the clients' address is never cut
    assert planner.unsplit_commands(p, h2) == planner.uncut_commands(h2, h1) + planner.uncut_commands(h2, h3)


def test_degrade_asks_for_a_delay_or_a_loss_with_jitter_within_the_delay():
    planner.check_degrade(20, 5, 0)
    planner.check_degrade(0, 0, 1.5)
    for bad in ((5, 20, 0), (0, 0, 0), (-1, 0, 0), (10, 0, 101)):
        with pytest.raises(planner.PlanError):
            planner.check_degrade(*bad)


def test_the_delay_relay_queues_a_hosts_packets_where_they_are_received_once_per_direction():
    p = planner.plan(3, "1a2b", [])
    h1, h2, h3 = p.hosts
    q = planner.delay_queue(p, h2)
    assert q == planner.DELAY_QUEUE_BASE + (0x1a2b % planner.DELAY_QUEUE_BLOCKS) * planner.DELAY_QUEUES_PER_RUN + 2 < 65536
    assert len({planner.delay_queue(p, h) for h in p.hosts}) == 3
    tail = ["-j", "NFQUEUE", "--queue-num", str(q), "--queue-bypass"]
    assert planner.delay_rules(p, h2) == [
        (h2.netns, ["-t", "mangle", "PREROUTING", "-i", "eth0"] + tail),                    # into h2
        (h1.netns, ["-t", "raw", "PREROUTING", "-i", "eth0", "-s", "198.18.0.2"] + tail),   # h2 -> h1
        (h3.netns, ["-t", "raw", "PREROUTING", "-i", "eth0", "-s", "198.18.0.2"] + tail),   # h2 -> h3
        (None, ["-t", "raw", "PREROUTING", "-i", "krh1a2b-br", "-s", "198.18.0.2", "-d", "198.18.0.254"] + tail)]
    # never a sender's OUTPUT (a held packet would count against its socket's TCP small queues)
    assert not any("OUTPUT" in spec for _, spec in planner.delay_rules(p, h2))
    add = planner.delay_rule_commands(p, h2, add=True)
    assert add[0] == (h2.netns, ["-w", "-t", "mangle", "-A", "PREROUTING", "-i", "eth0"] + tail)
    delete = planner.delay_rule_commands(p, h2, add=False)
    assert [args[3] for _, args in delete] == ["-D"] * 4 and [n for n, _ in delete] == [n for n, _ in add]


def test_the_relay_binds_its_queue_in_its_host_the_other_hosts_and_the_clients_namespace():
    p = planner.plan(3, "1a2b", [])
    argv = planner.relay_command("py", p, p.host(1), delay_ms=20, jitter_ms=5, loss_percent=0.5,
                                 root_netns="/proc/42/ns/net", stats="/tmp/x.json", seed=7)
    assert argv == ["py", "-m", "cluster.hosts.delay_relay", "--queue", str(planner.delay_queue(p, p.host(1))),
                    "--delay-ms", "20", "--jitter-ms", "5", "--loss-percent", "0.5", "--stats", "/tmp/x.json",
                    "--netns", "/run/netns/krh1a2b-h2", "--netns", "/run/netns/krh1a2b-h3",
                    "--netns", "/proc/42/ns/net", "--seed", "7"]
    with pytest.raises(planner.PlanError):
        planner.relay_command("py", p, p.host(1), delay_ms=1, jitter_ms=2, loss_percent=0, root_netns="/x", stats="/y")


def test_a_crashed_runs_delay_rules_in_the_root_namespace_are_found_by_its_bridge():
    raw = "\n".join([
        "-P PREROUTING ACCEPT",
        "-A PREROUTING -s 198.18.0.2/32 -d 198.18.0.254/32 -i krh1111-br -j NFQUEUE --queue-num 10018 --queue-bypass",
        "-A PREROUTING -s 198.18.1.2/32 -d 198.18.1.254/32 -i krh2222-br -j NFQUEUE --queue-num 10034 --queue-bypass",
        "-A PREROUTING -i docker0 -j NFQUEUE --queue-num 3"])
    assert planner.leftover_root_delay_rules(raw, {"2222"}) == [
        ["-w", "-t", "raw", "-D", "PREROUTING", "-s", "198.18.0.2/32", "-d", "198.18.0.254/32", "-i", "krh1111-br",
         "-j", "NFQUEUE", "--queue-num", "10018", "--queue-bypass"]]
