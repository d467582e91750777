"""What /proc says of one process, for issue 24's small-request rows (bench/small_requests.py):
its CPU time, all threads together, its children's, and how often its threads were switched
out (each switch is one sleep and wake, or one preemption).

The parsers are pure (text in, numbers out); ``ProcessSample.take`` reads the files. CPU comes
from ``/proc/<pid>/stat``'s utime + stime, which the kernel keeps for the whole thread group
(threads that have exited included), in clock ticks (10 ms here): a row runs long enough that
a tick is under 1% of what it reads. Context switches come from each live thread's
``/proc/<pid>/task/<tid>/status`` (voluntary: the thread slept, e.g. in epoll_wait;
involuntary: the scheduler preempted it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def stat_cpu_ticks(stat_text: str) -> int:
    """utime + stime (clock ticks) from the text of ``/proc/<pid>/stat``. The command name,
    field 2, is in parentheses and may hold spaces and ')': fields are counted after the last ')'."""
    fields = stat_text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def status_switches(status_text: str) -> tuple[int, int]:
    """``(voluntary, involuntary)`` context switches from the text of a task's ``status``."""
    voluntary = involuntary = 0
    for line in status_text.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            voluntary = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            involuntary = int(line.split()[1])
    return voluntary, involuntary


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None  # the thread or process ended between listing and reading


@dataclass(frozen=True)
class ProcessSample:
    """One reading of a process: CPU seconds of its threads, of its live children, and the
    voluntary and involuntary switches summed over its live threads."""
    cpu_s: float
    children_cpu_s: float
    voluntary: int
    involuntary: int

    @classmethod
    def take(cls, pid: int) -> "ProcessSample":
        text = _read(Path(f"/proc/{pid}/stat"))
        if text is None:
            raise ProcessLookupError(f"process {pid} is gone")
        voluntary = involuntary = 0
        children: list[int] = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            status = _read(task / "status")
            if status is not None:
                v, i = status_switches(status)
                voluntary, involuntary = voluntary + v, involuntary + i
            listed = _read(task / "children")
            children += [int(child) for child in (listed or "").split()]
        children_ticks = 0
        for child in children:
            child_text = _read(Path(f"/proc/{child}/stat"))
            children_ticks += stat_cpu_ticks(child_text) if child_text else 0
        return cls(stat_cpu_ticks(text) / CLOCK_TICKS_PER_S, children_ticks / CLOCK_TICKS_PER_S,
                   voluntary, involuntary)

    def since(self, before: "ProcessSample") -> "ProcessSample":
        """What was used between ``before`` and this reading."""
        return ProcessSample(self.cpu_s - before.cpu_s, self.children_cpu_s - before.children_cpu_s,
                             self.voluntary - before.voluntary, self.involuntary - before.involuntary)

    @property
    def switches(self) -> int:
        return self.voluntary + self.involuntary


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds the processes ``pids`` and their live children have used so far."""
    total = 0.0
    for pid in pids:
        sample = ProcessSample.take(pid)
        total += sample.cpu_s + sample.children_cpu_s
    return total
