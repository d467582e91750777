"""The floor of issue 24's small-request rows: a bare Twisted server that does the least a
broker must do for each request, run as a process of its own so that its CPU is read from
/proc exactly as the broker's (bench/small_requests.py starts it).

``python -m bench.small_floor --port-file F --data-file D`` installs the epoll reactor, listens
on two loopback ports (written to F as ``<0.7 port> <modern port>``) and, for each request
framed by Twisted's own ``Int32StringReceiver`` (``int32 size`` + body, both protocols):

- 0.7 Produce (0) and MultiProduce (3): append each message set to D; no answer (0.7 has none).
- 0.7 ProduceAck (102, replication's acks on the 0.7 port): append, answer one
  ``(topic, partition, error 0, offset)`` per part.
- 0.7 Offsets (4): answer D's size as the one offset.
- 0.7 Fetch (1): answer the bytes of D from the offset (at most max size); at D's end, hold the
  fetch and answer it when the next append arrives (what a long-polling consumer needs).
- modern Produce (api key 0, v3-v7): append each partition's records to D; answer the
  smallest correct Produce response of the request's version (acks=0: no answer).

Nothing else: no CRC checks, no index, no fsync, no statistics, no logging. Fields are read
with ``struct`` where they lie (the layouts: twisted_broker/codec/kafka07/requests.py,
twisted_broker/codec/kafka07/replication.py, twisted_broker/codec/kafka/log_schemas.py).
"""

from __future__ import annotations

import argparse
import os
import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_HEAD = struct.Struct(">ii")  # 0.7 produce: partition, message set size
_FETCH_TAIL = struct.Struct(">iqi")  # 0.7 fetch / offsets: partition, offset or time, max size or count
_ACK_PART = struct.Struct(">ihq")  # ProduceAck answer: partition, error, offset
_HEAD_07 = struct.Struct(">ih")  # response size, error
_MODERN_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_MODERN_PART = struct.Struct(">ihqq")  # partition, error, base offset, log append time
FLOOR_PRODUCE_ACK = 102  # replication's ProduceAck request type on the 0.7 port


def _string16(frame: bytes, pos: int) -> tuple[bytes, int]:
    (length,) = _I16.unpack_from(frame, pos)
    pos += 2
    return frame[pos:pos + length], pos + length


class FloorLog:
    """One append-only file; ``waiters`` are held fetches, answered at the next append."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.read_fd = os.open(path, os.O_RDONLY)
        self.size = 0
        self.waiters: list = []

    def append(self, data: bytes) -> int:
        """Append ``data``; returns the offset it starts at."""
        offset = self.size
        os.write(self.fd, data)
        self.size += len(data)
        if self.waiters:
            waiters, self.waiters = self.waiters, []
            for answer in waiters:
                answer()
        return offset


def _produce_parts(frame: bytes, pos: int, log: FloorLog) -> tuple[list, int]:
    """The parts of a 0.7 MultiProduce body at ``pos``, appended; ``[(topic, partition, offset)]``."""
    (count,) = _I16.unpack_from(frame, pos)
    pos += 2
    parts = []
    for _ in range(count):
        topic, pos = _string16(frame, pos)
        partition, size = _PART_HEAD.unpack_from(frame, pos)
        pos += 8
        parts.append((topic, partition, log.append(frame[pos:pos + size])))
        pos += size
    return parts, pos


def _import_protocols(log: FloorLog):
    # Twisted is imported only after the epoll reactor is installed (main()).
    from twisted.protocols.basic import Int32StringReceiver

    class Floor07(Int32StringReceiver):
        MAX_LENGTH = 100 << 20

        def stringReceived(self, frame: bytes) -> None:
            (kind,) = _I16.unpack_from(frame, 0)
            if kind == 0:  # Produce
                topic, pos = _string16(frame, 2)
                _partition, size = _PART_HEAD.unpack_from(frame, pos)
                log.append(frame[pos + 8:pos + 8 + size])
            elif kind == 4:  # Offsets
                self.transport.write(_HEAD_07.pack(14, 0) + _I32.pack(1) + struct.pack(">q", log.size))
            elif kind == 1:  # Fetch
                _topic, pos = _string16(frame, 2)
                _partition, offset, max_size = _FETCH_TAIL.unpack_from(frame, pos)
                if offset < log.size:
                    self._answer_fetch(offset, max_size)
                else:
                    log.waiters.append(lambda: self._answer_fetch(offset, max_size))
            elif kind == 3:  # MultiProduce
                _produce_parts(frame, 2, log)
            elif kind == FLOOR_PRODUCE_ACK:
                parts, _ = _produce_parts(frame, 2 + 6, log)
                body = _I32.pack(len(parts)) + b"".join(
                    _I16.pack(len(topic)) + topic + _ACK_PART.pack(partition, 0, offset)
                    for topic, partition, offset in parts)
                self.transport.write(_HEAD_07.pack(2 + len(body), 0) + body)
            else:
                self.transport.loseConnection()

        def _answer_fetch(self, offset: int, max_size: int) -> None:
            data = os.pread(log.read_fd, min(max_size, log.size - offset), offset)
            self.transport.write(_HEAD_07.pack(2 + len(data), 0) + data)

    class FloorModern(Int32StringReceiver):
        MAX_LENGTH = 100 << 20

        def stringReceived(self, frame: bytes) -> None:
            api_key, version, correlation_id = _MODERN_HEAD.unpack_from(frame, 0)
            if api_key != 0 or not 3 <= version <= 7:
                self.transport.loseConnection()
                return
            (client_id_length,) = _I16.unpack_from(frame, 8)
            pos = 10 + max(client_id_length, 0)
            (transactional_id_length,) = _I16.unpack_from(frame, pos)
            pos += 2 + max(transactional_id_length, 0)
            (acks,) = _I16.unpack_from(frame, pos)
            pos += 2 + 4  # acks, timeout
            (topics,) = _I32.unpack_from(frame, pos)
            pos += 4
            out = [_I32.pack(topics)]
            for _ in range(topics):
                start = pos
                (length,) = _I16.unpack_from(frame, pos)
                pos += 2 + length
                (partitions,) = _I32.unpack_from(frame, pos)
                pos += 4
                out += [frame[start:pos - 4], _I32.pack(partitions)]
                for _ in range(partitions):
                    partition, size = _PART_HEAD.unpack_from(frame, pos)
                    pos += 8
                    offset = log.append(frame[pos:pos + size])
                    pos += size
                    out.append(_MODERN_PART.pack(partition, 0, offset, -1))
                    if version >= 5:
                        out.append(bytes(8))  # log_start_offset 0
            if acks == 0:
                return
            body = b"".join(out) + b"\0\0\0\0"  # throttle_time_ms
            self.transport.write(_I32.pack(4 + len(body)) + _I32.pack(correlation_id) + body)

    return Floor07, FloorModern


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.small_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--data-file", required=True)
    args = parser.parse_args()
    from twisted.internet import epollreactor
    epollreactor.install()
    from twisted.internet import reactor
    from twisted.internet.protocol import Factory

    log = FloorLog(args.data_file)
    floor07, floor_modern = _import_protocols(log)
    port07 = reactor.listenTCP(0, Factory.forProtocol(floor07), interface="127.0.0.1")
    port_modern = reactor.listenTCP(0, Factory.forProtocol(floor_modern), interface="127.0.0.1")
    temporary = args.port_file + ".tmp"
    with open(temporary, "w") as out:
        out.write(f"{port07.getHost().port} {port_modern.getHost().port}\n")
    os.rename(temporary, args.port_file)  # whole or absent: the driver polls for it
    reactor.run()


if __name__ == "__main__":
    main()
