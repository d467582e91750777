"""The invariants the simulation checks after every step (docs/simulation.md).

The checker keeps, per partition, the *history*: the committed bytes as every replica has
shown them so far (each replica's log up to its high watermark must extend it or be a prefix
of it). For each broker it keeps how much of that history the broker's log has held while it
was in the ISR or led (``held``), lowered only when a crash took unflushed bytes away; each
acknowledged acks=all write keeps the brokers that held it at its acknowledgement. A replica
whose committed prefix disagrees with the history at offset ``x`` is a violation if a broker
held the history past ``x`` as an ISR member, or held an acknowledged write past ``x``, and
kept its disk; if none did, every such copy was in page caches that crashes lost, which the
guarantees allow (docs/replication.md), and the history is cut at ``x``. What consumers saw
is in the history, so the same rule covers it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.replication.replica import Role

__all__ = ["Checker", "AckedWrite"]

ISR_GRACE_S = 5.0


@dataclass
class AckedWrite:
    tp: tuple[str, int]
    offset: int
    data: bytes
    at: float
    holders: set = field(default_factory=set)  # brokers that held it at acknowledgement, disk kept

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


def log_bytes(log_, start: int, end: int) -> bytes:
    """Bytes [start, end) of a log's segment files, as written (flushed or not)."""
    out = []
    for segment in log_.segments:
        lo, hi = max(start, segment.start), min(end, segment.start + segment.size)
        if lo < hi:
            with open(segment.path, "rb") as f:
                f.seek(lo - segment.start)
                out.append(f.read(hi - lo))
    return b"".join(out)


def entry_start(history: bytes, offset: int) -> int:
    """The start of the entry of ``history`` holding ``offset``: logs that differ from some
    byte inside an entry (two entries whose size fields agree) differ from its start."""
    position = 0
    while position + 4 <= len(history):
        following = position + 4 + int.from_bytes(history[position:position + 4], "big")
        if following > offset:
            return position
        position = following
    return min(position, offset)


def first_difference(a: bytes, b: bytes) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


class Checker:
    def __init__(self, world) -> None:
        self.world = world
        self.history: dict[tuple, bytearray] = {}
        self.held: dict[tuple, int] = {}  # (broker id, tp) -> history bytes held, disk kept
        self.verified: dict[tuple, int] = {}  # (broker id, incarnation, tp) -> committed prefix checked
        self.matched: dict[tuple, int] = {}  # (broker id, incarnation, tp) -> written prefix matching
        self.pending_acks: list[AckedWrite] = []
        self.acked_writes: list[AckedWrite] = []
        self.acked = 0
        self.lost_with_page_caches = 0
        self.lost_with_every_in_sync_copy = 0  # acks=all writes whose in-sync holders all crashed
        self.writers: dict[tuple, tuple] = {}  # (tp, leader epoch) -> (broker, incarnation) that appended
        self.isr_mismatch_since: dict[tuple, float] = {}
        self.violations: list[str] = []
        self.last_crash: dict[tuple, tuple[float, int]] = {}  # (broker, tp) -> (time, end kept)
        self.disk_failures: dict[int, float] = {}  # broker -> when its disk last began to fail
        self.kinds: dict[str, int] = {}  # kind -> times broken (the first of each is in violations)

    def violation(self, text: str, kind: str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.world.trace(f"VIOLATION {text}")
        if self.kinds[kind] == 1:
            self.violations.append(f"[{kind}] {text}")

    # -- events ----------------------------------------------------------------------------

    def truncated(self, broker_id: int, incarnation: int, tp, offset: int) -> None:
        for table in (self.verified, self.matched):
            key = (broker_id, incarnation, tp)
            if key in table:
                table[key] = min(table[key], offset)

    def disk_failed(self, broker_id: int) -> None:
        self.disk_failures[broker_id] = self.world.clock.seconds()

    def gave_up(self, broker_id: int, tp) -> None:
        """A broker gave its replica of ``tp`` up because its log failed on disk (KIP-112):
        that copy is lost to the cluster as a dead disk's would be (the broker neither leads
        nor follows it again in this process, and the controller takes it out of the ISR), so
        it holds nothing for the guarantee, which is Kafka's: a write survives while an ISR
        member that holds it is *alive* (docs/replication.md §9)."""
        self.held[(broker_id, tp)] = 0
        for write in self.acked_writes:
            if write.tp == tp:
                write.holders.discard(broker_id)
        self._lost_with_every_in_sync_copy(broker_id, {tp: 0})

    def crashed(self, broker_id: int, survived: dict) -> None:
        """``survived``: tp -> the end offset its log kept."""
        for tp, end in survived.items():
            self.last_crash[(broker_id, tp)] = (self.world.clock.seconds(), end)
        for (b, tp), held in list(self.held.items()):
            if b == broker_id:
                self.held[(b, tp)] = min(held, survived.get(tp, 0))
        for write in self.acked_writes:
            if broker_id in write.holders and survived.get(write.tp, 0) < write.end:
                write.holders.discard(broker_id)
        self._lost_with_every_in_sync_copy(broker_id, survived)

    def _lost_with_every_in_sync_copy(self, broker_id: int, survived: dict) -> None:
        """The guarantee the code is held to (docs/replication.md §9) is Kafka's: an
        acknowledged write survives while one member of the partition's ISR that holds it
        keeps running, or stops without losing its page cache. Two cases fall outside it,
        counted here and not checked further: what no ISR member holds any more (its other
        holders were taken out of the ISR earlier; only an ISR member may lead: Kafka's "last
        replica standing", which KIP-966 addresses), and everything of a partition whose
        every ISR member is down at once after power losses (what each had not flushed may be
        gone; broader than the code's rule, under which the longest recovered log leads, so
        that what one of them kept on disk survives: not checked yet)."""
        for tp in survived:
            state = self.world.zk_state(tp)[0]
            if state is None:
                continue
            isr = set(state.isr) | {state.leader} - {-1}
            everyone_down = not any(self._serving(b, tp) for b in isr if b != broker_id)
            in_sync = 0 if everyone_down else \
                max((h for (b, t), h in self.held.items() if t == tp and b in isr), default=0)
            for (b, t), held in list(self.held.items()):
                if t == tp and (everyone_down or b not in isr) and held > in_sync:
                    self.held[(b, t)] = in_sync
            for write in self.acked_writes:
                if write.tp == tp and write.holders and (everyone_down or not write.holders & isr):
                    write.holders = set()
                    self.lost_with_every_in_sync_copy += 1
            if everyone_down:
                self.world.trace(f"every in-sync replica of {tp[0]}-{tp[1]} {sorted(isr)} is down after a power "
                                 f"loss: what none had flushed may be lost, as in Kafka")

    def _serving(self, broker_id: int, tp) -> bool:
        """The broker runs and has not given its replica of ``tp`` up on a failed disk."""
        broker = self.world.brokers[broker_id]
        return broker.alive and tp not in broker.manager.offline

    def appended(self, tp, epoch: int, broker) -> None:
        """A leader accepted a client's write at ``epoch``: one broker incarnation per epoch
        (a restarted broker is another leader: it may have lost what its predecessor wrote)."""
        writer = (broker.broker_id, broker.incarnation)
        other = self.writers.setdefault((tp, epoch), writer)
        if other != writer:
            self.violation(f"two leaders accepted writes to {tp[0]}-{tp[1]} at leader epoch {epoch}: broker {other[0]} "
                           f"(incarnation {other[1]}) and broker {writer[0]} (incarnation {writer[1]})", "two-leaders")

    def acknowledged(self, write: AckedWrite, copies: list[int]) -> None:
        """An acks=all write was acknowledged; ``copies``: the brokers whose logs hold it now."""
        self.acked += 1
        minimum = self.world.config.min_insync_replicas
        # An ISR member that held the write when it last fetched and has since lost power
        # counts for its leader until the leader can know (its fetches stop for the lag time,
        # or its registration goes): the copy was real when the leader counted it. Kafka's
        # guarantee under power loss is the same (docs/replication.md §9).
        state = self.world.zk_state(write.tp)[0]
        window = self.world.config.lag_time_max_ms / 1000
        # (One that kept it on its disk holds it too, though it is down: `copies` counts live
        # logs only.)
        unseen = {b for (b, t), (when, kept) in self.last_crash.items()
                  if t == write.tp and state is not None and b in state.isr
                  and write.at - when <= window} - set(copies)
        # So does one whose disk failed since (its log refuses the write, or lost it with a
        # failed fsync), until the controller takes it out of the ISR.
        unseen |= {b for b, when in self.disk_failures.items()
                   if state is not None and b in state.isr and write.at - when <= window} - set(copies)
        if len(copies) + len(unseen) < minimum and self.world.config.check_min_insync:
            self.violation(f"acks=all write to {write.tp[0]}-{write.tp[1]} at offset {write.offset} acknowledged "
                           f"with {len(copies)} copies {copies} < min.insync.replicas={minimum} (defect 1)", "ack-below-min-insync")
        write.holders = set(copies)
        self.pending_acks.append(write)
        self.acked_writes.append(write)

    def state_written(self, session_id: int, path: str, old: bytes | None, new: bytes | None) -> None:
        """ZooKeeper applied a write (the server's hook): elections only by the controller."""
        if not path.endswith("/state") or new is None:
            return
        try:
            new_state = PartitionState.decode(new)
            old_state = PartitionState.decode(old) if old is not None else None
        except ValueError:
            return
        if old_state is None or (new_state.leader, new_state.leader_epoch) == (old_state.leader,
                                                                               old_state.leader_epoch):
            return
        if new_state.leader_epoch < old_state.leader_epoch:
            self.violation(f"{path}: leader epoch went back {old_state.leader_epoch} -> {new_state.leader_epoch}",
                           "epoch-went-back")
        server = self.world.zk_server
        controller = server.nodes.get("/replication/controller")
        if controller is None or controller.owner != session_id:
            self.violation(f"{path}: election (epoch {old_state.leader_epoch} -> {new_state.leader_epoch}, leader "
                           f"{new_state.leader}) written by session {session_id:x}, not the current controller's "
                           f"(a deposed controller's late write, defect 6)", "deposed-controller-write")

    # -- after every step --------------------------------------------------------------------

    def after_step(self) -> None:
        world = self.world
        for broker in world.live_brokers():
            for (topic, partition), replica in list(broker.manager.replicas.items()):
                # A replica's committed prefix counts once it leads, or follows after cutting
                # what its leader lacks: a restarted replica's high watermark checkpoint may
                # cover bytes the cluster lost with every in-sync copy, which it cuts before it
                # follows (what consumers read from it is checked as they read it).
                if replica.role in (Role.LEADER, Role.FOLLOWING):
                    self._check_replica(broker, (topic, partition), replica)
        still = []
        for write in self.pending_acks:
            history = self.history.get(write.tp, b"")
            end = write.offset + len(write.data)
            if len(history) >= end:
                if bytes(history[write.offset:end]) != write.data:
                    self.violation(f"acknowledged acks=all write at {write.tp[0]}-{write.tp[1]}:{write.offset} is not "
                                   f"what was committed there", "ack-not-committed")
            else:
                still.append(write)
        self.pending_acks = still
        self._check_isr()

    def _check_replica(self, broker, tp, replica) -> None:
        log_ = replica.log
        key = (broker.broker_id, broker.incarnation, tp)
        history = self.history.setdefault(tp, bytearray())
        hw, written = log_.end_offset, log_.written_end
        verified = min(self.verified.get(key, 0), hw)
        if hw > verified:
            data = log_bytes(log_, verified, hw)
            overlap = bytes(history[verified:hw])
            at = first_difference(data, overlap)
            if at < len(overlap):
                self._diverged(broker, tp, entry_start(history, verified + at), log_)
                return
            if hw > len(history):
                history.extend(data[len(history) - verified:])
        self.verified[key] = hw
        matched = min(self.matched.get(key, 0), written)
        limit = min(written, len(history))
        if limit > matched:
            data = log_bytes(log_, matched, limit)
            matched += first_difference(data, bytes(history[matched:limit]))
        self.matched[key] = matched
        state = self.world.zk_state(tp)[0]
        if state is not None and (broker.broker_id in state.isr or state.leader == broker.broker_id):
            held_key = (broker.broker_id, tp)
            self.held[held_key] = max(self.held.get(held_key, 0), matched)

    def _diverged(self, broker, tp, offset: int, log_) -> None:
        history = self.history[tp]
        # A holder's matched prefix may end inside an entry (a new entry whose first bytes, its
        # size, agree with the old one's): it holds whole entries up to that entry's start.
        holders = {b: h for (b, t), h in self.held.items() if t == tp and entry_start(history, h) > offset}
        name = f"{tp[0]}-{tp[1]}"
        lost_copies = bool(holders)
        if holders:
            self.violation(f"committed data lost: broker {broker.broker_id}'s log of {name} up to its high watermark "
                           f"differs from the committed history at offset {offset}, which brokers "
                           f"{sorted(holders)} held as ISR members (up to {max(holders.values())}) and kept on disk"
                           f"{self._diagnosis(tp, offset)}", "committed-data-lost")
        for write in self.acked_writes:
            if write.tp == tp and write.end > offset and write.holders \
                    and log_bytes(log_, write.offset, write.end) != write.data:  # not a write made since
                self.violation(f"acknowledged acks=all write lost: {name} at {write.offset} ({len(write.data)} bytes), "
                               f"held at its acknowledgement by brokers {sorted(write.holders)} which kept their disk; "
                               f"broker {broker.broker_id}'s committed log differs at offset {offset}"
                               f"{self._diagnosis(tp, offset)}", "acked-write-lost")
                break
        if not lost_copies:
            self.world.trace(f"history of {name} cut at {offset}: every copy past it was lost with page caches")
        history = self.history[tp]
        del history[offset:]
        for table in (self.verified, self.matched):
            for key in table:
                if key[2] == tp:
                    table[key] = min(table[key], offset)
        for key in self.held:
            if key[1] == tp:
                self.held[key] = min(self.held[key], offset)
        lost = [w for w in self.acked_writes if w.tp == tp and w.end > offset]
        if not lost_copies:
            self.lost_with_page_caches += len(lost)
        self.acked_writes = [w for w in self.acked_writes if w not in lost]
        self.pending_acks = [w for w in self.pending_acks if w not in lost]

    def follower_dropped(self, leader, follower_id: int, offset: int, high_watermark: int) -> None:
        """A leader drops an in-sync follower that fetched from below the high watermark (the
        rule for a follower that restarted and lost its tail). If the follower's log holds
        the high watermark, the fetch was an old one: a held fetch answered after its
        connection died (defect 7, second half)."""
        for broker in self.world.live_brokers():
            for tp, replica in broker.manager.replicas.items():
                if replica.leader is leader:
                    follower = self.world.broker(follower_id)
                    theirs = follower.replica(*tp) if follower is not None else None
                    if theirs is not None and theirs.log.written_end >= high_watermark:
                        self.violation(f"{tp[0]}-{tp[1]}: leader {broker.broker_id} dropped follower {follower_id} from "
                                       f"the ISR for a fetch from {offset} below the high watermark {high_watermark}, "
                                       f"but the follower's log holds {theirs.log.written_end} bytes: an old (held) "
                                       f"fetch was counted (defect 7)", "healthy-follower-dropped")
                    return

    def _diagnosis(self, tp, offset: int) -> str:
        """What ZooKeeper says now, and the current leader's last crash: enough to tell a
        restarted replica elected with less than was committed (defect 5) from other losses."""
        state, _version = self.world.zk_state(tp)
        if state is None:
            return ""
        text = f"; ZooKeeper now: leader {state.leader} epoch {state.leader_epoch} ISR {list(state.isr)}"
        crash = self.last_crash.get((state.leader, tp))
        if crash is not None:
            text += f"; the leader last crashed at t={crash[0]:.3f} keeping {crash[1]} bytes"
            if crash[1] <= offset:
                text += " (a restarted replica that lost its tail is leading)"
        return text

    def _check_isr(self) -> None:
        """A leader at ZooKeeper's epoch, with no ISR write of its own pending and the state's
        version cached, must hold ZooKeeper's ISR (defect 7: a change lost in a race)."""
        world = self.world
        now = world.clock.seconds()
        for tp in world.partitions():
            state, version = world.zk_state(tp)
            key = tp
            ok = True
            if state is not None and state.online:
                broker = world.broker(state.leader)
                replica = broker.replica(*tp) if broker is not None else None
                leader = replica.leader if replica is not None else None
                if (leader is not None and not leader.fenced and leader.pending_isr is None
                        and leader.leader_epoch == state.leader_epoch
                        and broker.cluster.version(*tp) == version and set(leader.isr) != set(state.isr)):
                    ok = False
                    since = self.isr_mismatch_since.setdefault(key, now)
                    if now - since > ISR_GRACE_S:
                        self.violation(f"{tp[0]}-{tp[1]}: leader {state.leader}'s ISR {sorted(leader.isr)} differs "
                                       f"from ZooKeeper's {sorted(state.isr)} for {ISR_GRACE_S:.0f} s with no write "
                                       f"pending (an ISR change lost, defect 7)", "isr-change-lost")
            if ok:
                self.isr_mismatch_since.pop(key, None)

    # -- at the end ------------------------------------------------------------------------

    def healthy(self) -> str | None:
        """None when every partition is led, its ISR full (in ZooKeeper and in its leader)
        and every replica follows that leader; else what is not so."""
        world = self.world
        for broker in world.live_brokers():
            if not broker.cluster.synced:
                return f"broker {broker.broker_id} has not read the replication state from ZooKeeper"
        if not any(broker.controller.active for broker in world.live_brokers()):
            return "no broker acts as the controller"
        for tp in world.partitions():
            name = f"{tp[0]}-{tp[1]}"
            state, _version = world.zk_state(tp)
            replicas = world.assignment(tp)
            if state is None or not state.online:
                return f"{name} has no leader ({state})"
            if set(state.isr) != set(replicas):
                return f"{name}: ISR {list(state.isr)} in ZooKeeper, replicas {list(replicas)}"
            leader_broker = world.broker(state.leader)
            replica = leader_broker.replica(*tp) if leader_broker else None
            if replica is None or replica.leader is None or replica.fenced \
                    or replica.leader_epoch != state.leader_epoch:
                return f"{name}: broker {state.leader} does not lead it at epoch {state.leader_epoch}"
            if set(replica.leader.isr) != set(replicas):
                return f"{name}: leader's ISR {list(replica.leader.isr)}"
            for b in replicas:
                follower = world.broker(b)
                r = follower.replica(*tp) if follower else None
                if r is None or r.leader_epoch != state.leader_epoch:
                    return f"{name}: broker {b} does not follow epoch {state.leader_epoch}"
        return None
