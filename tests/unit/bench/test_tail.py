"""bench/tail.py's pure parts: medians over rounds, the Markdown section, whose processes count."""

from types import SimpleNamespace

from bench.small_report import TAIL_HEADING, section_of
from bench.tail import FIGURES, markdown, server_pids, summarize


def figures(p99: float, cpu: float = 100.0) -> dict:
    return {name: 1.0 for name in FIGURES} | {"p99_ms": p99, "cpu_us_per_message": cpu}


def test_each_figure_is_the_median_of_the_rounds_and_the_rounds_are_kept():
    rounds = [figures(5.0, 90), figures(1.0, 300), figures(2.0, 100)]
    row = summarize({"redis": rounds, "nats": []})["redis"]
    assert (row["p99_ms"], row["cpu_us_per_message"], row["rounds"]) == (2.0, 100, rounds)
    assert "nats" not in summarize({"nats": []})  # a system that failed every round has no row


def test_the_section_lists_the_systems_in_order_with_each_rounds_p99_and_the_loads():
    systems = summarize({"redis": [figures(1.5)], "twisted_broker": [figures(3.0), figures(4.0)]})
    systems["twisted_broker"]["label"] = "twisted_broker"
    text = markdown({"date": "2026-12-07T10:00:00+00:00", "latency_rate": 5000, "latency_messages": 25000,
                     "rounds": 2, "load_average_per_round": [0.5, 1.25], "systems": systems,
                     "notes": {"nats": ["server did not start"]}})
    assert section_of(text, TAIL_HEADING) == text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[0] for row in rows] == ["| twisted_broker", "| redis"]
    assert rows[0].endswith("| 3.00, 4.00 |") and "0.50, 1.25" in text and "nats: server did not start" in text


def test_a_cluster_counts_every_broker_and_a_server_its_own_process():
    process = lambda pid: SimpleNamespace(pid=pid)  # noqa: E731
    cluster = SimpleNamespace(brokers=[SimpleNamespace(process=process(pid)) for pid in (11, 12, 13)], pid=11)
    assert server_pids(cluster) == [11, 12, 13]
    assert server_pids(SimpleNamespace(pid=7, process=process(99))) == [7]
    assert server_pids(SimpleNamespace(process=process(5))) == [5]


def test_make_run_rows_take_their_flush_policy_from_etc_server_properties():
    from bench.peers.tbroker_defaults import SERVER_PROPERTIES, make_run_settings
    from twisted_broker.properties import read_properties

    settings, properties = make_run_settings(), read_properties(SERVER_PROPERTIES)
    assert settings["log.flush.interval"] == properties["log.flush.interval"]
    assert settings["log.default.flush.interval.ms"] == properties["log.default.flush.interval.ms"]
    assert "port" not in settings and "log.dir" not in settings and "zk.connect" not in settings
