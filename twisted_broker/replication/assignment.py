"""Where the replicas of a new topic go (docs/replication.md §3). Pure.

How this works (Kafka's AdminUtils.assignReplicasToBrokers, without racks): the live brokers
sorted by id; partition p's first replica (its preferred leader) is broker ``(start + p) % n``,
so leaderships go round the brokers; its followers follow at a distance ``1 + shift`` that
grows by one every full round of partitions (counted from partition 0, as in Kafka: a round
then gives every broker the same number of replicas, whatever ``start``), so a broker's
followers are not always the same neighbours and a dead broker's load spreads over all the
others. ``start`` and the first round's ``shift`` are given by the caller (random in
production, fixed in tests) so that many small topics do not all lead on the lowest id.
"""

from __future__ import annotations

from collections.abc import Iterable


class AssignmentError(ValueError):
    """The request cannot be placed: the message says why in one line."""


def assign_replicas(brokers: Iterable[int], *, partitions: int, replication_factor: int,
                    start: int = 0, shift: int | None = None) -> dict[int, tuple[int, ...]]:
    """Replica lists for partitions 0..partitions-1, the preferred leader first.

    Raises AssignmentError when the factor is below 1 or above the number of live brokers,
    or there are no partitions.
    """
    ids = sorted(set(brokers))
    n = len(ids)
    if partitions < 1:
        raise AssignmentError(f"a topic needs at least 1 partition, not {partitions}")
    if replication_factor < 1:
        raise AssignmentError(f"replication factor {replication_factor}: must be at least 1")
    if replication_factor > n:
        raise AssignmentError(f"replication factor {replication_factor} is larger than the "
                              f"{n} live broker(s) {ids}")
    first_shift = start if shift is None else shift
    result = {}
    for p in range(partitions):
        first = (start + p) % n
        # Grows by one every full round of partitions. (It once grew with start + p: a round
        # that crossed a multiple of n changed shift midway, and 100 topics of 10 partitions
        # on 5 brokers held 474 to 686 replicas a broker: issue 23.)
        round_shift = (first_shift + p // n) % max(n - 1, 1)
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (round_shift + j) % (n - 1)) % n])
        result[p] = tuple(replicas)
    return result


def check_reassignment(replicas: Iterable[int], live_brokers: Iterable[int]) -> tuple[int, ...]:
    """A reassignment's target list, checked: non-empty, no repeat, every broker registered.

    Raises AssignmentError naming the first problem.
    """
    target, live = tuple(replicas), set(live_brokers)
    if not target:
        raise AssignmentError("a partition needs at least one replica")
    if len(set(target)) != len(target):
        raise AssignmentError(f"replicas {list(target)} name a broker twice")
    missing = [b for b in target if b not in live]
    if missing:
        raise AssignmentError(f"broker(s) {missing} are not registered in ZooKeeper")
    return target
