"""CommandError: a failure the user can fix, printed by cli.main as one line (exit status 1).

It lives here rather than in cli.py because the subcommand modules raise it and cli.py
imports them: cli.py re-exports it under its old name.
"""


class CommandError(Exception):
    """A failure the user can fix: main prints the message as one line and exits 1."""


class UsageError(CommandError):
    """Arguments that parse but do not fit together: reported like argparse's, exit status 2."""
