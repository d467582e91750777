"""``python -m bench [NAME...]``: run the named benchmarks (all by default)."""

from __future__ import annotations

import argparse

from bench import broker_bench, client_bench, crc_bench, log_bench, webui_bench

BENCHMARKS = {"crc": crc_bench.run, "log": log_bench.run, "broker": broker_bench.run, "client": client_bench.run}
BENCHMARKS["webui"] = webui_bench.run
BENCHMARKS["spark"] = lambda: __import__("bench.spark_bench", fromlist=["run"]).run()  # needs the spark extra
# today's Kafka clients through the modern listener beside the 0.7 path (issue 16)
BENCHMARKS["modern"] = lambda: __import__("bench.modern", fromlist=["run"]).run()
# issue 25: SASL_SSL beside PLAINTEXT, and produce b1 with the ACL authorizer on beside off
BENCHMARKS["security"] = lambda: __import__("bench.security", fromlist=["run"]).run()
# the comparison with RabbitMQ, ActiveMQ, Redis and NATS (their servers: the Makefile's peer-packages)
BENCHMARKS["paper"] = lambda: __import__("bench.paper", fromlist=["run"]).run()
# issue 24: the broker's CPU per small request beside a bare Twisted floor (after paper, which
# rewrites bench/results/latest.md; this replaces its own section of it)
BENCHMARKS["small"] = lambda: __import__("bench.small_requests", fromlist=["run"]).run()
# issue 24: latency p50/p99/p99.9 and server CPU, factor 1 flushed and committed, factor 3, beside
# Redis Streams and NATS (their servers: peer-packages); its own section of latest.md
BENCHMARKS["tail"] = lambda: __import__("bench.tail", fromlist=["run"]).run()
# issue 24: today's clients (confluent-kafka) against this broker and noida-db, another Kafka-protocol broker
BENCHMARKS["kafka_peers"] = lambda: __import__("bench.kafka_peers", fromlist=["run"]).run()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark {', '.join(sorted(unknown))}; choose from {', '.join(BENCHMARKS)}")
    for name in args.names or BENCHMARKS:
        BENCHMARKS[name]()


if __name__ == "__main__":
    main()
