"""Old names of renamed classes, kept importable for one release: a module's `__getattr__` that warns.

    __getattr__ = renamed(__name__, {"OldName": "NewName"}, globals())

`from module import OldName` and `module.OldName` then give the class now called NewName, with a
DeprecationWarning naming it; the old name is not in the module's namespace, so nothing in crossrail uses it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def renamed(module: str, names: Mapping[str, str], namespace: Mapping[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` answering each old name of `names` with the object its new name holds."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is renamed {new}; import {new} (the old name goes in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return namespace[new]

    return __getattr__
