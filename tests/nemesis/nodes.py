"""The nemesis run's processes: a three-node ZooKeeper ensemble and five brokers, each in its
own network namespace (netns.Network), and the disk under one broker's log dir.

Every process is started in a session of its own (``start_new_session``), so a fault reaches
the whole node at once: kill -9 and SIGSTOP go to the process group (the broker and its fsync
process), as a crashed or frozen machine would. ``Disk`` is an ext4 file system on a loop
device: ``fill`` takes its free space (ENOSPC), ``fail`` shuts the file system down with
ext4's shutdown ioctl (every read, write and fsync then fails with EIO, as a dying disk's do;
there is no device mapper in this kernel), and ``repair`` unmounts it, runs e2fsck and mounts
it again (the broker is stopped first: repairing a disk takes the node down).
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from tests.support.forked_processes import TWISTD
from tests.nemesis.netns import Network
from twisted_broker.local_zookeeper import CLASSPATH, JVM_OPTIONS, QUORUM_MAIN_CLASS, Peer, config_text, is_serving

ZK_PORT, BROKER_PORT, KAFKA_PORT = 2181, 6667, 9094
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # as a pulled disk: nothing more reaches it, not even the journal


def reachable(address: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class Node:
    """A process in a namespace, started again after a kill with the same command."""

    def __init__(self, network: Network, name: str, directory: Path) -> None:
        self.network, self.name, self.directory = network, name, directory
        self.address = network.nodes[name]
        self.process: subprocess.Popen | None = None
        self.launched: list[subprocess.Popen] = []  # every start's process: close() ends each group
        self.paused = False
        directory.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        raise NotImplementedError

    def launch(self) -> None:
        with (self.directory / "stdout.log").open("ab") as output:
            self.process = subprocess.Popen(self.network.wrap(self.name, self.command()), cwd=self.directory,
                                            stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self.launched.append(self.process)
        self.paused = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal_group(self, signum: int) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """kill -9 of the node's process group (the broker's fsync process too)."""
        if self.process is not None:
            self.signal_group(signal.SIGCONT if self.paused else 0)
            self.signal_group(signal.SIGKILL)
            self.process.wait()
        self.paused = False

    def close(self) -> None:
        """kill -9 of the process group of every process this node ever started."""
        self.kill()
        for process in self.launched:
            for signum in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(process.pid, signum)
                except ProcessLookupError:
                    pass
            process.wait()

    def pause(self) -> None:
        self.signal_group(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal_group(signal.SIGCONT)
        self.paused = False


class ZooKeeperMember(Node):
    def __init__(self, network: Network, name: str, directory: Path, server_id: int, peers: list[Peer],
                 tick_time_ms: int) -> None:
        super().__init__(network, name, directory)
        self.server_id = server_id
        (directory / "myid").write_text(f"{server_id}\n")
        self.config = directory / "zoo.cfg"
        self.config.write_text(config_text(data_dir=directory, host=self.address, port=ZK_PORT,
                                           tick_time_ms=tick_time_ms, peers=peers))

    def command(self) -> list[str]:
        return ["java", *JVM_OPTIONS, "-cp", ":".join(CLASSPATH), QUORUM_MAIN_CLASS, str(self.config)]

    def start(self, timeout_s: float = 60.0) -> None:
        if not self.running:
            self.launch()
        self.start_wait(timeout_s)

    def start_wait(self, timeout_s: float = 60.0) -> None:
        """Wait until the member answers ruok (it may have no quorum yet)."""
        deadline = time.monotonic() + timeout_s
        while not is_serving(self.address, ZK_PORT, timeout_s=0.5):
            if not self.running or time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper {self.name} did not start; see {self.directory}/stdout.log")
            time.sleep(0.2)

    @property
    def connect(self) -> str:
        return f"{self.address}:{ZK_PORT}"


class Broker(Node):
    def __init__(self, network: Network, name: str, directory: Path, broker_id: int, zk_connect: str,
                 properties: dict[str, str], log_dir: Path | None = None) -> None:
        super().__init__(network, name, directory)
        self.broker_id = broker_id
        self.log_dir = log_dir or directory / "logs"
        self.port_file = directory / "port"
        self.config = directory / "server.properties"
        settings = {"brokerid": str(broker_id), "hostname": self.address, "port": str(BROKER_PORT),
                    "kafka.port": str(KAFKA_PORT), "log.dir": str(self.log_dir), "zk.connect": zk_connect,
                    "enable.zookeeper": "true", **properties}
        self.config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))

    def command(self) -> list[str]:
        return [*TWISTD, "-n", "--pidfile=", f"--logfile={self.directory / 'twistd.log'}", "broker",
                "--config", str(self.config), "--port-file", str(self.port_file)]

    def start(self, timeout_s: float = 60.0) -> bool:
        """Start and wait until both listeners accept; False if it exited (e.g. on a failed disk)."""
        if self.running:
            return True
        self.port_file.unlink(missing_ok=True)
        self.launch()
        deadline = time.monotonic() + timeout_s
        while not (self.port_file.exists() and reachable(self.address, KAFKA_PORT)):
            if not self.running or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    @property
    def wire_address(self) -> tuple[str, int]:
        return self.address, BROKER_PORT

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{KAFKA_PORT}"


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


class Disk:
    """An ext4 file system of ``size_mb`` on a loop device, mounted at ``mount_point``."""

    def __init__(self, image: Path, mount_point: Path, size_mb: int = 512) -> None:
        self.image, self.mount_point, self.size_mb = image, mount_point, size_mb
        self.device: str | None = None
        self.filler = mount_point / "filler"
        self.failed = False

    def create(self) -> None:
        run("truncate", "-s", f"{self.size_mb}M", str(self.image))
        run("mkfs.ext4", "-q", "-F", "-m", "0", str(self.image))
        self.device = run("losetup", "-f", "--show", str(self.image)).stdout.strip()
        self.mount()

    def mount(self) -> None:
        self.mount_point.mkdir(parents=True, exist_ok=True)
        run("mount", "-t", "ext4", self.device, str(self.mount_point))
        self.failed = False

    def mounted(self) -> bool:
        return os.path.ismount(self.mount_point)

    def fill(self) -> None:
        """Take every free block: appends fail with ENOSPC (the root's reserved blocks too:
        the broker runs as root, so fill until a write fails)."""
        free = os.statvfs(self.mount_point)
        run("fallocate", "-l", str(free.f_bavail * free.f_frsize), str(self.filler), check=False)
        with self.filler.open("ab") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass

    def unfill(self) -> None:
        self.filler.unlink(missing_ok=True)

    def fail(self) -> None:
        fd = os.open(self.mount_point, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)
        self.failed = True

    def repair(self) -> None:
        """Unmount (the broker on it must be stopped), check and mount again."""
        run("umount", str(self.mount_point), check=False)
        if self.mounted():
            run("umount", "-l", str(self.mount_point), check=False)
        run("e2fsck", "-fy", str(self.device), check=False)
        self.mount()

    def close(self) -> None:
        if self.mounted():
            run("umount", str(self.mount_point), check=False)
            if self.mounted():
                run("umount", "-l", str(self.mount_point), check=False)
        if self.device:
            run("losetup", "-d", self.device, check=False)
            self.device = None
