"""The 2011 Kafka paper's comparison, redone on this machine against the brokers a Python user
would pick instead: RabbitMQ, ActiveMQ, Redis Streams and NATS JetStream, each started here
from Debian's packages and driven through its usual Python client (bench/peers/, one module
per system, whose docstrings state every setting and why).

Workload (the paper's, issue 6/7): 200-byte messages. Per system and round:

- produce b1 / b50: ``n`` messages, 1 per send and in batches of 50, each system in its
  fastest mode that still stores messages persistently and never waits for a reply per
  message; timed until the server reports all ``n`` stored. Disk bytes per message: the
  growth of the server's data directory over the b50 test, once it stops changing, in file
  sizes (``du --apparent-size``; preallocation is off where a server has it, and the
  allocated-blocks figure, which adds up to a block per file, is in the JSON too).
- consume: drain the b50 backlog of ``n`` messages, generous prefetch for the peers.
- latency: a producer at 5,000 messages/s with send times in the payloads, a consumer
  subscribed before it starts; p50 and p99 of receive - send.
- twisted_broker rf=3 (bench/peers/tbroker_replicated.py): the same broker with replication
  factor 3, three brokers on this machine, messages visible once committed (no fsync gate): its
  column in the table sits beside factor 1's with the ratio rf=3 / rf=1 (issue 15's targets:
  produce b50 and consume >= 0.4x, p99 <= 2 ms). Its producer waits for acks=all; produce b1
  is not run; produce b50 with acks=1 is an extra row.
- twisted_broker also: gzip batches of 50 (and their bytes per message), the async producer,
  the high-level (ZooKeeper) consumer, fetch MB/s beside raw os.sendfile over loopback, and
  the fsync floor: the latency of "visible once fsynced" on this disk with no broker at all
  (bench/loadgen.py fsync-floor, at the latency test's rate, after it, on the same disk).

All servers run for the whole run; every round visits every system (starting with a
different one each round), so load from elsewhere spreads over all of them, and each figure
is the median of the rounds. Every client is a process of its own (bench/peers/worker.py).

Outputs: the table on the terminal (each peer's figure and twisted_broker's ratio to it),
``bench/results/<date>.json`` + ``latest.json``, the chart ``<date>.png`` + ``latest.png`` and
the table as Markdown, ``latest.md``. ``--profile`` adds a round for twisted_broker alone
(produce b1 and b50, consume; not counted in the figures) with py-spy sampling the client
and the broker while each clock runs, and prints their hottest frames.

``python -m bench paper`` (make bench), or ``python -m bench.paper --n 20000`` for options.

A round's tests, in order, are in bench/paper_round.py; this module holds the run (servers,
workers, rounds, figures) and its outputs.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.paper_round import play_round
from bench.peers import SYSTEMS, load
from bench.peers.harness import BATCH, LATENCY_RATE, MESSAGE_BYTES, Worker, peer_worker
from bench.peers.report import TB, chart, markdown, print_report, summarize_profile, targets
from bench.small_report import SMALL_HEADING, TAIL_HEADING, replace_section, section_of

DEFAULT_N = 200_000
DEFAULT_ROUNDS = 3
DEFAULT_LATENCY_S = 5.0
RESULTS = Path(__file__).with_name("results")
LOADGEN = str(Path(__file__).with_name("loadgen.py"))
PROFILE_N = 1_000_000  # messages per test of the --profile round (at least; b1 a fifth)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    system = platform.freedesktop_os_release().get("PRETTY_NAME", platform.system()) \
        if hasattr(platform, "freedesktop_os_release") else platform.system()
    return (f"{os.cpu_count()} cores ({model}), {memory:.0f} GiB, {system}, Linux {platform.release()}, "
            f"Python {platform.python_version()}")


class _Sampler:
    """py-spy sampling one process (``--gil``: the thread running Python code) into
    ``<prefix>.txt``, collapsed stacks, until stop(). It pauses the process for each sample
    (accurate stacks), which is why the profile round is not counted."""

    def __init__(self, pid: int, prefix: str) -> None:
        self.output = f"{prefix}.txt"
        self._log = f"{prefix}.log"
        with open(self._log, "wb") as log:
            self.process = subprocess.Popen(
                ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "250", "--gil",
                 "-o", self.output], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while b"Sampling" not in Path(self._log).read_bytes() and time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # py-spy writes its output and exits
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Run:
    """One run: the servers, the workers, the raw figures of every round."""

    def __init__(self, directory: str, n: int, latency_messages: int, keys: list[str]) -> None:
        self.directory = directory
        self.n = n
        self.latency_messages = latency_messages
        # A timed test that takes longer than this has hung (the slowest peer moves about
        # 15,000 msgs/s here: this leaves ten times that), and is noted as failed: one hung
        # peer must not hold the run for the harness's 600 s per test.
        self.result_timeout_s = max(120.0, n / 1500)
        self.peers = {}
        self.servers = {}
        self.workers: list[Worker] = []
        self.raw: dict[str, dict[str, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
        self.notes: dict[str, list[str]] = collections.defaultdict(list)
        self._count = 0
        for key in keys:
            try:
                self.peers[key] = load(key)
            except ImportError as exc:
                self.notes[key].append(f"client library missing ({exc}); pip install -e '.[bench]'")

    # -- processes -------------------------------------------------------------------------------

    def start_servers(self) -> None:
        for key, peer in list(self.peers.items()):
            server = peer.make_server(os.path.join(self.directory, key))
            started = time.monotonic()
            try:
                server.start()
            except Exception as exc:  # noqa: BLE001 - the others still run
                server.stop()
                self.notes[key].append(f"server did not start: {exc}")
                del self.peers[key]
                continue
            self.servers[key] = server
            note = getattr(server, "note", "")
            if note:
                self.notes[key].append(note)
            print(f"  {key}: {server.version() or '?'} on 127.0.0.1:{server.port} "
                  f"(ready in {time.monotonic() - started:.1f} s)", flush=True)

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.stop(0)
        self.workers.clear()
        for server in self.servers.values():
            server.stop()

    def worker(self, key: str, role: str, **options) -> Worker:
        self._count += 1
        args = peer_worker(key, role, {**self.peers[key].client_options(self.servers[key]), **options})
        worker = Worker(f"{self._count:03d}-{key}-{role}", args, self.directory)
        self.workers.append(worker)
        return worker

    def loadgen(self, mode: str, *args: object) -> Worker:
        self._count += 1
        worker = Worker(f"{self._count:03d}-loadgen-{mode}", [sys.executable, LOADGEN, mode, *map(str, args)],
                        self.directory)
        self.workers.append(worker)
        return worker

    def release(self, *workers: Worker) -> None:
        for worker in workers:
            worker.stop()
            self.workers.remove(worker)

    def timed(self, key: str, role: str, profile: str | None = None, **options) -> dict:
        """Run one role: wait for ready, go, collect the result. With ``profile`` (a file
        name prefix), py-spy samples the client and the server while the clock runs."""
        worker = self.worker(key, role, **options)
        samplers = []
        try:
            worker.expect_ready()
            if profile is not None:
                samplers = [_Sampler(worker.process.pid, f"{profile}-client"),
                            _Sampler(self.servers[key].pid, f"{profile}-broker")]
            worker.go()
            return worker.result(self.result_timeout_s)
        finally:
            for sampler in samplers:
                sampler.stop()
            self.release(worker)

    def round(self, key: str, number: int, profile: str | None = None) -> None:
        play_round(self, key, number, profile)

    # -- results -----------------------------------------------------------------------------------

    def figures(self) -> dict:
        systems = {}
        for key in SYSTEMS:
            if key not in self.peers and key not in self.notes:
                continue
            peer = self.peers.get(key)
            entry: dict = {}
            if peer is not None:
                entry.update(label=peer.label, settings=peer.settings)
                if key in self.servers:
                    entry["version"] = self.servers[key].version()
            for name, values in self.raw.get(key, {}).items():
                entry[name] = statistics.median(values)
            if self.raw.get(key):
                entry["runs"] = {name: values for name, values in self.raw[key].items()}
            if "fetch_MBps" in entry:
                entry["fetch_vs_sendfile"] = entry["fetch_MBps"] / entry["sendfile_MBps"]
            if self.notes.get(key):
                entry["notes"] = self.notes[key]
            systems[key] = entry
        return systems


def run(n: int | None = None, rounds: int | None = None, systems: list[str] | None = None,
        latency_seconds: float | None = None, profile: bool = False, output: Path = RESULTS,
        keep: bool = False) -> dict:
    """Run the comparison, print it, write the JSON, Markdown and chart; return the result.

    ``n`` (env BENCH_PAPER_N, default 200,000) messages per throughput test; ``rounds`` (env
    BENCH_PAPER_ROUNDS, default 3); ``systems`` (env BENCH_PAPER_SYSTEMS, comma-separated,
    default all); ``latency_seconds`` (env BENCH_PAPER_LATENCY_S, default 5) at 5,000 msgs/s.
    Temp data under BENCH_DIR (default: the system's temp directory).
    """
    n = n or int(os.environ.get("BENCH_PAPER_N") or DEFAULT_N)
    rounds = rounds or int(os.environ.get("BENCH_PAPER_ROUNDS") or DEFAULT_ROUNDS)
    systems = systems or [key for key in (os.environ.get("BENCH_PAPER_SYSTEMS") or "").split(",") if key] \
        or list(SYSTEMS)
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; choose from {list(SYSTEMS)}")
    latency_seconds = latency_seconds or float(os.environ.get("BENCH_PAPER_LATENCY_S") or DEFAULT_LATENCY_S)
    latency_messages = int(latency_seconds * LATENCY_RATE)
    n = max(BATCH, n - n % BATCH)
    directory = tempfile.mkdtemp(prefix="tb-paper-", dir=os.environ.get("BENCH_DIR"))
    started = time.monotonic()
    run_ = Run(directory, n, latency_messages, systems)
    restore = None
    if threading.current_thread() is threading.main_thread():
        restore = signal.signal(signal.SIGTERM, _interrupt)
    profile_dir = None
    load_start = os.getloadavg()
    print(f"\npaper: starting {', '.join(run_.peers)} (data under {directory})", flush=True)
    try:
        run_.start_servers()
        order = [key for key in systems if key in run_.servers]
        for number in range(1, rounds + 1):
            shift = (number - 1) % max(len(order), 1)
            for key in order[shift:] + order[:shift]:
                began = time.monotonic()
                run_.round(key, number)
                print(f"  round {number}: {key} done in {time.monotonic() - began:.0f} s", flush=True)
        if profile and TB in run_.servers:
            if shutil.which("py-spy") is None and not Path(sys.executable).with_name("py-spy").exists():
                run_.notes[TB].append("--profile: py-spy not found (pip install py-spy)")
            else:
                os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
                profile_dir = tempfile.mkdtemp(prefix="tb-paper-profile-", dir=os.environ.get("BENCH_DIR"))
                saved = run_.raw.pop(TB, None)
                run_.n = max(n, PROFILE_N)  # long enough for a few thousand samples
                print(f"  profiling twisted_broker under py-spy, n={run_.n:,} (not counted)", flush=True)
                run_.round(TB, rounds + 1, profile=profile_dir)
                run_.n = n
                run_.raw.pop(TB, None)
                if saved is not None:
                    run_.raw[TB] = saved
    finally:
        run_.stop_all()
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)

    now = datetime.datetime.now(datetime.timezone.utc)
    figures = run_.figures()
    result = {"date": now.isoformat(timespec="seconds"), "machine": machine(), "n": n, "rounds": rounds,
              "message_bytes": MESSAGE_BYTES, "batch": BATCH, "latency_rate": LATENCY_RATE,
              "latency_messages": latency_messages, "load_average": os.getloadavg(),
              "load_average_at_start": load_start, "seconds": round(time.monotonic() - started, 1),
              "systems": figures, "targets": targets(figures)}
    print_report(result)
    if profile_dir is not None:
        print(f"\npy-spy, GIL-holding samples while each clock ran (collapsed stacks in {profile_dir}):")
        for test in ("produce_b1", "produce_b50", "consume"):
            for side in ("client", "broker"):
                print(f"{test}, {side}:")
                for line in summarize_profile(os.path.join(profile_dir, f"{test}-{side}.txt")):
                    print(f"  {line}")
    output.mkdir(parents=True, exist_ok=True)
    stamp = now.strftime("%Y-%m-%d")
    text = json.dumps(result, indent=2) + "\n"
    for name in (f"{stamp}.json", "latest.json"):
        (output / name).write_text(text)
    latest = output / "latest.md"  # keeps the sections of python -m bench small and tail
    text = markdown(result)
    for heading in (SMALL_HEADING, TAIL_HEADING):
        kept = section_of(latest.read_text(), heading) if latest.exists() else ""
        text = replace_section(text, heading, kept) if kept else text
    latest.write_text(text)
    try:
        chart(result, output / f"{stamp}.png")
        shutil.copyfile(output / f"{stamp}.png", output / "latest.png")
    except ImportError as exc:
        print(f"no chart: {exc} (pip install matplotlib)")
    print(f"\nwrote {output}/{stamp}.json, latest.json, latest.md, {stamp}.png, latest.png "
          f"({result['seconds']:.0f} s in all)")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.paper", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int,
                        help=f"messages per throughput test (env BENCH_PAPER_N, default {DEFAULT_N:,})")
    parser.add_argument("--rounds", type=int, help=f"rounds, each figure their median (default {DEFAULT_ROUNDS})")
    parser.add_argument("--systems", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument("--latency-seconds", type=float,
                        help=f"length of each latency test at {LATENCY_RATE:,} msgs/s (default {DEFAULT_LATENCY_S:g})")
    parser.add_argument("--profile", action="store_true",
                        help="one more twisted_broker round under py-spy (not counted); prints its hot frames")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON, Markdown and PNG go")
    parser.add_argument("--keep", action="store_true", help="keep the servers' data and the clients' stderr")
    args = parser.parse_args()
    run(n=args.n, rounds=args.rounds, systems=args.systems.split(",") if args.systems else None,
        latency_seconds=args.latency_seconds, profile=args.profile, output=args.output, keep=args.keep)


if __name__ == "__main__":
    main()
