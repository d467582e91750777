"""Issue 23's short scale test: `make scale`'s short form (200 partitions at factor 3 on three
brokers, bench/scale.py) run whole against real brokers and a real ZooKeeper, and its figures
checked against the issue's bounds.

The bounds are liveness at scale, not speed goals (those are the benchmark's, `make scale`):
what this guards against is the code as issue 23 found it, where losing a broker that led a
fifth of the partitions left them offline for minutes. Each bound is the issue's, doubled
because the suite runs beside other tests on two cores: every partition led by a live in-sync
replica within the session timeout + 5 s after a kill -9 or a session expiry (x2), a
controlled shutdown done in 5 s (x2) with no leadership left, and every partition led 10 s
after CreateTopics (x2). That acks=all writes are acknowledged again on every partition is
checked within the bench's own bound (60 s): the issue's 10 s is not met yet in this short
form (about 11 partitions a second: see bench/results/scale-baseline.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SESSION_S = 6.0  # zk.sessiontimeout.ms of bench/scale_cluster.py
SLACK = 2.0


def test_two_hundred_partitions_fail_over_and_shut_down_within_the_bounds(tmp_path):
    out = tmp_path / "scale.json"
    bench = subprocess.Popen([sys.executable, "-m", "bench.scale", "--partitions", "200", "--brokers", "3",
                              "--topics", "20", "--idle-seconds", "2", "--out", str(out)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = bench.communicate(timeout=270)
    except subprocess.TimeoutExpired:
        bench.terminate()  # SIGTERM: the bench stops its brokers and ZooKeeper, then exits
        output, _ = bench.communicate(timeout=25)
        raise AssertionError(f"the short scale run outlasted 270 s:\n{output[-3000:]}") from None
    assert bench.returncode == 0 and out.exists(), output[-3000:]
    result = json.loads(out.read_text())
    assert "error" not in result, result["error"]
    phases = result["phases"]
    create = phases["create"]
    assert create["create_topics"]["answered_within_timeout"]
    assert create["all_led"]["s"] is not None and create["all_led"]["s"] <= 10 * SLACK, create["all_led"]
    for name in ("kill9", "session_expiry"):
        phase = phases[name]
        led = phase["all_led_in_sync"]["s"]
        assert led is not None and led <= (SESSION_S + 5) * SLACK, (name, phase["all_led_in_sync"])
        acked = phase["acks_again"]
        assert acked["acked"] == acked["of"], (name, acked)
        assert phase["recovery"]["s"] is not None, (name, phase["recovery"])
    shutdown = phases["controlled_shutdown"]
    assert not shutdown["killed_at_bound"] and shutdown["leaderships_left_at_exit"] == 0, json.dumps(shutdown)
    assert shutdown["exit_s"] <= 5 * SLACK, shutdown
    # The controller answered (a broker that gives up waiting logs "no answer from the controller").
    assert any("leaderships moved away" in line for line in shutdown["log"]), json.dumps(shutdown)
