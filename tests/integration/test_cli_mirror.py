"""``twisted-broker mirror`` (MirrorMaker) as a real process between two single-broker clusters,
each in a ZooKeeper chroot of its own: every message arrives, and every stored entry (plain or
a compressed wrapper) is byte for byte the source's."""

from __future__ import annotations

from tests.support.cli import broker_list, lines, run_cli
from tests.support.polling import fetch_all, wait_for
from tests.support.zookeeper import new_chroot
from twisted_broker.codec.kafka07.message_set import iter_entries


def stored_entries(broker, topic: str) -> list[bytes]:
    """Every top-level entry of partition 0, as stored: length field and message bytes."""
    with broker.connect() as client:
        data = fetch_all(client, topic)
    return [data[offset:next_offset] for offset, next_offset, _m in iter_entries(data)]


def produce(broker, topic: str, payloads: list[bytes], *options: object) -> None:
    result = run_cli("produce", "--broker-list", broker_list(broker), "--topic", topic, *options,
                     input=b"\n".join(payloads) + b"\n")
    assert result.returncode == 0, result.stderr.decode()


def test_mirror_copies_every_entry_byte_exact_with_wrappers_unchanged(broker_factory, zookeeper, zk_connect):
    target_zk = new_chroot(zookeeper)
    source = broker_factory("source", broker_id=0, zk_connect=zk_connect)
    target = broker_factory("target", broker_id=0, zk_connect=target_zk)
    topics = {"plain": (), "zipped": ("--compression", "gzip"), "snapped": ("--compression", "snappy")}
    for topic, options in topics.items():
        produce(source, topic, lines(500, topic), "--batch-size", 50, *options)
    produce(source, "unlisted", [b"stays home"])
    expected = {}
    for topic in topics:
        wait_for(lambda: len(stored_entries(source, topic)) == (500 if topic == "plain" else 10),
                 f"{topic} on the source")
        expected[topic] = stored_entries(source, topic)

    mirrored = run_cli("mirror", "--from-zk", zk_connect, "--to-zk", target_zk,
                       "--whitelist", "plain,zipped,snapped", "--streams", 2, "--timeout-ms", 2000)
    assert (mirrored.returncode, mirrored.stdout, mirrored.stderr) == (0, b"", b"")

    for topic in topics:
        wait_for(lambda: stored_entries(target, topic) == expected[topic], f"{topic} on the target")
    codecs = {topic: {message.codec_name for _o, _n, message in iter_entries(b"".join(expected[topic]))}
              for topic in topics}
    assert codecs == {"plain": {"none"}, "zipped": {"gzip"}, "snapped": {"snappy"}}
    listing = run_cli("topics", "--zk", target_zk).stdout.decode()
    assert "unlisted" not in listing
    # Everything consumed was committed: a second run finds nothing to copy.
    lags = [line.split()[5] for line in run_cli("groups", "--zk", zk_connect, "--group", "twisted-broker-mirror")
            .stdout.decode().splitlines()[1:]]
    assert lags == ["0", "0", "0"]


def test_mirror_by_blacklist_to_a_broker_list(broker_factory, zookeeper, zk_connect):
    source = broker_factory("source", broker_id=0, zk_connect=zk_connect)
    target = broker_factory("target", broker_id=5)
    produce(source, "keep", lines(30, "keep"), "--compression", "gzip", "--batch-size", 7)
    produce(source, "skip-me", [b"no"])
    wait_for(lambda: len(stored_entries(source, "keep")) == 5, "keep on the source")
    mirrored = run_cli("mirror", "--from-zk", zk_connect, "--to-broker-list", broker_list(target),
                       "--blacklist", "skip-.*", "--timeout-ms", 2000)
    assert mirrored.returncode == 0, mirrored.stderr.decode()
    wait_for(lambda: stored_entries(target, "keep") == stored_entries(source, "keep"), "keep on the target")
    assert not (target.log_dir / "skip-me-0").exists()


def test_mirror_to_an_unreachable_target_fails_in_one_line(broker_factory, zk_connect):
    source = broker_factory("source", broker_id=0, zk_connect=zk_connect)
    produce(source, "stuck", [b"x"])
    mirrored = run_cli("mirror", "--from-zk", zk_connect, "--to-broker-list", "0:127.0.0.1:1",
                       "--whitelist", "stuck", "--timeout-ms", 10000)
    err = mirrored.stderr.decode()
    assert mirrored.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith("twisted-broker: error: mirroring stopped: ConnectionError: "
                          "cannot connect to 127.0.0.1:1")
    # Nothing was sent, so nothing was committed.
    rows = run_cli("groups", "--zk", zk_connect, "--group", "twisted-broker-mirror").stdout.decode().splitlines()
    assert [row.split()[3] for row in rows[1:]] in ([], ["-"], ["0"])
