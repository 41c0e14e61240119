"""The bounds every `/v1` parameter and body field shares, declared once so the OpenAPI document carries them.

Integers fit in 63 bits (the store's BIGINT: a larger one would overflow SQLite or PostgreSQL), digits are ASCII
(pydantic's integer parsing refuses `²` or `١`, which `str.isdigit` accepts), strings have a length limit and
no NUL or control characters where they name something. A request breaking one is a 422 in the one error shape
(crossrail.api.errors). `MAX_BODY_BYTES` and `MAX_DEPTH` bound a request body's size and JSON nesting before
anything parses it (crossrail.api.limits): Python's JSON parser recurses once per level, so a deep enough body
would end in a RecursionError.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Annotated

from annotated_types import Ge, Gt, Le
from pydantic import StringConstraints

from crossrail.core.api import MAX_INT
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
