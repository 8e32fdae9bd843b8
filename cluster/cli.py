"""`kray`: the command line, shaped like Kafka's tools.

  kray start [--port 9092] [--data-dir DIR] [--config FILE] [--override key=value ...]
  kray topics (--create|--list|--describe|--delete) --bootstrap-server HOST:PORT [--topic T] ...
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from cluster.config import ConfigError, load_broker_config, with_listener

DEFAULT_LOCAL_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "local.toml"


def cmd_start(args) -> int:
    config_path = Path(args.config) if args.config else (DEFAULT_LOCAL_CONFIG if DEFAULT_LOCAL_CONFIG.exists() else None)
    overrides = list(args.override or [])
    if args.data_dir is not None:
        overrides.append(f"log.dirs={args.data_dir}")
    try:
        config = with_listener(load_broker_config(config_path, overrides), args.host, args.port)
    except (ConfigError, OSError) as e:
        print(f"kray start: {e}", file=sys.stderr)
        return 2
    from cluster.local import LocalBroker

    stop = threading.Event()
    broker = LocalBroker(config)
    print(f"Starting Kray (data in {Path(config['log.dirs']).resolve()}) ...", flush=True)
    try:
        bootstrap = broker.start()
        for sig in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which installs its own handlers
            signal.signal(sig, lambda *_: stop.set())
        print(f"Kray is ready: bootstrap={bootstrap}", flush=True)
        while not stop.wait(0.5):
            pass
        print("Stopping Kray ...", flush=True)
    except OSError as e:
        print(f"kray start: cannot listen: {e}; pick another port with --port", file=sys.stderr)
        return 1
    finally:
        broker.stop()
    print("Kray stopped.", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kray", description="Kray: a Kafka-compatible broker on Ray actors")
    sub = parser.add_subparsers(dest="command", required=True)

    start = sub.add_parser("start", help="run a single-node broker on an embedded local Ray (foreground)")
    start.add_argument("--port", type=int, help="listener port (default 9092)")
    start.add_argument("--host", help="listener host (default 127.0.0.1)")
    start.add_argument("--data-dir", help="where logs and metadata live (default ./data)")
    start.add_argument("--config", help="a TOML file of broker configs (default configs/local.toml)")
    start.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set one broker config, e.g. --override num.partitions=3 (repeatable)")
    start.set_defaults(func=cmd_start)

    from cluster.tools import configs, console_share_consumer, perf, share_groups, topics
    topics.add_parser(sub)
    configs.add_parser(sub)
    share_groups.add_parser(sub)
    console_share_consumer.add_parser(sub)
    perf.add_parsers(sub)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
