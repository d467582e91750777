"""One simulated broker, built from the real classes as tap.py builds them.

Real: LogManager (files in the broker's own directory, the inline flusher, the flush timer
the server's services run), ClusterState, Controller, ReplicaManager, Fetchers (their
connection from sim_network), ReplicationService, BrokerRegistration, and the 0.7 request
handler (handlers/kafka07/broker.Broker with ReplicationRequests) that serves followers and
clients. Simulated: the clock (``BrokerClock``, the crash boundary), ZooKeeper and the network.

A crash kills the broker's clock (every call it scheduled is cancelled, none can be added), so
nothing of the old incarnation runs again; the disk model then cuts its files. A restart
builds every object anew over the same directory, with the real recovery.
"""

from __future__ import annotations

import logging
import random
import traceback

from twisted.internet.task import LoopingCall

from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.handlers.kafka07.replication_requests import ReplicationRequests
from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.broker_registration import BrokerRegistration
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.controller import Controller
from twisted_broker.replication.fetcher import Fetchers
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.replication.service import ReplicationService
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager

from tests.simulation.sim_zookeeper import SimZooKeeper

log = logging.getLogger(__name__)

__all__ = ["BrokerClock", "SimBroker"]


class _Dead:
    """What callLater returns on a dead clock."""

    def active(self) -> bool:
        return False

    def cancel(self) -> None:
        pass


class BrokerClock:
    """The shared Clock, seen by one broker incarnation. An exception escaping a call is
    reported (the reactor would log it and go on), not raised out of the scheduler."""

    def __init__(self, clock, name: str, on_error) -> None:
        self._clock, self.name, self._on_error = clock, name, on_error
        self._calls: set = set()
        self.dead = False

    def seconds(self) -> float:
        return self._clock.seconds()

    def callLater(self, delay: float, f, *args, **kw):  # noqa: N802 (Twisted's name)
        if self.dead:
            return _Dead()
        call = self._clock.callLater(max(delay, 0), self._run, f, args, kw)
        self._calls.add(call)
        if len(self._calls) > 4096:
            self._calls = {c for c in self._calls if c.active()}
        return call

    def _run(self, f, args, kw) -> None:
        if self.dead:
            return
        try:
            f(*args, **kw)
        except Exception:
            self._on_error(self.name, traceback.format_exc())

    def getDelayedCalls(self):  # noqa: N802
        return [c for c in self._calls if c.active()]

    def kill(self) -> None:
        self.dead = True
        for call in self._calls:
            if call.active():
                call.cancel()
        self._calls.clear()


class SimBroker:
    def __init__(self, world, broker_id: int, log_dir: str, incarnation: int) -> None:
        self.world, self.broker_id, self.log_dir, self.incarnation = world, broker_id, log_dir, incarnation
        config = world.config
        self.name = f"broker{broker_id}"
        self.alive = True
        self.clock = BrokerClock(world.clock, f"{self.name}#{incarnation}", world.unhandled_error)
        self.zk = SimZooKeeper(world.zk_server, self.clock, f"{self.name}#{incarnation}",
                               session_timeout_ms=config.session_timeout_ms)
        policy = LogPolicy(file_size=config.segment_bytes, flush_interval_messages=config.flush_interval_messages,
                           flush_interval_ms=config.flush_interval_ms)
        self.logs = LogManager(log_dir, now=self.clock.seconds, policy_for=lambda topic: policy,
                               flusher=InlineFlusher())
        self.logs.open()
        self.cluster = ClusterState(self.zk, clock=self.clock)
        host, port = world.network.address(broker_id)
        # startup_ms makes the creatorId: a restart is a new registration, as after a real one.
        self.registration = BrokerRegistration(
            self.zk, broker_id=broker_id, host=host, startup_ms=int(self.clock.seconds() * 1000) + incarnation,
            partitions_for=lambda topic: 1, session_timeout_ms=config.session_timeout_ms, clock=self.clock)
        info = self.registration.info
        self.registration.info = registry_paths.BrokerInfo(info.broker_id, info.creator_id, info.host, port)
        self.manager = ReplicaManager(broker_id=broker_id, logs=self.logs, zk=self.zk, cluster=self.cluster,
                                      clock=self.clock, session=self.registration.info.creator_id,
                                      lag_time_max_ms=config.lag_time_max_ms,
                                      min_insync_replicas=config.min_insync_replicas)
        self.fetchers = Fetchers(self.manager, reactor=self.clock, fetch_wait_max_ms=config.fetch_wait_max_ms,
                                 fetch_max_bytes=config.fetch_max_bytes, connect=world.network.connector(self),
                                 rng=random.Random(f"{world.seed}-{broker_id}-{incarnation}-fetchers"))
        # Their own generators: the global one is shared with every thread of the process
        # (kazoo's retries, in a pytest worker that ran other tests), which made runs differ.
        self.controller = Controller(broker_id=broker_id, zk=self.zk, cluster=self.cluster, clock=self.clock,
                                     rng=random.Random(f"{world.seed}-{broker_id}-{incarnation}-controller"))
        self.stats = BrokerStats(RequestStats(60, self.clock.seconds))
        self.requests = ReplicationRequests(self.manager, stats=self.stats, max_message_size=config.max_message_size,
                                            default_replication_factor=1, num_partitions=1, clock=self.clock)
        self.handler = Broker(self.logs, self.stats, max_message_size=config.max_message_size,
                              replication=self.requests)
        self.service = ReplicationService(cluster=self.cluster, manager=self.manager, controller=self.controller,
                                          fetchers=self.fetchers, zk=self.zk, reactor=self.clock,
                                          controlled_shutdown=False, controlled_shutdown_max_ms=0)
        self._flush = LoopingCall(self._flush_due)
        self._flush.clock = self.clock

    def start(self) -> None:
        """As tap.py: ZooKeeper and the registration first, then replication's service."""
        self.zk.start()
        self.service.startService()
        self._flush.start(0.1, now=False)  # server/services.py's flush timer

    def _flush_due(self) -> None:
        try:  # as server/services.py: that log now refuses writes; the others go on
            self.logs.flush_due()
        except OSError as exc:
            self.world.trace(f"{self.name}: flush failed: {exc}")

    def crash(self) -> None:
        """Power off: no code of this incarnation runs again; open files are closed unflushed."""
        self.alive = False
        self.clock.kill()
        self.zk.crash()
        for log_ in list(self.logs.logs()):
            for segment in log_.segments:
                segment.close()

    def replica(self, topic: str, partition: int):
        return self.manager.replicas.get((topic, partition)) if self.alive else None
