"""A client process of the comparison: ``python -m bench.peers.worker SYSTEM ROLE OPTIONS_JSON``.

Runs one role of one system's Peer (bench/peers/base.py) with the handshake of harness.py:
``ready`` once set up, then waits for a line on stdin, then one JSON line with the result.
"""

from __future__ import annotations

import json
import sys

from bench.peers import load
from bench.peers.harness import wait_for_go


def main() -> None:
    system, role, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    result = load(system).roles()[role](go=wait_for_go, **options)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
