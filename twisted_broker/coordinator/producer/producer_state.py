"""A partition leader's table of idempotent producers: per producer id, its epoch and its last
five batches' sequence ranges and offsets (Kafka 2.1's ProducerStateManager, without
transactions). Pure: no I/O, no clock.

How this works. Before a batch with a producer id is appended, ``check`` says what to do:

=======================================  ===================================================
the batch                                verdict
=======================================  ===================================================
same epoch, same first and last          duplicate: acknowledged with the stored batch's
sequence as one of the last five         base offset, not stored again (a retry whose
                                         answer was lost)
an epoch older than the producer's       fenced (INVALID_PRODUCER_EPOCH, 47)
a producer unknown here, first           unknown producer (UNKNOWN_PRODUCER_ID, 59): its
sequence not 0                           batches were deleted by retention, or it never
                                         wrote here; the client starts over
a new epoch, first sequence not 0        out of order (OUT_OF_ORDER_SEQUENCE_NUMBER, 45)
the same epoch, first sequence not       out of order (45): a batch in between is missing
last sequence + 1 (wrapping at 2^31-1)
anything else                            append, then ``record`` it
=======================================  ===================================================

``record`` must follow the append at once, in the same reactor turn as ``check``: a producer
keeps up to five requests in flight, and the next one's check must see this batch.

The table is rebuilt from the stored batches' headers (``rebuilt``) when a replica becomes
leader and at startup, so a batch retried across a leader change is still recognised.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from twisted_broker.codec.kafka import errors
from twisted_broker.codec.kafka.batch_header import BatchHeader

BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NumBatchesToRetain (max.in.flight's limit)
NO_EPOCH = -1
NO_SEQUENCE = -1
_MAX_SEQUENCE = 2**31 - 1


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "append", "duplicate", "out_of_order", "fenced", "unknown_producer"
    error: int  # the partition's error code in the Produce response (0 for append and duplicate)
    base_offset: int = -1  # a duplicate's: the stored batch's base offset, to acknowledge with


APPEND = Verdict("append", errors.NONE)
OUT_OF_ORDER = Verdict("out_of_order", errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
FENCED = Verdict("fenced", errors.INVALID_PRODUCER_EPOCH)
UNKNOWN_PRODUCER = Verdict("unknown_producer", errors.UNKNOWN_PRODUCER_ID)


def duplicate(base_offset: int) -> Verdict:
    return Verdict("duplicate", errors.NONE, base_offset)


@dataclass(frozen=True)
class StoredBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    max_timestamp_ms: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[StoredBatch] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == _MAX_SEQUENCE)


class ProducerStateTable:
    """Producers of one partition, by producer id."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, base_sequence: int, last_sequence: int) -> Verdict:
        """What to do with a batch of ``producer_id`` (>= 0) at ``epoch`` holding sequences
        ``base_sequence`` .. ``last_sequence``. Changes nothing."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch == entry.epoch:
            for batch in entry.batches:
                if batch.first_sequence == base_sequence and batch.last_sequence == last_sequence:
                    return duplicate(batch.base_offset)
        if entry is not None and epoch < entry.epoch:
            return FENCED
        if entry is None or epoch != entry.epoch:
            if base_sequence == 0:
                return APPEND
            return UNKNOWN_PRODUCER if entry is None else OUT_OF_ORDER
        if entry.last_sequence == NO_SEQUENCE:
            return APPEND if base_sequence == 0 else OUT_OF_ORDER
        return APPEND if in_sequence(entry.last_sequence, base_sequence) else OUT_OF_ORDER

    def record(self, producer_id: int, epoch: int, base_sequence: int, last_sequence: int, *,
               base_offset: int, last_offset: int, max_timestamp_ms: int) -> None:
        """Remember a batch stored at ``base_offset`` .. ``last_offset``. A new epoch starts the
        producer's batches afresh; only the last five are kept."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        entry.batches.append(StoredBatch(base_sequence, last_sequence, base_offset, last_offset, max_timestamp_ms))

    def record_header(self, header: BatchHeader, base_offset: int | None = None) -> None:
        """Record a stored batch from its header, at ``base_offset`` (default: the header's
        stamped one). A batch without producer id or sequence is skipped."""
        if header.producer_id < 0 or header.base_sequence < 0 or header.is_control:
            return
        base = header.base_offset if base_offset is None else base_offset
        self.record(header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                    base_offset=base, last_offset=base + header.last_offset_delta,
                    max_timestamp_ms=header.max_timestamp)

    @classmethod
    def rebuilt(cls, stored: Iterable[BatchHeader | tuple[int, BatchHeader]]) -> ProducerStateTable:
        """The table a partition's stored batches make, read in log order: headers with their
        stamped base offsets, or (first offset, header) pairs as storage's
        ``iter_batch_headers`` yields them."""
        table = cls()
        for item in stored:
            if isinstance(item, BatchHeader):  # a NamedTuple: asked before the pair's tuple
                table.record_header(item)
            else:
                table.record_header(item[1], item[0])
        return table

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose every kept batch retention deleted (Kafka does the same): their
        next batch, unless it starts over at sequence 0, gets UNKNOWN_PRODUCER_ID."""
        gone = [pid for pid, entry in self.producers.items()
                if entry.batches and entry.batches[-1].last_offset < log_start_offset]
        for producer_id in gone:
            del self.producers[producer_id]

    def forget_idle(self, now_ms: int, idle_ms: int) -> None:
        """Forget producers whose last batch is older than ``idle_ms`` (Kafka's
        transactional.id.expiration.ms, 7 days by default), so the table does not grow for ever."""
        gone = [pid for pid, entry in self.producers.items()
                if entry.batches and entry.batches[-1].max_timestamp_ms + idle_ms < now_ms]
        for producer_id in gone:
            del self.producers[producer_id]


class ProducerStates:
    """The tables of the partitions this broker leads, by any hashable key (say (topic,
    partition)). A table is built from its log's stored batches on first use; ``forget`` it
    when the partition's leadership or log goes, so the next leader term rebuilds it from
    what the log then holds (a follower's log may have been truncated meanwhile)."""

    def __init__(self) -> None:
        self._tables: dict[object, ProducerStateTable] = {}

    def table(self, key: object, stored: Callable[[], Iterable[BatchHeader | tuple[int, BatchHeader]]]
              ) -> ProducerStateTable:
        """The table of ``key``; ``stored()`` gives the log's batches when it must be built."""
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = ProducerStateTable.rebuilt(stored())
        return table

    def forget(self, key: object) -> None:
        self._tables.pop(key, None)
