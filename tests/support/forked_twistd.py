"""``twistd`` child processes forked from a warm interpreter, for the suite's brokers and consoles.

A broker started as ``python -c "from twisted.scripts.twistd import run; run()" -n broker ...``
spends ~0.5 of its ~0.6 CPU-seconds of start importing Twisted and the project; the suite starts
about 400 of them, on a machine whose two cores it keeps busy. So each pytest worker keeps one
*zygote*: a single-threaded Python that has imported ``twisted.scripts.twistd`` and the plugins'
modules (no reactor installed) and, on request, forks a child that runs ``twistd``'s ``run()``
with the request's argv, working directory, environment and standard files. The child is the
same code in a process of its own, on its own sockets: kill -9, SIGSTOP and a clean SIGTERM
behave as they do for an exec'd one (twistd re-raises SIGTERM after a clean stop, so that exit is
-SIGTERM here too).

``launch(argv, ...)`` returns a :class:`ForkedProcess`, which answers the ``subprocess.Popen``
calls the fixtures make (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``,
``terminate``, ``kill``). The child's parent is the zygote, so the zygote reaps it and reports
its exit status. ``TWISTD_LAUNCH=exec`` in the environment exec's every ``twistd`` instead;
tests/integration/test_broker_lifecycle.py always exec's the real command line.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the zygote imports before it forks anything: twistd and the broker's plugin module. Not
# webui.tap: Klein installs the default reactor on import, and each child installs its own.
PRELOAD = ("twisted.scripts.twistd", "twisted_broker.tap")
FRAME = struct.Struct(">I")


def exec_wanted() -> bool:
    return os.environ.get("TWISTD_LAUNCH", "fork") == "exec"


# --- the worker's side -------------------------------------------------------------------


class ForkedProcess:
    """A child of the zygote, answered as ``subprocess.Popen`` would answer for it."""

    def __init__(self, zygote: "Zygote", pid: int, args: list[str]) -> None:
        self._zygote = zygote
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_status(self.pid, timeout_s=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_status(self.pid, timeout_s=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass  # exited, not reaped yet: as Popen, nothing to signal

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The worker's end of one zygote process: a socket pair, and the exit statuses reported."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from tests.support.forked_twistd import zygote_main; zygote_main()",
             str(theirs.fileno())], pass_fds=[theirs.fileno()], cwd=ROOT)
        theirs.close()
        self.sock = mine
        self.lock = threading.Lock()  # one request or read at a time
        self.exits: dict[int, int] = {}
        self.buffer = b""
        reply = self._read_message(timeout_s=60.0)
        if reply != {"ready": True}:
            raise RuntimeError(f"the twistd zygote did not start: {reply!r}")

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], stdout, stderr) -> ForkedProcess:
        opened = []
        fds = []
        for inherited, f in enumerate((subprocess.DEVNULL, stdout, stderr)):
            if f is None:  # as Popen: this process's own
                fds.append(inherited)
                continue
            if f == subprocess.DEVNULL:
                f = open(os.devnull, "r+b")
                opened.append(f)
            fds.append(f.fileno())
        request = json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode()
        try:
            with self.lock:
                socket.send_fds(self.sock, [FRAME.pack(len(request)) + request], fds)
                while True:
                    reply = self._read_message(timeout_s=30.0)
                    if "pid" in reply:
                        return ForkedProcess(self, reply["pid"], argv)
                    self._note(reply)
        finally:
            for f in opened:
                f.close()

    def exit_status(self, pid: int, timeout_s: float | None) -> int | None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pid not in self.exits:
            # Short reads, so that another thread's spawn is not held up by a long wait.
            remaining = 0.1 if deadline is None else min(0.1, max(0.0, deadline - time.monotonic()))
            with self.lock:
                if pid in self.exits:
                    break
                reply = self._read_message(timeout_s=remaining, quiet=True)
            if reply is not None:
                self._note(reply)
            elif deadline is not None and time.monotonic() >= deadline:
                return None
        return self.exits[pid]

    def _note(self, reply: dict) -> None:
        if "exited" not in reply:
            raise RuntimeError(f"unexpected message from the twistd zygote: {reply!r}")
        self.exits[reply["exited"]] = reply["code"]

    def _read_message(self, timeout_s: float | None, quiet: bool = False) -> dict | None:
        """One message; None when ``quiet`` and none arrived within the time."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if len(self.buffer) >= FRAME.size:
                (size,) = FRAME.unpack_from(self.buffer)
                if len(self.buffer) >= FRAME.size + size:
                    body = self.buffer[FRAME.size:FRAME.size + size]
                    self.buffer = self.buffer[FRAME.size + size:]
                    return json.loads(body)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self.sock], [], [], remaining)
            if not readable:
                if quiet:
                    return None
                raise TimeoutError(f"the twistd zygote (pid {self.process.pid}) did not answer")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"the twistd zygote (pid {self.process.pid}) exited: {self.process.wait()}")
            self.buffer += chunk

    def close(self) -> None:
        self.sock.close()  # the zygote exits at end of file
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def launch(args: list[str], *, cwd: Path, stdout=None, stderr=None,
           env: dict[str, str] | None = None) -> "ForkedProcess | subprocess.Popen":
    """``twistd`` with ``args`` (``-n``, ``--logfile=...``, the plugin and its options)."""
    environment = dict(os.environ if env is None else env)
    if exec_wanted():
        return subprocess.Popen([sys.executable, "-c", "from twisted.scripts.twistd import run; run()", *args],
                                cwd=cwd, stdout=stdout, stderr=stderr, env=environment)
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = Zygote()
            atexit.register(_zygote.close)
        zygote = _zygote
    return zygote.spawn(["-c", *args], cwd, environment, stdout, stderr)


# --- the zygote's side ---------------------------------------------------------------------


def zygote_main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    for module in PRELOAD:
        __import__(module)
    # The plugin cache read and the plugins' modules imported once here, not in every child.
    from twisted.application.service import IServiceMaker
    from twisted.plugin import getPlugins
    list(getPlugins(IServiceMaker))
    if "twisted.internet.reactor" in sys.modules:
        raise RuntimeError("a preloaded module installed a reactor: the children would share its epoll")
    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, {"ready": True})
    buffer = b""
    while True:
        readable, _, _ = select.select([sock, wakeup_r], [], [])
        if wakeup_r in readable:
            os.read(wakeup_r, 4096)
        _report_exits(sock)
        if sock in readable:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            if not data:
                return
            buffer += data
            (size,) = FRAME.unpack_from(buffer)
            while len(buffer) < FRAME.size + size:  # the rest of a long request
                buffer += sock.recv(1 << 20)
            request = json.loads(buffer[FRAME.size:FRAME.size + size])
            buffer = buffer[FRAME.size + size:]
            pid = os.fork()
            if pid == 0:
                _child(request, fds, [sock.fileno(), wakeup_r, wakeup_w])
            for fd in fds:
                os.close(fd)
            _send(sock, {"pid": pid})


def _report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, message: dict) -> None:
    body = json.dumps(message).encode()
    sock.sendall(FRAME.pack(len(body)) + body)


def _child(request: dict, fds: list[int], inherited: list[int]) -> None:
    """Become ``python -c ... <argv>`` in ``cwd`` with ``env``: never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as Popen's close_fds
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]
        from twisted.scripts.twistd import run
        try:
            run()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if not isinstance(stop.code, (int, type(None))):
                print(stop.code, file=sys.stderr)
        atexit._run_exitfuncs()
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)
