"""HeldFetch: a held request resumes once, in the same turn when woken where the broker hears
of a flush, from the reactor's next step when woken inside another log call."""

from twisted.internet.task import Clock

from twisted_broker.handlers.held_fetch import HeldFetch


class WatchedLog:
    """What HeldFetch uses of a Log: its flush watchers."""

    def __init__(self) -> None:
        self.watchers: list = []

    def watch_flush(self, callback) -> None:
        self.watchers.append(callback)

    def unwatch_flush(self, callback) -> None:
        if callback in self.watchers:
            self.watchers.remove(callback)

    def publish(self, at_once: bool) -> None:
        watchers, self.watchers = self.watchers, []
        for callback in watchers:
            callback(at_once)


def test_woken_where_the_flush_result_arrives_it_resumes_there_and_leaves_no_timer():
    clock, first, second = Clock(), WatchedLog(), WatchedLog()
    resumed = []
    HeldFetch(clock, [first, second], lambda: resumed.append(True), 0.5)
    first.publish(at_once=True)
    assert resumed == [True]
    assert clock.getDelayedCalls() == [] and first.watchers == second.watchers == []
    second.publish(at_once=True)  # woken once, whatever else publishes in the same turn
    assert resumed == [True]


def test_woken_inside_another_log_call_it_resumes_from_the_next_step():
    clock, log = Clock(), WatchedLog()
    resumed = []
    HeldFetch(clock, [log], lambda: resumed.append(True), 0.5)
    log.publish(at_once=False)
    assert resumed == []
    clock.advance(0)
    assert resumed == [True] and clock.getDelayedCalls() == []


def test_the_wait_running_out_resumes_it_once():
    clock, log = Clock(), WatchedLog()
    resumed = []
    HeldFetch(clock, [log], lambda: resumed.append(True), 0.5)
    clock.advance(0.5)
    assert resumed == [True] and log.watchers == []


def test_a_cancelled_hold_never_resumes():
    clock, log = Clock(), WatchedLog()
    resumed = []
    HeldFetch(clock, [log], lambda: resumed.append(True), 0.5).cancel()
    assert log.watchers == [] and clock.getDelayedCalls() == []
    clock.advance(1)
    assert resumed == []
