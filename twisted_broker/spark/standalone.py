"""A Spark standalone cluster on loopback, from a pyspark package: ``make spark-cluster``.

    python -m twisted_broker.spark.standalone --python .venv-spark-worker/bin/python

starts a master and workers (two by default), each in its own JVM through the package's
``bin/spark-class`` (``org.apache.spark.deploy.master.Master``, ``...worker.Worker``), bound
to 127.0.0.1, prints the master's URL and runs until Ctrl-C. The package is the one
``--python`` imports as ``pyspark``: its version must be the driver's. Each process is its
own process group (a worker's executors are its children), and ``stop`` ends the groups.

``hide`` (root only, for tests): each worker starts in a private mount namespace
(``unshare --mount``) where a tmpfs covers those directories, except the ``keep`` paths
inside them, bound back in place; its executors inherit that view, so they cannot import
anything from a hidden checkout or virtualenv.

Default ports keep clear of the admin console's 8080: master 7077 (Spark's), its web UI 8180,
the workers' web UIs 8181, 8182...
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 90.0
SPARK_STOP_TIMEOUT_S = 10.0

# Run by /bin/sh inside the worker's new mount namespace: "$@" is the worker's command.
# A kept path is bound aside before its parent is covered, then bound back over the tmpfs.
_HIDE_SCRIPT = """set -e
stash=$1; hide=$2; keep=$3; shift 3
i=0
for path in $keep; do mkdir -p "$stash/$i"; mount --bind "$path" "$stash/$i"; i=$((i + 1)); done
for path in $hide; do mount -t tmpfs -o size=1m,mode=755 tmpfs "$path"; done
i=0
for path in $keep; do mkdir -p "$path"; mount --bind "$stash/$i" "$path"; i=$((i + 1)); done
exec "$@"
"""


START_ATTEMPTS = 3


class MasterPortTaken(RuntimeError):
    """The master's port was taken between its choice and the master's bind."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice; another process may take it)."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def spark_home(python: str) -> Path:
    """The directory of the pyspark package that ``python`` imports (its bin/ and jars/)."""
    found = subprocess.run([python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                           capture_output=True, text=True)
    if found.returncode:
        last = (found.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python} cannot import pyspark: {last}")
    return Path(found.stdout.strip())


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers of the pyspark package ``python`` imports."""

    python: str
    work_dir: Path
    workers: int = 2
    cores: int = 1  # per worker
    memory: str = "1g"  # per worker, for its executors
    port: int = 0  # the master's; 0: a free one
    webui_port: int = 0  # the master's; 0: a free one
    worker_webui_ports: Sequence[int] = ()  # none given: free ones
    hide: Sequence[Path] = ()
    keep: Sequence[Path] = ()
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}"

    def start(self) -> "StandaloneCluster":
        """Start the master and the workers; return once every worker is ALIVE at the master.
        Raises RuntimeError (with the log's last lines) if one exits or the wait times out."""
        home = spark_home(self.python)
        chosen_port, chosen_ui = self.port, self.webui_port
        for attempt in range(START_ATTEMPTS):
            # A port free a moment ago may be taken (by any client socket: the kernel hands
            # ephemeral ports out of the same range) before the master binds it; the master
            # then fails (spark.port.maxRetries=0 below) rather than moving to a port its
            # workers do not know, and the cluster starts again on other ports.
            self.port, self.webui_port = chosen_port or free_port(), chosen_ui or free_port()
            try:
                return self._start_once(home)
            except MasterPortTaken:
                if attempt == START_ATTEMPTS - 1 or chosen_port:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, home: Path) -> "StandaloneCluster":
        self.processes = []
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": LOOPBACK, "SPARK_NO_DAEMONIZE": "1",
               "SPARK_MASTER_OPTS": (os.environ.get("SPARK_MASTER_OPTS", "") + " -Dspark.port.maxRetries=0").strip()}
        spark_class = str(home / "bin" / "spark-class")
        try:
            self._spawn("master", [spark_class, MASTER_CLASS, "--host", LOOPBACK, "--port", str(self.port),
                                   "--webui-port", str(self.webui_port)], env)
            for index in range(self.workers):
                worker_ui = self.worker_webui_ports[index] if self.worker_webui_ports else free_port()
                command = [spark_class, WORKER_CLASS, "--host", LOOPBACK, "--webui-port", str(worker_ui),
                           "--cores", str(self.cores), "--memory", self.memory,
                           "--work-dir", str(self.work_dir / f"worker{index}"), self.master_url]
                self._spawn(f"worker{index}", self._hidden(command, index), env)
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _hidden(self, command: list[str], index: int) -> list[str]:
        if not self.hide:
            return command
        stash = self.work_dir / f"keep{index}"
        stash.mkdir(exist_ok=True)
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _HIDE_SCRIPT, "hide",
                str(stash), " ".join(map(str, self.hide)), " ".join(map(str, self.keep)), *command]

    def _spawn(self, name: str, command: list[str], env: Mapping[str, str]) -> None:
        with open(self.work_dir / f"{name}.log", "ab") as log:
            self.processes.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                                   stderr=subprocess.STDOUT, start_new_session=True))

    def state(self) -> dict:
        """The master's JSON (workers, applications), from its web UI."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as answer:
            return json.load(answer)

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for name, process in zip(self._names(), self.processes):
                if process.poll() is not None:
                    tail = self.log_tail(name)
                    taken = "BindException" in tail or "could not bind" in tail
                    error = MasterPortTaken if name == "master" and taken else RuntimeError
                    raise error(f"the Spark {name} exited ({process.returncode}):\n{tail}")
            try:
                if self.state().get("aliveworkers", 0) >= self.workers:
                    return
            except OSError:
                pass  # the master's web UI is not up yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark workers not registered after {START_TIMEOUT_S:.0f} s:\n"
                                   f"{self.log_tail('master')}")
            time.sleep(0.25)

    def _names(self) -> list[str]:
        return ["master", *(f"worker{index}" for index in range(len(self.processes) - 1))]

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.work_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """End every process group started, workers first (SIGTERM, then SIGKILL)."""
        for process in reversed(self.processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + SPARK_STOP_TIMEOUT_S
        for process in reversed(self.processes):
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            _signal_group(process, signal.SIGKILL)  # executors left behind by a worker
        self.processes.clear()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="a Python with pyspark (the driver's version) and pyarrow: "
                                                        "the cluster's JVMs come from its pyspark")
    parser.add_argument("--work-dir", type=Path, default=Path("var/spark-cluster"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="per worker")
    parser.add_argument("--memory", default="1g", help="per worker")
    parser.add_argument("--port", type=int, default=7077)
    parser.add_argument("--webui-port", type=int, default=8180, help="the master's; workers take the next ones")
    args = parser.parse_args(argv)
    cluster = StandaloneCluster(args.python, args.work_dir.absolute(), workers=args.workers, cores=args.cores,
                                memory=args.memory, port=args.port, webui_port=args.webui_port,
                                worker_webui_ports=[args.webui_port + 1 + index for index in range(args.workers)])
    # Ctrl-C and kill both stop the cluster, also when started in the background (where a shell
    # without job control leaves SIGINT ignored, and Python then installs no handler for it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"starting a Spark master and {args.workers} workers (logs: {args.work_dir}/*.log)", flush=True)
    try:
        cluster.start()
        print(f"Spark master: {cluster.master_url}   web UI: {cluster.webui_url}\n"
              f"run the ETL on it:  PYSPARK_PYTHON={shlex.quote(os.path.abspath(args.python))} twisted-broker etl "
              f"--master {cluster.master_url} --zk ... --topic T --output DIR --checkpoint DIR\n"
              "Ctrl-C stops the cluster", flush=True)
        while all(process.poll() is None for process in cluster.processes):
            time.sleep(1)
        print("a Spark process exited; stopping the cluster", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
