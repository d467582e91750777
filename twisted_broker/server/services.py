"""The broker's lifecycle as one Twisted service: start in order, stop in the reverse-safe order.

Start (twistd's privileged start, before the reactor runs, so blocking here stalls nothing):
open the logs (recovery), listen (each listener in order: the wire protocol first, then the
debug port if any), then register
in ZooKeeper with the bound port, so a broker is never advertised before it can answer (a
broker id that a live broker holds ends the start: one error line, exit status 1). Then
(reactor running) the flush and retention timers start and the topics on disk are registered.

Stop (spec: listeners first, then logs, then the registration): stop listening and drop the
connections (debug sessions too), so no request or debug command reaches a closing log; stop
the timers; flush and close every log and write the clean-shutdown marker; stop the fsync
process (or the flusher thread); close the ZooKeeper session. A crash skips all of it, so the
next start recovers.

The listeners come built (tap.py composes them: which protocols, on which endpoints), so this
package imports nothing from network/ or handlers/.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from twisted.application.service import MultiService, Service
from twisted.internet.defer import inlineCallbacks
from twisted.internet.interfaces import IReadWriteDescriptor
from twisted.internet.protocol import Factory
from twisted.internet.task import LoopingCall
from zope.interface import implementer

from twisted_broker.registry.broker_registration import BrokerIdInUse, BrokerRegistration
from twisted_broker.storage.flusher import Flusher, ThreadFlusher
from twisted_broker.storage.process_flusher import ProcessFlusher
from twisted_broker.storage.log_manager import LogManager

log = logging.getLogger(__name__)

FIRST_CLEANUP_DELAY_S = 60  # 0.7 runs the first retention pass a minute after start
FSYNC_RESTART_RETRY_S = 1.0  # after a failed start of a new fsync process


@dataclass(frozen=True)
class Listener:
    """A port of the broker: where it listens and the factory that answers there."""

    name: str  # for the log line: "wire protocol", "debug port"
    endpoint: object  # an IStreamServerEndpoint that listens at once (TCP, TLS)
    factory: Factory  # with disconnect_all(): a stopping broker drops its connections
    port_file: str | None = None  # the bound port is written here once started (for tests)


class StopInOrder(MultiService):
    """A MultiService that stops its children one after the other, newest first.

    MultiService stops them all at once; a broker needs its replication stopped (leaderships
    moved away through ZooKeeper, a controlled shutdown) before the broker service closes the
    ZooKeeper session and the listeners."""

    @inlineCallbacks
    def stopService(self):
        Service.stopService(self)
        for child in reversed(list(self)):
            yield child.stopService()


class BrokerService(Service):
    """Owns the logs, the flusher, the timers and the listeners of one broker.

    ``listeners[0]`` is the wire protocol: its bound port is ``port``, the one registered in
    ZooKeeper.
    """

    def __init__(self, *, logs: LogManager, listeners: Sequence[Listener], reactor,
                 flush_check_interval_ms: int, cleanup_interval_mins: int, flush_worker: str = "process",
                 registration: BrokerRegistration | None = None, zk_connect_timeout_ms: int = 6000) -> None:
        self.logs = logs
        self.listeners = tuple(listeners)
        self._ports = []  # the listening ports, in the order of listeners
        self._reactor = reactor
        self._flush_check_s = flush_check_interval_ms / 1000
        self._cleanup_s = cleanup_interval_mins * 60
        self.registration = registration
        self._zk_connect_timeout_s = zk_connect_timeout_ms / 1000
        self._flush_worker = flush_worker
        self._flusher: Flusher | None = None
        self._fsync_replies: FsyncReplies | None = None
        self._flush_loop = LoopingCall(self._flush_due)
        self._cleanup_loop = LoopingCall(self._cleanup)
        self._first_cleanup = None
        self.flush_errors = 0
        self.segments_deleted = 0

    @property
    def port(self) -> int:
        return self._ports[0].getHost().port

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        # Each fsync round is published on the reactor as soon as it returns: data waits for
        # no fetch and no timer to be seen.
        if self._flush_worker == "process":
            self._flusher = ProcessFlusher(on_flushed=lambda job: job.log.publish_flushed())
            self._fsync_replies = FsyncReplies(self._flusher, self._reactor)
            self._fsync_replies.start()
        else:
            self._flusher = ThreadFlusher(
                on_flushed=lambda job: self._reactor.callFromThread(job.log.publish_flushed))
        self.logs.flusher = self._flusher
        self.logs.open()
        for listener in self.listeners:
            self._ports.append(_listen_now(listener.endpoint, listener.factory))
            log.info("%s listening on port %d", listener.name, self._ports[-1].getHost().port)
        if self.registration is not None:
            self.logs.on_new_topic = self.registration.add_topic
            self.logs.on_topic_gone = self.registration.remove_topic
            try:
                self.registration.register_blocking(self.port, self.logs.topics_0_7(), self._zk_connect_timeout_s)
            except BrokerIdInUse as exc:
                # An operator's mistake, not a bug: one error line and exit status 1, no
                # traceback (twistd ends a start it refuses itself with sys.exit, e.g. "Another
                # twistd server is running"). twistd has sent stderr to its log by now, so the
                # line is logged rather than printed: the same place, without the duplicate.
                self._close_unstarted()
                log.error("refusing to start: %s", exc)
                raise SystemExit(1) from None
        # Last: whoever waits for these files takes the broker as started, so a broker that is
        # about to exit (its id is registered by another) must not have written them; nor one
        # whose reactor has not installed its signal handlers yet, which a SIGTERM would kill
        # without a clean shutdown. The wire protocol's goes last, as tests wait for it alone.
        self._reactor.callWhenRunning(self._write_port_files)

    def _write_port_files(self) -> None:
        for listener, port in reversed(list(zip(self.listeners, self._ports))):
            if listener.port_file:
                with open(listener.port_file, "w") as file:
                    file.write(f"{port.getHost().port}\n")

    def _close_unstarted(self) -> None:
        """Undo a privileged start that is refused: close the logs (nothing was written, so
        the next start need not recover them) and the flusher; the listening sockets close
        with the process."""
        self.logs.close()
        self._close_flusher()

    def _close_flusher(self) -> None:
        if self._fsync_replies is not None:
            self._fsync_replies.stop()
            self._fsync_replies = None
        if self._flusher is not None:
            self._flusher.close()
            self._flusher = None

    def startService(self) -> None:
        super().startService()
        self._flush_loop.clock = self._reactor
        self._cleanup_loop.clock = self._reactor
        self._flush_loop.start(self._flush_check_s, now=False)
        self._first_cleanup = self._reactor.callLater(
            min(FIRST_CLEANUP_DELAY_S, self._cleanup_s), lambda: self._cleanup_loop.start(self._cleanup_s))
        if self.registration is not None:
            self.registration.start()

    def _flush_due(self) -> None:
        if self._fsync_replies is not None:
            self._fsync_replies.flusher.send_closes()  # ended jobs no request told it of
        try:
            self.logs.flush_due()
        except OSError as exc:  # that log now refuses writes; the others go on
            self.flush_errors += 1
            log.error("flush failed: %s", exc)

    def _cleanup(self) -> None:
        self.segments_deleted += self.logs.cleanup()

    @inlineCallbacks
    def stopService(self):
        super().stopService()
        for port in self._ports:
            yield port.stopListening()
        for listener in self.listeners:
            listener.factory.disconnect_all()
        for loop in (self._flush_loop, self._cleanup_loop):
            if loop.running:
                loop.stop()
        if self._first_cleanup is not None and self._first_cleanup.active():
            self._first_cleanup.cancel()
        self.logs.close()
        self._close_flusher()
        if self.registration is not None:
            yield self.registration.stop()
        log.info("broker stopped cleanly")


@implementer(IReadWriteDescriptor)
class FsyncReplies:
    """The fsync process's socket in the reactor: replies applied when it is readable, held
    back requests sent when it is writable again (watched for writing only while stalled)."""

    def __init__(self, flusher: ProcessFlusher, reactor) -> None:
        self.flusher = flusher
        self._reactor = reactor
        self._retry = None
        flusher.on_stalled = lambda: reactor.addWriter(self)

    def start(self) -> None:
        self._reactor.addReader(self)

    def stop(self) -> None:
        self._reactor.removeReader(self)
        self._reactor.removeWriter(self)
        if self._retry is not None and self._retry.active():
            self._retry.cancel()

    def fileno(self) -> int:
        return self.flusher.fileno()

    def doRead(self) -> None:
        # An exception escaping doRead would make the reactor drop this reader, and no flush
        # would be published again: log it and go on.
        try:
            alive = self.flusher.read_replies()
        except Exception:  # noqa: BLE001
            log.exception("applying the fsync process's replies failed")
            return
        if not alive:
            self._reactor.removeReader(self)  # before restart() closes the old socket
            self._reactor.removeWriter(self)
            self._restart()

    def doWrite(self) -> None:
        # Watched for writing from the flusher's on_stalled until nothing is held back (a
        # reply may have sent the backlog already: then this only stops the watching).
        try:
            self.flusher.send_backlog()
        except Exception:  # noqa: BLE001
            log.exception("sending held back requests to the fsync process failed")
        if not self.flusher.stalled:
            self._reactor.removeWriter(self)

    def _restart(self) -> None:
        try:
            self.flusher.restart()
        except Exception:  # noqa: BLE001 - e.g. out of processes: the flushes wait, and we retry
            log.exception("cannot start a new fsync process; trying again in %g s", FSYNC_RESTART_RETRY_S)
            self._retry = self._reactor.callLater(FSYNC_RESTART_RETRY_S, self._restart)
            return
        self._reactor.addReader(self)

    def connectionLost(self, reason) -> None:
        pass

    def logPrefix(self) -> str:
        return "fsync-process"


def _listen_now(endpoint, factory: Factory):
    """Listen on ``endpoint`` and return the port; raise what the endpoint failed with.

    TCP and TLS endpoints listen at once, so the outcome is known before the reactor runs.
    """
    ports, failures = [], []
    endpoint.listen(factory).addCallbacks(ports.append, failures.append)
    if failures:
        failures[0].raiseException()  # e.g. the port is in use: twistd reports it and exits
    return ports[0]
