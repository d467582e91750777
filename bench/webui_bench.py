"""How fast the admin console answers with a large registry (issue 4/7): "the overview and a
group page each render in under 300 ms with 1,000 topics and 200 groups registered".

Set-up: a local ZooKeeper, one real broker (``twistd -n broker``, registered by itself), and
in ZooKeeper, written with kazoo as brokers and 0.7 consumers would: 1,000 topics on that
broker (one partition each), and 200 groups, each with one live consumer subscribed to 5
topics, owning their partitions, with committed offsets. A standalone console (``twistd -n
webui``) copies the registry and keeps it by watches; the clock starts once it has.

Measured over HTTP from this process, each page fetched whole, ``REPEAT`` times:

- the overview (``/``), the groups list (``/groups``) and the overview's JSON: memory only;
- a group page (``/groups/<g>``), each time another group, so each asks the broker for its 5
  partitions' latest offsets afresh (the console keeps offsets 1 s);
- the overview and a group page again, each right after a committed offset changed in
  ZooKeeper (as consumers commit all the time), so nothing derived from the registry is cached;
- the time the console took to copy the registry (its first ZooKeeper sync).

Run it with ``python -m bench webui``.
"""

from __future__ import annotations

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

TOPICS = 1000
GROUPS = 200
TOPICS_PER_GROUP = 5
REPEAT = 25
TARGET_MS = 300.0
TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]


def wait_for_port_file(path: Path, process: subprocess.Popen, timeout_s: float = 60.0) -> int:
    """The port a started process writes to ``path`` (bench/console_scale.py uses it too)."""
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{path.name} was not written (exit status {process.poll()})")
        time.sleep(0.05)
    return int(path.read_text())


def _get(port: int, path: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        body = response.read()
        assert response.status == 200, (path, response.status)
    return (time.perf_counter() - started) * 1000, body


def _register(zk_connect: str) -> float:
    """Write the topics and groups; return the seconds it took."""
    from kazoo.client import KazooClient

    started = time.perf_counter()
    client = KazooClient(hosts=zk_connect)
    client.start(30)
    pending = []
    for topic in range(TOPICS):
        pending.append(client.create_async(f"/brokers/topics/topic-{topic:04d}/0", b"1", makepath=True))
    for result in pending:
        result.get(30)
    pending = []
    for group in range(GROUPS):
        name = f"group-{group:03d}"
        consumer = f"{name}_bench-1-0000abcd"
        topics = [f"topic-{(group * TOPICS_PER_GROUP + i) % TOPICS:04d}" for i in range(TOPICS_PER_GROUP)]
        registration = "{ " + ",".join(f'"{topic}": 1' for topic in topics) + " }"
        pending.append(client.create_async(f"/consumers/{name}/ids/{consumer}", registration.encode(),
                                           makepath=True))
        for topic in topics:
            pending.append(client.create_async(f"/consumers/{name}/owners/{topic}/0-0", f"{consumer}-0".encode(),
                                               makepath=True))
            pending.append(client.create_async(f"/consumers/{name}/offsets/{topic}/0-0", b"0", makepath=True))
    for result in pending:
        result.get(30)
    client.stop()
    client.close()
    return time.perf_counter() - started


def _summary(times_ms: list[float]) -> dict:
    ordered = sorted(times_ms)
    return {"median_ms": statistics.median(ordered), "p95_ms": ordered[max(0, round(0.95 * len(ordered)) - 1)],
            "max_ms": ordered[-1], "samples": len(ordered)}


def run(repeat: int = REPEAT) -> dict:
    from twisted_broker.local_zookeeper import ZooKeeperServer

    directory = Path(tempfile.mkdtemp(prefix="webui-bench-", dir=os.environ.get("BENCH_DIR")))
    zookeeper = ZooKeeperServer(directory / "zookeeper", tick_time_ms=200)
    children: list[subprocess.Popen] = []
    try:
        zookeeper.start()
        zk_connect = zookeeper.connect_string
        (directory / "broker").mkdir()
        config = directory / "broker" / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in {
            "brokerid": "0", "hostname": "127.0.0.1", "port": "0", "log.dir": str(directory / "broker" / "logs"),
            "num.partitions": "1", "zk.connect": zk_connect}.items()))
        broker = subprocess.Popen([*TWISTD, "-n", "--pidfile=", f"--logfile={directory}/broker.log", "broker",
                                   "--config", str(config), "--port-file", str(directory / "broker-port")],
                                  cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        children.append(broker)
        wait_for_port_file(directory / "broker-port", broker)
        register_s = _register(zk_connect)
        console = subprocess.Popen([*TWISTD, "-n", "--pidfile=", f"--logfile={directory}/console.log", "webui",
                                    "--zk", zk_connect, "--listen", "tcp:0:interface=127.0.0.1",
                                    "--port-file", str(directory / "console-port")],
                                   cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        children.append(console)
        started = time.perf_counter()
        port = wait_for_port_file(directory / "console-port", console)
        while True:
            overview = json.loads(_get(port, "/api/overview")[1])
            if overview["synced"] and overview["totals"]["topics"] == TOPICS and overview["totals"]["groups"] == GROUPS:
                break
            time.sleep(0.05)
        sync_s = time.perf_counter() - started
        results: dict = {"topics": TOPICS, "groups": GROUPS, "register_s": register_s, "console_sync_s": sync_s}
        pages = {"overview": lambda i: "/", "overview_json": lambda i: "/api/overview",
                 "groups_list": lambda i: "/groups",
                 "group_page": lambda i: f"/groups/group-{(i * 7) % GROUPS:03d}"}
        for name, path in pages.items():
            _get(port, path(repeat))  # warm the templates and the connection to the broker
            results[name] = _summary([_get(port, path(i))[0] for i in range(repeat)])
        from kazoo.client import KazooClient
        writer = KazooClient(hosts=zk_connect)
        writer.start(30)
        try:
            for name, path in {"overview_after_commit": pages["overview"],
                               "group_after_commit": pages["group_page"]}.items():
                times = []
                for i in range(repeat):
                    writer.set("/consumers/group-000/offsets/topic-0000/0-0", str(i + 1).encode())
                    time.sleep(0.02)  # the console's watch fires and it reads the new value
                    times.append(_get(port, path(i + 1))[0])
                results[name] = _summary(times)
                pages[name] = path
        finally:
            writer.stop()
            writer.close()
    finally:
        for child in reversed(children):
            child.terminate()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
        zookeeper.stop()
        shutil.rmtree(directory, ignore_errors=True)
    print(f"admin console with {TOPICS:,} topics and {GROUPS} groups registered "
          f"(registry copied in {results['console_sync_s']:.1f} s)")
    print(f"{'page':22} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    for name in pages:
        figures = results[name]
        print(f"{name:22} {figures['median_ms']:10.1f} {figures['p95_ms']:8.1f} {figures['max_ms']:8.1f}")
    worst = max(results[name]["p95_ms"] for name in ("overview", "group_page", "overview_after_commit",
                                                    "group_after_commit"))
    results["target"] = {"p95_ms_under": TARGET_MS, "met": worst < TARGET_MS}
    print(f"target: overview and group page under {TARGET_MS:.0f} ms: "
          f"{'met' if worst < TARGET_MS else 'NOT met'} (worst p95 {worst:.1f} ms)")
    return results


if __name__ == "__main__":
    run()
