"""crossrail: a control plane for training fleets that mix TPUs and GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crossrail.core.api import API_VERSION
from crossrail.errors import CrossrailError, Problem, SpecError

if TYPE_CHECKING:
    from crossrail.client import Client

__version__ = "0.1.0"

__all__ = ["API_VERSION", "Client", "CrossrailError", "Problem", "SpecError", "__version__"]


def __getattr__(name: str) -> Any:
    # The client is loaded on first use, so processes that import only the runtime stay light.
    if name == "Client":
        from crossrail.client import Client

        return Client
    raise AttributeError(f"module 'crossrail' has no attribute {name!r}")
