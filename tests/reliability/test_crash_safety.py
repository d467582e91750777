"""Crash safety: SIGKILL at random moments under full-speed produce, and a disk that fills up.

Acknowledged means visible: 0.7 producers get no reply, so a message counts as acknowledged
once a fetch has returned it (the broker serves only flushed data). After every kill the test
checks, from the files and over the wire, that each acknowledged message is still there byte
for byte at its offset, that recovery cut only the tail of the newest segment at its first
invalid entry (what was never flushed, or torn), and that the consumer resumes at its own
offset with no gap. Some kills are followed by the loss of a random amount of the newest
segment's unacknowledged tail, torn mid-entry and followed by garbage, as a power cut that
drops unflushed pages would leave it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.faults.load import FullSpeedProducer, RecordingConsumer, payload
from tests.support.faults.oracle import check_log_dir, read_log, segment_files, walk
from tests.support.polling import fetch_all, latest_offset, wait_for, wait_for_end
from tests.support.reliability import record
from tests.support.spec_encoding import fetch, message_set_of, produce

TOPIC = "crash"
PARTITIONS = 2
CRASH_PROPERTIES = {
    "num.partitions": str(PARTITIONS),
    "log.flush.interval": "100",  # an fsync per 100 messages (or 50 ms): kills land between
    "log.default.flush.scheduler.interval.ms": "50",
    "log.file.size": str(256 * 1024),  # rolls every few hundred batches: kills land near rolls too
}


def lose_unacknowledged_tail(partition_dir: Path, acknowledged: int, rng: random.Random) -> int:
    """Cut the newest segment at a random point past what was acknowledged and append
    garbage (a torn write); return the bytes removed. Data before ``acknowledged`` and in
    older segments (fsynced when the log rolled) is never touched."""
    newest = segment_files(partition_dir)[-1]
    start = int(newest.name.split(".")[0])
    data = newest.read_bytes()
    floor = max(acknowledged - start, 0)
    if floor >= len(data):
        return 0
    cut = rng.randint(floor, len(data))
    garbage = rng.choice([b"", b"\x00" * rng.randint(1, 5000), rng.randbytes(rng.randint(1, 300)),
                          data[cut:cut + rng.randint(1, 100)][::-1]])
    newest.write_bytes(data[:cut] + garbage)
    return len(data) - cut


def expected_after_recovery(partition_dir: Path) -> bytes:
    """The partition as a correct recovery leaves it: every segment as it is, but the newest
    cut at its first invalid entry (the oracle's walk)."""
    files = segment_files(partition_dir)
    older = b"".join(path.read_bytes() for path in files[:-1])
    newest = files[-1].read_bytes()
    _entries, valid, _problem = walk(newest)
    return older + newest[:valid]


def test_sigkill_under_full_speed_produce_loses_no_acknowledged_message(brokers, scale, request):
    seed = int(os.environ.get("RELIABILITY_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    broker = brokers(properties=CRASH_PROPERTIES).start()
    consumer = RecordingConsumer(TOPIC, PARTITIONS)
    sequence = 0
    tails_lost = 0
    for cycle in range(scale.kill_cycles):
        producer = FullSpeedProducer(broker.port, TOPIC, PARTITIONS, sequence, seed + cycle)
        consumer = consumer.resume(broker.port)
        producer.start()
        consumer.start()
        time.sleep(rng.uniform(0.15, 0.9))  # a random moment: mid-append, mid-flush, mid-roll
        broker.kill()
        producer.stop()
        consumer.stop()
        sequence = producer.sequence
        assert not consumer.problems, f"seed {seed}, cycle {cycle}: {consumer.problems}"
        assert producer.messages_sent > 0

        acknowledged = [bytes(seen) for seen in consumer.seen]
        expected = []
        for partition in range(PARTITIONS):
            directory = broker.log_dir / f"{TOPIC}-{partition}"
            if not directory.exists():
                expected.append(b"")
                continue
            on_disk = read_log(directory)
            # A kill loses nothing the kernel has: the page cache holds what was written.
            assert on_disk[:len(acknowledged[partition])] == acknowledged[partition]
            if rng.random() < 0.5:
                tails_lost += bool(lose_unacknowledged_tail(directory, len(acknowledged[partition]), rng))
            expected.append(expected_after_recovery(directory))

        broker.start()
        lost = 0
        for partition in range(PARTITIONS):
            directory = broker.log_dir / f"{TOPIC}-{partition}"
            after = read_log(directory) if directory.exists() else b""
            # Recovery cut exactly the invalid tail of the newest segment, nothing else.
            assert after == expected[partition], f"seed {seed}, cycle {cycle}, partition {partition}"
            seen = acknowledged[partition]
            if after[:len(seen)] != seen:
                lost += len(walk(seen)[0]) - len(walk(_common_prefix(after, seen))[0])
            assert lost == 0, f"seed {seed}, cycle {cycle}: acknowledged messages lost"
            with broker.connect() as client:
                # The restarted broker serves all of it, and the consumer's own offset is valid.
                assert latest_offset(client, TOPIC, partition) == len(after)
                resume = client.request(fetch(TOPIC, partition, len(seen)))
                assert resume[:2] == b"\x00\x00", f"resume at {len(seen)}: error {resume[:2].hex()}"
                starts = [o for o in consumer.fetch_starts[partition] if o <= len(seen) - 200_000] or [0]
                assert fetch_range(client, partition, starts[-1], len(seen)) == seen[starts[-1]:]
        record(request, faults_injected=1, cases_tried=1, messages_lost=lost)

    # The consumer reads the rest, then its record and the final log agree byte for byte: it
    # resumed after every kill exactly where it stopped, and nothing moved under it.
    consumer.catch_up(broker.port)
    assert broker.stop() == -signal.SIGTERM
    counts = check_log_dir(broker.log_dir)  # every segment holds only valid entries
    for partition in range(PARTITIONS):
        directory = broker.log_dir / f"{TOPIC}-{partition}"
        assert bytes(consumer.seen[partition]) == (read_log(directory) if directory.exists() else b"")
    checked = sum(counts.values())
    assert checked == sum(consumer.messages)
    record(request, faults_injected=tails_lost, messages_checked=checked)


def _common_prefix(a: bytes, b: bytes) -> bytes:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def fetch_range(client, partition: int, start: int, end: int) -> bytes:
    """The log bytes from boundary ``start`` to at least ``end``, by as many fetches as it takes
    (a response never spans two segments), cut to ``end``."""
    data = bytearray()
    while start + len(data) < end:
        chunk = fetch_all(client, TOPIC, partition, start + len(data))
        valid = walk(chunk)[1]
        assert valid, f"no complete message at {start + len(data)}"
        data += chunk[:valid]
    return bytes(data[:end - start])


# --- a full disk ------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs, unmounted afterwards; skipped where mounting is not permitted."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or result.returncode})")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_full_disk_refuses_appends_keeps_serving_fetches_and_recovers_when_space_is_freed(
        brokers, small_disk, request):
    log_dir = small_disk / "logs"
    broker = brokers(properties={"log.dir": str(log_dir), "log.file.size": str(1 << 20),
                                 "log.flush.interval": "50"}).start()
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\x00" * (6 << 20))  # leaves under 2 MiB for the log

    refused = sent = 0
    sequence = 0
    with broker.connect() as reader:
        # Produce until the broker refuses: it closes the producer's connection (0.7 has no
        # other way to say a produce failed).
        while refused < 3:
            with broker.connect() as client:
                try:
                    while True:
                        batch = message_set_of(*(payload(0, sequence + i) for i in range(50)))
                        # One write (Nagle would hold a second one back): the fetch is
                        # answered after the produce was handled, one request at a time.
                        client.request(produce("full", 0, batch) + fetch("full", 0, 0, 0))
                        sequence += 50
                        sent += 1
                except (ConnectionError, OSError):
                    refused += 1
        visible = wait_for(lambda: latest_offset(reader, "full") or None, "a visible end")
        time.sleep(0.3)  # a flush that was pending has published by now
        visible = latest_offset(reader, "full")
        assert 0 < visible < 2 << 20
        # The partition refuses writes, the broker serves reads.
        data = fetch_all(reader, "full")
        assert data == read_log(log_dir / "full-0")[:len(data)]
        assert check_log_dir(log_dir)  # the failed appends were cut back: no partial entry
        assert "append to full-0 failed" in broker.log_tail(1 << 20)

        ballast.unlink()  # space is freed: the same partition takes writes again
        after = message_set_of(b"after the disk was freed")
        with broker.connect() as client:
            client.send(produce("full", 0, after))
            end = wait_for_end(client, "full", visible + len(after))
        assert fetch_all(reader, "full", offset=end - len(after)) == after
    broker.kill()
    broker.start()  # and a crash now finds no corrupt segment: recovery cuts nothing
    assert "(recovered, 0 bytes truncated)" in broker.log_tail(1 << 20)
    with broker.connect() as client:
        assert latest_offset(client, "full") == end
    counts = check_log_dir(log_dir)
    record(request, faults_injected=refused, cases_tried=sent, messages_checked=sum(counts.values()))
