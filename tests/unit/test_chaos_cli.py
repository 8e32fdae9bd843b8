"""`kray chaos` picks its schedule by its options: --hosts runs the network schedule on hosts of
their own (and says why it can't, without starting anything), else the process schedule on
local nodes with the process faults by default."""
from cluster import cli


def test_without_hosts_the_process_schedule_runs_with_its_own_default_faults(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "cmd_start", lambda args: seen.setdefault("faults", args.faults) and 0)
    monkeypatch.setattr(cli, "cmd_chaos_hosts", lambda args: seen.setdefault("hosts", True) and 0)
    cli.main(["chaos", "--seed", "3"])
    assert seen == {"faults": "kill,kill-graceful,pause"}


def test_with_hosts_the_network_schedule_runs(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "cmd_start", lambda args: seen.setdefault("start", True) and 0)
    monkeypatch.setattr(cli, "cmd_chaos_hosts", lambda args: seen.setdefault("hosts", (args.hosts, args.seed)) and 0)
    cli.main(["chaos", "--hosts", "3", "--seed", "5", "--duration", "60"])
    assert seen == {"hosts": (3, 5)}


def test_hosts_that_cannot_be_made_or_a_bad_fault_stop_before_anything_starts(monkeypatch, capsys):
    import cluster.hosts.net as net
    monkeypatch.setattr(net, "unavailable_reason", lambda: "hosts are network namespaces: run as root (CI does)")
    assert cli.main(["chaos", "--hosts", "3", "--seed", "1"]) == 2
    assert "run as root" in capsys.readouterr().err
    monkeypatch.setattr(net, "unavailable_reason", lambda: None)
    monkeypatch.setattr(net, "filter_unavailable_reason", lambda: None)
    assert cli.main(["chaos", "--hosts", "3", "--seed", "1", "--faults", "isolate,jitter"]) == 2
    assert "must be among" in capsys.readouterr().err


def test_kray_chaos_and_start_nodes_listen_on_9092_and_up_as_their_help_says(monkeypatch, tmp_path):
    """`--port`'s help: default 9092; with --nodes the first broker's, the others count up (issue 37:
    kray chaos listened on random ports)."""
    import cluster.local
    seen = []

    class Cluster:
        def __init__(self, nodes, **kwargs):
            seen.append(kwargs["port"])

        def start(self):
            raise cluster.local.CannotListen("stop here")

        def stop(self):
            pass
    monkeypatch.setattr(cluster.local, "LocalCluster", Cluster)
    assert cli.main(["chaos", "--seed", "3", "--data-dir", str(tmp_path)]) == 1
    assert cli.main(["start", "--nodes", "3", "--data-dir", str(tmp_path)]) == 1
    assert cli.main(["start", "--nodes", "3", "--port", "0", "--data-dir", str(tmp_path)]) == 1
    assert seen == [9092, 9092, 0]
