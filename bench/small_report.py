"""The report of issue 24's small-request rows (bench/small_requests.py): the table printed,
``small-<date>.json`` under bench/results/, and the section "Small requests (issue 24)" of
bench/results/latest.md, replaced in place (bench/paper.py rewrites the rest of that file and
keeps this section).
"""

from __future__ import annotations

import json
from pathlib import Path

SMALL_HEADING = "## Small requests (issue 24)"
TAIL_HEADING = "## Tail latency (issue 24)"  # bench/tail.py's section


def replace_section(text: str, heading: str, section: str) -> str:
    """``text`` with the section that starts at the line ``heading`` (up to the next line
    starting with ``## ``, or the end) replaced by ``section``; appended if there is none."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == heading), None)
    section = section.rstrip("\n") + "\n"
    if start is None:
        body = "".join(lines).rstrip("\n")
        return (body + "\n\n" if body else "") + section
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + tail if tail else "")


def section_of(text: str, heading: str) -> str:
    """The section of ``text`` that starts at the line ``heading`` ("" if none)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == heading), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "".join(lines[start:end]).rstrip("\n") + "\n"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _ratio(row: dict) -> str:
    return "-" if row.get("ratio") is None else f"{row['ratio']:.2f}x"


def _extra(row: dict) -> str:
    broker, floor = row["broker"], row["floor"]
    notes = []
    if "rtt_p50_us" in broker:
        notes.append(f"round trip p50 {broker['rtt_p50_us']:,.0f} / {floor['rtt_p50_us']:,.0f} µs")
    if "latency_p50_ms" in broker:
        notes.append(f"latency p50 {broker['latency_p50_ms']:.2f} / {floor['latency_p50_ms']:.2f} ms, "
                     f"p99 {broker['latency_p99_ms']:.2f} / {floor['latency_p99_ms']:.2f} ms, messages per "
                     f"Fetch answer {broker['messages_per_fetch_answer']:.1f} / {floor['messages_per_fetch_answer']:.1f}")
    if broker.get("children_cpu_us", 0) >= 0.05:
        notes.append(f"fsync process {broker['children_cpu_us']:.1f} µs")
    if broker["all_cpu_us"] - broker["cpu_us"] - broker.get("children_cpu_us", 0) > 0.05:
        notes.append(f"all brokers {broker['all_cpu_us']:,.1f} µs")
    return "; ".join(notes)


def markdown(result: dict) -> str:
    load = result["load_average_at_start"]
    lines = [SMALL_HEADING, "",
             f"Measured {result['date'][:10]} (`python -m bench small`, bench/small_requests.py; load average "
             f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, 2 cores shared with other work: "
             "the ratios within the run are what count). CPU is the measured process's utime + stime "
             "(all threads, /proc) per request, or per message delivered for the two fetch rows; the floor "
             "is bench/small_floor.py, a bare Twisted server (epoll reactor, `Int32StringReceiver`) that "
             "frames the same requests, appends their payload to a file and answers where an answer is due. "
             "Switches: the process's context switches (voluntary + involuntary, its live threads) per "
             "request: its wakes. Broker / floor in the notes.", "",
             "| row | requests | broker µs/req | floor µs/req | ratio | broker switches/req | floor switches/req "
             "| load at start | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"].values():
        broker, floor = row["broker"], row["floor"]
        lines.append(f"| {row['label']} | {broker['requests']:,} | {_us(broker['cpu_us'])} | {_us(floor['cpu_us'])} "
                     f"| {_ratio(row)} | {broker['switches']:.2f} | {floor['switches']:.2f} "
                     f"| {row['load_average_at_start'][0]:.2f} | {_extra(row)} |")
    return "\n".join(lines) + "\n"


def print_table(result: dict) -> None:
    load = result["load_average_at_start"]
    print(f"\nsmall requests (issue 24), load average {load[0]:.2f} at the start; CPU µs per request")
    print(f"{'':62} {'broker':>9} {'floor':>8} {'ratio':>7} {'sw/req':>7} {'floor sw':>8} {'load':>5}")
    for row in result["rows"].values():
        broker, floor = row["broker"], row["floor"]
        print(f"{row['label'][:62]:62} {broker['cpu_us']:9.1f} {floor['cpu_us']:8.1f} {_ratio(row):>7} "
              f"{broker['switches']:7.2f} {floor['switches']:8.2f} {row['load_average_at_start'][0]:5.2f}")
        if _extra(row):
            print(f"{'':4}{_extra(row)}")


def write_results(result: dict, output: Path) -> None:
    """``small-<date>.json`` and the section of ``latest.md`` (created if missing)."""
    output.mkdir(parents=True, exist_ok=True)
    (output / f"small-{result['date'][:10]}.json").write_text(json.dumps(result, indent=2) + "\n")
    latest = output / "latest.md"
    old = latest.read_text() if latest.exists() else ""
    latest.write_text(replace_section(old, SMALL_HEADING, markdown(result)))
    print(f"wrote {output}/small-{result['date'][:10]}.json and the section of latest.md")
