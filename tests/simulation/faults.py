"""The seeded fault schedule: what breaks, when, and when it is repaired.

Each fault kind is a function of the world and its random source; ``FaultSchedule`` picks one
at exponential intervals from the kinds a run allows (``SimConfig.faults``) and logs each as
it happens, so a failing seed prints the schedule that broke it. Every fault is repaired
later by the schedule itself; ``heal_all`` repairs everything at once when the fault phase
ends (partitions healed, crashed brokers restarted, failed disks replaced).
"""

from __future__ import annotations

from tests.simulation.sim_disk import EIO, ENOSPC

__all__ = ["FaultSchedule", "FAULT_KINDS"]


class FaultSchedule:
    def __init__(self, world) -> None:
        self.world = world
        self.rng = world.rng
        self.events: list[tuple[int, float, str]] = []  # (step, time, what)
        self.counts: dict[str, int] = {}
        self.active = True

    def log(self, kind: str, what: str) -> None:
        world = self.world
        self.events.append((world.steps, world.clock.seconds(), what))
        self.counts[kind] = self.counts.get(kind, 0) + 1
        world.trace(f"fault: {what}")

    def start(self) -> None:
        self._next()

    def _next(self) -> None:
        config = self.world.config
        if not self.active or not config.faults:
            return
        self.world.clock.callLater(self.rng.expovariate(1 / config.mean_fault_interval_s), self._inject)

    def _inject(self) -> None:
        if not self.active:
            return
        kind = self.rng.choice(self.world.config.faults)
        FAULT_KINDS[kind](self)
        self._next()

    def later(self, delay: float, call, *args) -> None:
        self.world.clock.callLater(delay, lambda: call(*args) if self.active else None)

    # -- the kinds ---------------------------------------------------------------------------

    def _victim(self, prefer_leader: bool = False):
        world = self.world
        live = world.live_brokers()
        if not live:
            return None
        if prefer_leader and self.rng.random() < 0.7:
            leaders = [world.broker(s.leader) for tp in world.partitions()
                       for s in [world.zk_state(tp)[0]] if s is not None and s.online]
            leaders = [b for b in leaders if b is not None]
            if leaders:
                return self.rng.choice(leaders)
        return self.rng.choice(live)

    def crash(self, prefer_leader: bool = True) -> None:
        broker = self._victim(prefer_leader)
        if broker is None:
            return
        torn = self.rng.random() < 0.5
        self.log("crash", f"crash broker {broker.broker_id}{' (last write torn)' if torn else ''}")
        self.world.crash(broker.broker_id, torn=torn)
        self.later(self.rng.uniform(0.2, 12.0), self.restart, broker.broker_id)

    def crash_leader_twice(self) -> None:
        """Crash a partition's leader, then, within a flush interval, the broker that took
        over: it took office at a log end it had not flushed (defect 2's ground)."""
        world = self.world
        led = [(tp, s.leader) for tp in world.partitions() for s in [world.zk_state(tp)[0]]
               if s is not None and s.online and world.broker(s.leader) is not None]
        if not led:
            return
        tp, leader = self.rng.choice(led)
        self.log("crash", f"crash broker {leader} (leader of {tp[0]}-{tp[1]})")
        world.crash(leader, torn=self.rng.random() < 0.5)
        self.later(self.rng.uniform(0.2, 12.0), self.restart, leader)
        self.later(0.05, self._crash_new_leader, tp, leader, world.clock.seconds() + 15.0)

    def _crash_new_leader(self, tp, old: int, give_up_at: float) -> None:
        """Once another broker leads (the old one's session must expire first), crash it
        within a flush interval of its taking office."""
        world = self.world
        state = world.zk_state(tp)[0]
        if state is None or not state.online or state.leader == old or world.broker(state.leader) is None:
            if world.clock.seconds() < give_up_at:
                self.later(0.05, self._crash_new_leader, tp, old, give_up_at)
            return
        self.later(self.rng.uniform(0.05, world.config.flush_interval_ms / 1000), self._crash_leader_now, tp, old)

    def _crash_leader_now(self, tp, old: int) -> None:
        state = self.world.zk_state(tp)[0]
        if state is not None and state.online and state.leader != old and self.world.broker(state.leader):
            self.log("crash", f"crash broker {state.leader} (the new leader of {tp[0]}-{tp[1]})")
            self.world.crash(state.leader, torn=self.rng.random() < 0.5)
            self.later(self.rng.uniform(0.2, 6.0), self.restart, state.leader)
            if self.rng.random() < 0.5:  # and the rest of the rack: the partition goes offline
                for broker in self.world.live_brokers():
                    self.log("crash", f"crash broker {broker.broker_id} (power cut)")
                    self.world.crash(broker.broker_id, torn=self.rng.random() < 0.5)
                    self.later(self.rng.uniform(0.2, 12.0), self.restart, broker.broker_id)

    def crash_controller(self) -> None:
        world = self.world
        controllers = [b for b in world.live_brokers() if b.controller.active]
        if not controllers:
            return self.crash()
        broker = controllers[0]
        self.log("crash", f"crash broker {broker.broker_id} (the controller)")
        world.crash(broker.broker_id, torn=self.rng.random() < 0.5)
        self.later(self.rng.uniform(0.2, 12.0), self.restart, broker.broker_id)

    def restart(self, broker_id: int) -> None:
        if self.world.broker(broker_id) is None:
            self.log("restart", f"restart broker {broker_id}")
            self.world.restart(broker_id)

    def partition(self) -> None:
        ids = list(range(self.world.config.brokers))
        a, b = self.rng.sample(ids, 2)
        if self.world.network.is_cut(a, b):
            return
        self.log("partition", f"partition brokers {a} <-> {b}")
        self.world.network.cut(a, b)
        self.later(self.rng.uniform(0.5, 25.0), self._heal_pair, a, b)

    def _heal_pair(self, a: int, b: int) -> None:
        if self.world.network.is_cut(a, b):
            self.log("heal", f"heal brokers {a} <-> {b}")
            self.world.network.heal(a, b)

    def isolate(self) -> None:
        """One broker cut from every other broker, and perhaps from ZooKeeper too."""
        broker = self._victim(prefer_leader=True)
        if broker is None:
            return
        also_zk = self.rng.random() < 0.5
        self.log("partition", f"isolate broker {broker.broker_id} from the brokers{' and ZooKeeper' if also_zk else ''}")
        for other in range(self.world.config.brokers):
            if other != broker.broker_id:
                self.world.network.cut(broker.broker_id, other)
        if also_zk:
            broker.zk.cut()
        delay = self.rng.uniform(0.5, 20.0)
        for other in range(self.world.config.brokers):
            if other != broker.broker_id:
                self.later(delay, self._heal_pair, broker.broker_id, other)
        if also_zk:
            self.later(delay, self._heal_zk, broker.broker_id, broker.incarnation)

    def zk_partition(self) -> None:
        broker = self._victim(prefer_leader=True)
        if broker is None or not broker.zk.link_up:
            return
        self.log("zk", f"cut broker {broker.broker_id} from ZooKeeper")
        broker.zk.cut()
        timeout = self.world.config.session_timeout_ms / 1000
        self.later(self.rng.uniform(0.3, 2.5 * timeout), self._heal_zk, broker.broker_id, broker.incarnation)

    def _heal_zk(self, broker_id: int, incarnation: int) -> None:
        broker = self.world.broker(broker_id)
        if broker is not None and broker.incarnation == incarnation and not broker.zk.link_up:
            self.log("heal", f"reconnect broker {broker_id} to ZooKeeper")
            broker.zk.heal()

    def disk(self) -> None:
        broker = self._victim()
        if broker is None:
            return
        failure = self.rng.choice([EIO, ENOSPC])
        fsync = failure == EIO and self.rng.random() < 0.5
        what = "fsync fails with EIO" if fsync else f"writes fail with {'EIO' if failure == EIO else 'ENOSPC'}"
        self.log("disk", f"broker {broker.broker_id}'s disk: {what}")
        self.world.disk.fail(broker.log_dir, failure, fsync=fsync)
        self.world.checker.disk_failed(broker.broker_id)
        self.later(self.rng.uniform(1.0, 15.0), self._replace_disk, broker.broker_id, broker.incarnation)

    def _replace_disk(self, broker_id: int, incarnation: int) -> None:
        """The operator repairs the disk and restarts the broker (a failed log refuses writes
        until its broker restarts)."""
        world = self.world
        broker = world.broker(broker_id)
        world.disk.repair(world.broker_dir(broker_id))
        # (A broker restarted since on the failing disk, which gave replicas up again, is
        # restarted too: a given-up replica comes back only with a new process.)
        if broker is not None and (broker.incarnation == incarnation or broker.manager.offline.partitions):
            self.log("disk", f"broker {broker_id}'s disk repaired; broker restarted")
            world.crash(broker_id, torn=False)
            world.restart(broker_id)

    def reset_connections(self) -> None:
        connections = list(self.world.network.connections)
        if connections:
            connection = self.rng.choice(connections)
            self.log("reset", f"reset connection {connection.client.broker_id} -> {connection.server.broker_id}")
            connection.reset("reset (simulated)")

    # -- the end of the fault phase -------------------------------------------------------

    def heal_all(self) -> None:
        self.active = False
        world = self.world
        self.log("heal", "faults stop: heal everything, restart crashed brokers, replace failed disks")
        for pair in list(world.network.cuts):
            world.network.heal(*pair)
        for broker_id in range(world.config.brokers):
            broker = world.broker(broker_id)
            failed = world.broker_dir(broker_id) in world.disk.write_errors or \
                world.broker_dir(broker_id) in world.disk.fsync_errors or (
                    broker is not None and (broker.manager.offline.partitions
                                            or any(r.log.write_error for r in broker.manager.replicas.values())))
            world.disk.repair(world.broker_dir(broker_id))
            if broker is not None and failed:
                world.crash(broker_id, torn=False)
                broker = None
            if broker is None:
                world.restart(broker_id)
            else:
                broker.zk.heal()


FAULT_KINDS = {
    "crash": FaultSchedule.crash,
    "crash_controller": FaultSchedule.crash_controller,
    "crash_leader_twice": FaultSchedule.crash_leader_twice,
    "partition": FaultSchedule.partition,
    "isolate": FaultSchedule.isolate,
    "zk": FaultSchedule.zk_partition,
    "disk": FaultSchedule.disk,
    "reset": FaultSchedule.reset_connections,
}
