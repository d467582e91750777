"""``python -m tests.nemesis --minutes 20``: the Jepsen-style run (tests/nemesis/run.py)."""

from tests.nemesis.run import main

raise SystemExit(main())
