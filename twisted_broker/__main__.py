"""Runs the twisted-broker command line: ``python -m twisted_broker SUBCOMMAND``."""

from twisted_broker.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
