"""A consumer group member in a process of its own, for tests that kill it (kill -9).

    python consumer_group_member.py ZK_CONNECT GROUP TOPIC CONSUMERID [--delay-ms N]
        [--commit-every N] [--session-timeout-ms N] [--fetch-size N]

It consumes TOPIC with one stream, sleeping ``--delay-ms`` after each message, and prints one
JSON line per event on stdout, flushed at once so a kill loses at most a partial last line:

    {"event": "ready"}                                       streams created (first rebalance done)
    {"event": "message", "partition": "0-1", "offset": 0, "next_offset": 15, "payload": "..."}
    {"event": "commit", "consumed": {"0-1": 15}}             after commit_offsets() returned: the
                                                             last next_offset handed out per partition

Offsets are committed explicitly every ``--commit-every`` messages (autocommit off), so the
test knows a commit happened. The ZooKeeper session timeout is ``--session-timeout-ms``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from twisted_broker.client.zookeeper_consumer import ZookeeperConsumerConnector
from twisted_broker.config import ConsumerConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("zk_connect")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("consumerid")
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--commit-every", type=int, default=10)
    parser.add_argument("--session-timeout-ms", type=int, default=1000)
    parser.add_argument("--fetch-size", type=int, default=1048576)
    args = parser.parse_args()
    config = ConsumerConfig.from_properties({
        "zk.connect": args.zk_connect, "groupid": args.group, "consumerid": args.consumerid,
        "zk.sessiontimeout.ms": str(args.session_timeout_ms), "zk.connectiontimeout.ms": "10000",
        "autocommit.enable": "false", "fetch.size": str(args.fetch_size), "fetcher.backoff.ms": "50",
        "socket.timeout.ms": "5000",
        "rebalance.backoff.ms": "200", "rebalance.retries.max": "20"})
    connector = ZookeeperConsumerConnector(config)
    (stream,) = connector.create_message_streams({args.topic: 1})[args.topic]
    emit({"event": "ready"})
    consumed: dict[str, int] = {}
    for count, message in enumerate(stream, start=1):
        emit({"event": "message", "partition": message.partition, "offset": message.offset,
              "next_offset": message.next_offset, "payload": message.payload.decode()})
        consumed[message.partition] = message.next_offset
        if count % args.commit_every == 0:
            connector.commit_offsets()
            emit({"event": "commit", "consumed": consumed})
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000)


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
