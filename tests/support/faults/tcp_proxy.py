"""A fault-injecting TCP proxy for tests: put it between a broker and ZooKeeper and cut the
broker off (``blackhole``: bytes stop flowing both ways, every socket stays open, new
connections are accepted and hang) while its clients still reach it; ``heal`` lets the held
bytes through and forwards again. Threads, loopback only; ``close`` stops everything.
"""

from __future__ import annotations

import socket
import threading

Address = tuple[str, int]
POLL_S = 0.1


class BlackholeProxy:
    def __init__(self, upstream: Address) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL_S)
        self.address: Address = self._listener.getsockname()[:2]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, name=f"proxy-{self.address[1]}", daemon=True)]
        self._threads[0].start()

    @property
    def connect_string(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def blackhole(self) -> None:
        self._forwarding.clear()

    def heal(self) -> None:
        self._forwarding.set()

    def close(self) -> None:
        self._closed.set()
        self._forwarding.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets += [client, server]
            for source, target in ((client, server), (server, client)):
                thread = threading.Thread(target=self._pump, args=(source, target), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _wait_forwarding(self) -> bool:
        while not self._forwarding.wait(POLL_S):
            pass
        return not self._closed.is_set()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        source.settimeout(None)
        try:
            while self._wait_forwarding():  # a cut stops reading: the bytes wait in the kernel
                data = source.recv(1 << 16)
                if not data:
                    break
                if not self._wait_forwarding():  # read just before a cut: held until healed
                    break
                target.sendall(data)
        except OSError:
            pass
        _close(source)
        _close(target)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
