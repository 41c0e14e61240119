"""The HTTP face of crossrail: a FastAPI app serving the client's operations as JSON under `/v1` (docs/api.md)."""

from crossrail.api.app import create_app

__all__ = ["create_app"]
