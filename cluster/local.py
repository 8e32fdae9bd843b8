"""Run Kray on Ray: a broker per Ray node, the controller beside them.

- `LocalBroker(config)`: one node, on an embedded local Ray (what `kray start` runs);
  `LocalBroker(config, address="auto" | "HOST:PORT")` deploys onto an existing Ray cluster
  instead: the controller on its head node, a broker on every node (nodes that join later too).
- `LocalCluster(nodes=3)`: several broker nodes on one machine, on `ray.cluster_utils.Cluster`;
  the Ray head runs the controller and no broker, so losing a broker node never takes Ray down.
  `kill_node`, `restart_node`, `pause_node` and `resume_node` act out a machine's loss, return
  and stall, for failover tests. A node whose raylet exits on its own (Ray declared it dead, e.g.
  after a stall longer than its health checks) is started again by LocalCluster's node supervisor,
  as a service manager restarts `ray start` on a real host (cluster/node_supervisor.py).

start() returns once clients can connect; stop() stops what Kray started (and the Ray it started).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import ray

from actors import composition, names
from actors.controller.actor import ControllerActor
from actors.controller.quorum_shell.settings import VOTERS_KEY, combined_voters
from actors.controller.nodes import (BROKER_ID_LABEL, CONTROLLER_ONLY, PORT_LABEL, ROLE_LABEL, NodeView, chosen_voters,
                                     proposed_broker_id, recorded_broker_id, recorded_voters)
from actors.controller_client import NotController
from actors.security.inter_broker import with_broker_secret
from cluster import inter_broker_login, start_progress
from cluster.process_tree import signal_all
from cluster.ray_node_start import RAY_NODE_START_ATTEMPTS, start_ray_node
from cluster.ray_node_start import timed_out as ray_node_timed_out
from cluster.start_errors import (CannotListen, DeployTimedOut, ProblemLog, RayDidNotStart,
                                  RayUnreachable, ray_did_not_start, ray_port_closed, ray_unreachable)

log = logging.getLogger("kray")
RAY_STARTUP_TIMEOUT_S = 120
ADDRESS_DEPLOY_TIMEOUT_S = 300  # kray start --address: until every broker serves (it says what it waits for meanwhile)
ACTIVE_CONTROLLER_WAIT_S = 60.0  # an election, and the new controller reading the metadata
STOP_WAIT_S = 10.0
LISTEN_PROBLEMS_WAIT_S = 2.0
RAY_PROBE_TIMEOUT_S = 10  # kray start --address HOST:PORT: how long the head's port may take to accept
NODE_SUPERVISION_POLL_S = 0.5
BROKER_EVENTS_POLL_S = 10.0
PROGRESS_ASK_TIMEOUT_S = 3.0
WAIT_STEP_S = 1.0  # start()'s waits look this often whether a progress line is due
# Ray's health checks on one machine: a node whose raylet is gone is refused at once, so Ray may
# declare it dead in ~1.5 s (failover tests stay short). A stall longer than that (pause_node) gets
# the node declared dead too: its raylet exits when it wakes, and the node supervisor starts it
# again. On real hosts keep Ray's defaults (a cut of ~15-25 s is tolerated), longer than
# broker.session.timeout.ms: a short cut then only fences the broker, which comes back by itself.
FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                      "health_check_timeout_ms": 500, "health_check_initial_delay_ms": 500}


def _init_ray(address: str) -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Ray announces on every start that its token authentication is on: good, and nothing a Kray
    # user must act on (Kray's own listeners are PLAINTEXT; see README), so keep the console quiet
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    # Ray's core worker installs C++ crash handlers, SIGTERM's among them (a stack dump, then an
    # abort); a caller's own Python handlers (`kray start` stops cleanly on SIGTERM) are kept
    kept = {sig: handler for sig in (signal.SIGINT, signal.SIGTERM)
            if callable(handler := signal.getsignal(sig)) and handler is not signal.default_int_handler
            and threading.current_thread() is threading.main_thread()}
    ray.init(address=address, namespace=names.NAMESPACE, include_dashboard=False, log_to_driver=False,
             configure_logging=True, logging_level=logging.WARNING)
    for sig, handler in kept.items():
        signal.signal(sig, handler)


# Ray keeps up to this many idle workers (default: one per CPU) for tasks to come; Kray's broker runs
# actors, and tasks only as it starts or a node joins: an idle ray::IDLE worker held ~120 MB
IDLE_WORKERS_KEPT_ENV = "RAY_num_workers_soft_limit"

# What the Ray that `kray start` starts for one broker does by the clock, slowed where Ray's default
# serves a cluster scheduling tasks and a broker's single node runs a few long-lived actors
# (num_cpus=0): raylet, GCS and agent 0.017 -> 0.010 cores (docs/benchmarks/cluster.md, One idle broker). Set
# in the environment of the processes Ray starts; a value the user set wins.
QUIET_RAY_ENV = {
    "RAY_task_events_report_interval_ms": "0",  # 1000: task state events, for Ray's state API and dashboard
    "RAY_raylet_report_resources_period_milliseconds": "1000",  # 100: one node; Kray's actors take no CPUs
    "RAY_raylet_check_gc_period_milliseconds": "1000",  # 100: object store pressure (Kray keeps no objects)
    "RAY_local_fs_monitor_interval_ms": "1000",  # 100: the object store's spill disk
    "RAY_object_manager_timer_freq_ms": "1000",  # 100: object transfers between nodes (one node)
    "RAY_memory_monitor_refresh_ms": "1000",  # 250: Ray's out-of-memory killer looks once a second
    "RAY_kill_idle_workers_interval_ms": "1000",  # 200
    "REPORTER_UPDATE_INTERVAL_MS": "15000",  # 5000: the node's CPU/memory stats among Ray's metrics (Kray's
                                             # own metrics are reported every 10 s, as before)
}


# Ray runs its workers at nice 15 (RAY_worker_niceness), below every ordinary process: right for
# tasks that must not crowd out the raylet, wrong for Kray's actors, which are the broker. Beside
# four busy nice-0 processes, LocalCluster(nodes=3) took 198 s to start and then had a broker
# missing, where at nice 0 it took 53 s and tests/cluster/test_replication.py passed (docs/
# operations/troubleshooting.md). A Ray that Kray starts runs its workers at nice 0, as Kafka's JVM
# runs; a value the user set wins. Nodes joined with `ray start`: docs/guides/multi-node.md.
BROKER_PRIORITY_ENV = {"RAY_worker_niceness": "0"}


def _broker_priority() -> None:
    for key, value in BROKER_PRIORITY_ENV.items():
        os.environ.setdefault(key, value)


def trim_own_ray() -> list[str]:
    """On the Ray this process started for a broker (`kray start`), end Ray's processes that a
    broker does not use: the log monitor (it streams workers' output to a driver that asks for it:
    Kray's does not, log_to_driver=False), the autoscaler's monitor (one node: nothing to scale)
    and the dashboard's head (started even with include_dashboard=False, for Ray's job and state
    APIs, which Kray does not call). About 280 MB of resident memory (benchmarks/results/
    idle-broker.md). Ray's agents stay: the raylet shares its fate with them, and the metrics
    agent exports metrics when asked. Returns what it ended."""
    import ray._private.worker as ray_worker
    node = getattr(ray_worker.global_worker, "node", None)
    ended = []
    for name, kill in (("log monitor", "kill_log_monitor"), ("autoscaler monitor", "kill_monitor"),
                       ("dashboard", "kill_dashboard")):
        try:
            getattr(node, kill)(check_alive=False)
            ended.append(name)
        except Exception as e:  # (not running, or a Ray without it)
            log.debug("could not end Ray's %s: %s", name, e)
    return ended


@contextlib.contextmanager
def _stderr_into(file):
    """Send this process's file descriptor 2 (where Ray's C++ client logs) into `file` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _head_node_id() -> str:
    for node in ray.nodes():
        if node["Alive"] and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    return ray.get_runtime_context().get_node_id()


def place_voters(config: dict[str, Any]) -> tuple[tuple[int, ...], dict[int, str]]:
    """The voting brokers (combined voters) and the Ray nodes of those that are alive, before any
    controller starts: every live broker node's id (its label, else its meta.properties, where a
    new id is recorded now, as the controller would), then the voters (nodes.chosen_voters: the
    configured ones, else those an earlier start recorded in the unlabelled nodes' meta.properties),
    recorded there. ((), {}) when there are none: one dedicated controller keeps the metadata.
    Raises RuntimeError, saying what to do, when no majority of voters is alive."""
    nodes = [n for n in map(NodeView.of, ray.nodes()) if n.alive and n.hosts_broker]
    ids: dict[int, str] = {n.labelled_broker_id: n.node_id for n in nodes if n.labelled_broker_id is not None}
    unlabelled = [n for n in nodes if n.labelled_broker_id is None]
    log_dirs = str(config["log.dirs"])
    for node in unlabelled:
        proposed = proposed_broker_id(int(config.get("broker.id", 0)), set(ids))
        ids[ray.get(composition.start_on_node(node.node_id, recorded_broker_id, log_dirs, proposed))] = node.node_id
    recorded = {v for v in ray.get([composition.start_on_node(n.node_id, recorded_voters, log_dirs)
                                    for n in unlabelled]) if v}
    voters = chosen_voters(combined_voters(config), recorded)
    if isinstance(voters, str):
        raise RuntimeError(voters)
    if not voters:
        return (), {}
    if not recorded:
        ray.get([composition.start_on_node(n.node_id, recorded_voters, log_dirs, ",".join(map(str, voters)))
                 for n in unlabelled])
    alive = {v: ids[v] for v in voters if v in ids}
    if len(alive) <= len(voters) // 2:
        missing = sorted(set(voters) - set(alive))
        raise RuntimeError(f"the metadata quorum's voters are brokers {list(voters)}, and {missing} have no live "
                           f"Ray node: start them (on a shared machine: `ray start --labels {BROKER_ID_LABEL}=<id>`), "
                           f"or name live brokers in controller.quorum.voters for a new cluster")
    return voters, alive


def active_controller(voters, timeout_s: float, prefer=None):
    """The handle of the active controller among the voting brokers' (combined voters)."""
    deadline = time.monotonic() + timeout_s
    while True:
        handles = [prefer] if prefer is not None else []
        for voter in voters:
            try:
                handles.append(ray.get_actor(names.controller_name(voter), namespace=names.NAMESPACE))
            except ValueError:
                pass
        for handle in handles:
            try:
                if ray.get(handle.is_active.remote(), timeout=5):
                    return handle
            except Exception:
                continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"no active controller among the voters {list(voters)} within {timeout_s:.0f} s")
        time.sleep(0.2)


def stop_controller(controller) -> None:
    """Stop the brokers and partition replicas the controller started, then the controller."""
    try:
        ray.get(controller.shutdown.remote(), timeout=60)
    except Exception as e:  # stopping anyway
        log.warning("controller did not shut down cleanly: %s", e)
    try:
        ray.kill(controller, no_restart=True)
    except Exception:
        pass


def _node_pids(node) -> list[int]:
    """The raylet of a ray.cluster_utils node and every process below it (Ray's workers and agents)."""
    raylets = [info.process.pid for info in node.all_processes.get("raylet", [])]
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(raylets)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _raylet_exited(node) -> bool:
    """The raylet of a ray.cluster_utils node has exited (e.g. Ray declared its node dead)."""
    return any(info.process.poll() is not None for info in node.all_processes.get("raylet", []))


def _is_ray_worker(pid: int) -> bool:
    """Ray names its worker processes (actors included) `ray::<class or task>`."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().startswith(b"ray::")
    except OSError:
        return False


@contextlib.contextmanager
def _no_sigterm_handler_off_the_main_thread():
    """A ray.cluster_utils node installs a SIGTERM handler as it starts, which only the main thread
    may do: the node supervisor (a thread) starts nodes without it, and the process keeps its own."""
    if threading.current_thread() is threading.main_thread():
        yield
        return
    import ray._private.utils as ray_utils
    original = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original


def _stamp(at_ms: int | None = None) -> str:
    moment = datetime.now() if at_ms is None else datetime.fromtimestamp(at_ms / 1000)
    return moment.strftime("%H:%M:%S")


def follow_broker_events(controller, say, stopping: threading.Event) -> threading.Thread:
    """A thread that says what happens to brokers (the controller's `broker_events`: lost, fenced,
    back) as it happens, until `stopping` is set. `controller`: a handle, or a function giving the
    active controller's (with the metadata quorum it moves: the new one's events are said from its
    first, which says it took over)."""
    current = controller if callable(controller) and not hasattr(controller, "broker_events") else lambda: controller

    def run():
        seq, following = None, None
        while not stopping.is_set():
            try:
                handle = current()
                if following is not None and handle._actor_id != following:
                    seq = 0
                following = handle._actor_id
                if seq is not None and seq > 0 and not ray.get(handle.is_active.remote(), timeout=10):
                    seq = 0  # (a standby now: Ray started it again; its events start afresh once it leads)
                    raise RuntimeError("the controller followed stands by")
                seq, events = ray.get(handle.broker_events.remote(seq, BROKER_EVENTS_POLL_S),
                                      timeout=BROKER_EVENTS_POLL_S * 2)
                for at_ms, text in events:
                    say(f"[{_stamp(at_ms)}] {text}")
            except Exception as e:  # the controller restarts, or Kray stops
                if stopping.wait(1.0):
                    return
                log.debug("broker events: %s", e)
    thread = threading.Thread(target=run, name="kray-broker-events", daemon=True)
    thread.start()
    return thread


def _running_controller(voter: int):
    """The controller of voting broker `voter` if it runs already (detached: it outlives the
    `kray start` that started it), else None."""
    try:
        return ray.get_actor(names.controller_name(voter), namespace=names.NAMESPACE)
    except ValueError:
        return None


def _named_actor_exists(name: str) -> bool:
    try:
        ray.get_actor(name, namespace=names.NAMESPACE)
        return True
    except ValueError:
        return False


class _Said:
    """Says a progress line when it changed, or again every PROGRESS_REPEAT_S (still waiting). One
    for a whole start(): whichever step waits (Ray, the controllers' election, the brokers) looks
    when `due` (PROGRESS_EVERY_S after the start or the last look), so no wait in between is silent
    for longer than that."""

    def __init__(self, say):
        self.say, self.last, self.at = say, None, 0.0
        self.looked = time.monotonic()  # when a step last looked at what it waits for (at first: the start)
        self._lock = threading.Lock()

    def due(self) -> bool:
        return self.say is not None and time.monotonic() - self.looked >= start_progress.PROGRESS_EVERY_S

    def __call__(self, line: str) -> None:
        if self.say is None:
            return
        with self._lock:
            now = time.monotonic()
            self.looked = now
            if line != self.last or now - self.at >= start_progress.PROGRESS_REPEAT_S:
                self.last, self.at = line, now
                self.say(line)


@contextlib.contextmanager
def _saying_while(said: _Said, line: str):
    """Runs the block (a call that blocks in Ray's C++, e.g. ray.init) while a thread says `line`
    whenever a progress line is due."""
    done = threading.Event()

    def look() -> None:
        while not done.wait(0.5):
            if said.due():
                said(line)

    watcher = threading.Thread(target=look, name="kray-start-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()


class _Controllers:
    """The controller as LocalBroker and LocalCluster hold it: the dedicated controller (one actor on
    the Ray head, the metadata quorum's single voter inside it), or with combined voters
    (controller.quorum.voters) one per voting broker's node, of which the one whose voter leads is
    active; `controller` is then that one (waiting up to ACTIVE_CONTROLLER_WAIT_S for it, through an
    election)."""
    _voters: tuple = ()
    _controller = None
    _said: _Said | None = None  # start()'s progress lines
    attached = False  # start() found Kray's controllers running (a kray start lost with its host) and took them over
    progress = None  # a function given each progress line while start() deploys (kray start prints them)
    deploy_timeout_s: float | None = None  # how long start() waits for every broker (None: RAY_STARTUP_TIMEOUT_S)

    @property
    def controller(self):
        return self.active_controller()

    def active_controller(self, wait_s: float = ACTIVE_CONTROLLER_WAIT_S):
        """The active controller's handle; if none says it is active within `wait_s` (an election,
        or every other voter cut off from this node), the last one known: calls to it fail (or wait)
        as calls to an unreachable controller do, and are retried by their callers."""
        if not self._voters or self._controller is None or not ray.is_initialized():
            return self._controller
        try:
            self._controller = active_controller(self._voters, wait_s, prefer=self._controller)
        except TimeoutError as e:
            log.warning("%s: asking the last known controller", e)
        return self._controller

    @controller.setter
    def controller(self, handle) -> None:
        self._controller = handle

    def _deploy_brokers(self, expected: int) -> list:
        """The active controller's deploy_brokers (a broker on every node; `expected` of them
        serving), asked again of the next active one when the controller changes meanwhile (a
        restarted cluster's voters may elect twice: the first controller stops when its epoch ends)."""
        deadline = time.monotonic() + (self.deploy_timeout_s or RAY_STARTUP_TIMEOUT_S)
        said = self._said or _Said(self.progress)
        self._await_active_controller(deadline, said, expected)
        while True:
            controller = self._controller
            try:
                call = controller.deploy_brokers.remote(expected, max(1.0, deadline - time.monotonic()))
                while not ray.wait([call], timeout=WAIT_STEP_S)[0]:
                    if said.due():
                        said(self._deploy_progress_line(expected))
                return ray.get(call)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, NotController) as e:
                if time.monotonic() > deadline:
                    raise
                log.info("the active controller changed while the brokers started (%s); asking the new one",
                         str(e).splitlines()[0])
                said("the active controller changed (an election of the metadata quorum, or its controller started "
                     "again): asking the new one")
                time.sleep(0.5)
                self._await_active_controller(deadline, said, expected)

    def _await_active_controller(self, deadline: float, said: _Said, expected: int) -> None:
        """With combined voters: until one voter's controller says it is active (an election, or
        controllers whose processes still start), saying so whenever a line is due."""
        while self._voters and time.monotonic() < deadline:
            try:
                self._controller = active_controller(self._voters, WAIT_STEP_S, prefer=self._controller)
                return
            except TimeoutError:
                if said.due():
                    said(self._deploy_progress_line(expected))

    def _deploy_progress_line(self, expected: int) -> str:
        """What the deploy waits for now (cluster/start_progress.py), asked of the controllers."""
        active, progress = None, None
        handles = [(v, ray.get_actor(names.controller_name(v), namespace=names.NAMESPACE)) for v in self._voters
                   if _named_actor_exists(names.controller_name(v))] if self._voters else [(None, self._controller)]
        for voter, handle in handles:
            try:
                progress = ray.get(handle.deploy_progress.remote(), timeout=PROGRESS_ASK_TIMEOUT_S)
            except Exception:  # one restarting, or busy: the next
                continue
            if progress is not None:  # (None: a standby)
                active = voter
                break
        return start_progress.progress_line(self._voters, active, progress, expected)

    def _start_controllers(self, voter_nodes: dict[int, str]):
        """One controller per voting broker whose node is alive, on that node (one broker secret for
        all of them: they start one another's brokers; a voter's node that comes later gets its
        controller from the active one); returns the first handle (the active one is found by
        asking). A majority of the voters must be alive."""
        missing = sorted(set(self._voters) - set(voter_nodes))
        if len(missing) * 2 >= len(self._voters):
            raise RuntimeError(f"controller.quorum.voters names brokers {missing}, but no live Ray node is labelled "
                               f"{BROKER_ID_LABEL}=<id> for them: start those nodes with `ray start --labels "
                               f"{BROKER_ID_LABEL}=<id>` (or name other voters)")
        self.config = with_broker_secret(self.config)
        handles = []
        for v in self._voters:
            running = _running_controller(v)
            if running is not None:  # Kray runs on this Ray cluster already (its kray start was lost: the Ray
                handles.append(running)  # head's host died): its controllers and brokers are taken over as they are
                self.attached = True
            elif v in voter_nodes:
                handles.append(composition.start_controller(ControllerActor, self.config, voter_nodes[v], v))
        return handles[0]

    def _stop_controllers(self) -> None:
        """The active controller stops the brokers; every voter's controller is then killed (they are
        detached: they would outlive this process)."""
        try:
            controller = (None if not ray.is_initialized() or self._controller is None else
                          active_controller(self._voters, STOP_WAIT_S, prefer=self._controller) if self._voters
                          else self._controller)
        except TimeoutError:  # no active controller: its brokers stop with Ray
            controller = None
        if controller is not None:
            stop_controller(controller)
        for voter in self._voters if ray.is_initialized() else ():
            try:
                ray.kill(ray.get_actor(names.controller_name(voter), namespace=names.NAMESPACE),
                         no_restart=True)
            except Exception:
                pass
        self.controller = None


class LocalBroker(_Controllers):
    def __init__(self, broker_config: dict[str, Any], address: str | None = None, *, trim_ray: bool = False):
        self.config = dict(broker_config)
        self.trim_ray = trim_ray  # end what Ray runs that a broker does not use (trim_own_ray)
        self.config["log.dirs"] = str(Path(self.config["log.dirs"]).resolve())
        self.address = address
        if address is not None:  # nodes of their own, maybe busy: an election or two may come during the deploy
            self.deploy_timeout_s = ADDRESS_DEPLOY_TIMEOUT_S
        self._voters: tuple[int, ...] = ()  # the metadata quorum's, known once the nodes are (start)
        self.controller = None
        self.brokers: list = []
        self.bootstrap: str | None = None
        self._owns_ray = False
        self._problems = ProblemLog(own_ray=address is None)
        self._stopping = threading.Event()
        self.notes: list[str] = []  # what start() has to say (the inter-broker login's credential, a missing grant)

    def report_broker_events(self, say=print) -> None:
        """Say what happens to brokers (lost, fenced, back) as it happens, e.g. on the console."""
        follow_broker_events(lambda: self.controller, say, self._stopping)

    def start(self) -> str:
        """Raises RayUnreachable when Ray can't be reached at `address`, CannotListen when a
        broker's listener can't open, InterBrokerLoginFailed when brokers cannot log in to each
        other (cluster/inter_broker_login.py), each saying what to do."""
        said = self._said = _Said(self.progress)
        if not ray.is_initialized():
            if self.address is None:
                _broker_priority()
                if self.trim_ray:  # no idle worker kept for later tasks: Kray runs a few, at start-up
                    os.environ.setdefault(IDLE_WORKERS_KEPT_ENV, "0")
                    for key, value in QUIET_RAY_ENV.items():
                        os.environ.setdefault(key, value)
                try:
                    start_ray_node(lambda: _init_ray("local"), said)
                except Exception as e:
                    if not ray_node_timed_out(e):
                        raise
                    raise RayDidNotStart(ray_did_not_start(os.getloadavg()[0], os.cpu_count(),
                                                           RAY_NODE_START_ATTEMPTS)) from None
                if self.trim_ray:
                    trim_own_ray()
            else:
                with _saying_while(said, f"waiting for the Ray cluster at {self.address} to take this driver in "
                                         f"(ray.init)"):
                    self._join_ray(self.address)
            self._owns_ray = True
        if self.address is None:
            controller_node, expected = ray.get_runtime_context().get_node_id(), 1
        else:
            controller_node = _head_node_id()
            expected = sum(1 for n in map(NodeView.of, ray.nodes()) if n.alive and n.hosts_broker)
        self._voters, voter_nodes = place_voters(self.config)
        if self._voters:
            self.config[VOTERS_KEY] = ",".join(map(str, self._voters))
            self.controller = self._start_controllers(voter_nodes)
        else:
            self.controller = composition.start_controller(ControllerActor, self.config, controller_node)
        try:
            self.brokers = self._deploy_brokers(expected)
        except TimeoutError as e:  # (an OSError too, but no listener's fault: brokers that did not come up)
            raise DeployTimedOut(f"{re.sub(r'^TimeoutError: ', '', str(e).splitlines()[-1])}; the brokers that serve keep serving: look at their "
                                 f"nodes (ray status) and Kray's log, then start again") from None
        except OSError as e:  # a gateway could not listen
            lines = self.listen_problems(retrying=False)
            raise CannotListen("\n".join(lines) if lines else str(getattr(e, "cause", None) or e)) from None
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in self.brokers)
        self.notes = inter_broker_login.prepare(self.controller, self.config, self.brokers)
        return self.bootstrap

    @staticmethod
    def _join_ray(address: str) -> None:
        """ray.init(address), saying what to do when it fails. Ray's client logs every retry of a
        refused connection (~20 lines in 20 s): they are held back, and only their distinct
        lines go into the error; after a success they are printed as they were."""
        host, sep, port = address.rpartition(":")
        if sep and port.isdigit():  # a wrong address makes ray.init retry for minutes: look first
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_PROBE_TIMEOUT_S).close()
            except OSError as e:
                raise RayUnreachable(ray_port_closed(address, e)) from None
        with tempfile.TemporaryFile() as ray_log:
            try:
                with _stderr_into(ray_log):
                    _init_ray(address)
            except Exception as e:
                ray_log.seek(0)
                said = list(dict.fromkeys(re.sub(r"^\[[^]]*\]\s*", "", line).strip()
                                          for line in ray_log.read().decode(errors="replace").splitlines()
                                          if line.strip()))
                raise RayUnreachable(ray_unreachable(address, e, os.environ,
                                                     Path("~/.ray/auth_token").expanduser().exists(),
                                                     ray_said=said)) from None
            ray_log.seek(0)
            sys.stderr.write(ray_log.read().decode(errors="replace"))

    def listen_problems(self, *, retrying: bool = True) -> list[str]:
        """Brokers whose listener could not open since the last call, each said once with its fix
        (a node that joins later retries in the background: `kray start` prints these)."""
        controller = self.active_controller(wait_s=LISTEN_PROBLEMS_WAIT_S)
        if controller is None:
            return []
        try:
            failures = ray.get(controller.listen_failures.remote(), timeout=10)
            addresses = {n["NodeID"]: n.get("NodeManagerAddress") for n in ray.nodes()}
        except Exception as e:  # the controller is restarting: ask again next time
            log.debug("could not ask the controller about its brokers: %s", e)
            return []
        hosts = {b: addresses.get(node_id) for b, (_, node_id) in failures.items()}
        port = next((int(p) for p in re.findall(r":(\d+)", str(self.config.get("listeners", "")))[:1]), None)
        return self._problems.new_lines({b: why for b, (why, _) in failures.items()}, hosts, port,
                                        retrying=retrying)

    def stop(self) -> None:
        self._stopping.set()
        self._stop_controllers()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False

    def __enter__(self) -> "LocalBroker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


DEFAULT_REPLICATION_FACTOR = 3  # LocalCluster's, with configs/local.toml


class LocalCluster(_Controllers):
    """`nodes` broker nodes (broker ids 1..nodes) and a controller-only Ray head, on this machine.

        with LocalCluster(nodes=3) as cluster:
            Producer({"bootstrap.servers": cluster.bootstrap})
            cluster.leader("orders", 0)   # -> the broker id leading orders-0

    `overrides` are Kafka broker configs ({"num.partitions": 3}) over configs/local.toml (or
    `config_path`); with local.toml, `default.replication.factor` becomes min(3, nodes) unless
    overridden. `port` > 0 gives broker i the port `port + i - 1` (its primary listener's; other
    listeners move by the same offset), else ports are free ones.
    `data_dir` holds every broker's logs (`broker-<id>/`) and the controller's metadata; by
    default a temporary directory, removed by stop().
    `supervise` (default True): a node whose raylet exits on its own is started again, with its
    broker id, port and data (what `ray start` under a service manager does on a real host).
    """

    def __init__(self, nodes: int = 3, data_dir: str | Path | None = None, overrides: dict[str, Any] | None = None,
                 *, config_path: Path | None = None, port: int = 0, host: str = "127.0.0.1", supervise: bool = True):
        from actors.config_schema import ConfigError, with_listener
        from cluster.config import DEFAULT_LOCAL_CONFIG, load_broker_config
        if nodes < 1:
            raise ValueError("a cluster needs at least one broker node")
        self.nodes = nodes
        self._temp_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kray-cluster-")).resolve()
        texts = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in (overrides or {}).items()]
        self.config = with_listener(load_broker_config(config_path or DEFAULT_LOCAL_CONFIG, texts), host, port)
        if nodes > 1 and self.config.get("advertised.listeners"):
            raise ConfigError("advertised.listeners gives every broker the same addresses: with several brokers "
                              "on one machine leave it unset (each broker advertises the ports it listens on)")
        if port == 0 and "," in str(self.config["listeners"]):
            # several listeners and no base port: every listener of every broker on a free port (with a
            # base port, broker i's listeners take their configured ports + i - 1)
            self.config = with_listener(self.config, None, None, all_ports=0)
        self.config["log.dirs"] = str(self.data_dir)
        # the metadata quorum: one dedicated controller voter on the Ray head (not in any broker:
        # killing, pausing or loading brokers never touches it), unless controller.quorum.voters
        # names brokers that vote (tests/cluster/test_metadata_quorum.py: elections among brokers)
        self._voters = combined_voters(self.config)
        if Path(config_path or DEFAULT_LOCAL_CONFIG).resolve() == DEFAULT_LOCAL_CONFIG.resolve() \
                and "default.replication.factor" not in (overrides or {}):
            # several brokers on one machine are there for failover: a topic created without a
            # replication factor gets three replicas (or one per broker), not local.toml's one
            self.config["default.replication.factor"] = min(DEFAULT_REPLICATION_FACTOR, nodes)
        self.port = port
        self.ray_cluster = None
        self.controller = None
        self.bootstrap: str | None = None
        self._brokers: list = []
        self._nodes: dict[int, Any] = {}            # broker id -> its ray.cluster_utils node
        self._paused: dict[int, list[int]] = {}     # broker id -> pids stopped by pause_node
        self.supervise = supervise
        self._nodes_lock = threading.RLock()        # the node table, changed by callers and the supervisor
        self._stopping = threading.Event()
        self._say = log.info                         # report_broker_events sets where lines go
        self.restarts: list[tuple[int, float]] = []  # (broker id, monotonic time) of supervised restarts
        self.notes: list[str] = []  # what start() has to say (the inter-broker login's credential, a missing grant)

    def start(self) -> str:
        from ray.cluster_utils import Cluster
        if ray.is_initialized():
            raise RuntimeError("LocalCluster starts a Ray cluster of its own: call ray.shutdown() first")
        _broker_priority()
        # (no dashboard: nothing of Kray's uses it, it costs a process, and two clusters on one
        # machine would both want its port)
        self.ray_cluster = start_ray_node(lambda: Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "labels": {ROLE_LABEL: CONTROLLER_ONLY}, "_system_config": FAST_HEALTH_CHECKS,
            "include_dashboard": False}), log.warning)
        self._forget_current_cluster()
        try:
            for broker_id in range(1, self.nodes + 1):
                self.add_node(broker_id, wait=False)
            self.ray_cluster.wait_for_nodes()
            _init_ray(self.ray_cluster.address)
            if self._voters:
                self.controller = self._start_controllers({v: self._nodes[v].node_id for v in self._voters
                                                           if v in self._nodes})
            else:
                self.controller = composition.start_controller(ControllerActor, self.config, _head_node_id())
            self._brokers = self._deploy_brokers(self.nodes)
            self.notes = inter_broker_login.prepare(self.controller, self.config, self._brokers)
        except BaseException:
            self.stop()
            raise
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in self._brokers)
        if self.supervise:
            threading.Thread(target=self._supervise_nodes, name="kray-node-supervisor", daemon=True).start()
        return self.bootstrap

    def report_broker_events(self, say=print) -> None:
        """Say what happens to brokers (lost, fenced, back; nodes started again) as it happens."""
        self._say = say
        follow_broker_events(lambda: self.controller, say, self._stopping)

    # ---- the node supervisor: what a service manager running `ray start` does on each host ----
    def _supervise_nodes(self) -> None:
        while not self._stopping.wait(NODE_SUPERVISION_POLL_S):
            try:
                alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
                for broker_id, node in list(self._nodes.items()):
                    if broker_id in self._paused or self._stopping.is_set():
                        continue  # stopped on purpose: resume_node wakes it first
                    if _raylet_exited(node) or not alive.get(node.node_id, True):
                        self._start_again(broker_id, node)
            except Exception as e:
                if not self._stopping.is_set():
                    log.warning("node supervisor: %s", e)

    def _start_again(self, broker_id: int, node) -> None:
        with self._nodes_lock:
            if self._nodes.get(broker_id) is not node or broker_id in self._paused or self._stopping.is_set():
                return  # killed, restarted or paused meanwhile, or the cluster stops
            self._say(f"[{_stamp()}] broker {broker_id}: its Ray node is gone (declared dead by Ray, its raylet "
                      f"exited): starting the node again with the broker's id, port and data")
            self.kill_node(broker_id)
            self.add_node(broker_id, wait=False, port=self._port_of(broker_id))
            self.restarts.append((broker_id, time.monotonic()))

    def add_node(self, broker_id: int, *, wait: bool = True, port: int | None = None):
        """A Ray node that is broker `broker_id` (its data in data_dir/broker-<id>), listening on
        `port`, else on `self.port + broker_id - 1` when a base port was given, else a free one."""
        labels = {BROKER_ID_LABEL: str(broker_id)}
        if port is None and self.port > 0:
            port = self.port + broker_id - 1
        if port is not None:
            labels[PORT_LABEL] = str(port)
        with _no_sigterm_handler_off_the_main_thread():
            node = start_ray_node(lambda: self.ray_cluster.add_node(wait=wait, num_cpus=1, labels=labels),
                                  lambda line: log.warning("broker %d: %s", broker_id, line))
        self._nodes[broker_id] = node
        return node

    # ---- failover testing: what a machine's loss, return and stall look like to Kray ----------
    def kill_node(self, broker_id: int, graceful: bool = False) -> None:
        """Broker `broker_id`'s Ray node dies: with graceful=False the raylet and every process
        on the node (gateway, partition replicas, Ray's agents) get SIGKILL at the same moment, as
        when a machine loses power; graceful=True stops them with SIGTERM first. The node
        supervisor leaves it dead: restart_node brings it back."""
        with self._nodes_lock:
            node = self._nodes.pop(broker_id, None)
            if node is None:
                raise KeyError(f"broker {broker_id} has no running node (running: {sorted(self._nodes)})")
            self._paused.pop(broker_id, None)
            if not graceful:
                signal_all(_node_pids(node), signal.SIGKILL)
            self.ray_cluster.remove_node(node, allow_graceful=graceful)

    def _port_of(self, broker_id: int) -> int | None:
        return next((b.port for b in self._brokers if b.broker_id == broker_id), None)

    def restart_node(self, broker_id: int, timeout_s: float = RAY_STARTUP_TIMEOUT_S) -> None:
        """Broker `broker_id` comes back: a new Ray node with its labels, so the same broker id,
        port (the one it had, even if it was a free one) and data directory
        (`data_dir/broker-<id>`); returns once it serves clients again."""
        with self._nodes_lock:
            if broker_id in self._nodes:
                raise ValueError(f"broker {broker_id} is running: kill_node({broker_id}) first")
            self.add_node(broker_id, port=self._port_of(broker_id))
        self._await_serving(broker_id, timeout_s)

    def _await_serving(self, broker_id: int, timeout_s: float) -> None:
        """Until the broker serves clients from its current node (not its previous incarnation's,
        which the controller may not have found dead yet)."""
        deadline = time.monotonic() + timeout_s
        node_id = self._nodes[broker_id].node_id
        while getattr(self.metadata().brokers.get(broker_id), "node_id", None) != node_id:
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker {broker_id} did not serve clients within {timeout_s:.0f} s")
            time.sleep(0.2)

    def pause_node(self, broker_id: int, *, raylet: bool = True) -> None:
        """SIGSTOP every process of broker `broker_id`'s node: a stalled machine (a long GC pause,
        a hung disk, a VM frozen by its host) that Ray and the controller see go silent. With
        raylet=False only the broker's own processes stop (its gateway and replicas: Ray's
        workers) while Ray sees a healthy node: the controller notices by the missing
        heartbeats alone (broker.session.timeout.ms), as a stalled Kafka broker process."""
        with self._nodes_lock:
            if broker_id not in self._nodes:
                raise KeyError(f"broker {broker_id} has no running node")
            pids = _node_pids(self._nodes[broker_id])
            if not raylet:
                pids = [pid for pid in pids if _is_ray_worker(pid)]
            signal_all(pids, signal.SIGSTOP)
            self._paused.setdefault(broker_id, []).extend(pids)

    def resume_node(self, broker_id: int, timeout_s: float = RAY_STARTUP_TIMEOUT_S) -> bool:
        """SIGCONT what pause_node stopped: the node wakes up and carries on where it was. A
        pause longer than Ray's health checks allow (~1.5 s here) makes Ray declare the node dead,
        and its raylet exits when it wakes: the node supervisor starts it again (same broker id,
        port and data; without supervision, this does), and this returns True once it serves."""
        with self._nodes_lock:
            signal_all(self._paused.pop(broker_id, []), signal.SIGCONT)
            node = self._nodes.get(broker_id)
            if node is None or any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
                return False
            if not self.supervise:
                log.info("broker %d was declared dead while paused: restarting it", broker_id)
                self.kill_node(broker_id)
                self.add_node(broker_id, port=self._port_of(broker_id))
        deadline = time.monotonic() + timeout_s
        while self._nodes.get(broker_id) in (node, None):  # until the supervisor started it again
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker {broker_id}'s node was not started again within {timeout_s:.0f} s")
            time.sleep(0.1)
        self._await_serving(broker_id, max(1.0, deadline - time.monotonic()))
        return True

    def serve_every_broker(self, timeout_s: float = RAY_STARTUP_TIMEOUT_S) -> list[int]:
        """Every broker serves clients again: a paused node is resumed, a killed one started again
        (as restart_node), and this returns once every broker serves from its current node, with the
        brokers it resumed or restarted. For tests that share one cluster: a test that failed with a
        broker down, or while one was still coming back, leaves the next one the whole cluster."""
        back = list(self._paused)
        for b in back:
            self.resume_node(b, timeout_s)
        with self._nodes_lock:
            down = [b for b in self.brokers if b not in self._nodes]
            for b in down:
                self.add_node(b, port=self._port_of(b))
        deadline = time.monotonic() + timeout_s
        for b in self.brokers:
            self._await_serving(b, max(1.0, deadline - time.monotonic()))
        return back + down

    def _forget_current_cluster(self) -> None:
        """ray.cluster_utils records this cluster as the machine's current one, where any later
        ray.init() (another `kray start`, a notebook) would join it: undo that."""
        from ray._private.utils import get_ray_address_file
        try:
            path = get_ray_address_file(None)
            if os.path.exists(path) and open(path).read().strip() == self.ray_cluster.address:
                os.remove(path)
        except Exception as e:
            log.debug("could not remove Ray's current-cluster file: %s", e)

    @property
    def brokers(self) -> list[int]:
        return [b.broker_id for b in self._brokers]

    def metadata(self):
        return ray.get(self.controller.wait_for_metadata.remote(-1, 0))

    def leader(self, topic: str, partition: int) -> int:
        """The broker id that leads `topic`-`partition` now."""
        image = self.metadata()
        if topic not in image.topics:
            raise KeyError(f"topic {topic!r} does not exist")
        return image.leader_id(image.topics[topic], partition)

    def stop(self) -> None:
        with self._nodes_lock:  # (after a restart the supervisor may be making)
            self._stopping.set()
        for pids in self._paused.values():  # let paused processes see their SIGTERM and exit
            signal_all(pids, signal.SIGCONT)
        self._paused.clear()
        self._stop_controllers()
        if ray.is_initialized():
            ray.shutdown()
        if self.ray_cluster is not None:
            self.ray_cluster.shutdown()
            self.ray_cluster = None
        if self._temp_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def chaos(self, seed: int, duration_s: float, *, stop=None, **schedule) -> None:
        """Run a seeded fault schedule on this cluster (cluster/chaos.py): kills, restarts,
        pauses and resumes of broker nodes, printing a timeline and every leadership move.
        `schedule`: chaos.plan's options (faults, mean_gap_s, down_s, max_down); `stop`: a
        threading.Event that cuts it short."""
        from cluster import chaos
        steps = chaos.plan(seed, self.brokers, duration_s, **schedule)
        print(f"chaos seed {seed}: {len(steps)} steps over {duration_s:.0f} s on brokers {self.brokers}", flush=True)
        chaos.run(self, steps, say=lambda line: print(line, flush=True), stop=stop)

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
