"""The console's login (docs/security.md, "The console: a login beyond loopback").

``LoginGate`` wraps the console's routes (inside SecuredResource, so its answers carry the
security headers too). It serves ``/login`` (GET: the form; POST: check the password against
the users' SCRAM credentials, as a PLAIN login does: security/scram.py's
``verify_password``) and ``POST /logout``; ``/static/*`` passes (the login page's stylesheet).
Every other request needs a session cookie (webui/sessions.py) whose user still has the
credentials it logged in with: the route then runs with ``request.console_user`` set;
without one, a page is redirected to the login and ``/api/*`` and ``/metrics`` answer 401.

A failed login answers after ``LOGIN_FAILURE_DELAY_S`` (a timer: other requests are served
meanwhile) with the same words whatever was wrong, and logs one WARNING naming the peer.
"""

from __future__ import annotations

import json
import logging
import secrets
from urllib.parse import quote, unquote

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from twisted_broker.security.scram import verify_password
from webui.security import CSRF_FIELD, CsrfTokens
from webui.sessions import SESSION_COOKIE, SessionSigner, credential_tag

log = logging.getLogger(__name__)

LOGIN_FAILURE_DELAY_S = 0.5
MAX_FIELD_CHARS = 1024  # a user name or password longer than this is refused unread
REFUSED = "Invalid user name or password."


def local_path(target: str) -> str:
    """``target`` if it is a path on this site, else ``/``: the login never sends a browser
    elsewhere (``//host`` and ``/\\host`` are other sites to a browser)."""
    if not target.startswith("/") or target.startswith(("//", "/\\")) or any(c in target for c in "\r\n"):
        return "/"
    return target


class LoginGate(Resource):
    """Lets requests with a session through to ``wrapped``; serves the login and logout."""

    isLeaf = True

    def __init__(self, wrapped: Resource, *, sessions: SessionSigner, lookup, csrf: CsrfTokens, clock,
                 templates, failure_delay_s: float = LOGIN_FAILURE_DELAY_S) -> None:
        super().__init__()
        self._wrapped = wrapped
        self._sessions = sessions
        self._lookup = lookup  # (mechanism, user) -> ScramCredential | None: the watched users
        self._csrf = csrf
        self._clock = clock
        self._templates = templates
        self._failure_delay_s = failure_delay_s
        self._decoy_secret = secrets.token_bytes(32)

    def render(self, request):
        path = request.path
        if path.startswith(b"/static/"):
            return self._wrapped.render(request)
        if path == b"/login":
            return self._login(request) if request.method == b"POST" else self._form(request, _arg(request, "next"))
        session = self.session_of(request)
        if path == b"/logout" and request.method == b"POST":
            return self._logout(request, session)
        if session is None:
            if path.startswith(b"/api/") or path == b"/metrics":
                request.setResponseCode(401)
                request.setHeader(b"Content-Type", b"application/json; charset=utf-8")
                return json.dumps({"error": "log in first: /login", "status": 401}).encode()
            request.setResponseCode(303)
            request.setHeader(b"Location", b"/login?next=" + quote(request.uri.decode("latin-1"), safe="").encode())
            return b""
        request.console_user = session.user
        return self._wrapped.render(request)

    def session_of(self, request):
        session = self._sessions.read(request.getCookie(SESSION_COOKIE))
        if session is None or credential_tag(self._lookup, session.user) != session.credential_tag:
            return None  # tampered, expired, logged out, or the user's password changed or was deleted
        return session

    def _form(self, request, target: str, *, problem: str | None = None, status: int = 200) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
        return self._templates.get_template("login.html").render(
            title="Log in", problem=problem, next=local_path(target), csrf_field=CSRF_FIELD,
            csrf_token=self._csrf.token_for(request)).encode("utf-8")

    def _login(self, request):
        target = _arg(request, "next")
        problem = self._csrf.check(request, _arg(request, CSRF_FIELD) or None)
        if problem is not None:
            log.warning("console login from %s refused: %s", _peer(request), problem)
            return self._form(request, target, problem=f"Refused: {problem}", status=403)
        user, password = _arg(request, "user"), _arg(request, "password")
        if (user and len(user) <= MAX_FIELD_CHARS and len(password) <= MAX_FIELD_CHARS
                and verify_password(self._lookup, user, password.encode("utf-8"), self._decoy_secret)):
            value, _session = self._sessions.issue(user, credential_tag(self._lookup, user))
            request.addCookie(SESSION_COOKIE, value.encode("ascii"), path=b"/", httpOnly=True, sameSite="strict",
                              secure=request.isSecure() or None, max_age=str(int(self._sessions.max_age_s)))
            log.info("console login of user %r from %s", user, _peer(request))
            return _redirect(request, local_path(target))
        log.warning("console login failed from %s (user %r)", _peer(request), user[:100])
        call = self._clock.callLater(self._failure_delay_s, self._refuse, request, target)
        request.notifyFinish().addErrback(lambda _failure: call.cancel() if call.active() else None)
        return NOT_DONE_YET

    def _refuse(self, request, target: str) -> None:
        request.write(self._form(request, target, problem=REFUSED, status=401))
        request.finish()

    def _logout(self, request, session):
        problem = self._csrf.check(request, _arg(request, CSRF_FIELD) or None)
        if problem is not None:
            request.setResponseCode(403)
            request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
            return f"Refused: {problem}\n".encode()
        if session is not None:
            self._sessions.revoke(session)
            log.info("console logout of user %r from %s", session.user, _peer(request))
        request.addCookie(SESSION_COOKIE, b"", path=b"/", httpOnly=True, sameSite="strict",
                          secure=request.isSecure() or None, max_age="0")
        return _redirect(request, "/login")


def _redirect(request, target: str) -> bytes:
    request.setResponseCode(303)
    request.setHeader(b"Location", target.encode("utf-8"))
    return b""


def _arg(request, name: str) -> str:
    values = request.args.get(name.encode())
    return values[0].decode("utf-8", "replace") if values else ""


def _peer(request) -> str:
    address = request.getClientAddress()
    return f"{getattr(address, 'host', address)}:{getattr(address, 'port', '')}"
