"""The telnet-style debug port: one command per line in, plain text out (README.md, Using it).

Usable from telnet or nc: lines end in ``\\n`` (a ``\\r`` before it is dropped), answers end in
``\\n`` too, and every answer (and the greeting) ends with an empty line, so a script reads up
to ``\\n\\n``. Empty lines are ignored. The commands themselves live in
``handlers/debug/commands.py``; this module only turns bytes into calls on the ``commands``
it is given: ``banner()``, ``execute(line)`` (a Deferred of an answer with ``lines`` and
``close``) and ``is_one_shot(line)``.

One-shots, as ZooKeeper answers its four-letter words: when the first line of a connection is
one of them (``ruok``, ``stat``, ``srvr``, ``cons``, ``mntr``; handlers/debug/four_letter_words.py) and
arrives before the greeting is due, the broker writes its answer (lines, no closing empty
line: the close ends it), ignores anything after the word and closes the connection. So the
greeting waits ``BANNER_DELAY_S`` after connecting: ``echo ruok | nc 127.0.0.1 9093`` prints
``imok`` alone, while a person at telnet sees the greeting before they can type. Once the
greeting is out, or after any other first line, the connection is an interactive session: a
word is an ordinary command there, answered like the others, and the session stays open.

A peer that shuts its side for writing (``nc`` at the end of its input, ``shutdown(SHUT_WR)``)
still gets the answers to what it sent, a last line without its newline included; then the
connection closes. (Twisted closes a connection on read EOF unless the protocol is
half-closeable, which is why this one is.)

Bounds that keep random input harmless: a line longer than ``MAX_LINE_BYTES`` is answered
``error: line too long`` and the connection closes (nothing of it is kept); commands run one
at a time, in order, and while one waits (ZooKeeper, a flush) the connection stops reading, so
at most one read's worth of lines waits behind it; a session idle for ``idle_timeout_s`` is
closed. A bug in a command is logged with its traceback and answered with an error line.

With a password (``--debug-password-file``; docs/security.md, "The debug port"), a connection
must send ``auth <password>`` before anything else, four-letter words included: until then no
command runs, there are no one-shots, and the greeting names no broker. A wrong password
mutes the connection (nothing more is read), logs one WARNING naming the peer and closes it
after ``AUTH_FAILURE_DELAY_S``; the right one is answered with the greeting.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import deque
from dataclasses import dataclass

from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Factory
from twisted.protocols.basic import LineOnlyReceiver
from twisted.protocols.policies import TimeoutMixin
from twisted.python.failure import Failure
from zope.interface import implementer

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 1024
MAX_WAITING_LINES = 1000  # lines queued behind a slow command; more than one read rarely holds
DEFAULT_IDLE_TIMEOUT_S = 300.0
# How long a new connection has to send a one-shot word before it is greeted: a piped nc
# sends its line within a millisecond or two of connecting; a person cannot type one this fast.
BANNER_DELAY_S = 0.2
AUTH_FAILURE_DELAY_S = 0.5  # how long a wrong password's connection stays open, muted
AUTH_BANNER = ["twisted_broker debug port: send 'auth PASSWORD' first"]
AUTH_REQUIRED = "error: authentication required: send 'auth PASSWORD' first"


@implementer(IHalfCloseableProtocol)
class DebugProtocol(LineOnlyReceiver, TimeoutMixin):
    delimiter = b"\n"
    MAX_LENGTH = MAX_LINE_BYTES

    def __init__(self, commands, *, idle_timeout_s: float | None, password: bytes | None = None) -> None:
        self._commands = commands
        # Compared as digests, so that the comparison's time says nothing of the length.
        self._password_digest = None if password is None else hashlib.sha256(password).digest()
        self._authenticated = password is None
        self._refused_call = None  # a wrong password's delayed close
        self._idle_timeout_s = idle_timeout_s
        self._waiting: deque[bytes] = deque()
        self._busy = False  # a command's answer is outstanding
        self._serving = False  # inside _serve: an answer that fires at once must not re-enter it
        self._paused = False
        self._closed = False
        self._banner_call = None  # the greeting, due unless a one-shot word comes first
        self._one_shot = False  # answering a first-line four-letter word, then closing
        self._read_closed = False  # the peer sends nothing more: close once all is answered
        self.factory: DebugFactory | None = None

    def connectionMade(self) -> None:
        if self.factory is not None:
            self.factory.connections.add(self)
        self.setTimeout(self._idle_timeout_s)
        self._banner_call = self.callLater(BANNER_DELAY_S, self._greet)

    def connectionLost(self, reason: Failure | None = None) -> None:
        if self.factory is not None:
            self.factory.connections.discard(self)
        self._closed = True
        self._waiting.clear()
        self.setTimeout(None)
        self._cancel_banner()
        if self._refused_call is not None and self._refused_call.active():
            self._refused_call.cancel()

    def readConnectionLost(self) -> None:
        """The peer shut its side for writing: answer what it sent, then close."""
        self._read_closed = True
        last, self._buffer = self._buffer, b""
        if last and not self._closed:
            self.lineReceived(last)  # a last line without its newline (printf ruok | nc)
        self._serve()

    def writeConnectionLost(self) -> None:
        """Not used: this protocol never shuts its side for writing alone."""

    def dataReceived(self, data: bytes) -> None:
        if self._closed:
            return
        self.resetTimeout()
        super().dataReceived(data)

    def lineReceived(self, line: bytes) -> None:
        if self._closed or self._one_shot or self._refused_call is not None or not line.strip():
            return
        if self._banner_call is not None:  # the first line, and the greeting is not out yet
            if not self._authenticated:
                self._cancel_banner()  # the greeting comes with a right password
            elif self._is_word(line):
                self._cancel_banner()
                self._one_shot = True
                self._waiting.clear()
            else:
                self._greet()
        if len(self._waiting) >= MAX_WAITING_LINES:
            self._close_with(["error: too many commands waiting"])
            return
        self._waiting.append(line)
        self._serve()

    def lineLengthExceeded(self, line: bytes) -> None:
        self._waiting.clear()
        self._close_with([f"error: line too long (more than {self.MAX_LENGTH} bytes)"])

    def _greet(self) -> None:
        """Write the greeting: its time has come, or the first line is no one-shot word."""
        self._cancel_banner()
        if not self._closed:
            self._write(self._commands.banner() if self._authenticated else AUTH_BANNER)

    def _cancel_banner(self) -> None:
        call, self._banner_call = self._banner_call, None
        if call is not None and call.active():
            call.cancel()

    def timeoutConnection(self) -> None:
        if self._busy:  # the command has its own timeout; idle means the peer says nothing
            self.resetTimeout()
            return
        self._close_with([f"error: idle for {self._idle_timeout_s:g} s: closing"])

    # -- one command at a time -----------------------------------------------------------------

    def _serve(self) -> None:
        if self._serving or self._refused_call is not None:
            return
        self._serving = True
        try:
            while self._waiting and not self._busy and not self._closed:
                self._run(self._waiting.popleft())
        finally:
            self._serving = False
        if self._busy and self._waiting and not self._paused:
            self._paused = True  # read no more until the slow answer is out
            self.transport.pauseProducing()
        elif not self._busy and self._paused and not self._closed:
            self._paused = False
            self.transport.resumeProducing()
        if self._read_closed and not self._busy and not self._waiting and not self._closed:
            self._cancel_banner()
            self._close_with(None)

    def _run(self, line: bytes) -> None:
        try:
            text = line.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError:
            self._write(["error: the command is not UTF-8 text"])
            return
        if not self._authenticated:
            self._authenticate(text)
            return
        self._busy = True
        answer = self._commands.execute(text)
        answer.addErrback(self._command_failed, text)
        answer.addCallback(self._answered)

    def _authenticate(self, text: str) -> None:
        command, _, given = text.strip().partition(" ")
        if command != "auth":
            self._write([AUTH_REQUIRED])
            return
        if hmac.compare_digest(hashlib.sha256(given.strip().encode("utf-8")).digest(), self._password_digest):
            self._authenticated = True
            self._write(self._commands.banner())
            return
        log.warning("debug port: wrong password from %s; closing the connection", self._peer())
        self._waiting.clear()
        self.setTimeout(None)
        self.transport.pauseProducing()
        self._refused_call = self.callLater(AUTH_FAILURE_DELAY_S, self._close_with,
                                            ["error: authentication failed"])

    def _command_failed(self, failure: Failure, text: str) -> _Failed:
        log.error("debug command %r from %s failed", text, self._peer(),
                  exc_info=(failure.type, failure.value, failure.getTracebackObject()))
        return _Failed([f"error: internal error ({failure.type.__name__}): see the broker's log"])

    def _answered(self, answer) -> None:
        self._busy = False
        if self._closed:
            return
        if self._one_shot:  # as ZooKeeper: the answer's lines, ended by the close
            self._close_with(answer.lines, end_mark=False)
            return
        if answer.close:
            self._close_with(answer.lines)
            return
        self._write(answer.lines)
        self.resetTimeout()
        self._serve()

    # -- output --------------------------------------------------------------------------------

    def _write(self, lines: list[str], end_mark: bool = True) -> None:
        # An empty line ends the answer, so one inside it is dropped rather than sent.
        text = "".join(line + "\n" for line in lines if line) + ("\n" if end_mark else "")
        self.transport.write(text.encode("utf-8", "backslashreplace"))

    def _close_with(self, lines: list[str] | None, end_mark: bool = True) -> None:
        """Write ``lines`` (an answer; None: nothing) and close."""
        if not self._closed:
            if lines is not None:
                self._write(lines, end_mark)
            self._closed = True
            self.setTimeout(None)
            self.transport.loseConnection()

    def _peer(self) -> str:
        peer = self.transport.getPeer()
        return f"{getattr(peer, 'host', peer)}:{getattr(peer, 'port', '')}"

    def _is_word(self, line: bytes) -> bool:
        if not self._authenticated:
            return False
        try:
            return self._commands.is_one_shot(line.decode("utf-8"))
        except UnicodeDecodeError:
            return False


@dataclass(frozen=True)
class _Failed:
    """The answer to a command that failed with a bug (logged with its traceback)."""

    lines: list[str]
    close: bool = False


class DebugFactory(Factory):
    """Builds debug sessions over one ``commands`` (handlers/debug/commands.py's
    DebugCommands); ``clock`` drives the idle timeouts, the greeting's delay and a wrong
    password's delayed close."""

    noisy = False

    def __init__(self, commands, *, clock, idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
                 password: bytes | None = None) -> None:
        self.commands = commands
        self.password = password  # required of every session before any command (None: none)
        self._clock = clock
        self.idle_timeout_s = idle_timeout_s
        self.connections: set[DebugProtocol] = set()

    def buildProtocol(self, addr) -> DebugProtocol:
        protocol = DebugProtocol(self.commands, idle_timeout_s=self.idle_timeout_s, password=self.password)
        protocol.factory = self
        protocol.callLater = self._clock.callLater  # TimeoutMixin's hook: the reactor or a task.Clock
        return protocol

    def disconnect_all(self) -> None:
        """Drop every session now (broker shutdown)."""
        for protocol in list(self.connections):
            protocol.transport.abortConnection()
