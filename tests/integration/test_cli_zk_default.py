"""The command line without ``--zk``: it reads the cluster ``TWISTED_BROKER_ZK`` names (a
chroot included), or the ``zk.connect`` of ``etc/server.properties`` in the working
directory; where nothing answers, one line says where it looked and how to look elsewhere."""

from __future__ import annotations

import socket

from tests.support.cli import assert_one_line_error, cli_env, lines, run_cli
from tests.support.polling import wait_for


def test_produce_topics_and_a_group_need_no_zk_when_the_variable_names_the_cluster(broker_factory, zk_connect):
    broker_factory(zk_connect=zk_connect)
    env = cli_env(TWISTED_BROKER_ZK=zk_connect)  # the test's own chroot: no other test's topics
    sent = lines(20)
    produced = run_cli("produce", "--topic", "plain", input=b"\n".join(sent) + b"\n", env=env)
    assert produced.returncode == 0, produced.stderr.decode()
    listed = wait_for(lambda: run_cli("topics", env=env).stdout.decode().splitlines(), "the topic's registration")
    assert [row.split()[:2] for row in listed[1:]] == [["plain", "0"]]  # topic, broker id
    consumed = run_cli("consume", "--topic", "plain", "--group", "g", "--max-messages", 20, env=env)
    assert (consumed.returncode, consumed.stdout.split(b"\n")[:-1]) == (0, sent), consumed.stderr.decode()


def test_nothing_answering_at_the_files_zk_connect_is_one_line_naming_it(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on: bound, never listened, then freed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "server.properties").write_text(f"brokerid=0\nzk.connect=127.0.0.1:{port}/c\n")
    result = run_cli("topics", cwd=tmp_path)
    assert_one_line_error(result, 1, f"no ZooKeeper answers at 127.0.0.1:{port}/c (from etc/server.properties; "
                                     "set --zk or TWISTED_BROKER_ZK to look elsewhere)")
