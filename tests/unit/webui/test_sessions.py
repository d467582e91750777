"""The console's session cookies (webui/sessions.py) and the login's redirect rule
(webui/login.py), under a task.Clock."""

from twisted.internet.task import Clock

from twisted_broker.security.scram import make_credential
from webui.login import local_path
from webui.sessions import SessionSigner, credential_tag


def test_a_session_reads_back_until_it_expires():
    clock = Clock()
    signer = SessionSigner(clock=clock, max_age_s=3600)
    value, session = signer.issue("alice", "tag")
    assert signer.read(value) == session
    clock.advance(3600)
    assert signer.read(value) == session
    clock.advance(2)
    assert signer.read(value) is None


def test_a_tampered_or_foreign_cookie_is_refused():
    clock = Clock()
    signer = SessionSigner(clock=clock)
    value, _session = signer.issue("alice", "tag")
    payload, rest = value.split(".", 1)
    forged = payload.replace(payload[3], "A" if payload[3] != "A" else "B", 1) + "." + rest
    assert signer.read(forged) is None
    assert SessionSigner(clock=clock).read(value) is None  # another console's secret
    assert signer.read(b"") is None and signer.read(None) is None


def test_a_logged_out_session_stays_refused_and_others_stay_valid():
    signer = SessionSigner(clock=Clock())
    first, session = signer.issue("alice", "tag")
    second, _ = signer.issue("alice", "tag")
    signer.revoke(session)
    assert signer.read(first) is None and signer.read(second) is not None


def test_the_credential_tag_changes_with_the_password_and_is_none_without_a_user():
    stored = {"alice": make_credential("SCRAM-SHA-256", "one")}
    lookup = lambda mechanism, user: stored.get(user) if mechanism == "SCRAM-SHA-256" else None
    before = credential_tag(lookup, "alice")
    stored["alice"] = make_credential("SCRAM-SHA-256", "two")
    assert credential_tag(lookup, "alice") not in (before, None)
    assert credential_tag(lookup, "bob") is None


def test_the_login_sends_a_browser_back_only_to_a_path_of_this_site():
    assert local_path("/groups/g?x=1") == "/groups/g?x=1"
    for elsewhere in ("https://evil.example/", "//evil.example/", "/\\evil.example", "", "/a\r\nSet-Cookie: x"):
        assert local_path(elsewhere) == "/"
