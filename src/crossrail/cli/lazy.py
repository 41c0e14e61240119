"""Commands whose module loads only when they run (or when help lists them): `crossrail status` loads none of them.
Options are coerced only when given (`defer_coercion`): a command that is given none imports no pydantic."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer import core as typer_core
from typer import main as typer_main
from typer.core import TyperGroup
from typer.models import CommandInfo, Default, TyperInfo


@dataclass(frozen=True)
class Lazy:
    """A command (a function) or a group (a typer app) at `target`, "module:attribute"; `at`: how many of the
    app's own commands (or groups) come before it in help, so the order is the order of registration."""

    name: str
    target: str
    group: bool
    at: int
    help: str | None = None

    def load(self, app: typer.Typer) -> Any:
        """The click command (or group) this names, built as `app` builds its own."""
        module, attribute = self.target.split(":")
        found = getattr(importlib.import_module(module), attribute)
        if self.group:
            return typer_main.get_group_from_info(
                TyperInfo(found, name=self.name, help=self.help if self.help else Default(None)),
                pretty_exceptions_short=app.pretty_exceptions_short,
                suggest_commands=app.suggest_commands,
                rich_markup_mode=app.rich_markup_mode,
            )
        return typer_main.get_command_from_info(
            CommandInfo(name=self.name, callback=found),
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )


class Registry:
    """The lazy commands of one typer app: its click group finds them by name and lists them in help."""

    def __init__(self, app: typer.Typer) -> None:
        self.app = app
        self.entries: dict[str, Lazy] = {}
        registry = self

        class LazyGroup(TyperGroup):
            def get_command(self, ctx: Any, cmd_name: str) -> Any:
                if cmd_name not in self.commands and cmd_name in registry.entries:
                    self.commands[cmd_name] = registry.entries[cmd_name].load(registry.app)
                return self.commands.get(cmd_name)

            def list_commands(self, ctx: Any) -> list[str]:
                return registry.ordered({n: c for n, c in self.commands.items() if n not in registry.entries})

        app.info.cls = LazyGroup

    def command(self, name: str, target: str) -> None:
        """Register the function at `target` ("module:function") as command `name`."""
        self.entries[name] = Lazy(name, target, group=False, at=len(self.app.registered_commands))

    def group(self, name: str, target: str, *, help: str | None = None) -> None:
        """Register the typer app at `target` ("module:app") as group `name`."""
        self.entries[name] = Lazy(name, target, group=True, at=len(self.app.registered_groups), help=help)

    def ordered(self, own: dict[str, Any]) -> list[str]:
        """The app's own commands, then its groups (as typer lists them), each with the lazy ones in their place."""
        out: list[str] = []
        for group in (False, True):
            names = [n for n, c in own.items() if hasattr(c, "commands") is group]
            lazy = [(e.at, i, e.name) for i, e in enumerate(self.entries.values()) if e.group is group]
            for at, _, name in sorted(lazy, reverse=True):  # from the last, so each index counts only the app's own
                names.insert(min(at, len(names)), name)
            out += names
        return out


_PLAIN = (int, float, str)


class _DeferredCoercion:
    """typer's coercion of one parameter (a pydantic TypeAdapter), built on the first value that needs it.

    A parameter not given needs none: None stays None (an empty tuple for one taking many values), as typer's
    own coercion gives, and its declared default stays itself when it is a plain int, float or str of exactly
    the parameter's type (no parser): what coercion would return for it."""

    def __init__(self) -> None:
        self.built: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        descriptor = param.type_descriptor
        if (
            type(value) in _PLAIN
            and type(value) is descriptor.annotation
            and descriptor.parameter_info.parser is None
            and value is param.default
        ):
            return value
        if self.built is None:
            self.built = _build_runtime_param(descriptor)
        return self.built.coerce(value, param=param, ctx=ctx)


def _build_runtime_param(descriptor: Any) -> Any:
    from typer._coercion import build_runtime_param

    return build_runtime_param(descriptor)


def defer_coercion() -> None:
    """Coerce a command's parameters only when they carry a value: typer (0.2x) builds a pydantic TypeAdapter for
    each parameter when a command parses, given or not, so every command imported pydantic (a sixth of `crossrail
    status`'s time). A typer without that machinery (`_TyperParameter.get_runtime_param`) is left as it is."""
    param_class = getattr(typer_core, "_TyperParameter", None)
    if param_class is None or not hasattr(param_class, "get_runtime_param"):
        return

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            self._runtime_param = _DeferredCoercion()
        return self._runtime_param

    param_class.get_runtime_param = get_runtime_param
