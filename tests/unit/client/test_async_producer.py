"""AsyncProducer: queue.enqueueTimeout.ms (drop, wait, block), batching per broker, retries,
callbacks, and close() sending everything.

Most tests leave the send thread unstarted (``start=False``): close() then sends from the test's
own thread, so batching is deterministic. The blocking and queue.time tests need the real send
thread; they wait on events with generous deadlines, never on fixed sleeps for correctness.
"""

import threading
import time

import pytest

from twisted_broker.client.async_producer import AsyncProducer, QueueItem
from twisted_broker.client.errors import ProducerClosed, QueueFull
from twisted_broker.errors import MessageSizeTooLarge


class FakeBrokers:
    """send_to_broker that records each MultiProduce as (broker id, [(topic, partition, payloads)])."""

    def __init__(self, failures: int = 0, error: Exception | None = None) -> None:
        self.calls: list[tuple[int, list]] = []
        self.attempts = 0
        self._failures = failures
        self._error = error or ConnectionError("broker down")

    def __call__(self, broker_id, produces):
        self.attempts += 1
        if self._failures:
            self._failures -= 1
            raise self._error
        self.calls.append((broker_id, produces))

    def payloads(self) -> list[bytes]:
        return [p for _b, produces in self.calls for _t, _p, payloads in produces for p in payloads]


def item(payload: bytes, broker_id: int = 0, topic: str = "t", partition: int = 0) -> QueueItem:
    return QueueItem(topic, broker_id, partition, payload)


def test_a_full_queue_drops_at_once_with_timeout_0():
    producer = AsyncProducer(FakeBrokers(), queue_size=2, enqueue_timeout_ms=0, start=False)
    producer.enqueue([item(b"1"), item(b"2")])
    started = time.monotonic()
    with pytest.raises(QueueFull):
        producer.enqueue([item(b"3")])
    assert time.monotonic() - started < 0.5
    assert producer.queued == 2


def test_messages_before_the_one_that_does_not_fit_stay_queued():
    brokers = FakeBrokers()
    producer = AsyncProducer(brokers, queue_size=2, enqueue_timeout_ms=0, start=False)
    with pytest.raises(QueueFull):
        producer.enqueue([item(b"1"), item(b"2"), item(b"3")])
    producer.close()
    assert brokers.payloads() == [b"1", b"2"]


def test_a_full_queue_waits_the_timeout_then_raises():
    producer = AsyncProducer(FakeBrokers(), queue_size=1, enqueue_timeout_ms=60, start=False)
    producer.enqueue([item(b"1")])
    started = time.monotonic()
    with pytest.raises(QueueFull):
        producer.enqueue([item(b"2")])
    assert time.monotonic() - started >= 0.05


def test_a_full_queue_blocks_until_the_send_thread_makes_room():
    sending, release = threading.Event(), threading.Event()
    sent = []

    def slow_broker(broker_id, produces):
        sending.set()
        assert release.wait(10)
        sent.extend(p for _t, _p, payloads in produces for p in payloads)

    producer = AsyncProducer(slow_broker, queue_size=1, enqueue_timeout_ms=-1, batch_size=1)
    producer.enqueue([item(b"1")])
    assert sending.wait(10)            # the thread holds "1" in a send that waits for release
    producer.enqueue([item(b"2")])     # fills the queue
    blocked = threading.Thread(target=producer.enqueue, args=([item(b"3")],))
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()          # still waiting for room
    release.set()
    blocked.join(10)
    assert not blocked.is_alive()
    producer.close(timeout_s=10)
    assert sent == [b"1", b"2", b"3"]


def test_close_wakes_a_blocked_enqueue_with_producer_closed():
    producer = AsyncProducer(FakeBrokers(), queue_size=1, enqueue_timeout_ms=-1, start=False)
    producer.enqueue([item(b"1")])
    errors = []

    def enqueue():
        try:
            producer.enqueue([item(b"2")])
        except ProducerClosed as exc:
            errors.append(exc)

    blocked = threading.Thread(target=enqueue)
    blocked.start()
    blocked.join(0.1)
    producer.close()
    blocked.join(10)
    assert len(errors) == 1


def test_enqueue_after_close_raises():
    producer = AsyncProducer(FakeBrokers(), start=False)
    producer.close()
    with pytest.raises(ProducerClosed):
        producer.enqueue([item(b"late")])


def test_close_sends_everything_in_batches_grouped_per_broker_and_partition():
    brokers = FakeBrokers()
    producer = AsyncProducer(brokers, batch_size=3, start=False)
    producer.enqueue([item(b"a", 0, "t"), item(b"b", 1, "t"), item(b"c", 0, "u"),
                      item(b"d", 0, "t"), item(b"e", 1, "t", partition=2)])
    producer.close()
    assert brokers.calls == [
        (0, [("t", 0, [b"a"]), ("u", 0, [b"c"])]),   # batch 1: one MultiProduce per broker
        (1, [("t", 0, [b"b"])]),
        (0, [("t", 0, [b"d"])]),                     # batch 2: what was left at close
        (1, [("t", 2, [b"e"])]),
    ]


def test_messages_of_one_partition_keep_their_order_in_one_set():
    brokers = FakeBrokers()
    producer = AsyncProducer(brokers, batch_size=10, start=False)
    producer.enqueue([item(bytes([i])) for i in range(5)])
    producer.close()
    assert brokers.calls == [(0, [("t", 0, [bytes([i]) for i in range(5)])])]


def test_a_failed_send_is_retried_num_retries_times():
    brokers = FakeBrokers(failures=2)
    outcomes = []
    producer = AsyncProducer(brokers, num_retries=2, start=False,
                             after_send=lambda items, error: outcomes.append((len(items), error)))
    producer.enqueue([item(b"m")])
    producer.close()
    assert brokers.attempts == 3 and brokers.payloads() == [b"m"]
    assert outcomes == [(1, None)]


def test_after_the_last_retry_the_batch_is_dropped_and_reported():
    brokers = FakeBrokers(failures=5)
    outcomes = []
    producer = AsyncProducer(brokers, num_retries=1, start=False,
                             after_send=lambda items, error: outcomes.append(error))
    producer.enqueue([item(b"m")])
    producer.close()  # does not raise: the send thread must survive a dead broker
    assert brokers.attempts == 2 and brokers.calls == []
    assert isinstance(outcomes[0], ConnectionError)


def test_an_oversize_message_set_is_not_retried():
    brokers = FakeBrokers(failures=5, error=MessageSizeTooLarge(0, 10, 5))
    producer = AsyncProducer(brokers, num_retries=3, start=False)
    producer.enqueue([item(b"m")])
    producer.close()
    assert brokers.attempts == 1


def test_before_send_may_replace_the_batch():
    brokers = FakeBrokers()
    producer = AsyncProducer(brokers, start=False,
                             before_send=lambda items: [i for i in items if i.payload != b"skip"])
    producer.enqueue([item(b"keep"), item(b"skip")])
    producer.close()
    assert brokers.payloads() == [b"keep"]


def test_a_failing_callback_does_not_lose_the_batch():
    brokers = FakeBrokers()

    def broken(*args):
        raise RuntimeError("callback bug")

    producer = AsyncProducer(brokers, start=False, before_send=broken, after_send=broken)
    producer.enqueue([item(b"m")])
    producer.close()
    assert brokers.payloads() == [b"m"]


def test_queue_time_sends_a_partial_batch():
    sent = threading.Event()
    producer = AsyncProducer(lambda broker_id, produces: sent.set(), batch_size=100, queue_time_ms=20)
    started = time.monotonic()
    producer.enqueue([item(b"m")])
    assert sent.wait(10)
    assert time.monotonic() - started < 5  # by queue.time, not by close
    producer.close(timeout_s=10)


def test_batch_size_sends_before_queue_time():
    sent = threading.Event()
    producer = AsyncProducer(lambda broker_id, produces: sent.set(), batch_size=2, queue_time_ms=60000)
    producer.enqueue([item(b"1"), item(b"2")])
    assert sent.wait(10)
    producer.close(timeout_s=10)
