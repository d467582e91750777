"""bench/peers/report.py's targets: issue 24's produce b1 against Redis Streams."""

from bench.peers.report import targets


def test_produce_b1_is_met_at_redis_streams_rate_and_not_below_it():
    systems = {"twisted_broker": {"produce_b1": 50_000}, "redis": {"produce_b1": 50_000}, "nats": {"produce_b1": 90_000}}
    row = targets(systems)["produce_b1"]
    assert (row["met"], row["ratio"], row["best_peer"]) == (True, 1.0, "redis")  # Redis's, not the best peer's
    systems["twisted_broker"]["produce_b1"] = 49_999
    assert not targets(systems)["produce_b1"]["met"]


def test_produce_b1_without_redis_is_not_met():
    assert targets({"twisted_broker": {"produce_b1": 50_000}})["produce_b1"]["met"] is False
