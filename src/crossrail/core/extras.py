"""Optional extras, imported when first needed: the module, or an error saying which `pip install` adds it."""

from __future__ import annotations

import importlib
from types import ModuleType

from crossrail.errors import MissingExtraError


def require(module: str, *, extra: str, needed_for: str) -> ModuleType:
    """Import `module` (from the `extra` extra); MissingExtraError naming the extra when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or module
        raise MissingExtraError(
            f"{needed_for} needs {missing}, from crossrail's {extra} extra: pip install 'crossrail[{extra}]'",
            name=missing,
        ) from exc
