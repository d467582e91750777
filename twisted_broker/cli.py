"""The twisted-broker command line: the parser and the table of subcommands.

Each subcommand (README.md, "Command line": produce, consume, offsets, topics, groups, reset-offsets,
dump-log, mirror, etl, preferred-leader-election, reassign-partitions, users, acls, quotas) is one row of
``SUBCOMMANDS``, added by the issue that writes it.
A row's functions live in the module that does the work (twisted_broker/tools/), imported
only when that subcommand runs (or for ``--help``); a module imports its heaviest dependencies
(the reactor, kazoo, pyspark) inside ``run``.

Exit status: 0 on success; 1 for a failure the user can meet without a bug of ours (a broker
or ZooKeeper that does not answer, an unknown topic, a bad offset, a corrupt file), reported
as one line ``twisted-broker: error: ...``; 2 for arguments that do not parse or do not fit
together, one line as well; 130 on Ctrl-C; 141 when stdout's reader went away.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from twisted_broker import __version__
from twisted_broker.client.errors import ProducerError
from twisted_broker.errors import KafkaError, UnexpectedResponse
from twisted_broker.properties import ConfigError
from twisted_broker.tools.errors import CommandError, UsageError

__all__ = ["CommandError", "SUBCOMMANDS", "Subcommand", "build_parser", "main"]

PROG = "twisted-broker"

# Failures a user can meet without a bug of ours (a broker down, a bad offset, a missing
# file): one line, no traceback. Anything else is a bug, and keeps its traceback.
EXPECTED_ERRORS = (CommandError, ConfigError, OSError, KafkaError, ProducerError, UnexpectedResponse)


@dataclass(frozen=True)
class Subcommand:
    help: str  # one line, shown by twisted-broker --help
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # returns the exit status


@dataclass(frozen=True)
class ToolModule:
    """A row read from its module's ``HELP``, ``add_arguments`` and ``run`` (or the names
    given), imported when the row is first used: a run of one subcommand imports no other's
    module (topics' alone costs 0.2 s of imports, the SCRAM library acls' 0.1 s)."""
    module: str
    help_name: str = "HELP"
    add_name: str = "add_arguments"
    run_name: str = "run"

    @property
    def help(self) -> str:
        return getattr(importlib.import_module(self.module), self.help_name)

    @property
    def add_arguments(self) -> Callable[[argparse.ArgumentParser], None]:
        return getattr(importlib.import_module(self.module), self.add_name)

    @property
    def run(self) -> Callable[[argparse.Namespace], int]:
        return getattr(importlib.import_module(self.module), self.run_name)


_TOOLS = "twisted_broker.tools."
# name -> Subcommand (or ToolModule), in the order --help lists them.
SUBCOMMANDS: dict[str, Subcommand | ToolModule] = {
    "produce": ToolModule(_TOOLS + "produce"),
    "consume": ToolModule(_TOOLS + "consume"),
    "offsets": ToolModule(_TOOLS + "offsets"),
    "topics": ToolModule(_TOOLS + "topics"),
    "groups": ToolModule(_TOOLS + "groups"),
    "reset-offsets": ToolModule(_TOOLS + "groups", "RESET_HELP", "add_reset_arguments", "run_reset"),
    "dump-log": ToolModule(_TOOLS + "dump_log"),
    "mirror": ToolModule(_TOOLS + "mirror"),
    "etl": ToolModule("twisted_broker.spark.etl", run_name="main"),  # no pyspark, pyarrow or kazoo until it runs
    "preferred-leader-election": ToolModule(_TOOLS + "replication_admin", "ELECTION_HELP", "add_election_arguments",
                                            "run_election"),
    "reassign-partitions": ToolModule(_TOOLS + "replication_admin", "REASSIGN_HELP", "add_reassign_arguments",
                                      "run_reassign"),
    "users": ToolModule(_TOOLS + "users"),
    "acls": ToolModule(_TOOLS + "acls"),
    "quotas": ToolModule(_TOOLS + "quotas"),
}


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, as every subcommand's failures are; argparse would add the usage block
        # and name the subparser ("twisted-broker produce: error: ...").
        self.exit(2, f"{PROG}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Return the parser for the whole command line, one subparser per SUBCOMMANDS row; with
    ``only`` (a row's name), that row's alone, so no other row's module is imported."""
    parser = _ArgumentParser(prog=PROG, description="Tools for a Kafka 0.7 cluster.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more to stderr: -v our INFO lines and ZooKeeper warnings, -vv everything")
    subparsers = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    for name, subcommand in SUBCOMMANDS.items():
        if only is None or name == only:
            subparser = subparsers.add_parser(name, help=subcommand.help, description=subcommand.help)
            subcommand.add_arguments(subparser)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the options before
    it take no value), if that is a row's name; None builds every row (--help, a typo)."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return word if word in SUBCOMMANDS else None


def configure_logging(verbose: int) -> None:
    """WARNING and up to stderr, one line each; kazoo's connection chatter only with -v.

    Like logging.basicConfig, it does nothing when logging has handlers already (a program
    calling main, or pytest), so it never takes their records away.
    """
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose >= 2 else logging.INFO if verbose else logging.WARNING)
    # kazoo logs every failed connection attempt; a tool that cannot reach ZooKeeper says so once.
    logging.getLogger("kazoo").setLevel(logging.NOTSET if verbose >= 2 else logging.WARNING if verbose
                                        else logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse argv (default: sys.argv[1:]), run the chosen subcommand, return its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_chosen(argv)).parse_args(argv)
    configure_logging(args.verbose)
    try:
        return SUBCOMMANDS[args.command].run(args)
    except BrokenPipeError:
        # Whoever read stdout went away (consume | head): stop quietly, as a tool killed by
        # SIGPIPE would, and keep Python from failing again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except EXPECTED_ERRORS as e:
        print(f"{PROG}: error: {_one_line(e, args)}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, as a shell reports it


def _one_line(error: BaseException, args: argparse.Namespace) -> str:
    """The message of an expected failure; for a ZooKeeper that does not answer, where we
    looked and how to look elsewhere (the subcommands and the ETL's planner raise
    ZooKeeperUnavailable, whose own text names neither)."""
    if isinstance(error, ConnectionError) and getattr(args, "zk", None):
        from twisted_broker.registry.cluster_view import ZooKeeperUnavailable  # loads kazoo: only here

        if isinstance(error, ZooKeeperUnavailable):
            from twisted_broker.tools import zk_default

            return zk_default.not_answering(args.zk, args.zk_source)
    return str(error) or type(error).__name__
