"""``produce``: stdin to a topic, one message per line or per length-prefixed record (0.7's
console producer).

Input is read straight from the file descriptor in chunks, not line by line, and split here:

- lines: each ``\\n``-terminated line is one message, without its ``\\n`` (a ``\\r`` stays:
  it is part of the bytes; use ``--binary`` for payloads that hold newlines). A last line
  without ``\\n`` is a message too; an empty line is an empty message;
- ``--binary``: records of ``int32 length`` (big-endian) + that many bytes, the framing
  ``consume --binary`` writes. Input that ends inside a record is an error, after every
  complete record before it has been sent.

Messages go out in batches of up to ``--batch-size``, each one Produce request (one wrapper
message when compressed) through the blocking sync Producer, so a refused or failed send
stops the command with its error instead of being dropped by a background thread. A batch is
sent when full, or as soon as no more input is waiting, so typed lines go out at once while
piped input fills whole batches.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Iterator

from twisted_broker.client.producer import Producer
from twisted_broker.config import ProducerConfig
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError
from twisted_broker.tools.progress import Progress
from twisted_broker.codec.kafka07.compression import CODECS_BY_NAME
from twisted_broker.codec.kafka07.primitives import INT32

HELP = "send lines (or length-prefixed records) from stdin to a topic (console producer)"
READ_BYTES = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser)
    cluster.add_topic_argument(parser)
    parser.add_argument("--key", metavar="K",
                        help="partition key (Java String.hashCode, as 0.7's DefaultPartitioner); "
                             "with --broker-list a random broker is used, as in 0.7")
    parser.add_argument("--compression", choices=sorted(CODECS_BY_NAME), default="none",
                        help="compression codec of each batch (default none)")
    parser.add_argument("--batch-size", type=cluster.positive_int, default=200, metavar="N",
                        help="messages per request, at most (default 200)")
    parser.add_argument("--binary", action="store_true",
                        help="read records of a 4-byte big-endian length and that many bytes, not lines")


class RecordSplitter:
    """Cuts a byte stream into messages: lines, or int32-length-prefixed records."""

    def __init__(self, binary: bool) -> None:
        self.binary = binary
        self._pending = b""
        self.offset = 0  # of self._pending in the input, for errors

    def feed(self, data: bytes) -> list[bytes]:
        """The messages ``data`` completes, in order. Raises CommandError for a negative length."""
        buffer = self._pending + data if self._pending else data
        records, pos = (self._binary_records if self.binary else self._lines)(buffer)
        self._pending = buffer[pos:]
        self.offset += pos
        return records

    def end(self) -> list[bytes]:
        """The messages left at the end of input. Raises CommandError inside a binary record."""
        pending, self._pending = self._pending, b""
        if not pending:
            return []
        if self.binary:
            raise CommandError(f"input ends inside the record at byte {self.offset} "
                               f"({len(pending)} bytes of it)")
        return [pending]  # a last line without its newline

    @staticmethod
    def _lines(buffer: bytes) -> tuple[list[bytes], int]:
        end = buffer.rfind(b"\n") + 1
        return (buffer[:end - 1].split(b"\n") if end else []), end

    def _binary_records(self, buffer: bytes) -> tuple[list[bytes], int]:
        records, pos, size = [], 0, len(buffer)
        while size - pos >= 4:
            (length,) = INT32.unpack_from(buffer, pos)
            if length < 0:
                raise CommandError(f"record at byte {self.offset + pos} has a negative length ({length})")
            if size - pos - 4 < length:
                break
            records.append(buffer[pos + 4:pos + 4 + length])
            pos += 4 + length
        return records, pos


def read_batches(fd: int, splitter: RecordSplitter, batch_size: int) -> Iterator[list[bytes]]:
    """Batches of at most ``batch_size`` messages from ``fd``: full ones, or what there is
    when no more input is waiting. Raises CommandError as the splitter does."""
    batch: list[bytes] = []
    while data := os.read(fd, READ_BYTES):
        batch += splitter.feed(data)
        start = 0
        while len(batch) - start >= batch_size:
            yield batch[start:start + batch_size]
            start += batch_size
        batch = batch[start:]
        if batch and not select.select([fd], [], [], 0)[0]:
            yield batch
            batch = []
    if batch:
        yield batch  # sent before end() may fail on a cut record
    if tail := splitter.end():
        yield tail


def producer_config(args: argparse.Namespace) -> ProducerConfig:
    """The ProducerConfig for these arguments (sync: every send is written before the next)."""
    codec = CODECS_BY_NAME[args.compression]
    if args.broker_list is not None:
        return ProducerConfig(broker_list=cluster.broker_list_text(args.broker_list), compression_codec=codec)
    return ProducerConfig(zk_connect=args.zk, compression_codec=codec)


def run(args: argparse.Namespace) -> int:
    config = producer_config(args)
    splitter = RecordSplitter(args.binary)
    with Progress("produce") as progress:
        if config.broker_list is not None:
            info = None
            producer = Producer(config)
        else:
            info = _zookeeper_partition_info(config)
            producer = Producer(config, broker_partition_info=info)
        try:
            for batch in read_batches(sys.stdin.fileno(), splitter, args.batch_size):
                producer.send(args.topic, batch, key=args.key)
                progress.add(len(batch))
        finally:
            producer.close()
            if info is not None:
                info.close()
    return 0


def _zookeeper_partition_info(config: ProducerConfig):
    """The registry's brokers and partitions for ``config.zk_connect`` (watched while we run)."""
    from twisted_broker.registry.cluster_view import ZooKeeperUnavailable  # loads kazoo
    from twisted_broker.registry.zk_partition_info import ZkBrokerPartitionInfo
    try:
        return ZkBrokerPartitionInfo.from_config(config)
    except RuntimeError as exc:  # ZooKeeper did not answer: cli.main says where it looked
        raise ZooKeeperUnavailable(str(exc)) from None
