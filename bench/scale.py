"""The scale benchmark of issue 23: a thousand partitions on five brokers (``make scale``).

    python -m bench.scale [--partitions 1000] [--brokers 5] [--topics 100] [--out FILE]
    python -m bench.scale --long                  # 4,000 partitions (400 topics), bounds x2
    python -m bench.scale --partitions 200 --brokers 3 --topics 20   # the short form

One ZooKeeper (tick 2 s) and ``--brokers`` ``twistd -n broker`` processes with the modern
listener, all on loopback under a temporary directory that is removed at the end
(bench/scale_cluster.py; the brokers are the replication tests' own, imported from
tests/support, with etc/server.properties' settings, a 6 s ZooKeeper session and no topic
created by a client's Metadata request). The phases:

1. start: ZooKeeper and the brokers, until each sees every other.
2. create: ``--topics`` topics of partitions/topics partitions at factor 3, in one CreateTopics
   (confluent-kafka's AdminClient, request timeout 60 s = librdkafka's socket timeout,
   operation timeout ``--operation-timeout``, 0 by default as in librdkafka: the broker
   answers without waiting for leaders); whether and when it was answered, and from the
   request, the time until every partition has a leader and until every ISR is full
   (ZooKeeper's states); then how long a Metadata request for every topic takes.
3. idle: 20 s without clients: each broker's CPU (cores; its fsync child apart), RSS, open
   descriptors, threads; ZooKeeper's CPU; the machine's busy cores (other jobs show there);
   whether the cluster had settled (every ISR full) when it began.
4. produce/consume: one acks=all record to every partition (time to the last
   acknowledgement), then all of them read back by one consumer assigned every partition.
5. kill -9 of the broker leading the most partitions: from the kill, the time until every
   partition is led by a live broker in its ISR, then until one acks=all record per
   partition is acknowledged again (and a Metadata request's time meanwhile); the killed
   broker restarts, until every ISR is full.
6. ZooKeeper session expiry: the same with SIGSTOP (the session expires after 6 s), then
   SIGCONT and recovery.
7. controlled shutdown: SIGTERM to the broker leading the most partitions; the time until it
   exits (killed at the bound), its leaderships left when it exited, and the time until
   every partition is led by a live in-sync replica again.
8. everything stopped (SIGKILL), always, on failure and Ctrl-C too; the temp dir removed.

Every wait has a bound (``BOUNDS``, x ``--bounds-factor``); a wait that reaches it records
the figure as missed, with how far it got, and the run goes on. ``timeline`` lists
``[seconds, count]`` each time a count changed (how fast partitions came back). The figures go to
``--out`` as JSON and to stdout as a table beside issue 23's targets. ``--profile DIR``
records py-spy profiles (bench/scale_profile.py) of the brokers during creation, idle
and failover.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from bench import scale_cluster as sc
from bench.scale_clients import CreateTopics, consume_all, produce_one_each, time_metadata
from bench.scale_profile import Recording, py_spy
from bench.scale_report import print_table, table

FACTOR = 3
IDLE_S = 20.0
# Seconds each wait may take (with 1,000 partitions; --long doubles them). Their sum keeps
# a run of today's code under about 25 minutes.
BOUNDS = {"start": 120, "create_leaders": 240, "create_isr": 90, "produce": 90, "consume": 60,
          "failover_leaders": 150, "failover_acks": 60, "recovery": 120, "shutdown": 60, "after_shutdown": 60}
REQUEST_TIMEOUT_S = 60.0  # librdkafka's socket.timeout.ms, create_topics' default request timeout
PROFILE_S = {"create": 120, "idle": 20, "failover": 90}


class ScaleRun:
    def __init__(self, args, root: Path) -> None:
        self.args, self.root = args, root
        self.bounds = {k: v * args.bounds_factor for k, v in BOUNDS.items()}
        self.cluster = sc.ScaleCluster(root)
        per_topic = args.partitions // args.topics
        self.topics = [f"scale-{i:03d}" for i in range(args.topics)]
        self.partitions = [(t, p) for t in self.topics for p in range(per_topic)]
        self.states: sc.PartitionStates | None = None
        self.pool = ThreadPoolExecutor(2)
        self.profiles: list[Recording] = []
        self.result = {"phases": {}}

    # -- waiting -----------------------------------------------------------------------------

    def wait_count(self, count, bound_s: float, since: float, interval_s: float = 1.0, watch=None) -> dict:
        """Poll ZooKeeper until ``count(states)`` covers every partition or the bound passes;
        ``watch(elapsed)`` runs after each sweep. The figure's seconds count from ``since``."""
        timeline, last, n = [], None, len(self.partitions)
        deadline = time.monotonic() + bound_s
        while True:
            got = count(self.states.read())
            elapsed = time.monotonic() - since
            if got != last:
                timeline.append([round(elapsed, 1), got])
                last = got
            if watch:
                watch(elapsed)
            if got == n or time.monotonic() >= deadline:
                break
            # A sweep of 1,000 gets takes ~0.1 s on an idle machine, ~1 s on a saturated one:
            # wait at least as long again, so the bench's own reads take at most half its time.
            time.sleep(max(interval_s, self.states.sweep_s[-1]))
        return {"s": round(elapsed, 2) if got == n else None, "bound_s": bound_s, "got": got, "of": n,
                "timeline": timeline[:300]}

    def most_leaderships(self) -> tuple[int, int]:
        counts = sc.leader_counts(self.states.read())
        live = self.cluster.live_ids()
        victim = max(live, key=lambda b: (counts.get(b, 0), -b))
        return victim, counts.get(victim, 0)

    def profile(self, name: str, broker_id: int | None, seconds: float) -> None:
        if self.args.profile and broker_id is not None and py_spy():
            self.profiles.append(Recording(Path(self.args.profile), name, self.cluster.pid(broker_id), seconds))

    def finish_profiles(self) -> None:
        self.result.setdefault("profiles", []).extend(r.finish() for r in self.profiles)
        self.profiles = []

    # -- the phases --------------------------------------------------------------------------

    def start(self) -> dict:
        started = time.monotonic()
        self.cluster.start_zookeeper()
        for broker_id in range(self.args.brokers):
            self.cluster.start(broker_id)
        self.cluster.wait_until_all_see_each_other()
        self.states = sc.PartitionStates(self.cluster.zk_connect, self.partitions)
        return {"s": round(time.monotonic() - started, 2)}

    def create(self) -> dict:
        controller = self.states.controller()
        request = CreateTopics(self.cluster.bootstrap, self.topics, len(self.partitions) // len(self.topics), FACTOR,
                               request_timeout_s=REQUEST_TIMEOUT_S, operation_timeout_s=self.args.operation_timeout)
        self.profile("create-controller", controller, PROFILE_S["create"])
        self.profile("create-other", min(self.cluster.live_ids() - {controller}), PROFILE_S["create"])
        live = self.cluster.live_ids()
        figures = {"controller": controller,
                   "all_led": self.wait_count(lambda s: sc.led(s, live), self.bounds["create_leaders"],
                                              request.started, watch=lambda _e: request.done())}
        figures["all_isr_full"] = self.wait_count(lambda s: sc.full_isr(s, FACTOR, live), self.bounds["create_isr"],
                                                  request.started, watch=lambda _e: request.done())
        answer_deadline = request.started + REQUEST_TIMEOUT_S + 5
        while not request.done() and time.monotonic() < answer_deadline:
            time.sleep(0.2)
        figures["create_topics"] = request.outcome()
        self.finish_profiles()
        figures["metadata"] = self.probe_metadata(controller).result()
        return figures

    def probe_metadata(self, broker_id: int | None):
        """A Metadata request for every topic at ``broker_id`` (the lowest live one if None),
        timed in a thread of its own; returns the future of time_metadata's answer."""
        if broker_id not in self.cluster.live_ids():
            broker_id = min(self.cluster.live_ids())
        port = self.cluster.kafka_ports[broker_id]
        return self.pool.submit(lambda: {"broker": broker_id, **time_metadata(port, self.topics)})

    def idle(self) -> dict:
        brokers = {b: self.cluster.pid(b) for b in sorted(self.cluster.live_ids())}
        live = self.cluster.live_ids()
        settled = sc.full_isr(self.states.read(), FACTOR, live) == len(self.partitions)
        meter = sc.CpuMeter({**{str(b): pid for b, pid in brokers.items()},
                             "zookeeper": self.cluster.zookeeper_pid()})
        time.sleep(self.args.idle_seconds)
        cores = meter.cores()
        states = self.states.read()
        leaders = sc.leader_counts(states)
        replicas = {b: sum(1 for t, p in self.partitions if states[(t, p)] and b in states[(t, p)].isr)
                    for b in brokers}
        figures = {"seconds": self.args.idle_seconds, "settled_at_start": settled, "zookeeper_cores": cores["zookeeper"]["cores"],
                   "machine_busy_cores": cores["machine_busy_cores"], "loadavg": os.getloadavg(), "brokers": {
                       str(b): {**cores[str(b)], **sc.process_figures(pid), "in_sync_replicas": replicas[b],
                                "leaderships": leaders.get(b, 0)} for b, pid in brokers.items()}}
        if self.args.profile:
            controller = self.states.controller()
            self.profile("idle-controller", controller, PROFILE_S["idle"])
            self.profile("idle-other", min(self.cluster.live_ids() - {controller}), PROFILE_S["idle"])
            self.finish_profiles()
        return figures

    def produce_consume(self) -> dict:
        probe = self.probe_metadata(self.states.controller())
        produced = produce_one_each(self.cluster.bootstrap, self.partitions, self.bounds["produce"])
        produced.pop("_ack_s")
        produced["metadata"] = probe.result()
        consumed = consume_all(self.cluster.bootstrap, self.partitions, 1, self.bounds["consume"])
        return {"produce": produced, "consume": consumed}

    def failover(self, how: str) -> dict:
        victim, leaderships = self.most_leaderships()
        controller = self.states.controller()
        figures = {"victim": victim, "victim_leaderships": leaderships, "controller_before": controller,
                   "session_timeout_ms": sc.ZK_SESSION_TIMEOUT_MS, "zk_tick_ms": sc.ZK_TICK_MS}
        process = self.cluster.brokers[victim].process
        before = self.states.read()
        fault = time.monotonic()
        if how == "kill -9":
            process.kill()
            process.wait()
        else:
            os.kill(process.pid, signal.SIGSTOP)
            self.cluster.stopped.add(victim)
        live = self.cluster.live_ids()
        seen = {}

        def watch(elapsed):
            if "registration_gone_s" not in seen and not self.states.registered(victim):
                seen["registration_gone_s"] = round(elapsed, 2)
            if "profiling" not in seen and (now := self.states.controller()) not in (None, victim):
                seen["profiling"], seen["controller_after"] = True, now
                self.profile(f"failover-{how.replace(' ', '')}-controller", now, PROFILE_S["failover"])
        figures["all_led_in_sync"] = self.wait_count(lambda s: sc.led_in_sync(s, live), self.bounds["failover_leaders"],
                                                     fault, watch=watch)
        figures.update((k, v) for k, v in seen.items() if k != "profiling")
        probe = self.probe_metadata(self.states.controller())
        acks = produce_one_each(self.cluster.bootstrap, self.partitions, self.bounds["failover_acks"], since=fault)
        acks["metadata"] = probe.result()
        acks["by_leader"] = by_leader(acks.pop("_ack_s"), before, self.states.read())
        led_s = figures["all_led_in_sync"]["s"]
        acks["after_all_led_s"] = round(acks["all_acked_s"] - led_s, 2) if acks["all_acked_s"] and led_s else None
        figures["acks_again"] = acks
        self.finish_profiles()
        back = time.monotonic()
        if how == "kill -9":
            self.cluster.start(victim)
            figures["restart_s"] = round(time.monotonic() - back, 2)
        else:
            os.kill(process.pid, signal.SIGCONT)
            self.cluster.stopped.discard(victim)
        live = self.cluster.live_ids()
        figures["recovery"] = self.wait_count(lambda s: sc.full_isr(s, FACTOR, live), self.bounds["recovery"], back)
        return figures

    def controlled_shutdown(self) -> dict:
        victim, leaderships = self.most_leaderships()
        broker = self.cluster.brokers[victim]
        figures = {"victim": victim, "victim_leaderships": leaderships, "controller": self.states.controller()}
        started = time.monotonic()
        broker.process.send_signal(signal.SIGTERM)
        left, timeline = leaderships, []
        while broker.process.poll() is None and time.monotonic() - started < self.bounds["shutdown"]:
            left = sc.leader_counts(self.states.read()).get(victim, 0)
            if not timeline or timeline[-1][1] != left:
                timeline.append([round(time.monotonic() - started, 1), left])
            time.sleep(0.5)
        killed = broker.process.poll() is None
        if killed:
            broker.kill()
        exit_s = time.monotonic() - started
        # Read once more at the exit: a shutdown quicker than the 0.5 s between samples left
        # ``left`` at what the last sample saw, before the leaderships moved.
        left = sc.leader_counts(self.states.read()).get(victim, 0)
        if timeline[-1][1] != left:
            timeline.append([round(exit_s, 1), left])
        figures.update(exit_s=None if killed else round(exit_s, 2), killed_at_bound=killed,
                       bound_s=self.bounds["shutdown"], leaderships_left_at_exit=left, timeline=timeline,
                       exit_status=broker.process.returncode,
                       log=[line[:240] for line in broker.log_tail(20000).splitlines()
                            if "controlled shutdown" in line][-3:])
        self.cluster.stopped.add(victim)  # gone: not live for the wait below
        live = self.cluster.live_ids()
        figures["all_led_in_sync"] = self.wait_count(lambda s: sc.led_in_sync(s, live), self.bounds["after_shutdown"],
                                                     started)
        return figures

    def run(self) -> None:
        phases = self.result["phases"]
        phases["start"] = self.start()
        for name, phase in (("create", self.create), ("idle", self.idle), ("produce_consume", self.produce_consume),
                            ("kill9", lambda: self.failover("kill -9")),
                            ("session_expiry", lambda: self.failover("SIGSTOP")),
                            ("controlled_shutdown", self.controlled_shutdown)):
            print(f"[{datetime.now():%H:%M:%S}] {name}", flush=True)
            try:
                phases[name] = phase()
            except (Exception, sc.TestFailure) as exc:  # the run goes on: a later phase may still tell something
                phases[name] = {"error": repr(exc)[:1000]}
                for recording in self.profiles:
                    recording.stop()
                self.profiles = []
                self.cluster.stopped.clear()
                for broker_id, broker in self.cluster.brokers.items():  # a paused broker stays no longer
                    if broker.process is not None and broker.process.poll() is None:
                        os.kill(broker.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        for recording in self.profiles:
            recording.stop()
        if self.states is not None:
            self.result["zk_sweep_s_median"] = round(sorted(self.states.sweep_s)[len(self.states.sweep_s) // 2], 3) \
                if self.states.sweep_s else None
            self.states.close()
        self.result["broker_logs"] = {str(b): sc.scan_log(broker.log_file) for b, broker in self.cluster.brokers.items()}
        self.result["leftover_processes"] = self.cluster.stop_everything()
        self.pool.shutdown(wait=False, cancel_futures=True)


def by_leader(ack_s: dict, before: dict, after: dict) -> dict:
    """Acknowledgement times by the partition's leader now, and whether it moved in the
    failover: {"<leader> moved|stayed": [partitions, acked, median s, slowest s]}."""
    groups: dict[str, list] = {}
    for key, state in after.items():
        moved = before[key] is None or state is None or before[key].leader != state.leader
        group = groups.setdefault(f"{state.leader if state else None} {'moved' if moved else 'stayed'}", [0, []])
        group[0] += 1
        if key in ack_s:
            group[1].append(ack_s[key])
    return {name: [n, len(t), round(sorted(t)[len(t) // 2], 2) if t else None, round(max(t), 2) if t else None]
            for name, (n, t) in sorted(groups.items())}


def _exit_on_sigterm(_signum, _frame) -> None:
    raise SystemExit(143)  # as Ctrl-C does: the finally clause stops every process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=5)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=IDLE_S, help="how long the idle phase measures")
    parser.add_argument("--long", action="store_true", help="4,000 partitions in 400 topics, every bound x2")
    parser.add_argument("--bounds-factor", type=float, default=1.0, help="multiply every wait's bound")
    parser.add_argument("--operation-timeout", type=float, default=0.0, metavar="S",
                        help="CreateTopics' operation timeout (default 0: librdkafka's, answer without waiting)")
    parser.add_argument("--out", help="the JSON file (default bench/results/scale-<date>.json)")
    parser.add_argument("--profile", metavar="DIR", help="py-spy profiles of brokers into DIR (pip install py-spy)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs) at the end")
    args = parser.parse_args(argv)
    if args.long:
        args.partitions, args.topics, args.bounds_factor = 4000, 400, args.bounds_factor * 2
    if args.partitions % args.topics or args.brokers < FACTOR:
        parser.error(f"--partitions must be a multiple of --topics, and --brokers at least {FACTOR}")
    if args.profile and not py_spy():
        print("no py-spy beside this Python or on PATH: no profiles (pip install py-spy)")
        args.profile = None
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    out = Path(args.out or sc.ROOT / "bench" / "results" / f"scale-{date}.json")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    root = Path(tempfile.mkdtemp(prefix="scale-bench-", dir=os.environ.get("BENCH_DIR")))
    run = ScaleRun(args, root)
    started = time.monotonic()
    run.result.update(date=date, started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      partitions=len(run.partitions), topics=args.topics, brokers=args.brokers, factor=FACTOR,
                      bounds_s=run.bounds, broker_properties=run.cluster.properties, machine={
                          "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg(), "python": platform.python_version(),
                          "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=sc.ROOT,
                                                   capture_output=True, text=True).stdout.strip()})
    try:
        run.run()
    except (Exception, sc.TestFailure) as exc:
        run.result["error"] = repr(exc)[:2000]
    finally:
        run.stop()
        run.result["total_s"] = round(time.monotonic() - started, 1)
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(run.result, indent=1) + "\n")
    print_table(table(run.result))
    print(f"\n{out} ({run.result['total_s']:.0f} s)")
    return 1 if "error" in run.result else 0


if __name__ == "__main__":
    raise SystemExit(main())
