"""The Spark loader against the plain SimpleConsumer, on the same data in the same run.

Workload (issue 5/7, item 5): ``messages`` (default 1,000,000) messages of 200 bytes,
produced in batches of 1,000 to the two partitions of one ``twistd -n broker`` (etc/
server.properties settings, no ZooKeeper), then read back whole, three ways:

- **SimpleConsumer**: one thread fetching each partition in 1 MiB fetches and iterating
  every message with its offsets (``FetchedMessageSet``: the consumers' own loop; it does not
  check CRCs);
- **loader**: ``spark.read.format("twisted_broker")`` (broker.list, 1 MiB fetches, default
  256 MiB splits: one Spark partition per broker-partition here) written to Parquet with the
  ETL's writer settings (twisted_broker/spark/write_options.py) by a ``local[*]``
  SparkSession, from ``load()`` to the last file written; the session's start (10-25 s) is
  not timed, nor is one first load that warms the JIT up. Twice: with CRCs checked
  (``crc=fail``, the default; the CRC-32 of a 200-byte payload costs about 0.06 us with
  zlib-ng) and without (``crc=none``, the same work as the consumer's
  loop); the row count and the columns of the files written are checked after each;
- **etl**: one whole ``twisted-broker etl`` run (plan, load with ``crc=mark``, read-back
  verification, publish, commit) on the same session, for the record;
- **on a standalone cluster**: the loader (``crc=fail``, best of ``rounds`` after an untimed
  first load) and one etl run again, now on a Spark master and two workers of one core each
  (spark/standalone.py, as ``make spark-cluster`` starts them) whose executors run
  .venv-spark-worker's Python (pyspark and pyarrow only: the package is shipped to them as a
  zip, and their CRC-32 is the stdlib's zlib, about half zlib-ng's speed). The same two cores
  then also carry the master's and workers' JVMs, and each row crosses from an executor's
  Python worker to its JVM and on to the driver's as it would between machines.

SimpleConsumer and loaders alternate for ``rounds`` rounds (default 5); each keeps its best.
Target: loader >= 0.5x SimpleConsumer messages/s. On this 2-core machine the loader's Python
workers (~0.7 s of CPU per million rows), the JVM's Arrow-to-row conversion and Parquet
writer (~0.9 s, plus ~0.3 s of JIT compiling and GC per load) and the broker (~0.1 s) share
the two cores the consumer's one thread has mostly to itself; besides its rows a load costs
~0.3 s (planning, task launch, closing and committing the files). The load average is
printed because other work on the machine slows the loader (which uses every core) far more
than the consumer.

``python -m bench spark``, or ``python -m bench.spark_bench --messages 2000000 --rounds 5``.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.broker_process import BrokerProcess
from twisted_broker.client.simple_consumer import LATEST_TIME, SimpleConsumer
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.spark.write_options import PARQUET_WRITE_OPTIONS
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest

TOPIC = "spark-bench"
PARTITIONS = 2
MESSAGE_BYTES = 200
BATCH = 1000
FETCH_BYTES = 1 << 20
TARGET = 0.5  # loader / SimpleConsumer, issue 5/7
COLUMNS = ("topic", "broker_id", "partition", "offset", "next_offset", "payload")
# The executors' Python on the cluster: pyspark and pyarrow only (the Makefile builds it).
WORKER_PYTHON = Path(__file__).resolve().parents[1] / ".venv-spark-worker" / "bin" / "python"


def _produce(port: int, messages: int) -> dict[int, int]:
    """``messages`` distinct 200-byte payloads, half per partition; return each partition's end."""
    ends = {partition: 0 for partition in range(PARTITIONS)}
    with SyncProducer("127.0.0.1", port) as producer:
        for first in range(0, messages, BATCH):
            count = min(BATCH, messages - first)
            payload_block = os.urandom(MESSAGE_BYTES * count)
            message_set = encode_message_set([payload_block[i * MESSAGE_BYTES:(i + 1) * MESSAGE_BYTES]
                                              for i in range(count)])
            partition = (first // BATCH) % PARTITIONS
            producer.send(TOPIC, partition, message_set)
            ends[partition] += len(message_set)
    deadline = time.monotonic() + 120
    with SimpleConsumer("127.0.0.1", port) as consumer:
        for partition, end in ends.items():
            while consumer.get_offsets_before(TOPIC, partition, LATEST_TIME, 1)[0] < end:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"partition {partition} did not reach {end} within 120 s")
                time.sleep(0.05)
    return ends


def _simple_consumer(port: int, ends: dict[int, int]) -> tuple[int, float]:
    count = 0
    started = time.perf_counter()
    with SimpleConsumer("127.0.0.1", port) as consumer:
        for partition, end in ends.items():
            offset = 0
            while offset < end:
                fetched = consumer.fetch(FetchRequest(TOPIC, partition, offset, FETCH_BYTES))
                for _offset, _next_offset, message in fetched:
                    count += 1
                    message.payload  # what a consumer reads
                offset = fetched.next_offset
    return count, time.perf_counter() - started


def _loader(spark, port: int, output: Path, crc: str) -> tuple[int, float]:
    shutil.rmtree(output, ignore_errors=True)
    started = time.perf_counter()
    (spark.read.format("twisted_broker").option("broker.list", f"0:127.0.0.1:{port}").option("topic", TOPIC)
     .option("fetch.size", str(FETCH_BYTES)).option("crc", crc).load()
     .write.options(**PARQUET_WRITE_OPTIONS).parquet(str(output)))
    seconds = time.perf_counter() - started
    written = spark.read.parquet(str(output))
    assert written.columns == list(COLUMNS), written.columns  # every column README.md's Spark section lists
    return written.count(), seconds


def _etl(spark, port: int, directory: Path, name: str, messages: int) -> float:
    """One whole etl run of the topic into ``directory/name``; its seconds."""
    from twisted_broker.spark.etl import EtlRun
    etl = EtlRun(topic=TOPIC, output=directory / name, checkpoint=directory / f"{name}-checkpoint",
                 brokers={0: ("127.0.0.1", port)}, fetch_bytes=FETCH_BYTES, messages=io.StringIO())
    started = time.perf_counter()
    manifest = etl.run(lambda: spark)
    seconds = time.perf_counter() - started
    assert manifest["totals"]["messages"] == messages
    return seconds


def _on_cluster(port: int, directory: Path, messages: int, rounds: int) -> tuple[float, float]:
    """Best loader seconds and etl seconds on a standalone cluster of two one-core workers."""
    from twisted_broker.spark.session import build_session
    from twisted_broker.spark.standalone import StandaloneCluster
    cluster = StandaloneCluster(str(WORKER_PYTHON), directory / "standalone", workers=2, cores=1, memory="2g")
    spark = None
    try:
        cluster.start()
        spark = build_session(cluster.master_url, app_name="twisted-broker spark bench (cluster)",
                              conf={"spark.pyspark.python": str(WORKER_PYTHON), "spark.cores.max": "2",
                                    "spark.executor.memory": "1g",
                                    "spark.scheduler.minRegisteredResourcesRatio": "1.0"})
        _loader(spark, port, directory / "parquet", "fail")  # untimed, as on local[*]
        best = float("inf")
        for _round in range(rounds):
            count, seconds = _loader(spark, port, directory / "parquet", "fail")
            assert count == messages, (count, messages)
            best = min(best, seconds)
        return best, _etl(spark, port, directory, "etl-cluster", messages)
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()


def run(messages: int | None = None, rounds: int = 5) -> dict:
    from twisted_broker.spark.session import build_session

    messages = messages or int(os.environ.get("SPARK_BENCH_MESSAGES", 1_000_000))
    directory = tempfile.mkdtemp(prefix="spark-bench-", dir=os.environ.get("BENCH_DIR"))
    broker = BrokerProcess(directory, {"num.partitions": str(PARTITIONS)})
    spark = None
    try:
        broker.start()
        ends = _produce(broker.port, messages)
        spark = build_session("local[*]", app_name="twisted-broker spark bench")
        spark.range(1).collect()  # the JVM's first job, not timed
        # One untimed load: the JIT compiles Spark's, Arrow's and Parquet's hot paths during the
        # first loads (C2 compiler threads: ~1.2 s of CPU in the first, ~0.35 s by the fourth,
        # on the two cores the load itself needs), which the rounds then only partly absorb.
        _loader(spark, broker.port, Path(directory) / "parquet", "fail")
        best = {"consumer": float("inf"), "fail": float("inf"), "none": float("inf")}
        for _round in range(rounds):
            count, seconds = _simple_consumer(broker.port, ends)
            assert count == messages, (count, messages)
            best["consumer"] = min(best["consumer"], seconds)
            for crc in ("fail", "none"):
                count, seconds = _loader(spark, broker.port, Path(directory) / "parquet", crc)
                assert count == messages, (count, messages)
                best[crc] = min(best[crc], seconds)
        etl_seconds = _etl(spark, broker.port, Path(directory), "etl", messages)
        spark.stop()  # one SparkContext per process: the cluster's comes next
        spark = None
        cluster_seconds, cluster_etl_seconds = _on_cluster(broker.port, Path(directory), messages, rounds)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
    results = {"messages": messages, "cores": os.cpu_count(), "load_average": os.getloadavg()[0],
               "simple_consumer_msgs_per_s": messages / best["consumer"],
               "loader_msgs_per_s": messages / best["fail"],
               "loader_no_crc_msgs_per_s": messages / best["none"],
               "etl_msgs_per_s": messages / etl_seconds,
               "loader_cluster_msgs_per_s": messages / cluster_seconds,
               "etl_cluster_msgs_per_s": messages / cluster_etl_seconds}
    consumer = results["simple_consumer_msgs_per_s"]
    results["loader_ratio"] = results["loader_msgs_per_s"] / consumer
    results["loader_no_crc_ratio"] = results["loader_no_crc_msgs_per_s"] / consumer
    print(f"spark: {messages:,} messages of {MESSAGE_BYTES} bytes in {PARTITIONS} partitions, "
          f"{os.cpu_count()} cores (load average {results['load_average']:.1f}), best of {rounds}")
    print(f"{'reader':54} {'msgs/s':>12} {'MB/s':>8} {'seconds':>8} {'x consumer':>10}")
    for name, key in (("SimpleConsumer (1 thread, iterate, no CRC)", "simple_consumer_msgs_per_s"),
                      ("loader -> Parquet (crc=fail, the default), local[*]", "loader_msgs_per_s"),
                      ("loader -> Parquet (crc=none, as the consumer), local[*]", "loader_no_crc_msgs_per_s"),
                      ("etl run (crc=mark, verify, publish), local[*]", "etl_msgs_per_s"),
                      ("loader -> Parquet (crc=fail), cluster 2 x 1 core", "loader_cluster_msgs_per_s"),
                      ("etl run, cluster 2 x 1 core", "etl_cluster_msgs_per_s")):
        rate = results[key]
        print(f"{name:54} {rate:12,.0f} {rate * MESSAGE_BYTES / 1e6:8.1f} {messages / rate:8.2f} "
              f"{rate / consumer:10.2f}")
    verdict = "met" if results["loader_ratio"] >= TARGET else "MISSED"
    print(f"loader / SimpleConsumer = {results['loader_ratio']:.2f} (target >= {TARGET}: {verdict})")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=None, help="messages to load (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds; each keeps its best")
    options = parser.parse_args()
    run(options.messages, options.rounds)
