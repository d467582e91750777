"""Load-generating processes for bench/broker_bench.py, one per process, run by path.

``python bench/loadgen.py MODE --port PORT ...``

==============  ==========================================================================
produce         Produce requests, encoded before the clock starts, written back to back on
                one connection (produce has no response); then half-closes and waits for
                the broker to close, which it does once it has handled every request
fetch           Fetch requests over the offsets [START, END) of each stdin line, one at a
                time, each response read whole with recv_into into one reusable buffer; no
                message parsing
raw-fetch       the same against ``serve-sendfile``
serve-sendfile  the baseline server: a request is ``offset int64, max size int32``; the
                answer ``size int32`` and then up to max size bytes of the files, sent with
                os.sendfile (a response never spans two files, as a broker's never spans
                two segments)
serve-sink      the produce baseline: reads each connection to its end, discarding the bytes
fsync-floor     the latency baseline of "visible once fsynced": appends of ``--message-bytes``
                + 10 bytes to a file in ``--dir`` at ``--rate`` a second, while one thread
                fdatasyncs whatever has been written, back to back (group commit); prints the
                p50/p99 of append -> covered by a finished fdatasync. No sockets, no broker:
                what this disk alone costs a message
==============  ==========================================================================

Handshake with the parent, so that start-up and set-up are never timed: a client prints
``ready`` once connected and set up, waits for a line on stdin, runs, and prints one JSON line
with its own timings (``produce`` prints ``sent SECONDS`` first, when its last write returned;
``fetch`` answers every line until stdin ends).
The servers print their port and serve until killed. Only the stdlib and the project's
wire codecs are used.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time

CHUNK_BYTES = 1 << 20  # produce: requests are written in runs of about this many bytes
_SIZE = struct.Struct(">i")
_RAW_REQUEST = struct.Struct(">qi")  # offset, max size


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _wait_for_go() -> None:
    _say("ready")
    if not sys.stdin.readline():
        sys.exit("parent went away before the start signal")


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_exactly(sock: socket.socket, view: memoryview, count: int) -> None:
    got = 0
    while got < count:
        n = sock.recv_into(view[got:count], count - got)
        if not n:
            raise ConnectionError(f"connection closed after {got} of {count} bytes")
        got += n


# -- produce ---------------------------------------------------------------------------------

def produce(args: argparse.Namespace) -> None:
    from twisted_broker.codec.kafka07.message_set import encode_message_set
    from twisted_broker.codec.kafka07.requests import ProduceRequest, encode_request

    if args.messages % args.batch:
        sys.exit(f"--messages {args.messages} is not a multiple of --batch {args.batch}")
    # Distinct payloads per request would only cost set-up time: the broker never looks
    # inside a payload beyond its CRC.
    message_set = encode_message_set([os.urandom(args.message_bytes) for _ in range(args.batch)])
    request = encode_request(ProduceRequest(args.topic, args.partition, message_set))
    requests = args.messages // args.batch
    per_run = max(1, CHUNK_BYTES // len(request))
    full_runs, rest = divmod(requests, per_run)
    run = memoryview(request * per_run)
    tail = request * rest
    sock = _connect(args.port)
    _wait_for_go()
    started = time.perf_counter()
    for _ in range(full_runs):
        sock.sendall(run)
    if tail:
        sock.sendall(tail)
    sent = time.perf_counter() - started
    _say(f"sent {sent:.6f}")
    # The broker handles the frames of a read before it reads again, so its close after our
    # FIN means that every request has been appended (not yet flushed: the parent polls for that).
    sock.shutdown(socket.SHUT_WR)
    unexpected = 0
    while data := sock.recv(65536):
        unexpected += len(data)
    drained = time.perf_counter() - started
    sock.close()
    _say(json.dumps({"requests": requests, "bytes": requests * len(request),
                     "message_set_bytes": requests * len(message_set), "sent_s": sent,
                     "drained_s": drained, "unexpected_response_bytes": unexpected}))


# -- fetch -----------------------------------------------------------------------------------

def fetch(args: argparse.Namespace) -> None:
    """Answer each stdin line ``START END`` by fetching offsets [START, END) and printing the
    time it took; exit at the end of stdin. The connection stays open throughout."""
    from twisted_broker.codec.kafka07.requests import FetchRequest, encode_request

    raw = args.mode == "raw-fetch"
    header_bytes = 0 if raw else 2  # the error code before the message set
    entry_bytes = args.entry_bytes
    buf = bytearray(args.max_size + header_bytes)
    view = memoryview(buf)
    size_buf = bytearray(4)
    size_view = memoryview(size_buf)
    sock = _connect(args.port)
    _say("ready")
    while line := sys.stdin.readline():
        offset, end = map(int, line.split())
        started = time.perf_counter()
        responses = 0
        while offset < end:
            # The log may go on past the end (an entry boundary): the last fetch asks for the rest only.
            max_size = min(args.max_size, end - offset)
            if raw:
                sock.sendall(_SIZE.pack(_RAW_REQUEST.size) + _RAW_REQUEST.pack(offset, max_size))
            else:
                sock.sendall(encode_request(FetchRequest(args.topic, args.partition, offset, max_size)))
            _read_exactly(sock, size_view, 4)
            (size,) = _SIZE.unpack(size_buf)
            if not header_bytes <= size <= len(buf):
                raise ValueError(f"response size {size} at offset {offset} is outside [{header_bytes}, {len(buf)}]")
            _read_exactly(sock, view, size)
            if not raw and (error := int.from_bytes(buf[:2], "big", signed=True)):
                raise ValueError(f"fetch at offset {offset} answered error {error}")
            length = size - header_bytes
            if not length:
                raise ValueError(f"empty response at offset {offset}, before the end {end}")
            # Every message has the same size, so a response cut at message boundaries is a
            # whole number of entries starting with the right length field: two cheap checks
            # instead of walking the entries. The next offset is then simply offset + length.
            if entry_bytes and (length % entry_bytes or _SIZE.unpack_from(buf, header_bytes)[0] != entry_bytes - 4):
                raise ValueError(f"response at offset {offset} ({length} bytes) is not cut at a boundary "
                                 f"of {entry_bytes}-byte entries")
            offset += length
            responses += 1
        elapsed = time.perf_counter() - started
        if offset != end:
            raise ValueError(f"fetched up to offset {offset}, expected {end}")
        _say(json.dumps({"end": offset, "responses": responses, "elapsed_s": elapsed}))
    sock.close()


# -- the raw sendfile server -----------------------------------------------------------------

def serve_sendfile(args: argparse.Namespace) -> None:
    """Serve each connection on a thread of its own (a client's connection stays open)."""
    files = []  # (start offset, end offset, descriptor), in log order
    start = 0
    for path in args.files:
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        files.append((start, start + size, fd))
        start += size
    listener = socket.create_server(("127.0.0.1", 0))
    _say(str(listener.getsockname()[1]))
    while True:
        conn, _ = listener.accept()
        # The broker's settings for client sockets (socket.send.buffer, TCP_NODELAY).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, args.send_buffer)
        threading.Thread(target=_serve_files, args=(conn, files), daemon=True).start()


def _serve_files(conn: socket.socket, files: list[tuple[int, int, int]]) -> None:
    request_buf = bytearray(4 + _RAW_REQUEST.size)
    request_view = memoryview(request_buf)
    with conn:
        out = conn.fileno()
        while True:
            try:
                _read_exactly(conn, request_view, len(request_buf))
            except ConnectionError:
                return
            offset, max_size = _RAW_REQUEST.unpack_from(request_buf, 4)
            first, end, fd = next((f for f in files if f[0] <= offset < f[1]), (offset, offset, -1))
            length = min(max_size, end - offset)  # 0 at or past the end
            conn.sendall(_SIZE.pack(length))
            position, remaining = offset - first, length
            while remaining:
                sent = os.sendfile(out, fd, position, remaining)
                if not sent:
                    raise OSError(f"file ended before offset {offset + length}")
                position += sent
                remaining -= sent


def serve_sink(args: argparse.Namespace) -> None:
    """Read each connection to its end and throw the bytes away: the produce baseline."""
    listener = socket.create_server(("127.0.0.1", 0))
    _say(str(listener.getsockname()[1]))
    buf = bytearray(CHUNK_BYTES)
    while True:
        conn, _ = listener.accept()
        # The broker's settings for client sockets (socket.receive.buffer, TCP_NODELAY).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.receive_buffer)
        with conn:
            while conn.recv_into(buf):
                pass


def fsync_floor(args: argparse.Namespace) -> None:
    path = os.path.join(args.dir, "fsync-floor.tmp")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    lock = threading.Condition()
    written, durable = [0], []  # bytes written; (monotonic ns, durable bytes) per fdatasync
    stop = threading.Event()

    def syncer() -> None:
        while not stop.is_set():
            with lock:
                while written[0] == (durable[-1][1] if durable else 0) and not stop.is_set():
                    lock.wait(0.01)
                size = written[0]
            os.fdatasync(fd)
            durable.append((time.monotonic_ns(), size))

    thread = threading.Thread(target=syncer, daemon=True)
    thread.start()
    entry = b"x" * (args.message_bytes + 10)
    appended = []  # (monotonic ns, end) per append
    start = time.monotonic()
    for i in range(int(args.seconds * args.rate)):
        delay = start + i / args.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        os.write(fd, entry)
        with lock:
            written[0] += len(entry)
            appended.append((time.monotonic_ns(), written[0]))
            lock.notify()
    while not durable or durable[-1][1] < written[0]:
        time.sleep(0.001)
    stop.set()
    thread.join()
    os.close(fd)
    os.unlink(path)
    latencies, j = [], 0
    for at, end in appended[len(appended) // 10:]:  # the same warm-up share as the latency test
        while durable[j][1] < end or durable[j][0] < at:
            j += 1
        latencies.append(durable[j][0] - at)
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6  # noqa: E731
    print(json.dumps({"p50_ms": pick(0.5), "p99_ms": pick(0.99), "fsyncs": len(durable)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["produce", "fetch", "raw-fetch", "serve-sendfile", "serve-sink", "fsync-floor"])
    parser.add_argument("--port", type=int)
    parser.add_argument("--topic", default="bench")
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--messages", type=int, help="produce: messages to send")
    parser.add_argument("--batch", type=int, default=50, help="produce: messages per request")
    parser.add_argument("--message-bytes", type=int, default=200, help="produce: payload bytes")
    parser.add_argument("--max-size", type=int, default=1 << 20, help="fetch: bytes per fetch")
    parser.add_argument("--entry-bytes", type=int, default=0,
                        help="fetch: the size of every entry, to check boundaries (0: no check)")
    parser.add_argument("--send-buffer", type=int, default=1 << 20, help="serve-sendfile: SO_SNDBUF")
    parser.add_argument("--receive-buffer", type=int, default=1 << 20, help="serve-sink: SO_RCVBUF")
    parser.add_argument("--file", dest="files", action="append", default=[],
                        help="serve-sendfile: a file to serve (repeat, in log order)")
    parser.add_argument("--dir", help="fsync-floor: where its file goes (the broker's disk)")
    parser.add_argument("--rate", type=float, default=5000, help="fsync-floor: appends a second")
    parser.add_argument("--seconds", type=float, default=5, help="fsync-floor: how long")
    args = parser.parse_args()
    modes = {"produce": produce, "fetch": fetch, "raw-fetch": fetch, "serve-sendfile": serve_sendfile,
             "serve-sink": serve_sink, "fsync-floor": fsync_floor}
    modes[args.mode](args)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
