"""Peer: what the harness needs from each system of the comparison (one module per system).

The parent process builds the system's server (``make_server``), creates and deletes its
queues (``create``/``delete``, with the server running); the worker processes run the client
roles. Every role sets itself up, calls ``go()`` (which prints ``ready`` and blocks until the
harness says go), runs with its own clock and returns a JSON-able dict:

=================  =============================================================================
produce            ``n`` messages, ``batch`` per send (1 or 50), never waiting for a reply per
                   message; the clock stops when the server reports all ``n`` stored
                   (``seconds``), ``sent_s`` is when the client had written the last one
consume            drain a backlog of ``n`` messages (``seconds``)
latency_consume    receive ``n`` stamped messages, return latency_summary (p50/p99 ms)
latency_produce    send ``n`` stamped messages, one per send, at ``rate`` per second
=================  =============================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from bench.peers.harness import ServerProcess

Go = Callable[[], None]


class Peer:
    key = ""  # the name in the JSON and on the command line
    label = ""  # the name in the table and chart
    # The documented choices (persistence, fsync, publish and consume modes), printed beside
    # the figures and written to the JSON.
    settings: dict[str, str] = {}
    # Tests of bench/paper.py's round this system does not run (e.g. "produce b1").
    skip: frozenset[str] = frozenset()

    def make_server(self, directory: str) -> ServerProcess:
        raise NotImplementedError

    def client_options(self, server: ServerProcess) -> dict:
        """What a worker needs to reach the server (JSON-able)."""
        return {"port": server.port}

    def create(self, server: ServerProcess, dest: str) -> None:
        """Declare the queue / stream / key ``dest`` (parent side, server running)."""

    def delete(self, server: ServerProcess, dest: str) -> None:
        """Drop ``dest`` and what it holds, to keep the server's memory flat between tests."""

    # -- worker side -----------------------------------------------------------------------------

    def roles(self) -> dict[str, Callable[..., dict]]:
        """What worker.py may run, by name."""
        return {"produce": self.produce, "consume": self.consume, "latency_consume": self.latency_consume,
                "latency_produce": self.latency_produce}

    def produce(self, *, port: int, dest: str, n: int, batch: int, go: Go, **_: object) -> dict:
        raise NotImplementedError

    def consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        raise NotImplementedError

    def latency_consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        raise NotImplementedError

    def latency_produce(self, *, port: int, dest: str, n: int, rate: float, go: Go, **_: object) -> dict:
        raise NotImplementedError
