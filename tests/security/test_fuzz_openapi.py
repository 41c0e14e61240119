"""Every operation of the OpenAPI document, fuzzed through the app in process: no answer is a 500, and every
refusal is the documented error shape (docs/api.md#errors).

Values come from each parameter's and body's schema, mixed with hostile ones (non-ASCII digits, NUL, long
strings, integers past 64 bits, deep or broken JSON) and with real names of the workspace (its run, pools, an
attempt's secret), so requests reach the handlers and not only the validation. The server runs without auth
and with it (an admin's token). Following streams end after one poll: the app says it is stopping.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.security.test_no_500s import CLOCK, admitted, call, is_error_shape

from crossrail.api import create_app, routes
from crossrail.client import Client
from crossrail.control.agent.secrets import attempt_secret

EXAMPLES = 25
HOSTILE_TEXT = [
    "",
    "²",
    "١٢٣",
    "１",
    "\x00",
    "a\x00b",
    "line\nbreak",
    "x" * 300,
    "y" * 5000,
    "9" * 30,
    "-1",
    "latest",
    "../../.crossrail/state.db",
    "sim:/dev/zero",
    "file:///dev/zero",
    "%00",
    "\u202e",
    "\U0001f600",
    "' OR 1=1 --",
]
HOSTILE_INT = [-1, 0, 1, 2**31, 2**63 - 1, 2**63, 10**30, -(10**30)]
HOSTILE_BODIES = [
    b"",
    b"{",
    b"\xff\xfe",
    b"null",
    b"[]",
    b"1e999999",
    b"[" * 200 + b"]" * 200,
    b'{"a": ' + b"{" * 50_000,
    b'{"document": "x", "sets": ' + b"[" * 150 + b"]" * 150 + b"}",
]
SET_KEYS = ["metadata.name", "spec.resources.chips", "spec.priority", "spec.parent.run", "spec.config", "spec.stage"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fresh workspace with one queued run, one attempt reporting over HTTP, and an admin's token."""
    root = tmp_path_factory.mktemp("fuzz")
    Client.init(root)
    home = root / ".crossrail"
    queued = admitted(home, "fuzz-local", str(home / "reports" / "{run}" / "1.jsonl"), CLOCK)
    ingesting = admitted(home, "fuzz-http", "http://testserver/v1/ingest/{run}/1", CLOCK)
    with Client(home, clock=CLOCK) as c:
        admin = c.token_create(team="foundation", role="admin", user="fuzz")["token"]
        pools = [p.name for p in c.service.fleet.pools]
    return {
        "home": home,
        "runs": [queued, ingesting],
        "ingesting": ingesting,
        "secret": attempt_secret(home, ingesting, 1),
        "admin": admin,
        "pools": pools,
        "experiment": (home / "experiments" / "pretrain-small.yaml").read_text(),
        "fleet": (home / "fleet.yaml").read_text(),
    }


@pytest.fixture(scope="module")
def servers(workspace: dict[str, Any]) -> Iterator[list[tuple[FastAPI, dict[str, str]]]]:
    """The app over the workspace without auth and with it, each with the headers its requests carry (an admin's
    token where auth is required)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(routes, "FOLLOW_POLL_S", 0.0)  # a following stream's one poll costs nothing
        apps = [create_app(workspace["home"], clock=CLOCK, require_auth=required) for required in (False, True)]
        for app in apps:
            app.state.stop_requested = lambda: True  # a following stream ends after its first page
        yield [(apps[0], {}), (apps[1], {"Authorization": f"Bearer {workspace['admin']}"})]
        for app in apps:
            app.state.client.close()


def _schema() -> dict[str, Any]:
    """The app's OpenAPI document; built on a throwaway workspace, since the document does not depend on one."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="crossrail-openapi-") as tmp:
        Client.init(tmp)
        app = create_app(Path(tmp) / ".crossrail")
        try:
            return app.openapi()
        finally:
            app.state.client.close()


SCHEMA = _schema()
OPERATIONS = [(method.upper(), path) for path, item in SCHEMA["paths"].items() for method in item]


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else schema


def _texts(known: list[str], max_size: int = 20) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=max_size), *([st.sampled_from(known)] * 2))


JSON_ANY = st.recursive(
    st.none() | st.booleans() | st.sampled_from(HOSTILE_INT) | st.floats() | st.sampled_from(HOSTILE_TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def values(schema: dict[str, Any], name: str, ws: dict[str, Any], *, real: bool = False) -> st.SearchStrategy[Any]:
    """Values for a schema: what it allows and what it does not; `real`: the workspace's own names and documents
    where `name` has them (each with a few hostile values still), so the request gets past its first refusal."""
    schema = _resolve(schema)
    hint = _hint(name, ws)
    if real and hint is not None:
        return hint
    if "anyOf" in schema:
        return st.one_of(*(values(s, name, ws, real=real) for s in schema["anyOf"]))
    kind = schema.get("type")
    if kind == "array":
        return st.lists(values(schema.get("items", {}), name, ws, real=real), max_size=3)
    if kind == "object" and "properties" in schema:
        required = set(schema.get("required", ()))
        fields = {k: values(v, k, ws, real=real) for k, v in schema["properties"].items()}
        extra = {} if real else {"unknown": JSON_ANY}
        return st.fixed_dictionaries(
            {k: v for k, v in fields.items() if k in required},
            optional={k: v for k, v in fields.items() if k not in required} | extra,
        )
    low, high = schema.get("minimum"), schema.get("maximum")
    fitting = st.integers(int(low) if low is not None else None, int(high) if high is not None else None)
    hinted = [hint] if hint is not None else []
    simple: dict[str, st.SearchStrategy[Any]] = {
        "string": st.text(max_size=10) if real else st.one_of(_texts(ws["runs"]), *hinted),
        "integer": fitting if real else st.one_of(fitting, st.sampled_from(HOSTILE_INT), *hinted),
        "boolean": st.booleans(),
        "null": st.none(),
    }
    return simple.get(str(kind), JSON_ANY)


def _hint(name: str, ws: dict[str, Any]) -> st.SearchStrategy[Any] | None:
    """Realistic values for the fields that carry them, a few hostile ones among them."""
    run = ws["ingesting"]
    record = st.fixed_dictionaries(
        {"v": st.just(1), "ts": st.just(CLOCK.now()), "run": st.just(run), "attempt": st.just(1)},
        optional={
            "type": st.sampled_from(["metric", "heartbeat", "checkpoint", "event", "bogus"]),
            "seq": st.integers(1, 5) | st.sampled_from(HOSTILE_INT),
            "step": st.integers(0, 10) | st.sampled_from(HOSTILE_INT),
            "name": _texts(["loss"]),
            "value": st.floats() | st.sampled_from(HOSTILE_INT) | st.sampled_from(["nan", "inf"]),
            "uri": _texts([f"file:///ckpt/{run}/step-1"]),
            "tokens": st.sampled_from(HOSTILE_INT),
            "data": JSON_ANY,
        },
    )
    hints: dict[str, st.SearchStrategy[Any]] = {
        "document": _documents(ws["fleet"] if ws["path"] == "/v1/fleet" else ws["experiment"]),
        "sets": st.lists(st.builds("{}={}".format, st.sampled_from(SET_KEYS), _texts(["4", "high"])), max_size=3),
        "ref": st.sampled_from(ws["runs"]),
        "run": st.just(run) if ws["path"].startswith("/v1/ingest/") else st.sampled_from(ws["runs"]),
        "pool": st.sampled_from(ws["pools"]),
        "step": st.sampled_from(["latest", "1", str(2**63), "²"]),
        "attempt": st.just(1),
        "incarnation": st.just(int(CLOCK.now() * 1000)),
        "authorization": st.just(f"Bearer {ws['secret']}"),
        "records": st.lists(record, max_size=3),
        "team": st.sampled_from(["foundation", "alignment"]),
        "role": st.sampled_from(["admin", "submitter", "viewer"]),
        "chips": st.integers(1, 8) | st.sampled_from(HOSTILE_INT),
        "start": st.sampled_from(["now", "2026-01-01T00:00:00Z", "+1h", f"+{'9' * 30}h"]),
        "duration": st.sampled_from(["1h", "30d", f"{'9' * 30}d", "1e308s"]),
        "expires": st.sampled_from(["30d", f"{'9' * 30}d", "-1d"]),
        "since": st.sampled_from(["1d", f"{'9' * 30}d", "2026-01-01"]),
    }
    return hints.get(name)


def _documents(text: str) -> st.SearchStrategy[Any]:
    """The workspace's document as its text, or as an object with one value anywhere in it made hostile."""
    import copy

    import yaml

    document = yaml.safe_load(text)

    def places(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            yield (*at, key)
            yield from places(child, (*at, key))

    def spoiled(where: tuple[Any, ...], value: Any) -> Any:
        changed = copy.deepcopy(document)
        parent = changed
        for key in where[:-1]:
            parent = parent[key]
        parent[where[-1]] = value
        return changed

    hostile = st.sampled_from(HOSTILE_INT) | st.sampled_from(HOSTILE_TEXT) | JSON_ANY
    return st.just(text) | st.builds(spoiled, st.sampled_from(list(places(document))), hostile)


def _header(value: Any) -> str:
    """A header's value as HTTP can carry it: latin-1 without control characters."""
    return "".join(ch for ch in str(value) if ch.isprintable() and ord(ch) < 256)


HOSTILE_AUTH = ["Bearer ²", "Bearer \xff" * 3, "Bearer " + "x" * 5000, "Bearer", "Basic eDp5", "bearer  "]


@st.composite
def requests(draw: st.DrawFn, method: str, path: str, ws: dict[str, Any]) -> dict[str, Any]:
    """One request of the operation: its URL with path and query parameters, headers and body."""
    op = SCHEMA["paths"][path][method.lower()]
    ws = ws | {"path": path}
    real = draw(st.integers(0, 2)) > 0  # two requests in three are made of the workspace's own names
    url, query, headers = path, [], {}
    for param in op.get("parameters", []):
        where, name = param["in"], param["name"]
        if where == "path":
            value = draw(values(param["schema"], name, ws, real=real))
            url = url.replace("{" + name + "}", quote(str(value), safe="") or "%20")
        elif draw(st.booleans()):  # an optional parameter, or a required one left out on purpose
            value = draw(values(param["schema"], name, ws, real=real))
            if where == "query":
                as_text = [
                    json.dumps(v) if isinstance(v, bool) else str(v)
                    for v in (value if isinstance(value, list) else [value])
                ]
                query += [(name, v) for v in as_text if v != "None"]
            elif where == "header" and value is not None:
                headers[name] = _header(value)
    if not real and draw(st.integers(0, 4)) == 0:  # a token that is not one, in place of any other
        headers["authorization"] = draw(st.sampled_from(HOSTILE_AUTH))
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    content = None
    if body is not None:
        raw = draw(st.sampled_from(HOSTILE_BODIES)) if not real and draw(st.booleans()) else None
        content = raw if raw is not None else json.dumps(draw(values(body, "", ws, real=real))).encode()
    return {"url": url, "params": query, "headers": headers, "content": content}


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_operation_answers_500(
    method: str, path: str, servers: list[tuple[FastAPI, dict[str, str]]], workspace: dict[str, Any]
) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(request=requests(method, path, workspace), server=st.sampled_from(servers))
    def fuzz(request: dict[str, Any], server: tuple[FastAPI, dict[str, str]]) -> None:
        app, auth = server  # the examples go to both servers: auth on and off
        headers = {"content-type": "application/json"} | auth | request["headers"]
        if "authorization" in request["headers"]:
            headers.pop("Authorization", None)  # the request's own token, not the admin's
        headers = {k: v.encode("latin-1") for k, v in headers.items()}  # httpx would send str as ASCII only
        answer = call(
            app, method, request["url"], params=request["params"], headers=headers, content=request["content"]
        )
        where = f"{method} {request['url']} {request['params']} {str(request['content'])[:300]}"
        assert answer.status_code < 500, f"{where}: {answer.status_code} {answer.text[:500]}"
        if answer.status_code >= 400:
            assert is_error_shape(answer, answer.status_code), f"{where}: {answer.text[:500]}"

    fuzz()
