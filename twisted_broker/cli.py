"""The twisted-broker command line: the parser and the table of subcommands.

Each subcommand (README.md, "Command line": produce, consume, offsets, topics, groups, reset-offsets,
dump-log, mirror, etl, preferred-leader-election, reassign-partitions, users, acls, quotas) is one row of
``SUBCOMMANDS``, added by the issue that writes it.
A row's functions live in the module that does the work (twisted_broker/tools/); that module
imports its heavy dependencies (the reactor, kazoo, pyspark) inside ``run`` so ``--help``
stays fast.

Exit status: 0 on success; 1 for a failure the user can meet without a bug of ours (a broker
or ZooKeeper that does not answer, an unknown topic, a bad offset, a corrupt file), reported
as one line ``twisted-broker: error: ...``; 2 for arguments that do not parse or do not fit
together, one line as well; 130 on Ctrl-C; 141 when stdout's reader went away.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from twisted_broker import __version__
from twisted_broker.client.errors import ProducerError
from twisted_broker.config import ConfigError
from twisted_broker.errors import KafkaError, UnexpectedResponse
from twisted_broker.tools import (
    acls, consume, dump_log, groups, mirror, offsets, produce, quotas, replication_admin, topics, users,
    zk_default,
)
from twisted_broker.spark import etl  # imports no pyspark, pyarrow or kazoo until it runs
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


# name -> Subcommand, in the order --help lists them.
SUBCOMMANDS: dict[str, Subcommand] = {
    "produce": Subcommand(produce.HELP, produce.add_arguments, produce.run),
    "consume": Subcommand(consume.HELP, consume.add_arguments, consume.run),
    "offsets": Subcommand(offsets.HELP, offsets.add_arguments, offsets.run),
    "topics": Subcommand(topics.HELP, topics.add_arguments, topics.run),
    "groups": Subcommand(groups.HELP, groups.add_arguments, groups.run),
    "reset-offsets": Subcommand(groups.RESET_HELP, groups.add_reset_arguments, groups.run_reset),
    "dump-log": Subcommand(dump_log.HELP, dump_log.add_arguments, dump_log.run),
    "mirror": Subcommand(mirror.HELP, mirror.add_arguments, mirror.run),
    "etl": Subcommand(etl.HELP, etl.add_arguments, etl.main),
    "preferred-leader-election": Subcommand(replication_admin.ELECTION_HELP, replication_admin.add_election_arguments,
                                            replication_admin.run_election),
    "reassign-partitions": Subcommand(replication_admin.REASSIGN_HELP, replication_admin.add_reassign_arguments,
                                      replication_admin.run_reassign),
    "users": Subcommand(users.HELP, users.add_arguments, users.run),
    "acls": Subcommand(acls.HELP, acls.add_arguments, acls.run),
    "quotas": Subcommand(quotas.HELP, quotas.add_arguments, quotas.run),
}


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, as every subcommand's failures are; argparse would add the usage block
        # and name the subparser ("twisted-broker produce: error: ...").
        self.exit(2, f"{PROG}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for the whole command line, one subparser per SUBCOMMANDS row."""
    parser = _ArgumentParser(prog=PROG, description="Tools for a Kafka 0.7 cluster.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more to stderr: -v our INFO lines and ZooKeeper warnings, -vv everything")
    subparsers = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    for name, subcommand in SUBCOMMANDS.items():
        subparser = subparsers.add_parser(name, help=subcommand.help, description=subcommand.help)
        subcommand.add_arguments(subparser)
    return parser


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
    args = build_parser().parse_args(argv)
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
            return zk_default.not_answering(args.zk, args.zk_source)
    return str(error) or type(error).__name__
