"""``twisted-broker produce`` and ``consume`` as real processes against real brokers: what goes
in comes out exactly, compressed or not, by broker list or ZooKeeper, and failures are one
line with status 1 (runtime) or 2 (usage).
"""

from __future__ import annotations

import os
import pty
import random
import struct
import subprocess
import time

import pytest

from tests.support.cli import assert_one_line_error, broker_list, lines, run_cli, start_cli
from tests.support.polling import fetch_all, wait_for, wait_for_end
from twisted_broker.codec.kafka07.message_set import iter_entries


def consume_lines(*args: object, count: int) -> list[bytes]:
    result = run_cli("consume", *args, "--max-messages", count)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr == b""
    return result.stdout.split(b"\n")[:-1]


def test_1000_lines_produced_come_back_exactly(broker):
    sent = lines(1000)
    produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", "lines",
                       input=b"\n".join(sent) + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    assert produced.stdout == produced.stderr == b""
    assert consume_lines("--broker-list", broker_list(broker), "--topic", "lines", "--from-beginning",
                         count=1000) == sent
    # Batches of 200 (the default): 5 Produce requests, each of plain entries.
    with broker.connect() as client:
        entries = list(iter_entries(fetch_all(client, "lines")))
    assert [bytes(message.payload) for _o, _n, message in entries] == sent


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
def test_compressed_batches_are_one_wrapper_each_and_come_back_whole(broker, codec):
    sent = lines(250, codec)
    produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", codec, "--compression", codec,
                       "--batch-size", 100, input=b"\n".join(sent) + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    assert consume_lines("--broker-list", broker_list(broker), "--topic", codec, "--from-beginning",
                         count=250) == sent
    with broker.connect() as client:
        entries = list(iter_entries(fetch_all(client, codec)))
    assert [message.codec_name for _o, _n, message in entries] == [codec] * 3  # 100 + 100 + 50


def test_binary_records_round_trip_any_bytes(broker):
    rng = random.Random(7)
    sent = [bytes(rng.randrange(256) for _ in range(rng.randrange(300))) for _ in range(200)]
    sent += [b"", b"\n", b"two\nlines\r\n"]
    framed = b"".join(struct.pack(">i", len(payload)) + payload for payload in sent)
    produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", "bin", "--binary",
                       input=framed)
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = run_cli("consume", "--broker-list", broker_list(broker), "--topic", "bin", "--from-beginning",
                       "--binary", "--max-messages", len(sent))
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout == framed


def test_a_last_line_without_newline_is_a_message_and_binary_input_cut_short_fails(broker):
    produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", "tail",
                       input=b"a\n\nb")
    assert produced.returncode == 0, produced.stderr.decode()
    assert consume_lines("--broker-list", broker_list(broker), "--topic", "tail", "--from-beginning",
                         count=3) == [b"a", b"", b"b"]
    cut = struct.pack(">i", 1) + b"x" + struct.pack(">i", 10) + b"abc"
    result = run_cli("produce", "--broker-list", broker_list(broker), "--topic", "tail", "--binary", input=cut)
    assert_one_line_error(result, 1, "ends inside the record at byte 5")
    # The complete record before it was still sent.
    assert consume_lines("--broker-list", broker_list(broker), "--topic", "tail", "--offset", 0,
                         "--partition", 0, count=4)[-1] == b"x"


def test_consume_without_a_start_reads_only_new_messages_and_stops_when_idle(broker):
    run_cli("produce", "--broker-list", broker_list(broker), "--topic", "new", input=b"old\n")
    with broker.connect() as client:
        wait_for_end(client, "new", 4 + 6 + 3)
    result = run_cli("consume", "--broker-list", broker_list(broker), "--topic", "new", "--timeout-ms", 300)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_consume_from_an_offset_and_one_partition(broker):
    run_cli("produce", "--broker-list", broker_list(broker), "--topic", "at", input=b"aa\nbb\ncc\n")
    entry = 4 + 6 + 2
    assert consume_lines("--broker-list", broker_list(broker), "--topic", "at", "--partition", "0-0",
                         "--offset", entry, count=2) == [b"bb", b"cc"]


def test_produce_and_consume_through_zookeeper_across_two_brokers(broker_factory, zk_connect):
    brokers = [broker_factory(f"b{i}", broker_id=i, zk_connect=zk_connect, properties={"num.partitions": "2"})
               for i in range(2)]
    # The topic exists on both brokers before producing, so messages spread over 4 partitions.
    for broker in brokers:
        produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", "spread", input=b"seed\n")
        assert produced.returncode == 0
    wait_for(lambda: run_cli("topics", "--zk", zk_connect, "--topic", "spread").stdout.count(b"\n") == 3,
             "both brokers to register the topic")
    sent = lines(400)
    produced = run_cli("produce", "--zk", zk_connect, "--topic", "spread", "--batch-size", 10,
                       input=b"\n".join(sent) + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    got = consume_lines("--zk", zk_connect, "--topic", "spread", "--from-beginning", count=402)
    assert sorted(got) == sorted([b"seed", b"seed", *sent])


def test_bad_offsets_and_unknown_topics_are_one_line_errors(broker, zookeeper, zk_connect):
    run_cli("produce", "--broker-list", broker_list(broker), "--topic", "known", input=b"hello\n")
    with broker.connect() as client:
        wait_for_end(client, "known", 15)
    result = run_cli("consume", "--broker-list", broker_list(broker), "--topic", "known", "--partition", 0,
                     "--offset", 1000)
    assert_one_line_error(result, 1, "offset 1000 is out of range", "0 to 15")
    result = run_cli("consume", "--broker-list", broker_list(broker), "--topic", "known", "--partition", 0,
                     "--offset", 3)  # inside the first message
    assert_one_line_error(result, 1, "message boundary")
    result = run_cli("consume", "--zk", zk_connect, "--topic", "nowhere")
    assert_one_line_error(result, 1, "topic nowhere is not registered")


def test_connection_refused_is_a_one_line_error(broker):
    port = broker.port
    broker.stop()
    result = run_cli("produce", "--broker-list", f"0:127.0.0.1:{port}", "--topic", "t", input=b"x\n")
    assert_one_line_error(result, 1, "cannot connect to 127.0.0.1", "Connection refused")


@pytest.mark.parametrize("args, fragment", [
    (["produce", "--broker-list", "0:h:1", "--zk", "h:1", "--topic", "t"], "not allowed with"),
    (["consume", "--broker-list", "zero:h:1", "--topic", "t"], "not id:host:port"),
    (["consume", "--broker-list", "0:h:1", "--topic", "t", "--group", "g"], "--group needs ZooKeeper"),
    (["consume", "--zk", "h:1", "--topic", "t", "--group", "g", "--partition", "0"], "--partition cannot"),
    (["consume", "--broker-list", "0:h:1", "--topic", "t", "--from-beginning", "--offset", "0"],
     "not allowed with"),
    (["consume", "--broker-list", "0:h:1", "--topic", "a/b"], "illegal character"),
    (["produce", "--broker-list", "0:h:1", "--topic", "t", "--compression", "lz4"], "invalid choice"),
])
def test_bad_arguments_are_one_line_errors_with_status_2(args, fragment):
    assert_one_line_error(run_cli(*args), 2, fragment)


def test_progress_is_shown_on_a_terminal_only(broker):
    """Input paced over more than the display's 1 s delay: a terminal on stderr gets the
    count-and-rate line, erased at the end; a pipe gets nothing."""
    for on_terminal in (True, False):
        topic = f"paced-{on_terminal}"
        master, slave = pty.openpty() if on_terminal else os.pipe()
        producer = start_cli("produce", "--broker-list", broker_list(broker), "--topic", topic,
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        producer.stdin.write(b"first\n")
        producer.stdin.flush()
        with broker.connect() as client:
            wait_for_end(client, topic, 4 + 6 + len(b"first"))  # the producer is running
        time.sleep(1.2)  # past the display's delay, so the next batch draws the line
        producer.stdin.write(b"second\n")
        producer.stdin.close()
        assert producer.wait(30) == 0
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            shown += chunk
        os.close(master)
        if on_terminal:
            assert shown.startswith(b"\r\x1b[Kproduce: 2 messages, ") and shown.endswith(b" msgs/s\r\x1b[K")
        else:
            assert shown == b""
