"""A real ``twistd -n broker`` from start to stop: configuration, signals, command-line
overrides, and starting while ZooKeeper is away.

A clean stop (SIGTERM, SIGINT) flushes and closes every log and leaves ``.kafka_cleanshutdown``
in log.dir (spec 4.8); a crash leaves none, so the next start recovers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.brokers import BrokerProcess
from tests.support.forked_processes import TWISTD
from tests.support.polling import fetch_payloads, produce_payloads, wait_for, wait_for_payloads
from twisted_broker.local_zookeeper import ZooKeeperServer, free_port
from twisted_broker.storage.log_manager import CLEAN_SHUTDOWN_MARKER

MARKER = CLEAN_SHUTDOWN_MARKER


# -- helpers ---------------------------------------------------------------------------------

def last_run_log(broker) -> str:
    """The broker's log since its latest start (twistd appends to one file across runs)."""
    return broker.log_file.read_text(errors="replace").rpartition("starting up.")[2]


def run_twistd(directory: Path, properties: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run a broker that is expected to exit by itself; capture stdout (where twistd prints
    usage errors) and stderr."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return subprocess.run(
        [*TWISTD, "-n", "--pidfile=", f"--logfile={directory / 'twistd.log'}", "broker",
         "--config", str(config), "--port-file", str(directory / "port"), *args],
        cwd=directory, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


# -- configuration ---------------------------------------------------------------------------

def test_unknown_config_key_is_logged_as_a_warning_and_the_broker_starts(broker_factory):
    broker = broker_factory(properties={"log.flush.intervall": "1"})  # a typo
    produce_payloads(broker, "t", 0, [b"x"])
    wait_for_payloads(broker, "t", 0, [b"x"])
    warnings = [line for line in broker.log_tail(20000).splitlines() if "unknown key" in line]
    assert len(warnings) == 1 and "#warn]" in warnings[0]
    assert "log.flush.intervall (ignored)" in warnings[0]


GOOD = {"brokerid": "0", "port": "0", "log.dir": "logs", "enable.zookeeper": "false"}


@pytest.mark.parametrize(("change", "message"), [
    ({"log.flush.interval": "abc"}, "log.flush.interval='abc': not an integer"),
    ({"brokerid": None}, "brokerid is required"),
    ({"log.file.size": "4"}, "log.file.size=4: must be at least 5"),
    ({"enable.zookeeper": "yes"}, "enable.zookeeper='yes': must be true or false"),
    ({"enable.zookeeper": "true"}, "zk.connect is required"),
])
def test_invalid_config_makes_twistd_exit_non_zero_naming_the_key(tmp_path, change, message):
    properties = {**GOOD, **change}
    properties = {key: value for key, value in properties.items() if value is not None}
    result = run_twistd(tmp_path, properties)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (tmp_path / "port").exists()


def test_refused_config_error_also_names_the_unknown_keys(tmp_path):
    # twistd never opens its log then, so the unknown-key warning must come with the error:
    # it is the hint that explains the missing key.
    properties = {**GOOD, "brokerId": "0"}
    del properties["brokerid"]
    result = run_twistd(tmp_path, properties)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "unknown key brokerId (ignored)" in output and "brokerid is required" in output


# -- stopping --------------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_stop_cleanly_and_leave_the_marker(broker_factory, signum):
    broker = broker_factory()
    produce_payloads(broker, "t", 0, [b"kept"])
    wait_for_payloads(broker, "t", 0, [b"kept"])
    assert not (broker.log_dir / MARKER).exists()

    broker.process.send_signal(signum)
    status = broker.process.wait(20)

    assert status == -signum  # twistd re-raises the signal once it has stopped
    assert (broker.log_dir / MARKER).exists()
    assert "broker stopped cleanly" in last_run_log(broker)
    broker.start()
    assert "(clean shutdown)" in last_run_log(broker)
    assert not (broker.log_dir / MARKER).exists()  # a crash from now on must lead to recovery
    assert fetch_payloads(broker, "t", 0) == [b"kept"]


def test_twistd_r_uvloop_runs_the_broker_on_the_asyncio_reactor_over_uvloop(tmp_path):
    # Issue 24's measured alternative event loop (twisted_broker/network/uvloop_reactor.py).
    broker = BrokerProcess(tmp_path / "uvloop", twistd_args=["--reactor=uvloop"]).start()
    try:
        produce_payloads(broker, "t", 0, [b"one", b"two"])
        wait_for_payloads(broker, "t", 0, [b"one", b"two"])
        assert "reactor class: twisted.internet.asyncioreactor.AsyncioSelectorReactor" in broker.log_tail(20000)
        assert broker.stop() == -signal.SIGTERM
        assert (broker.log_dir / MARKER).exists()
    finally:
        broker.kill()


def test_kill_9_leaves_no_marker_and_the_next_start_recovers(broker_factory):
    broker = broker_factory()
    produce_payloads(broker, "t", 0, [b"kept"])
    wait_for_payloads(broker, "t", 0, [b"kept"])

    broker.kill()

    assert not (broker.log_dir / MARKER).exists()
    broker.start()
    assert "(recovered, 0 bytes truncated)" in last_run_log(broker)
    assert fetch_payloads(broker, "t", 0) == [b"kept"]


def fsync_processes(broker) -> list[int]:
    """The broker's child processes running the fsync worker."""
    children = []
    for task in Path(f"/proc/{broker.process.pid}/task").iterdir():
        children += [int(pid) for pid in (task / "children").read_text().split()]
    return [pid for pid in children
            if b"fsync_worker" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def test_a_killed_fsync_process_is_replaced_and_the_broker_loses_no_flush(broker_factory):
    broker = broker_factory()
    produce_payloads(broker, "t", 0, [b"before"])
    wait_for_payloads(broker, "t", 0, [b"before"])
    (first,) = fsync_processes(broker)

    os.kill(first, signal.SIGKILL)
    produce_payloads(broker, "t", 0, [b"after", b"kill"])

    wait_for_payloads(broker, "t", 0, [b"before", b"after", b"kill"])
    (second,) = fsync_processes(broker)
    assert second != first and gone(first)  # replaced, and the old one reaped
    assert "the fsync process exited (status -9)" in last_run_log(broker)
    assert broker.stop() == -signal.SIGTERM
    assert gone(second)  # a stopped broker leaves no fsync process behind
    assert (broker.log_dir / MARKER).exists()


# -- command-line overrides ------------------------------------------------------------------

def test_command_line_overrides_port_broker_id_log_dir_and_zk(broker_factory, zk_connect, zk, tmp_path):
    port = free_port()
    elsewhere = tmp_path / "elsewhere"
    broker = broker_factory(
        broker_id=0, properties={"enable.zookeeper": "true", "zk.connect": "127.0.0.1:1/nowhere"},
        extra_args=["--port", str(port), "--broker-id", "5", "--log-dir", str(elsewhere),
                    "--zk", zk_connect])

    assert broker.port == port
    produce_payloads(broker, "t", 0, [b"x"])
    wait_for_payloads(broker, "t", 0, [b"x"])
    assert (elsewhere / "t-0").is_dir()
    assert not broker.log_dir.exists()
    data, _ = zk.get("/brokers/ids/5")  # registered before the port file was written
    assert data.decode().endswith(f":127.0.0.1:{port}")
    assert not zk.exists("/brokers/ids/0")
    wait_for(lambda: zk.exists("/brokers/topics/t/5"), "/brokers/topics/t/5")


def test_no_zk_flag_runs_without_zookeeper_although_zk_connect_is_set(broker_factory, zk_connect, zk):
    broker = broker_factory(zk_connect=zk_connect, extra_args=["--no-zk"])
    produce_payloads(broker, "t", 0, [b"x"])
    wait_for_payloads(broker, "t", 0, [b"x"])
    assert zk.get_children("/") == []
    assert "kazoo" not in broker.log_tail(20000)


# -- ZooKeeper away at start -----------------------------------------------------------------

def test_broker_starts_without_a_reachable_zookeeper_and_registers_when_one_appears(broker_factory, tmp_path):
    port = free_port()  # nothing listens here yet
    starting = time.monotonic()
    broker = broker_factory(zk_connect=f"127.0.0.1:{port}", properties={"zk.connectiontimeout.ms": "500"})
    produce_payloads(broker, "t", 0, [b"x"])
    wait_for_payloads(broker, "t", 0, [b"x"])
    # Waits zk.connectiontimeout.ms (0.5 s) for ZooKeeper, not forever; slack for a busy machine.
    assert time.monotonic() - starting < 6.0
    assert "ZooKeeper not reachable" in broker.log_tail()

    server = ZooKeeperServer(tmp_path / "late-zookeeper", port)
    server.start()
    try:
        zk = KazooClient(hosts=server.connect_string)
        zk.start(10)
        try:
            data, stat = wait_for(lambda: zk.exists("/brokers/ids/0") and zk.get("/brokers/ids/0"),
                                  "the broker to register", timeout_s=15)
            assert data.decode().endswith(f":127.0.0.1:{broker.port}")
            topic, topic_stat = wait_for(
                lambda: zk.exists("/brokers/topics/t/0") and zk.get("/brokers/topics/t/0"),
                "the topic created before ZooKeeper came")
            assert topic == b"1"
            assert topic_stat.ephemeralOwner == stat.ephemeralOwner != 0
        finally:
            zk.stop()
            zk.close()
    finally:
        server.stop()
