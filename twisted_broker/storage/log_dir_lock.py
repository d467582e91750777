"""The lock of a log directory: one broker process at a time (Kafka's ``.lock`` file).

A second process on the same ``log.dir`` would recover, append to and truncate the same
segment files as the first, and register the same broker id. The lock is an ``flock`` on
``log.dir/.lock``, held for the process's life: the kernel releases it when the process dies,
however it dies, so a restart after kill -9 takes it at once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
LOCK_POLL_S = 0.1


class LogDirLocked(RuntimeError):
    """Another process holds the log directory."""


def lock_log_dir(log_dir: str, *, wait_s: float) -> int:
    """Take the directory's lock, waiting up to ``wait_s`` for a process that holds it (a
    previous run still exiting); returns the descriptor, which keeps the lock while open.
    Raises LogDirLocked."""
    os.makedirs(log_dir, exist_ok=True)
    fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    reported = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise LogDirLocked(f"log.dir {log_dir} is in use by another broker process (its {LOCK_FILE} is "
                                   f"locked)") from None
            if not reported:
                reported = True
                log.warning("log.dir %s is locked by another process; waiting up to %.1f s for it to exit",
                            log_dir, wait_s)
            time.sleep(LOCK_POLL_S)
