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
                            and out of the ISR; as leader: re-elected, epoch + 1; while one that
                            did not restart is away (its session expired, its process and page
                            cache may live on), offline and waiting for it, the restarted ones
                            kept in the ISR (the one away may have restarted too, and lost more)
every ISR member restarted  (or its log failed) none is known whole: once every live member
                            published its recovered (last leader epoch, log end) (``ends``),
                            the highest leads, epoch + 1 (ties: fewest leaderships, then
                            assignment order); until then offline, ISR kept
log failed on a broker      ``failed``: the brokers that list the partition offline: elected
                            away, out of the ISR, never elected nor waited for
==========================  ==================================================================

Each function returns ``None`` when the state need not change, so a controller that re-runs
a half-done failover writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from twisted_broker.registry.replication_paths import NO_LEADER, PartitionState

NO_ENDS: Mapping[int, tuple[int, int]] = MappingProxyType({})  # no broker published its log ends


def initial_state(replicas: Sequence[int], live: Collection[int], *, controller_epoch: int) -> PartitionState:
    """A new partition's first state."""
    alive = [b for b in replicas if b in live]
    if not alive:
        return PartitionState(NO_LEADER, 0, tuple(replicas), controller_epoch)
    return PartitionState(alive[0], 0, tuple(alive), controller_epoch)


def _fewest_leaderships(candidates: Sequence[int], leader_counts: Mapping[int, int]) -> int:
    # min is stable: among equals, the first in assignment order wins.
    return min(candidates, key=lambda b: leader_counts.get(b, 0))


def every_member_restarted(state: PartitionState, restarted: Collection[int], failed: Collection[int] = ()) -> bool:
    """Whether every ISR member restarted since ``state`` was written or lost its log there:
    then the published log ends decide (the controller reads them only then)."""
    return set(state.isr) <= set(restarted) | set(failed)


def elect_leader(state: PartitionState, replicas: Sequence[int], *, live: Collection[int],
                 leader_counts: Mapping[int, int], controller_epoch: int, unclean: bool = False,
                 leaving: Collection[int] = (), restarted: Collection[int] = (),
                 failed: Collection[int] = (), ends: Mapping[int, tuple[int, int]] = NO_ENDS) -> PartitionState | None:
    """The state after the current leader is gone (not in ``live``), ``leaving`` (controlled
    shutdown), ``restarted`` (registered anew since this state was written) or ``failed``
    (its log of the partition failed); also brings back an offline partition. None when the
    leader may stay.

    Candidates are ISR members that are live, assigned, not leaving, not restarted and not
    failed; ``leader_counts`` is how many partitions each broker leads now. ``ends``: each
    broker's published (last leader epoch, log end) of this partition, for its current
    registration (only brokers that published); used when every ISR member restarted.
    """
    if failed:
        # A failed log is no candidate, and nothing to wait for: like a restart that lost it all.
        live, restarted = set(live) - set(failed), set(restarted) | set(failed)
    if state.leader in live and state.leader not in leaving and state.leader not in restarted:
        return None
    if every_member_restarted(state, restarted):
        return _longest_log(state, replicas, live=live, ends=ends, leader_counts=leader_counts,
                            controller_epoch=controller_epoch, failed=failed)
    candidates = [b for b in replicas if b in state.isr and b in live and b not in leaving and b not in restarted]
    if candidates:
        leader = _fewest_leaderships(candidates, leader_counts)
        new_isr = tuple(b for b in state.isr if b in live and b not in leaving and b not in restarted)
        return PartitionState(leader, state.leader_epoch + 1, new_isr, controller_epoch)
    if unclean:
        outside = [b for b in replicas if b in live and b not in leaving]
        if outside:
            leader = _fewest_leaderships(outside, leader_counts)
            return PartitionState(leader, state.leader_epoch + 1, (leader,), controller_epoch)
    if state.leader in live and state.leader in leaving:
        return None  # leaving, but nobody can take over: it keeps leading until it stops
    if not state.online:
        return None
    # A member that did not restart is away (its session expired; its process and page cache
    # may live on): offline, waiting for it (simulation seed 570033040).
    return _offline(state, restarted=restarted, failed=failed, controller_epoch=controller_epoch)


def _longest_log(state: PartitionState, replicas: Sequence[int], *, live: Collection[int],
                 ends: Mapping[int, tuple[int, int]], leader_counts: Mapping[int, int], controller_epoch: int,
                 failed: Collection[int]) -> PartitionState | None:
    # Every ISR member restarted or lost its log (a rack lost power, at once or one after
    # another): each may have lost its unflushed tail, and the one that kept the most must
    # lead (electing the first one back lost acknowledged writes: simulation seeds 606520049,
    # 607391089). Every such member is registered (live) or failed, so waiting for the live
    # ones' ends ends once the brokers are back.
    members = [b for b in replicas if b in state.isr and b in live]
    if members and all(b in ends for b in members):
        longest = max(tuple(ends[b]) for b in members)
        leader = _fewest_leaderships([b for b in members if tuple(ends[b]) == longest], leader_counts)
        return PartitionState(leader, state.leader_epoch + 1, tuple(b for b in state.isr if b in live), controller_epoch)
    if not state.online:
        return None
    return _offline(state, restarted=state.isr, failed=failed, controller_epoch=controller_epoch)


def _offline(state: PartitionState, *, restarted: Collection[int], failed: Collection[int],
             controller_epoch: int) -> PartitionState:
    # The ISR stays as it was but for the members whose log failed: those that did not restart
    # hold every committed message, and a restarted one may hold more than one away (which
    # may have restarted too, and lost more: simulation seed 607391089). A restarted member
    # whose creatorId the state does not record is dropped: once the state is rewritten,
    # nothing would tell it restarted (only a state of a version before isr_sessions).
    recorded = dict(state.isr_sessions)
    kept = tuple(b for b in state.isr if b not in failed and (b not in restarted or b in recorded)) or state.isr
    return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1, isr=kept,
                   controller_epoch=controller_epoch)


def next_state(state: PartitionState | None, replicas: Sequence[int], *, live: Collection[int],
               leader_counts: Mapping[int, int], controller_epoch: int, unclean: bool = False,
               leaving: Collection[int] = (), restarted: Collection[int] = (),
               failed: Collection[int] = (), ends: Mapping[int, tuple[int, int]] = NO_ENDS) -> PartitionState | None:
    """Everything the controller changes in one partition: its first state, or an election
    (elect_leader) and then the ISR without the followers that are ``leaving``, ``restarted``
    or ``failed``, and, after an election, gone (not in ``live``). None when nothing changes."""
    live = set(live) - set(failed)
    if state is None:
        return initial_state(replicas, live, controller_epoch=controller_epoch)
    elected = elect_leader(state, replicas, live=live, leader_counts=leader_counts, controller_epoch=controller_epoch,
                           unclean=unclean, leaving=leaving, restarted=restarted, failed=failed, ends=ends)
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
