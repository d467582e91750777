"""Hostile input on the debug port: random lines (commands with odd arguments, binary noise,
over-long lines, CRs and NULs) from many sessions at once. The broker must not crash, no
command may fail with an internal error (logged with a traceback), the wire port must keep
serving a well-behaved client, and a fresh debug session must still answer."""

from __future__ import annotations

import os
import random
import socket
import time

from tests.support.faults.wire_load import CaseRunner, ControlClient
from tests.support.reliability import full_log, record

WORDS = ["help", "stats", "topics", "partitions", "offsets", "tail", "dump", "zk", "flush", "quit",
         "HELP", "", "nope", "zk ls", "zk get", "zk rm"]
ARGS = ["control", "fz", "..", "a/b", "-1", "0", "1", "999999999999999999999", "-9223372036854775809",
        "latest", "earliest", "/", "/brokers", "/../..", "1e9", "0x10", "nan", "\u00fc", "\x00", "%s%n",
        "' OR 1=1", "x" * 300]


def random_line(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.15:
        return rng.randbytes(rng.randint(0, 200))  # noise, maybe not UTF-8, maybe with newlines
    if r < 0.17:
        return b"a" * rng.randint(1000, 3000)  # over the line limit
    words = [rng.choice(WORDS)] + [rng.choice(ARGS) for _ in range(rng.randint(0, 5))]
    line = " ".join(words).encode("utf-8", "surrogatepass")
    return line + (b"\r" if rng.random() < 0.2 else b"")


def debug_port(broker) -> int:
    path = broker.directory / "debug-port"
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, "no debug port file"
        time.sleep(0.05)
    return int(path.read_text())


def test_random_lines_on_the_debug_port_never_crash_the_broker(brokers, scale, request):
    seed = int(os.environ.get("RELIABILITY_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    broker = brokers(extra_args=["--debug", "tcp:0:interface=127.0.0.1",
                                 "--debug-port-file", "debug-port"]).start()
    port = debug_port(broker)
    lines = 0
    target = max(scale.fuzz_frames // 2, 1000)

    def cases():
        nonlocal lines
        while lines < target:
            batch = [random_line(rng) for _ in range(rng.randint(1, 8))]
            lines += len(batch)
            yield b"\n".join(batch) + (b"\n" if rng.random() < 0.9 else b"")

    control = ControlClient(broker.port)
    control.start()
    runner = CaseRunner(port, concurrency=8)
    runner.run(cases())
    control.stop()

    assert broker.process.poll() is None, f"seed {seed}: the broker died"
    assert not runner.hung, f"seed {seed}: debug sessions never closed: {runner.hung[:2]}"
    assert not control.errors and control.slowest_s < 5.0, (control.errors, control.slowest_s)
    log_text = full_log(broker)
    assert "internal error" not in log_text and "Traceback" not in log_text, \
        f"seed {seed}: " + "\n".join(line for line in log_text.splitlines() if "failed" in line)[:3000]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"help\n")
        answer = b""
        while answer.count(b"\n\n") < 2:  # the greeting, then the answer
            chunk = sock.recv(4096)
            assert chunk, answer
            answer += chunk
    assert b"commands" in answer
    record(request, cases_tried=lines, connections_held=runner.connections, faults_injected=lines,
           messages_checked=control.rounds)
