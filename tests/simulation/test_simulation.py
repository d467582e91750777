"""The simulation's short run (make test): the simulator is deterministic and quiet without
faults, and a fixed set of seeds over every fault mix runs clean (about a minute in all)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.simulation.mixes import MIXES
from tests.simulation.world import SimConfig, run_seed, run_seed_isolated

SHORT = {"fault_seconds": 15.0, "settle_seconds": 30.0}


def test_same_seed_same_run():
    """Two runs of one seed: the same trace (faults, answers, reads, ZooKeeper events)."""
    config = replace(MIXES["all"], **SHORT, check_min_insync=False, producers_skip_unsynced=True)
    first, second = run_seed(11, config), run_seed(11, config)
    assert first.trace_hash == second.trace_hash
    assert (first.steps, first.faults, first.acked) == (second.steps, second.faults, second.acked)
    assert first.steps > 1000 and first.faults


def test_no_faults_no_violations():
    """Without faults every invariant holds and clients get through: the checker is not
    crying wolf."""
    for brokers in (3, 5):
        result = run_seed(1, SimConfig(brokers=brokers, faults=(), fault_seconds=10.0, settle_seconds=10.0))
        assert not result.violations, result.report()
        assert result.acked > 100 and result.consumed > 50


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_fixed_seeds(mix):
    """Seeds 1000 and 1001 of each mix (short fault phases): no invariant violated."""
    for seed in (1000, 1001):
        result = run_seed_isolated(seed, replace(MIXES[mix], **SHORT))
        assert not result.violations, f"[mix {mix}] {result.report()}"
