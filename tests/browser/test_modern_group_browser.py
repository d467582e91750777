"""A group of Kafka clients in the console, in a real headless Chromium: kafka-python consumes
in a group on the broker's modern listener; the groups list marks it, and its page shows the
member from the coordinator, the partitions it owns and the lag, refreshed in place."""

from __future__ import annotations

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.console_process import ConsoleProcess, kind_shown
from tests.support.polling import wait_for
from tests.support.zookeeper import new_chroot

pytestmark = pytest.mark.browser


def test_the_members_and_lag_of_a_kafka_clients_group(zookeeper, tmp_path, watched, artifacts):
    from kafka import KafkaConsumer, KafkaProducer

    zk_connect = new_chroot(zookeeper)
    broker = BrokerProcess(tmp_path / "b0", zk_connect=zk_connect, extra_args=[
        "--kafka-endpoint", "tcp:0:interface=127.0.0.1", "--kafka-port-file", "kafka-port"]).start()
    console = member = None
    try:
        bootstrap = f"127.0.0.1:{int((broker.directory / 'kafka-port').read_text())}"
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
        for i in range(20):
            producer.send("views", value=b"view %d" % i)
        producer.flush()
        member = KafkaConsumer("views", bootstrap_servers=bootstrap, group_id="kg", auto_offset_reset="earliest",
                               enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=1000)
        read = []
        wait_for(lambda: read.extend(r for rs in member.poll(timeout_ms=200).values() for r in rs) or len(read) == 20,
                 "every record read", timeout_s=30)
        member.commit()
        member_id = member._coordinator._generation.member_id  # noqa: SLF001 (kafka-python keeps it there)
        console = ConsoleProcess(tmp_path / "console", zk_connect, "--refresh", "1",
                                 "--lag-sample-interval", "1").start()
        wait_for(lambda: kind_shown(console, "kg") == "kafka",
                 "the console to read the group and the listeners from the registry")
        page = watched.page
        page.goto(f"http://127.0.0.1:{console.port}/groups")
        page.wait_for_selector("#groups")
        assert page.locator("#groups [data-health]").first.get_attribute("data-health") == "kafka"
        page.screenshot(path=str(artifacts / "1-groups.png"), full_page=True)
        page.click("a.group-link")
        page.wait_for_selector("#members")
        assert page.locator("#coordinator-state").inner_text() == "Stable"
        assert page.locator("#members code").first.inner_text() == member_id
        assert page.locator("#partitions code").first.inner_text() == member_id  # the owner of views 0-0
        assert int(page.get_attribute("#total-lag", "data-offsets")) == 0
        page.screenshot(path=str(artifacts / "2-group-caught-up.png"), full_page=True)
        for i in range(5):
            producer.send("views", value=b"later %d" % i)
        producer.flush()
        producer.close()
        # live.js refreshes the page's data every second, without reloading the page.
        wait_for(lambda: int(page.get_attribute("#total-lag", "data-offsets")) > 0, "the lag to show", timeout_s=20)
        page.screenshot(path=str(artifacts / "3-group-lagging.png"), full_page=True)
        assert watched.console_errors == [] and watched.dialogs == []
    finally:
        if member is not None:
            member.close()
        if console is not None:
            console.stop()
        broker.stop()
