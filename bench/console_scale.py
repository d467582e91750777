"""The console and the CLI at scale (issue 23's item 6): the overview of a cluster of 1,000
replicated topics, its filter and pages, a broker's page, and ``topics --describe`` of all.

Set-up: a local ZooKeeper holding tests/support/scale_registry.py's layout (5 brokers'
registrations, a controller, T topics of P partitions at factor 3 with their states, some
under-replicated, some offline), written straight with kazoo: no broker runs, as none is
needed to read the registry. A standalone console (``twistd -n webui``) copies it; the clock
starts once it shows every topic.

Measured, each ``--repeat`` times, over HTTP from this process (the whole body read):
``/`` (the first page of topics), ``/?page=7``, ``/?q=0042`` (the filter), ``/api/overview``,
``/brokers/0``; then ``/`` again, each time right after one partition's state changed in
ZooKeeper (an ISR change: nothing the console derived from the registry is cached then).
Then ``python -m twisted_broker topics --describe`` of every topic, and ``topics`` (the list),
as processes, wall time from start to exit (Python's start included, about 0.3 s).

``--source DIR`` runs the console and the CLI from another checkout (to compare with an older
commit on the same machine); the registry is written by this checkout's support code.

    python -m bench.console_scale [--topics 1000] [--partitions 1] [--repeat 10] [--source DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.webui_bench import wait_for_port_file
from tests.support.scale_registry import ScaleLayout, write_registry
from twisted_broker.local_zookeeper import ZooKeeperServer
from twisted_broker.registry import replication_paths

ROOT = Path(__file__).resolve().parents[1]
TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]
PAGES = {"overview": "/", "overview_page_7": "/?page=7", "overview_filtered": "/?q=0042",
         "overview_json": "/api/overview", "broker_page": "/brokers/0"}


def _get(port: int, path: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as response:
        body = response.read()
        assert response.status == 200, (path, response.status)
    return (time.perf_counter() - started) * 1000, body


def _summary(times_ms: list[float]) -> dict:
    ordered = sorted(times_ms)
    return {"median_ms": round(statistics.median(ordered), 1), "max_ms": round(ordered[-1], 1),
            "samples": len(ordered)}


def _pages(port: int, layout: ScaleLayout, repeat: int, writer) -> dict:
    results = {}
    for name, path in PAGES.items():
        _get(port, path)  # the templates compiled, the memo filled
        results[name] = _summary([_get(port, path)[0] for _ in range(repeat)])
    times = []
    for i in range(repeat):
        state = layout.state(0, 0)
        changed = state.__class__(state.leader, state.leader_epoch, state.isr[:1 + i % 2], state.controller_epoch)
        writer.set(replication_paths.state_path(layout.topic(0), 0), changed.encode())
        time.sleep(0.05)  # the console's watch fires and it reads the new value
        times.append(_get(port, "/")[0])
    results["overview_after_isr_change"] = _summary(times)
    return results


def _cli(zk_connect: str, env: dict, repeat: int, *args: str) -> dict:
    times, lines = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "twisted_broker", "topics", "--zk", zk_connect, *args],
                              capture_output=True, env=env, cwd=ROOT, timeout=600)
        times.append((time.perf_counter() - started) * 1000)
        assert done.returncode == 0, done.stderr.decode()[-500:]
        lines = len(done.stdout.splitlines())
    return {**_summary(times), "lines": lines}


def run(topics: int = 1000, partitions: int = 1, repeat: int = 10, source: Path | None = None) -> dict:
    from kazoo.client import KazooClient

    layout = ScaleLayout(topics, partitions)
    env = {**{k: v for k, v in os.environ.items() if k != "TWISTED_BROKER_ZK"},
           "PYTHONPATH": str(source or ROOT)}
    directory = Path(tempfile.mkdtemp(prefix="console-scale-", dir=os.environ.get("BENCH_DIR")))
    zookeeper = ZooKeeperServer(directory / "zookeeper", tick_time_ms=2000)
    console = writer = None
    try:
        zookeeper.start()
        zk_connect = zookeeper.connect_string
        writer = KazooClient(hosts=zk_connect)
        writer.start(30)
        started = time.perf_counter()
        write_registry(writer, layout)
        results: dict = {"topics": topics, "partitions": layout.topics * layout.partitions,
                         "source": str(source or ROOT), "register_s": round(time.perf_counter() - started, 2)}
        console = subprocess.Popen([*TWISTD, "-n", "--pidfile=", f"--logfile={directory}/console.log", "webui",
                                    "--zk", zk_connect, "--listen", "tcp:0:interface=127.0.0.1",
                                    "--port-file", str(directory / "console-port"), "--lag-sample-interval", "600"],
                                   cwd=directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.perf_counter()
        port = wait_for_port_file(directory / "console-port", console)
        while True:
            overview = json.loads(_get(port, "/api/overview")[1])
            if overview["synced"] and overview["totals"]["partitions"] == results["partitions"]:
                break
            time.sleep(0.1)
        results["console_sync_s"] = round(time.perf_counter() - started, 2)
        results["pages"] = _pages(port, layout, repeat, writer)
        results["cli"] = {"describe_all": _cli(zk_connect, env, max(1, repeat // 3), "--describe"),
                          "list_all": _cli(zk_connect, env, max(1, repeat // 3))}
    finally:
        if console is not None:
            console.terminate()
            try:
                console.wait(15)
            except subprocess.TimeoutExpired:
                console.kill()
        if writer is not None:
            writer.stop()
            writer.close()
        zookeeper.stop()
        shutil.rmtree(directory, ignore_errors=True)
    _print(results)
    return results


def _print(results: dict) -> None:
    print(f"console and CLI with {results['topics']:,} topics, {results['partitions']:,} partitions "
          f"(from {results['source']}; registry copied in {results['console_sync_s']} s)")
    print(f"{'what':28} {'median ms':>10} {'max ms':>9}")
    for name, figures in {**results["pages"], **{f"topics {k}": v for k, v in results["cli"].items()}}.items():
        print(f"{name:28} {figures['median_ms']:10.1f} {figures['max_ms']:9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.console_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1, help="per topic")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--source", type=Path, help="run the console and the CLI from this checkout")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = run(args.topics, args.partitions, args.repeat, args.source)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
