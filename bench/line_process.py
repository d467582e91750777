"""A benchmark child process that speaks in lines on stdin/stdout, its stderr kept in a file.

The load generators (bench/loadgen.py) and the peer workers (bench/peers/worker.py) both
announce "ready", wait for a word, and answer with result lines: this is the one reader of that
protocol, with a deadline on every answer so a stuck child fails the run instead of hanging it.
"""

from __future__ import annotations

import os
import select
import subprocess
import time


class LineProcess:
    def __init__(self, name: str, args: list[str], directory: str, *, timeout_s: float,
                 **popen) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.stderr_path = os.path.join(directory, f"{name}.stderr")
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=stderr, bufsize=0, **popen)
        self._pending = b""

    def line(self, timeout_s: float | None = None) -> str:
        """The next line the child writes. Raises TimeoutError, or RuntimeError if it exits."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        out = self.process.stdout
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name}: no answer within {timeout_s:.0f} s\n{self.stderr_tail()}")
            if select.select([out], [], [], remaining)[0]:
                data = os.read(out.fileno(), 65536)
                if not data:
                    raise RuntimeError(f"{self.name} exited with {self.process.wait()}\n{self.stderr_tail()}")
                self._pending += data
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode()

    def expect(self, word: str, timeout_s: float | None = None) -> None:
        if (line := self.line(timeout_s)) != word:
            raise RuntimeError(f"{self.name}: expected {word!r}, got {line!r}\n{self.stderr_tail()}")

    def send(self, line: str) -> None:
        self.process.stdin.write(line.encode() + b"\n")

    def stderr_tail(self, max_bytes: int = 4000) -> str:
        try:
            with open(self.stderr_path, "rb") as file:
                file.seek(max(0, file.seek(0, os.SEEK_END) - max_bytes))
                return file.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass

