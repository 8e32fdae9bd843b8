"""`kray share-workers`: run a handler (`module:function`) in a Ray worker pool that share-consumes
a group, scaling between --min-workers and --max-workers on the group's lag, with a progress line
(workers, lag, rate) every --reporting-interval ms. Ctrl-C drains the workers and stops.

    kray share-workers --bootstrap-server 127.0.0.1:9092 --group thumbnails --topic images \\
        --handler my_app.handlers:resize --poison ValueError --min-workers 1 --max-workers 8
"""
from __future__ import annotations

import builtins
import importlib
import os
import signal
import sys
import threading

from cluster.admin import COMMAND_CONFIG_HELP, librdkafka_config


def add_parser(sub) -> None:
    p = sub.add_parser("share-workers", help="run a handler (module:function) in a Ray worker pool on a share "
                                             "group, scaling with its lag")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="HOST:PORT of a broker (Kray or Kafka 4.2+)")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--group", required=True, help="the share group the workers join")
    p.add_argument("--topic", action="append", required=True, help="a topic to consume (repeatable)")
    p.add_argument("--handler", required=True, metavar="MODULE:FUNCTION",
                   help="called with each record (a confluent_kafka.Message): return to ACCEPT, raise to RELEASE")
    p.add_argument("--batch", action="store_true", help="call the handler with each polled list of records instead")
    p.add_argument("--poison", action="append", default=[], metavar="EXCEPTION",
                   help="an exception type that REJECTs the record (archived, not redelivered): a builtin name "
                        "such as ValueError, or module:Name (repeatable)")
    p.add_argument("--min-workers", type=int, default=1, help="workers kept when the group has no lag (default 1)")
    p.add_argument("--max-workers", type=int, default=4, help="workers at most (default 4)")
    p.add_argument("--num-cpus", type=float, default=1.0, help="Ray CPUs per worker (default 1)")
    p.add_argument("--num-gpus", type=float, default=0.0, help="Ray GPUs per worker (default 0)")
    p.add_argument("--memory", type=int, help="Ray memory per worker, bytes")
    p.add_argument("--lag-target-ms", type=int, default=30000,
                   help="drain a backlog within this long: the pool sizes itself for it (default 30000)")
    p.add_argument("--max-poll-records", type=int, default=10,
                   help="records per poll; all are locked at once, so keep this x handler time under the group's "
                        "share.record.lock.duration.ms (default 10)")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka setting for the workers' share consumers (repeatable)")
    p.add_argument("--ray-address", help="join this Ray cluster (auto, or the head's HOST:PORT); default: a local Ray")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                   help="a progress line every this many ms (default 5000)")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"kray share-workers: {message}", file=sys.stderr)
    return 2


def load_handler(spec: str):
    """`module:function` from the current directory or the installed packages."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--handler {spec!r}: use MODULE:FUNCTION, e.g. my_app.handlers:resize")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"--handler {spec!r}: cannot import {module_name} ({e}); run from the directory that "
                         f"holds it or install it") from None
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"--handler {spec!r}: {module_name} has no {attr}")
        target = getattr(target, part)
    return module, target


def load_poison(name: str) -> type[BaseException]:
    if ":" in name:
        _, found = load_handler(name)
    else:
        found = getattr(builtins, name, None)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise ValueError(f"--poison {name!r} is not an exception type: name a builtin such as ValueError, "
                         f"or module:Name")
    return found


def run(args) -> int:
    try:
        module, handler = load_handler(args.handler)
        if not callable(handler):
            raise ValueError(f"--handler {args.handler!r} is not a function")
        poison = tuple(load_poison(p) for p in args.poison)
        properties = dict(kv.split("=", 1) for kv in args.consumer_property if "=" in kv)
        if len(properties) != len(args.consumer_property):
            raise ValueError("--consumer-property takes KEY=VALUE")
    except ValueError as e:
        return _fail(str(e))
    import ray
    from cluster.workers import ShareWorkerPool
    if module.__name__ != "__main__":  # the workers get the handler's code, wherever they run
        ray.cloudpickle.register_pickle_by_value(module)
    try:
        pool = ShareWorkerPool(args.bootstrap_server, args.group, args.topic, handler, batch=args.batch,
                               poison=poison, min_workers=args.min_workers, max_workers=args.max_workers,
                               num_cpus=args.num_cpus, num_gpus=args.num_gpus, memory=args.memory,
                               client_config=librdkafka_config() | properties, lag_target_s=args.lag_target_ms / 1000,
                               max_poll_records=args.max_poll_records)
    except (ValueError, TypeError) as e:
        return _fail(str(e))
    ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which installs its own handlers
        signal.signal(sig, lambda *_: stop.set())
    print(f"Starting {args.min_workers}..{args.max_workers} workers on share group {args.group} "
          f"({', '.join(args.topic)}): {args.handler}", flush=True)
    print("TIME-S\tWORKERS\tDRAINING\tLAG\tRATE-RECORDS/S\tHANDLER-MS\tACCEPTED\tRELEASED\tREJECTED\tERRORS", flush=True)
    pool.start()
    shown_error = None
    try:
        while not stop.wait(args.reporting_interval / 1000):
            shown_error = _progress(pool.stats(), shown_error)
        print("Draining the workers ...", flush=True)
    finally:
        final = pool.stop()
        _progress(final, shown_error)
        ray.shutdown()
    return 0


def _progress(s: dict, shown_error: str | None) -> str | None:
    """One progress line, and a worker's last error when it is new; the error shown."""
    lag = "-" if s.get("lag") is None else s["lag"]
    handler_ms = "-" if s.get("handler_time_ms") is None else f"{s['handler_time_ms']:.1f}"
    print(f"{s['time_s']:.0f}\t{s['workers']}\t{s['draining']}\t{lag}\t{s['rate']:.1f}\t{handler_ms}\t"
          f"{s['accepted']}\t{s['released']}\t{s['rejected']}\t{s['errors']}", flush=True)
    if s.get("last_error") and s["last_error"] != shown_error:
        print(f"  last error: {s['last_error']}", flush=True)
    return s.get("last_error")
