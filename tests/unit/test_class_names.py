"""One meaning per name: no class name is defined in two modules of crossrail (nested classes count too).

A name defined twice makes a reader, a grep and an import ask which one is meant; rename one of them (a renamed
class that users import keeps its old name as a deprecated alias, crossrail.core.renamed).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import crossrail

SOURCE = Path(crossrail.__file__).parent

ALLOWED: dict[str, str] = {}
"""Names still defined twice, each with why."""


def definitions() -> dict[str, list[str]]:
    """Each class name of crossrail's source and the modules (with line) that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(SOURCE.parent)}:{node.lineno}")
    return found


def test_no_class_name_is_defined_in_two_places() -> None:
    twice = {name: where for name, where in definitions().items() if len(where) > 1 and name not in ALLOWED}

    assert twice == {}, "rename one of each (tests/unit/test_class_names.py says how)"


def test_every_allowed_name_is_still_defined_twice() -> None:
    found = definitions()

    assert [name for name in ALLOWED if len(found.get(name, ())) < 2] == [], "no longer twice: drop it from ALLOWED"
