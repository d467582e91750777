"""The reliability suite's scale and summary (the suite itself: tests/reliability/), which
tests/replication and tests/kafka_clients' failover test share.

``RELIABILITY_SCALE=short`` (the default, run by ``make test``) keeps the whole folder near a
minute; ``RELIABILITY_SCALE=soak`` (``make soak``) runs the long form: at least 20 kill cycles
and 100,000 fuzzed frames. Every test adds what it did to one ``Summary`` (faults injected,
cases tried, connections held, messages checked, messages lost, and durations such as
failover and rejoin times), printed as a table at the end of the run and written to
``$RELIABILITY_SUMMARY`` when that names a file. tests/conftest.py registers the hooks, so
the table is printed once whichever folders run; under pytest-xdist the figures travel to the
controller in each test's report (``user_properties``).
``RELIABILITY_SEED`` fixes the seed of the randomized tests (each failure message names it).
"""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter
from dataclasses import dataclass

import pytest

from tests.support.brokers import BrokerProcess


@dataclass(frozen=True)
class Scale:
    name: str
    kill_cycles: int
    fuzz_frames: int  # frames sent to the wire port by the socket fuzzer
    protocol_examples: int  # hypothesis examples against the protocol in process
    held_connections: int
    slow_consumers: int
    zk_faults: int  # ZooKeeper stop/start and session expiries
    replication_kills: int  # tests/replication: kill -9 of a partition's leader under load
    replication_sigterms: int  # tests/replication: controlled shutdowns of a leader under load


SCALES = {
    "short": Scale("short", kill_cycles=5, fuzz_frames=5_000, protocol_examples=300,
                   held_connections=1_000, slow_consumers=50, zk_faults=1,
                   replication_kills=3, replication_sigterms=1),
    "soak": Scale("soak", kill_cycles=25, fuzz_frames=100_000, protocol_examples=5_000,
                  held_connections=1_000, slow_consumers=200, zk_faults=3,
                   replication_kills=20, replication_sigterms=5),
}

FIGURES = ("faults injected", "cases tried", "connections held", "messages checked", "messages lost")


class Summary:
    """Figures per test, added up at the end."""

    def __init__(self) -> None:
        self.by_test: dict[str, Counter] = {}
        self.durations: dict[str, dict[str, list[float]]] = {}  # test -> name -> seconds

    @staticmethod
    def _short(test: str) -> str:
        test = test.removeprefix("test_")
        return test if len(test) <= 64 else test[:61] + "..."

    def add(self, test: str, **figures: int) -> None:
        test = self._short(test)
        counter = self.by_test.setdefault(test, Counter())
        for name, value in figures.items():
            key = name.replace("_", " ")
            assert key in FIGURES, key
            counter[key] += value

    def add_durations(self, test: str, name: str, seconds: list[float]) -> None:
        """Durations of one kind (e.g. "failover", "rejoin") measured by a test."""
        self.by_test.setdefault(self._short(test), Counter())
        self.durations.setdefault(self._short(test), {}).setdefault(name, []).extend(seconds)

    def totals(self) -> Counter:
        total: Counter = Counter()
        for counter in self.by_test.values():
            total.update(counter)
        return total

    def table(self, scale: str) -> str:
        width = max([len(name) for name in self.by_test] + [5])
        header = f"{'test':<{width}}  " + "  ".join(f"{figure:>16}" for figure in FIGURES)
        lines = [f"reliability summary ({scale})", header, "-" * len(header)]
        for name, counter in self.by_test.items():
            lines.append(f"{name:<{width}}  " + "  ".join(f"{counter[f]:>16,}" for f in FIGURES))
        totals = self.totals()
        lines.append("-" * len(header))
        lines.append(f"{'total':<{width}}  " + "  ".join(f"{totals[f]:>16,}" for f in FIGURES))
        if self.durations:
            lines += ["", f"{'durations (s)':<{width}}  {'what':>16}  {'count':>8}  {'median':>8}  {'max':>8}"]
            for test, kinds in self.durations.items():
                for name, values in kinds.items():
                    if values:
                        lines.append(f"{test:<{width}}  {name:>16}  {len(values):>8}  "
                                     f"{statistics.median(values):>8.2f}  {max(values):>8.2f}")
        return "\n".join(lines)


_SUMMARY = Summary()  # filled from the test reports (pytest_runtest_logreport), in the controller
_FIGURES, _DURATIONS = "reliability figures", "reliability durations"  # user_properties keys


def current_scale() -> Scale:
    name = os.environ.get("RELIABILITY_SCALE", "short")
    if name not in SCALES:
        raise pytest.UsageError(f"RELIABILITY_SCALE={name!r}: expected one of {sorted(SCALES)}")
    return SCALES[name]


@pytest.fixture(scope="session")
def scale() -> Scale:
    return current_scale()


def record(request, **figures: int) -> None:
    """Add figures (faults_injected=..., cases_tried=..., ...) under the test's name."""
    for name in figures:
        assert name.replace("_", " ") in FIGURES, name
    request.node.user_properties.append((_FIGURES, figures))


def record_durations(request, name: str, seconds: list[float]) -> None:
    """Add durations in seconds (name: "failover", "rejoin", ...) under the test's name."""
    request.node.user_properties.append((_DURATIONS, (name, list(seconds))))


def pytest_runtest_logreport(report) -> None:
    """Add what a test recorded to the summary. The figures travel in the report's
    user_properties, so under pytest-xdist they reach the controller, which prints the
    table; the teardown report carries everything a test recorded, so it alone is read."""
    if report.when != "teardown" or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    test = report.nodeid.rpartition("::")[2]
    for key, value in report.user_properties:
        if key == _FIGURES:
            _SUMMARY.add(test, **value)
        elif key == _DURATIONS:
            _SUMMARY.add_durations(test, *value)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _SUMMARY.by_test:
        return
    table = _SUMMARY.table(current_scale().name)
    terminalreporter.write_sep("=", "reliability")
    terminalreporter.write_line(table)
    path = os.environ.get("RELIABILITY_SUMMARY")
    if path:
        with open(path, "w") as file:
            json.dump({"scale": current_scale().name, "totals": _SUMMARY.totals(),
                       "by_test": _SUMMARY.by_test, "durations": _SUMMARY.durations}, file, indent=1)


def rss_mib(pid: int) -> float:
    """Resident memory of a process, in MiB (/proc/PID/status VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def full_log(broker: BrokerProcess) -> str:
    """All of a broker's log, rotated files (twistd.log.N, oldest first) included."""
    rotated = sorted(broker.log_file.parent.glob("twistd.log.*"), key=lambda p: -int(p.suffix[1:]))
    return "".join(path.read_text(errors="replace") for path in [*rotated, broker.log_file] if path.exists())


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
