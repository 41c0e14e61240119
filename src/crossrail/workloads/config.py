"""The trainer config the workloads read: JSON, or YAML when PyYAML is installed, and how a value is picked."""

from __future__ import annotations

import json
from typing import Any

from crossrail.errors import CrossrailError
from crossrail.runtime import read_text


def read_config(uri: str) -> dict[str, Any]:
    """The trainer config: JSON, or YAML when PyYAML is installed (the workspace writes YAML)."""
    text = read_text(uri)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            import yaml
        except ImportError as exc:
            raise CrossrailError(f"{uri} is not JSON; install PyYAML to read YAML configs, or write JSON") from exc
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CrossrailError(f"{uri} is neither JSON nor YAML: {exc}") from exc
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CrossrailError(f"{uri} must hold a mapping such as `optim: {{lr: 0.003, batch: 16}}`")
    return value


def section(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def pick(key: str, arg: Any, configured: Any, default: Any, kind: type, *, problems: list[str]) -> Any:
    """The argument, else the config's value, else the default, as `kind`; a value that is not one is a problem."""
    value = arg if arg is not None else configured if configured is not None else default
    try:
        number = kind(value)  # YAML reads 3e-3 (no dot) as a string; float() takes it
    except (TypeError, ValueError):
        problems.append(f"{key}: {value!r} is not a {kind.__name__}")
        return None
    if kind is int and isinstance(value, float) and value != number:
        problems.append(f"{key}: {value!r} is not a whole number")
    return number
