"""Progress: drawn only on a terminal, only after the delay, redrawn in place, erased at the end."""

import io

from twisted_broker.tools.progress import Progress, format_rate


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_nothing_is_drawn_on_a_pipe_or_file():
    stream, clock = io.StringIO(), Clock()
    progress = Progress("produce", stream, clock=clock)
    clock.now += 10
    progress.add(1000)
    progress.finish()
    assert not progress.enabled and stream.getvalue() == ""
    assert progress.count == 1000


def test_a_short_run_draws_nothing_on_a_terminal():
    stream, clock = Terminal(), Clock()
    with Progress("produce", stream, clock=clock, delay_s=1.0) as progress:
        clock.now += 0.5
        progress.add(10)
    assert progress.enabled and stream.getvalue() == ""


def test_a_long_run_redraws_at_most_every_interval_and_erases_the_line():
    stream, clock = Terminal(), Clock()
    with Progress("consume", stream, clock=clock, delay_s=1.0, interval_s=0.5) as progress:
        clock.now += 1.0
        progress.add(2000)
        clock.now += 0.1
        progress.add(100)  # too soon to redraw
        clock.now += 0.9
        progress.tick()
    assert stream.getvalue() == ("\r\x1b[Kconsume: 2,000 messages, 2,000 msgs/s"
                                 "\r\x1b[Kconsume: 2,100 messages, 1,050 msgs/s"
                                 "\r\x1b[K")


def test_the_rate_is_the_average_since_the_start():
    assert format_rate(1234567, 2.0) == "1,234,567 messages, 617,284 msgs/s"
    assert format_rate(5, 0.0) == "5 messages, 0 msgs/s"
