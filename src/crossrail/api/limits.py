"""`BodyLimits`: the ASGI middleware that refuses a request body too large or nested too deep, before it is parsed.

The bounds themselves are crossrail.api.bounds'; the refusal is the one error shape (crossrail.api.errors).
"""

from __future__ import annotations

import json
from typing import Any

from crossrail.api import errors
from crossrail.api.bounds import MAX_BODY_BYTES, MAX_DEPTH, json_depth
from crossrail.errors import UsageError


def _is_form(content_type: str) -> bool:
    return content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


class BodyLimits:
    """Refuse a request body over MAX_BODY_BYTES (413) or a JSON one nested past MAX_DEPTH (400) in the one error
    shape, before the app reads it; any other body goes on to the app as it came (pure ASGI: responses stream)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        declared = headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            await _refuse(scope, send, 413, _too_large())
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nothing to answer
                return
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                await _refuse(scope, send, 413, _too_large())
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        # The dashboard's sign-in form is not JSON: its size is bounded, its brackets are text.
        depth = 0 if _is_form(headers.get("content-type", "").lower()) else json_depth(body)
        if depth > MAX_DEPTH:
            exc = UsageError(f"the request body is nested {depth} levels deep; the limit is {MAX_DEPTH}")
            await _refuse(scope, send, 400, exc)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _too_large() -> UsageError:
    return UsageError(f"the request body is larger than {MAX_BODY_BYTES} bytes")


async def _refuse(scope: Any, send: Any, status: int, exc: UsageError) -> None:
    scope.setdefault("state", {})["refusal"] = str(exc)  # for the audit row (crossrail.api.middleware)
    payload = json.dumps(errors.body(exc, status)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
