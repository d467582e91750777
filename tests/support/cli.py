"""``python -m twisted_broker`` as a real process for tests: the environment it runs in, running
it to completion (forked from a warm interpreter, tests/support/forked_processes.py) or in the
background, and the shape of its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.brokers import ROOT
from tests.support.forked_processes import run_module

CLI = [sys.executable, "-m", "twisted_broker"]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of the CLI under test: ours, without a TWISTED_BROKER_ZK of the
    developer's (tests name their cluster), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if key != "TWISTED_BROKER_ZK"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def run_cli(*args: object, input: bytes | None = None, timeout_s: float = 60, cwd: object = ROOT,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m twisted_broker ARGS`` to completion; stdout and stderr as bytes. Forked
    from the worker's warm interpreter (tests/support/forked_processes.py)."""
    return run_module("twisted_broker", list(map(str, args)), input=input, timeout_s=timeout_s, cwd=cwd,
                      env=env or cli_env())


def start_cli(*args: object, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    """Start ``python -m twisted_broker ARGS`` in the background (the caller stops it)."""
    return subprocess.Popen([*CLI, *map(str, args)], cwd=ROOT, env=env or cli_env(), **popen)


def assert_one_line_error(result: subprocess.CompletedProcess, status: int, *fragments: str) -> None:
    """Failed with ``status`` and exactly one stderr line, ``twisted-broker: error: ...``."""
    err = result.stderr.decode()
    assert result.returncode == status, err
    assert err.startswith("twisted-broker: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err


def broker_list(*brokers) -> str:
    return ",".join(f"{broker.broker_id}:127.0.0.1:{broker.port}" for broker in brokers)


def lines(count: int, prefix: str = "line") -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(count)]


def group_rows(zk_connect: str, *args: object) -> list[list[str]]:
    """The rows of ``groups`` (header dropped), each split into its 7 columns."""
    result = run_cli("groups", "--zk", zk_connect, *args)
    assert result.returncode == 0, result.stderr.decode()
    rows = [line.split() for line in result.stdout.decode().splitlines()]
    assert rows[0] == ["GROUP", "TOPIC", "PID", "OFFSET", "LOGSIZE", "LAG", "OWNER"]
    return rows[1:]
