"""A console bound beyond loopback asks for a login without being told to (docs/security.md,
"The console: a login beyond loopback"): a real ``twistd -n webui`` on every interface,
asked over 127.0.0.1 (one of them) with plain HTTP."""

from __future__ import annotations

import pytest

from tests.support.console_process import ConsoleProcess, http
from tests.support.zookeeper import new_chroot


@pytest.fixture(scope="module")
def exposed(zookeeper, tmp_path_factory):
    console = ConsoleProcess(tmp_path_factory.mktemp("exposed"), new_chroot(zookeeper))
    console.args[console.args.index("--listen") + 1] = "tcp:0:interface=0.0.0.0"
    console.start()
    yield console
    console.stop()


def test_a_console_beyond_loopback_sends_pages_to_the_login_and_answers_the_api_401(exposed):
    response = exposed.get("/groups?page=2")
    assert response.status == 303 and response.headers["location"] == "/login?next=%2Fgroups%3Fpage%3D2"
    assert exposed.get("/api/overview").status == 401
    login = exposed.get("/login")
    assert login.status == 200 and 'name="password"' in login.text
    assert "content-security-policy" in login.headers  # the login page is a console page too


def test_a_login_post_without_its_csrf_token_is_refused(exposed):
    response = http(exposed.port, "POST", "/login", body=b"user=a&password=b",
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status == 403 and not any("tb_console_session" in c for c in response.cookies)
