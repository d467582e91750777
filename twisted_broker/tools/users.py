"""``users``: SCRAM users in ZooKeeper, in the manner of Kafka's ``kafka-configs --entity-type
users --alter --add-config 'SCRAM-SHA-256=[password=...]'`` (docs/security.md).

``--add NAME --mechanism M --password PW`` (or ``--password-file F``: its first line) stores a
new credential for M (a fresh salt each time); ``--delete NAME`` removes every SCRAM
credential of NAME (``--mechanism`` only that one), keeping the node's other keys (quotas);
``--list`` prints each user and its mechanisms, never a key. The password is never stored
or printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from twisted_broker.security.scram import (
    DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_HASHES, make_credential,
)
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError, UsageError
from twisted_broker.tools.table import format_table

HELP = "add, delete or list SCRAM users (the SASL credentials of today's clients)"
USERS_HEADER = ("USER", "MECHANISMS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", metavar="NAME", help="store a credential of NAME")
    action.add_argument("--delete", metavar="NAME", help="remove NAME's SCRAM credentials")
    action.add_argument("--list", action="store_true", help="each user and its mechanisms")
    parser.add_argument("--mechanism", choices=sorted(SCRAM_HASHES),
                        help="with --add (required) or --delete (only this one)")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--password", metavar="PW", help="with --add")
    secret.add_argument("--password-file", type=Path, metavar="F", help="with --add: the password is F's first line")
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                        help=f"with --add: PBKDF2 rounds, {MIN_ITERATIONS} to {MAX_ITERATIONS} "
                             f"(default {DEFAULT_ITERATIONS})")


def _password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        lines = args.password_file.read_text(encoding="utf-8").splitlines()
        if not lines or not lines[0]:
            raise CommandError(f"{args.password_file}: no password on its first line")
        return lines[0]
    if not args.password:
        raise UsageError("--add needs --password or --password-file")
    return args.password


def run(args: argparse.Namespace) -> int:
    if args.add is not None and args.mechanism is None:
        raise UsageError("--add needs --mechanism")
    if args.add is None and (args.password or args.password_file):
        raise UsageError("--password and --password-file go with --add")
    if args.add is not None:
        if not args.add:
            raise UsageError("--add: the user name is empty")
        try:
            credential = make_credential(args.mechanism, _password(args), iterations=args.iterations)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    from twisted_broker.registry.user_admin import UserAdmin  # kazoo loads only when used
    with UserAdmin(args.zk, timeout_s=cluster.ZK_TIMEOUT_S) as admin:
        if args.list:
            rows = []
            for name in admin.users():
                try:
                    mechanisms = sorted(m for m in admin.user_config(name) if m in SCRAM_HASHES)
                except ValueError:
                    mechanisms = ["(unreadable)"]
                rows.append((name, ",".join(mechanisms) or "-"))
            if rows:
                print("\n".join(format_table(USERS_HEADER, rows)))
            return 0
        if args.add is not None:
            admin.change_user(args.add, lambda config: {**config, args.mechanism: credential.to_text()})
            print(f"stored {args.mechanism} credential of user {args.add}")
            return 0
        if args.delete not in admin.users():
            raise CommandError(f"no user {args.delete} in ZooKeeper at {args.zk}")
        drop = {args.mechanism} if args.mechanism else set(SCRAM_HASHES)
        admin.change_user(args.delete, lambda config: {k: v for k, v in config.items() if k not in drop})
        print(f"deleted {', '.join(sorted(drop))} credentials of user {args.delete}")
        return 0
