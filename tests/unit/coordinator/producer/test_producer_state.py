"""A partition's idempotent producers (KIP-98 rules as Kafka 2.1 applies them to a client's batch)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_broker.coordinator.producer.producer_state import (
    APPEND, BATCHES_KEPT, FENCED, OUT_OF_ORDER, UNKNOWN_PRODUCER, ProducerStates, ProducerStateTable, duplicate,
)
from twisted_broker.codec.kafka import errors
from twisted_broker.codec.kafka.batch_header import read_header
from twisted_broker.codec.kafka.record_batch import build_batch

PID = 4000


def append(table, pid, epoch, first, count, offset, timestamp_ms=1_000):
    """Check then record a batch of ``count`` records at ``offset``, as a leader would."""
    verdict = table.check(pid, epoch, first, first + count - 1)
    if verdict == APPEND:
        table.record(pid, epoch, first, first + count - 1, base_offset=offset, last_offset=offset + count - 1,
                     max_timestamp_ms=timestamp_ms)
    return verdict


def test_a_new_producer_starts_at_sequence_zero_and_continues_in_order():
    table = ProducerStateTable()
    assert append(table, PID, 0, 0, 3, 100) == APPEND
    assert append(table, PID, 0, 3, 2, 200) == APPEND
    assert table.producers[PID].last_sequence == 4


def test_a_retried_batch_among_the_last_five_is_a_duplicate_with_its_original_offset():
    table = ProducerStateTable()
    for i in range(7):
        append(table, PID, 0, i * 10, 10, 1000 + i * 500)
    assert table.check(PID, 0, 60, 69) == duplicate(4000)
    assert table.check(PID, 0, 20, 29) == duplicate(2000)  # the fifth from last
    assert table.check(PID, 0, 10, 19) == OUT_OF_ORDER  # the sixth from last is forgotten
    assert table.check(PID, 0, 20, 25) == OUT_OF_ORDER  # same start, other end: not that batch
    assert duplicate(4000).error == errors.NONE and len(table.producers[PID].batches) == BATCHES_KEPT


def test_a_gap_in_sequences_is_out_of_order():
    table = ProducerStateTable()
    append(table, PID, 0, 0, 5, 0)
    assert table.check(PID, 0, 6, 6) == OUT_OF_ORDER
    assert table.check(PID, 0, 4, 4) == OUT_OF_ORDER  # overlaps, not a whole stored batch
    assert OUT_OF_ORDER.error == errors.OUT_OF_ORDER_SEQUENCE_NUMBER == 45


def test_sequences_wrap_after_the_largest_int32():
    table = ProducerStateTable()
    top = 2**31 - 1
    table.record(PID, 0, top - 1, top, base_offset=0, last_offset=1, max_timestamp_ms=0)
    assert table.check(PID, 0, 0, 4) == APPEND
    assert table.check(PID, 0, 1, 1) == OUT_OF_ORDER


def test_an_older_epoch_is_fenced_and_a_newer_one_must_restart_at_zero():
    table = ProducerStateTable()
    append(table, PID, 3, 0, 5, 0)
    assert table.check(PID, 2, 5, 5) == FENCED
    assert table.check(PID, 2, 0, 4) == FENCED  # even a batch that looks like a stored one
    assert FENCED.error == errors.INVALID_PRODUCER_EPOCH == 47
    assert table.check(PID, 4, 5, 5) == OUT_OF_ORDER
    assert append(table, PID, 4, 0, 1, 10) == APPEND
    assert table.producers[PID].epoch == 4 and len(table.producers[PID].batches) == 1
    assert table.check(PID, 4, 0, 0) == duplicate(10)


def test_an_unknown_producer_not_at_sequence_zero_is_told_so():
    table = ProducerStateTable()
    assert table.check(PID, 0, 17, 20) == UNKNOWN_PRODUCER
    assert UNKNOWN_PRODUCER.error == errors.UNKNOWN_PRODUCER_ID == 59
    assert table.check(PID, 0, 0, 3) == APPEND


def test_producers_are_independent():
    table = ProducerStateTable()
    append(table, 1, 0, 0, 1, 0)
    append(table, 2, 0, 0, 1, 10)
    assert table.check(1, 0, 1, 1) == APPEND and table.check(2, 0, 0, 0) == duplicate(10)


def test_rebuilt_from_stored_batch_headers_it_recognises_a_retry_after_a_leader_change():
    stored = [read_header(build_batch([(1_000 + i, b"k", b"v", ())] * 4, base_offset=i * 100, producer_id=PID,
                                      producer_epoch=1, base_sequence=i * 4))
              for i in range(3)]
    stored.append(read_header(build_batch([(5, None, b"plain", ())])))  # no producer id: skipped
    table = ProducerStateTable.rebuilt(stored)
    assert table.check(PID, 1, 8, 11) == duplicate(200)
    assert table.check(PID, 1, 12, 15) == APPEND
    assert table.check(PID, 0, 12, 15) == FENCED
    assert list(table.producers) == [PID]


def test_producers_whose_batches_retention_deleted_are_forgotten():
    table = ProducerStateTable()
    append(table, 1, 0, 0, 1, 0)
    append(table, 2, 0, 0, 1, 500)
    table.truncate_head(400)
    assert list(table.producers) == [2]
    assert table.check(1, 0, 1, 1) == UNKNOWN_PRODUCER


def test_idle_producers_are_forgotten():
    table = ProducerStateTable()
    append(table, 1, 0, 0, 1, 0, timestamp_ms=1_000)
    append(table, 2, 0, 0, 1, 1, timestamp_ms=5_000)
    table.forget_idle(now_ms=10_000, idle_ms=6_000)
    assert list(table.producers) == [2]


# -- a producer with five requests in flight, retrying at random: stored exactly once, in order

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=60))
def test_retries_in_any_order_store_each_batch_once_and_in_sequence(script):
    """A client sends batches 0..7 (3 records each) with up to five in flight; ``script``
    picks which in-flight batch the leader sees next and whether its answer is lost (then it is
    sent again). The leader's log must hold each batch once, in order."""
    table, log = ProducerStateTable(), []
    acknowledged: dict[int, int] = {}
    next_batch = 0
    for pick, answer_lost in script:
        in_flight = [b for b in range(next_batch, min(next_batch + 5, 8)) if b not in acknowledged]
        acknowledged_prefix = [b for b in range(8) if b in acknowledged]
        if not in_flight:
            break
        batch = in_flight[pick % len(in_flight)]
        if acknowledged and pick % 3 == 0:  # a retry of an acknowledged batch still in the window
            batch = acknowledged_prefix[-1]
        stored_before = batch in log
        verdict = append(table, PID, 0, batch * 3, 3, len(log) * 10)
        if stored_before:  # within the last five: recognised, with where it is
            assert verdict == duplicate(log.index(batch) * 10)
        if verdict == APPEND:
            log.append(batch)
        if verdict.outcome in ("append", "duplicate") and not answer_lost:
            acknowledged[batch] = verdict.base_offset if verdict.outcome == "duplicate" else (len(log) - 1) * 10
        while next_batch in acknowledged:
            next_batch += 1
    assert log == list(range(len(log)))  # each batch once, in sequence
    for batch, offset in acknowledged.items():
        assert log[offset // 10] == batch  # acknowledged with where it is stored


def test_rebuilt_from_storages_first_offset_and_header_pairs_the_first_offset_counts():
    header = read_header(build_batch([(0, None, b"v", ())] * 2, base_offset=0, producer_id=PID,
                                     producer_epoch=0, base_sequence=0))
    table = ProducerStateTable.rebuilt([(700, header)])
    assert table.check(PID, 0, 0, 1) == duplicate(700)
    assert table.producers[PID].batches[-1].last_offset == 701


def test_a_partitions_table_is_built_once_from_its_log_and_rebuilt_after_being_forgotten():
    states, builds = ProducerStates(), []
    header = read_header(build_batch([(0, None, b"v", ())], base_offset=5, producer_id=PID, producer_epoch=0,
                                     base_sequence=0))

    def stored():
        builds.append(1)
        return [header]

    table = states.table(("t", 0), stored)
    assert states.table(("t", 0), stored) is table and len(builds) == 1
    table.record(PID, 0, 1, 1, base_offset=9, last_offset=9, max_timestamp_ms=0)
    states.forget(("t", 0))
    assert states.table(("t", 0), stored).check(PID, 0, 1, 1) == APPEND  # the log, not the old table
    assert len(builds) == 2
