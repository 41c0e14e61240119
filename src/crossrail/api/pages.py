"""The dashboard's pages that stand alone: the template environment, the sign-in form and a refusal as a page.

Authentication (crossrail.api.middleware) answers a browser with the sign-in form and the error handlers
(crossrail.api.errors) answer it with an error page, so these live below the dashboard's views, which
import both.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse

from crossrail.core import format_duration, format_money

WEB = Path(__file__).with_name("web")
STATIC = {"style.css": "text/css", "refresh.js": "text/javascript"}
PAGES = [("runs", "Runs"), ("queues", "Queues"), ("lineage", "Lineage"), ("fleet", "Fleet"), ("report", "Metrics")]


def _templates() -> Any:
    from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape

    env = Environment(
        loader=FileSystemLoader(WEB / "templates"),
        autoescape=select_autoescape(["html"]),
        finalize=_shown,  # what a page prints for a value it lacks: '-', never None or nan
    )
    env.filters["duration"] = lambda s: format_duration(None if s is None else float(s))
    env.filters["num"] = lambda v, digits=3: "-" if v is None else f"{v:.{digits}f}"
    env.filters["money"] = pass_context(lambda ctx, v: format_money(v, ctx.get("currency") or "USD"))
    env.filters["pct"] = lambda v: "-" if v is None else f"{100 * v:.0f}%"
    return env


def _shown(value: Any) -> Any:
    """A value as a page prints it: '-' for nothing (None) or a number that is none (nan)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return value


ENV = _templates()
"""The dashboard's Jinja2 templates (api/web/templates), with the filters its pages use."""


def login_page(next_path: str, message: str | None = None, status: int = 401) -> HTMLResponse:
    """The sign-in form a browser gets for a page it may not see yet: its token, posted to `/ui/login`, goes
    into the dashboard's cookie and the browser back to `next_path`."""
    html = ENV.get_template("login.html").render(
        pages=[], title="Sign in", path="/ui/login", next=page_after_login(next_path), message=message
    )
    return HTMLResponse(html, status_code=status)


ERROR_TITLES = {400: "Bad request", 401: "Sign-in needed", 403: "Not allowed", 404: "Not found", 422: "Not valid"}
ERROR_HINTS = {
    401: "This page needs an API token; sign in from any page of the dashboard.",
    403: "Your token's role may not do this; an admin can make a token whose role may.",
    404: "Nothing of that name that your token can see; the Runs page lists what it can.",
    422: "The page's parameters were not valid; fix them as said above.",
}


def wants_page(scope: Any) -> bool:
    """Whether a refusal goes to a person's browser on a dashboard page (HTML), not to a script (JSON)."""
    path = str(scope.get("path", ""))
    if scope.get("method") not in ("GET", "HEAD") or not path.startswith("/ui/") or path.startswith("/ui/static/"):
        return False
    accept = dict(scope.get("headers") or []).get(b"accept", b"").decode("latin-1")
    return "text/html" in accept


def error_page(status: int, message: str, path: str, problems: list[dict[str, Any]] | None = None) -> HTMLResponse:
    """A refusal of a dashboard page as a page: what went wrong, in the API's words, and where to go next."""
    if status == 404 and message == "Not Found":  # no route: Starlette's words say less than the path
        message = f"no page {path} on this server"
    html = ENV.get_template("error.html").render(
        pages=PAGES,
        title=f"{status} · {ERROR_TITLES.get(status, 'Refused')}",
        path=path,
        message=message,
        problems=problems or [],
        hint=ERROR_HINTS.get(status, "The Runs page lists what this server holds."),
    )
    return HTMLResponse(html, status_code=status)


def page_after_login(path: str) -> str:
    """A dashboard page of this server to go to after signing in (never another site's)."""
    return path if path.startswith("/ui/") and not path.startswith("/ui/login") and "//" not in path else "/ui/runs"
