"""A consumer group member in a process of its own, for the ZooKeeper fault tests (which
freeze it with SIGSTOP to expire its session).

    python group_member.py ZK_CONNECT GROUP TOPIC CONSUMERID [--commit-every N]

One stream, explicit commits every N messages (autocommit off), and one JSON line per event
on stdout, flushed at once, each with the wall-clock time ``t``:

    {"event": "ready", "t": ...}
    {"event": "message", "t": ..., "partition": "0-1", "offset": 0, "next_offset": 15, "payload": "..."}
    {"event": "commit", "t": ..., "consumed": {"0-1": 15}}   after commit_offsets() returned
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from twisted_broker.client.zookeeper_consumer import ZookeeperConsumerConnector
from twisted_broker.config import ConsumerConfig


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps({**event, "t": time.time()}) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("zk_connect")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("consumerid")
    parser.add_argument("--commit-every", type=int, default=20)
    parser.add_argument("--session-timeout-ms", type=int, default=1000)
    args = parser.parse_args()
    config = ConsumerConfig.from_properties({
        "zk.connect": args.zk_connect, "groupid": args.group, "consumerid": args.consumerid,
        "zk.sessiontimeout.ms": str(args.session_timeout_ms), "zk.connectiontimeout.ms": "30000",
        "autocommit.enable": "false", "fetcher.backoff.ms": "50", "socket.timeout.ms": "5000",
        "autooffset.reset": "smallest", "rebalance.backoff.ms": "200", "rebalance.retries.max": "50"})
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


if __name__ == "__main__":
    main()
