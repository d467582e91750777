"""The scale benchmark's report (bench/scale.py): its figures as a table beside issue 23's targets.

A wait's figure is its seconds, or "missed" with how far it got at its bound.
"""

from __future__ import annotations

from bench.scale_cluster import ZK_SESSION_TIMEOUT_MS

def _wait(figure: dict | None) -> str:
    if not figure:
        return "-"
    if figure.get("s") is not None:
        return f"{figure['s']:.1f} s"
    return f"missed: {figure['got']}/{figure['of']} at {figure['bound_s']:.0f} s"


def _secs(value, missed: str = "missed") -> str:
    return f"{value:.1f} s" if value is not None else missed


def table(result: dict) -> list[tuple[str, str, str]]:
    """(figure, value, issue 23's target) rows."""
    phases, rows = result.get("phases", {}), []
    session_s = ZK_SESSION_TIMEOUT_MS / 1000
    if "error" in result:  # first: a run that failed before its first phase has no other row
        rows.append(("run: FAILED", result["error"][:300], ""))
    for name, phase in phases.items():
        if "error" in phase:
            rows.append((f"{name}: FAILED", phase["error"][:90], ""))
    if "s" in phases.get("start", {}):
        rows.append(("start: ZooKeeper + brokers seeing each other", _secs(phases["start"]["s"]), ""))
    create = phases.get("create", {})
    if "create_topics" in create:
        answer = create["create_topics"]
        rows.append(("create: CreateTopics answered", _secs(answer["answered_s"], f"not within "
                     f"{answer['request_timeout_s']:.0f} s") + (f" {answer['topic_errors']}" if answer["topic_errors"] else ""),
                     "within its timeout"))
        rows.append(("create: every partition led", _wait(create["all_led"]), "<= 10 s"))
        rows.append(("create: every ISR full", _wait(create["all_isr_full"]), ""))
    for broker, f in phases.get("idle", {}).get("brokers", {}).items():
        rows.append((f"idle: broker {broker} ({f['in_sync_replicas']} replicas, {f['leaderships']} leading)",
                     f"{f['cores']:.3f} cores (+{f['children_cores']:.3f}), {f['rss_mib']:.0f} MiB, {f['fds']} fds",
                     "<= 0.02 cores"))
    if "zookeeper_cores" in phases.get("idle", {}):
        idle = phases["idle"]
        rows.append(("idle: ZooKeeper / whole machine", f"{idle['zookeeper_cores']:.3f} / "
                     f"{idle['machine_busy_cores']:.2f} cores", ""))
    pc = phases.get("produce_consume", {})
    if "produce" in pc:
        rows.append(("produce: 1 acks=all record per partition", _secs(pc["produce"]["all_acked_s"],
                     f"missed: {pc['produce']['acked']}/{pc['produce']['of']}"), ""))
        rows.append(("consume: all of them", _secs(pc["consume"]["all_consumed_s"],
                     f"missed: {pc['consume']['partitions_complete']}/{result['partitions']}"), ""))
    for name, how in (("kill9", "kill -9"), ("session_expiry", "SIGSTOP")):
        f = phases.get(name, {})
        if "all_led_in_sync" not in f:
            continue
        rows.append((f"{how}: broker {f['victim']} leading {f['victim_leaderships']}"
                     + (" (the controller)" if f["victim"] == f["controller_before"] else ""),
                     f"registration gone {_secs(f.get('registration_gone_s'), 'never')}", ""))
        rows.append((f"{how}: every partition led by a live ISR member", _wait(f["all_led_in_sync"]),
                     f"<= {session_s + 5:.0f} s"))
        acks = f["acks_again"]
        rows.append((f"{how}: acks=all acknowledged on every partition", _secs(acks["all_acked_s"],
                     f"missed: {acks['acked']}/{acks['of']}") + (f" ({acks['after_all_led_s']:.1f} s after led)"
                                                                 if acks["after_all_led_s"] is not None else ""),
                     "<= 10 s after led"))
        rows.append((f"{how}: back, every ISR full", _wait(f["recovery"]), ""))
    f = phases.get("controlled_shutdown", {})
    if "victim" in f and "exit_s" in f:
        rows.append((f"controlled shutdown: broker {f['victim']} leading {f['victim_leaderships']}",
                     _secs(f["exit_s"], f"killed at {f['bound_s']:.0f} s") + f", {f['leaderships_left_at_exit']} left",
                     "<= 5 s"))
        rows.append(("controlled shutdown: every partition led again", _wait(f["all_led_in_sync"]), ""))
    return rows


def print_table(rows) -> None:
    header = ("figure", "value", "target")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(3)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
