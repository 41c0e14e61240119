"""`Client(server=URL)`: the client's methods answered by a `crossrail serve` over HTTP, with the same values.

Errors come back as the API's one error shape and are raised again as the same crossrail exception (a
SpecError with the same problems), so the CLI prints the same lines either way. Needs the `api` extra (httpx).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crossrail import errors
from crossrail.client import Client
from crossrail.core.access import Actor
from crossrail.core.api import QUEUE_PAGE
from crossrail.errors import CrossrailError, Problem, SpecError, StoreUnavailableError, UsageError

TIMEOUT_S = 60.0
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise UsageError("talking to a crossrail server needs httpx: pip install 'crossrail[api]'") from None
    return httpx


def error_from(body: Any, status: int, url: str) -> CrossrailError:
    """The crossrail exception an API error body stands for."""
    if not isinstance(body, dict) or body.get("kind") != "Error":
        return CrossrailError(f"{url} answered {status} without a crossrail error body; is it a crossrail server?")
    cls = getattr(errors, str(body.get("error")), None)
    if not (isinstance(cls, type) and issubclass(cls, CrossrailError)):
        cls = CrossrailError
    if issubclass(cls, SpecError):
        return cls([Problem(**_problem_fields(p)) for p in body.get("problems") or []])
    return cls(str(body.get("message", "")))


def _problem_fields(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": p.get("file") or "",
        "path": p.get("path") or "",
        "message": p.get("message") or "",
        "line": p.get("line"),
        "fix": p.get("fix"),
        "argument": p.get("set"),
    }


class RemoteClient(Client):
    """The Client of a crossrail server at `server` (CROSSRAIL_SERVER when not given)."""

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        server: str | None = None,
        policy: str | os.PathLike[str] | None = None,
        token: str | None = None,
        **_: Any,
    ) -> None:
        """`token` (else CROSSRAIL_TOKEN) goes with every request as `Authorization: Bearer ...`."""
        if policy is not None:
            raise UsageError(f"--policy {policy} lints against a workspace; a server lints with its own policy")
        url = server or os.environ.get("CROSSRAIL_SERVER") or ""
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"server {url!r} is not an http:// or https:// URL; pass e.g. http://127.0.0.1:8470")
        self.server = url.rstrip("/")
        self.cwd = Path.cwd().resolve()
        secret = token or os.environ.get("CROSSRAIL_TOKEN") or None
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self._http = _httpx().Client(base_url=self.server, timeout=TIMEOUT_S, headers=headers)

    # --- transport -------------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        httpx = _httpx()
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, "/v1" + path, json=json, params=query)
        except httpx.TransportError as exc:
            raise StoreUnavailableError(f"cannot reach the crossrail server at {self.server}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise error_from(body, response.status_code, self.server + "/v1" + path)
        return body

    def close(self) -> None:
        self._http.close()

    def _local_only(self, what: str) -> UsageError:
        return UsageError(f"{what} works on a workspace, not through a server; run it without --server")

    @property
    def service(self) -> Any:
        raise self._local_only("the service")

    @property
    def executor(self) -> Any:
        raise self._local_only("the executor")

    def agent(self, config: Any = None) -> Any:
        raise self._local_only("an agent")

    def has_workspace(self) -> bool:
        return False

    # --- the client's methods ----------------------------------------------------------------------

    def submit(
        self,
        path: str | os.PathLike[str],
        *,
        sets: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        return self.submit_text(_read(path), source=str(path), sets=sets, idempotency_key=idempotency_key)

    def submit_many(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        sets: Sequence[str] = (),
        idempotency_keys: Sequence[str | None] | None = None,
    ) -> dict[str, Any]:
        """Each file submitted in turn (over HTTP each is its own transaction)."""
        texts = [(str(p), _read(p)) for p in paths]
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(texts)
        results = [
            self.submit_text(text, source=source, sets=sets, idempotency_key=key)
            for (source, text), key in zip(texts, keys, strict=True)
        ]
        return {
            "apiVersion": results[0]["apiVersion"] if results else "crossrail/v1",
            "kind": "SubmitResults",
            "results": results,
        }

    def submit_text(
        self,
        text: str,
        *,
        source: str,
        sets: Sequence[str] = (),
        idempotency_key: str | None = None,
        actor: Actor | None = None,
    ) -> dict[str, Any]:
        """The server takes the team from the token; `actor` is the server's own business and ignored here."""
        body = {"document": text, "source": source, "sets": list(sets), "idempotencyKey": idempotency_key}
        return self._call("POST", "/runs", json=body)  # type: ignore[no-any-return]

    def resubmit(
        self,
        ref: str,
        *,
        resume: bool = False,
        from_weights: bool = False,
        idempotency_key: str | None = None,
        actor: Actor | None = None,
    ) -> dict[str, Any]:
        """The server takes the team from the token; `actor` is the server's own business and ignored here."""
        body = {"resume": resume, "fromWeights": from_weights, "idempotencyKey": idempotency_key}
        return self._call("POST", f"/runs/{ref}/resubmit", json=body)  # type: ignore[no-any-return]

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/status")  # type: ignore[no-any-return]

    def show(self, ref: str) -> dict[str, Any]:
        return self._call("GET", f"/runs/{ref}")  # type: ignore[no-any-return]

    def runs(
        self,
        *,
        states: Sequence[str] | None = None,
        stage: str | None = None,
        team: str | None = None,
        experiment: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"state": list(states) if states else None, "stage": stage, "team": team}
        params |= {"experiment": experiment, "limit": limit, "cursor": cursor}
        return self._call("GET", "/runs", params=params)  # type: ignore[no-any-return]

    def queue(self, *, limit: int = QUEUE_PAGE, offset: int = 0) -> dict[str, Any]:
        return self._call("GET", "/queue", params={"limit": limit, "offset": offset})  # type: ignore[no-any-return]

    def place(self, path: str | os.PathLike[str], *, sets: Sequence[str] = ()) -> dict[str, Any]:
        return self.place_text(_read(path), source=str(path), sets=sets)

    def place_text(
        self, text: str, *, source: str, sets: Sequence[str] = (), actor: Actor | None = None
    ) -> dict[str, Any]:
        """The server names parents as the token sees runs; `actor` is ignored here, as in submit_text."""
        return self._call("POST", "/place", json={"document": text, "source": source, "sets": list(sets)})  # type: ignore[no-any-return]

    def events(
        self,
        ref: str | None = None,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        params = {"run": ref, "after": after_seq, "limit": limit, "type": list(types) if types else None}
        return self._call("GET", "/events", params=params)  # type: ignore[no-any-return]

    def cancel(self, ref: str, *, actor: Actor | None = None) -> dict[str, Any]:
        return self._call("POST", f"/runs/{ref}/cancel")  # type: ignore[no-any-return]

    def suspend(self, ref: str, *, actor: Actor | None = None) -> dict[str, Any]:
        return self._call("POST", f"/runs/{ref}/suspend")  # type: ignore[no-any-return]

    def resume(self, ref: str, *, actor: Actor | None = None) -> dict[str, Any]:
        return self._call("POST", f"/runs/{ref}/resume")  # type: ignore[no-any-return]

    def logs(self, ref: str, attempt: int | None = None) -> dict[str, Any]:
        return self._call("GET", f"/runs/{ref}/logs", params={"attempt": attempt})  # type: ignore[no-any-return]

    def wait(self, ref: str, *, timeout_s: float | None = None, on_tick: Any = None) -> dict[str, Any]:
        """Poll the server until the run ends (the server's agents run it)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            shown = self.show(ref)
            if shown["run"]["state"] in TERMINAL:
                return shown
            if deadline is not None and time.monotonic() > deadline:
                raise errors.WorkspaceError(f"run {ref} did not end within {timeout_s:g}s; it keeps running")
            time.sleep(0.5)

    def agents(self, *, stale_s: float = 120.0) -> dict[str, Any]:
        return self._call("GET", "/agents")  # type: ignore[no-any-return]

    def ckpt_ls(self, ref: str, *, verify: bool = True) -> dict[str, Any]:
        return self._call("GET", f"/runs/{ref}/checkpoints", params={"verify": verify})  # type: ignore[no-any-return]

    def ckpt_show(self, ref: str, *, step: int | None = None) -> dict[str, Any]:
        which = "latest" if step is None else str(step)
        return self._call("GET", f"/runs/{ref}/checkpoints/{which}")  # type: ignore[no-any-return]

    def ckpt_verify(self, ref: str, *, every: bool = False) -> dict[str, Any]:
        return self._call("POST", f"/runs/{ref}/checkpoints/verify", params={"all": every})  # type: ignore[no-any-return]

    def fleet_show(self) -> dict[str, Any]:
        return self._call("GET", "/fleet")  # type: ignore[no-any-return]

    def fleet_apply(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        return self._call("PUT", "/fleet", json={"document": _read(path), "source": str(path)})  # type: ignore[no-any-return]

    def drain(self, pool: str, *, drained: bool = True) -> dict[str, Any]:
        return self._call("POST", f"/fleet/pools/{pool}/{'drain' if drained else 'undrain'}")  # type: ignore[no-any-return]

    def reserve(
        self, pool: str, *, chips: int, start: str, duration: str, team: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        body = {"pool": pool, "chips": chips, "start": start, "duration": duration, "team": team, "name": name}
        return self._call("POST", "/fleet/reservations", json=body)  # type: ignore[no-any-return]

    def reservations(self) -> dict[str, Any]:
        return self._call("GET", "/fleet/reservations")  # type: ignore[no-any-return]

    def report(self) -> dict[str, Any]:
        return self._call("GET", "/report")  # type: ignore[no-any-return]

    def whoami(self, actor: Actor | None = None) -> dict[str, Any]:
        return self._call("GET", "/whoami")  # type: ignore[no-any-return]

    def audit(self, *, since: str | None = None, team: str | None = None, limit: int | None = None) -> dict[str, Any]:
        return self._call("GET", "/audit", params={"since": since, "team": team, "limit": limit})  # type: ignore[no-any-return]

    def usage(self, *, since: str | None = None, team: str | None = None) -> dict[str, Any]:
        return self._call("GET", "/usage", params={"since": since, "team": team})  # type: ignore[no-any-return]

    def tokens(self) -> dict[str, Any]:
        return self._call("GET", "/tokens")  # type: ignore[no-any-return]

    def token_create(
        self, *, team: str, role: str, user: str | None = None, expires: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        body = {"team": team, "role": role, "user": user, "expires": expires}
        return self._call("POST", "/tokens", json=body)  # type: ignore[no-any-return]

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        return self._call("POST", f"/tokens/{token_id}/revoke")  # type: ignore[no-any-return]

    def token_rotate(self, token_id: str, *, by: str | None = None) -> dict[str, Any]:
        return self._call("POST", f"/tokens/{token_id}/rotate")  # type: ignore[no-any-return]


def _read(path: str | os.PathLike[str]) -> str:
    """The file's text, or the SpecError reading it locally gives (the same lines the local CLI prints)."""
    from crossrail.spec import parse_document
    from crossrail.spec.loader import read_text

    text = read_text(path)  # read once, bounded: what is checked is what is sent
    parse_document(text, str(path))
    return text
