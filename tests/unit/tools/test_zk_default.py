"""The default of --zk: TWISTED_BROKER_ZK, else etc/server.properties (the working directory's,
then the project's), else 127.0.0.1:2181; shown by --help, and named by the error when no
ZooKeeper answers there."""

import argparse
from pathlib import Path

import pytest

from twisted_broker import cli
from twisted_broker.registry.cluster_view import ZooKeeperUnavailable
from twisted_broker.tools import cluster, zk_default
from twisted_broker.tools.zk_default import ENV_VAR, FALLBACK, FALLBACK_SOURCE, ZkDefault, default_zk_connect

PROJECT = Path(__file__).resolve().parents[3]


def write_properties(directory: Path, text: str) -> None:
    (directory / "etc").mkdir()
    (directory / "etc" / "server.properties").write_text(text)


def test_the_environment_variable_wins_with_its_chroot(tmp_path):
    write_properties(tmp_path, "zk.connect=file:1\n")
    found = default_zk_connect({ENV_VAR: "a:2181,b:2182/kafka/prod"}, cwd=tmp_path)
    assert found == ZkDefault("a:2181,b:2182/kafka/prod", ENV_VAR)


def test_the_working_directorys_server_properties_come_next(tmp_path):
    write_properties(tmp_path, "# a comment\nzk.connect = zk1:2181/c\nbrokerid=3\n")
    assert default_zk_connect({ENV_VAR: " "}, cwd=tmp_path) == ZkDefault("zk1:2181/c", "etc/server.properties")


def test_then_the_projects_own_server_properties(tmp_path):
    found = default_zk_connect({}, cwd=tmp_path)  # no etc/ here
    assert found == ZkDefault("127.0.0.1:2181", str(PROJECT / "etc" / "server.properties"))


@pytest.mark.parametrize("text", [None, "brokerid=0\n", "zk.connect=\n", "bad=\\u12\n"])
def test_the_built_in_default_when_no_file_names_one(tmp_path, monkeypatch, text):
    monkeypatch.setattr(zk_default, "_PROJECT_PROPERTIES", tmp_path / "absent.properties")
    if text is not None:  # a file without the key, with it empty, or malformed: passed over
        write_properties(tmp_path, text)
    assert default_zk_connect({}, cwd=tmp_path) == ZkDefault(FALLBACK, FALLBACK_SOURCE)


def parser(**options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    cluster.add_cluster_arguments(parser, **options)
    return parser


def test_the_default_applies_when_neither_zk_nor_broker_list_is_given(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "env:1/chroot")
    given = parser().parse_args([])
    assert (given.zk, given.zk_source, given.broker_list) == ("env:1/chroot", ENV_VAR, None)
    given = parser().parse_args(["--zk", "flag:2"])
    assert (given.zk, given.zk_source) == ("flag:2", "--zk")
    given = parser().parse_args(["--broker-list", "0:h:1"])
    assert (given.zk, given.broker_list) == (None, {0: ("h", 1)})
    assert parser(allow_broker_list=False).parse_args([]).zk == "env:1/chroot"


def test_a_bad_default_is_a_usage_error_naming_its_source(monkeypatch, capsys):
    monkeypatch.setenv(ENV_VAR, "nohost")
    with pytest.raises(SystemExit) as exit:
        cli.main(["topics"])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (f"twisted-broker: error: argument --zk: 'nohost' is not "
                                       f"HOST:PORT[,HOST:PORT...][/CHROOT] (from {ENV_VAR})\n")


@pytest.mark.parametrize("name", ["produce", "consume", "offsets", "topics", "groups", "reset-offsets", "etl"])
def test_help_shows_the_default_and_its_source(monkeypatch, capsys, name):
    monkeypatch.setenv(ENV_VAR, "env:1/chroot")
    with pytest.raises(SystemExit):
        cli.main([name, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert f"(default: env:1/chroot, from {ENV_VAR})" in help_text


def test_help_names_the_file_and_the_variable_that_overrides_it(monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(PROJECT)
    with pytest.raises(SystemExit):
        cli.main(["topics", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default: 127.0.0.1:2181, from etc/server.properties; {ENV_VAR} overrides it)" in help_text


@pytest.mark.parametrize("argv, where", [
    (["topics"], f"127.0.0.1:9 (from {ENV_VAR}; "),
    (["topics", "--zk", "h:1/c"], "h:1/c (from --zk; "),
])
def test_zookeeper_not_answering_is_one_line_naming_where_we_looked(monkeypatch, capsys, argv, where):
    monkeypatch.setenv(ENV_VAR, "127.0.0.1:9")

    def unreachable(args: argparse.Namespace) -> int:
        raise ZooKeeperUnavailable("cannot connect to ZooKeeper at ... within 5 s")
    topics = cli.SUBCOMMANDS["topics"]
    monkeypatch.setitem(cli.SUBCOMMANDS, "topics", cli.Subcommand(topics.help, topics.add_arguments, unreachable))
    assert cli.main(argv) == 1
    assert capsys.readouterr().err == (f"twisted-broker: error: no ZooKeeper answers at {where}"
                                       f"set --zk or {ENV_VAR} to look elsewhere)\n")
