"""Muting a connection for a throttle time (Kafka's KIP-219; docs/security.md, "Quotas").

A handler whose quota throttles a request calls ``request.throttle(ms)`` (network/kafka.py
hands each request this connection's ``throttle``). The answer still leaves at once; from
then until the time is up the connection reads nothing from its socket, and a request
already read (it came in the same read) is held, through ``FramedConnection``'s ``hold``
hook, until the time is up, then served in order. Nothing waits: one timer per muted
connection, so other connections are served as before.

A mixin over ``FramedConnection`` (connection.py stays within its 400 lines): it uses the
connection's own pause flag, so that the connection's other reasons to stop reading (a
response streaming, a big request waiting for buffer space) and this one resume in either
order without one resuming what the other paused.
"""

from __future__ import annotations


class MutedConnection:
    """Mixed in before a FramedConnection subclass (KafkaModernProtocol)."""

    _muted_until_s = 0.0
    _unmute_call = None
    may_hold = False  # FramedConnection asks ``hold`` only once a mute has been set


    def throttle(self, throttle_ms: int) -> None:
        """Mute for ``throttle_ms`` from now (a longer mute already running is kept)."""
        clock = self._clock
        if throttle_ms <= 0 or clock is None or self._closing:
            return  # without a clock (unit tests on a StringTransport) nothing can wait
        until = clock.seconds() + throttle_ms / 1000
        if until <= self._muted_until_s:
            return
        self._muted_until_s = until
        self.may_hold = True
        if not self._paused:
            self._paused = True
            self.transport.pauseProducing()
        if self._unmute_call is not None and self._unmute_call.active():
            self._unmute_call.reset(throttle_ms / 1000)
        else:
            self._unmute_call = clock.callLater(throttle_ms / 1000, self._unmute)

    @property
    def muted(self) -> bool:
        return self._clock is not None and self._clock.seconds() < self._muted_until_s

    def hold(self, request, resume):
        if self._muted_until_s and self._clock is not None:
            remaining = self._muted_until_s - self._clock.seconds()
            if remaining > 0:
                return self._clock.callLater(remaining, resume)
        return super().hold(request, resume)

    def _resume(self, drained: bool) -> None:
        # The connection resumes reading once an answer is out; while muted, it must not.
        super()._resume(drained)
        if not self._closing and not self._paused and self.muted:
            self._paused = True
            self.transport.pauseProducing()

    def _unmute(self) -> None:
        self._unmute_call = None
        # Read again unless something else holds reading off; that resumes it when done.
        if not self._closing and self._paused and not self._stopped_serving() and not self._awaiting_budget:
            self._paused = False
            self.transport.resumeProducing()

    def connectionLost(self, reason=None) -> None:
        if self._unmute_call is not None and self._unmute_call.active():
            self._unmute_call.cancel()
        self._unmute_call = None
        super().connectionLost(reason)
