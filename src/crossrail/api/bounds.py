"""The bounds every `/v1` parameter and body field shares, declared once so the OpenAPI document carries them.

Integers fit in 63 bits (the store's BIGINT: a larger one would overflow SQLite or PostgreSQL), digits are ASCII
(pydantic's integer parsing refuses `²` or `١`, which `str.isdigit` accepts), strings have a length limit and
no NUL or control characters where they name something. A request breaking one is a 422 in the one error shape
(crossrail.api.errors). `BodyLimits` bounds a request body's size and JSON nesting before anything parses it:
Python's JSON parser recurses once per level, so a deep enough body would end in a RecursionError.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le
from pydantic import StringConstraints

from crossrail.core.api import MAX_INT
from crossrail.errors import UsageError
from crossrail.spec.loader import MAX_FILE_BYTES

NAME_CHARS = 256
"""A name or reference: a run (id, uid, experiment), pool, team, token id, cursor, idempotency key."""

TEXT_CHARS = 4096
"""A short free text: a source's path, a `--set` override, a time or duration."""

DOCUMENT_CHARS = MAX_FILE_BYTES
"""A document's text, as large as a spec file may be."""

MAX_ITEMS = 256
"""Items of a list parameter or field (`--set` overrides, `state` filters, event types)."""

MAX_DEPTH = 100
"""Nesting of a JSON body: room for a spec document's own limit (crossrail.spec.compose.MAX_DEPTH) inside it."""

MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body: the largest document a route takes (DOCUMENT_CHARS, 1 MiB characters) with every
character JSON-escaped as `\\uXXXX` (6 bytes) is 6 MiB, so any document a route accepts fits, five times over."""

NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"
NO_NUL = r"^[^\x00]*$"

PATTERN_MESSAGES = {
    NO_CONTROL: "must not contain control characters (NUL, tab, newline, ...)",
    NO_NUL: "must not contain NUL characters",
}
"""What a value failing each pattern is told, instead of the pattern itself."""

Count = Annotated[int, Ge(0), Le(MAX_INT)]
Positive = Annotated[int, Gt(0), Le(MAX_INT)]
Name = Annotated[str, StringConstraints(max_length=NAME_CHARS, pattern=NO_CONTROL)]
Text = Annotated[str, StringConstraints(max_length=TEXT_CHARS, pattern=NO_NUL)]
Document = Annotated[str, StringConstraints(max_length=DOCUMENT_CHARS)]
"""A document's text: its NUL and other characters are the spec reader's to report, with their line."""

_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]++")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(body: bytes) -> int:
    """How deep a JSON parser would nest reading `body`: the most brackets open at once outside strings.

    Counted on the bytes, without parsing them; for a body that is not JSON it may count more than a parser
    would reach, never less, so a body under the limit cannot make the parser recurse past it."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", body))
    opened = brackets.count(b"[") + brackets.count(b"{")
    if opened <= 1:
        return opened
    deepest = max(accumulate(map(_STEP.__getitem__, brackets)))
    return max(deepest, 0)


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
    from crossrail.api import errors

    scope.setdefault("state", {})["refusal"] = str(exc)  # for the audit row (crossrail.api.auth)
    payload = json.dumps(errors.body(exc, status)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
