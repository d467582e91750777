"""Profiles of broker processes for the scale benchmark (``python -m bench.scale --profile DIR``):
py-spy sampling a running broker, summarised as text.

py-spy is not among the project's dependencies: ``pip install py-spy`` into the venv first
(the bench says so and goes on without profiles if it is missing). It samples 50 times a
second without pausing the broker (``--nonblocking``), keeping only the samples of the
thread that holds the GIL (``--gil``): Python's own work. (Its idle-thread filter alone let
threads waiting in epoll or on a Condition through, and they dominated.) So the samples per
second over ``rate`` are the share of a core the broker spent running Python code.
``summarise`` turns py-spy's raw (collapsed) stacks into the functions that took the most
samples: by themselves (the innermost frame) and with what they called; stacks whose
innermost frame is a wait (``WAITS``) are left out, for recordings made without ``--gil``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

RATE = 50
# Innermost frames that wait rather than work (selectors, the reactor's poll, a Condition).
WAITS = {"EpollSelector.select", "EPollReactor.doPoll", "Condition.wait", "selector_select",
         "SequentialThreadingHandler.select"}


def py_spy() -> str | None:
    """The py-spy beside this interpreter, or on PATH; None if neither exists."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Recording:
    """``py-spy record`` of ``pid`` for ``duration_s``, into ``directory/<name>.raw.txt``."""

    def __init__(self, directory: Path, name: str, pid: int, duration_s: float) -> None:
        self.name, self.pid, self.duration_s = name, pid, duration_s
        self.raw = directory / f"{name}.raw.txt"
        self.summary = directory / f"{name}.top.txt"
        directory.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [py_spy(), "record", "--pid", str(pid), "--duration", str(int(duration_s)), "--rate", str(RATE),
             "--format", "raw", "--nolineno", "--nonblocking", "--gil", "--output", str(self.raw)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def finish(self, timeout_s: float = 30.0) -> dict:
        """Wait for py-spy (stopping it past the timeout), write the summary, return its head."""
        try:
            _out, err = self._process.communicate(timeout=self.duration_s + timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            _out, err = self._process.communicate()
        if not self.raw.exists():
            return {"name": self.name, "error": err.decode(errors="replace")[-300:]}
        text, figures = summarise(self.raw.read_text(), self.duration_s)
        self.summary.write_text(f"# {self.name}: pid {self.pid}, {self.duration_s:.0f} s at {RATE} Hz\n{text}")
        return {"name": self.name, "file": str(self.summary), **figures}

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()


def _function(frame: str) -> str:
    """``name (path)`` -> ``path:name``, the path shortened to the package part."""
    name, _, where = frame.partition(" (")
    return f"{where.rstrip(')')}:{name}"


def _thread(frames: list[str]) -> str:
    """Which thread a stack ran on: the reactor's, kazoo's connection loop, or another."""
    names = {f.rpartition(":")[2] for f in frames}
    if "ReactorBase.mainLoop" in names:
        return "reactor"
    if "ConnectionHandler.zk_loop" in names:
        return "kazoo connection"
    return "kazoo callbacks" if any("SequentialThreadingHandler" in n for n in names) else "other"


def summarise(raw: str, duration_s: float, top: int = 25) -> tuple[str, dict]:
    """The text of the top functions by self samples, the project's functions by inclusive
    samples, and the share of each thread; and the figures."""
    own: Counter = Counter()
    inclusive: Counter = Counter()
    threads: Counter = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_function(f) for f in stack.split(";")]
        if frames[-1].rpartition(":")[2] in WAITS:
            continue
        total += int(count)
        own[frames[-1]] += int(count)
        threads[_thread(frames)] += int(count)
        for function in set(frames):
            if function.startswith("twisted_broker/"):
                inclusive[function] += int(count)
    busy = total / (RATE * duration_s) if duration_s else 0.0

    def share(n: int) -> str:
        return f"{n:7d} {100 * n / max(total, 1):5.1f}%"
    lines = [f"samples {total}: {busy:.2f} of a core running Python code", "", "threads:"]
    lines += [f"{share(n)}  {name}" for name, n in threads.most_common()]
    lines += ["", "self (innermost frame):"] + [f"{share(n)}  {f}" for f, n in own.most_common(top)]
    lines += ["", "inclusive, the project's functions:"] + [f"{share(n)}  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(lines) + "\n", {
        "samples": total, "busy_cores": round(busy, 3),
        "threads": {name: round(100 * n / max(total, 1), 1) for name, n in threads.most_common()},
        "top_self": [[f, round(100 * n / max(total, 1), 1)] for f, n in own.most_common(8)],
        "top_inclusive": [[f, round(100 * n / max(total, 1), 1)] for f, n in inclusive.most_common(12)]}
