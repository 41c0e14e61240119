"""Requests to the API's ASGI app in process: no port, no server thread, the app's own error handling."""

from __future__ import annotations

from typing import Any

import anyio
import httpx


class InProcess:
    """A synchronous HTTP client over an ASGI app, each request from `peer` to the server at `base_url`."""

    def __init__(
        self, app: Any, base_url: str = "http://crossrail.test", peer: tuple[str, int] = ("127.0.0.1", 40001)
    ) -> None:
        self.app, self.base_url, self.peer = app, base_url, peer

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=self.peer, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url=self.base_url, timeout=60) as http:
                return await http.request(method, path, **kw)

        return anyio.run(send)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("POST", path, **kw)

    def put(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("PUT", path, **kw)
