"""Reading one range with the fetch-ahead thread, against an in-memory 0.7-style broker: every
message once and in order, and each unusual answer handled. No Spark, no sockets."""

from __future__ import annotations

import threading

import pytest

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.errors import InvalidFetchSize, InvalidMessage, OffsetOutOfRange
from twisted_broker.spark import range_reader
from twisted_broker.spark.range_reader import NotAMessageBoundary, read_range
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, iter_entries, iter_messages


def _log() -> bytes:
    return b"".join(encode_compressed_message_set([f"m{i}.{j}".encode() * 3 for j in range(4)],
                                                  GZIP if i % 3 == 0 else NO_COMPRESSION) for i in range(50))


class _Broker:
    """Answers like a 0.7 broker: raw ``max_size`` bytes (a partial last entry included);
    like this project's broker, stops before a ``damaged`` offset and answers error 2 at it;
    error 1 outside the log."""

    def __init__(self, data: bytes, damaged: frozenset[int] = frozenset(), cut_at_boundaries: bool = False) -> None:
        self.data, self.damaged, self.requests = data, damaged, []
        self.cut_at_boundaries = cut_at_boundaries  # as this project's broker answers
        self.starts = [offset for offset, _n, _m in iter_entries(data)] + [len(data)]

    def __call__(self, host: str, port: int, socket_timeout_ms: int, connect_timeout_ms: int | None) -> "_Broker":
        return self

    def __enter__(self) -> "_Broker":
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    host, port = "127.0.0.1", 9

    def fetch(self, request):
        self.requests.append(request)
        if request.offset in self.damaged:
            return FetchedMessageSet(request, InvalidMessage.code, b"")
        if request.offset > len(self.data):
            return FetchedMessageSet(request, OffsetOutOfRange.code, b"")
        end = min([request.offset + request.max_size, *(d for d in self.damaged if d > request.offset)])
        if self.cut_at_boundaries:
            end = max([start for start in self.starts if start <= end and start > request.offset] or [end])
        return FetchedMessageSet(request, 0, self.data[request.offset:end])  # stops before damage, as ours does


def _read(monkeypatch, broker: _Broker, start: int, end: int, fetch_bytes: int = 300, crc: str = "fail"):
    monkeypatch.setattr(range_reader, "SimpleConsumer", broker)
    return read_range("t", 0, 0, "127.0.0.1", 9, start, end, fetch_bytes=fetch_bytes, crc=crc, socket_timeout_ms=1000)


def _rows(columns_list):
    return [row for columns in columns_list for row in zip(columns.offset.to_pylist(), columns.next_offset.to_pylist(),
                                                           columns.payload.to_pylist())]


@pytest.mark.parametrize("cut_at_boundaries", [False, True], ids=["0.7 broker", "this broker"])
def test_a_range_is_read_whole_and_in_order(monkeypatch, cut_at_boundaries):
    data = _log()
    broker = _Broker(data, cut_at_boundaries=cut_at_boundaries)
    threads = threading.active_count()
    got = _rows(_read(monkeypatch, broker, 0, len(data)))
    assert got == [(o, n, bytes(m.payload)) for o, n, m in iter_messages(data)]
    assert all(request.max_size <= 300 for request in broker.requests)
    assert threading.active_count() == threads  # every fetch thread stopped


def test_a_reader_stopped_early_stops_its_fetch_thread(monkeypatch):
    data = _log()
    threads = threading.active_count()
    reader = _read(monkeypatch, _Broker(data), 0, len(data), fetch_bytes=100)
    next(reader)
    assert threading.active_count() == threads + 1
    reader.close()
    assert threading.active_count() == threads


def test_a_damaged_message_is_one_marked_row_or_fails(monkeypatch):
    data = _log()
    starts = [offset for offset, _n, _m in iter_entries(data)]
    damaged = starts[7]
    with pytest.raises(InvalidMessage, match="damaged on disk"):
        list(_read(monkeypatch, _Broker(data, frozenset({damaged})), 0, len(data)))
    got = _rows(_read(monkeypatch, _Broker(data, frozenset({damaged})), 0, len(data), crc="mark"))
    expected = [(o, n, bytes(m.payload)) for o, n, m in iter_messages(data) if o != damaged]
    expected.insert(next(i for i, row in enumerate(expected) if row[0] > damaged), (damaged, starts[8], None))
    assert got == expected


def test_a_range_ending_inside_a_message_fails_instead_of_reading_it_twice(monkeypatch):
    data = _log()
    starts = [offset for offset, _n, _m in iter_entries(data)]
    with pytest.raises(NotAMessageBoundary, match="split.size=0"):
        list(_read(monkeypatch, _Broker(data), 0, starts[10] + 3))


def test_a_message_larger_than_the_fetch_size_says_so(monkeypatch):
    data = _log()
    with pytest.raises(InvalidFetchSize, match="raise fetch.size"):
        list(_read(monkeypatch, _Broker(data), 0, len(data), fetch_bytes=20))


def test_a_range_deleted_meanwhile_is_out_of_range(monkeypatch):
    data = _log()
    with pytest.raises(OffsetOutOfRange, match="retention"):
        list(_read(monkeypatch, _Broker(data), len(data) + 10, len(data) + 50))


class _Replica(_Broker):
    """A replica of a replicated partition, as this project's broker serves one: it stops
    answering (connection refused) after ``fetches`` fetches, and serves nothing past
    ``high_watermark`` (an empty answer, no error)."""

    def __init__(self, data: bytes, *, fetches: int | None = None, high_watermark: int | None = None) -> None:
        super().__init__(data, cut_at_boundaries=True)
        self.fetches, self.high_watermark = fetches, high_watermark

    def fetch(self, request):
        if self.fetches is not None and len(self.requests) >= self.fetches:
            self.requests.append(request)
            raise ConnectionRefusedError(f"connection to 127.0.0.1:{self.port} refused")
        if self.high_watermark is not None and request.offset >= self.high_watermark:
            self.requests.append(request)
            return FetchedMessageSet(request, 0, b"")
        return super().fetch(request)


def _read_replicas(monkeypatch, replicas: dict[int, _Broker], start: int, end: int, failover_timeout_ms: int = 1000):
    """A read of ``replicas`` (by port; broker id = port - 10) on a clock that moves 0.1 s per
    look; returns the reader and the pauses it asked for."""
    for port, replica in replicas.items():
        replica.port = port
    monkeypatch.setattr(range_reader, "SimpleConsumer", lambda host, port, **_timeouts: replicas[port])
    pauses, clock = [], iter(range(1000))
    reader = range_reader.read_replicas("t", 0, [(port - 10, "127.0.0.1", port) for port in replicas], start, end,
                                        fetch_bytes=300, crc="fail", socket_timeout_ms=1000,
                                        failover_timeout_ms=failover_timeout_ms, clock=lambda: next(clock) / 10,
                                        sleep=pauses.append)
    return reader, pauses


def test_a_replica_that_stops_is_replaced_at_the_offset_reached(monkeypatch):
    data = _log()
    leader = _Replica(data, fetches=3)  # killed after three answers
    behind = _Replica(data, high_watermark=len(data) // 2)  # a follower that has not learnt the HW
    in_sync = _Replica(data)
    reader, pauses = _read_replicas(monkeypatch, {10: leader, 11: behind, 12: in_sync}, 0, len(data))
    got = _rows(reader)
    assert got == [(o, n, bytes(m.payload)) for o, n, m in iter_messages(data)]  # each message once, in order
    assert not pauses  # the third replica served at once
    served = [r.offset for r in leader.requests[:3]]
    # the follower took over exactly where the leader stopped, and the third where the follower's HW was
    assert behind.requests[0].offset == leader.requests[3].offset > served[-1]
    assert in_sync.requests[0].offset == behind.requests[-1].offset >= len(data) // 2


def test_no_replica_serving_fails_after_the_failover_timeout_naming_each(monkeypatch):
    data = _log()
    down, behind = _Replica(data, fetches=0), _Replica(data, high_watermark=0)
    reader, pauses = _read_replicas(monkeypatch, {10: down, 11: behind}, 0, len(data), failover_timeout_ms=500)
    with pytest.raises(range_reader.ReplicasUnavailable,
                       match=r"no replica served offsets \[0, \d+\) for 500 ms") as error:
        list(reader)
    assert "broker 0 (127.0.0.1:10): connection to 127.0.0.1:10 refused" in str(error.value)
    assert "broker 1 (127.0.0.1:11): t partition 0: broker 1 answered nothing at offset 0" in str(error.value)
    assert len(pauses) == 5 and all(0 < pause <= 0.5 for pause in pauses)  # a round every 0.1 s for 0.5 s


def test_a_range_deleted_on_every_replica_fails_at_once(monkeypatch):
    data = _log()
    replicas = {10: _Replica(data), 11: _Replica(data)}
    reader, pauses = _read_replicas(monkeypatch, replicas, len(data) + 10, len(data) + 50)
    with pytest.raises(OffsetOutOfRange, match="retention"):
        list(reader)
    assert not pauses
