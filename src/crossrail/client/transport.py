"""How a Client's calls reach a workspace (the httpx model): in this process, over HTTP, or through an ASGI app.

A `Call` is one operation: the method of `crossrail.control.ops.operations.Operations` the local transport calls,
with its arguments, and the `/v1` request an HTTP transport sends for it. Errors come back from a server as
the API's one error shape and are raised again as the same crossrail exception (a SpecError with the same
problems), so the CLI prints the same lines over every transport.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from crossrail import errors
from crossrail.errors import CrossrailError, Problem, SpecError, StoreUnavailableError, UsageError

if TYPE_CHECKING:
    from crossrail.control.ops.local import Local
    from crossrail.control.ops.operations import Operations
    from crossrail.core import Clock

TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Call:
    """One operation: `op` of Operations with `args` in this process; `method` `/v1{path}` over HTTP, with
    `params` as the query and `body` (or, when callable, what it returns: a file read only for a server) as
    JSON."""

    op: str
    args: Mapping[str, Any] = field(default_factory=dict)
    method: str = "GET"
    path: str = ""
    params: Mapping[str, Any] | None = None
    body: Any = None


class Transport(Protocol):
    """What a Client sends its calls through."""

    local: Local | None
    """The workspace this transport opens in this process (None: a server's, over HTTP)."""

    def send(self, call: Call) -> Any: ...

    def close(self) -> None: ...


class LocalTransport:
    """The calls answered in this process by the workspace's operations (the owner's: every run)."""

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        cwd: Any = None,
        policy: str | os.PathLike[str] | None = None,
        audit_writes: bool = True,
    ) -> None:
        """`audit_writes`: record writes in the audit log under the OS user (the local CLI); the API server
        passes False and audits each request under its token instead."""
        from crossrail.control.ops.local import Local

        self.local: Local | None = Local(home, clock=clock, cwd=cwd, policy=policy)
        self._audit_writes = audit_writes
        self._operations: Operations | None = None

    @property
    def operations(self) -> Operations:
        if self._operations is None:
            from crossrail.control.ops.operations import Operations

            assert self.local is not None
            self._operations = Operations(self.local, audit_writes=self._audit_writes)
        return self._operations

    def send(self, call: Call) -> Any:
        return getattr(self.operations, call.op)(**call.args)

    def close(self) -> None:
        if self.local is not None:
            self.local.close()


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise UsageError("talking to a crossrail server needs httpx: pip install 'crossrail[api]'") from None
    return httpx


class HTTPTransport:
    """The calls sent to a `crossrail serve` at `url` with httpx; `token` goes with each as a bearer token."""

    local: Local | None = None

    def __init__(self, url: str, *, token: str | None = None, http_transport: Any = None) -> None:
        """`http_transport`: the httpx transport under the client (httpx's own by default: a socket)."""
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"server {url!r} is not an http:// or https:// URL; pass e.g. http://127.0.0.1:8470")
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = _httpx().Client(base_url=self.url, timeout=TIMEOUT_S, headers=headers, transport=http_transport)

    def send(self, call: Call) -> Any:
        httpx = _httpx()
        body = call.body() if callable(call.body) else call.body
        query = {k: v for k, v in (call.params or {}).items() if v is not None}
        try:
            response = self._http.request(call.method, "/v1" + call.path, json=body, params=query)
        except httpx.TransportError as exc:
            raise StoreUnavailableError(f"cannot reach the crossrail server at {self.url}: {exc}") from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code >= 400:
            raise error_from(answer, response.status_code, self.url + "/v1" + call.path)
        return answer

    def close(self) -> None:
        self._http.close()


class ASGITransport(HTTPTransport):
    """The HTTP calls answered by an ASGI app in this process (`crossrail.api.create_app(home)`): every layer
    of a server but the socket, for tests. Each request comes from `peer`."""

    def __init__(
        self,
        app: Any,
        *,
        token: str | None = None,
        url: str = "http://crossrail.test",
        peer: tuple[str, int] = ("127.0.0.1", 40001),
    ) -> None:
        super().__init__(url, token=token, http_transport=asgi_http_transport(app, peer))


def asgi_http_transport(app: Any, peer: tuple[str, int] = ("127.0.0.1", 40001)) -> Any:
    """A synchronous httpx transport over an ASGI app: each request runs the app in an event loop of its own
    (httpx's ASGITransport is asynchronous only). Answers are read whole: a stream that never ends never
    returns (follow those over a socket)."""
    _httpx()
    import httpx

    class _Sync(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            import anyio

            content = request.read()

            async def send() -> httpx.Response:
                inner = httpx.ASGITransport(app=app, client=peer, raise_app_exceptions=False)
                again = httpx.Request(request.method, request.url, headers=request.headers, content=content)
                response = await inner.handle_async_request(again)
                body = await response.aread()
                return httpx.Response(response.status_code, headers=response.headers, content=body, request=request)

            return anyio.run(send)

    return _Sync()


def error_from(body: Any, status: int, url: str) -> CrossrailError:
    """The crossrail exception an API error body stands for."""
    if not isinstance(body, dict) or body.get("kind") != "Error":
        return CrossrailError(f"{url} answered {status} without a crossrail error body; is it a crossrail server?")
    cls = getattr(errors, str(body.get("error")), None)
    if not (isinstance(cls, type) and issubclass(cls, CrossrailError)):
        cls = CrossrailError
    if issubclass(cls, SpecError):
        return cls([Problem.from_dict(p) for p in body.get("problems") or []])
    return cls(str(body.get("message", "")))
