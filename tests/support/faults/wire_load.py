"""Many raw connections at once, for the hostile-input tests: the fuzz runner and a control client.

``run_cases`` pushes fuzz cases through up to ``concurrency`` non-blocking connections from one
thread (a selector): each connection sends its case, half-closes, and reads whatever comes
back until the broker closes it. ``ControlClient`` is the well-behaved client that must keep
being served meanwhile: it produces one numbered message at a time and waits until a fetch
sees it, timing each round.
"""

from __future__ import annotations

import errno
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterator

from tests.support.faults.load import read_response
from tests.support.faults.oracle import walk
from tests.support.spec_encoding import fetch, message_set_of, offsets, produce


class CaseRunner:
    def __init__(self, port: int, concurrency: int, case_timeout_s: float = 20.0) -> None:
        self.port = port
        self.concurrency = concurrency
        self.case_timeout_s = case_timeout_s
        self.connections = 0
        self.hung: list[bytes] = []  # cases whose connection the broker never closed
        self.bytes_received = 0

    def run(self, cases: Iterator[bytes]) -> None:
        selector = selectors.DefaultSelector()
        live: dict[socket.socket, list] = {}  # sock -> [data, sent, started, case]
        exhausted = False
        while live or not exhausted:
            while not exhausted and len(live) < self.concurrency:
                case = next(cases, None)
                if case is None:
                    exhausted = True
                    break
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", self.port))
                live[sock] = [case, 0, time.monotonic()]
                selector.register(sock, selectors.EVENT_WRITE)
                self.connections += 1
            for key, events in selector.select(timeout=0.5):
                sock = key.fileobj
                state = live[sock]
                if events & selectors.EVENT_WRITE:
                    self._write(sock, state, selector, live)
                elif events & selectors.EVENT_READ:
                    self._read(sock, selector, live)
            now = time.monotonic()
            for sock, state in list(live.items()):
                if now - state[2] > self.case_timeout_s:
                    self.hung.append(state[0])
                    self._close(sock, selector, live)

    def _write(self, sock, state, selector, live) -> None:
        data, sent = state[0], state[1]
        try:
            if sent < len(data):
                state[1] += sock.send(data[sent:sent + (1 << 20)])
            if state[1] >= len(data):
                sock.shutdown(socket.SHUT_WR)
                selector.modify(sock, selectors.EVENT_READ)
        except BlockingIOError:
            pass
        except OSError as exc:  # refused mid-send (reset, broken pipe): the broker closed it
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ECONNREFUSED, errno.ENOTCONN):
                raise
            self._close(sock, selector, live)

    def _read(self, sock, selector, live) -> None:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self.bytes_received += len(chunk)
        if not chunk:
            self._close(sock, selector, live)

    @staticmethod
    def _close(sock, selector, live) -> None:
        selector.unregister(sock)
        del live[sock]
        sock.close()


class ControlClient(threading.Thread):
    """Produce a numbered message, wait until a fetch returns it; repeat until stopped."""

    def __init__(self, port: int, topic: str = "control") -> None:
        super().__init__(daemon=True, name="control-client")
        self.port, self.topic = port, topic
        self.rounds = 0
        self.slowest_s = 0.0
        self.errors: list[str] = []
        self.expected = bytearray()
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
                while not self._halt.is_set():
                    started = time.monotonic()
                    messages = message_set_of(b"control %d" % self.rounds)
                    end = len(self.expected) + len(messages)
                    sock.sendall(produce(self.topic, 0, messages) + offsets(self.topic, 0, -1, 1))
                    latest = struct.unpack_from(">q", read_response(sock), 6)[0]
                    while latest < end:
                        time.sleep(0.002)
                        sock.sendall(offsets(self.topic, 0, -1, 1))
                        latest = struct.unpack_from(">q", read_response(sock), 6)[0]
                        if time.monotonic() - started > 20:
                            raise TimeoutError(f"round {self.rounds} not visible after 20 s")
                    sock.sendall(fetch(self.topic, 0, len(self.expected), 1 << 16))
                    body = read_response(sock)
                    entries = walk(body[2:])[0]
                    if body[:2] != b"\x00\x00" or not entries or entries[0].raw != messages:
                        raise AssertionError(f"round {self.rounds}: fetched {body[:40]!r}")
                    self.expected += messages
                    self.rounds += 1
                    self.slowest_s = max(self.slowest_s, time.monotonic() - started)
                    time.sleep(0.01)
        except Exception as exc:  # reported by the test
            self.errors.append(repr(exc))

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
