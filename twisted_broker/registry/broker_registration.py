"""This broker's nodes in ZooKeeper: ``/brokers/ids/<id>`` and ``/brokers/topics/<t>/<id>``.

Both are ephemeral (spec 5.2, 5.4): they vanish when the broker's session ends, so producers
and consumers watching the registry see a dead broker go. After a session expiry kazoo
reconnects with a new session and this class creates every node again. While ZooKeeper is
unreachable the broker keeps serving; topics created meanwhile are registered on reconnect.

A broker id registered with other data belongs to another broker, or to this one's previous
run whose session has not timed out yet (0.7 refused to start in both cases). We wait up to
one session timeout for it to vanish before refusing, so a quick restart after a crash works.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import deferLater

from twisted_broker.registry import paths
from twisted_broker.registry.zookeeper import CONNECTED, LOST, NodeExistsError, NoNodeError, ZooKeeper

log = logging.getLogger(__name__)


class BrokerIdInUse(RuntimeError):
    """A live broker holds our broker id in ZooKeeper; its message says which (and why)."""


class BrokerRegistration:
    def __init__(self, zk: ZooKeeper, *, broker_id: int, host: str, startup_ms: int,
                 partitions_for: Callable[[str], int], session_timeout_ms: int, clock) -> None:
        self._zk = zk
        self.info = paths.BrokerInfo(broker_id, paths.creator_id(host, startup_ms), host, 0)
        self._partitions_for = partitions_for
        self._session_timeout_s = session_timeout_ms / 1000
        self._clock = clock
        self._topics: set[str] = set()
        self.registered = False
        self.registrations = 0  # times the broker id node was created; > 1 after an expiry
        self._session_lost = False
        zk.add_state_listener(self._on_state)

    # -- start (before the reactor runs: blocking is allowed and wanted) ------------------

    def register_blocking(self, port: int, topics: list[str], connect_timeout_s: float) -> None:
        """Connect and create the broker id node; raise BrokerIdInUse if another broker holds it.

        If ZooKeeper does not answer within ``connect_timeout_s`` the broker starts anyway and
        registers when the connection comes.
        """
        self.info = paths.BrokerInfo(self.info.broker_id, self.info.creator_id, self.info.host, port)
        self._topics.update(topics)
        try:
            self._zk.start_blocking(connect_timeout_s)
        except Exception as exc:  # kazoo raises its own timeout error class
            log.warning("ZooKeeper not reachable (%s); serving without registration until it is", exc)
            self._zk.start_in_background()
            return
        client = self._zk.client
        path = paths.broker_id_path(self.info.broker_id)
        deadline = time.monotonic() + self._session_timeout_s * 1.5
        while True:
            try:
                client.create(path, self.info.encode(), ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                try:
                    existing, _ = client.get(path)
                except NoNodeError:
                    continue
                if existing == self.info.encode():
                    break
                if time.monotonic() > deadline:
                    client.stop()
                    client.close()
                    raise BrokerIdInUse(
                        f"broker id {self.info.broker_id} is already registered in ZooKeeper as "
                        f"{existing.decode(errors='replace')}: another broker uses this brokerid, or this "
                        f"broker restarted faster than the ZooKeeper session timeout") from None
                time.sleep(0.2)
        self.registrations += 1
        self.registered = True
        log.info("registered broker %d in ZooKeeper as %s", self.info.broker_id, self.info.encode().decode())

    def start(self) -> None:
        """Register the topics found on disk (reactor running)."""
        if self.registered:
            for topic in sorted(self._topics):
                self._register_topic(topic)

    # -- topics ----------------------------------------------------------------------------

    def add_topic(self, topic: str) -> None:
        """Register a topic this broker just created (LogManager.on_new_topic)."""
        if topic not in self._topics:
            self._topics.add(topic)
            if self.registered:
                self._register_topic(topic)

    def remove_topic(self, topic: str) -> None:
        """Forget a topic whose last log here was deleted (LogManager.on_topic_gone), so a new
        ZooKeeper session does not register it again; its node is the deleter's to remove."""
        self._topics.discard(topic)

    def _register_topic(self, topic: str) -> Deferred:
        path = paths.broker_topic_path(topic, self.info.broker_id)
        value = paths.encode_partition_count(self._partitions_for(topic))
        created = self._zk.create(path, value, ephemeral=True)
        created.addErrback(lambda failure: failure.trap(NodeExistsError))
        created.addErrback(lambda failure: log.warning("registering %s failed: %s", path, failure.getErrorMessage()))
        return created

    # -- session events --------------------------------------------------------------------

    def _on_state(self, state) -> None:
        if state == LOST:
            self._session_lost = True
            if self.registered:  # not after stop(), which closes the session on purpose
                log.warning("ZooKeeper session expired: broker %d will register again", self.info.broker_id)
            self.registered = False
        elif state == CONNECTED and (self._session_lost or not self.registered):
            self._session_lost = False
            self._reregister()

    @inlineCallbacks
    def _reregister(self):
        path = paths.broker_id_path(self.info.broker_id)
        deadline = self._clock.seconds() + self._session_timeout_s * 1.5
        reported = False
        while not self.registered:
            try:
                yield self._zk.create(path, self.info.encode(), ephemeral=True)
            except NodeExistsError:
                try:
                    existing, _ = yield self._zk.get(path)
                except NoNodeError:
                    continue
                except Exception as exc:  # the connection lost between the two requests
                    if not (yield self._after_failure(exc)):
                        return
                    continue
                if existing != self.info.encode():
                    if self._clock.seconds() > deadline and not reported:
                        reported = True  # once: the retries go on quietly
                        log.error("broker id %d is registered by %s; retrying until it goes",
                                  self.info.broker_id, existing.decode(errors="replace"))
                    yield _sleep(self._clock, 0.5)
                    continue
            except Exception as exc:
                if not (yield self._after_failure(exc)):
                    return
                continue
            self.registered = True
        self.registrations += 1
        log.info("registered broker %d in ZooKeeper again", self.info.broker_id)
        for topic in sorted(self._topics):
            self._register_topic(topic)

    @inlineCallbacks
    def _after_failure(self, exc: Exception):
        """A registration request failed: wait, then True to retry now, False when the
        connection is down (the next CONNECTED event starts again)."""
        log.warning("registering broker %d failed (%s); retrying", self.info.broker_id, str(exc) or type(exc).__name__)
        yield _sleep(self._clock, 1.0)
        return self._zk.connected

    def stop(self) -> Deferred:
        """Close the session: the ephemeral nodes vanish at once."""
        self.registered = False
        return self._zk.stop()


def _sleep(clock, seconds: float) -> Deferred:
    return deferLater(clock, seconds, lambda: None)
