"""The watchers a flush wakes are told whether they may answer there and then (at_once)."""

from twisted_broker.storage.flusher import FlushJob

ENTRY_BYTES = 12  # one message of b"ab"


class ManualFlusher:
    """A flusher whose jobs run only when the test runs them: the fsync process, by hand."""

    def __init__(self) -> None:
        self.jobs = []

    def submit(self, fd, written, owner=None):
        job = FlushJob(fd, written, owner)
        self.jobs.append(job)
        return job

    def close(self) -> None:
        pass


def test_a_watcher_woken_where_the_broker_hears_of_the_flush_may_answer_at_once(make_log, batch):
    flusher = ManualFlusher()
    log = make_log(flush_interval_messages=1, flusher=flusher)
    woken = []
    log.watch_flush(woken.append)
    log.append(batch([b"ab"]))
    flusher.jobs[0].run()
    log.publish_flushed()  # the fsync process's reply, outside any other log call
    assert woken == [True]


def test_a_watcher_woken_inside_another_log_call_must_only_schedule(make_log, batch):
    flusher = ManualFlusher()
    log = make_log(flush_interval_messages=1, flusher=flusher)
    woken = []
    log.watch_flush(woken.append)
    log.append(batch([b"ab"]))
    flusher.jobs[0].run()
    assert log.read(0, 4096) is not None  # the read reaps the finished job, and wakes it
    assert woken == [False]
    log.publish_flushed()  # already published: nobody is woken twice
    assert woken == [False]


def test_an_inline_flush_wakes_watchers_inside_the_append(make_log, batch):
    log = make_log(flush_interval_messages=1)  # InlineFlusher
    woken = []
    log.watch_flush(woken.append)
    log.append(batch([b"ab"]))
    assert woken == [False]
