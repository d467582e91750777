"""Security headers, the loopback Host check and the CSRF tokens, on twisted.web requests."""

from __future__ import annotations

import pytest
from twisted.web.resource import Resource
from twisted.web.server import Request
from twisted.web.test.requesthelper import DummyChannel

from webui.app import parse_reset_time
from webui.security import CSRF_COOKIE, CsrfTokens, SecuredResource, is_loopback_host


def request(headers: dict[str, str] | None = None, cookies: dict[bytes, bytes] | None = None) -> Request:
    req = Request(DummyChannel())
    req.method, req.uri, req.path = b"GET", b"/", b"/"
    for name, value in (headers or {}).items():
        req.requestHeaders.setRawHeaders(name, [value])
    req.received_cookies = dict(cookies or {})
    return req


class Hello(Resource):
    isLeaf = True

    def render(self, request):
        return b"hello"


def test_every_response_carries_the_security_headers():
    req = request({"Host": "127.0.0.1:8080"})
    body = SecuredResource(Hello(), loopback_only=True).render(req)
    assert body == b"hello"
    headers = req.responseHeaders
    csp = headers.getRawHeaders(b"content-security-policy")[0]
    assert b"default-src 'none'" in csp and b"script-src 'self'" in csp and b"frame-ancestors 'none'" in csp
    assert b"unsafe-inline" not in csp
    assert headers.getRawHeaders(b"x-content-type-options") == [b"nosniff"]
    assert headers.getRawHeaders(b"x-frame-options") == [b"DENY"]
    assert headers.getRawHeaders(b"referrer-policy") == [b"same-origin"]


@pytest.mark.parametrize("host, allowed", [
    ("127.0.0.1:8080", True), ("localhost:8080", True), ("[::1]:8080", True), ("127.1.2.3", True),
    ("localhost", True), ("evil.example:8080", False), ("10.0.0.1:8080", False), ("", False)])
def test_a_loopback_console_answers_only_loopback_host_names(host, allowed):
    assert is_loopback_host(host) is allowed
    req = request({"Host": host} if host else {})
    body = SecuredResource(Hello(), loopback_only=True).render(req)
    assert (body == b"hello") is allowed
    if not allowed:
        assert req.code == 421


def test_a_console_on_another_interface_answers_any_host():
    assert SecuredResource(Hello(), loopback_only=False).render(request({"Host": "broker7:8080"})) == b"hello"


def tokens_and_cookie() -> tuple[CsrfTokens, bytes, str]:
    tokens = CsrfTokens(secret=b"s" * 32)
    page = request({"Host": "127.0.0.1:8080"})
    token = tokens.token_for(page)
    (cookie,) = [c for c in page.cookies if c.startswith(CSRF_COOKIE + b"=")]
    assert b"HttpOnly" in cookie and b"SameSite=strict" in cookie
    nonce = cookie.split(b";")[0].split(b"=", 1)[1]
    return tokens, nonce, token


def test_a_post_with_its_cookie_and_token_from_this_site_passes():
    tokens, nonce, token = tokens_and_cookie()
    post = request({"Host": "127.0.0.1:8080", "Origin": "http://127.0.0.1:8080",
                    "Sec-Fetch-Site": "same-origin"}, {CSRF_COOKIE: nonce})
    assert tokens.check(post, token) is None
    assert tokens.token_for(post) == token  # the same browser keeps its token


@pytest.mark.parametrize("case", ["no cookie", "no token", "wrong token", "other cookie", "cross origin",
                                  "null origin", "cross referer", "cross site fetch"])
def test_a_forged_post_is_refused(case):
    tokens, nonce, token = tokens_and_cookie()
    headers = {"Host": "127.0.0.1:8080"}
    cookies = {CSRF_COOKIE: nonce}
    if case == "no cookie":
        cookies = {}
    elif case == "no token":
        token = None
    elif case == "wrong token":
        token = "0" * 64
    elif case == "other cookie":
        cookies = {CSRF_COOKIE: b"x" * 43}
    elif case == "cross origin":
        headers["Origin"] = "http://evil.example"
    elif case == "null origin":
        headers["Origin"] = "null"
    elif case == "cross referer":
        headers["Referer"] = "http://evil.example/page"
    elif case == "cross site fetch":
        headers["Sec-Fetch-Site"] = "cross-site"
    assert tokens.check(request(headers, cookies), token) is not None


def test_a_token_from_another_console_process_is_refused():
    tokens, nonce, token = tokens_and_cookie()
    other = CsrfTokens()  # a new secret, as after a restart
    assert other.check(request({"Host": "127.0.0.1:8080"}, {CSRF_COOKIE: nonce}), token) is not None


@pytest.mark.parametrize("text, expected", [("earliest", -2), ("latest", -1), ("1700000000000", 1700000000000),
                                            ("2023-11-14T22:13:20", 1700000000000)])
def test_reset_times(text, expected):
    assert parse_reset_time(text) == expected


def test_a_bad_reset_time_is_refused():
    with pytest.raises(ValueError):
        parse_reset_time("yesterday")
