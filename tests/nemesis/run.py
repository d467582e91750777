"""The nemesis run (``python -m tests.nemesis``, ``make nemesis``): a cluster, its clients and
a seeded schedule of faults for a bounded time, then the checker; the table of figures on
stdout and in ``summary.txt``, exit status 1 on any violation (2 if the run itself broke).

Timeline: start the cluster (~1 min), the clients, then faults for ``--minutes``; heal
everything, let the producers run ``QUIET_S`` more with no fault, stop them (each flushes what
it has in flight), wait until the cluster has recovered (``RECOVERY_S``), let the consumers
catch up, stop them and check. A watchdog ends the run ``GRACE_S`` after the planned end
whatever happens, removing every process, mount and namespace; the run's directory
(``/tmp/nemesis-<time>/``: logs of every node, faults.jsonl, the histories, summary.txt) is
kept as evidence.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from tests.nemesis import checker
from tests.nemesis.clients import ACKS_ONE, IDEMPOTENT, ZERO_SEVEN, AcksOneProducer, GroupMember, \
    IdempotentProducer, consumers_07, log_clients_to, producers_07
from tests.nemesis.cluster import DISK_BROKER, TOPICS, Cluster
from tests.nemesis.faults import Nemesis, schedule
from tests.support.faults.traffic import check_history

WARMUP_S, QUIET_S, RECOVERY_S, CATCH_UP_S = 5.0, 10.0, 180.0, 60.0
GRACE_S = 600.0


def say(message: str) -> None:
    print(f"[nemesis {time.strftime('%H:%M:%S')}] {message}", flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.nemesis", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long faults are injected (default 5)")
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: random, printed)")
    parser.add_argument("--root", type=Path, default=None, help="the run's directory (default /tmp/nemesis-<time>)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--tag", default="x", help="names the namespaces (nem<tag>-<node>)")
    parser.add_argument("--net", type=int, default=77, help="the run's addresses: 10.<net>.0.0/24")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if os.geteuid() != 0:
        print("the nemesis needs root (network namespaces, mounts)", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    root = args.root or Path(f"/tmp/nemesis-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(root, args.tag, args.net, args.partitions)
    watchdog = threading.Timer(args.minutes * 60 + GRACE_S, _expire, (cluster,))
    watchdog.daemon = True
    watchdog.start()
    signal.signal(signal.SIGTERM, _interrupted)  # as Ctrl-C: the cleanup in finally runs
    say(f"seed {seed}, {args.minutes:g} minutes of faults, directory {root}")
    try:
        return _run(cluster, args, seed, root)
    except BaseException:
        traceback.print_exc()
        say("the run broke before its check: exit 2 (logs kept in the directory)")
        return 2
    finally:
        watchdog.cancel()
        cluster.close()
        cluster.disk.image.unlink(missing_ok=True)
        say("cleaned up: processes, mounts, namespaces")


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _expire(cluster: Cluster) -> None:
    say("watchdog: the run overran its bound; removing everything and exiting 3")
    cluster.close()
    os._exit(3)


def _run(cluster: Cluster, args, seed: int, root: Path) -> int:
    started = time.monotonic()
    log_clients_to(root / "clients.log")
    cluster.start()
    say(f"cluster up in {time.monotonic() - started:.0f} s: {len(cluster.zookeepers)} ZooKeepers, "
        f"{len(cluster.brokers)} brokers, topics {TOPICS} x {args.partitions} partitions")
    idempotent = IdempotentProducer(cluster.bootstrap, args.partitions)
    acks_one = AcksOneProducer(cluster.bootstrap, args.partitions)
    zero_seven = producers_07(cluster.wire_addresses, args.partitions)
    members = [GroupMember(cluster.bootstrap, "nemesis-group", i) for i in range(2)]
    members_07 = consumers_07(cluster.wire_addresses, args.partitions)
    producers, consumers = [idempotent, acks_one, *zero_seven], [*members, *members_07]
    for thread in [*producers, *consumers]:
        thread.start()
    time.sleep(WARMUP_S)

    faults_at = time.monotonic()
    deadline = faults_at + args.minutes * 60
    plan = schedule(seed, args.minutes * 60, list(cluster.brokers), list(cluster.zookeepers), DISK_BROKER)
    nemesis = Nemesis(cluster, root / "faults.jsonl", faults_at)
    for step in plan:
        if time.monotonic() >= deadline:
            break
        say(" + ".join(f"{f.kind} {f.targets}" + (f" | {f.other_side}" if f.other_side else "") for f in step)
            + f" for {step[0].hold_s} s")
        for fault in step:
            nemesis.apply(fault)
        time.sleep(max(0.0, min(step[0].hold_s, deadline - time.monotonic())))
        for fault in reversed(step):
            nemesis.heal(fault)
            if fault.note:
                say(f"  healed {fault.kind}: {fault.note}")
        for note in nemesis.restart_exited():
            say(f"  {note}")
        time.sleep(max(0.0, min(step[0].gap_s, deadline - time.monotonic())))
    notes = cluster.heal_everything()
    say(f"faults over ({sum(nemesis.counts().values())} injected); healed {notes or 'all already'}; "
        f"{QUIET_S:g} s more of writes")
    time.sleep(QUIET_S)
    for producer in producers:
        producer.stop(90)
    say("producers stopped; waiting for the cluster to recover")
    recovered, took, problem = checker.wait_recovered(cluster.brokers, TOPICS, RECOVERY_S)
    say(f"recovered in {took:.0f} s" if recovered else f"NOT recovered after {took:.0f} s: {problem}")
    where = checker.layout(cluster.brokers, TOPICS)
    by_id = cluster.by_id
    modern_parts = [tp for tp in where if tp[0] != ZERO_SEVEN]
    modern = checker.read_modern(cluster.bootstrap, modern_parts)
    unread = modern.pop("unread", None)
    final_07 = {p: checker.read_07(by_id[where[(ZERO_SEVEN, p)][0]], ZERO_SEVEN, p) for p in range(args.partitions)}
    ends = {tp: (entries[-1][0] + 1 if entries else 0) for tp, entries in modern.items()}
    catch_up = time.monotonic() + CATCH_UP_S
    while time.monotonic() < catch_up and not all(
            m.positions.get(tp, 0) >= end for tp, end in ends.items() for m in members if tp in m.positions):
        time.sleep(1.0)
    time.sleep(3.0)
    for consumer in consumers:
        consumer.stop(30)
    replica_problems, _hw = checker.compare_replicas(by_id, where)
    idempotent_epochs = checker.epoch_finder({  # which producer epoch stored each record (its leader's log)
        p: checker.producer_epochs(by_id[where[(IDEMPOTENT, p)][0]].log_dir / f"{IDEMPOTENT}-{p}", IDEMPOTENT, p)
        for p in range(args.partitions)})

    figures = checker.Figures()
    figures.add("cluster recovered (every partition led, ISR full)", "yes" if recovered else f"NO: {problem}")
    if not recovered:
        figures.violations.append(f"not recovered: {problem}")
    if unread:
        figures.add("partitions not read to their end", len(unread), violation=True,
                    details=[f"{tp}: read to {n} of {end}" for tp, (n, end) in unread.items()])
    for history, topic, keep, once, epochs in ((idempotent.history, IDEMPOTENT, True, True, idempotent_epochs),
                                               (acks_one.history, ACKS_ONE, False, False, None)):
        final = {p: entries for (t, p), entries in modern.items() if t == topic}
        checker.check_producer(figures, history.kind, history.acked, final, keep, once, epochs)
        figures.add(f"{history.kind}: failed (not acknowledged)", len(history.failed))
        figures.add(f"{history.kind}: in flight at the end (unknown)",
                    len(history.sent) - len(history.acked) - len(history.failed))
    figures.add("acks=all idempotent: producer fatal errors", len(idempotent.history.fatal))
    history_07 = check_history(final_07, [a for p in zero_seven for a in p.acked], members_07)
    lost_acked = [line for line in history_07.lost if line.startswith("acknowledged")]
    lost_seen = [line for line in history_07.lost if not line.startswith("acknowledged")]
    figures.add("0.7 acks=-1: acknowledged", history_07.acked)
    figures.add("0.7 acks=-1: lost", len(lost_acked), violation=True, details=lost_acked[:50])
    figures.add("0.7 acks=-1: refusals (retried with new values)", sum(len(p.refusals) for p in zero_seven))
    modern_final = {tp: dict(entries) for tp, entries in modern.items()}
    seen = [(tp, o, v) for m in members for tp, entries in m.seen.items() for o, v in entries]
    checker.check_seen(figures, "modern group", seen, modern_final)
    figures.add("0.7 group: records seen by consumers", history_07.seen)
    figures.add("0.7 group: seen then lost", len(lost_seen), violation=True, details=lost_seen[:50])
    figures.add("partitions compared across replicas", len(where))
    figures.add("replicas differing below the high watermark", len(replica_problems), violation=True,
                details=replica_problems)
    total = time.monotonic() - started
    text = checker.table(f"nemesis: seed {seed}, {args.minutes:g} min of faults, {total / 60:.1f} min in all, "
                         f"{root}", figures, nemesis.counts())
    print(text, flush=True)
    (root / "summary.txt").write_text(text + "\n\n" + "\n".join(figures.evidence) + "\n")
    _keep_histories(root, idempotent, acks_one, zero_seven, modern, final_07)
    for line in figures.evidence[:40]:
        print("  " + line)
    return 1 if figures.violations else 0


def _keep_histories(root: Path, idempotent, acks_one, zero_seven, modern, final_07) -> None:
    """What the clients were told and what the checker read, for whoever looks at a violation."""
    with (root / "history.jsonl").open("w") as f:
        for history in (idempotent.history, acks_one.history):
            for value, (p, o) in history.acked.items():
                f.write(json.dumps({"kind": history.kind, "value": value.decode(), "partition": p, "offset": o,
                                    "at": _clock(history.at.get(value))}) + "\n")
            for value, error in history.failed.items():
                f.write(json.dumps({"kind": history.kind, "value": value.decode(), "failed": error,
                                    "at": _clock(history.at.get(value))}) + "\n")
        wall = time.time() - time.monotonic()  # the 0.7 producers time their answers with monotonic()
        for producer in zero_seven:
            for ack in producer.acked:
                f.write(json.dumps({"kind": "0.7", "partition": ack.partition, "offset": ack.offset,
                                    "values": [v.decode() for v in ack.payloads], "broker": ack.broker,
                                    "at": _clock(wall + ack.at)}) + "\n")
    with (root / "final.jsonl").open("w") as f:
        for (t, p), entries in modern.items():
            f.write(json.dumps({"topic": t, "partition": p, "records": [[o, v.decode()] for o, v in entries]}) + "\n")
        for p, entries in final_07.items():
            f.write(json.dumps({"topic": ZERO_SEVEN, "partition": p, "records": [[o, v.decode()] for o, v in entries]}) + "\n")


def _clock(moment: float | None) -> str | None:
    """UTC wall-clock time with milliseconds, as the brokers' logs write it."""
    if moment is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + f".{int(moment % 1 * 1000):03d}"
