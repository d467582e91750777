"""``twisted-broker etl --master spark://...`` on a Spark standalone cluster whose executors
cannot see this project.

The master and two workers are the pyspark package's own JVMs (spark/standalone.py), from
.venv-spark-worker: a Python holding pyspark and pyarrow only (``make test`` builds it). Each
worker runs in a private mount namespace where a tmpfs covers this checkout (and the
project's virtualenv) except that worker venv, so its executors can import nothing of the
project but what the ETL ships them. The ETL itself runs as a user runs it, a subprocess of
the command line with the project's venv; its Spark event log says where every task ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.spark_topics import payloads
from tests.support.jvm_options import spark_conf, spark_daemon_env
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.spark.standalone import StandaloneCluster

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORKER_PYTHON = ROOT / ".venv-spark-worker" / "bin" / "python"
TOPIC = "nightly"
ETL_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("hiding the project from the workers takes a mount namespace: run as root")
    if not WORKER_PYTHON.exists():
        pytest.fail(f"{WORKER_PYTHON} is missing: make test builds it (make .venv-spark-worker/.installed)")
    venv = Path(sys.prefix)  # the project's, usually ROOT/.venv
    hide = [ROOT] if ROOT in venv.parents else [ROOT, venv]
    cluster = StandaloneCluster(str(WORKER_PYTHON), tmp_path_factory.mktemp("spark-standalone"), workers=2,
                                cores=1, memory="1g", hide=hide, keep=[WORKER_PYTHON.parents[1]])
    saved = {name: os.environ.get(name) for name in spark_daemon_env()}
    os.environ.update(spark_daemon_env())  # read when the daemons are spawned
    try:
        cluster.start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    yield cluster
    cluster.stop()


def _in_worker_namespace(cluster: StandaloneCluster, index: int, *command: str) -> subprocess.CompletedProcess:
    worker = cluster.processes[1 + index]  # unshare exec'd down to the worker's JVM: same pid
    return subprocess.run(["nsenter", "-t", str(worker.pid), "-m", *command], capture_output=True, text=True)


def _etl(cluster: StandaloneCluster, zk_connect: str, tmp_path: Path, *options: str,
         env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "twisted_broker", "etl", "--zk", zk_connect, "--topic", TOPIC,
               "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "checkpoint"),
               "--master", cluster.master_url, "--split-size", "3000",
               # Both executors (one core each) before the first job, and small ones.
               "--conf", "spark.cores.max=2", "--conf", "spark.executor.memory=512m",
               "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
               "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=60s",
               # One plain JSON-lines file (Spark 4 rolls and compresses it with zstd by default).
               "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir=file://{tmp_path / 'events'}",
               "--conf", "spark.eventLog.rolling.enabled=false", "--conf", "spark.eventLog.compress=false",
               *(option for key, value in spark_conf().items() for option in ("--conf", f"{key}={value}")),
               *options]
    environ = {key: value for key, value in os.environ.items() if key != "PYSPARK_PYTHON"}
    return subprocess.run(command, env={**environ, **env}, cwd=tmp_path, capture_output=True, text=True,
                          timeout=ETL_TIMEOUT_S)


def _published_rows(tmp_path: Path) -> list[tuple]:
    rows = []
    for path in sorted((tmp_path / "out").glob("load_date=*/run_id=*/*.parquet")):
        table = pq.read_table(path, columns=["broker_id", "partition", "offset", "next_offset", "payload"])
        rows += [tuple(row.values()) for row in table.to_pylist()]
    return rows


def _events(tmp_path: Path) -> list[dict]:
    logs = list((tmp_path / "events").iterdir())
    assert len(logs) == 1, logs
    return [json.loads(line) for line in logs[0].read_text().splitlines()]


def test_workers_see_neither_the_project_nor_its_virtualenv(standalone):
    for index in range(2):
        listing = _in_worker_namespace(standalone, index, "ls", "-A", str(ROOT))
        assert listing.stdout.split() == [".venv-spark-worker"], listing
        probe = _in_worker_namespace(standalone, index, str(WORKER_PYTHON), "-c", "import pyspark, pyarrow\n"
                                     "import twisted_broker")
        assert "No module named 'twisted_broker'" in probe.stderr, probe


def test_etl_on_the_cluster_loads_every_message_on_the_workers_executors(standalone, cluster_factory, tmp_path):
    brokers = cluster_factory()
    for broker_id in (0, 1):
        for partition in (0, 1):
            for codec in (NO_COMPRESSION, GZIP):
                brokers.produce(TOPIC, broker_id, partition, payloads(f"{broker_id}-{partition}-{codec}", 30, 60),
                                codec)
    brokers.wait_flushed()
    (tmp_path / "events").mkdir()

    done = _etl(standalone, brokers.zk_connect, tmp_path, env={"PYSPARK_PYTHON": str(WORKER_PYTHON)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"executors' Python: {WORKER_PYTHON}, this package shipped to it" in done.stderr

    expected = brokers.reference_rows(TOPIC)
    assert len(expected) == 4 * 2 * 30
    assert Counter(_published_rows(tmp_path)) == Counter(expected)

    # Every task ran on an executor of one of the two workers, and both workers' executors ran some.
    events = _events(tmp_path)
    executor_worker = {event["Executor ID"]: event["Executor Info"]["Log Urls"]["stdout"].split("/logPage")[0]
                       for event in events if event["Event"] == "SparkListenerExecutorAdded"}
    task_executors = [event["Task Info"]["Executor ID"] for event in events if event["Event"] == "SparkListenerTaskEnd"]
    workers = {worker["webuiaddress"] for worker in standalone.state()["workers"]}
    assert len(task_executors) >= 4  # the load's ranges and the read-back
    assert set(task_executors) <= set(executor_worker), (task_executors, executor_worker)
    assert {executor_worker[executor] for executor in task_executors} == workers


def test_a_snappy_message_fails_the_run_naming_the_missing_module(standalone, cluster_factory, tmp_path):
    # spark.pyspark.python instead of the environment variable, this time.
    brokers = cluster_factory()
    brokers.produce(TOPIC, 0, 0, payloads("plain", 5))
    brokers.produce(TOPIC, 1, 1, payloads("snappy", 5), SNAPPY)
    brokers.wait_flushed()
    (tmp_path / "events").mkdir()
    failed = _etl(standalone, brokers.zk_connect, tmp_path, "--conf", f"spark.pyspark.python={WORKER_PYTHON}",
                  "--conf", "spark.task.maxFailures=1", env={})
    assert failed.returncode != 0
    assert ("twisted-broker: error: the load failed, nothing was published: twisted_broker.codec.kafka07.compression."
            "CodecUnavailable: snappy: the module snappy (pip install python-snappy) is not installed in "
            f"{WORKER_PYTHON}") in failed.stderr, failed.stderr[-3000:]
    assert not list((tmp_path / "out").glob("load_date=*")) and not (tmp_path / "checkpoint" / "offsets.json").exists()
