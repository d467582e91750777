"""kill -9 (and SIGTERM) of a partition's leader again and again, under continuous acks=all
produce and consumers following the leaders, on three real brokers.

Each cycle waits until every replica is in sync, stops the leader of one partition, measures
the failover (the stop to the first acknowledgement by a new leader of every partition it
led), restarts it and measures its rejoin (the start to being back in every ISR). At the end
nothing acknowledged or seen by a consumer is missing or changed, and every partition's
replicas hold byte-identical segment files. ``RELIABILITY_SCALE`` sets the number of cycles
(make test: 3 kills and 1 SIGTERM; make soak: 20 and 5); the figures go to the summary.
"""

import signal
import statistics
import time

from tests.support.faults.traffic import LeaderConsumer, LeaderProducer, Leaders, check_history, group_of
from tests.support.reliability import record, record_durations
from tests.support.replicated_cluster import Wire, all_in_sync, segment_bytes

TOPIC = "cycles"
PARTITIONS = (0, 1)
SESSION_TIMEOUT_S = 2.0
KILL_FAILOVER_BOUND_S = SESSION_TIMEOUT_S + 2.0
SIGTERM_FAILOVER_BOUND_S = 2.0


def in_every_isr(cluster, broker_id: int) -> bool:
    try:
        [answer] = cluster.metadata(TOPIC).topics
    except (OSError, ConnectionError):
        return False
    return answer.error == 0 and bool(answer.partitions) and all(broker_id in p.isr for p in answer.partitions)


def test_leader_kill_cycles_lose_nothing_and_end_byte_identical(three_brokers, scale, request):
    cluster = three_brokers
    cluster.create(TOPIC)
    leaders = Leaders(cluster.bootstrap, TOPIC)
    producers = {p: LeaderProducer(leaders, p) for p in PARTITIONS}
    consumers = [*group_of(leaders, list(PARTITIONS), members=2), LeaderConsumer(leaders, PARTITIONS, name="lone")]
    for loop in [*producers.values(), *consumers]:
        loop.start()
    kills, sigterms = scale.replication_kills, scale.replication_sigterms
    failovers: list[float] = []
    shutdowns: list[float] = []
    rejoins: list[float] = []
    cycles: list[str] = []
    history = None
    try:
        cluster.wait_for(lambda: all(p.acked for p in producers.values()), what="the first acknowledgements")
        for cycle in range(kills + sigterms):
            graceful = cycle >= kills
            cluster.wait_for(lambda: all_in_sync(cluster, TOPIC), timeout_s=30, what="every replica in sync")
            now_leading = cluster.leaders(TOPIC)
            victim = now_leading[PARTITIONS[cycle % len(PARTITIONS)]]
            led = [p for p, leader in now_leading.items() if leader == victim]
            acked_before = sum(p.messages() for p in producers.values())
            broker = cluster.brokers[victim]
            if graceful:
                broker.process.send_signal(signal.SIGTERM)
            else:
                broker.kill()
            stopped_at = time.monotonic()
            cluster.wait_for(lambda: all(producers[p].first_ack_after(stopped_at, not_by=victim) for p in led),
                             timeout_s=30, what=f"cycle {cycle}: a new leader of {led} to take writes")
            took = max(producers[p].first_ack_after(stopped_at, not_by=victim) - stopped_at for p in led)
            (shutdowns if graceful else failovers).append(took)
            if graceful:
                broker.process.wait(20)
            started_at = time.monotonic()
            cluster.start(victim)
            cluster.wait_for(lambda: in_every_isr(cluster, victim), timeout_s=30,
                             what=f"cycle {cycle}: broker {victim} back in every ISR")
            rejoins.append(time.monotonic() - started_at)
            cycles.append(f"cycle {cycle}: {'SIGTERM' if graceful else 'kill -9'} broker {victim} leading {led}: "
                          f"failover {took:.2f} s, rejoin {rejoins[-1]:.2f} s, "
                          f"acknowledged {sum(p.messages() for p in producers.values()) - acked_before} meanwhile")
        for producer in producers.values():
            producer.stop()
        cluster.wait_for(lambda: all_in_sync(cluster, TOPIC), timeout_s=30, what="every replica in sync at the end")
        final = {}
        for p, leader in cluster.leaders(TOPIC).items():
            with Wire(cluster.brokers[leader]) as wire:
                final[p] = wire.read_all(TOPIC, p)
        cluster.wait_for(lambda: all(c.caught_up({p: entries[-1][0] + 1 for p, entries in final.items() if entries})
                                     for c in consumers), what="the consumers to read everything")
        for consumer in consumers:
            consumer.stop()
        history = check_history(final, [a for p in producers.values() for a in p.acked], consumers)
    finally:
        for loop in [*producers.values(), *consumers]:
            if loop.is_alive():
                loop.stop()
        print("\n".join(cycles))
        record(request, faults_injected=len(failovers) + len(shutdowns),
               messages_checked=history.checked if history else 0,
               messages_lost=len(history.lost) if history else 0)
        record_durations(request, "failover kill -9", failovers)
        record_durations(request, "failover SIGTERM", shutdowns)
        record_durations(request, "rejoin", rejoins)

    assert history.lost == [], "\n".join(history.lost[:20])
    assert [p for c in consumers for p in c.problems] == []
    assert history.acked > 0 and all(c.seen for c in consumers)
    assert max(failovers) <= KILL_FAILOVER_BOUND_S, (
        f"kill -9 failovers (s): {[round(f, 2) for f in failovers]}, median {statistics.median(failovers):.2f}")
    if shutdowns:
        assert max(shutdowns) <= SIGTERM_FAILOVER_BOUND_S, f"SIGTERM failovers (s): {[round(f, 2) for f in shutdowns]}"
    for p in PARTITIONS:
        copies = cluster.wait_for(
            lambda: len({segment_bytes(b, TOPIC, p) for b in cluster.brokers.values()}) == 1
            and segment_bytes(cluster.brokers[0], TOPIC, p), what=f"partition {p}'s replicas to be byte-identical")
        assert len(copies) > 0
