"""The nemesis: a seeded random schedule of faults, each applied, held for a random time and
healed, one after the other, with a random quiet gap between them.

Kinds (``KINDS``), each drawn with its weight:

- ``kill``: kill -9 of a broker's process group; healed by starting it again.
- ``pause``: SIGSTOP of a broker's process group; healed by SIGCONT.
- ``partition-brokers``: the brokers split in two sides (one or two against the rest) that
  cannot reach each other; ZooKeeper and the clients still reach everyone.
- ``partition-zookeeper``: one broker cut from every ZooKeeper member (its session expires).
- ``partition-zk-member``: one ZooKeeper member cut from the other two (the ensemble re-elects
  if it led) and from every broker.
- ``kill-zookeeper``: kill -9 of one ZooKeeper member; healed by starting it again.
- ``disk-full``: the disk under the disk broker's log dir filled up (ENOSPC); healed by
  deleting the filler and restarting that broker (kill -9, start: a log dir that failed stays
  offline until its broker restarts, in Kafka too since KIP-112).
- ``disk-fail``: that disk shut down (every I/O fails with EIO); healed by stopping the broker
  (kill -9), repairing the file system (e2fsck) and starting the broker again.

A step is one fault, or two at once (``COMPOUND``: a kill or pause of a second broker
beside the first fault); its faults are healed together. The schedule is drawn from ``random.Random(seed)`` up front (``schedule``), so a seed names
the faults, targets and durations of a run; what the processes do meanwhile is not
deterministic. Every fault is appended to ``faults.jsonl`` in the run's directory with its
start and end (seconds since the run began) and what the heal found.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

KINDS = {"kill": 3, "pause": 2, "partition-brokers": 3, "partition-zookeeper": 2, "partition-zk-member": 1,
         "kill-zookeeper": 1, "disk-full": 1, "disk-fail": 1}
HOLD_S = (2.0, 12.0)
GAP_S = (2.0, 8.0)
COMPOUND = 0.25


@dataclass
class Fault:
    kind: str
    targets: list[str]
    hold_s: float
    gap_s: float
    other_side: list[str] = field(default_factory=list)
    started: float | None = None
    healed: float | None = None
    note: str = ""


def _draw(rng: random.Random, kind: str, brokers: list[str], zookeepers: list[str], disk_broker: str,
          hold: float, gap: float) -> Fault:
    other: list[str] = []
    if kind in ("kill", "pause", "partition-zookeeper"):
        targets = [rng.choice(brokers)]
    elif kind == "partition-brokers":
        targets = sorted(rng.sample(brokers, rng.choice((1, 2))))
        other = [b for b in brokers if b not in targets]
    elif kind in ("partition-zk-member", "kill-zookeeper"):
        targets = [rng.choice(zookeepers)]
    else:
        targets = [disk_broker]
    return Fault(kind, targets, hold, gap, other)


def schedule(seed: int, seconds: float, brokers: list[str], zookeepers: list[str], disk_broker: str,
             compound: float = COMPOUND) -> list[list[Fault]]:
    """Steps of faults (one, or with probability ``compound`` two at once on different
    brokers: a kill or pause beside the first, which is how a partition loses two of its three
    replicas) whose holds and gaps add up to at least ``seconds``."""
    rng = random.Random(seed)
    kinds, weights = list(KINDS), list(KINDS.values())
    steps, total = [], 0.0
    while total < seconds:
        hold, gap = round(rng.uniform(*HOLD_S), 1), round(rng.uniform(*GAP_S), 1)
        first = _draw(rng, rng.choices(kinds, weights)[0], brokers, zookeepers, disk_broker, hold, gap)
        step = [first]
        if rng.random() < compound:
            free = [b for b in brokers if b not in first.targets and b != disk_broker]
            if first.kind == "partition-brokers":
                free = []  # its two sides already involve every broker
            if free:
                step.append(Fault(rng.choice(("kill", "pause")), [rng.choice(free)], hold, gap))
        steps.append(step)
        total += hold + gap
    return steps


class Nemesis:
    """Applies and heals faults on a running cluster (run.Cluster); ``log`` is faults.jsonl."""

    def __init__(self, cluster, log_path, started_at: float) -> None:
        self.cluster, self.log_path, self.started_at = cluster, log_path, started_at
        self.done: list[Fault] = []

    def _now(self) -> float:
        return round(time.monotonic() - self.started_at, 2)

    def apply(self, fault: Fault) -> None:
        c, net = self.cluster, self.cluster.network
        fault.started = self._now()
        [target] = fault.targets if len(fault.targets) == 1 else [None]
        if fault.kind == "kill":
            c.brokers[target].kill()
        elif fault.kind == "pause":
            c.brokers[target].pause()
        elif fault.kind == "partition-brokers":
            net.cut_between(fault.targets, fault.other_side)
        elif fault.kind == "partition-zookeeper":
            net.cut_between([target], list(c.zookeepers))
        elif fault.kind == "partition-zk-member":
            net.cut_between([target], [z for z in c.zookeepers if z != target] + list(c.brokers))
        elif fault.kind == "kill-zookeeper":
            c.zookeepers[target].kill()
        elif fault.kind == "disk-full":
            c.disk.fill()
        elif fault.kind == "disk-fail":
            c.disk.fail()
        self._write({"event": "apply", **asdict(fault)})

    def heal(self, fault: Fault) -> None:
        c, net = self.cluster, self.cluster.network
        target = fault.targets[0]
        notes = []
        if fault.kind == "kill":
            if not c.brokers[target].start():
                notes.append("did not start again")
        elif fault.kind == "pause":
            c.brokers[target].resume()
        elif fault.kind.startswith("partition"):
            net.heal_all()
        elif fault.kind == "kill-zookeeper":
            c.zookeepers[target].start()
        elif fault.kind == "disk-full":
            notes.append(f"broker {'alive' if c.brokers[target].running else 'EXITED'} while full")
            c.disk.unfill()
            # a log dir that failed stays offline until its broker restarts (in Kafka too, KIP-112)
            c.brokers[target].kill()
            if not c.brokers[target].start():
                notes.append("did not start again")
        elif fault.kind == "disk-fail":
            notes.append(f"broker {'alive' if c.brokers[target].running else 'EXITED'} on the failed disk")
            c.brokers[target].kill()
            c.disk.repair()
            if not c.brokers[target].start():
                notes.append("did not start again")
        fault.healed, fault.note = self._now(), "; ".join(notes)
        self.done.append(fault)
        self._write({"event": "heal", **asdict(fault)})

    def restart_exited(self) -> list[str]:
        """After a step's heals: a broker that exited by itself (on its failed disk, say) is
        started again, as an operator would; returns what it did, for the log."""
        notes = []
        for name, broker in self.cluster.brokers.items():
            if not broker.running:
                notes.append(f"{name} had exited by itself; started again" + ("" if broker.start() else " but FAILED"))
        if notes:
            self._write({"event": "restart", "notes": notes, "at": self._now()})
        return notes

    def _write(self, entry: dict) -> None:
        entry["utc"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())  # to match the brokers' logs
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def counts(self) -> Counter:
        return Counter(f.kind for f in self.done)
