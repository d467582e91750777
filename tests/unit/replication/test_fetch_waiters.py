"""Held follower fetches wait per partition (issue 23): an append wakes the fetches waiting on
its partition only, each once per reactor step, after the step."""

from twisted.internet.task import Clock

from twisted_broker.replication.fetch_waiters import FetchWaiters


def test_an_append_wakes_only_the_fetches_waiting_on_its_partition_once_after_the_step():
    clock = Clock()
    waiters = FetchWaiters(clock)
    woken = []
    a, b = (lambda: woken.append("a")), (lambda: woken.append("b"))
    waiters.hold([("t", 0), ("t", 1)], a)
    waiters.hold([("t", 2)], b)
    waiters.appended(("t", 0))
    waiters.appended(("t", 1))
    waiters.appended(("u", 0))  # nobody waits there
    assert woken == []  # not inside the append
    clock.advance(0)
    assert woken == ["a"]  # once, though both its partitions were appended to
    assert waiters.waiting(("t", 2)) == 1 and waiters.waiting(("t", 0)) == 0


def test_a_dropped_fetch_is_not_woken_and_leaves_nothing_behind():
    clock = Clock()
    waiters = FetchWaiters(clock)
    woken = []
    wake = lambda: woken.append(1)  # noqa: E731
    waiters.hold([("t", 0), ("t", 1)], wake)
    waiters.drop([("t", 0), ("t", 1)], wake)
    waiters.appended(("t", 0))
    clock.advance(0)
    assert woken == [] and waiters.waiting(("t", 0)) == waiters.waiting(("t", 1)) == 0


def test_changes_count_appends_and_other_news():
    waiters = FetchWaiters(Clock())
    waiters.appended(("t", 0))
    waiters.changed()
    assert waiters.changes == 2
