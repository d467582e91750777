"""bench/proc_sample.py's parsers: the fields proc(5) documents, from golden texts."""

from bench.proc_sample import ProcessSample, stat_cpu_ticks, status_switches

# /proc/<pid>/stat of a process whose name holds a space and a ')': utime 1234, stime 567.
STAT = ("4242 (twistd ) x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 "
        "1234 567 0 0 20 0 3 0 100 200000000 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")

STATUS = """Name:\ttwistd
State:\tS (sleeping)
Threads:\t3
voluntary_ctxt_switches:\t1500
nonvoluntary_ctxt_switches:\t42
"""


def test_cpu_ticks_are_utime_plus_stime_counted_after_the_last_parenthesis():
    assert stat_cpu_ticks(STAT) == 1234 + 567


def test_switches_are_read_by_name():
    assert status_switches(STATUS) == (1500, 42)


def test_a_status_without_the_fields_reads_zero():
    assert status_switches("Name:\tx\n") == (0, 0)


def test_since_subtracts_field_by_field_and_switches_add_both_kinds():
    used = ProcessSample(3.5, 0.5, 110, 12).since(ProcessSample(1.0, 0.25, 100, 2))
    assert used == ProcessSample(2.5, 0.25, 10, 10)
    assert used.switches == 20
