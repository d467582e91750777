"""bench/scale_report.py: the table of a scale run, including one that failed before its first
phase (its error was lost to a ValueError from print_table's empty rows)."""

from bench.scale_report import print_table, table


def test_a_run_that_failed_before_any_phase_prints_its_error(capsys):
    print_table(table({"error": "TimeoutError('ZooKeeper did not start')", "phases": {}}))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["figure", "value", "target"]
    assert lines[2].startswith("run: FAILED") and "ZooKeeper did not start" in lines[2]


def test_a_failed_phase_is_a_row_after_the_runs_error():
    rows = table({"error": "AssertionError('x')", "phases": {"create": {"error": "no answer"}}})
    assert rows[:2] == [("run: FAILED", "AssertionError('x')", ""), ("create: FAILED", "no answer", "")]
