"""cli.main: every subcommand is listed with --help; expected failures are one line with status
1, usage errors status 2, a closed stdout ends quietly; a bug keeps its traceback."""

import argparse

import pytest

from twisted_broker import cli
from twisted_broker.errors import OffsetOutOfRange
from twisted_broker.tools.errors import CommandError, UsageError

SUBCOMMANDS = ["produce", "consume", "offsets", "topics", "groups", "reset-offsets", "dump-log", "mirror"]


def test_every_subcommand_is_listed():
    assert list(cli.SUBCOMMANDS)[:len(SUBCOMMANDS)] == SUBCOMMANDS


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main([name, "--help"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: twisted-broker {name}")


@pytest.mark.parametrize("name", sorted(set(SUBCOMMANDS) - {"topics", "groups"}))  # those need only ZooKeeper
def test_missing_arguments_are_one_line_with_status_2(name, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main([name])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("twisted-broker: error: the following arguments are required: ")
    assert err.count("\n") == 1


def replace_topics(monkeypatch, run) -> None:
    """Make ``topics`` (its real arguments) call ``run``."""
    topics = cli.SUBCOMMANDS["topics"]
    monkeypatch.setitem(cli.SUBCOMMANDS, "topics", cli.Subcommand(topics.help, topics.add_arguments, run))


@pytest.mark.parametrize("error, status", [
    (CommandError("no such topic"), 1),
    (UsageError("--offset needs one partition"), 2),
    (ConnectionError("cannot connect"), 1),
    (OffsetOutOfRange("fetch of t-0 at offset 5 (error code 1)"), 1),
    (FileNotFoundError(2, "No such file or directory"), 1),
    (TimeoutError(), 1),
])
def test_expected_failures_are_one_line(monkeypatch, capsys, error, status):
    def fail(args: argparse.Namespace) -> int:
        raise error
    replace_topics(monkeypatch, fail)
    assert cli.main(["topics", "--zk", "h:1"]) == status
    err = capsys.readouterr().err
    assert err == f"twisted-broker: error: {str(error) or type(error).__name__}\n"


def test_a_bug_keeps_its_traceback(monkeypatch):
    def fail(args: argparse.Namespace) -> int:
        raise KeyError("bug")
    replace_topics(monkeypatch, fail)
    with pytest.raises(KeyError):
        cli.main(["topics", "--zk", "h:1"])


def test_interrupt_exits_130(monkeypatch):
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt
    replace_topics(monkeypatch, interrupted)
    assert cli.main(["topics", "--zk", "h:1"]) == 130
