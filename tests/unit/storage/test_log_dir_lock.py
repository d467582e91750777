"""One broker process per log directory (Kafka's ``.lock``): a second waits, then is refused;
a holder killed -9 releases it at once. Real processes, real flock."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from twisted_broker.storage.log_dir_lock import LOCK_FILE, LogDirLocked, lock_log_dir

HOLD = ("import sys, time\n"
        "from twisted_broker.storage.log_dir_lock import lock_log_dir\n"
        "lock_log_dir(sys.argv[1], wait_s=0)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n")


@pytest.fixture
def holder(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "locked"
    yield process
    process.kill()
    process.wait()


def test_a_second_process_waits_then_is_refused_with_the_directory_named(tmp_path, holder):
    started = time.monotonic()
    with pytest.raises(LogDirLocked, match=f"log.dir {tmp_path} is in use by another broker process"):
        lock_log_dir(str(tmp_path), wait_s=0.5)
    assert time.monotonic() - started >= 0.5


def test_the_lock_of_a_process_killed_9_is_taken_at_once(tmp_path, holder):
    holder.kill()
    holder.wait()
    started = time.monotonic()
    fd = lock_log_dir(str(tmp_path), wait_s=5)
    assert time.monotonic() - started < 1
    assert (tmp_path / LOCK_FILE).exists()
    os.close(fd)
