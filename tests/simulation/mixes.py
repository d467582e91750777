"""Named fault mixes: the configurations ``make simulate`` cycles through and the regression
seeds name. Each is a SimConfig (world.py); a seed means one run only together with its mix."""

from __future__ import annotations

from dataclasses import replace

from tests.simulation.world import SimConfig

__all__ = ["MIXES"]

DEFAULT = SimConfig()

MIXES: dict[str, SimConfig] = {
    # Every fault kind, three brokers, two partitions of three replicas.
    "all": DEFAULT,
    # Five brokers, three partitions of three replicas.
    "five": replace(DEFAULT, brokers=5, partitions=3),
    # Power losses only (unflushed tails lost, last writes torn), of leaders and controllers.
    "crash": replace(DEFAULT, faults=("crash", "crash_controller")),
    # A leader's crash, then its successor's within a flush interval (defect 2's ground).
    "epochs": replace(DEFAULT, faults=("crash_leader_twice",), mean_fault_interval_s=4.0),
    # Partitions between brokers and from ZooKeeper, and connection resets: no disk is lost.
    "network": replace(DEFAULT, faults=("partition", "isolate", "zk", "reset"), network_reset_rate=0.001),
    # Controllers lose ZooKeeper or die while they write.
    "controller": replace(DEFAULT, faults=("crash_controller", "zk"), mean_fault_interval_s=1.5),
    # Failing disks (EIO, ENOSPC, failed fsync) and power losses.
    "disk": replace(DEFAULT, faults=("disk", "crash")),
    # Now and then one message larger than a follower's fetch size; faults as "network".
    "large": replace(DEFAULT, faults=("partition", "reset"), large_message_rate=0.01, fetch_max_bytes=4096,
                     max_message_size=16 * 1024),
}
