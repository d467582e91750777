"""Fetch (v4-10) and ListOffsets (v1-4) of the modern listener.

A fetch answers each partition with its records from the asked offset: stored batches as
their original bytes, streamed from the segment file with sendfile (the FEXTRA pieces of
their 0.7 wrappers, docs/kafka-protocol.md §3), 0.7 entries as magic-1 message sets built in Python. The
high watermark (and last stable offset: no transactions) is the last visible record's
offset + 1. Fetch sessions (v7+) are answered "no session" (id 0), which clients take as
"send full requests". With fewer than ``min_bytes`` to send, the fetch waits (as the 0.7 port's
held fetches, handlers/held_fetch.py) until one of its logs publishes new data or
``max_wait_ms`` passes, and is then answered with what there is.

Errors per partition: 1 offset out of range, 3 unknown topic or partition, 6 not the leader.
"""

from __future__ import annotations

import logging

from twisted.internet.defer import Deferred, inlineCallbacks

from twisted_broker.errors import InvalidMessage, OffsetOutOfRange
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.primitives import Gap
from twisted_broker.codec.kafka.protocol import Request, WithRecords
from twisted_broker.handlers.held_fetch import HeldFetch
from twisted_broker.handlers.kafka.partitions import PartitionError, PartitionFinder, partition_answers
from twisted_broker.server.stats import BrokerStats
from twisted_broker.storage import record_offsets
from twisted_broker.storage.segment import FileRegion

log = logging.getLogger(__name__)

LATEST, EARLIEST = -1, -2


class FetchRequests:
    def __init__(self, partitions: PartitionFinder, stats: BrokerStats, *, clock) -> None:
        self.partitions = partitions
        self.stats = stats
        self.clock = clock

    # -- Fetch -----------------------------------------------------------------------------------

    @inlineCallbacks
    def fetch(self, request: Request):
        body = request.body
        targets = yield self._targets(body["topics"])
        answer, size, logs = self._answer(body, targets)
        if size < body["min_bytes"] and body["max_wait_ms"] > 0 and not _has_error(answer):
            _close_all(answer)
            woken: Deferred = Deferred()
            HeldFetch(self.clock, logs, lambda: woken.callback(None), body["max_wait_ms"] / 1000)
            yield woken
            targets = yield self._targets(body["topics"])
            answer, size, logs = self._answer(body, targets)
        return WithRecords(answer)

    @inlineCallbacks
    def _targets(self, topics) -> dict:
        """(topic, partition) -> Target, or the PartitionError that answers it."""
        targets = {}
        for topic in topics:
            for part in topic["partitions"]:
                key = (topic["topic"], part["partition"])
                try:
                    target = self.partitions.for_read_now(*key)
                    targets[key] = target if target is not None else (yield self.partitions.for_read(*key))
                except PartitionError as exc:
                    targets[key] = exc
        return targets

    def _answer(self, body: dict, targets: dict):
        """The response body, the record bytes in it, and the logs a held fetch may wait on."""
        budget, total, logs, responses = body["max_bytes"], 0, [], []
        for topic in body["topics"]:
            partitions = []
            responses.append({"topic": topic["topic"], "partitions": partitions})
            for part in topic["partitions"]:
                target = targets[topic["topic"], part["partition"]]
                answer = {"partition_index": part["partition"], "error_code": kafka_errors.NONE, "high_watermark": -1,
                          "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                          "records": b""}
                partitions.append(answer)
                if isinstance(target, PartitionError):
                    answer["error_code"] = target.code
                    continue
                if target.log is None:  # a 0.7 partition nothing was produced to yet
                    answer["high_watermark"] = answer["last_stable_offset"] = answer["log_start_offset"] = 0
                    continue
                log_ = target.log
                logs.append(log_)
                start, end = record_offsets.earliest(log_), record_offsets.modern_end(log_)
                answer.update(high_watermark=end, last_stable_offset=end, log_start_offset=start)
                offset = part["fetch_offset"]
                if not start <= offset <= end:
                    answer["error_code"] = kafka_errors.OFFSET_OUT_OF_RANGE
                    continue
                if offset == end:
                    log_.flush_for_reader()  # a consumer waits for what is written: flush it now
                    continue
                if budget <= 0 and total:
                    continue
                try:
                    pieces = record_offsets.read_modern(log_, offset, min(part["partition_max_bytes"], max(budget, 0)))
                except OffsetOutOfRange:  # retention deleted it since the start was read
                    answer["error_code"] = kafka_errors.OFFSET_OUT_OF_RANGE
                    continue
                except InvalidMessage as exc:  # damaged on disk: logged where found
                    answer["error_code"] = kafka_errors.CORRUPT_MESSAGE
                    log.warning("fetch of %s-%d at %d: %s", topic["topic"], part["partition"], offset, exc)
                    continue
                size = sum(p.length if isinstance(p, FileRegion) else len(p) for p in pieces)
                if size:
                    answer["records"] = Gap(size, pieces)
                    total += size
                    budget -= size
                    self.stats.record_fetched(topic["topic"], size)
        return {"throttle_time_ms": 0, "error_code": kafka_errors.NONE, "session_id": 0,
                "responses": responses}, total, logs

    # -- ListOffsets ----------------------------------------------------------------------------

    @inlineCallbacks
    def list_offsets(self, request: Request):
        topics: list[dict] = []
        unknown = {"timestamp": -1, "offset": -1, "leader_epoch": -1}
        for topic, part, answer in partition_answers(request.body["topics"], topics, unknown):
            try:
                target = yield self.partitions.for_read(topic["name"], part["partition_index"])
            except PartitionError as exc:
                answer["error_code"] = exc.code
                continue
            answer["leader_epoch"] = target.leader_epoch
            answer["offset"], answer["timestamp"] = self._offset(target.log, part["timestamp"])
        return {"throttle_time_ms": 0, "topics": topics}

    @staticmethod
    def _offset(log_, timestamp: int) -> tuple[int, int]:
        if log_ is None:
            return (0, -1) if timestamp in (LATEST, EARLIEST) else (-1, -1)
        if timestamp == LATEST:
            return record_offsets.modern_end(log_), -1
        if timestamp == EARLIEST:
            return record_offsets.earliest(log_), -1
        found = record_offsets.record_for_time(log_, timestamp)
        return found if found is not None else (-1, -1)


def _has_error(answer: dict) -> bool:
    """Any partition's error is answered at once, as Kafka does."""
    return any(part["error_code"] for topic in answer["responses"] for part in topic["partitions"])


def _close_all(answer: dict) -> None:
    for topic in answer["responses"]:
        for part in topic["partitions"]:
            records = part["records"]
            if type(records) is Gap:
                for piece in records.fill:
                    if hasattr(piece, "close"):
                        piece.close()
