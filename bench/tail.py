"""Issue 24's tail benchmark: the latency of one message per request at 5,000 msg/s, with its
p50, p99 and p99.9 and the CPU the server spent per message, for the broker five ways beside
Redis Streams and NATS JetStream in the same run.

Systems (bench/peers/, each started on loopback for the whole run, the same clients as
bench/paper.py's latency test: a producer sending stamped 200-byte messages one per request,
a consumer subscribed before it starts):

- ``twisted_broker``: factor 1, a message visible once fsynced (the paper's settings);
- ``twisted_broker_rf1``: factor 1 on a replicated topic, visible once committed (its high
  watermark: appended), so the disk is out of the path;
- ``twisted_broker_rf3``: factor 3, visible once committed on three brokers;
- ``twisted_broker_defaults`` and ``twisted_broker_defaults_modern``: make run's flush policy
  (etc/server.properties: an fsync every 10,000 messages or 1 s, and at once for a consumer
  waiting at the end), with the 0.7 clients and with confluent-kafka (bench/peers/tbroker_defaults.py);
- ``redis`` and ``nats``: the peers, in the paper's persistence settings.

Each round visits every system (starting with a different one each round) and prints the load
average at its start; a figure is the median over the rounds (five by default). CPU per
message: utime + stime of the server's processes (all brokers for factor 3, and their live
children, the fsync process among them; /proc, bench/proc_sample.py) from the producer's start
to the consumer's last message, divided by the messages sent.

``python -m bench tail`` (make bench), or ``python -m bench.tail --rounds 5 --seconds 5``.
Writes ``bench/results/tail-<date>.json`` and its section of ``latest.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.paper import RESULTS, Run, machine
from bench.peers.harness import LATENCY_RATE
from bench.paper_round import latency_test
from bench.small_report import TAIL_HEADING, replace_section

SYSTEMS = ["twisted_broker", "twisted_broker_rf1", "twisted_broker_rf3", "twisted_broker_defaults",
           "twisted_broker_defaults_modern", "redis", "nats"]
OURS = frozenset(SYSTEMS[:5])  # their topics are left in place (as bench/paper_round.py does)
DEFAULT_ROUNDS = 5
DEFAULT_SECONDS = 5.0
FIGURES = ("p50_ms", "p99_ms", "p999_ms", "max_ms", "cpu_us_per_message", "rate")


def server_pids(server) -> list[int]:
    """The processes whose CPU a system's row counts: every broker of a cluster, else the
    server's own process (its live children are added by ProcessSample)."""
    brokers = getattr(server, "brokers", None)
    if brokers:
        return [broker.process.pid for broker in brokers]
    pid = getattr(server, "pid", None)
    return [pid if pid is not None else server.process.pid]


def latency_once(run: Run, key: str, dest: str) -> dict:
    """One latency test of ``key`` on a new topic ``dest`` (bench/paper_round.py's): the
    consumer's percentiles, the producer's rate and the server's CPU per message."""
    result = latency_test(run, key, dest, server_pids(run.servers[key]))
    if key not in OURS:
        run.peers[key].delete(run.servers[key], dest)
    return {**{name: result[name] for name in ("p50_ms", "p99_ms", "p999_ms", "max_ms", "rate")},
            "cpu_us_per_message": result["cpu_s"] / run.latency_messages * 1e6}


def summarize(raw: dict[str, list[dict]]) -> dict[str, dict]:
    """Each system's median of every figure over its rounds, with the rounds kept."""
    return {key: {**{name: statistics.median(r[name] for r in rounds) for name in FIGURES}, "rounds": rounds}
            for key, rounds in raw.items() if rounds}


def markdown(result: dict) -> str:
    systems = result["systems"]
    loads = ", ".join(f"{load:.2f}" for load in result["load_average_per_round"])
    lines = [TAIL_HEADING, "",
             f"Measured {result['date'][:10]} (`python -m bench tail`, bench/tail.py): one 200-byte message per "
             f"request at {result['latency_rate']:,} msg/s for {result['latency_messages']:,} messages, "
             f"{result['rounds']} rounds, medians. Load average (1 min) at the start of each round: {loads}. "
             "CPU: the server's processes (all brokers for factor 3, the fsync process included) per message.", "",
             "| system | p50 ms | p99 ms | p99.9 ms | max ms | server CPU µs/msg | rate msg/s | p99 of each round, ms |",
             "|---|---|---|---|---|---|---|---|"]
    for key in SYSTEMS:
        if key not in systems:
            continue
        row = systems[key]
        each = ", ".join(f"{r['p99_ms']:.2f}" for r in row["rounds"])
        lines.append(f"| {row.get('label', key)} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['p999_ms']:.2f} "
                     f"| {row['max_ms']:.2f} | {row['cpu_us_per_message']:,.1f} | {row['rate']:,.0f} | {each} |")
    for key, notes in result.get("notes", {}).items():
        lines.append(f"\n{key}: {'; '.join(notes)}")
    return "\n".join(lines) + "\n"


def run(rounds: int | None = None, seconds: float | None = None, systems: list[str] | None = None,
        output: Path = RESULTS) -> dict:
    """Run the rounds, print and write the results; return them."""
    rounds = rounds or int(os.environ.get("BENCH_TAIL_ROUNDS") or DEFAULT_ROUNDS)
    seconds = seconds or float(os.environ.get("BENCH_TAIL_SECONDS") or DEFAULT_SECONDS)
    systems = systems or SYSTEMS
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {', '.join(sorted(unknown))}; choose from {', '.join(SYSTEMS)}")
    directory = tempfile.mkdtemp(prefix="tb-tail-", dir=os.environ.get("BENCH_DIR"))
    started = time.monotonic()
    run_ = Run(directory, 0, int(seconds * LATENCY_RATE), systems)
    raw: dict[str, list[dict]] = {key: [] for key in systems}
    loads: list[float] = []
    print(f"\ntail: starting {', '.join(run_.peers)} (data under {directory})", flush=True)
    try:
        run_.start_servers()
        order = [key for key in systems if key in run_.servers]
        for number in range(1, rounds + 1):
            loads.append(os.getloadavg()[0])
            print(f"  round {number}: load average {loads[-1]:.2f}", flush=True)
            shift = (number - 1) % max(len(order), 1)
            for key in order[shift:] + order[:shift]:
                try:
                    figures = latency_once(run_, key, f"tail-{number}")
                except Exception as exc:  # noqa: BLE001 - one system's failure is noted, the others run
                    run_.notes[key].append(f"round {number}: {exc}")
                    print(f"    {key}: failed: {exc}", flush=True)
                    continue
                raw[key].append(figures)
                print(f"    {key}: p50 {figures['p50_ms']:.2f} p99 {figures['p99_ms']:.2f} p99.9 "
                      f"{figures['p999_ms']:.2f} ms, {figures['cpu_us_per_message']:.0f} µs/msg", flush=True)
    finally:
        run_.stop_all()
        shutil.rmtree(directory, ignore_errors=True)
    systems_out = summarize(raw)
    for key, row in systems_out.items():
        row["label"] = run_.peers[key].label if key in run_.peers else key
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "rounds": rounds, "latency_rate": LATENCY_RATE,
              "latency_messages": run_.latency_messages, "load_average_per_round": loads,
              "seconds": round(time.monotonic() - started, 1), "systems": systems_out,
              "notes": {key: notes for key, notes in run_.notes.items() if notes}}
    text = markdown(result)
    print("\n" + text)
    output.mkdir(parents=True, exist_ok=True)
    (output / f"tail-{result['date'][:10]}.json").write_text(json.dumps(result, indent=2) + "\n")
    latest = output / "latest.md"
    latest.write_text(replace_section(latest.read_text() if latest.exists() else "", TAIL_HEADING, text))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tail", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help=f"rounds (default {DEFAULT_ROUNDS}, env BENCH_TAIL_ROUNDS)")
    parser.add_argument("--seconds", type=float, help=f"seconds of messages per test (default {DEFAULT_SECONDS})")
    parser.add_argument("--systems", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    args = parser.parse_args()
    run(args.rounds, args.seconds, args.systems.split(",") if args.systems else None)


if __name__ == "__main__":
    main()
