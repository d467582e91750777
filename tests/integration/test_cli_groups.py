"""``twisted-broker groups`` (ConsumerOffsetChecker), ``reset-offsets`` and ``consume --group``
as real processes against a broker registered in a real ZooKeeper."""

from __future__ import annotations

import signal
import subprocess

from tests.support.polling import wait_for, wait_for_end
from tests.support.cli import (assert_one_line_error, cli_env, group_rows, lines, run_cli,
                                                        start_cli)

ENTRY = 4 + 6 + len(b"line-00000")  # each produced line as a plain entry


def consume_group(zk_connect: str, group: str, topic: str, count: int) -> list[bytes]:
    result = run_cli("consume", "--zk", zk_connect, "--topic", topic, "--group", group, "--max-messages", count)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.split(b"\n")[:-1]


def reset(zk_connect: str, group: str, topic: str, to: object) -> subprocess.CompletedProcess:
    return run_cli("reset-offsets", "--zk", zk_connect, "--group", group, "--topic", topic, "--to", to)


def produce_lines(zk_connect: str, broker, topic: str, count: int, prefix: str = "line",
                  before: int = 0) -> list[bytes]:
    """Produce ``count`` lines after ``before`` others; wait until the broker shows them."""
    sent = lines(count, prefix)
    produced = run_cli("produce", "--zk", zk_connect, "--topic", topic, input=b"\n".join(sent) + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    with broker.connect() as client:
        wait_for_end(client, topic, (before + count) * ENTRY)
    return sent


def test_groups_shows_lag_that_shrinks_as_the_group_consumes(broker_factory, zk_connect):
    broker = broker_factory(zk_connect=zk_connect)
    sent = produce_lines(zk_connect, broker, "lagging", 1000)
    end = 1000 * ENTRY
    assert consume_group(zk_connect, "g", "lagging", 400) == sent[:400]
    assert group_rows(zk_connect, "--group", "g") == [
        ["g", "lagging", "0-0", str(400 * ENTRY), str(end), str(600 * ENTRY), "none"]]
    # The next member starts where the last one committed.
    assert consume_group(zk_connect, "g", "lagging", 550) == sent[400:950]
    assert group_rows(zk_connect, "--group", "g", "--topic", "lagging") == [
        ["g", "lagging", "0-0", str(950 * ENTRY), str(end), str(50 * ENTRY), "none"]]
    assert consume_group(zk_connect, "g", "lagging", 50) == sent[950:]
    assert group_rows(zk_connect) == [["g", "lagging", "0-0", str(end), str(end), "0", "none"]]


def test_reset_offsets_is_refused_while_a_consumer_lives_and_applied_after_it_stops(broker_factory, zk_connect):
    broker = broker_factory(zk_connect=zk_connect)
    sent = produce_lines(zk_connect, broker, "replay", 100)
    end = 100 * ENTRY
    assert consume_group(zk_connect, "g", "replay", 100) == sent
    member = start_cli("consume", "--zk", zk_connect, "--topic", "replay", "--group", "g",
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: group_rows(zk_connect, "--group", "g")[0][6] != "none", "the member to own it")
        refused = reset(zk_connect, "g", "replay", "earliest")
        assert_one_line_error(refused, 1, "group g has live consumers (g_", "stop them first")
        assert group_rows(zk_connect, "--group", "g")[0][3] == str(end)  # unchanged
    finally:
        member.send_signal(signal.SIGINT)
        status = member.wait(30)
        stderr = member.stderr.read()
        member.stderr.close()
    assert (status, stderr) == (130, b"")  # interrupted, and left the group cleanly
    applied = reset(zk_connect, "g", "replay", "earliest")
    assert applied.returncode == 0, applied.stderr.decode()
    assert applied.stdout.decode() == f"g replay:0-0 {end} -> 0\n"
    assert group_rows(zk_connect, "--group", "g") == [["g", "replay", "0-0", "0", str(end), str(end), "none"]]
    assert consume_group(zk_connect, "g", "replay", 100) == sent  # everything again
    to_latest = reset(zk_connect, "g", "replay", "latest")
    assert to_latest.stdout.decode() == f"g replay:0-0 {end} -> {end}\n"


def test_a_reset_to_a_time_before_every_segment_starts_at_the_earliest_offset(broker_factory, zk_connect):
    broker = broker_factory(zk_connect=zk_connect)
    produce_lines(zk_connect, broker, "timed", 10)
    applied = reset(zk_connect, "new", "timed", 1)
    assert applied.returncode == 0, applied.stderr.decode()
    assert applied.stdout.decode() == "new timed:0-0 - -> 0\n"  # no offset before: a new group


def test_unknown_groups_and_topics_fail_in_one_line(broker_factory, zk_connect):
    broker_factory(zk_connect=zk_connect)
    nobody = run_cli("groups", "--zk", zk_connect, "--group", "nobody")
    assert_one_line_error(nobody, 1, "no consumer group nobody")
    assert run_cli("groups", "--zk", zk_connect).stdout == b""  # no groups yet: nothing to list
    assert_one_line_error(reset(zk_connect, "g", "absent", "latest"), 1, "topic absent is not registered")
    assert_one_line_error(run_cli("reset-offsets", "--zk", zk_connect, "--group", "g", "--topic", "t"), 2, "--to")


def test_sigterm_stops_a_group_member_as_the_end_of_input_does(broker_factory, zk_connect):
    """Exit status 0, and the offsets of what was printed committed: the next run of the group
    prints none of it again, and everything after it."""
    broker = broker_factory(zk_connect=zk_connect)
    sent = produce_lines(zk_connect, broker, "stopped", 2000)
    member = start_cli("consume", "--topic", "stopped", "--group", "g", env=cli_env(TWISTED_BROKER_ZK=zk_connect),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first_lines = [member.stdout.readline() for _ in range(5)]  # it is printing: stop it mid-way
        member.send_signal(signal.SIGTERM)
        status = member.wait(30)
    finally:
        member.kill()
    rest, stderr = member.stdout.read(), member.stderr.read()
    member.stdout.close()
    member.stderr.close()
    assert (status, stderr) == (0, b"")
    printed = b"".join(first_lines + [rest]).split(b"\n")[:-1]
    assert printed == sent[:len(printed)]
    more = produce_lines(zk_connect, broker, "stopped", 10, prefix="more", before=2000)
    again = run_cli("consume", "--zk", zk_connect, "--topic", "stopped", "--group", "g", "--timeout-ms", 1000)
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout.split(b"\n")[:-1] == sent[len(printed):] + more
