"""`kray`: the command line, shaped like Kafka's tools.

  kray start [--port 9092] [--data-dir DIR] [--config FILE] [--override key=value ...]
             [--nodes N | --address auto|HOST:PORT]
  kray chaos --seed S [--nodes 3] [--duration 300] [--faults kill,kill-graceful,pause] [start's options]
  kray chaos --hosts 3 --seed S [--duration 120] [--faults isolate,split,one-way,loss[,latency]] [--json F] [--markdown F]
  kray topics (--create|--list|--describe|--delete) --bootstrap-server HOST:PORT [--topic T] ...
  kray acls (--add|--remove|--list) --bootstrap-server HOST:PORT [--allow-principal User:alice] ...
  kray share-workers --bootstrap-server HOST:PORT --group G --topic T --handler module:function [--max-workers N]
  (every tool: --command-config client.properties for a secured listener)
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from actors.config_schema import with_listener
from cluster.config import DEFAULT_LOCAL_CONFIG, load_broker_config
from cluster.console_log import ConsoleErrors, follow_errors
from cluster.process_tree import adopt_orphans, descendants, end_descendants
from cluster.start_errors import CannotListen, DeployTimedOut, InterBrokerLoginFailed, RayDidNotStart, RayUnreachable
from cluster.stop_signals import StopSignals

DEFAULT_PORT = 9092  # the first broker's, as Kafka's; with --nodes the others count up from it


def cmd_start(args) -> int:
    """`kray start` (and `kray chaos`). Run as the `kray` command (args.own_process), it owns its
    process: a Ctrl-C or SIGTERM stops it at any moment, every process it or Ray started is ended
    before it exits, and it exits without running Ray's exit hooks (all is stopped by then)."""
    own_process = getattr(args, "own_process", False)
    signals = StopSignals(give_up=lambda why: _end_everything_and_exit(why, 128 + (signals.signum or signal.SIGINT)))
    if own_process:
        signals.install()  # first: a Ctrl-C or SIGTERM from here on stops Kray, start-up included
        adopt_orphans()  # Ray's processes that outlive their parents come to this process, to be ended
    try:
        status = _start_and_serve(args, signals)
    except KeyboardInterrupt:  # before anything started (reading the config)
        status = 128 + (signals.signum or signal.SIGINT)
    if own_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _start_and_serve(args, signals: StopSignals) -> int:
    config_path = Path(args.config) if args.config else (DEFAULT_LOCAL_CONFIG if DEFAULT_LOCAL_CONFIG.exists() else None)
    overrides = list(args.override or [])
    if args.data_dir is not None:
        overrides.append(f"log.dirs={args.data_dir}")
    notes: list[str] = []
    try:
        config = with_listener(load_broker_config(config_path, overrides, notes=notes), args.host, args.port)
        from actors.security.settings import security_settings
        security_settings(config)  # listeners, TLS files and SASL users: refuse a bad config before starting
    except (ValueError, OSError) as e:
        print(f"kray start: {e}", file=sys.stderr)
        return 2
    for line in notes:  # (Kafka configs Kray does not use)
        print(f"kray start: {line}", file=sys.stderr, flush=True)
    if args.nodes and args.address:
        print("kray start: --nodes starts a Ray cluster of its own; --address joins one: pick one", file=sys.stderr)
        return 2
    from actors import CONSOLE_ERRORS_ENV, LOG_DIR_ENV, LOG_LEVEL_ENV, LOG_LEVELS, SERVER_LOG
    log_dir = Path(args.log_dir or Path(config["log.dirs"].split(",")[0]) / "logs").resolve()
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"kray start: cannot make the log directory {log_dir}: {e}; pick another with --log-dir", file=sys.stderr)
        return 2
    if args.log_level.upper() not in LOG_LEVELS:
        print(f"kray start: --log-level {args.log_level}: one of {', '.join(LOG_LEVELS)}", file=sys.stderr)
        return 2
    # the actors' processes inherit these through the Ray that kray start starts (on a Ray cluster
    # joined with --address, the actors log into each node's Ray session directory only)
    if getattr(args, "own_process", False):  # (not into the environment of a Python caller, a test)
        os.environ[LOG_DIR_ENV], os.environ[LOG_LEVEL_ENV] = str(log_dir), args.log_level.upper()
        os.environ[CONSOLE_ERRORS_ENV] = "1"
    console_errors = ConsoleErrors(lambda line: print(line, file=sys.stderr, flush=True))
    from cluster.local import LocalBroker, LocalCluster
    if getattr(args, "own_process", False):
        signals.install()  # (again: importing Ray must not have replaced Kray's handlers)
        _ray_messages_into(log_dir / RAY_MESSAGES_LOG, console_errors)

    stop = signals.requested
    if args.nodes:
        broker = LocalCluster(args.nodes, data_dir=config["log.dirs"], config_path=config_path,
                              overrides={k: v for k, v in (o.split("=", 1) for o in overrides)},
                              port=args.port if args.port is not None else DEFAULT_PORT,
                              host=args.host or "127.0.0.1")
        what = f"{args.nodes} broker nodes on this machine"
    else:
        broker = LocalBroker(config, address=args.address, trim_ray=True)
        what = f"brokers on every node of the Ray cluster at {args.address}" if args.address else "a broker"
    print(f"Starting Kray: {what} (data in {Path(config['log.dirs']).resolve()}) ...", flush=True)
    broker.progress = lambda line: print(f"kray start: {line}", flush=True)  # what the deploy waits for
    status = 0
    try:
        bootstrap = broker.start()
        signals.serving()
        if getattr(broker, "attached", False):
            print("kray start: Kray was running on this Ray cluster already (the kray start that deployed it was "
                  "lost, e.g. with the Ray head's host): this one took its controllers and brokers over as they "
                  "are; Ctrl-C stops them", flush=True)
        print(f"Kray is ready: bootstrap={bootstrap}", flush=True)
        ray_logs = _link_ray_logs(log_dir)
        print(f"Logs: {log_dir / SERVER_LOG} (Kray's actors, at {args.log_level.upper()})"
              + (f", {ray_logs} (Ray's)" if ray_logs else ""), flush=True)
        follow_errors(log_dir / SERVER_LOG, console_errors.say, stop, console_errors)
        for line in getattr(broker, "notes", ()):
            print(f"kray start: {line}", file=sys.stderr if line.startswith("warning") else sys.stdout, flush=True)
        if args.address:  # brokers on hosts of their own: network cuts are theirs to heal from
            from actors.tcp_backoff import host_advice
            if advice := host_advice():
                print(f"kray start: {advice}", file=sys.stderr, flush=True)
        broker.report_broker_events(lambda line: print(line, flush=True))  # broker N lost / fenced / back
        if args.nodes:  # kray broker --kill/--restart/--pause/--resume N, from another terminal
            from cluster import broker_control
            broker_control.serve(broker, config["log.dirs"], stop)
        if args.command == "chaos":
            from cluster.chaos import Stopped
            try:
                broker.chaos(args.seed, args.duration, stop=stop, faults=tuple(args.faults.split(",")),
                             mean_gap_s=args.mean_gap, max_down=args.max_down)
                print(f"The schedule is done; Kray keeps serving at {bootstrap}: Ctrl-C stops it", flush=True)
            except Stopped:
                pass
            except ValueError as e:  # a schedule that can't be made: say so, stop the cluster
                print(f"kray chaos: {e}", file=sys.stderr)
                return 2
        problems_every_s, waited_s = 5.0, 0.0  # a Ray call and ray.nodes(): not too often
        while not stop.wait(0.5):
            waited_s += 0.5
            if waited_s >= problems_every_s and hasattr(broker, "listen_problems"):
                waited_s = 0.0
                for line in broker.listen_problems():  # a node that joined later and can't listen
                    print(f"kray start: {line}", file=sys.stderr, flush=True)
        signals.stopping()
        print(f"Stopping Kray ({signals.name}) ...", flush=True)
    except KeyboardInterrupt:
        signals.stopping()
        print(f"Stopping Kray before it was ready ({signals.name}) ...", flush=True)
        status = 128 + (signals.signum or signal.SIGINT)
    except (RayUnreachable, RayDidNotStart, CannotListen, InterBrokerLoginFailed, DeployTimedOut) as e:
        print(f"kray start: {e}", file=sys.stderr)
        status = 1
    except OSError as e:
        print(f"kray start: cannot listen: {e}; pick another port with --port", file=sys.stderr)
        status = 1
    finally:
        _stop(broker, signals, end_the_rest=getattr(args, "own_process", False))
    return status


RAY_MESSAGES_LOG = "ray-messages.log"


def _ray_messages_into(path: Path, console_errors: ConsoleErrors) -> None:
    """What Ray's driver would print on kray start's console (its GCS's error messages: "(raylet)
    The node ... has been marked dead ...", in colour even when redirected) goes into `path`
    instead: kray start says what matters to a Kray user in its own words (broker N lost, back).
    The actors' errors that come this way are said on the console, once each (console_log.py)."""
    import ray._private.worker as ray_worker

    def into_file(data, ignore_prefix=False):
        lines = [line for line in data.get("lines", ()) if not console_errors.from_ray(line)]
        try:
            with open(path, "a", encoding="utf-8") as f:
                for line in lines:
                    f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ({data.get('pid', 'ray')}) {line}\n")
        except OSError:
            pass
    ray_worker.print_to_stdstream = into_file


def _link_ray_logs(log_dir: Path) -> Path | None:
    """log_dir/ray: a link to this Ray session's log directory (Ray's own processes' and the
    actors' stdout/stderr files); None where there is none here."""
    try:
        import ray._private.worker as ray_worker
        target = Path(ray_worker.global_worker.node.get_logs_dir_path())
    except Exception:
        return None
    link = log_dir / "ray"
    try:
        if link.is_symlink():
            link.unlink()
        if not link.exists():
            link.symlink_to(target, target_is_directory=True)
            return link
    except OSError:
        pass
    return target


def _end_everything_and_exit(why: str, status: int) -> None:
    """The stop watcher's last resort (a second signal, or a stop that hangs): end every process
    Kray or Ray started, say so, exit."""
    print(f"kray start: {why}", file=sys.stderr, flush=True)
    end_descendants(grace_s=2.0)
    still = descendants()
    print(f"Kray stopped: every process it started has exited." if not still else
          f"Kray stopped, but processes {still} did not exit: end them with kill -9", flush=True)
    sys.stderr.flush()
    os._exit(status)


def _stop(broker, signals: StopSignals, end_the_rest: bool) -> None:
    """Stop the broker (gracefully, unless a second signal cuts that short), then end whatever
    process Kray or Ray started that is still running, and say so."""
    signals.stopping()
    try:
        broker.stop()
    except KeyboardInterrupt:  # a second signal: (the stop watcher says so, and ends every process)
        pass
    except Exception as e:  # a half-started Ray: what is left is ended below
        print(f"kray start: stopping: {e}", file=sys.stderr, flush=True)
    if not end_the_rest:
        print("Kray stopped.", flush=True)
        return
    while True:
        try:
            left_over = end_descendants()
            break
        except KeyboardInterrupt:  # (already ending everything)
            continue
    still = descendants()
    if still:
        print(f"Kray stopped, but processes {still} did not exit: end them with kill -9", file=sys.stderr, flush=True)
    else:
        ended = f" ({left_over} left behind by Ray were ended)" if left_over else ""
        print(f"Kray stopped: every process it started has exited{ended}.", flush=True)


def cmd_chaos_hosts(args) -> int:
    """`kray chaos --hosts N`: N hosts of their own (network namespaces; root), Kray deployed on
    them with ray start / kray start --address, real clients under a seeded network fault
    schedule, and the Jepsen-style checker's table at the end; everything removed afterwards.
    Exit status 0 when every safety count is 0, 1 when one is not, 2 when it can't run."""
    import json

    from cluster import checker, jepsen, network_chaos
    from cluster.hosts.net import HostsUnavailable, filter_unavailable_reason, unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"kray chaos --hosts: {reason}", file=sys.stderr)
        return 2
    faults = tuple(f for f in (args.faults or ",".join(network_chaos.FAULTS)).split(",") if f)
    if set(faults) & set(network_chaos.NEEDS_IPTABLES) and filter_unavailable_reason():
        print(f"kray chaos --hosts: {filter_unavailable_reason()}: leaving out "
              f"{', '.join(sorted(set(faults) & set(network_chaos.NEEDS_IPTABLES)))}", file=sys.stderr)
        faults = tuple(f for f in faults if f not in network_chaos.NEEDS_IPTABLES)
    try:
        network_chaos.plan(args.seed, list(range(1, args.hosts + 1)), args.duration, faults=faults)
    except ValueError as e:
        print(f"kray chaos: {e}", file=sys.stderr)
        return 2
    from cluster.hosts.deploy import KrayHosts
    stop = threading.Event()
    overrides = tuple(args.override or ()) or ("offsets.topic.num.partitions=6",
                                               "share.coordinator.state.topic.num.partitions=6")
    hosts = KrayHosts(args.hosts, overrides=overrides)
    try:
        print(f"Making {args.hosts} hosts and deploying Kray on them ...", flush=True)
        hosts.start()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        print(f"Kray is ready: bootstrap={hosts.bootstrap} (" + ", ".join(f"{k} {v:.1f}" for k, v in hosts.timings.items())
              + ")", flush=True)
        done = threading.Event()

        def console():  # kray start's console (broker N lost / fenced / back) beside the schedule
            shown = len(hosts.output)
            while not done.wait(0.5):
                for line in hosts.output[shown:]:
                    print(f"  | {line}", flush=True)
                shown = len(hosts.output)
        threading.Thread(target=console, name="kray-start-console", daemon=True).start()
        try:
            report = jepsen.run_checked(hosts, seed=args.seed, duration_s=args.duration, faults=faults,
                                        mean_gap_s=args.mean_gap, say=lambda line: print(line, flush=True), stop=stop)
        finally:
            done.set()
    except HostsUnavailable as e:
        print(f"kray chaos --hosts: {e}", file=sys.stderr)
        return 2
    except network_chaos.Stopped:
        print("kray chaos: stopped", file=sys.stderr)
        return 2
    finally:
        print("Stopping Kray and removing the hosts ...", flush=True)
        hosts.stop()
    title = f"kray chaos --hosts {args.hosts} --seed {args.seed} --duration {args.duration:g}"
    text = checker.markdown(report, title)
    print(text, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": title, "faults": list(faults)} | report.to_json(), indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0 if report.safe else 1


def cmd_chaos(args) -> int:
    if args.hosts:
        return cmd_chaos_hosts(args)
    args.faults = args.faults or "kill,kill-graceful,pause"
    return cmd_start(args)


def build_parser() -> argparse.ArgumentParser:
    """Every `kray` command and option (docs/reference/cli.md is generated from it)."""
    parser = argparse.ArgumentParser(prog="kray", description="Kray: a Kafka-compatible broker on Ray actors")
    sub = parser.add_subparsers(dest="command", required=True)

    broker_options = argparse.ArgumentParser(add_help=False)  # what start and chaos share
    broker_options.add_argument("--port", type=int, help="listener port (default 9092; with --nodes: the first "
                                                         "broker's, the others count up; 0: any free port). With "
                                                         "several listeners: the inter-broker (PLAINTEXT) one's")
    broker_options.add_argument("--host", help="listener host, of every listener (default 127.0.0.1)")
    broker_options.add_argument("--data-dir", help="where logs and metadata live (default ./data)")
    broker_options.add_argument("--config", help="a file of broker configs: Kafka's server.properties format "
                                                 "(key=value lines; a .properties file) or TOML (a .toml file, keys "
                                                 "under [broker]); others by their content (default "
                                                 "configs/local.toml). Kafka's keys and spellings "
                                                 "(log.retention.hours, node.id, log.dir); a Kafka key Kray does not "
                                                 "use is ignored with a note")
    broker_options.add_argument("--log-dir", help="where Kray's actors write server.log (default: logs/ in the "
                                                  "data directory); kray start shows each error in it once, and links "
                                                  "Ray's own logs there as ray/")
    broker_options.add_argument("--log-level", default="INFO", help="the actors' log level: TRACE, DEBUG, INFO "
                                                                    "(default), WARN, ERROR")
    broker_options.add_argument("--override", action="append", metavar="KEY=VALUE",
                                help="set one broker config, e.g. --override num.partitions=3 (repeatable)")

    start = sub.add_parser("start", parents=[broker_options],
                           help="run Kray in the foreground: one broker on an embedded local Ray, "
                                "several (--nodes), or one per node of a Ray cluster (--address)")
    start.add_argument("--nodes", type=int, help="run N broker nodes on this machine (a local multi-node Ray cluster)")
    start.add_argument("--address", help="deploy onto an existing Ray cluster (auto, or the head's HOST:PORT): "
                                         "a broker on every node, nodes that join later included")
    start.set_defaults(func=cmd_start)

    chaos = sub.add_parser("chaos", parents=[broker_options],
                           help="run N broker nodes on this machine and a seeded fault schedule on them "
                                "(kill, pause, restart), printing a timeline: failover tests beside your app")
    chaos.add_argument("--nodes", type=int, default=3, help="broker nodes (default 3)")
    chaos.add_argument("--seed", type=int, required=True, help="the schedule's seed: the same seed replays it")
    chaos.add_argument("--duration", type=float, default=300, help="seconds of faults (default 300); every fault "
                                                                   "is undone by then, and Kray keeps serving")
    chaos.add_argument("--hosts", type=int, help="instead of --nodes: N hosts of their own (network namespaces, "
                                                 "needs root), Kray deployed with ray start and kray start --address, "
                                                 "network faults, clients checked by a Jepsen-style checker")
    chaos.add_argument("--faults", help="which faults, comma-separated (default kill,kill-graceful,pause; with "
                                        "--hosts: isolate,split,one-way,loss; latency when named)")
    chaos.add_argument("--json", help="with --hosts: write the checker's report here as JSON")
    chaos.add_argument("--markdown", help="with --hosts: write the checker's tables here as Markdown")
    chaos.add_argument("--mean-gap", type=float, default=8.0, help="mean seconds between faults (default 8)")
    chaos.add_argument("--max-down", type=int, default=1, help="brokers down at once at most (default 1)")
    chaos.set_defaults(func=cmd_chaos, address=None)

    from cluster import broker_control
    broker_control.add_parser(sub)
    from cluster.tools import (acls, configs, console_share_consumer, consumer_groups, delete_records,
                               leader_election, metadata_quorum, perf, reassign_partitions, remove_broker,
                               share_groups, share_workers, streams_groups, topics, transactions)
    topics.add_parser(sub)
    delete_records.add_parser(sub)
    reassign_partitions.add_parser(sub)
    leader_election.add_parser(sub)
    remove_broker.add_parser(sub)
    acls.add_parser(sub)
    configs.add_parser(sub)
    share_groups.add_parser(sub)
    consumer_groups.add_parser(sub)
    streams_groups.add_parser(sub)
    metadata_quorum.add_parser(sub)
    console_share_consumer.add_parser(sub)
    perf.add_parsers(sub)
    share_workers.add_parser(sub)
    transactions.add_parser(sub)

    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.own_process = argv is None  # the `kray` command itself, not a call from Python
    if getattr(args, "command_config", None):  # the tools' client security, as Kafka's --command-config
        from cluster import admin
        try:
            admin.configure(admin.load_properties(args.command_config))
        except admin.AdminError as e:
            print(f"kray {args.command}: {e}", file=sys.stderr)
            return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
