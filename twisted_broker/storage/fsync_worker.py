"""The fsync process: fdatasyncs segment files for the broker, outside its interpreter.

Why a process and not a thread: a flusher thread has to take the GIL after every fsync, and
on a busy broker each hand-over between it and the reactor costs both of them a convoy of
context switches (about 20-40% of produce throughput with ``log.flush.interval=1``). This
process runs no Python the broker waits for; it talks to the broker over one SOCK_SEQPACKET
socket, with fixed records (process_flusher.py sends them):

- request ``REQUEST``: (kind, job, size). ``OPEN`` carries the segment's descriptor
  (SCM_RIGHTS) and the size to make durable; ``MORE`` raises a job's size; ``CLOSE`` ends it.
- reply ``REPLY``: (job, durable size, errno, seconds of the fdatasync), one per round.

Before each round it reads every request waiting, so a round covers all that was asked for
while the previous fdatasync ran (group commit, as the flusher thread does). It imports only
the standard library and runs with ``python -I -S``: it starts in milliseconds.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import sys
import time

REQUEST = struct.Struct("=BIQ")  # kind, job id, size
REPLY = struct.Struct("=IQid")  # job id, durable size, errno (0: ok), fdatasync seconds
OPEN, MORE, CLOSE = 1, 2, 3
FD_SPACE = socket.CMSG_SPACE(4)  # room for the one descriptor an OPEN carries


def _descriptor(ancillary: list[tuple[int, int, bytes]]) -> int:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS and len(data) >= 4:
            return int.from_bytes(data[:4], sys.byteorder, signed=True)
    raise ValueError("an OPEN request without its descriptor")


def serve(channel: socket.socket) -> None:
    """Answer requests until the broker closes its end."""
    jobs: dict[int, list[int]] = {}  # job id -> [descriptor, size asked for, size durable]
    while True:
        busy = any(wanted > durable for _fd, wanted, durable in jobs.values())
        flags = socket.MSG_DONTWAIT if busy else 0  # block only when there is nothing to do
        while True:
            try:
                # Not socket.recv_fds: before Python 3.12 it ignores its flags argument.
                data, ancillary, _flags, _address = channel.recvmsg(REQUEST.size, FD_SPACE, flags)
            except BlockingIOError:
                break
            if not data:
                return  # the broker closed its end
            kind, job, size = REQUEST.unpack(data)
            if kind == OPEN:
                jobs[job] = [_descriptor(ancillary), size, 0]
            elif job in jobs:
                if kind == MORE:
                    entry = jobs[job]
                    entry[1] = max(entry[1], size)
                else:
                    os.close(jobs.pop(job)[0])
            flags = socket.MSG_DONTWAIT
        for job, entry in list(jobs.items()):
            fd, wanted, durable = entry
            if wanted <= durable:
                continue
            started = time.perf_counter()
            try:
                os.fdatasync(fd)
            except OSError as exc:
                # After a failed fsync nothing past the durable size can be trusted: the job
                # ends, and the broker's log refuses writes.
                os.close(jobs.pop(job)[0])
                channel.send(REPLY.pack(job, durable, exc.errno or errno.EIO, 0.0))
                continue
            entry[2] = wanted
            channel.send(REPLY.pack(job, wanted, 0, time.perf_counter() - started))


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    try:
        serve(channel)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the broker is gone: nothing is waiting for the replies


if __name__ == "__main__":
    main()
