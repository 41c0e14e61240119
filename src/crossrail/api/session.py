"""Whose request it is and whether a browser sent it on purpose: the credential a request carries (a bearer
token, a dashboard page's `?token=`, or the dashboard's cookie), the login cookie and sign-in form, and the
checks on writes a page of another origin may have made a browser send (`check_forgery`: the cookie's writes need
this server's Origin and the session's CSRF token). docs/auth.md.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from crossrail.core.access import Action
from crossrail.errors import ForbiddenError, UnauthenticatedError

COOKIE = "crossrail_token"
ANONYMOUS = "anonymous"
"""Who a request without a token is: the admin of a loopback server without auth, or no one (docs/auth.md)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether a server on `host` answers this machine only: beyond loopback every request needs a token."""
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


def bearer(scope: Scope) -> str | None:
    return credential(scope)[0]


def credential(scope: Scope) -> tuple[str | None, str]:
    """The request's token and where it came from: `bearer` (the Authorization header), `query` (a dashboard
    page's `?token=`), `cookie` (the dashboard's session, which a browser attaches to any request) or `none`."""
    headers = headers_of(scope)
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        path = str(scope.get("path", ""))
        return (None, "none") if path.startswith("/v1/ingest/") else (auth[7:].strip(), "bearer")
    login = query_token(scope)
    if login:
        return login, "query"
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return str(value), "cookie"
    return None, "none"


def headers_of(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def query_token(scope: Scope) -> str | None:
    """A dashboard page's `?token=`: taken once, then kept in a cookie."""
    from urllib.parse import parse_qs

    token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return token[0] if token and str(scope.get("path", "")).startswith("/ui") else None


def login_cookie(secret: str) -> str:
    """The Set-Cookie value that keeps a dashboard token: the browser sends it back, scripts cannot read it."""
    return f"{COOKIE}={secret}; Path=/; HttpOnly; SameSite=Strict"


# --- writes a page of another origin makes a browser send --------------------------------------------------
# SameSite=Strict does not stop them: another port on the same host is the same site, and its pages' form
# posts carry this server's cookie. What such a page cannot do is choose the Origin header, read this server's
# pages (where the CSRF token is) or read the HttpOnly cookie.


CSRF_HEADER = "X-CSRF-Token"


CSRF_META = "crossrail-csrf"
"""The header a dashboard session's write carries its CSRF token in; the `<meta name>` pages carry it in."""


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


LOGIN = ("POST", "/ui/login")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def csrf_token(secret: str) -> str:
    """The CSRF token of the dashboard session holding token `secret`: a digest keyed by that token, so there
    is one per session, the server keeps no state to check it, and it reveals nothing of the token."""
    return hmac.new(secret.encode(), b"crossrail dashboard csrf", hashlib.sha256).hexdigest()


def session_csrf(scope: Scope) -> str | None:
    """The CSRF token a dashboard page hands its browser session (None: the request came without one)."""
    secret, source = credential(scope)
    return csrf_token(secret) if secret and source in ("cookie", "query") else None


def check_forgery(scope: Scope, method: str, template: str, action: Action | None) -> None:
    """ForbiddenError for a write a page of another origin may have made a browser send: a write authorized by
    the dashboard's cookie needs an Origin (or, lacking one, a Referer) of this server and the session's CSRF
    token; signing in needs an Origin of this server; a write without any token (the anonymous admin of
    loopback) is refused when the browser says it comes from another origin. A bearer token is not checked:
    no other site can make a browser send one."""
    if method in SAFE_METHODS:
        return
    secret, source = credential(scope)
    if (method, template) == LOGIN:
        _same_origin(scope, "signing in to the dashboard")
    elif action is None or source in ("bearer", "query"):
        return
    elif source == "cookie":
        _same_origin(scope, f"a dashboard session's {method}")
        sent = headers_of(scope).get(CSRF_HEADER.lower(), "")
        if not hmac.compare_digest(sent.encode(), csrf_token(secret or "").encode()):
            raise ForbiddenError(
                f"a dashboard session's {method} {scope['path']} must carry the session's CSRF token in the "
                f"{CSRF_HEADER} header (its pages carry it in <meta name={CSRF_META!r}>); "
                "scripts send `Authorization: Bearer <token>` instead"
            )
    elif _claimed_origin(scope) is not None:
        _same_origin(scope, f"a {method} without a token")


def _same_origin(scope: Scope, what: str) -> None:
    claimed, own = _claimed_origin(scope), _own_origin(scope)
    seen = None if claimed is None else _normal_origin(claimed)
    if seen is None or own is None or seen != own:
        said = f"from {claimed}" if claimed else "with no Origin or Referer header"
        proxied = seen is not None and own is not None and seen.startswith("https:") and own.startswith("http:")
        hint = " (behind a proxy that terminates TLS, name it: `crossrail serve --forwarded-allow-ips`)"
        raise ForbiddenError(
            f"{what} must come from a page of this server ({own or 'its Host header'}), not {said}"
            f"{hint if proxied else ''}; scripts send `Authorization: Bearer <token>` instead"
        )


def _claimed_origin(scope: Scope) -> str | None:
    """Where the browser says the request comes from: its Origin, else its Referer (None: neither was sent)."""
    headers = headers_of(scope)
    return headers.get("origin") or headers.get("referer") or None


def _own_origin(scope: Scope) -> str | None:
    """This server's origin as the request addressed it: scheme (a trusted proxy's, see `serve
    --forwarded-allow-ips`) and the Host header."""
    host = headers_of(scope).get("host")
    if not host and scope.get("server"):
        host = f"{scope['server'][0]}:{scope['server'][1]}"
    return _normal_origin(f"{scope.get('scheme', 'http')}://{host}") if host else None


def _normal_origin(url: str) -> str | None:
    """`scheme://host:port` of a URL, the port always written (None: not an http(s) URL with a host)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.hostname}:{port or _DEFAULT_PORTS[parts.scheme]}"


def keeps_login(scope: Scope) -> bool:
    """Whether a page's `?token=` goes into the cookie: not when another site's page sent the browser here
    (Sec-Fetch-Site), which would sign the browser in as that site's token."""
    return headers_of(scope).get("sec-fetch-site", "none") in ("none", "same-origin")


async def login_form(scope: Scope, receive: Receive, send: Send, exc: UnauthenticatedError) -> None:
    """Answer a dashboard page that needs a token with the sign-in form (401), back to this page after; a token
    that was sent and is dead is named."""
    from urllib.parse import parse_qsl, urlencode

    from crossrail.api.pages import login_page

    query = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1")) if k != "token"]
    here = str(scope["path"]) + (f"?{urlencode(query)}" if query else "")
    page = login_page(here, str(exc) if bearer(scope) else None)
    page.headers.append("www-authenticate", 'Bearer realm="crossrail"')
    await page(scope, receive, send)
