"""The suite's brokers and command lines are forked from a warm interpreter
(tests/support/forked_processes.py): each must behave as one exec'd. Each case runs both ways
and compares what a test can see: the exit status of a clean stop, of a kill -9 and of a refused
configuration, what the refusal printed, the descriptors and threads the running broker holds,
and a command line's output for its input, its errors and its time-out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.cli import broker_list, run_cli
from tests.support.forked_processes import ForkedProcess, launch as launch_twistd
from twisted_broker.storage.log_manager import CLEAN_SHUTDOWN_MARKER


@pytest.fixture(params=["fork", "exec"])
def launch_mode(request, monkeypatch):
    monkeypatch.setenv("TEST_PROCESSES", request.param)
    return request.param


def _started(tmp_path, launch_mode, **options) -> BrokerProcess:
    broker = BrokerProcess(tmp_path / "broker", **options).start()
    assert isinstance(broker.process, ForkedProcess) == (launch_mode == "fork")
    return broker


def test_a_clean_stop_exits_by_sigterm_after_the_clean_shutdown_marker(tmp_path, launch_mode):
    broker = _started(tmp_path, launch_mode)
    assert broker.stop() == -signal.SIGTERM
    assert (broker.log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    assert "broker stopped cleanly" in broker.log_tail()


def test_a_kill_is_reported_as_sigkill_and_poll_sees_it(tmp_path, launch_mode):
    broker = _started(tmp_path, launch_mode)
    assert broker.process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        broker.process.wait(0.2)
    os.kill(broker.process.pid, signal.SIGSTOP)  # a stopped broker is still running
    assert broker.process.poll() is None
    broker.kill()
    assert broker.process.returncode == -signal.SIGKILL
    assert not (broker.log_dir / CLEAN_SHUTDOWN_MARKER).exists()


def test_a_refused_configuration_exits_1_and_prints_what_an_execd_one_prints(tmp_path, monkeypatch):
    config = tmp_path / "server.properties"
    config.write_text("brokerid=0\nport=0\nlog.dir=logs\nenable.zookeeper=false\nnum.partitions=zero\n")
    printed = {}
    for mode in ("exec", "fork"):
        monkeypatch.setenv("TEST_PROCESSES", mode)
        out, err = tmp_path / f"{mode}.out", tmp_path / f"{mode}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = launch_twistd(["-n", "--pidfile=", f"--logfile={tmp_path / mode}.log", "broker",
                                     "--config", str(config)], cwd=tmp_path, stdout=stdout, stderr=stderr)
            assert process.wait(30) == 1
        printed[mode] = (out.read_text(), err.read_text())
    assert "num.partitions" in printed["exec"][0] + printed["exec"][1], printed
    assert printed["fork"] == printed["exec"]


def _descriptors_and_threads(broker: BrokerProcess) -> tuple[list[str], int]:
    """What each descriptor is (paths relative to the broker's directory, sockets and pipes by
    kind) and how many threads run, once the broker has settled: the same twice, 0.2 s apart
    (the socket of a connection just closed may still be open at the first look)."""
    previous, deadline = None, time.monotonic() + 5
    while True:
        current = _descriptors_and_threads_now(broker)
        if current == previous or time.monotonic() > deadline:
            return current
        previous = current
        time.sleep(0.2)


def _descriptors_and_threads_now(broker: BrokerProcess) -> tuple[list[str], int]:
    pid = broker.process.pid
    kinds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed meanwhile
        kinds.append(target.split(":")[0] if ":" in target else target.replace(str(broker.directory), "DIR"))
    return sorted(kinds), len(os.listdir(f"/proc/{pid}/task"))


def test_a_forked_broker_holds_the_descriptors_and_threads_an_execd_one_holds(tmp_path, monkeypatch):
    seen = {}
    for mode in ("exec", "fork"):
        monkeypatch.setenv("TEST_PROCESSES", mode)
        broker = BrokerProcess(tmp_path / mode).start()
        try:
            broker.connect().close()
            seen[mode] = _descriptors_and_threads(broker)
        finally:
            broker.stop()
    fds, threads = seen["fork"]
    assert {"DIR/stderr.log", "DIR/twistd.log", "DIR/logs/.lock"} <= set(fds) and threads >= 1, fds
    assert seen["fork"] == seen["exec"]


def test_a_forked_command_line_reads_stdin_and_prints_what_an_execd_one_prints(broker_factory, monkeypatch):
    broker = broker_factory()
    lines = [f"line-{i:04d}".encode() for i in range(500)]
    for mode in ("exec", "fork"):
        monkeypatch.setenv("TEST_PROCESSES", mode)
        produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", mode,
                           input=b"\n".join(lines) + b"\n")
        assert produced.returncode == 0, produced.stderr
    results = {}
    for mode in ("exec", "fork"):
        monkeypatch.setenv("TEST_PROCESSES", mode)
        consumed = run_cli("consume", "--broker-list", broker_list(broker), "--topic", "exec",
                           "--from-beginning", "--max-messages", "500")
        refused = run_cli("dump-log", str(broker.directory / "no-such-segment.kafka"))
        with pytest.raises(subprocess.TimeoutExpired) as timed_out:
            run_cli("consume", "--broker-list", broker_list(broker), "--topic", "fork", "--from-beginning",
                    timeout_s=3)
        results[mode] = (consumed.returncode, consumed.stdout, consumed.stderr, refused.returncode, refused.stdout,
                         refused.stderr, timed_out.value.output.splitlines())
    assert results["exec"][1].splitlines() == lines
    assert results["exec"][3] != 0 and results["exec"][5].startswith(b"twisted-broker: error: "), results["exec"]
    assert results["exec"][6] == lines  # the other mode's messages, printed before the time-out
    assert results["fork"] == results["exec"]
