"""One error shape for every refusal: the crossrail error's kind, its message and the problems the CLI prints.

    {"apiVersion": "crossrail/v1", "kind": "Error", "status": 422, "error": "SpecError",
     "message": "crossrail: 1 problem in ...",
     "problems": [{"file", "line", "path", "message", "fix", "set", "code"}]}

`crossrail.client` turns this body back into the same exception, so a CLI talking to a server prints what the
local CLI prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from crossrail.api.bounds import PATTERN_MESSAGES
from crossrail.core.api import API_VERSION, MAX_INT
from crossrail.errors import (
    ConflictError,
    CrossrailError,
    ForbiddenError,
    InternalError,
    NotFoundError,
    PlacementError,
    Problem,
    ProblemCode,
    SpecError,
    StoreUnavailableError,
    UnauthenticatedError,
    UsageError,
    WorkspaceError,
)
from crossrail.spec.problems import code_of

# Most specific first: InfeasibleError is both a SpecError and a PlacementError.
STATUS: tuple[tuple[type[CrossrailError], int], ...] = (
    (SpecError, 422),
    (PlacementError, 422),
    (NotFoundError, 404),
    (ConflictError, 409),
    (StoreUnavailableError, 503),
    (UsageError, 400),
    (WorkspaceError, 409),
)


def status_of(exc: CrossrailError) -> int:
    if isinstance(exc, UnauthenticatedError):
        return 401
    if isinstance(exc, ForbiddenError):
        return 403
    return next((code for cls, code in STATUS if isinstance(exc, cls)), 400)


def body(exc: CrossrailError, status: int) -> dict[str, Any]:
    problems = [p.as_dict() for p in exc.problems] if isinstance(exc, SpecError) else []
    return {
        "apiVersion": API_VERSION,
        "kind": "Error",
        "status": status,
        "error": type(exc).__name__,
        "message": str(exc),
        "problems": problems,
    }


def request_problems(exc: RequestValidationError) -> SpecError:
    """FastAPI's validation errors as crossrail Problems of the request body (or query), one per finding."""
    problems = []
    for err in exc.errors():
        where, *rest = [str(p) for p in err.get("loc", ())] or ["body"]
        path = ".".join(rest)
        source = "request body" if where == "body" else f"request {where}"
        message = str(err.get("msg", "invalid"))
        if err.get("type") == "string_pattern_mismatch":  # the pattern itself tells a caller little
            message = PATTERN_MESSAGES.get(str(err.get("ctx", {}).get("pattern")), message)
        problems.append(Problem(source=source, path=path, message=message, code=code_of(str(err.get("type")))))
    return SpecError(problems)


HTTP_ERRORS = {401: UnauthenticatedError, 403: ForbiddenError, 404: NotFoundError, 409: ConflictError}
"""The crossrail error a plain HTTP refusal (an unknown path, a method the path lacks) is named as; others: usage."""


def http_error(exc: HTTPException) -> CrossrailError:
    return HTTP_ERRORS.get(exc.status_code, UsageError)(str(exc.detail))


_TEXT = {"type": "string"}
_MAYBE_TEXT = {"anyOf": [_TEXT, {"type": "null"}]}
ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["apiVersion", "kind", "status", "error", "message", "problems"],
    "properties": {
        "apiVersion": _TEXT,
        "kind": {"const": "Error"},
        "status": {"type": "integer"},
        "error": _TEXT,
        "message": _TEXT,
        "problems": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "file": _TEXT,
                    "line": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    "path": _TEXT,
                    "message": _TEXT,
                    "fix": _MAYBE_TEXT,
                    "set": _MAYBE_TEXT,
                    "code": {"enum": [str(code) for code in ProblemCode]},
                },
            },
        },
    },
}
"""`body()`'s shape, as the OpenAPI document states it for every refusal."""


def _document_errors(app: FastAPI) -> None:
    """The OpenAPI document names the one error shape for 422 and every other refusal, instead of FastAPI's own
    validation error (`{"detail": [...]}`), which this app never sends."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        components["Error"] = ERROR_SCHEMA
        refusal = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for item in schema.get("paths", {}).values():
            for op in item.values():
                responses = op.setdefault("responses", {})
                if "422" in responses:
                    responses["422"] = {"description": "The request or its document is not valid"} | refusal
                responses["default"] = {"description": "A refusal (docs/api.md#errors)"} | refusal
        _integer_bounds(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _integer_bounds(node: Any) -> None:
    """Integer bounds as integers: FastAPI's OpenAPI model turns a body field's into floats, and 2**63 - 1 as a
    float is 2**63, one past what the server takes."""
    if isinstance(node, list):
        for item in node:
            _integer_bounds(item)
    if not isinstance(node, dict):
        return
    if node.get("type") == "integer":
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            value = node.get(key)
            if isinstance(value, float):
                node[key] = max(-MAX_INT, min(MAX_INT, int(value)))
    for value in node.values():
        _integer_bounds(value)


def answer(scope: Any, refusal: dict[str, Any], headers: Mapping[str, str] | None = None) -> Response:
    """A refusal (`body()`) as JSON, or as a dashboard page for a browser on one (crossrail.api.pages)."""
    from crossrail.api import pages

    status = int(refusal["status"])
    if pages.wants_page(scope):
        page = pages.error_page(status, refusal["message"], str(scope["path"]), refusal["problems"])
        page.headers.update(headers or {})
        return page
    return JSONResponse(refusal, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Answer every crossrail error and malformed request in the one shape, and say so in the OpenAPI document."""
    _document_errors(app)

    @app.exception_handler(CrossrailError)
    async def crossrail_error(request: Request, exc: CrossrailError) -> Response:
        status = status_of(exc)
        request.scope.setdefault("state", {})["refusal"] = str(exc)  # for the audit row (crossrail.api.middleware)
        return answer(request.scope, body(exc, status))

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> Response:
        return answer(request.scope, body(request_problems(exc), 422))

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> Response:
        return answer(request.scope, body(http_error(exc), exc.status_code), exc.headers)

    @app.exception_handler(Exception)
    async def failed(_request: Request, _exc: Exception) -> JSONResponse:
        # Starlette logs the traceback after answering; the caller gets the one shape and no internals.
        exc = InternalError("crossrail: the server failed on this request; its log says why")
        return JSONResponse(body(exc, 500), status_code=500)
