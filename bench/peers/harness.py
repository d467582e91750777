"""What every system of the comparison shares: server processes, client processes, payloads,
disk usage, the parent's orchestration of one measurement.

Servers. Each system's server is a ``ServerProcess``: a foreground child on 127.0.0.1 with a
free port and its data under a directory of its own (inside one temp directory per run), in a
new session so that a terminal's Ctrl-C reaches the harness only, and stopped by the harness
(SIGTERM to its process group, SIGKILL after a grace period) even when a measurement fails.

Clients. Every measurement runs its clients in child processes of their own
(``python -m bench.peers.worker``), as bench/loadgen.py does for broker_bench: a client sets
itself up (connects, subscribes, builds its payloads), prints ``ready``, waits for a line on
stdin, then runs with its own clock and prints one JSON line. Set-up is never timed, and no
client shares an interpreter (or a GIL) with another or with the harness.

Payloads. 200 ASCII bytes each: hex digits from a seeded generator, a pool of 1,024 distinct
ones used in turn (gzip shrinks them to about half; none of the peers compresses). Latency
payloads start with the sender's ``time.monotonic_ns()`` in 20 digits: CLOCK_MONOTONIC is the
same clock in every process of the machine, so a receiver subtracts it from its own reading.
"""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from bench.line_process import LineProcess

MESSAGE_BYTES = 200
BATCH = 50
POOL_SIZE = 1024
LATENCY_RATE = 5000  # messages/s
LATENCY_WARMUP = 0.02  # the first 2% of latency samples (connections warming up) are dropped
TIMEOUT_S = 600.0
REPO = Path(__file__).resolve().parents[2]


# -- payloads ------------------------------------------------------------------------------------

def payload_pool(count: int = POOL_SIZE, size: int = MESSAGE_BYTES, seed: int = 7) -> list[bytes]:
    """``count`` distinct payloads of ``size`` ASCII hex digits (seeded: every run and every
    system sends the same bytes)."""
    rng = random.Random(seed)
    return [rng.randbytes(size // 2 + 1).hex()[:size].encode() for _ in range(count)]


def payloads(n: int, pool: list[bytes] | None = None) -> Iterator[bytes]:
    """The pool's payloads in turn, ``n`` in all."""
    pool = pool or payload_pool()
    size = len(pool)
    for i in range(n):
        yield pool[i % size]


_PAD = payload_pool(1)[0]


def stamped_payload(size: int = MESSAGE_BYTES) -> bytes:
    """A latency payload: the monotonic clock now, in 20 digits, padded to ``size``."""
    return b"%020d" % time.monotonic_ns() + _PAD[: size - 20]


def latency_ns(payload: bytes | memoryview, now_ns: int) -> int:
    return now_ns - int(bytes(payload[:20]))


def paced(n: int, rate: float) -> Iterator[int]:
    """Yield 0..n-1, message i no earlier than i/rate s after the start. Late messages go out
    at once (their own timestamps say when): sleeping, not spinning, so the 2 cores stay
    with the servers."""
    start = time.monotonic()
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield i


def latency_summary(samples_ns: list[int]) -> dict:
    """p50/p99/p99.9/max in ms of the samples after the warm-up share."""
    kept = sorted(samples_ns[int(len(samples_ns) * LATENCY_WARMUP):])
    if not kept:
        return {"samples": 0}
    pick = lambda q: kept[min(len(kept) - 1, int(q * len(kept)))] / 1e6  # noqa: E731
    return {"samples": len(kept), "p50_ms": pick(0.50), "p99_ms": pick(0.99), "p999_ms": pick(0.999),
            "max_ms": kept[-1] / 1e6,
            "mean_ms": sum(kept) / len(kept) / 1e6}


# -- processes -----------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path: str | os.PathLike, max_bytes: int = 3000) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - max_bytes))
            return file.read().decode("utf-8", "replace")
    except OSError:
        return ""


def debian_version(package: str) -> str:
    """The installed version of a Debian package ('' if dpkg does not know it)."""
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ""


class ServerProcess:
    """A server run in the foreground as a child, on loopback, data under ``directory``.

    Subclasses set ``self.port`` and ``self.data_dir`` in ``__init__`` and implement
    ``command()`` (argv and extra environment) and, if a listening port is not enough,
    ``ready()``.
    """

    name = "server"
    start_timeout_s = 60.0
    stop_timeout_s = 30.0

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.port = 0
        self.data_dir = directory
        self.log_file = os.path.join(directory, f"{self.name}.out")
        self.process: subprocess.Popen | None = None

    def command(self) -> tuple[list[str], Mapping[str, str]]:
        raise NotImplementedError

    def ready(self) -> bool:
        return port_open(self.port)

    def start(self) -> "ServerProcess":
        args, env = self.command()
        with open(self.log_file, "ab") as out:
            # A session of its own: Ctrl-C reaches only the harness, which stops it in order.
            self.process = subprocess.Popen(args, cwd=self.directory, env={**os.environ, **env},
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while not self.ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready within {self.start_timeout_s:.0f} s\n{self.log_tail()}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        """SIGTERM to the process group (a clean shutdown), SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever of the group is left (helpers the server forked)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def log_tail(self) -> str:
        return tail(self.log_file)

    def version(self) -> str:
        return ""


def peer_worker(system: str, role: str, options: dict) -> list[str]:
    """The command line of a worker process running ``role`` of ``system``'s Peer."""
    return [sys.executable, "-m", "bench.peers.worker", system, role, json.dumps(options)]


class Worker(LineProcess):
    """A client process speaking lines on stdin/stdout (a peer worker, or bench/loadgen.py);
    its stderr goes to a file in ``directory``. ``wrap`` runs it under another command
    (py-spy)."""

    def __init__(self, name: str, args: list[str], directory: str, *, wrap: list[str] | None = None) -> None:
        super().__init__(name, [*(wrap or []), *args], directory, timeout_s=TIMEOUT_S, cwd=REPO)

    def expect_ready(self, timeout_s: float = 120.0) -> None:
        self.expect("ready", timeout_s)

    def go(self) -> None:
        self.send("go")

    def result(self, timeout_s: float = TIMEOUT_S) -> dict:
        line = self.line(timeout_s)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise RuntimeError(f"{self.name}: not a result: {line!r}\n{self.stderr_tail()}") from None

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # a worker waiting for "go" exits at end of input
            except OSError:
                pass
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_pipes()


# -- disk ----------------------------------------------------------------------------------------

def disk_usage(path: str) -> tuple[int, int]:
    """(allocated bytes, apparent bytes) of every file under ``path``: what ``du`` and
    ``du --apparent-size`` count. Files that vanish while walking are skipped."""
    allocated = apparent = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


def settled_disk_usage(path: str, *, quiet_s: float = 1.0, max_s: float = 20.0) -> tuple[int, int]:
    """disk_usage once it has not changed for ``quiet_s`` (servers that write behind their
    acknowledgement get that long to finish), or after ``max_s``."""
    deadline = time.monotonic() + max_s
    last = disk_usage(path)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = disk_usage(path)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last


# -- the worker side -----------------------------------------------------------------------------

def wait_for_go() -> None:
    """Tell the parent this client is set up, and block until it says go.

    The objects of the setup (modules, client libraries) are frozen first, in every system's
    clients alike: a full garbage collection walking them stops a client for 10-30 ms here,
    which the latency test would otherwise charge to whichever system it hit.
    BENCH_NO_FREEZE=1 leaves them as they are, to compare.
    """
    if not os.environ.get("BENCH_NO_FREEZE"):
        gc.collect()
        gc.freeze()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if not sys.stdin.readline():
        sys.exit("the harness went away before the start signal")


def poll_until(done: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S, pause_s: float = 0.002) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(pause_s)
