"""The twisted-broker command line: the parser and the table of subcommands.

Each subcommand (INTERFACES.md: produce, consume, offsets, topics, groups, reset-offsets,
dump-log, mirror, etl) is one row of ``SUBCOMMANDS``, added by the issue that writes it.
A row's functions live in the module that does the work; that module imports its heavy
dependencies (the reactor, kazoo, pyspark) inside ``run`` so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from twisted_broker import __version__
from twisted_broker.config import ConfigError

PROG = "twisted-broker"


class CommandError(Exception):
    """A failure the user can fix: main prints the message as one line and exits 1."""


@dataclass(frozen=True)
class Subcommand:
    help: str  # one line, shown by twisted-broker --help
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # returns the exit status


# name -> Subcommand, in the order --help lists them.
SUBCOMMANDS: dict[str, Subcommand] = {}


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, as every subcommand's failures are; argparse would add the usage block.
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for the whole command line, one subparser per SUBCOMMANDS row."""
    parser = _ArgumentParser(prog=PROG, description="Tools for a Kafka 0.7 cluster.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    for name, subcommand in SUBCOMMANDS.items():
        subparser = subparsers.add_parser(name, help=subcommand.help, description=subcommand.help)
        subcommand.add_arguments(subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse argv (default: sys.argv[1:]), run the chosen subcommand, return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return SUBCOMMANDS[args.command].run(args)
    except (CommandError, ConfigError) as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, as a shell reports it
