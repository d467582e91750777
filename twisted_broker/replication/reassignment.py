"""One step of a partition's reassignment (docs/replication.md §3, Controller). Pure: the
controller writes what a step returns and calls again when ZooKeeper moves.

===========================================  ===============================================
situation                                    step
===========================================  ===============================================
target = current replicas                    done
a target broker is not a replica yet         widen the assignment to current + new ones
                                             (they start copying)
some target broker is not in the ISR yet     wait (an ISR change calls again)
the leader is not in the target              new state: the first target ISR member leads,
                                             epoch + 1, ISR = its target members
ISR holds brokers outside the target         new state: ISR = its target members
then                                         narrow the assignment to the target: done
===========================================  ===============================================

Data is thus copied to every new replica before any old one is dropped, and leadership never
goes to a replica outside the ISR. A step's state and narrowed assignment are written in one
transaction, the assignment first (controller_admin.py's ``_write_assignment`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from twisted_broker.registry.replication_paths import PartitionState


@dataclass(frozen=True)
class ReassignmentStep:
    assignment: tuple[int, ...] | None = None  # the partition's replicas to write, if any
    state: PartitionState | None = None  # the partition's state to write first, if any
    done: bool = False


WAIT = ReassignmentStep()


def reassignment_step(current: tuple[int, ...], target: tuple[int, ...], state: PartitionState | None, *,
                      controller_epoch: int) -> ReassignmentStep:
    """The next step of moving a partition from ``current`` to ``target`` replicas."""
    if current == target:
        return ReassignmentStep(done=True)
    if not set(target) <= set(current):
        return ReassignmentStep(assignment=current + tuple(b for b in target if b not in current))
    if state is None or not set(target) <= set(state.isr):
        return WAIT
    in_target = tuple(b for b in state.isr if b in target)
    new_state = None
    if state.leader not in target:
        new_state = PartitionState(in_target[0], state.leader_epoch + 1, in_target, controller_epoch)
    elif in_target != state.isr:
        new_state = replace(state, isr=in_target, controller_epoch=controller_epoch)
    return ReassignmentStep(assignment=target, state=new_state, done=True)
