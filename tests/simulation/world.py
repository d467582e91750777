"""One seeded run: N simulated brokers, ZooKeeper, the network, disks, clients and faults under
one twisted.internet.task.Clock, with the invariants checked after every step.

A *step* is one moment of simulated time: the clock advances to the next scheduled call and
runs everything due then. All randomness comes from ``random.Random(seed)``; the global
``random`` that controller.py and fetcher.py use is seeded from it too, so one seed is one run
(``trace_hash`` says so). See docs/simulation.md.
"""

from __future__ import annotations

import functools

import gc
import hashlib
import logging
import os
import random
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from dataclasses import dataclass, field

from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment, state_path, topic_path
from twisted_broker.replication.admin import create_replicated_topic
from twisted_broker.replication.log_failures import OfflineReplicas
from twisted_broker.replication.leader import LeaderPartition
from twisted_broker.replication.replica import Replica
from twisted_broker.storage.log_manager import parse_partition_directory

from tests.simulation.clients import Clients
from tests.simulation.faults import FaultSchedule
from tests.simulation.invariants import Checker
from tests.simulation.sim_broker import SimBroker
from tests.simulation.sim_disk import DiskModel
from tests.simulation.sim_network import SimNetwork
from tests.simulation.sim_zookeeper import SimZooKeeper, ZooKeeperServer

__all__ = ["SimConfig", "World", "run_seed", "run_seed_isolated", "Result"]

TOPIC = "sim"


@functools.lru_cache(maxsize=1024)
def _decoded_state(data: bytes) -> PartitionState:
    """A state node's value, decoded once: the invariants read every partition's state after
    every step (about a third of a run's CPU when each read decoded the JSON again); the
    values are bytes and PartitionState is frozen, so a decoded value can be shared."""
    return PartitionState.decode(data)


@dataclass(frozen=True)
class SimConfig:
    brokers: int = 3
    partitions: int = 2
    replication_factor: int = 3
    min_insync_replicas: int = 2
    session_timeout_ms: int = 6000
    lag_time_max_ms: int = 3000
    fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms, the default
    fetch_max_bytes: int = 64 * 1024
    max_message_size: int = 16 * 1024
    segment_bytes: int = 32 * 1024
    flush_interval_messages: int = 10_000  # by time, as the broker's default: a crash loses a tail
    flush_interval_ms: int = 1000
    fault_seconds: float = 40.0
    settle_seconds: float = 60.0  # the liveness bound once faults stop
    faults: tuple[str, ...] = ("crash", "crash_controller", "partition", "isolate", "zk", "disk", "reset")
    mean_fault_interval_s: float = 2.0
    network_reset_rate: float = 0.0
    produce_interval_s: float = 0.04
    consume_interval_s: float = 0.08
    large_message_rate: float = 0.0  # produces of one message larger than fetch_max_bytes
    acks_all_rate: float = 0.7
    # False: do not check that an acks=all acknowledgement had min.insync.replicas copies
    # (a mix aimed at another defect, so that defect 1 does not end its runs first).
    check_min_insync: bool = True
    # True: producers send only to brokers that have read ZooKeeper (ClusterState.synced), so
    # that a mix aimed at another defect is not ended first by a restarted broker taking a
    # replicated topic for a 0.7 one (the finding of docs/simulation.md).
    producers_skip_unsynced: bool = False
    # False: go on after a violation (each kind is reported once, with how often it broke).
    stop_at_violation: bool = True


@dataclass
class Result:
    seed: int
    violations: list[str]
    steps: int
    sim_seconds: float
    faults: list[tuple[int, float, str]]
    trace_hash: str
    acked: int
    consumed: int
    lost_with_page_caches: int
    unhandled_errors: int
    kinds: dict = field(default_factory=dict)
    fault_counts: dict = field(default_factory=dict)
    log_tail: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"seed {self.seed}: {len(self.violations)} violation(s), {self.steps} steps, "
                 f"{self.sim_seconds:.1f} simulated s, {self.acked} acks=all acknowledged, {self.consumed} reads, "
                 f"trace {self.trace_hash[:16]}"]
        for violation in self.violations:
            lines.append(f"  VIOLATION: {violation}")
        if self.kinds and sum(self.kinds.values()) > len(self.violations):
            lines.append("  times broken: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items())))
        if self.violations:
            lines.append("  fault schedule (step, simulated time, fault):")
            lines += [f"    step {step:6d}  t={at:8.3f}  {what}" for step, at, what in self.faults]
            lines.append("  last broker log lines:")
            lines += [f"    {line}" for line in self.log_tail[-25:]]
        return "\n".join(lines)


class _LogTail(logging.Handler):
    def __init__(self, world) -> None:
        super().__init__(logging.INFO if world.verbose else logging.WARNING)
        self.world = world

    def emit(self, record) -> None:
        line = f"t={self.world.clock.seconds():.3f} {record.levelname} {record.getMessage()}"
        if self.world.verbose:
            print(line)
        self.world.log_lines.append(line[:300])
        if len(self.world.log_lines) > 200:
            del self.world.log_lines[:100]


class World:
    def __init__(self, seed: int, config: SimConfig, workdir: str, *, verbose: bool = False) -> None:
        self.seed, self.config, self.workdir = seed, config, workdir
        self.verbose = verbose  # every broker log line and trace line printed as it happens
        self.rng = random.Random(seed)
        random.seed(self.rng.random())  # anything else that draws from the global generator
        self.clock = Clock()
        self.steps = 0
        self._hash = hashlib.sha256()
        self.log_lines: list[str] = []
        self.unhandled = 0
        self.unhandled_deferreds: list[str] = []
        self.zk_server = ZooKeeperServer(self.clock, self.rng, self.trace)
        self.network = SimNetwork(self.clock, self.rng, self.trace, reset_rate=config.network_reset_rate)
        self.disk = DiskModel(self.rng, self.trace)
        self.brokers: dict[int, SimBroker] = {}
        self.incarnations: dict[int, int] = {}
        self.checker = Checker(self)
        self.zk_server.write_hook = self.checker.state_written
        self.disk.on_truncate = self._truncated
        self.faults = FaultSchedule(self)
        self.clients = Clients(self)
        self.admin_zk = SimZooKeeper(self.zk_server, self.clock, "admin")

    # -- tracing -----------------------------------------------------------------------------

    def trace(self, line: str) -> None:
        if self.verbose:
            print(f"t={self.clock.seconds():.3f} TRACE {line}")
        self._hash.update(f"{self.clock.seconds():.6f} {line}\n".encode())

    def _twisted_event(self, event) -> None:
        """Twisted's log: a Deferred that failed with nobody to handle it (logged when it is
        collected, so not part of the trace: collection times are not the simulation's)."""
        failure = event.get("log_failure")
        if failure is not None:
            self.unhandled_deferreds.append(f"{failure.type.__name__}: {failure.getErrorMessage()}")
            frames = failure.frames[-1:] if failure.frames else []
            where = f" at {os.path.basename(frames[0][1])}:{frames[0][2]}" if frames else ""
            self.log_lines.append(f"t={self.clock.seconds():.3f} UNHANDLED in a Deferred: "
                                  f"{failure.type.__name__}: {failure.getErrorMessage()}{where}"[:300])

    def _unhandled_note(self) -> str:
        escaped = [e for e in self.unhandled_deferreds if not e.startswith("ConnectionLoss")]
        if not escaped:
            return ""
        return f"; {len(escaped)} exception(s) escaped into Deferreds, the first: {escaped[0]}"

    def unhandled_error(self, name: str, text: str) -> None:
        self.unhandled += 1
        last = text.strip().splitlines()[-1]
        self.trace(f"unhandled error in {name}: {last}")
        self.log_lines.append(f"t={self.clock.seconds():.3f} UNHANDLED in {name}: {last}")

    # -- the cluster -------------------------------------------------------------------------

    def broker_dir(self, broker_id: int) -> str:
        return os.path.join(self.workdir, f"broker{broker_id}")

    def broker(self, broker_id: int) -> SimBroker | None:
        broker = self.brokers.get(broker_id)
        return broker if broker is not None and broker.alive else None

    def live_brokers(self) -> list[SimBroker]:
        return [b for _, b in sorted(self.brokers.items()) if b.alive]

    def partitions(self) -> list[tuple[str, int]]:
        return [(TOPIC, p) for p in range(self.config.partitions)]

    def zk_state(self, tp) -> tuple[PartitionState | None, int | None]:
        node = self.zk_server.nodes.get(state_path(*tp))
        return (None, None) if node is None else (_decoded_state(node.data), node.version)

    def assignment(self, tp) -> tuple[int, ...]:
        node = self.zk_server.nodes.get(topic_path(TOPIC))
        return TopicAssignment.decode(node.data).replicas.get(tp[1], ()) if node else ()

    def restart(self, broker_id: int) -> None:
        incarnation = self.incarnations[broker_id] = self.incarnations.get(broker_id, -1) + 1
        broker = SimBroker(self, broker_id, self.broker_dir(broker_id), incarnation)
        self.brokers[broker_id] = broker
        self.network.brokers[self.network.address(broker_id)] = broker
        broker.start()

    def crash(self, broker_id: int, *, torn: bool) -> None:
        broker = self.brokers[broker_id]
        if not broker.alive:
            return
        broker.crash()
        self.network.crashed(broker_id)
        survived = self.disk.crash(broker.log_dir, torn=torn)
        by_partition = {}
        for directory, end in survived.items():
            parsed = parse_partition_directory(os.path.basename(directory))
            if parsed is not None:
                by_partition[parsed] = end
        self.checker.crashed(broker_id, by_partition)

    def _truncated(self, directory: str, offset: int) -> None:
        parsed = parse_partition_directory(os.path.basename(directory))
        broker_dir = os.path.dirname(directory)
        for broker in self.live_brokers():
            if broker.log_dir == broker_dir and parsed is not None:
                self.checker.truncated(broker.broker_id, broker.incarnation, parsed, offset)

    # -- running ---------------------------------------------------------------------------

    def run(self) -> Result:
        config = self.config
        logger = logging.getLogger("twisted_broker")
        handler, level = _LogTail(self), logger.level
        logger.addHandler(handler)
        logger.setLevel(handler.level)
        logger.propagate, propagate = False, logger.propagate
        globalLogPublisher.addObserver(self._twisted_event)
        original = LeaderPartition.follower_fetched
        checker = self.checker

        def follower_fetched(leader, replica, offset, now_ms, **kwargs):  # a probe, the rule unchanged
            in_sync, high_watermark = replica in leader.isr, leader.high_watermark
            decision = original(leader, replica, offset, now_ms, **kwargs)
            if in_sync and offset < high_watermark and decision.propose_isr is not None \
                    and replica not in decision.propose_isr:
                checker.follower_dropped(leader, replica, offset, high_watermark)
            return decision
        LeaderPartition.follower_fetched = follower_fetched
        original_lead = Replica.become_leader

        def become_leader(replica, state, *args, **kwargs):  # a probe: nothing may stop a broker here
            try:
                return original_lead(replica, state, *args, **kwargs)
            except Exception as exc:
                checker.violation(f"{replica.name}: taking office at epoch {state.leader_epoch} raised {exc!r} (log end "
                                  f"{replica.log.written_end}, epochs {[(e.epoch, e.start_offset) for e in replica.epochs.entries]}"
                                  f"): the exception stops this broker's ZooKeeper subscribers (defect 2)",
                                  "become-leader-raised")
                raise
        Replica.become_leader = become_leader
        original_give_up = OfflineReplicas.add

        def give_up(offline, topic, partition, error):  # a probe: the copy on a failed disk is gone
            original_give_up(offline, topic, partition, error)
            checker.gave_up(offline.broker_id, (topic, partition))
        OfflineReplicas.add = give_up
        try:
            with self.disk:
                self._run(config)
        finally:
            LeaderPartition.follower_fetched = original
            Replica.become_leader = original_lead
            OfflineReplicas.add = original_give_up
            globalLogPublisher.removeObserver(self._twisted_event)
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
        return Result(self.seed, list(self.checker.violations), self.steps, self.clock.seconds(), list(self.faults.events),
                      self._hash.hexdigest(), self.checker.acked, self.clients.consumed,
                      self.checker.lost_with_page_caches, self.unhandled, dict(self.checker.kinds),
                      dict(self.faults.counts), list(self.log_lines))

    def _run(self, config: SimConfig) -> None:
        for broker_id in range(config.brokers):
            self.restart(broker_id)
        self.admin_zk.start()
        created = create_replicated_topic(self.admin_zk, TOPIC, partitions=config.partitions,
                                          replication_factor=config.replication_factor,
                                          live_brokers=list(range(config.brokers)),
                                          start=random.Random(f"{self.seed}-topic").randrange(config.brokers))
        created.addErrback(lambda failure: self.checker.violation(f"creating the topic failed: {failure.value!r}",
                                                                  "setup"))
        start = 2.0  # let the first leaders be elected
        self.clock.callLater(start, self.clients.start)
        self.clock.callLater(start, self.faults.start)
        heal_at = start + config.fault_seconds
        self.clock.callLater(heal_at, self.faults.heal_all)
        self.clock.callLater(heal_at + config.settle_seconds * 0.5, self.clients.stop)
        deadline = heal_at + config.settle_seconds
        while not (self.checker.violations and config.stop_at_violation):
            calls = self.clock.getDelayedCalls()
            if not calls:
                break
            due = min(call.getTime() for call in calls)
            if due > deadline:
                break
            self.clock.advance(max(due - self.clock.seconds(), 0))
            self.steps += 1
            self.checker.after_step()
            if self.steps % 20000 == 0:
                gc.collect()  # Deferreds that failed unhandled are reported when collected
            if self.clock.seconds() > heal_at + 1 and not self.clients.running and self.checker.healthy() is None:
                break
        gc.collect()
        if not (self.checker.violations and config.stop_at_violation):
            problem = self.checker.healthy()
            if problem is not None:
                self.checker.violation(f"liveness: {config.settle_seconds:.0f} s after the faults stopped: {problem}"
                                       f"{self._unhandled_note()}", "liveness")
            elif self.checker.pending_acks:
                write = self.checker.pending_acks[0]
                self.checker.violation(f"acknowledged acks=all write at {write.tp[0]}-{write.tp[1]}:{write.offset} "
                                       f"never appears in the committed history", "ack-never-committed")
        for broker in self.live_brokers():
            broker.crash()


def run_seed(seed: int, config: SimConfig | None = None, *, verbose: bool = False) -> Result:
    workdir = tempfile.mkdtemp(prefix=f"sim-{seed}-")
    try:
        return World(seed, config or SimConfig(), workdir, verbose=verbose).run()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


_isolated_pool: ProcessPoolExecutor | None = None


def run_seed_isolated(seed: int, config: SimConfig | None = None) -> Result:
    """``run_seed`` in an interpreter started with PYTHONHASHSEED=0, as ``make simulate`` runs
    it: a set of strings iterates in an order that depends on the hash seed, so the same seed
    takes another path in a process whose hash seed differs (a pytest worker's is random). One
    such interpreter per calling process runs every seed in turn, as each of ``make
    simulate``'s does (starting one, ~0.7 CPU-s, per seed was most of a short seed's cost)."""
    global _isolated_pool
    if _isolated_pool is None:
        previous = os.environ.get("PYTHONHASHSEED")
        os.environ["PYTHONHASHSEED"] = "0"  # read by the spawned interpreter at its start
        try:
            _isolated_pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"))
            _isolated_pool.submit(int).result()  # started now, with the variable set
        finally:
            if previous is None:
                del os.environ["PYTHONHASHSEED"]
            else:
                os.environ["PYTHONHASHSEED"] = previous
    return _isolated_pool.submit(run_seed, seed, config).result()

