"""Replication (docs/replication.md): per-partition leaders, followers, in-sync replicas.

The rules are pure (values, assignment, election, leader epochs, the leader's ISR and high
watermark): no ZooKeeper, sockets, files or clock here; callers pass ``now`` and apply the
decisions. The ZooKeeper edge and the follower fetcher sit above them.
"""
