"""The admin console's defences over HTTP against a real cluster (webui_cluster.py): security
headers on every page and its JSON twin, escaped hostile names, the host check, and the write
action (off by default, CSRF-checked, refused while a group has live owners).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.support.console_process import ConsoleProcess, http
from tests.support.polling import wait_for
from tests.support.webui_cluster import (  # noqa: F401 (a fixture: the module's cluster)
    HOSTILE_GROUP, HOSTILE_TOPIC, assert_secure, cluster,
)


# -- every page ---------------------------------------------------------------------------------

PAGES = [
    ("/", "/api/overview"),
    ("/?page=1&q=ord", "/api/overview?q=ord"),
    ("/topics/orders", "/api/topics/orders"),
    ("/topics/orders/1-0/messages", "/api/topics/orders/1-0/messages"),
    ("/topics/orders/0-0/messages?offset=0&count=3&format=hex", "/api/topics/orders/0-0/messages?offset=0&count=3"),
    ("/groups", "/api/groups"),
    ("/groups/live", "/api/groups/live"),
    ("/groups/stopped", "/api/groups/stopped"),
    ("/brokers/0", "/api/brokers/0"),
    ("/brokers/1", "/api/brokers/1"),
]


@pytest.mark.parametrize("page, api", PAGES)
def test_every_page_and_its_json_twin_answer_with_the_security_headers(cluster, page, api):
    for console in (cluster.readonly.port, cluster.embedded_port):
        html = http(console, "GET", page)
        assert html.status == 200, html.body[:800]
        assert html.headers["content-type"] == "text/html; charset=utf-8"
        assert html.text.startswith("<!doctype html>")
        assert_secure(html)
        data = http(console, "GET", api)
        assert data.status == 200
        assert data.headers["content-type"] == "application/json; charset=utf-8"
        assert_secure(data)
        data.json()


def test_static_files_and_metrics_carry_the_security_headers_too(cluster):
    for path, content_type in [("/static/console.css", "text/css"), ("/static/live.js", "text/javascript"),
                               ("/metrics", "text/plain")]:
        response = cluster.readonly.get(path)
        assert response.status == 200 and response.headers["content-type"].startswith(content_type)
        assert_secure(response)
    missing = cluster.readonly.get("/static/../app.py")
    assert missing.status == 404
    assert_secure(missing)


def test_hostile_names_are_escaped_everywhere(cluster):
    for path in ["/", "/groups", f"/groups/{quote(HOSTILE_GROUP, safe='')}", f"/topics/{quote(HOSTILE_TOPIC, safe='')}",
                 f"/topics/{quote(HOSTILE_TOPIC, safe='')}/1-0/messages", "/brokers/1"]:
        response = cluster.readonly.get(path)
        assert response.status == 200, path
        assert "<script>alert(1)" not in response.text and "<img src=x" not in response.text
    assert "&#34;&gt;&lt;script&gt;alert(1)" in cluster.readonly.get("/").text
    unknown = cluster.readonly.get("/groups/%3Cscript%3Ealert(3)")
    assert unknown.status == 404 and "&lt;script&gt;alert(3)" in unknown.text and "<script>alert(3)" not in unknown.text


# -- security: host check, the write action ------------------------------------------------------------

def test_a_console_on_loopback_refuses_other_host_names(cluster):
    response = cluster.readonly.get("/api/overview", headers={"Host": "attacker.example:8080"})
    assert response.status == 421
    assert cluster.readonly.get("/api/overview", headers={"Host": "localhost"}).status == 200


def form(**fields: str) -> bytes:
    return "&".join(f"{name}={quote(value, safe='')}" for name, value in fields.items()).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def csrf_of(console: ConsoleProcess, group: str) -> tuple[str, str]:
    """The (cookie header, token) a browser gets from the group page."""
    page = console.get(f"/groups/{group}")
    (cookie,) = [c for c in page.cookies if c.startswith("tb_console_csrf=")]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    token = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    return cookie.split(";", 1)[0], token


def test_the_write_action_is_off_by_default(cluster):
    assert 'id="reset-offsets"' not in cluster.readonly.get("/groups/stopped").text
    response = http(cluster.readonly.port, "POST", "/groups/stopped/reset-offsets", headers=FORM,
                    body=form(topic="orders", to="latest"))
    assert response.status == 403 and "--allow-admin-actions" in response.text
    assert cluster.zk_offset("stopped", "orders", "0-0") == 0
    assert http(cluster.embedded_port, "POST", "/groups/stopped/reset-offsets", headers=FORM,
                body=form(topic="orders", to="latest")).status == 403


def test_forged_resets_are_refused(cluster):
    cookie, token = csrf_of(cluster.admin, "stopped")
    url = "/groups/stopped/reset-offsets"
    attempts = [
        ({**FORM}, form(topic="orders", to="latest", csrf_token=token)),  # no cookie
        ({**FORM, "Cookie": cookie}, form(topic="orders", to="latest")),  # no token
        ({**FORM, "Cookie": cookie}, form(topic="orders", to="latest", csrf_token="0" * 64)),
        ({**FORM, "Cookie": cookie, "Origin": "http://evil.example"},
         form(topic="orders", to="latest", csrf_token=token)),
        ({**FORM, "Cookie": "tb_console_csrf=" + "a" * 43}, form(topic="orders", to="latest", csrf_token=token)),
    ]
    for headers, body in attempts:
        response = http(cluster.admin.port, "POST", url, headers=headers, body=body)
        assert response.status == 403, (headers, body)
        assert "refused" in response.text
    assert cluster.zk_offset("stopped", "orders", "0-0") == 0


def test_a_reset_is_refused_while_the_group_has_live_owners(cluster):
    cookie, token = csrf_of(cluster.admin, "stopped")  # one token per browser, valid for every group
    assert 'id="reset-offsets"' not in cluster.admin.get("/groups/live").text  # no form for a live group
    response = http(cluster.admin.port, "POST", "/groups/live/reset-offsets",
                    headers={**FORM, "Cookie": cookie, "Origin": f"http://127.0.0.1:{cluster.admin.port}"},
                    body=form(topic="orders", to="earliest", csrf_token=token))
    assert response.status == 409 and "live consumers (live_m1)" in response.text
    assert cluster.zk_offset("live", "orders", "0-0") == cluster.latest["0-0"]


def test_a_stopped_groups_offsets_are_reset(cluster):
    cookie, token = csrf_of(cluster.admin, "stopped")
    assert 'id="reset-offsets"' in cluster.admin.get("/groups/stopped", headers={"Cookie": cookie}).text
    response = http(cluster.admin.port, "POST", "/groups/stopped/reset-offsets",
                    headers={**FORM, "Cookie": cookie, "Origin": f"http://127.0.0.1:{cluster.admin.port}"},
                    body=form(topic="orders", to="latest", csrf_token=token))
    assert response.status == 200, response.text
    for name, end in cluster.latest.items():
        assert cluster.zk_offset("stopped", "orders", name) == end
        assert f"<td>{name}</td><td class=\"num\">0</td><td class=\"num\">{end}</td>" in response.text
    wait_for(lambda: cluster.admin.api("/api/groups/stopped")["lag"]["total"] == 0, "the console to see it")
    # Back to the start of the log, through a time before everything: the earliest offset.
    http(cluster.admin.port, "POST", "/groups/stopped/reset-offsets",
         headers={**FORM, "Cookie": cookie}, body=form(topic="orders", to="time", time="2001-01-01T00:00:00",
                                                       csrf_token=token))
    assert all(cluster.zk_offset("stopped", "orders", name) == 0 for name in cluster.latest)
    bad = http(cluster.admin.port, "POST", "/groups/stopped/reset-offsets", headers={**FORM, "Cookie": cookie},
               body=form(topic="orders", to="whenever", csrf_token=token))
    assert bad.status == 400
    assert http(cluster.admin.port, "GET", "/groups/stopped/reset-offsets").status == 405
