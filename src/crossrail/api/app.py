"""The FastAPI app: `create_app(home)` serves one workspace's operations under `/v1` (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI

API_VERSION = "crossrail/v1"


def create_app(home: Path | None = None, **options: Any) -> FastAPI:
    """The app for the workspace at `home` (default: the nearest `.crossrail/` above the current directory)."""
    app = FastAPI(title="crossrail", version="1", openapi_url="/v1/openapi.json", docs_url="/v1/docs")
    app.state.home = home
    app.state.options = options

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": "Health", "ok": True}

    return app
