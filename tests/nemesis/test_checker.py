"""The nemesis checker's rules on made-up histories (pure: no processes): a checker that
cannot see a lost, moved, duplicated or reordered record, or a record seen then lost, would
make every nemesis run pass. The run itself: ``make nemesis`` (docs/nemesis.md)."""

from collections import Counter

from twisted_broker.codec.kafka.record_batch import build_batch, read_header
from twisted_broker.storage.log import Log, LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.record_offsets import append_batch

from tests.nemesis.checker import Figures, check_producer, check_seen, epoch_finder, producer_epochs, table
from tests.nemesis.faults import KINDS, schedule

BROKERS, ZOOKEEPERS = ["b0", "b1", "b2", "b3", "b4"], ["zk1", "zk2", "zk3"]


def figures_of(acked, final, must_keep=True, exactly_once=True, epoch_of=None) -> dict[str, str]:
    figures = Figures()
    check_producer(figures, "all", acked, final, must_keep, exactly_once, epoch_of)
    return dict(figures.rows) | {"violations": figures.violations}


def test_a_clean_history_has_no_violation():
    final = {0: [(0, b"i-p0-00000000"), (40, b"i-p0-00000001")], 1: [(0, b"i-p1-00000000")]}
    acked = {b"i-p0-00000000": (0, 0), b"i-p0-00000001": (0, 40), b"i-p1-00000000": (1, 0)}
    assert figures_of(acked, final)["violations"] == []


def test_lost_moved_duplicated_and_reordered_records_are_each_counted():
    final = {0: [(0, b"i-p0-00000001"), (40, b"i-p0-00000000"), (80, b"i-p0-00000001"), (120, b"i-p0-00000003")]}
    acked = {b"i-p0-00000000": (0, 0), b"i-p0-00000002": (0, 80), b"i-p0-00000003": (0, 120)}
    got = figures_of(acked, final)
    assert got["all: lost"] == "1"  # 2
    assert got["all: acknowledged at another offset"] == "1"  # 0 acknowledged at 0, found at 40
    assert got["all: duplicated"] == "1"  # 1 twice
    assert got["all: out of order"] == "1"  # 1 before 0
    assert len(got["violations"]) == 4


def test_a_copy_stored_by_a_new_producer_epoch_is_counted_apart_and_a_copy_within_one_epoch_is_a_violation():
    final = {0: [(0, b"i-p0-00000000"), (40, b"i-p0-00000001"),  # epoch 0
                 (80, b"i-p0-00000001"), (120, b"i-p0-00000002"), (160, b"i-p0-00000002")]}  # epoch 1
    epochs = epoch_finder({0: [(0, 0, 0), (40, 40, 0), (80, 80, 1), (120, 120, 1), (160, 160, 1)]})
    acked = {b"i-p0-00000000": (0, 0), b"i-p0-00000001": (0, 80), b"i-p0-00000002": (0, 120)}
    got = figures_of(acked, final, epoch_of=epochs)
    assert got["all: stored again by a new producer epoch (librdkafka's epoch bump)"] == "1"  # 1
    assert got["all: duplicated"] == "1"  # 2, twice within epoch 1
    assert got["all: out of order"] == "1"  # 2 before 2; 1's second copy is not a step back
    assert got["violations"] == ["all: duplicated: 1", "all: out of order: 1"]
    assert figures_of(acked, final)["all: duplicated"] == "2"  # without the epochs, both count


def test_producer_epochs_reads_which_epoch_stored_each_record_from_the_segment_files(tmp_path):
    path = str(tmp_path / "t-0")
    (tmp_path / "t-0").mkdir()
    log = Log(path, "t", 0, open_log_directory(path, 0.0), policy=LogPolicy(), now=lambda: 0.0)
    bases = []
    for epoch, sequence, count in ((0, 0, 3), (0, 3, 1), (1, 0, 2)):
        batch = bytearray(build_batch([(0, None, b"v")] * count, producer_id=7, producer_epoch=epoch,
                                      base_sequence=sequence))
        assert read_header(batch).records_count == count
        bases.append(append_batch(log, batch, [b"v"] * count, 0))
    log.flush()
    log.close()
    rows = producer_epochs(tmp_path / "t-0", "t", 0)
    assert rows == [(bases[0], bases[0] + 2, 0), (bases[1], bases[1], 0), (bases[2], bases[2] + 1, 1)]
    epoch_of = epoch_finder({0: rows})
    assert [epoch_of(0, bases[0] + 1), epoch_of(0, bases[2] + 1), epoch_of(0, bases[2] + 2)] == [0, 1, None]


def test_an_acknowledgement_without_an_offset_needs_its_record_in_its_partition_anywhere():
    final = {0: [(0, b"i-p0-00000000")], 1: [(0, b"i-p1-00000000")]}
    got = figures_of({b"i-p0-00000000": (0, None), b"i-p1-00000000": (0, None)}, final)
    assert got["all: acknowledged without an offset (librdkafka)"] == "2"
    assert got["all: acknowledged at another offset"] == "1"  # i-p1 acknowledged on partition 0
    assert got["all: lost"] == "0"


def test_acks_one_losses_are_counted_but_are_no_violation():
    got = figures_of({b"o-p0-00000000": (0, 0)}, {0: []}, must_keep=False, exactly_once=False)
    assert got["all: lost"] == "1" and got["violations"] == []


def test_a_record_seen_then_changed_or_gone_is_a_violation():
    figures = Figures()
    final = {("t", 0): {0: b"a", 10: b"x"}}
    check_seen(figures, "group", [(("t", 0), 0, b"a"), (("t", 0), 10, b"b"), (("t", 0), 20, b"c")], final)
    assert dict(figures.rows)["group: seen then lost"] == "2"
    assert "VIOLATIONS: group: seen then lost: 2" in table("t", figures, Counter(kill=1))


def test_a_seed_names_its_schedule_and_every_kind_is_drawn():
    first = schedule(7, 1200, BROKERS, ZOOKEEPERS, "b4")
    assert first == schedule(7, 1200, BROKERS, ZOOKEEPERS, "b4")
    assert {f.kind for step in first for f in step} == set(KINDS)
    assert sum(step[0].hold_s + step[0].gap_s for step in first) >= 1200
    for step in first:
        assert len({t for f in step for t in f.targets}) == sum(len(f.targets) for f in step)  # distinct targets
