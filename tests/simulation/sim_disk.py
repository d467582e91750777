"""Disks that forget what was not fsynced, tear the last write, and fail with EIO or ENOSPC.

The logs are real files (one temporary directory per broker). The storage code is wrapped
from outside, while a ``DiskModel`` is installed, at the three places where bytes become
durable or are written:

- ``storage.flusher.timed_fdatasync`` (what every FlushJob calls): the file is durable up
  to its size at that moment; a failing disk raises OSError(EIO) there instead, which the log
  records as its write_error (storage/log.py's model of a failed fsync);
- ``Segment.__init__`` (a file opened is durable as it is: after a crash the model has cut
  it; a new one is empty) and ``Segment.truncate`` (which fsyncs);
- ``Segment.append``: a failing disk refuses the write with LogWriteError(EIO or ENOSPC), the
  set not kept, as segment.py does when os.write fails and the cut-back works.

``crash(directory)`` cuts every segment file under a broker's directory to its durable size
plus, when the write is torn, a random part of the unflushed bytes; the next open recovers it
with the real recovery. Checkpoint files are written atomically with an fsync
(storage/checkpoints.py), so they survive a crash as they are; the one written without an
fsync (a new replica's empty epoch file) survives too, as after a process crash: its loss in
a power loss is covered by tests/unit/storage/test_replica_logs.py.
"""

from __future__ import annotations

import errno
import os

from twisted_broker.codec.kafka07.message_set import valid_bytes
from twisted_broker.errors import LogWriteError
from twisted_broker.storage import flusher as flusher_module
from twisted_broker.storage.replica_log import ReplicaLog
from twisted_broker.storage.segment import SEGMENT_SUFFIX, Segment

__all__ = ["DiskModel", "EIO", "ENOSPC"]

EIO, ENOSPC = errno.EIO, errno.ENOSPC


class DiskModel:
    def __init__(self, rng, trace) -> None:
        self.rng, self.trace = rng, trace
        self.durable: dict[str, int] = {}  # segment file path -> bytes fsynced
        self.write_errors: dict[str, int] = {}  # broker directory -> errno of every write
        self.fsync_errors: dict[str, int] = {}  # broker directory -> errno of every fsync
        # Called as on_truncate(log directory, offset) when a replica's log is cut.
        self.on_truncate = lambda directory, offset: None
        self._saved: list = []

    # -- installing the wrappers ---------------------------------------------------------

    def install(self) -> None:
        model = self
        original_sync, original_init = flusher_module.timed_fdatasync, Segment.__init__
        original_truncate, original_append = Segment.truncate, Segment.append
        original_cut = ReplicaLog.truncate_to

        def timed_fdatasync(fd: int) -> float:
            path = os.readlink(f"/proc/self/fd/{fd}")
            failure = model._fault(model.fsync_errors, path)
            if failure:
                raise OSError(failure, os.strerror(failure))
            original_sync(fd)
            model.durable[path] = os.fstat(fd).st_size
            return 0.0

        def init(self, directory, start, **kwargs):
            original_init(self, directory, start, **kwargs)
            model.durable[self.path] = self.size

        def truncate(self, size):
            original_truncate(self, size)
            model.durable[self.path] = size

        def append(self, data, now):
            failure = model._fault(model.write_errors, self.path)
            if failure:
                raise LogWriteError(failure, f"{self.path}: {os.strerror(failure)} (simulated)")
            original_append(self, data, now)

        def truncate_to(self, offset):
            cut = original_cut(self, offset)
            model.on_truncate(self.directory, offset)
            return cut

        self._saved = [(flusher_module, "timed_fdatasync", original_sync), (Segment, "__init__", original_init),
                       (Segment, "truncate", original_truncate), (Segment, "append", original_append),
                       (ReplicaLog, "truncate_to", original_cut)]
        flusher_module.timed_fdatasync = timed_fdatasync
        Segment.__init__, Segment.truncate, Segment.append = init, truncate, append
        ReplicaLog.truncate_to = truncate_to

    def uninstall(self) -> None:
        for owner, name, value in self._saved:
            setattr(owner, name, value)
        self._saved = []

    def __enter__(self) -> "DiskModel":
        self.install()
        return self

    def __exit__(self, *exc_info) -> None:
        self.uninstall()

    @staticmethod
    def _fault(table: dict[str, int], path: str) -> int:
        for directory, failure in table.items():
            if path.startswith(directory + os.sep):
                return failure
        return 0

    # -- faults --------------------------------------------------------------------------

    def fail(self, directory: str, failure: int, *, fsync: bool) -> None:
        (self.fsync_errors if fsync else self.write_errors)[directory] = failure

    def repair(self, directory: str) -> None:
        self.write_errors.pop(directory, None)
        self.fsync_errors.pop(directory, None)

    def crash(self, directory: str, *, torn: bool) -> dict[str, int]:
        """Cut the files under ``directory`` to what a power loss leaves; returns each log
        directory's surviving end offset in whole messages (what recovery will keep; the
        invariants' bookkeeping)."""
        survived: dict[str, int] = {}
        for root, _dirs, files in sorted(os.walk(directory)):
            for name in sorted(files):
                if not name.endswith(SEGMENT_SUFFIX):
                    continue
                path = os.path.join(root, name)
                size = os.path.getsize(path)
                keep = min(self.durable.get(path, size), size)
                if torn and keep < size:
                    keep += self.rng.randint(0, size - keep)
                if keep < size:
                    os.truncate(path, keep)
                    self.trace(f"disk: {path[len(directory):]} lost {size - keep} unflushed bytes")
                start = int(name[:-len(SEGMENT_SUFFIX)])
                with open(path, "rb") as f:
                    whole = valid_bytes(f.read())
                survived[root] = max(survived.get(root, 0), start + whole)
        return survived
