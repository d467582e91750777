"""Replication's small files beside the logs (docs/replication.md §3), and how they are written.

- ``<log.dir>/replication-offset-checkpoint``: every replica log's high watermark, Kafka's
  format (a version line ``0``, a count line, then ``topic partition offset`` lines).
- ``<log.dir>/<topic>-<partition>/leader-epoch-checkpoint``: the partition's leader epochs
  (replication/epochs.py encodes them). Its presence marks a replica's log, so the log is
  opened with its high watermark before anything could serve it past it; so does the log's
  line in the high watermark checkpoint.

Both are replaced whole, atomically: written to a temporary file, fsynced, renamed, and the
directory fsynced, so a crash leaves the old file or the new one, never half of either. The
exception is the epoch file of a log that holds nothing yet (``durable=False``): hundreds of
replicas taken up at once cost four fsyncs each (issue 23). A replica log fsyncs it before its
first append (replica_log.py), so a log whose mark a power loss took is empty: the log manager
takes it when replication assigns it, and opens a log the checkpoint names as a replica's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


def write_atomically(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace the file at ``path`` with ``data`` (temporary file, fsync, rename; without the
    fsyncs unless ``durable``). Raises OSError."""
    temporary = f"{path}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    if not durable:
        return
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def encode_high_watermarks(offsets: Mapping[tuple[str, int], int]) -> bytes:
    lines = ["0", str(len(offsets)), *(f"{t} {p} {o}" for (t, p), o in sorted(offsets.items()))]
    return ("\n".join(lines) + "\n").encode()


def decode_high_watermarks(data: bytes) -> dict[tuple[str, int], int]:
    """Raises ValueError for a file that is not a version-0 checkpoint."""
    lines = data.decode("utf-8").splitlines()
    if len(lines) < 2 or lines[0] != "0" or not lines[1].isdigit() or int(lines[1]) != len(lines) - 2:
        raise ValueError(f"not a version 0 {HIGH_WATERMARK_CHECKPOINT}")
    offsets = {}
    for line in lines[2:]:
        fields = line.rsplit(" ", 2)
        if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
            raise ValueError(f"bad {HIGH_WATERMARK_CHECKPOINT} line {line!r}")
        offsets[(fields[0], int(fields[1]))] = int(fields[2])
    return offsets


def read_high_watermarks(log_dir: str) -> dict[tuple[str, int], int]:
    """The checkpointed high watermarks; empty if there is no checkpoint yet. Raises ValueError."""
    try:
        with open(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT), "rb") as f:
            return decode_high_watermarks(f.read())
    except FileNotFoundError:
        return {}


def write_high_watermarks(log_dir: str, offsets: Mapping[tuple[str, int], int]) -> None:
    write_atomically(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT), encode_high_watermarks(offsets))


def is_replica_log(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, LEADER_EPOCH_CHECKPOINT))


def read_leader_epochs(directory: str) -> bytes | None:
    try:
        with open(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_leader_epochs(directory: str, data: bytes, *, durable: bool = True) -> None:
    write_atomically(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), data, durable=durable)


def sync_leader_epochs(directory: str) -> None:
    """Make an epoch file written with ``durable=False`` durable. Raises OSError."""
    for path, flags in ((os.path.join(directory, LEADER_EPOCH_CHECKPOINT), os.O_RDONLY), (directory, os.O_RDONLY)):
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
