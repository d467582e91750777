"""The admin console in a real headless Chromium: follow the links a user follows, see a hostile
payload stay inert, and watch a group's lag shrink as its consumer catches up.

A ZooKeeper, one broker and a standalone console (refreshing its pages every second, sampling
lag every second); the consumer is the real ZooKeeper consumer in a process of its own, slowed
down so that its catching up takes a few seconds. Screenshots: tests/browser/artifacts/.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from tests.support.brokers import BrokerProcess
from tests.support.console_process import ConsoleProcess
from tests.support.polling import wait_for
from tests.support.webui_cluster import member_events, produce, start_member, stop_process
from tests.support.zookeeper import new_chroot
from twisted_broker.codec.kafka07.message_set import encode_message_set

pytestmark = pytest.mark.browser

HOSTILE_PAYLOADS = [b"<script>window.__pwned = 'script'; alert('script')</script>",
                    b"<img src=x onerror=\"window.__pwned = 'img'; alert('img')\">"]
MESSAGES = 240


@pytest.fixture(scope="module")
def site(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("browser")
    zk_connect = new_chroot(zookeeper)
    broker = BrokerProcess(base / "b0", broker_id=0, zk_connect=zk_connect).start()
    console = None
    kazoo = KazooClient(hosts=zk_connect)
    kazoo.start(10)
    try:
        produce(broker, "clicks", 0, encode_message_set([b"click %03d " % i + b"." * 80 for i in range(MESSAGES)]))
        produce(broker, "clicks", 0, encode_message_set(HOSTILE_PAYLOADS))
        kazoo.create("/consumers/slow/offsets/clicks/0-0", b"0", makepath=True)  # consume from the start
        console = ConsoleProcess(base / "console", zk_connect, "--refresh", "1", "--lag-sample-interval", "1").start()

        def flushed() -> bool:
            response = console.get("/api/topics/clicks")
            return response.status == 200 and response.json()["partitions"][0]["latest"] > 0
        wait_for(flushed, "the console to see the messages")
        yield {"url": f"http://127.0.0.1:{console.port}", "zk_connect": zk_connect, "base": base, "console": console}
    finally:
        if console is not None:
            console.stop()
        broker.stop()
        kazoo.stop()
        kazoo.close()


def test_follow_a_topic_to_its_messages_where_a_hostile_payload_stays_inert(site, watched, artifacts):
    page = watched.page
    page.goto(site["url"] + "/")
    page.wait_for_selector("#topics")
    assert page.inner_text("#total-brokers") == "1"
    page.screenshot(path=str(artifacts / "1-overview.png"), full_page=True)

    page.click("a.topic-link:text-is('clicks')")
    page.wait_for_selector("#partitions")
    assert "Topic clicks" in page.inner_text("h1")
    assert page.inner_text("#partitions tr[data-partition='0-0'] td.latest") != "unknown"
    page.screenshot(path=str(artifacts / "2-topic.png"), full_page=True)

    page.click("#partitions a.browse")
    page.wait_for_selector("#messages")
    payloads = page.locator("#messages pre.payload").all_inner_texts()
    assert payloads[-2:] == [p.decode() for p in HOSTILE_PAYLOADS]  # shown as text...
    assert page.evaluate("window.__pwned") is None  # ...never run
    assert page.locator("#messages img").count() == 0
    assert watched.dialogs == []
    page.screenshot(path=str(artifacts / "3-messages-newest.png"), full_page=True)

    page.click("#older")
    page.wait_for_selector("#newer")
    first_shown = page.locator("#messages tr.message td.num a").first.inner_text()
    assert int(first_shown) < int(page.get_attribute("#newer", "href").split("offset=")[1].split("&")[0])
    page.screenshot(path=str(artifacts / "4-messages-older.png"), full_page=True)
    assert watched.console_errors == []  # no CSP violation, no script error


def test_the_group_page_shows_the_lag_shrink_as_the_consumer_catches_up(site, watched, artifacts):
    out = site["base"] / "slow-member.out"
    member = start_member(site["zk_connect"], "slow", "clicks", "c1", out, "--delay-ms", "20",
                          "--commit-every", "2", "--fetch-size", "4096")
    try:
        wait_for(lambda: any(e["event"] == "ready" for e in member_events(out)), "the consumer to start",
                 timeout_s=30)
        page = watched.page
        page.goto(site["url"] + "/groups/slow")
        page.wait_for_selector("#partitions")
        loaded_at = page.get_attribute("#live", "data-refreshed")
        first = shown_lag(page)
        assert first > 0, "the consumer caught up before the page opened"
        page.screenshot(path=str(artifacts / "1-group-lagging.png"), full_page=True)
        # live.js refreshes the page's data every second, without reloading the page. (Polled
        # from here: Playwright's wait_for_function evaluates strings, which the CSP forbids.)
        wait_for(lambda: 0 < shown_lag(page) < first, "the lag to shrink", timeout_s=20)
        page.screenshot(path=str(artifacts / "2-group-catching-up.png"), full_page=True)
        wait_for(lambda: shown_lag(page) == 0, "the consumer to catch up", timeout_s=30)
        assert page.get_attribute("[data-health]", "data-health") == "ok"
        assert page.locator("#consumers code").first.inner_text() == "slow_c1"
        page.wait_for_selector("#lag-chart polyline.line")
        page.screenshot(path=str(artifacts / "3-group-caught-up.png"), full_page=True)
        wait_for(lambda: site["console"].api("/api/groups/slow")["history"][-1][1] == 0,
                 "a lag sample of 0 (one a second)")
        assert max(total for _t, total in site["console"].api("/api/groups/slow")["history"]) > 0
        assert page.get_attribute("#live", "data-refreshed") != loaded_at  # refreshed in place
        assert watched.console_errors == []
    finally:
        stop_process(member)


def shown_lag(page) -> int:
    return int(page.get_attribute("#total-lag", "data-bytes"))
