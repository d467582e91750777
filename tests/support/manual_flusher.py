"""A log flusher whose jobs run only when a test runs them: the flush thread or the fsync
process (storage/flusher.py, storage/process_flusher.py), by hand, for the unit tests of
storage and of the handlers that wait for flushes."""

from __future__ import annotations

from twisted_broker.storage.flusher import FlushJob


class ManualFlusher:
    def __init__(self) -> None:
        self.jobs: list[FlushJob] = []
        self.inline = False  # True: jobs run as submitted (a log's close waits for its flush)

    def submit(self, fd, written, owner=None) -> FlushJob:
        job = FlushJob(fd, written, owner)
        self.jobs.append(job)
        if self.inline:
            job.run()
        return job

    def run_all(self) -> None:
        """Run the jobs and publish them, as the broker does when the fsync process replies."""
        for job in self.jobs:
            if not job.finished.is_set():
                job.run()
                job.log.publish_flushed()

    def close(self) -> None:
        pass
