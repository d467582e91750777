"""The suite's ``twistd`` and ``python -m twisted_broker`` processes, forked from a warm interpreter.

A broker started as ``python -c "from twisted.scripts.twistd import run; run()" -n broker ...``
spends ~0.5 of its ~0.6 CPU-seconds of start importing Twisted and the project, and a command
line run ~0.3; the suite starts about 420 brokers and 180 command lines, on a machine whose two
cores it keeps busy. So each pytest worker keeps one *zygote*: a single-threaded Python that has
imported ``twisted.scripts.twistd``, the broker's plugin module and the command line's modules
(no reactor installed) and, on request, forks a child that runs ``twistd``'s ``run()`` or
``runpy.run_module`` with the request's argv, working directory, environment and standard files,
its ``sys.std*`` made again from them as a new interpreter makes them. The child is the same
code in a process of its own, on its own sockets: kill -9, SIGSTOP and a clean SIGTERM behave as
they do for an exec'd one (twistd re-raises SIGTERM after a clean stop, so that exit is -SIGTERM
here too).

``launch(argv, ...)`` (twistd) returns a :class:`ForkedProcess`, which answers the
``subprocess.Popen`` calls the fixtures make (``pid``, ``returncode``, ``poll``, ``wait``,
``send_signal``, ``terminate``, ``kill``); ``run_module(name, args, ...)`` runs ``python -m
name args`` to completion as ``subprocess.run(..., capture_output=True)`` does. The child's
parent is the zygote, so the zygote reaps it and reports its exit status. ``TEST_PROCESSES=exec``
in the environment exec's every one instead; tests/integration/test_broker_lifecycle.py always
exec's the real command line, and tests/integration/test_forked_processes.py compares the two.
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
# What the zygote imports before it forks anything: twistd, the broker's plugin module, the
# command line and its usual tools. Not webui.tap: Klein installs the default reactor on
# import, and each child installs its own.
PRELOAD = ("twisted.scripts.twistd", "twisted_broker.tap", "twisted_broker.cli", "runpy",
           *(f"twisted_broker.tools.{name}" for name in ("produce", "consume", "offsets", "topics", "groups",
                                                         "dump_log", "mirror", "replication_admin", "users",
                                                         "acls", "quotas")))
FRAME = struct.Struct(">I")
# twistd of the interpreter running the tests, exec'd (twisted.scripts.twistd has no __main__ guard).
TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]


def exec_wanted() -> bool:
    return os.environ.get("TEST_PROCESSES", "fork") == "exec"


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
            [sys.executable, "-c", "from tests.support.forked_processes import zygote_main; zygote_main()",
             str(theirs.fileno())], pass_fds=[theirs.fileno()], cwd=ROOT)
        theirs.close()
        self.sock = mine
        self.lock = threading.Lock()  # one request or read at a time
        self.exits: dict[int, int] = {}
        self.buffer = b""
        reply = self._read_message(timeout_s=60.0)
        if reply != {"ready": True}:
            raise RuntimeError(f"the zygote did not start: {reply!r}")

    def spawn(self, request: dict, fds: list[int]) -> ForkedProcess:
        """Fork a child for ``request`` (argv, cwd, env; ``module`` for ``python -m``) whose
        descriptors 0, 1 and 2 are ``fds``."""
        body = json.dumps(request).encode()
        with self.lock:
            socket.send_fds(self.sock, [FRAME.pack(len(body)) + body], fds)
            while True:
                reply = self._read_message(timeout_s=30.0)
                if "pid" in reply:
                    return ForkedProcess(self, reply["pid"], request["argv"])
                self._note(reply)

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
            raise RuntimeError(f"unexpected message from the zygote: {reply!r}")
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
                raise TimeoutError(f"the zygote (pid {self.process.pid}) did not answer")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"the zygote (pid {self.process.pid}) exited: {self.process.wait()}")
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


def _the_zygote() -> Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = Zygote()
            atexit.register(_zygote.close)
        return _zygote


def _spawn(request: dict, files) -> ForkedProcess:
    """``files``: what the child's 0, 1 and 2 are, as Popen takes them (None: ours, DEVNULL, a
    file object, or a descriptor)."""
    opened, fds = [], []
    try:
        for inherited, f in enumerate(files):
            if f is None:
                fds.append(inherited)
            elif f == subprocess.DEVNULL:
                opened.append(open(os.devnull, "r+b"))
                fds.append(opened[-1].fileno())
            else:
                fds.append(f if isinstance(f, int) else f.fileno())
        return _the_zygote().spawn(request, fds)
    finally:
        for f in opened:
            f.close()


def launch(args: list[str], *, cwd: Path, stdout=None, stderr=None,
           env: dict[str, str] | None = None) -> "ForkedProcess | subprocess.Popen":
    """``twistd`` with ``args`` (``-n``, ``--logfile=...``, the plugin and its options), its
    standard input /dev/null."""
    environment = dict(os.environ if env is None else env)
    if exec_wanted():
        return subprocess.Popen([*TWISTD, *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                env=environment)
    return _spawn({"argv": ["-c", *args], "cwd": str(cwd), "env": environment},
                  (subprocess.DEVNULL, stdout, stderr))


def run_module(module: str, args: list[str], *, input: bytes | None = None, timeout_s: float, cwd: Path,
               env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m module args`` to completion, as ``subprocess.run(..., capture_output=True)``:
    stdout and stderr as bytes; on time-out the child is killed and TimeoutExpired raised."""
    command = [sys.executable, "-m", module, *args]
    if exec_wanted():
        return subprocess.run(command, input=input, capture_output=True, cwd=cwd, timeout=timeout_s, env=env)
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    try:
        child = _spawn({"argv": ["-m", *args], "module": module, "cwd": str(cwd), "env": dict(env)},
                       (in_r, out_w, err_w))
    except BaseException:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    child.args = command
    deadline = time.monotonic() + timeout_s
    output = {out_r: [], err_r: []}
    pending = memoryview(input or b"")
    writing = [in_w] if pending else []
    if not pending:
        os.close(in_w)
    reading = [out_r, err_r]
    try:
        while reading or writing:
            remaining = deadline - time.monotonic()
            readable, writable, _ = select.select(reading, writing, [], max(0.0, remaining))
            if not readable and not writable:
                child.kill()
                child.wait()
                raise subprocess.TimeoutExpired(command, timeout_s, b"".join(output[out_r]), b"".join(output[err_r]))
            for fd in writable:
                try:
                    pending = pending[os.write(fd, pending[:65536]):]
                except BrokenPipeError:
                    pending = pending[:0]
                if not pending:
                    os.close(fd)
                    writing = []
            for fd in readable:
                chunk = os.read(fd, 65536)
                if chunk:
                    output[fd].append(chunk)
                else:
                    reading.remove(fd)
        code = child.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    finally:
        for fd in {out_r, err_r, *writing}:  # each once: a number closed twice may be another thread's by then
            os.close(fd)
    return subprocess.CompletedProcess(command, code, b"".join(output[out_r]), b"".join(output[err_r]))


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
    """Become ``python -c ...`` (twistd) or ``python -m module`` with the request's argv, in
    its ``cwd`` with its ``env``: never returns."""
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
        _fresh_stdio()
        sys.argv = request["argv"]
        try:
            if "module" in request:
                import runpy
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            else:
                from twisted.scripts.twistd import run
                run()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if not isinstance(stop.code, (int, type(None))):
                print(stop.code, file=sys.stderr)
        threading._shutdown()  # as an interpreter's exit: join the threads that are not daemons
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


def _fresh_stdio() -> None:
    """``sys.stdin``, ``stdout`` and ``stderr`` on descriptors 0-2, buffered as a new
    interpreter would buffer them in this environment (PYTHONUNBUFFERED, a terminal or not)."""
    import io
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding = os.environ.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"

    def stream(fd: int, write: bool, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        buffered = raw if write and unbuffered else (io.BufferedWriter(raw) if write else io.BufferedReader(raw))
        tty = os.isatty(fd)
        return io.TextIOWrapper(buffered, encoding=encoding, errors=errors,
                                line_buffering=write and (tty or fd == 2), write_through=write and unbuffered)

    sys.stdin = sys.__stdin__ = stream(0, False, "strict")
    sys.stdout = sys.__stdout__ = stream(1, True, "strict")
    sys.stderr = sys.__stderr__ = stream(2, True, "backslashreplace")
