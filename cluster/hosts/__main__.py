"""Hosts by hand (root):

  python -m cluster.hosts network [N]   make N hosts (default 3), print how to enter them, and
                                        remove them on Ctrl-C: try a deployment step by step
  python -m cluster.hosts kray [N]      the same with Ray and Kray deployed (KrayHosts)
  python -m cluster.hosts clean         remove what crashed runs left behind
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from cluster.hosts.net import HostNetwork, HostsUnavailable, clean_leftovers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.hosts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("network", "kray", "clean"))
    parser.add_argument("hosts", type=int, nargs="?", default=3)
    args = parser.parse_args(argv)
    if args.what == "clean":
        for line in clean_leftovers():
            print(f"removed {line}")
        return 0
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if args.what == "network":
            with HostNetwork(args.hosts) as net:
                print(f"{args.hosts} hosts on {net.plan.subnet} (this machine: {net.plan.bridge_address}); "
                      f"files in {net.run_dir}")
                for h in net.plan.hosts:
                    print(f"  {h.name} {h.address}: ip netns exec {h.netns} bash")
                print("Ctrl-C removes them and everything running on them", flush=True)
                stop.wait()
        else:
            from cluster.hosts.deploy import KrayHosts
            with KrayHosts(args.hosts) as hosts:
                print(f"Kray on {args.hosts} hosts: bootstrap={hosts.bootstrap} "
                      f"(took {', '.join(f'{k} {v:.1f}' for k, v in hosts.timings.items())})")
                for h in hosts.plan.hosts:
                    print(f"  {h.name} {h.address}: ip netns exec {h.netns} bash")
                print("Ctrl-C stops Kray and removes the hosts; kray start's console follows", flush=True)
                shown = 0
                while not stop.wait(1.0):
                    for line in hosts.output[shown:]:
                        print(f"  | {line}", flush=True)
                    shown = len(hosts.output)
    except HostsUnavailable as e:
        print(f"cluster.hosts: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
