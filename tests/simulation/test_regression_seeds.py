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
from tests.simulation.world import run_seed_isolated

OTHER_DEFECT = {"check_min_insync": False, "producers_skip_unsynced": True}
# Go on after the first violation: the seed's own defect comes after another one's.
GO_ON = {**OTHER_DEFECT, "stop_at_violation": False}

REGRESSION_SEEDS = [
    # Defect 1: an acks=all write acknowledged with 1 copy < min.insync.replicas=2 (the ISR
    # shrank to the leader after the append; ack-below-min-insync).
    pytest.param(1, "all", {}, id="defect1-ack-below-min-insync-seed1"),
    # Defect 2: a new leader crashed within a flush interval of taking office, then the rest;
    # back, it takes office again with a leader-epoch file naming an epoch past its recovered
    # log end: become_leader raises ValueError inside the ZooKeeper subscribers
    # (become-leader-raised). Defect 5 breaks this run too, so it goes on after the first.
    pytest.param(726, "epochs", dict(GO_ON), id="defect2-epoch-cache-ahead-of-recovered-log-seed726"),
    # Defect 3: messages larger than replica.fetch.max.bytes wedge the followers: they ask for
    # the same partial entry forever ("the leader's bytes ... fail their check") and the ISR
    # stays the leader alone (liveness).
    pytest.param(1, "large", {**OTHER_DEFECT, "settle_seconds": 20.0}, id="defect3-large-entry-wedges-followers-seed1"),
    # Found with defect 5 (a restarted replica that lost its tail elected; committed-data-lost)
    # by the first version of the checker. Its schedule takes every ISR member down at once
    # after power losses, which the guarantee leaves out (docs/replication.md §9), so the
    # checker no longer counts it as defect 5's, and defect 5's own tests are the process
    # tests (tests/replication/test_broker_epochs.py, test_controller_zookeeper.py). Kept: a
    # schedule of repeated crashes of every broker that must run clean.
    pytest.param(2, "crash", dict(OTHER_DEFECT), id="crashes-of-every-isr-member-seed2"),
    # Defect 8: a consumer reads at an offset inside an entry of this replica (its log was cut
    # and fetched again) and gets bytes that are not whole messages (consumer-partial-entry).
    pytest.param(10, "crash", dict(OTHER_DEFECT), id="defect8-read-inside-an-entry-seed10"),
    # Finding (not in the list): a restarted broker whose ClusterState has not read
    # ZooKeeper yet takes the replicated topic for a 0.7 topic and appends a ProduceAck (acks=all
    # acknowledged at once) to the replica's log, at offsets committed elsewhere
    # (write-by-non-leader).
    pytest.param(1, "all", {"check_min_insync": False}, id="finding-unsynced-broker-appends-to-replica-log-seed1"),
    # Finding (defect 5's family): a restarted broker takes office again at the epoch its
    # previous incarnation led, with what its log kept (two-leaders): the state's
    # leader_session was "" because the controller wrote it while the broker's registration
    # was not in its cache (controller._write), and replica_manager takes "" for any session.
    pytest.param(426, "crash", dict(GO_ON), id="finding-restarted-leader-same-epoch-seed426"),
    # Finding (defect 5's family): leader 2 lost power and came back before any controller
    # noticed; ISR follower 1, which held the tail 2 lost, was away (its session expired, its
    # process lived on). The restarted leader was re-elected to lead on alone ("no other ISR
    # member is live") and acknowledged acks=all writes were lost (acked-write-lost); now the
    # partition waits offline for the member that did not restart (election.elect_leader).
    pytest.param(570033040, "all", {}, id="finding-restarted-leader-leads-over-an-away-isr-member-seed570033040"),
    # Finding (defect 6's family, on the broker's side): a leader cut from ZooKeeper lost its
    # session while the controller moved its partition on; on the new session the brokers'
    # list, read before the states, re-ran the roles on the cached state and unfenced it
    # ("leader again" at the deposed epoch): it took writes and advanced its high watermark
    # past what the new leader held (committed-data-lost). Leaders now stay fenced until the
    # states are read again (ReplicaManager.state_read).
    pytest.param(572942119, "network", {}, id="finding-leader-unfenced-on-a-stale-state-after-expiry-seed572942119"),
    # Finding (defect 5's family): a follower whose session had expired (its process alive)
    # caught up and joined the ISR; the state could name no registration of it, so once it
    # registered again it counted as restarted and was dropped when the leader went, whose
    # restarted run then led without the tail only that follower held (committed-data-lost).
    # A follower joins the ISR only while registered (LeaderPartition.follower_fetched
    # may_join, Kafka's KIP-841).
    pytest.param(572942149, "five", {}, id="finding-unregistered-follower-joins-the-isr-seed572942149"),
    # Finding: the session expiry that made broker 0 controller had also taken broker 1 (which
    # had lost power); the new controller, its broker cache not yet re-read, elected 1 and
    # dropped the live holder 2, which had lost only its session; 1 came back without its tail
    # and led (acked-write-lost). A new controller reads the brokers before it acts.
    pytest.param(572942160, "all", {}, id="finding-new-controller-elects-on-a-stale-broker-list-seed572942160"),
    # The checker's reading of KIP-112 (docs/replication.md §9): a replica given up on a failed
    # disk holds nothing for the guarantee; the leader, then alone in the ISR, lost power
    # (committed-data-lost reported for a copy on a failed disk, by the checker before).
    pytest.param(570033003, "disk", {}, id="checker-copy-on-a-failed-disk-is-lost-seed570033003"),
    # The simulator's operator: a broker restarted on a still-failing disk gave its replica up
    # again, and the disk's repair did not restart it; the partition, whose ISR was that
    # broker alone, stayed offline (liveness). A given-up replica needs a new process.
    pytest.param(570033163, "disk", {}, id="sim-disk-repair-restarts-a-broker-that-gave-up-seed570033163"),
    # Finding (truncation by epoch): every ISR member lost power; the one elected had lost its
    # whole log and led a new epoch from offset 0. Its answer to the other's epoch question
    # was "unknown" (all its epochs were newer), so that follower cut only to its high
    # watermark and kept 13369 bytes as committed that its leader never had
    # (committed-data-lost). The leader now answers as Kafka's cache does (epochs.end_offset_for).
    pytest.param(604715011, "disk", {}, id="finding-follower-keeps-its-high-watermark-over-an-empty-leader-seed604715011"),
    # Finding (defect 5's family): both members of an offline ISR had lost power at different
    # moments; the first back that led fewest was elected, and it had lost the unflushed tail
    # the other kept on disk with an acknowledged write (acked-write-lost, committed-data-lost).
    # With every ISR member restarted, the longest published log leads (replica_ends.py).
    pytest.param(606520049, "controller", {},
                 id="finding-first-restarted-member-back-leads-over-a-longer-log-seed606520049"),
    # Finding: leader 1 came back whole while member 0 was away (it had restarted too, losing
    # its tail, and was not registered yet); the controller took the partition offline with
    # 0 alone in its ISR, and elected it when it registered (acked-write-lost). Going offline
    # keeps the restarted members in the ISR; then both restarted, and the longest log leads.
    pytest.param(607391089, "controller", {}, id="finding-complete-member-dropped-from-an-offline-isr-seed607391089"),
]


@pytest.mark.parametrize(("seed", "mix", "overrides"), REGRESSION_SEEDS)
def test_regression_seed(seed, mix, overrides):
    result = run_seed_isolated(seed, replace(MIXES[mix], **overrides))
    assert not result.violations, result.report()
