"""The API's interactive docs at `/v1/docs`: Swagger UI 5 from the `swagger-ui-bundle-v2` package, so the
page loads nothing from a CDN and works offline."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
"""The files of Swagger UI the page loads, each served from this server under /v1/docs/static/."""

router = APIRouter(include_in_schema=False)


def _vendored() -> Path:
    import swagger_ui_bundle  # the api extra's; its files are Swagger UI's own release

    return Path(swagger_ui_bundle.swagger_ui_path)


@router.get("/v1/docs")
def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/v1/openapi.json",
        title="crossrail API",
        swagger_js_url="/v1/docs/static/swagger-ui-bundle.js",
        swagger_css_url="/v1/docs/static/swagger-ui.css",
        swagger_favicon_url="/v1/docs/static/favicon-32x32.png",
        oauth2_redirect_url=None,
    )


@router.get("/v1/docs/static/{name}")
def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise HTTPException(404, f"no docs file {name!r}")
    return FileResponse(_vendored() / name, media_type=ASSETS[name])
