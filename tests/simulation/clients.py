"""The simulation's clients: producers with acks=all and acks=1, and consumers reading what is
committed, through the entry points the broker's handlers use.

A producer asks a random live broker who leads (its ClusterState, as a metadata request
would), then sends that leader a real ``ProduceAckRequest`` through its real 0.7 handler
(handlers/kafka07/broker.Broker -> ReplicationRequests.produce_ack: leader_for_write,
append, manager.appended, manager.wait_for_commit) and decodes the real answer. A consumer
reads a replica's log as a 0.7 fetch of a replicated topic does (``replica_log(...).read``,
up to the high watermark), from any replica, and now and then rewinds to read again what it
read before.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka07.message_set import encode_message_set, valid_bytes, validate_message_set
from twisted_broker.codec.kafka07.replication import ProduceAckRequest, decode_produce_acks
from twisted_broker.codec.kafka07.requests import MultiProduceRequest, ProduceRequest
from twisted_broker.codec.kafka07.responses import decode_error_and_body
from twisted_broker.errors import InvalidMessage, KafkaError, OffsetOutOfRange

from tests.simulation.invariants import AckedWrite, log_bytes

__all__ = ["Clients"]

PRODUCE_TIMEOUT_MS = 3000
FETCH_BYTES = 4096


class Clients:
    def __init__(self, world) -> None:
        self.world, self.rng = world, world.rng
        self.running = False
        self.sequence = 0
        self.consumed = 0
        self.produced = 0
        self.positions: dict[tuple, int] = {}
        self.read_at: dict[tuple, list[int]] = {}

    def start(self) -> None:
        self.running = True
        self._schedule(self._produce, self.world.config.produce_interval_s)
        self._schedule(self._consume, self.world.config.consume_interval_s)

    def stop(self) -> None:
        self.running = False

    def _schedule(self, call, mean_s: float) -> None:
        def tick() -> None:
            if self.running:
                call()
                self._schedule(call, mean_s)
        self.world.clock.callLater(self.rng.expovariate(1 / mean_s), tick)

    # -- producing ---------------------------------------------------------------------------

    def _produce(self) -> None:
        world, rng, config = self.world, self.rng, self.world.config
        tp = rng.choice(world.partitions())
        acks = -1 if rng.random() < config.acks_all_rate else 1
        if rng.random() < config.large_message_rate:
            size = config.fetch_max_bytes + rng.randint(100, 2000)
        else:
            size = rng.randint(20, 400)
        self.sequence += 1
        head = f"m{self.sequence}/{tp[1]}/".encode()
        payload = head + bytes((self.sequence + i) % 251 for i in range(max(size - len(head), 0)))
        messages = encode_message_set([payload])
        live = world.live_brokers()
        if not live:
            return
        state = rng.choice(live).cluster.state(*tp)
        leader = world.broker(state.leader) if state is not None and state.online else None
        if leader is not None and config.producers_skip_unsynced and not leader.cluster.synced:
            return
        if leader is not None:
            world.clock.callLater(rng.uniform(0, 0.005), self._send, leader, tp, acks, messages)

    def _send(self, broker, tp, acks: int, messages: bytes) -> None:
        world = self.world
        if not broker.alive:
            return
        replica = broker.replica(*tp)
        before = replica.log.written_end if replica is not None else -1
        epoch = replica.leader_epoch if replica is not None else -1
        leading = replica is not None and replica.leader is not None and not replica.fenced
        request = ProduceAckRequest(acks, PRODUCE_TIMEOUT_MS,
                                    MultiProduceRequest((ProduceRequest(tp[0], tp[1], messages),)))
        try:
            answer = broker.handler.handle(request)
        except Exception as exc:  # the connection would be closed: the producer retries elsewhere
            world.trace(f"produce to broker {broker.broker_id}: {exc!r}")
            return
        self.produced += 1
        if replica is not None and replica.log.written_end == before + len(messages):
            world.checker.appended(tp, epoch, broker)
        if isinstance(answer, Deferred):
            answer.addCallback(self._answered, broker, leading, tp, acks, messages)
            answer.addErrback(lambda failure: world.trace(f"produce failed: {failure.value!r}"))
        else:
            self._answered(answer, broker, leading, tp, acks, messages)

    def _answered(self, pieces, broker, leading: bool, tp, acks: int, messages: bytes) -> None:
        world = self.world
        if not pieces:
            return
        _error, body = decode_error_and_body(memoryview(b"".join(bytes(p) for p in pieces))[4:])
        [(_topic, _partition, error, offset)] = decode_produce_acks(body)
        world.trace(f"produce {tp[0]}-{tp[1]} acks={acks}: error {error} at {offset}")
        if not error and not leading:
            world.checker.violation(
                f"broker {broker.broker_id} (incarnation {broker.incarnation}) accepted a write to replicated "
                f"{tp[0]}-{tp[1]} at {offset} while not its leader (its ClusterState synced: {broker.cluster.synced}; "
                f"a replicated topic not yet read from ZooKeeper is taken for a 0.7 topic)", "write-by-non-leader")
        if error or acks != -1:
            return
        end = offset + len(messages)
        copies = []
        for broker in world.live_brokers():
            replica = broker.replica(*tp)
            if replica is not None and replica.log.written_end >= end and log_bytes(replica.log, offset, end) == messages:
                copies.append(broker.broker_id)
        world.checker.acknowledged(AckedWrite(tp, offset, messages, world.clock.seconds()), copies)

    # -- consuming ---------------------------------------------------------------------------

    def _consume(self) -> None:
        world, rng = self.world, self.rng
        tp = rng.choice(world.partitions())
        holders = [b for b in world.live_brokers() if b.replica(*tp) is not None]
        if not holders:
            return
        broker = rng.choice(holders)
        position = self.positions.get(tp, 0)
        earlier = self.read_at.get(tp)
        if earlier and rng.random() < 0.15:
            position = rng.choice(earlier)
        try:  # the fetch size of 0.7's consumer: at least the largest message
            region = broker.requests.replica_log(*tp).read(position, world.config.max_message_size + FETCH_BYTES)
        except OffsetOutOfRange:
            return  # a lagging replica: the consumer asks another one
        except InvalidMessage as exc:
            world.checker.violation(f"consumer read of {tp[0]}-{tp[1]} at {position} from broker "
                                    f"{broker.broker_id}: {exc}", "consumer-read-failed")
            return
        except KafkaError:
            return
        if region is None:
            return
        try:
            data = region.read()
        finally:
            region.close()
        try:  # 0.7's consumer keeps the whole messages and fetches the rest again
            whole = valid_bytes(data)
            if not whole:  # the fetch size holds the largest message: not the start of one
                raise InvalidMessage(position, f"no whole message in {len(data)} bytes")
            data = data[:whole]
            validate_message_set(data)
        except InvalidMessage as exc:
            world.checker.violation(f"consumer got bytes that are not whole messages from broker {broker.broker_id}: "
                                    f"{tp[0]}-{tp[1]} at {position} ({len(data)} bytes): {exc} (defect 8)", "consumer-partial-entry")
            return
        self.consumed += 1
        world.trace(f"consume {tp[0]}-{tp[1]} at {position} from broker {broker.broker_id}: {len(data)} bytes")
        self.positions[tp] = max(self.positions.get(tp, 0), position + len(data))
        self.read_at.setdefault(tp, []).append(position)
