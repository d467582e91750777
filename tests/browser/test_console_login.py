"""The console behind its login, in a real headless Chromium (docs/security.md, "The console
and the debug port").

ZooKeeper, one broker, and a standalone console with ``--require-login`` (the login a console
beyond loopback asks for, here on 127.0.0.1), the authorizer on, ``--allow-admin-actions``.
Users are SCRAM users written by ``twisted-broker users``: ``root`` (a super user) and
``reader``, allowed Describe on topic ``shown`` and group ``stopped`` only. Topic ``hidden``
exists too, and the stopped group has offsets on both.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from tests.support.brokers import BrokerProcess
from tests.support.console_process import ConsoleProcess
from tests.support.polling import wait_for
from tests.support.webui_cluster import produce
from tests.support.zookeeper import new_chroot
from twisted_broker import cli
from twisted_broker.codec.kafka07.message_set import encode_message_set

pytestmark = pytest.mark.browser

PASSWORDS = {"root": "root-pw", "reader": "reader-pw"}


@pytest.fixture(scope="module")
def site(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("login")
    zk_connect = new_chroot(zookeeper)
    broker = BrokerProcess(base / "b0", broker_id=0, zk_connect=zk_connect).start()
    console = None
    kazoo = KazooClient(hosts=zk_connect)
    kazoo.start(10)
    try:
        for topic in ("shown", "hidden"):
            produce(broker, topic, 0, encode_message_set([b"a message of " + topic.encode()] * 3))
            kazoo.create(f"/consumers/stopped/offsets/{topic}/0-0", b"0", makepath=True)
        for user, password in PASSWORDS.items():
            assert cli.main(["users", "--zk", zk_connect, "--add", user, "--mechanism", "SCRAM-SHA-256",
                             "--password", password]) == 0
        for resource in (["--topic", "shown"], ["--group", "stopped"]):
            assert cli.main(["acls", "--zk", zk_connect, "--add", "--allow-principal", "User:reader",
                             "--operation", "Describe", *resource]) == 0
        console = ConsoleProcess(base / "console", zk_connect, "--require-login", "--allow-admin-actions",
                                 "--authorizer-class-name", "kafka.security.authorizer.AclAuthorizer",
                                 "--super-users", "User:root", "--refresh", "0").start()
        url = f"http://127.0.0.1:{console.port}"
        yield {"url": url, "console": console, "kazoo": kazoo}
    finally:
        if console is not None:
            console.stop()
        broker.stop()
        kazoo.stop()
        kazoo.close()


def log_in(page, url: str, user: str, password: str, path: str = "/") -> None:
    page.goto(url + path)
    page.wait_for_selector("form#login")
    page.fill("input[name=user]", user)
    page.fill("input[name=password]", password)
    page.click("form#login button[type=submit]")


def test_without_a_session_every_page_leads_to_the_login_and_the_api_answers_401(site, watched):
    page = watched.page
    for path in ("/", "/groups", "/topics/shown", "/groups/stopped", "/brokers/0"):
        page.goto(site["url"] + path)
        assert page.url.startswith(site["url"] + "/login?next="), path
        assert page.locator("form#login").count() == 1
    assert page.request.get(site["url"] + "/api/overview").status == 401
    assert page.request.get(site["url"] + "/metrics").status == 401


def test_a_wrong_password_is_refused_and_logged_once_naming_the_peer(site, watched):
    page = watched.page
    log_in(page, site["url"], "reader", "not-the-password")
    page.wait_for_selector("#login-problem")
    assert page.inner_text("#login-problem") == "Invalid user name or password."
    log_in(page, site["url"], "nobody", "reader-pw")  # an unknown user: the same words
    page.wait_for_selector("#login-problem")
    assert page.inner_text("#login-problem") == "Invalid user name or password."
    wait_for(lambda: site["console"].log_file.read_text().count("console login failed from 127.0.0.1:") >= 2,
             "the failures' WARNING lines")
    assert "not-the-password" not in site["console"].log_file.read_text()


def test_a_reader_sees_only_what_it_may_describe_and_cannot_reset(site, watched, artifacts):
    page = watched.page
    log_in(page, site["url"], "reader", "reader-pw", path="/groups/stopped")
    page.wait_for_url(site["url"] + "/groups/stopped")  # back where the login was asked
    assert page.inner_text("#user") == "reader"
    assert page.locator("#reset-offsets").count() == 0  # no Alter on the group: no form
    assert "hidden" not in page.inner_text("main")  # the group's offsets on an undescribed topic left out
    page.screenshot(path=str(artifacts / "reader-group.png"), full_page=True)
    token = page.get_attribute("#logout input[type=hidden]", "value")
    forged = page.request.post(site["url"] + "/groups/stopped/reset-offsets",
                               form={"csrf_token": token, "topic": "shown", "to": "latest"},
                               headers={"Origin": site["url"]})
    assert forged.status == 403  # a valid session and CSRF token, but no Alter
    assert site["kazoo"].get("/consumers/stopped/offsets/shown/0-0")[0] == b"0"  # nothing written
    page.goto(site["url"] + "/")
    topics = page.locator("#topics a.topic-link").all_inner_texts()
    assert topics == ["shown"]
    assert page.request.get(site["url"] + "/topics/hidden").status == 403
    assert page.request.get(site["url"] + "/api/topics/hidden/0-0/messages").status == 403
    assert page.request.get(site["url"] + "/metrics").status == 403  # no Describe on the Cluster


def test_a_super_user_sees_and_may_do_everything_then_logs_out(site, watched, artifacts):
    page = watched.page
    log_in(page, site["url"], "root", "root-pw")
    page.wait_for_selector("#topics")
    assert sorted(page.locator("#topics a.topic-link").all_inner_texts()) == ["hidden", "shown"]
    page.goto(site["url"] + "/groups/stopped")
    page.wait_for_selector("#reset-offsets")
    page.select_option("#reset-offsets select[name=topic]", "hidden")
    page.select_option("#reset-offsets select[name=to]", "latest")
    page.click("#reset-offsets button[type=submit]")
    page.wait_for_url(site["url"] + "/groups/stopped/reset-offsets")
    assert int(site["kazoo"].get("/consumers/stopped/offsets/hidden/0-0")[0]) > 0
    page.screenshot(path=str(artifacts / "root-reset.png"), full_page=True)
    page.click("#logout button[type=submit]")
    page.wait_for_selector("form#login")
    page.goto(site["url"] + "/groups")
    assert page.url.startswith(site["url"] + "/login")


def test_a_tampered_session_cookie_logs_you_out(site, watched):
    page = watched.page
    log_in(page, site["url"], "root", "root-pw")
    page.wait_for_selector("#topics")
    context = page.context
    cookie = next(c for c in context.cookies() if c["name"] == "tb_console_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expires"] > 0
    payload, rest = cookie["value"].split(".", 1)
    tampered = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + rest  # another user, say
    context.add_cookies([{**cookie, "value": tampered}])
    page.goto(site["url"] + "/groups")
    assert page.url.startswith(site["url"] + "/login")
