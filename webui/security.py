"""The console's defences: security headers on every response, a Host check, CSRF tokens.

- **Headers.** ``SecuredResource`` wraps the Klein resource and sets them before any route
  runs, so error pages, JSON, ``/metrics`` and static files carry them too. The CSP allows
  only our own script and stylesheet (no inline script or style, no CDN), no frames, and
  forms that post to us.
- **Host check.** A console listening on loopback answers only requests whose Host is a
  loopback name. Without it a web page could rebind its own DNS name to 127.0.0.1 and read
  the console (and its CSRF token) as a same-origin page.
- **CSRF.** The one write action needs a token that a cross-site page cannot know: the
  browser keeps a random nonce in an HttpOnly, SameSite=Strict cookie, and the form carries
  HMAC(secret, nonce) with a secret that lives only in this process. A POST is accepted only
  when the token matches its cookie, and when its Origin (or Referer), if sent, is this site.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from urllib.parse import urlsplit

from twisted.web.resource import Resource

CSRF_COOKIE = b"tb_console_csrf"
CSRF_FIELD = "csrf_token"

SECURITY_HEADERS = {
    b"Content-Security-Policy": (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                 b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                                 b"base-uri 'none'"),
    b"X-Content-Type-Options": b"nosniff",
    b"X-Frame-Options": b"DENY",
    # same-origin, not no-referrer: under no-referrer browsers send "Origin: null" with our own
    # form's POST, and the CSRF check could no longer tell it from an opaque (hostile) origin.
    b"Referrer-Policy": b"same-origin",
    b"Cross-Origin-Opener-Policy": b"same-origin",
    b"Cross-Origin-Resource-Policy": b"same-origin",
}

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.1``, ``[::1]``), any port."""
    name = _host_name(host)
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class SecuredResource(Resource):
    """Sets the security headers, then hands the request to ``wrapped`` (a leaf resource).

    ``loopback_only``: refuse (421) a Host that is not a loopback name.
    """

    isLeaf = True

    def __init__(self, wrapped: Resource, *, loopback_only: bool) -> None:
        super().__init__()
        self._wrapped = wrapped
        self._loopback_only = loopback_only

    def render(self, request):
        for name, value in SECURITY_HEADERS.items():
            request.setHeader(name, value)
        request.setHeader(b"Cache-Control", b"no-store")
        host = (request.getHeader(b"host") or b"").decode("latin-1")
        if self._loopback_only and not is_loopback_host(host):
            request.setResponseCode(421)
            request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
            return b"This console answers only to localhost names (it listens on loopback).\n"
        return self._wrapped.render(request)


class CsrfTokens:
    """Tokens bound to a per-browser cookie by a secret kept in memory (see the module doc)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def token_for(self, request) -> str:
        """The form token for this browser, setting its cookie first if it has none."""
        nonce = request.getCookie(CSRF_COOKIE)
        if not nonce or len(nonce) != 43:
            nonce = secrets.token_urlsafe(32).encode("ascii")
            request.addCookie(CSRF_COOKIE, nonce, path=b"/", httpOnly=True, sameSite="strict")
        return self._sign(nonce)

    def check(self, request, token: str | None) -> str | None:
        """None if the POST may proceed, else why not."""
        nonce = request.getCookie(CSRF_COOKIE)
        if not nonce:
            return "the request carries no CSRF cookie (open the page again and resubmit)"
        if not token or not hmac.compare_digest(self._sign(nonce), token):
            return "the CSRF token does not match (open the page again and resubmit)"
        origin = (request.getHeader(b"origin") or b"").decode("latin-1")
        referer = (request.getHeader(b"referer") or b"").decode("latin-1")
        host = (request.getHeader(b"host") or b"").decode("latin-1").lower()
        source = origin or referer  # browsers send Origin with every POST; Referer is the fallback
        if source and (source == "null" or urlsplit(source).netloc.lower() != host):
            return f"the request comes from another site ({source})"
        fetch_site = (request.getHeader(b"sec-fetch-site") or b"").decode("latin-1")
        if fetch_site and fetch_site not in ("same-origin", "none"):
            return f"the browser says the request is {fetch_site}"
        return None

    def _sign(self, nonce: bytes) -> str:
        return hmac.new(self._secret, nonce, hashlib.sha256).hexdigest()
