"""The output of bench/paper.py: the terminal table (each peer's figure and twisted_broker's
ratio to it), the Markdown table, the chart, issue 6/7's targets, and py-spy profile summaries.
Everything here works on the result dict that paper.py writes as JSON, so a saved result can be
shown again: ``python -c "import json; from bench.peers.report import print_report;
print_report(json.load(open('bench/results/latest.json')))"``.
"""

from __future__ import annotations

import collections
from pathlib import Path

from bench.peers.harness import LATENCY_RATE, MESSAGE_BYTES

TB = "twisted_broker"
TB_RF3 = "twisted_broker_rf3"  # the same with replication factor 3: a column beside it, not a peer
OURS = (TB, TB_RF3)
RF3_RATIO = "rf=3 / rf=1"

# (key, label, unit, higher is better)
METRICS = [
    ("produce_b1", "produce, 1 message per send", "msgs/s", True),
    ("produce_b50", "produce, batches of 50", "msgs/s", True),
    ("consume", "consume a backlog of n", "msgs/s", True),
    ("bytes_per_msg", "disk bytes per 200-byte message", "bytes", False),
    ("p50_ms", f"latency p50 at {LATENCY_RATE:,} msgs/s", "ms", False),
    ("p99_ms", f"latency p99 at {LATENCY_RATE:,} msgs/s", "ms", False),
]
EXTRA_METRICS = [
    ("produce_gzip_b50", "produce, gzip batches of 50", "msgs/s"),
    ("bytes_per_msg_gzip", "disk bytes per message, gzip batches", "bytes"),
    ("produce_async", "async producer (batch.size 50), 1 per send()", "msgs/s"),
    ("consume_hl", "high-level (ZooKeeper) consumer", "msgs/s"),
    ("fetch_MBps", "fetch, 1 MiB requests (loadgen client)", "MB/s"),
    ("sendfile_MBps", "raw os.sendfile loopback, same client", "MB/s"),
    ("fsync_floor_p50_ms", "fsync floor p50: append -> fdatasync, no broker", "ms"),
    ("fsync_floor_p99_ms", "fsync floor p99 (same disk, same rate)", "ms"),
]
RF3_EXTRA_METRICS = [
    ("produce_b50_acks1", "produce, batches of 50, acks=1 (leader's append)", "msgs/s"),
    ("produce_b50_sent", "produce b50 acks=all, rate of the writes alone", "msgs/s"),
]


def targets(systems: dict) -> dict:
    """Issue 6/7's done-when, issue 15's (factor 3 against factor 1) and issue 24's produce b1
    against Redis Streams, from the medians (None where a figure is missing)."""
    ours = systems.get(TB, {})
    peers = {key: value for key, value in systems.items() if key not in OURS}

    def best(name: str, highest: bool):
        values = [(value[name], key) for key, value in peers.items() if name in value]
        return (max if highest else min)(values) if values else (None, None)

    result = {}
    for name, factor in (("produce_b50", 2.0), ("consume", 2.0)):
        peer_value, peer_key = best(name, True)
        mine = ours.get(name)
        result[name] = {"target": f">= {factor:g}x the best peer", "best_peer": peer_key, "best_peer_value": peer_value,
                        "value": mine, "ratio": mine / peer_value if mine and peer_value else None,
                        "met": bool(mine and peer_value and mine >= factor * peer_value)}
    redis, mine = systems.get("redis", {}).get("produce_b1"), ours.get("produce_b1")
    result["produce_b1"] = {"target": ">= 1x Redis Streams' (issue 24)", "best_peer": redis and "redis",
                            "best_peer_value": redis, "value": mine, "ratio": mine / redis if mine and redis else None,
                            "met": bool(mine and redis and mine >= redis)}
    mine = ours.get("bytes_per_msg")
    result["bytes_per_msg"] = {"target": f"<= {MESSAGE_BYTES + 10} (payload + 10)", "value": mine,
                               "met": mine is not None and mine <= MESSAGE_BYTES + 10}
    peer_value, peer_key = best("p99_ms", False)
    mine = ours.get("p99_ms")
    result["p99_ms"] = {"target": "<= the best peer's", "best_peer": peer_key, "best_peer_value": peer_value,
                        "value": mine, "met": bool(mine is not None and peer_value is not None and mine <= peer_value)}
    if TB_RF3 not in systems:
        return result
    replicated = systems[TB_RF3]
    for name in ("produce_b50", "consume"):
        mine, single = replicated.get(name), ours.get(name)
        ratio = mine / single if mine and single else None
        result[f"rf3_{name}"] = {"target": ">= 0.4x factor 1", "factor_1": single, "value": mine, "ratio": ratio,
                                 "met": bool(ratio and ratio >= 0.4)}
    mine = replicated.get("p99_ms")
    result["rf3_p99_ms"] = {"target": "<= 2 ms (committed)", "factor_1": ours.get("p99_ms"), "value": mine,
                            "met": mine is not None and mine <= 2.0}
    result["rf3_p99_ms_goal"] = {"target": "<= the best peer's", "best_peer": peer_key,
                                 "best_peer_value": peer_value, "value": mine,
                                 "met": bool(mine is not None and peer_value is not None and mine <= peer_value)}
    return result


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:,.2f}"
    if unit in ("bytes", "MB/s"):
        return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    return f"{value:,.0f}"


def _ratio(mine, other) -> str:
    return f"{mine / other:.2f}x" if mine and other else "-"


def table_rows(systems: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the comparison: each peer's figure and twisted_broker's ratio to it;
    factor 3 (when measured) beside factor 1, with its ratio to it."""
    peers = [key for key in systems if key not in OURS]
    header = ["", systems.get(TB, {}).get("label", TB)]
    if TB_RF3 in systems:
        header += [systems[TB_RF3].get("label", TB_RF3), RF3_RATIO]
    for key in peers:
        header += [systems[key].get("label", key), "tb ratio"]
    rows = []
    for name, label, unit, _higher in METRICS:
        ours = systems.get(TB, {}).get(name)
        row = [f"{label} ({unit})", _fmt(ours, unit)]
        if TB_RF3 in systems:
            replicated = systems[TB_RF3].get(name)
            row += [_fmt(replicated, unit), _ratio(replicated, ours)]
        for key in peers:
            value = systems[key].get(name)
            row += [_fmt(value, unit), _ratio(ours, value)]
        rows.append(row)
    return header, rows


def print_report(result: dict) -> None:
    systems = result["systems"]
    header, rows = table_rows(systems)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print(f"\npaper: {MESSAGE_BYTES}-byte messages, n={result['n']:,}, median of {result['rounds']} rounds, "
          f"latency at {LATENCY_RATE:,} msgs/s over {result['latency_messages']:,} messages; "
          f"load average {' '.join(f'{x:.2f}' for x in result['load_average'])}")
    print(f"machine: {result['machine']}")
    print("tb ratio = twisted_broker / peer (for bytes and latency lower is better)")
    if TB_RF3 in systems:
        print(f"{RF3_RATIO} = twisted_broker with replication factor 3 (3 brokers, committed visibility) / factor 1 "
              "(fsynced visibility); its disk bytes count all 3 copies")
    for row in [header, *rows]:
        cells = (cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths)))
        print("  ".join(cells))
    ours = systems.get(TB, {})
    print("\ntwisted_broker also:")
    for name, label, unit in EXTRA_METRICS:
        if name in ours:
            print(f"  {label:48} {_fmt(ours[name], unit):>10} {unit}")
    if "fetch_vs_sendfile" in ours:
        print(f"  {'fetch / raw os.sendfile':48} {ours['fetch_vs_sendfile']:>10.2f} x")
    replicated = systems.get(TB_RF3, {})
    if any(name in replicated for name, *_ in RF3_EXTRA_METRICS):
        print("\ntwisted_broker rf=3 also:")
        for name, label, unit in RF3_EXTRA_METRICS:
            if name in replicated:
                print(f"  {label:48} {_fmt(replicated[name], unit):>10} {unit}")
    print("\nsettings:")
    for key, entry in systems.items():
        for name, text in entry.get("settings", {}).items():
            print(f"  {key:15} {name:18} {text}")
    for key, entry in systems.items():
        for note in entry.get("notes", []):
            print(f"  NOTE {key}: {note}")
        rate = entry.get("latency_rate")
        if rate is not None and rate < 0.95 * LATENCY_RATE:
            print(f"  NOTE {key}: the latency producer reached only {rate:,.0f} msgs/s")
    print("\ntargets (issue 6/7; rf3_*: issue 15; produce_b1: issue 24):")
    for name, target in result["targets"].items():
        value = target.get("value")
        extra = ""
        if target.get("best_peer"):
            extra = f", best peer {target['best_peer']} {target['best_peer_value']:,.2f}"
        if target.get("factor_1") is not None:
            extra += f", factor 1 {target['factor_1']:,.2f}"
        if target.get("ratio") is not None:
            extra += f", ratio {target['ratio']:.2f}"
        shown = f"{value:,.2f}" if value is not None else "-"
        print(f"  {name:18} {target['target']:28} {'met' if target['met'] else 'NOT met':8} ({shown}{extra})")


def markdown(result: dict) -> str:
    header, rows = table_rows(result["systems"])
    load = result.get("load_average_at_start") or result["load_average"]
    lines = [f"Measured {result['date'][:10]} on {result['machine']} (load average {load[0]:.1f} at the start); "
             f"{MESSAGE_BYTES}-byte messages, n={result['n']:,}, median of {result['rounds']} rounds "
             "(`make bench`, bench/paper.py). "
             "tb ratio = twisted_broker / peer; for bytes and latency lower is better."
             + (f" {RF3_RATIO}: twisted_broker with replication factor 3 (three brokers here, visible once "
                "committed) / factor 1 (visible once fsynced); its disk bytes count all three copies."
                if TB_RF3 in result["systems"] else ""),
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    ours = result["systems"].get(TB, {})
    extras = [f"{label}: {_fmt(ours[name], unit)} {unit}" for name, label, unit in EXTRA_METRICS if name in ours]
    if extras:
        lines += ["", "twisted_broker also: " + "; ".join(extras) + "."]
    replicated = result["systems"].get(TB_RF3, {})
    extras = [f"{label}: {_fmt(replicated[name], unit)} {unit}" for name, label, unit in RF3_EXTRA_METRICS
              if name in replicated]
    if extras:
        lines += ["", "twisted_broker rf=3 also: " + "; ".join(extras) + "."]
    return "\n".join(lines) + "\n"


def chart(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    systems = result["systems"]
    keys = [key for key in systems if any(name in systems[key] for name, *_ in METRICS)]
    labels = [systems[key].get("label", key) for key in keys]
    colors = [{TB: "#d62728", TB_RF3: "#ff7f0e"}.get(key, "#7f7f7f") for key in keys]
    figure, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for axis, (name, label, unit, higher) in zip(axes.flat, METRICS):
        values = [systems[key].get(name, 0) or 0 for key in keys]
        bars = axis.bar(range(len(keys)), values, color=colors)
        axis.set_title(f"{label}\n({unit}, {'higher' if higher else 'lower'} is better)", fontsize=10)
        axis.set_xticks(range(len(keys)), labels, rotation=20, ha="right", fontsize=9)
        axis.bar_label(bars, [_fmt(systems[key].get(name), unit) for key in keys], fontsize=8)
        positive = [value for value in values if value > 0]
        if unit == "ms" and positive and max(positive) > 20 * min(positive):
            axis.set_yscale("log")  # one slow peer would flatten the others
            axis.set_title(f"{label}\n({unit}, log scale, lower is better)", fontsize=10)
            axis.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _pos: f"{y:g}"))
            axis.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        else:
            # Thousands separators for rates; decimals where the axis spans only a few units.
            axis.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
                lambda y, _pos: f"{y:,.0f}" if abs(y) >= 10 or y == int(y) else f"{y:g}"))
            axis.margins(y=0.15)
    load = result.get("load_average_at_start") or result["load_average"]
    figure.suptitle(f"twisted_broker vs the peers, {MESSAGE_BYTES}-byte messages, n={result['n']:,}, "
                    f"median of {result['rounds']} rounds — {result['date'][:16].replace('T', ' ')} UTC, "
                    f"load average at start {load[0]:.1f}\n{result['machine']}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def summarize_profile(path: str, top: int = 12) -> list[str]:
    """The hottest functions of a py-spy raw (collapsed) profile: by own samples, and by
    inclusive samples (the entry points of the process left out)."""
    own: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    total = 0
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        return [f"(no profile: {exc})"]
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        count = int(count)
        # "function (file:line)" -> "function (file)": a function's lines add up
        frames = [frame.rsplit(":", 1)[0] + ")" if frame.endswith(")") and ":" in frame else frame
                  for frame in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        return ["0 samples"]
    out = [f"{total} samples"]
    out += [f"  own {100 * c / total:5.1f}%  {frame}" for frame, c in own.most_common(top)]
    # Inclusive: the project's own functions only (the reactor's and the interpreter's frames
    # hold nearly every sample and say nothing).
    hot = [(frame, c) for frame, c in inclusive.most_common() if "twisted_broker/" in frame][:top]
    out += [f"  incl {100 * c / total:5.1f}%  {frame}" for frame, c in hot]
    return out
