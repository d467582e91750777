"""Seeds that broke an invariant, each with its fault mix: every one must run clean.

Each entry names the defect of issue 22 it reaches (or the finding of docs/simulation.md) and
the invariant it broke on the code before the fix. ``check_min_insync=False`` and
``producers_skip_unsynced=True`` keep defect 1 and the unsynced-write finding from ending a
run aimed at another defect first; ``settle_seconds`` shortens the liveness bound where the
failure is a wedge. To replay one: ``python -m tests.simulation --seed N --mix MIX --set ...
--verbose`` (docs/simulation.md).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.simulation.mixes import MIXES
from tests.simulation.world import run_seed

OTHER_DEFECT = {"check_min_insync": False, "producers_skip_unsynced": True}
# Go on after the first violation: the seed's own defect comes after another one's.
GO_ON = {**OTHER_DEFECT, "stop_at_violation": False}

REGRESSION_SEEDS = [
    # Defect 1: an acks=all write acknowledged with 1 copy < min.insync.replicas=2 (broker 2
    # isolated, then the controller crashed: the ISR shrank to the leader after the append).
    pytest.param(2, "all", {}, id="defect1-ack-below-min-insync-seed2"),
    # Defect 2: a new leader crashed within a flush interval of taking office, then the rack;
    # back first, it takes office again with a leader-epoch file naming an epoch past its
    # recovered log end: become_leader raises ValueError, the resync stops, and the partition
    # stays with ISR [0] (become-leader-raised, then liveness). Defect 5 breaks this run first.
    pytest.param(702, "epochs", dict(GO_ON), id="defect2-epoch-cache-ahead-of-recovered-log-seed702"),
    # Defect 3: one message larger than replica.fetch.max.bytes wedges the followers: they ask
    # for the same partial entry forever, the ISR stays the leader alone (liveness).
    pytest.param(5, "large", {**OTHER_DEFECT, "settle_seconds": 20.0}, id="defect3-large-entry-wedges-followers-seed5"),
    # Defect 5: a follower that restarted and lost its unflushed tail stays in the ISR and is
    # elected; the complete replicas cut committed data to match it (committed data lost).
    pytest.param(8, "controller", dict(OTHER_DEFECT), id="defect5-restarted-follower-elected-seed8"),
    pytest.param(3, "all", {"check_min_insync": False}, id="defect5-shorter-replica-of-two-crashed-elected-seed3"),
    # Defect 8: a consumer reads at an offset that is inside an entry of this replica (its log
    # was cut and fetched again) and gets bytes that are not whole messages.
    pytest.param(23, "crash", {"check_min_insync": False}, id="defect8-read-inside-an-entry-seed23"),
    # Finding (not in the list): a restarted broker whose ClusterState has not read
    # ZooKeeper yet takes the replicated topic for a 0.7 topic and appends a ProduceAck (acks=all
    # acknowledged at once) to the replica's log, at offsets committed elsewhere.
    pytest.param(7, "all", {"check_min_insync": False}, id="finding-unsynced-broker-appends-to-replica-log-seed7"),
    # Finding (defect 5's family): the controller elected broker 2 while its registration was
    # gone from its cache, so the state's leader_session is "" and every later incarnation of
    # broker 2 takes office at that same epoch 2 with whatever its log kept (two-leaders).
    pytest.param(408, "crash", dict(GO_ON), id="finding-empty-leader-session-two-incarnations-lead-seed408"),
]


@pytest.mark.parametrize(("seed", "mix", "overrides"), REGRESSION_SEEDS)
def test_regression_seed(seed, mix, overrides):
    result = run_seed(seed, replace(MIXES[mix], **overrides))
    assert not result.violations, result.report()
