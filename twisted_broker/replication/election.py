"""Who leads a partition (docs/replication.md §3, Controller). Pure: the controller feeds it
what ZooKeeper says and writes back the states it returns.

The rules:

==========================  ==================================================================
situation                   new state
==========================  ==================================================================
new partition               leader: first live replica of the assignment; ISR: live replicas;
                            epoch 0; offline (leader -1, ISR: the assignment) if none lives
leader gone or leaving      leader: the live ISR member, not leaving, that leads the fewest
                            partitions (ties: assignment order); ISR without the gone broker;
                            epoch + 1
no such ISR member          unclean off: offline (leader -1), ISR unchanged (its members hold
                            every committed message), epoch + 1 (fences the old leader);
                            unclean on: the live replica outside the ISR that leads the
                            fewest, ISR = it alone, epoch + 1
offline, an ISR member back that member leads, epoch + 1
follower gone               ISR without it (never below the leader alone), epoch unchanged
preferred election          first replica, if live and in the ISR and not leading: epoch + 1
ISR member restarted        (registered anew since the state was written: its log may lack the
                            tail its previous run had not flushed, KIP-380) never a candidate
                            and out of the ISR; as leader: re-elected, epoch + 1, leading on
                            itself only if every other ISR member restarted too or its log
                            failed; while one that did not restart is away (its session
                            expired, its process and page cache may live on), offline and
                            waiting for it. An offline state's ISR holds no restarted member
                            (dropped when it went offline): one registered since came back
                            after, and may lead
log failed on a broker      ``failed``: the brokers that list the partition offline: elected
                            away, out of the ISR, never elected nor waited for
==========================  ==================================================================

Each function returns ``None`` when the state need not change, so a controller that re-runs
a half-done failover writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from twisted_broker.registry.replication_paths import NO_LEADER, PartitionState


def initial_state(replicas: Sequence[int], live: Collection[int], *, controller_epoch: int) -> PartitionState:
    """A new partition's first state."""
    alive = [b for b in replicas if b in live]
    if not alive:
        return PartitionState(NO_LEADER, 0, tuple(replicas), controller_epoch)
    return PartitionState(alive[0], 0, tuple(alive), controller_epoch)


def _fewest_leaderships(candidates: Sequence[int], leader_counts: Mapping[int, int]) -> int:
    # min is stable: among equals, the first in assignment order wins.
    return min(candidates, key=lambda b: leader_counts.get(b, 0))


def elect_leader(state: PartitionState, replicas: Sequence[int], *, live: Collection[int],
                 leader_counts: Mapping[int, int], controller_epoch: int, unclean: bool = False,
                 leaving: Collection[int] = (), restarted: Collection[int] = (),
                 failed: Collection[int] = ()) -> PartitionState | None:
    """The state after the current leader is gone (not in ``live``), ``leaving`` (controlled
    shutdown), ``restarted`` (registered anew since this state was written) or ``failed``
    (its log of the partition failed); also brings back an offline partition. None when the
    leader may stay.

    Candidates are ISR members that are live, assigned, not leaving, not restarted and not
    failed; ``leader_counts`` is how many partitions each broker leads now.
    """
    if failed:
        # A failed log is no candidate, and nothing to wait for: like a restart that lost it all.
        live, restarted = set(live) - set(failed), set(restarted) | set(failed)
    if state.leader in live and state.leader not in leaving and state.leader not in restarted:
        return None
    if not state.online and set(state.isr) <= set(restarted):
        # Every member of its ISR restarted (a cluster restarted whole): none is known to be
        # more complete than another, and the first of them back leads (as in Kafka). While
        # one member that did not restart may come back (its session expired, its process and
        # page cache lived on), the partition waits for it.
        restarted = ()
    candidates = [b for b in replicas if b in state.isr and b in live and b not in leaving and b not in restarted]
    if candidates:
        leader = _fewest_leaderships(candidates, leader_counts)
        new_isr = tuple(b for b in state.isr if b in live and b not in leaving and b not in restarted)
        return PartitionState(leader, state.leader_epoch + 1, new_isr, controller_epoch)
    away = [b for b in state.isr if b != state.leader and b not in live and b not in restarted]
    if state.online and state.leader in live and state.leader in restarted and state.leader not in leaving \
            and not away:
        # No other in-sync replica lives or may come back whole: it leads on, at a new epoch
        # that fences what its previous run may have answered (its followers' ISR places are
        # the caller's). While one may come back, the partition waits for it (below).
        return replace(state, leader_epoch=state.leader_epoch + 1, controller_epoch=controller_epoch)
    if unclean:
        outside = [b for b in replicas if b in live and b not in leaving]
        if outside:
            leader = _fewest_leaderships(outside, leader_counts)
            return PartitionState(leader, state.leader_epoch + 1, (leader,), controller_epoch)
    if state.leader in live and state.leader in leaving:
        return None  # leaving, but nobody can take over: it keeps leading until it stops
    if not state.online:
        return None
    # The ISR stays as it was but for its restarted members: the others hold every committed
    # message, so the first of them to come back may lead again without losing any.
    kept = tuple(b for b in state.isr if b not in restarted) or state.isr
    return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1, isr=kept,
                   controller_epoch=controller_epoch)


def next_state(state: PartitionState | None, replicas: Sequence[int], *, live: Collection[int],
               leader_counts: Mapping[int, int], controller_epoch: int, unclean: bool = False,
               leaving: Collection[int] = (), restarted: Collection[int] = (),
               failed: Collection[int] = ()) -> PartitionState | None:
    """Everything the controller changes in one partition: its first state, or an election
    (elect_leader) and then the ISR without the followers that are ``leaving``, ``restarted``
    or ``failed``, and, after an election, gone (not in ``live``). None when nothing changes."""
    live = set(live) - set(failed)
    if state is None:
        return initial_state(replicas, live, controller_epoch=controller_epoch)
    elected = elect_leader(state, replicas, live=live, leader_counts=leader_counts, controller_epoch=controller_epoch,
                           unclean=unclean, leaving=leaving, restarted=restarted, failed=failed)
    new = elected or state
    # A follower that is merely gone stays in the ISR of a leader that stays: the leader takes
    # it out itself at once (it watches the registrations too). The controller cannot tell a
    # leader whose run died and restarted, its registration alive until its session times
    # out: shrinking that ISR to it would make a replica that lost its unflushed tail the only
    # member, and electable (the simulation's seed 572942149). Kafka's controller does shrink
    # here; its leaders do not watch the registrations.
    for follower in [b for b in new.isr if (b not in live and elected is not None) or b in leaving or b in restarted]:
        new = remove_from_isr(new, follower, controller_epoch=controller_epoch) or new
    return None if new == state else new


def with_isr_sessions(new: PartitionState, old: PartitionState | None, sessions: Mapping[int, str]) -> PartitionState:
    """``new`` with each ISR member's creatorId recorded: kept from ``old`` for a member that
    was in its ISR, the member's current one (``sessions``) for a member joining."""
    known = dict(old.isr_sessions) if old is not None else {}
    elected = new.online and (old is None or new.leader_epoch != old.leader_epoch)
    entries = []
    for broker in new.isr:
        # A new epoch's leader is the reference from now on: its log is what is committed.
        fresh = old is None or broker not in old.isr or (elected and broker == new.leader)
        session = sessions.get(broker) if fresh else known.get(broker)
        if session:
            entries.append((broker, session))
    return replace(new, isr_sessions=tuple(sorted(entries)))


def remove_from_isr(state: PartitionState, broker_id: int, *, controller_epoch: int) -> PartitionState | None:
    """A follower's broker is gone or leaving: drop it from the ISR. None if it is not a
    follower in the ISR (the leader's own departure is elect_leader's)."""
    if broker_id == state.leader or broker_id not in state.isr or not state.online:
        return None
    return replace(state, isr=tuple(b for b in state.isr if b != broker_id), controller_epoch=controller_epoch)


def preferred_leader(state: PartitionState, replicas: Sequence[int], *, live: Collection[int],
                     controller_epoch: int) -> PartitionState | None:
    """Leadership back to the first replica, if it is live, in the ISR and not leading."""
    preferred = replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1, controller_epoch=controller_epoch)


def leader_counts(states: Mapping[object, PartitionState]) -> dict[int, int]:
    """How many partitions each broker leads, from every partition's state."""
    counts: dict[int, int] = {}
    for state in states.values():
        if state.online:
            counts[state.leader] = counts.get(state.leader, 0) + 1
    return counts
